"""Compiled board primitives of the games of stones with captures on a square grid (Go and the
Capture Game): the neighbour table, a group's liberties, a group taken off the board, every
group labelled, the liberties of every point, a single-point eye, the area score.

Why: Go's rules, scans, tactics, rollouts and search kernels and the Capture Game's batched
engine and search kernels all do the same board work; each copy kept its own flood fill, and a
fix made in one would not reach the others. Every kernel here is compiled once (numba, cached
on disk: `services.compiled.kernel`) and called from the games' kernels, which numba compiles
into one machine-code body with them.

The contract every primitive shares:

* a board is its flat `cells` (point `y * S + x`), any integer dtype, 0 an empty point and 1
  and 2 the two colours (`3 - colour` the opponent of `colour`);
* `nbrs` is `neighbour_table(S)`: int32 [S*S, 4], the orthogonal neighbours of each point
  (left, right, down, up, those on the board), padded with -1 at the end, so a walk over a
  point's row stops at the first -1;
* scratch arrays are the caller's, so a kernel that walks many groups allocates them once:
  `stack` (int [S*S]) a walk's work list, and `mark` (int64 [S*S]) with `clock` (int64 [1]) the
  stamps of the points a walk has seen: each walk takes the next stamp `clock[0] + 1`, so one
  pair serves every walk of a position without clearing, and a liberty two stones of a group
  share is counted once.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from services.compiled import kernel


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


def grid_params(size: int) -> np.ndarray:
    """int64 [1 + 4*S*S]: a compiled search tree's `iparams` for a grid game, the size then its
    neighbour table flattened (`params_neighbours` reads the table back)."""
    return np.concatenate([[size], neighbour_table(size).reshape(-1)]).astype(np.int64)


@kernel
def params_neighbours(iparams: np.ndarray) -> np.ndarray:
    """The neighbour table [S*S, 4] held in `grid_params`' array (a view, no copy)."""
    size = iparams[0]
    return iparams[1:1 + 4 * size * size].reshape(size * size, 4)


@kernel
def count_liberties(cells, nbrs, start, limit, mark, clock, stack, found):
    """The liberties of the group on the stone at `start`, counting stopped at `limit` (so 0
    or 1 with `limit` 1: whether it has one); the first ones found (up to `len(found)`, which
    may be 0) are written to `found`. Takes one stamp of `mark` / `clock`."""
    clock[0] += 1
    tick = clock[0]
    colour = cells[start]
    stack[0] = start
    mark[start] = tick
    top = 1
    count = 0
    while top > 0:
        top -= 1
        p = stack[top]
        for j in range(4):
            q = nbrs[p, j]
            if q < 0:
                break
            if mark[q] == tick:
                continue
            v = cells[q]
            if v == 0:
                mark[q] = tick
                if count < found.shape[0]:
                    found[count] = q
                count += 1
                if count >= limit:
                    return count
            elif v == colour:
                mark[q] = tick
                stack[top] = q
                top += 1
    return count


@kernel
def remove_group(cells, nbrs, start, stack):
    """Take the group on the stone at `start` off the board (its points set to 0); return its
    number of stones."""
    colour = cells[start]
    cells[start] = 0
    stack[0] = start
    top = 1
    removed = 1
    while top > 0:
        top -= 1
        p = stack[top]
        for j in range(4):
            q = nbrs[p, j]
            if q < 0:
                break
            if cells[q] == colour:
                cells[q] = 0
                stack[top] = q
                top += 1
                removed += 1
    return removed


