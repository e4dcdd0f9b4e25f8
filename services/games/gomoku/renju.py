"""Renju forbidden points for black (RIF rules): overline, double-four, double-three.

Definitions used here, for a black stone placed at an empty point p (all patterns must contain
p, because a move is forbidden only for what it makes):

- **five**: exactly five black stones in an unbroken row. A move that makes a five in any
  line is never forbidden, whatever else it makes (five takes precedence over forbidden
  shapes); this includes a five in one line together with an overline in another.
- **overline**: six or more black stones in an unbroken row through p.
- **four**: a line in which one more black stone (at a "completion point") makes exactly five.
  In one line through p there is at most one completion point on each side of p (the cells
  between p and a completion point must all be black). Two completion points count as ONE
  four when they are the two ends of four contiguous stones (the straight four ``.XXXX.``),
  and as TWO fours otherwise (``X.XXX.X``, ``XX.XX.XX``, ``XXX.X.XXX``: two fives in one line).
- **double-four**: two or more fours, in one line or in several.
- **three**: a line (that holds no four) in which one more black stone at an extension point
  q makes a straight four, i.e. exactly four contiguous black stones including p and q with
  both end points empty and neither end point turning the five into an overline, AND black is
  allowed to play q (q is not itself forbidden, judged on the board with p already placed).
  Each line counts at most once.
- **double-three**: threes in two or more lines (also with a four besides: 4-3-3).

When a move is forbidden for several reasons the one reported is the first of overline,
double-four, double-three.

Recursion and its limit: deciding whether q is forbidden may again need to decide whether
some extension point of a three through q is forbidden, and so on, each level adding one
stone. The move asked about is depth 0, its extension points depth 1, theirs depth 2, ...
`MAX_DEPTH` (6) bounds it: at depth MAX_DEPTH only five / overline / double-four are checked
(exact, non-recursive) and a double-three is not looked for, so an extension point there
counts as playable unless it is an overline or a double-four. Every level needs a fresh
double-three candidate on the board, so real positions almost never go deep: on 600 random
dense test positions a limit of 1 changed the answer in 23 of them, a limit of 2 in one, a
limit of 3 in none. The limit only bounds the worst case.

Boards are numpy arrays indexed ``board[y, x]`` with EMPTY=0, BLACK=1, WHITE=2 (as in
`services.games.gomoku.rules`).

How it is made fast enough for tree search (`forbidden_mask` runs in `legal_mask`):

- Everything black can make in one line through p depends only on the 11 cells p-5..p+5 of
  that line (a five or a straight four through p, with the cells that decide "exactly five",
  fits in it). Lines are read as one list slice of a padded flat board (off-board cells read
  as WHITE: both just block) and their analysis (five / overline / number of fours /
  extension points of a three) is computed once per distinct 11-cell pattern and cached
  (at most 3**10 patterns). Only the recursion on extension points needs the 2-D board.
- Only a few empty points can be forbidden at all (see `_candidates`): they are found with
  bit operations on the whole board, and only they are checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from itertools import chain

import numpy as np

EMPTY, BLACK, WHITE = 0, 1, 2
MAX_DEPTH = 6
PAD = 5  # off-board margin of the padded board: every line window reaches 5 cells either side

OVERLINE, DOUBLE_FOUR, DOUBLE_THREE = "overline", "double-four", "double-three"

_NONE, _FIVE, _OVER = 0, 1, 2
LineInfo = tuple[int, int, tuple[int, ...]]  # (five/overline/none, fours 0-2, three extensions)
_LINES: dict[tuple[int, ...], LineInfo] = {}


def is_forbidden(board: np.ndarray, x: int, y: int) -> str | None:
    """Why black may not play at the empty point (x, y): 'overline', 'double-four',
    'double-three', or None when the move is allowed (including any move that makes five)."""
    size = board.shape[0]
    if not (0 <= x < size and 0 <= y < size):
        raise ValueError(f"({x}, {y}) is off the {size}x{size} board")
    if board[y, x] != EMPTY:
        raise ValueError(f"({x}, {y}) is not empty")
    padded = _pad(board)
    w = size + 2 * PAD
    return _forbidden(padded.ravel().tolist(), w, (y + PAD) * w + x + PAD, 0)


def forbidden_points(board: np.ndarray) -> dict[int, str]:
    """All forbidden points for black on `board`: flat point (y * size + x) -> reason."""
    size = board.shape[0]
    w = size + 2 * PAD
    padded = _pad(board)
    cells = padded.ravel().tolist()
    out = {}
    for i in _candidates(padded):
        reason = _forbidden(cells, w, i, 0)
        if reason is not None:
            out[(i // w - PAD) * size + i % w - PAD] = reason
    return out


def forbidden_mask(board: np.ndarray) -> np.ndarray:
    """Flat bool mask (size * size) of the points forbidden for black."""
    size = board.shape[0]
    mask = np.zeros(size * size, dtype=bool)
    mask[list(forbidden_points(board))] = True
    return mask


def first_forbidden(moves: Sequence[int], size: int = 15) -> tuple[int, str] | None:
    """(index in `moves`, reason) of the first black move of a game record (Black first,
    flat points y * size + x) that is forbidden, or None when there is none.

    Why not a replay: an ingest checks every black move of every renju game, so the board is
    kept as the padded flat list `_forbidden` reads, one stone written per move, and black's
    first four moves are not checked (a forbidden point needs at least four black stones
    around it). The scan stops, returning None, at the first move that is off the board or on
    a stone: what that move means (and whether the game ended before it) is the replay's to
    say. A move that makes five is never forbidden; moves after a finished game are not
    looked at differently from others, so the caller replays the prefix for that.
    """
    w = size + 2 * PAD
    cells = list(_empty_cells(size))
    cells_n = size * size
    lines = _LINES
    strides = (1, w, w + 1, w - 1)
    for k, point in enumerate(moves):
        if not 0 <= point < cells_n:
            return None
        y, x = divmod(int(point), size)
        i = (y + PAD) * w + x + PAD
        if cells[i] != EMPTY:
            return None
        if k & 1:
            cells[i] = WHITE
            continue
        if k >= 8:
            # `_forbidden`'s first look, inlined (most moves end here): the line patterns
            # through i (a line's analysis does not depend on its centre cell)
            overline = five = False
            fours = threes = 0
            for st in strides:
                key = tuple(cells[i - 5 * st:i + 5 * st + 1:st])
                info = lines.get(key)
                if info is None:
                    info = lines[key] = _analyse_line(key)
                kind, f, exts = info
                five = five or kind == _FIVE
                overline = overline or kind == _OVER
                fours += f
                threes += bool(exts)
            if not five and (overline or fours >= 2 or threes >= 2):
                reason = _forbidden(cells, w, i, 0)  # the whole check, three by three
                if reason is not None:
                    return k, reason
        cells[i] = BLACK
    return None


def first_forbidden_games(games: Sequence[Sequence[int]],
                          size: int = 15) -> list[tuple[int, str] | None]:
    """`first_forbidden` of every game, the same answers, with most of the work in numpy.

    Why: an ingest checks every black move of every renju game, and one Python call per move
    costs about 3 us. Here the four line patterns through every black move (from its 5th on)
    are read for many games at once from a [game, point] table of when each point was
    played, and looked up in a table of what each pattern makes (`_analyse_line`, computed
    once per pattern met). Only a move whose lines could make it forbidden (an overline, two
    fours, or two lines with a three's extension point, and no five) is checked exactly with
    `_forbidden` on its game's board, in order, up to the game's first forbidden move. A game
    with a move off the board or on a stone goes through `first_forbidden` itself.
    """
    out: list[tuple[int, str] | None] = []
    for g0 in range(0, len(games), _FORBIDDEN_GAMES):
        out += _first_forbidden_block(games[g0:g0 + _FORBIDDEN_GAMES], size)
    return out


def _first_forbidden_block(games: Sequence[Sequence[int]],
                           size: int) -> list[tuple[int, str] | None]:
    n = len(games)
    out: list[tuple[int, str] | None] = [None] * n
    lengths = np.fromiter((len(g) for g in games), dtype=np.int64, count=n)
    cells = size * size
    flat = np.fromiter(chain.from_iterable(games), dtype=np.int64, count=int(lengths.sum()))
    game = np.repeat(np.arange(n), lengths)
    starts = np.cumsum(lengths) - lengths
    ply = np.arange(len(flat)) - starts[game]
    on = (flat >= 0) & (flat < cells)
    odd = np.zeros(n, dtype=bool)  # a move off the board or on a stone: the scalar scan
    odd[game[~on]] = True
    twice = np.bincount(game * cells + np.where(on, flat, 0), minlength=n * cells) > 1
    odd[np.flatnonzero(twice) // cells] = True
    for g in np.flatnonzero(odd).tolist():
        out[g] = first_forbidden(games[g], size)
    # when[g, p]: the ply at which point p was played in game g (`never` if not); the extra
    # point `cells` stands for off the board: a white stone from the start
    when = np.full((n, cells + 1), np.iinfo(np.int32).max, dtype=np.int32)
    when[:, cells] = -1
    good = ~odd[game]
    when[game[good], flat[good]] = ply[good]
    rows = np.flatnonzero(good & (ply >= 8) & (ply % 2 == 0))
    neighbours = _line_neighbours(size)  # [cells, 4, 10]
    weights = 3.0 ** np.arange(10, dtype=np.float32)  # exact: codes < 3**10 < 2**24
    suspects = [np.zeros(0, dtype=np.int64)]
    for r0 in range(0, len(rows), _FORBIDDEN_BLOCK):
        r = rows[r0:r0 + _FORBIDDEN_BLOCK]
        played = when[game[r][:, None, None], neighbours[flat[r]]]  # [rows, 4, 10]
        stone = np.where(played < ply[r][:, None, None], 1 + (played & 1), 0)
        info = _pattern_info((stone.astype(np.float32) @ weights).astype(np.int32))  # [rows, 4]
        kind, fours, threes = info >> 3, (info >> 1) & 3, info & 1
        maybe = ~(kind == _FIVE).any(axis=1) & (
            (kind == _OVER).any(axis=1) | (fours.sum(axis=1) >= 2) | (threes.sum(axis=1) >= 2))
        suspects.append(r[maybe])
    w = size + 2 * PAD
    for r in np.concatenate(suspects).tolist():  # by game, then by ply: the first one counts
        g = int(game[r])
        if out[g] is not None:
            continue
        k = int(ply[r])
        board = np.zeros(cells, dtype=np.int8)
        board[flat[starts[g]:starts[g] + k]] = np.where(np.arange(k) % 2 == 0, BLACK, WHITE)
        y, x = divmod(int(flat[r]), size)
        reason = _forbidden(_pad(board.reshape(size, size)).ravel().tolist(), w,
                            (y + PAD) * w + x + PAD, 0)
        if reason is not None:
            out[g] = (k, reason)
    return out


_FORBIDDEN_GAMES = 1 << 12  # games per block in first_forbidden_games: its tables stay small
_FORBIDDEN_BLOCK = 1 << 14  # black moves per block in first_forbidden_games: a few MB
_PATTERN_INFO = np.full(3 ** 10, -1, dtype=np.int16)  # packed _analyse_line, -1 not yet


@cache
def _line_neighbours(size: int) -> np.ndarray:
    """int [size * size, 4, 10]: for each point and line direction, the points at offsets
    -5..-1, 1..5 along the line (size * size for off the board)."""
    out = np.full((size * size, 4, 10), size * size, dtype=np.int64)
    offsets = [d for d in range(-5, 6) if d]
    for p in range(size * size):
        y, x = divmod(p, size)
        for n, (dx, dy) in enumerate(((1, 0), (0, 1), (1, 1), (-1, 1))):
            for j, d in enumerate(offsets):
                xx, yy = x + d * dx, y + d * dy
                if 0 <= xx < size and 0 <= yy < size:
                    out[p, n, j] = yy * size + xx
    return out


def _pattern_info(codes: np.ndarray) -> np.ndarray:
    """`_analyse_line` of base-3 coded line patterns (cells -5..-1, 1..5 as digits, low
    first), packed as kind << 3 | fours << 1 | (any extension point)."""
    missing = np.unique(codes[_PATTERN_INFO[codes] < 0])
    for code in missing.tolist():
        digits = [(code // 3 ** j) % 3 for j in range(10)]
        kind, fours, exts = _analyse_line((*digits[:5], BLACK, *digits[5:]))
        _PATTERN_INFO[code] = kind << 3 | fours << 1 | bool(exts)
    return _PATTERN_INFO[codes]


@cache
def _empty_cells(size: int) -> tuple[int, ...]:
    """The padded flat cells of an empty size x size board (off-board cells WHITE)."""
    return tuple(_pad(np.zeros((size, size), dtype=np.int8)).ravel().tolist())


def candidate_mask(board: np.ndarray) -> np.ndarray:
    """The empty points that `_candidates` lets through, as a (size, size) bool array."""
    size = board.shape[0]
    w = size + 2 * PAD
    mask = np.zeros((size, size), dtype=bool)
    for i in _candidates(_pad(board)):
        mask[i // w - PAD, i % w - PAD] = True
    return mask


# -- internals --------------------------------------------------------------------------------


def _pad(board: np.ndarray) -> np.ndarray:
    size = board.shape[0]
    padded = np.full((size + 2 * PAD, size + 2 * PAD), WHITE, dtype=np.int8)
    padded[PAD:PAD + size, PAD:PAD + size] = board
    return padded


def _candidates(padded: np.ndarray) -> list[int]:
    """Padded indices of the empty points that could be forbidden for black, ascending.

    A necessary condition, cheap to compute: a forbidden point needs either two lines each
    with at least two black stones within distance 3 (two threes: a straight four made from a
    three spans at most 3 cells either side of p), or two lines each with at least three black
    stones within distance 4 (two fours: a five through p spans at most 4 cells either side),
    or one line with at least four black stones within distance 4 (two fours in one line, or
    an overline). Every other empty point is certainly not forbidden. Computed on Python ints
    used as bitboards over the padded board (the margin keeps shifts from wrapping rows).
    """
    flat = padded.ravel()
    black = int.from_bytes(np.packbits(flat == BLACK, bitorder="little").tobytes(), "little")
    if not black:
        return []
    empty = int.from_bytes(np.packbits(flat == EMPTY, bitorder="little").tobytes(), "little")
    near_1 = near_2 = far_1 = far_2 = crowded = 0  # over lines
    w = padded.shape[0]
    for s in (1, w, w + 1, w - 1):  # row, file, diagonal, anti-diagonal
        c1 = c2 = c3 = c4 = 0  # at least 1, 2, 3, 4 black stones so far on this line
        near = 0
        for k in (1, 2, 3, 4):
            if k == 4:
                near = c2
            for m in (black >> k * s, black << k * s):
                c4 |= c3 & m
                c3 |= c2 & m
                c2 |= c1 & m
                c1 |= m
        near_2 |= near_1 & near
        near_1 |= near
        far_2 |= far_1 & c3
        far_1 |= c3
        crowded |= c4
    bits = empty & (near_2 | far_2 | crowded)
    out = []
    while bits:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


def _analyse_line(key: tuple[int, ...]) -> LineInfo:
    """What a black stone at the centre (index 5) of an 11-cell line makes in that line.

    Returns (kind, fours, extensions): kind is _FIVE / _OVER / _NONE for the run through the
    centre; fours is the number of fours through the centre (0, 1 or 2, a straight four
    counting once); extensions are the offsets from the centre of the empty points where one
    more stone makes a straight four through the centre (only when there is no four).
    """
    cells = list(key)
    cells[5] = BLACK

    def run(i: int) -> int:  # black run through i; one that reaches the window's end is >= 6
        n, j = 1, i - 1
        while j >= 0 and cells[j] == BLACK:
            n, j = n + 1, j - 1
        j = i + 1
        while j <= 10 and cells[j] == BLACK:
            n, j = n + 1, j + 1
        return n

    def end(step: int) -> int:  # the first non-black index from the centre along step
        j = 5 + step
        while 0 <= j <= 10 and cells[j] == BLACK:
            j += step
        return j

    n = run(5)
    kind = _FIVE if n == 5 else _OVER if n > 5 else _NONE
    completions = 0
    for step in (-1, 1):
        j = end(step)
        if 0 <= j <= 10 and cells[j] == EMPTY:
            cells[j] = BLACK
            completions += run(j) == 5
            cells[j] = EMPTY
    fours = 1 if completions == 2 and n == 4 else completions

    extensions = []
    if kind == _NONE and fours == 0:
        for k in (-3, -2, -1, 1, 2, 3):
            j = 5 + k
            if cells[j] != EMPTY:
                continue
            cells[j] = BLACK
            if run(5) == 4:  # a four-run within 5-3..5+3, so lo >= 1 and hi <= 9 below
                lo, hi = end(-1), end(1)
                if (cells[lo] == EMPTY and cells[hi] == EMPTY
                        and cells[lo - 1] != BLACK and cells[hi + 1] != BLACK):
                    extensions.append(k)
            cells[j] = EMPTY
    return kind, fours, tuple(extensions)


def _forbidden(cells: list[int], w: int, i: int, depth: int) -> str | None:
    """Forbidden reason for black at the empty padded index i, or None. cells is restored
    before returning (written out by hand, not with try/finally: this is the hot path)."""
    cells[i] = BLACK
    lines = _LINES
    overline, fours = False, 0
    potential = []  # (stride, extensions) of the lines that could hold a three
    for s in (1, w, w + 1, w - 1):  # row, file, diagonal, anti-diagonal
        key = tuple(cells[i - 5 * s:i + 5 * s + 1:s])
        info = lines.get(key)
        if info is None:
            info = lines[key] = _analyse_line(key)
        kind, f, exts = info
        if kind == _FIVE:
            cells[i] = EMPTY
            return None  # five takes precedence over every forbidden shape
        if kind == _OVER:
            overline = True
        fours += f
        if exts:
            potential.append((s, exts))
    reason = None
    if overline:
        reason = OVERLINE
    elif fours >= 2:
        reason = DOUBLE_FOUR
    elif depth < MAX_DEPTH and len(potential) >= 2:
        # a line counts as a three when one of its extension points is playable (checked
        # recursively, with this stone in place); at depth MAX_DEPTH this is not looked for
        threes = 0
        for n, (s, exts) in enumerate(potential):
            if any(_forbidden(cells, w, i + k * s, depth + 1) is None for k in exts):
                threes += 1
                if threes >= 2:
                    reason = DOUBLE_THREE
                    break
            elif threes + len(potential) - n - 1 < 2:
                break  # too few lines left to make two threes
    cells[i] = EMPTY
    return reason
