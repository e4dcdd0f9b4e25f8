"""The simple Go pairs that the compiled replay (services/games/go_fast.py, via
`services.dataset.go_pairs.game_pairs`) must match byte for byte: `replay` keeping every
`GoState`, then `compact` (a full-board liberty count) per position."""

from __future__ import annotations

import numpy as np

from services.dataset.go_pairs import GoPairs, pairs_of
from services.games.go import GameRecord, replay
from services.games.go_features import COMPACT_CHANNELS, compact


def game_pairs_reference(game: GameRecord) -> GoPairs:
    """`game_pairs` computed position by position from `replay` + `compact` (no stones
    hashes: `canonicalize` hashes the boards)."""
    rep = replay(game, keep_states=True)
    n = rep.played
    s = game.size
    inputs = np.zeros((n, COMPACT_CHANNELS, s, s), dtype=np.int8)
    moves = np.empty(n, dtype=np.int16)
    to_move = np.empty(n, dtype=np.int8)
    for i in range(n):
        color, point = game.moves[i]
        inputs[i] = compact(rep.states[i], to_move=color)
        moves[i] = s * s if point is None else point
        to_move[i] = color
    return pairs_of(game, inputs, moves, to_move, rep.error)
