"""Compact Go inputs and their expansion into network feature planes.

A Go position travels (in shards, to Triton) as int8 [4, S, S]:
    0  board relative to the side to move: 0 empty, 1 own stone, 2 opponent stone
    1  liberties of the group on each stone, capped at 4 (0 on empty points)
    2  move age: 1 on the last move, 2 on the one before, ... up to RECENT_MOVES (0 elsewhere)
    3  ko: 1 on the point the side to move may not retake (0 elsewhere)
On the model's device this becomes 17 float planes (AlphaGo-style raw features): own, opponent,
empty; own liberties 1/2/3/4+; opponent liberties 1/2/3/4+; the last 4 moves one-hot; ko;
ones (so zero padding marks the edge; `services.games.go_planes`, which needs torch: this
module needs numpy only, so the search service builds Go inputs without importing torch).
Moves are y * S + x, and S * S means pass.
"""

from __future__ import annotations

import numpy as np

from services.games.go import EMPTY, GoState

COMPACT_CHANNELS = 4
RECENT_MOVES = 4
MAX_LIBERTIES = 4
N_GO_PLANES = 17


def compact(state: GoState, to_move: int | None = None) -> np.ndarray:
    """int8 [4, S, S] seen from `to_move` (default: the state's side to move; records may
    give one side several moves in a row, e.g. handicap placement)."""
    s = state.size
    board = state.board
    out = np.zeros((COMPACT_CHANNELS, s, s), dtype=np.int8)
    own = board == (to_move or state.to_move)
    out[0][own] = 1
    out[0][(board != EMPTY) & ~own] = 2
    out[1] = np.minimum(state.liberties(), MAX_LIBERTIES)
    recent = [m for m in state.last_moves[-RECENT_MOVES:]]
    for age, move in enumerate(reversed(recent), start=1):
        if move is not None and out[2].flat[move] == 0:
            out[2].flat[move] = age
    if state.ko is not None:
        out[3].flat[state.ko] = 1
    return out
