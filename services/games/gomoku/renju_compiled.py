"""Renju forbidden points for black, compiled: `services.games.gomoku.renju`'s rules in numba.

Why: the compiled search tree (`services.games.gomoku.search_kernels`) asks for black's
forbidden points at every renju node where black moves; the interpreted rules cost tens of µs
there. The definitions, the order of the reasons and the recursion limit (`MAX_DEPTH`) are
those of `renju` (read its docstring); tests/test_renju_compiled.py compares the two on many
random positions, reason by reason.

Boards are flat int8 (EMPTY=0, BLACK=1, WHITE=2, index y * size + x). Lines are read from a
padded copy (`PAD` off-board cells of WHITE around it), as `renju` does.
"""

from __future__ import annotations

import types

import numpy as np

from services.compiled import kernel
from services.games.gomoku.renju import MAX_DEPTH, PAD

EMPTY, BLACK, WHITE = 0, 1, 2
NONE, OVERLINE, DOUBLE_FOUR, DOUBLE_THREE = 0, 1, 2, 3  # reason codes, `renju`'s order
_KIND_NONE, _KIND_FIVE, _KIND_OVER = 0, 1, 2


@kernel
def _run(line: np.ndarray, i: int) -> int:
    """The black run through index i of an 11-cell line (>= 6 when it reaches an end)."""
    n = 1
    j = i - 1
    while j >= 0 and line[j] == BLACK:
        n += 1
        j -= 1
    j = i + 1
    while j <= 10 and line[j] == BLACK:
        n += 1
        j += 1
    return n


@kernel
def _end(line: np.ndarray, step: int) -> int:
    """The first non-black index from the centre along `step`."""
    j = 5 + step
    while 0 <= j <= 10 and line[j] == BLACK:
        j += step
    return j


@kernel
def analyse_line(cells: np.ndarray, i: int, s: int, line: np.ndarray) -> tuple[int, int, int]:
    """`renju._analyse_line` of the line through padded index i with stride s (cell i taken
    as black): (kind, fours, extension offsets as a bit mask, bit k + 3 for offset k)."""
    for k in range(11):
        line[k] = cells[i + (k - 5) * s]
    line[5] = BLACK
    n = _run(line, 5)
    kind = _KIND_FIVE if n == 5 else (_KIND_OVER if n > 5 else _KIND_NONE)
    completions = 0
    for step in (-1, 1):
        j = _end(line, step)
        if 0 <= j <= 10 and line[j] == EMPTY:
            line[j] = BLACK
            if _run(line, j) == 5:
                completions += 1
            line[j] = EMPTY
    fours = 1 if completions == 2 and n == 4 else completions
    exts = 0
    if kind == _KIND_NONE and fours == 0:
        for k in (-3, -2, -1, 1, 2, 3):
            j = 5 + k
            if line[j] != EMPTY:
                continue
            line[j] = BLACK
            if _run(line, 5) == 4:
                lo = _end(line, -1)
                hi = _end(line, 1)
                if (line[lo] == EMPTY and line[hi] == EMPTY
                        and line[lo - 1] != BLACK and line[hi + 1] != BLACK):
                    exts |= 1 << (k + 3)
            line[j] = EMPTY
    return kind, fours, exts


def _forbidden_at(cells: np.ndarray, w: int, i: int, depth: int, line: np.ndarray) -> int:
    """`renju._forbidden` as a reason code: why black may not play the empty padded index i
    (NONE: allowed). `cells` (the padded board) is restored before returning. `deeper` is the
    next level's copy (see `forbidden_at`)."""
    cells[i] = BLACK
    overline = False
    fours = 0
    n_pot = 0
    pot_s = np.empty(4, np.int64)
    pot_e = np.empty(4, np.int64)
    for d in range(4):
        s = 1 if d == 0 else (w if d == 1 else (w + 1 if d == 2 else w - 1))
        kind, f, exts = analyse_line(cells, i, s, line)
        if kind == _KIND_FIVE:
            cells[i] = EMPTY
            return NONE
        if kind == _KIND_OVER:
            overline = True
        fours += f
        if exts:
            pot_s[n_pot] = s
            pot_e[n_pot] = exts
            n_pot += 1
    reason = NONE
    if overline:
        reason = OVERLINE
    elif fours >= 2:
        reason = DOUBLE_FOUR
    elif depth < MAX_DEPTH and n_pot >= 2:
        threes = 0
        for n in range(n_pot):
            playable = False
            for k in (-3, -2, -1, 1, 2, 3):
                if (pot_e[n] & (1 << (k + 3))
                        and deeper(cells, w, i + k * pot_s[n], depth + 1, line) == NONE):  # noqa: F821
                    playable = True
                    break
            if playable:
                threes += 1
                if threes >= 2:
                    reason = DOUBLE_THREE
                    break
            elif threes + n_pot - n - 1 < 2:
                break
    cells[i] = EMPTY
    return reason


