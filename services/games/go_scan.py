"""Compiled whole-board scans of a Go position: every group's liberties, and the legal mask.

Why: `GoState.liberties` (a network input plane) and `GoState.legal_mask` (the policy's mask)
are asked of every position a search or a move-order annealing evaluates. Interpreted, each is
a loop over the 361 points with flood fills (about 50 and 60 µs on 19x19), as much CPU as
the network's share of a small batch; compiled (numba, cached on disk like
`services.games.go_fast`), each is a few µs. The results are exactly the interpreted rules'
(`tests/test_go.py` compares them with a reference flood fill and with `GoState.play`).

Points are flat indices `y * size + x` (`services.games.go`); a position is its `cells` bytes
read as uint8 (EMPTY=0, BLACK=1, WHITE=2), its neighbours `neighbour_table(size)`.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import njit


@cache
def neighbour_table(size: int) -> np.ndarray:
    """int32 [S*S, 4]: the orthogonal neighbours of each point (left, right, down, up, those on
    the board), padded with -1; read-only, one per size."""
    table = np.full((size * size, 4), -1, np.int32)
    for p in range(size * size):
        y, x = divmod(p, size)
        row = [q for q, on in ((p - 1, x > 0), (p + 1, x < size - 1), (p - size, y > 0),
                               (p + size, y < size - 1)) if on]
        table[p, : len(row)] = row
    table.flags.writeable = False
    return table


@njit(cache=True)
def group_liberties(cells: np.ndarray, nbrs: np.ndarray) -> np.ndarray:
    """int32 [S*S]: the number of liberties of the group on each point (0 on empty points).
    One flood fill per group; `mark` stamps the liberties a group has counted, so a liberty
    shared by two of its stones counts once."""
    n = cells.shape[0]
    libs = np.zeros(n, np.int32)
    done = np.zeros(n, np.uint8)
    mark = np.zeros(n, np.int32)
    group = np.empty(n, np.int32)
    tick = 0
    for start in range(n):
        colour = cells[start]
        if colour == 0 or done[start]:
            continue
        tick += 1
        group[0] = start
        done[start] = 1
        size = 1
        count = 0
        i = 0
        while i < size:
            p = group[i]
            for j in range(4):
                q = nbrs[p, j]
                if q < 0:
                    break
                v = cells[q]
                if v == 0:
                    if mark[q] != tick:
                        mark[q] = tick
                        count += 1
                elif v == colour and not done[q]:
                    done[q] = 1
                    group[size] = q
                    size += 1
            i += 1
        for k in range(size):
            libs[group[k]] = count
    return libs


@njit(cache=True)
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
