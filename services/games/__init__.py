"""Board games: the `Game` interface and registry, rules, coordinates, encodings and symmetries.

Conventions shared by every module: a point is a flat index y * size + x, x the column from the
left (0 = 'a'), y the row from the bottom (0 = '1'); boards are int8 arrays board[y, x]
holding EMPTY=0, BLACK=1, WHITE=2 (`services.coords` has every notation).

Modules:
    base         the `Game` interface: what the platform asks of a board game
    registry     the registered games, by name and by API value
    gomoku_game  Gomoku/Renju as a `Game`
    go_game      Go as a `Game`, and `GoSearchState`, the Go position the services play on
    capture_game the Capture Game (Atari-Go, PyBrain's rules) as a `Game`, 5x5 to 9x9
    capture_batch  the Capture Game on many boards at once: rules, greedy opponent, play_games
    gomoku       Gomoku rules on a square board (15x15 by default)
    gomoku_selfplay  rule-based Gomoku self-play games (the shipped sample)
    renju        Renju forbidden points for black (overline, double-four, double-three)
    go           Go rules: captures, suicide, simple ko, passes, set-up stones, area scoring
    go_fast      incremental compiled Go replay that writes a game's compact planes in one pass
    go_scan      compiled scans of a Go position: group liberties, legal mask, compact input
    go_features  compact Go inputs int8 [4, S, S] (no torch, for the search service)
    go_planes    the 17 feature planes the Go networks see, made from the compact inputs (torch)
    encoding     board encodings for the policy networks
    symmetry     the 8 symmetries of a square board (D4)
    ascii_board  ASCII boards for test fixtures and debugging
"""
