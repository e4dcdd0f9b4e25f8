"""Board games: the `Game` interface and registry, rules, coordinates, encodings and symmetries.

Conventions shared by every module: a point is a flat index y * size + x, x the column from the
left (0 = 'a'), y the row from the bottom (0 = '1'); boards are int8 arrays board[y, x]
holding EMPTY=0, BLACK=1, WHITE=2 (`services.coords` has every notation).

A game is one package (`gomoku/`, `go/`, `capture/`) that owns its rules, records replay,
encoders, model I/O and default model configurations; the modules here serve every game.

Modules:
    base          the `Game` interface: what the platform asks of a board game
    registry      the registered games, by name and by API value
    canonical     canonical symmetry images of positions (any game of cells)
    pair_tables   (position, next move) pairs as Arrow tables (any game of cells)
    triton_config a game's Triton `config.pbtxt`, generated from its model I/O
    encoding      board encodings for the policy networks
    symmetry      the 8 symmetries of a square board (D4)
    ascii_board   ASCII boards for test fixtures and debugging
"""
