"""Board games: rules, coordinates, encodings and symmetries."""
