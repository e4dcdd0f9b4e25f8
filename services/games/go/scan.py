"""Compiled whole-board scans of a Go position: every group's liberties, the legal mask, and
the compact network input.

Why: `GoState.liberties`, `GoState.legal_mask` (the policy's mask) and
`go_features.compact` (the network input, liberties included) are asked of every position a
search or a move-order annealing evaluates. Interpreted, the first two are loops over the 361
points with flood fills (about 50 and 60 µs on 19x19) and the input is a dozen numpy calls, as
much CPU as the network's share of a small batch; compiled (numba, cached on disk like
`services.games.go.fast`), each is a few µs. The results are exactly the interpreted ones
(`tests/test_go.py` compares them with the references of `tests/go_reference.py` and with
`GoState.play`; `benchmarks/go_scan.py` on real positions).

Points are flat indices `y * size + x` (`services.games.go.rules`); a position is its `cells` bytes
read as uint8 (EMPTY=0, BLACK=1, WHITE=2), its neighbours `neighbour_table(size)`; the flood
fill of every group is `services.games.grid_kernels.group_liberties`, which the rules share.
"""

from __future__ import annotations

import numpy as np

from services.compiled import kernel
from services.games.grid_kernels import group_liberties


@kernel
def legal_points(cells: np.ndarray, nbrs: np.ndarray, colour: int, ko: int) -> np.ndarray:
    """bool [S*S]: the points `colour` may play (ko: the point it may not retake, -1 for none).
    An empty point is legal when it touches an empty point, or an own group that keeps a
    liberty besides it, or an opponent group in atari (which the move captures)."""
    n = cells.shape[0]
    mask = np.zeros(n, np.bool_)
    libs = np.zeros(0, np.int32)
    have_libs = False
    for p in range(n):
        if cells[p] != 0 or p == ko:
            continue
        ok = False
        for j in range(4):
            q = nbrs[p, j]
            if q < 0:
                break
            if cells[q] == 0:
                ok = True
                break
        if not ok:
            if not have_libs:
                libs = group_liberties(cells, nbrs)
                have_libs = True
            for j in range(4):
                q = nbrs[p, j]
                if q < 0:
                    break
                if (cells[q] == colour) == (libs[q] > 1):
                    ok = True
                    break
        mask[p] = ok
    return mask


@kernel
def compact_planes(cells: np.ndarray, nbrs: np.ndarray, own: int, recent: np.ndarray, ko: int,
                   max_liberties: int) -> np.ndarray:
    """int8 [4, S*S], the planes of `go_features.compact` seen by `own`: stones (1 own, 2
    opponent), liberties capped at `max_liberties`, move ages (`recent`: the last moves, oldest
    first, -1 a pass; the newest is age 1, a pass takes an age too, a point keeps its youngest
    age) and the ko point (-1: none)."""
    n = cells.shape[0]
    out = np.zeros((4, n), np.int8)
    libs = group_liberties(cells, nbrs)
    for p in range(n):
        v = cells[p]
        if v != 0:
            out[0, p] = 1 if v == own else 2
            out[1, p] = min(libs[p], max_liberties)
    age = 1
    for i in range(recent.shape[0] - 1, -1, -1):
        move = recent[i]
        if move >= 0 and out[2, move] == 0:
            out[2, move] = age
        age += 1
    if ko >= 0:
        out[3, ko] = 1
    return out
