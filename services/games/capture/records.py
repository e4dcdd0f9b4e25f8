"""What names a Capture Game record: its file suffix and the RU[] value of its SGF.

Its own module, imported by both the game (`game`, which writes the records) and the replay
(`replay`, which reads them), so that neither imports the other.
"""

from __future__ import annotations

# the game's record files: SGF whose suffix names the game (Go reads plain `.sgf`); longer
# than `.sgf`, so the ingest's longest-suffix rule gives them to this game
RECORD_SUFFIX = ".capture.sgf"
RULES_NAME = "Capture"  # RU[] of its SGF records: the rules, which Go's SGF values do not name

__all__ = ["RECORD_SUFFIX", "RULES_NAME"]
