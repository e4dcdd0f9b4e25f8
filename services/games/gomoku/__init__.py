"""Gomoku and Renju (15x15 by default): one package owns the game's whole path.

Modules:
    rules     Gomoku rules on a square board, the RIF rule variants
    renju     Renju forbidden points for black (overline, double-four, double-three)
    game      Gomoku/Renju as a `Game` (registered as "gomoku"): shapes, encoders, records,
              model configurations, smoke positions
    replay    a record's moves -> canonical (position, next move) pairs for the shards
    selfplay  rule-based self-play games (the shipped sample)
"""