@kernel
def _allowed(cells: np.ndarray, w: int, i: int, depth: int, line: np.ndarray) -> int:
    """Below the last level: never called (at MAX_DEPTH no three is looked for)."""
    return NONE


def _levels() -> object:
    """`_forbidden_at` compiled once per depth, each calling the next one's copy: the
    recursion of `renju._forbidden` unrolled, since numba cannot load a cached function that
    calls a recursive one. Returns depth 0's."""
    deeper = _allowed
    for depth in range(MAX_DEPTH, -1, -1):
        glb = dict(_forbidden_at.__globals__, deeper=deeper)
        copy = types.FunctionType(_forbidden_at.__code__, glb, f"forbidden_at_{depth}")
        copy.__qualname__ = f"forbidden_at_{depth}"
        copy.__doc__ = _forbidden_at.__doc__
        deeper = kernel(copy)
    return deeper


forbidden_at = _levels()


@kernel
def padded(board: np.ndarray, size: int) -> np.ndarray:
    """The flat board with `PAD` cells of WHITE around it (what lines are read from)."""
    w = size + 2 * PAD
    out = np.full(w * w, WHITE, np.int8)
    for y in range(size):
        for x in range(size):
            out[(y + PAD) * w + x + PAD] = board[y * size + x]
    return out


@kernel
def forbidden_reasons(board: np.ndarray, size: int, out: np.ndarray) -> int:
    """Black's forbidden points of the flat `board`: `out[p]` (int8 [size * size]) gets the
    reason code of each point (NONE elsewhere); returns how many there are.

    Only the empty points that `renju._candidates` lets through (two lines with two black
    stones within 3, two lines with three within 4, or one line with four within 4) are
    checked, found by counting each black stone into its neighbours' lines."""
    n = size * size
    out[:n] = NONE
    near = np.zeros(4 * n, np.int8)  # black stones within distance 3, per point and line
    far = np.zeros(4 * n, np.int8)  # ... within distance 4
    any_black = False
    for p in range(n):
        if board[p] != BLACK:
            continue
        any_black = True
        y, x = divmod(p, size)
        for d in range(4):  # row, file, diagonal, anti-diagonal
            dx = 0 if d == 1 else 1
            dy = 0 if d == 0 else (-1 if d == 3 else 1)
            for sign in (-1, 1):
                for k in range(1, 5):
                    xx = x + sign * k * dx
                    yy = y + sign * k * dy
                    if xx < 0 or xx >= size or yy < 0 or yy >= size:
                        break
                    q = yy * size + xx
                    far[4 * q + d] += 1
                    if k <= 3:
                        near[4 * q + d] += 1
    if not any_black:
        return 0
    cells = padded(board, size)
    w = size + 2 * PAD
    line = np.empty(11, np.int8)
    count = 0
    for p in range(n):
        if board[p] != EMPTY:
            continue
        near_lines = 0
        far_lines = 0
        crowded = False
        for d in range(4):
            if near[4 * p + d] >= 2:
                near_lines += 1
            if far[4 * p + d] >= 3:
                far_lines += 1
            if far[4 * p + d] >= 4:
                crowded = True
        if near_lines < 2 and far_lines < 2 and not crowded:
            continue
        y, x = divmod(p, size)
        reason = forbidden_at(cells, w, (y + PAD) * w + x + PAD, 0, line)
        if reason != NONE:
            out[p] = reason
            count += 1
    return count


@kernel
def forbidden_point(cells: np.ndarray, w: int, i: int, line: np.ndarray) -> int:
    """Why black may not play the empty padded index i of `cells` (`padded`'s layout, width
    `w`): a reason code, NONE when allowed. One point's `forbidden_reasons`: the same screen
    (`renju._candidates`: two lines with two black stones within 3, two with three within 4,
    or one with four within 4) before `forbidden_at`, so a point far from black's stones
    costs a few reads. Why: a rollout checks each point it draws for black (the padding,
    `PAD` >= 4 cells, keeps every read on the padded board)."""
    near_lines = 0
    far_lines = 0
    crowded = False
    for d in range(4):
        s = 1 if d == 0 else (w if d == 1 else (w + 1 if d == 2 else w - 1))
        near = 0
        far = 0
        for sign in (-1, 1):
            for k in range(1, 5):
                if cells[i + sign * k * s] == BLACK:
                    far += 1
                    if k <= 3:
                        near += 1
        if near >= 2:
            near_lines += 1
        if far >= 3:
            far_lines += 1
        if far >= 4:
            crowded = True
    if near_lines < 2 and far_lines < 2 and not crowded:
        return NONE
    return forbidden_at(cells, w, i, 0, line)
