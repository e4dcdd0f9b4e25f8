"""Compact Go inputs and their expansion into network feature planes.

A Go position travels (in shards, to Triton) as int8 [4, S, S]:
    0  board relative to the side to move: 0 empty, 1 own stone, 2 opponent stone
    1  liberties of the group on each stone, capped at 4 (0 on empty points)
    2  move age: 1 on the last move, 2 on the one before, ... up to RECENT_MOVES (0 elsewhere)
    3  ko: 1 on the point the side to move may not retake (0 elsewhere)
On the model's device this becomes 17 float planes (AlphaGo-style raw features): own, opponent,
empty; own liberties 1/2/3/4+; opponent liberties 1/2/3/4+; the last 4 moves one-hot; ko;
ones (so zero padding marks the edge; `services.games.go.planes`, which needs torch: this
module needs numpy and numba (its scan is `services.games.go.scan`'s), not torch, so the search
service builds Go inputs without importing torch).
Moves are y * S + x, and S * S means pass.
"""

from __future__ import annotations

import numpy as np

from services.games.go.rules import GoState
from services.games.go.scan import compact_planes
from services.games.grid_kernels import neighbour_table

COMPACT_CHANNELS = 4
RECENT_MOVES = 4
MAX_LIBERTIES = 4
N_GO_PLANES = 17


def compact(state: GoState, to_move: int | None = None) -> np.ndarray:
    """int8 [4, S, S] seen from `to_move` (default: the state's side to move; records may
    give one side several moves in a row, e.g. handicap placement). A compiled scan
    (`services.games.go.scan.compact_planes`)."""
    s = state.size
    recent = np.array([-1 if m is None else m for m in state.last_moves[-RECENT_MOVES:]],
                      dtype=np.int64)
    planes = compact_planes(state.cell_values(), neighbour_table(s),
                            to_move or state.to_move, recent,
                            -1 if state.ko is None else state.ko, MAX_LIBERTIES)
    return planes.reshape(COMPACT_CHANNELS, s, s)
