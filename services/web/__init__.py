"""The web board: play, see the policy and watch an analysis in a browser (`make web`)."""
