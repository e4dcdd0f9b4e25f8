"""Board games: rules, coordinates, encodings and symmetries, and the `Game` every service asks.

Conventions shared by every module: a point is a flat index y * size + x, x the column from
the left (0 = 'a'), y the row from the bottom (0 = '1'); boards are int8 arrays board[y, x]
holding EMPTY=0, BLACK=1, WHITE=2 (`coords` documents every coordinate system).

* `base`: the `Game` interface (shapes, names, rules, defaults) and the `Position` protocol;
  `registry`: the registered games by name (`get_game`, `registered_games`, `register`).
* `gomoku_game`, `go_game`: Gomoku/Renju and Go as `Game`s (request validation, what a search
  node is, smoke-test positions); `go_game.GoSearchState` is the Go position services play on.
* `gomoku`, `renju`: Gomoku rules and renju's forbidden points; `go`: Go rules (`GoState`);
  `go_fast`: Go replay and features for ingest.
* `go_features`: Go's compact int8 network input (numpy only); `go_planes`: its expansion into
  feature planes (torch); `encoding`: Gomoku's one-hot planes.
* `coords`: flat index, (x, y), RenjuNet names, GTP vertices, SGF letters; `symmetry`: the
  eight board symmetries; `ascii_board`: boards from text (tests, docs).

A new game is one module: a `Game` subclass, its position class and `registry.register(...)`
(a built-in one is also listed in `registry.BUILTIN_MODULES`); tests/tictactoe_game.py is one.
"""