@kernel
def label_groups(cells, nbrs, label, members, gstart, lstart, libs, mark, clock):
    """Label every group of the board; return how many there are (G). Written: `label[p]` the
    group of the stone at p (-1 on empty points); group g's stones are
    `members[gstart[g]:gstart[g + 1]]` (its first stone first, then in breadth-first order,
    so `cells[members[gstart[g]]]` is its colour), its distinct liberties
    `libs[lstart[g]:lstart[g + 1]]` (in the order its stones reach them). Sizes: `label` and
    `members` [S*S], `gstart` and `lstart` [S*S + 1], `libs` [4 * S*S]. Takes one stamp of
    `mark` / `clock` per group."""
    n = cells.shape[0]
    for p in range(n):
        label[p] = -1
    groups = 0
    used = 0
    nlibs = 0
    gstart[0] = 0
    lstart[0] = 0
    for start in range(n):
        colour = cells[start]
        if colour == 0 or label[start] >= 0:
            continue
        g = groups
        groups += 1
        clock[0] += 1
        tick = clock[0]
        label[start] = g
        members[used] = start
        size = 1
        i = 0
        while i < size:
            p = members[used + i]
            for j in range(4):
                q = nbrs[p, j]
                if q < 0:
                    break
                v = cells[q]
                if v == 0:
                    if mark[q] != tick:
                        mark[q] = tick
                        libs[nlibs] = q
                        nlibs += 1
                elif v == colour and label[q] < 0:
                    label[q] = g
                    members[used + size] = q
                    size += 1
            i += 1
        used += size
        gstart[g + 1] = used
        lstart[g + 1] = nlibs
    return groups


@kernel
def group_liberties(cells: np.ndarray, nbrs: np.ndarray) -> np.ndarray:
    """int32 [S*S]: the number of liberties of the group on each point (0 on empty points):
    `label_groups` with scratch of its own."""
    n = cells.shape[0]
    label = np.empty(n, np.int32)
    members = np.empty(n, np.int32)
    gstart = np.empty(n + 1, np.int32)
    lstart = np.empty(n + 1, np.int32)
    libs = np.empty(4 * n, np.int32)
    label_groups(cells, nbrs, label, members, gstart, lstart, libs, np.zeros(n, np.int64),
                 np.zeros(1, np.int64))
    out = np.zeros(n, np.int32)
    for p in range(n):
        g = label[p]
        if g >= 0:
            out[p] = lstart[g + 1] - lstart[g]
    return out


@kernel
def own_eye(cells, nbrs, point, colour, size):
    """Whether the empty `point` is a single-point eye of `colour` (Go's `own_eyes`, the one a
    search or a rollout does not fill): every orthogonal neighbour its stone (off the board
    counts as its), and of the diagonal points on the board none the opponent's on the edge,
    at most one elsewhere."""
    for j in range(4):
        q = nbrs[point, j]
        if q < 0:
            break
        if cells[q] != colour:
            return False
    y = point // size
    x = point - y * size
    edge = x == 0 or y == 0 or x == size - 1 or y == size - 1
    bad = 0
    for dy in (-1, 1):
        for dx in (-1, 1):
            cy = y + dy
            cx = x + dx
            if 0 <= cy < size and 0 <= cx < size and cells[cy * size + cx] == 3 - colour:
                bad += 1
    return bad == 0 if edge else bad < 2


@kernel
def area_margin(cells, nbrs, seen, stack):
    """Colour 1's area minus colour 2's (Tromp-Taylor, no komi): stones, and the empty regions
    that reach one colour only. `seen` (int [S*S]) is cleared and used here."""
    area = cells.shape[0]
    margin = 0
    for p in range(area):
        seen[p] = 0
    for p in range(area):
        v = cells[p]
        if v == 1:
            margin += 1
        elif v == 2:
            margin -= 1
        elif seen[p] == 0:
            seen[p] = 1
            top = 0
            stack[top] = p
            top += 1
            region = 0
            touches = 0  # bit 1: colour 1, bit 2: colour 2
            while top:
                top -= 1
                s = stack[top]
                region += 1
                for j in range(4):
                    q = nbrs[s, j]
                    if q < 0:
                        break
                    if cells[q] == 0:
                        if seen[q] == 0:
                            seen[q] = 1
                            stack[top] = q
                            top += 1
                    else:
                        touches |= cells[q]
            if touches == 1:
                margin += region
            elif touches == 2:
                margin -= region
    return margin
