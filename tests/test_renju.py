"""Renju forbidden points for black (RIF): overline, double-four, double-three, five first.

Positions are hand-built ASCII diagrams read with `board_from_ascii` (rows top first, 'X'
black, 'O' white, '.' empty); '*' marks the empty point black is about to play. Most pattern
cases sit on 9x9 boards (the rules do not depend on the size, and the edges are close by);
the `GomokuState` integration uses 15x15.
"""

from __future__ import annotations

import numpy as np
import pytest

from services.coords import index_name, parse_point
from services.games.gomoku import renju
from services.games.gomoku.renju import (
    candidate_mask,
    forbidden_mask,
    forbidden_points,
    is_forbidden,
)
from services.games.gomoku.rules import (
    BLACK,
    EMPTY,
    WHITE,
    GomokuState,
    IllegalMove,
    Rule,
    board_from_ascii,
)
from services.games.symmetry import N_SYMMETRIES, point_table, transform_board


def position(text: str) -> tuple[np.ndarray, int, int]:
    """The board of a diagram and the (x, y) of its '*' (which is left empty)."""
    rows = text.strip().splitlines()
    (star,) = [(r.index("*"), len(rows) - 1 - i) for i, r in enumerate(rows) if "*" in r]
    return board_from_ascii(text.replace("*", ".")), star[0], star[1]


def forbidden(text: str) -> str | None:
    board, x, y = position(text)
    return is_forbidden(board, x, y)


EMPTY_ROW = "........."


def row_and_column(row: str, column: str = "....") -> str:
    """A 9x9 diagram: `row` (9 cells, holding the '*') is row 5, and `column` gives the four
    cells of the star's file above it, rows 9 down to 6 (so "..XX" is a three e.g. e5-e6-e7
    with both ends free, "OXXX" a four blocked at the top)."""
    assert len(row) == 9 and row.count("*") == 1 and len(column) == 4
    sx = row.index("*")
    above = [EMPTY_ROW[:sx] + c + EMPTY_ROW[sx + 1:] for c in column]
    return "\n".join([*above, row, *[EMPTY_ROW] * 4])


# -- overline --------------------------------------------------------------------------------


def test_overline_is_forbidden_for_black() -> None:
    # XX*XXX: the move joins two runs into six in a row
    assert forbidden(row_and_column("XX*XXX...")) == "overline"
    # seven is an overline too, and one stone short is a plain five (allowed, and wins)
    assert forbidden(row_and_column("XXX*XXX..")) == "overline"
    assert forbidden(row_and_column("XX*XX....")) is None


# -- double-four -----------------------------------------------------------------------------

DOUBLE_FOUR_TWO_LINES = """
....O....
....X....
....X....
....X....
OXXX*....
.........
.........
.........
.........
"""


def test_double_four_in_two_lines() -> None:
    # row 5: O X X X * -> a four (only f5 completes five); file e: X X X above, O on top ->
    # a four (only e4 completes five). Two fours at once: forbidden.
    assert forbidden(DOUBLE_FOUR_TWO_LINES) == "double-four"


@pytest.mark.parametrize(
    "row",
    [
        "X.XX*.X..",  # X.XXX.X: b5 and f5 each complete a different five
        "XX.*X.XX.",  # XX.XX.XX: the two gaps each complete a five
        "XXX.*.XXX",  # XXX.X.XXX: the two gaps each complete a five, edges on both sides
    ],
)
def test_double_four_in_one_line(row: str) -> None:
    # Two fours in the same line (two different fives sharing stones) are a double-four,
    # although nothing else on the board is black.
    assert forbidden(row_and_column(row)) == "double-four"


def test_straight_four_counts_as_one_four() -> None:
    # .XXXX. has two completion points but they finish the same four stones: ONE four.
    # With a three on the file it is a 4-3 (allowed); with a four on the file a double-four.
    assert forbidden(row_and_column("..XX*X...")) is None
    assert forbidden(row_and_column("..XX*X...", "..XX")) is None
    assert forbidden(row_and_column("..XX*X...", "OXXX")) == "double-four"


def test_overlapping_fours_where_one_five_would_be_an_overline() -> None:
    # X.XX*.XX: b5 completes a..e = five (a four), but f5 would join c..h = six stones, an
    # overline, not a five: only one four in the line, so not a double-four.
    assert forbidden(row_and_column("X.XX*.XX.")) is None
    # the same with a four on the file: now exactly two fours
    assert forbidden(row_and_column("X.XX*.XX.", "OXXX")) == "double-four"


@pytest.mark.parametrize(
    ("row", "is_four"),
    [
        ("OXXX*....", True),  # blocked four: f5 completes five
        ("X.X*X....", True),  # split four X.XXX: b5 completes five
        ("XXX*.....", True),  # four against the edge: e5 completes five
        ("XX.XX*...", False),  # c5 would make six (overline) and g5 only four: not a four
        ("OXX*X.O..", True),  # b..e + f5 = five, the white stones do not matter
        ("OXX*.O...", False),  # only e5 is left between the white stones: four at most
    ],
)
def test_four_plus_file_four(row: str, is_four: bool) -> None:
    # The file holds a four (e.g. e6-e7-e8 under a white stone), so the move is a double-four
    # exactly when the row makes a four too.
    got = forbidden(row_and_column(row, "OXXX"))
    assert got == ("double-four" if is_four else None)


def test_four_three_is_allowed() -> None:
    # row: O X X X * -> a four; file: a three above the star. 4-3 is the classic winning
    # shape and is legal for black.
    assert forbidden(row_and_column("OXXX*....", "..XX")) is None


# -- double-three ----------------------------------------------------------------------------

DOUBLE_THREE = """
.........
.........
....X....
....X....
..XX*....
.........
.........
.........
.........
"""


def test_simple_double_three() -> None:
    # row: c5 d5 * -> .XXX. (e.g. b5 or f5 then makes a straight four); file: * e6 e7 the
    # same. Two threes at once: forbidden.
    assert forbidden(DOUBLE_THREE) == "double-three"


@pytest.mark.parametrize(
    ("row", "is_three"),
    [
        ("..XX*....", True),  # open three
        (".OXX*....", False),  # white right against one end: OXXX. can only become OXXXX.
        ("..XX*.O..", True),  # white two cells away: b5 still makes .XXXX. (a5..f5 free)
        ("O.XX*.O..", False),  # b5 -> OXXXX. blocked left; f5 -> .XXXXO blocked right
        (".X.X*....", True),  # split three X.XX: c5 makes the straight four .XXXX.
        ("..X*.X...", True),  # split three XX.X: e5 makes the straight four
        ("..*.XX...", True),  # split three X.XX with the star at the single end
        ("X..XX*..X", False),  # c5 or g5 make four in a row, but each has an end (b5 or
        #                        h5) that would join the far X into six: not a straight four
        ("XX*......", False),  # against the edge: XXXX. has no free end on the left
        (".XX*.....", True),  # one cell off the edge: e5 makes .XXXX. with a5 free
        ("X.X*.....", False),  # split three against the edge: b5 makes XXXX. at the edge
        ("..X.*.X..", False),  # X.X.X: no single stone makes four in a row
    ],
)
def test_row_is_a_three_or_not(row: str, is_three: bool) -> None:
    # The file above the star holds a real open three, so the move is a double-three exactly
    # when the row makes a three too (and the row alone never is).
    got = forbidden(row_and_column(row, "..XX"))
    assert got == ("double-three" if is_three else None)
    assert forbidden(row_and_column(row)) is None


FAKE_THREE_BY_FOUR_FOUR = """
.........
X........
.X...X...
..X..X...
..X.X*...
.........
.........
.........
.........
"""


def test_three_whose_only_extension_is_a_double_four_is_not_a_three() -> None:
    # Row 5: c5 . e5 * -> the split three X.XX, whose only way to a straight four is d5.
    # But with * played, d5 would make that straight four (one four) AND the four a8-b7-c6-d5
    # on the diagonal (blocked by the edge; e4 completes it): a double-four, forbidden. So
    # the row is not a real three, and * (with the real three f5-f6-f7 on its file) is only a
    # single three: allowed.
    assert forbidden(FAKE_THREE_BY_FOUR_FOUR) is None
    board, x, y = position(FAKE_THREE_BY_FOUR_FOUR)
    board[y, x] = BLACK
    assert is_forbidden(board, *parse_point("d5", 9)) == "double-four"
    # without the diagonal, d5 is playable and the row is a real three: double-three
    board, x, y = position(FAKE_THREE_BY_FOUR_FOUR)
    for name in ("a8", "b7", "c6"):
        board[parse_point(name, 9)[::-1]] = EMPTY
    assert is_forbidden(board, x, y) == "double-three"


FAKE_THREE_BY_DOUBLE_THREE = """
.........
.........
.X.X.X...
..XX.X...
..X.X*...
.........
.........
.........
.........
"""


def test_three_whose_only_extension_is_a_double_three_is_not_a_three(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The recursive case. Row 5: c5 . e5 * is a split three whose only extension is d5. With
    # * played, d5 would make a straight four on the row plus two threes: d5-d6-d7 on the
    # file and b7-c6-d5 on the diagonal (e4 then makes the straight four b7..e4). Deciding
    # that those two are real threes needs their own extension points checked (depth 2);
    # they are, so d5 is a double-three (4-3-3 is still a double-three), the row is a fake
    # three, and * has just the one real three f5-f6-f7: allowed.
    assert forbidden(FAKE_THREE_BY_DOUBLE_THREE) is None
    board, x, y = position(FAKE_THREE_BY_DOUBLE_THREE)
    board[y, x] = BLACK
    assert is_forbidden(board, *parse_point("d5", 9)) == "double-three"
    # With the recursion cut at depth 1, d5's double-three is not looked for, so d5 counts as
    # playable and * is judged a double-three: this is what the depth limit gives up.
    monkeypatch.setattr(renju, "MAX_DEPTH", 1)
    assert forbidden(FAKE_THREE_BY_DOUBLE_THREE) == "double-three"


def test_three_in_a_line_that_already_holds_a_four_is_not_counted() -> None:
    # Row: X . X X * . -> X.XXX is a four (b5 completes five); the line is a four, not also a
    # three. With a three on the file: one four + one three = allowed.
    assert forbidden(row_and_column("X.XX*....", "..XX")) is None


def test_edge_and_corner_double_three() -> None:
    # Row: * d3 e3 is an open three. Diagonal a1-b2-*: it reaches the corner, so it can
    # only become XXXX. with no free point beyond a1 (not a straight four): one three,
    # allowed. One step in from the corner (b2-c3-*) the diagonal three is real: 3x3.
    corner = """
.........
.........
.........
.........
.........
.........
..*XX....
.X.......
X........
"""
    assert forbidden(corner) is None
    one_in = """
.........
.........
.........
.........
.........
...*XX...
..X......
.X.......
.........
"""
    assert forbidden(one_in) == "double-three"


# -- five takes precedence -------------------------------------------------------------------

FIVE_WITH_DOUBLE_THREE = """
.........
.........
.....X.X.
.....XX..
OXXXX*...
.........
.........
.........
.........
"""


def test_five_wins_over_a_double_three() -> None:
    # * makes exactly five on the row (b5..f5) and at the same time two threes (file f6-f7,
    # diagonal g6-h7). Five takes precedence: not forbidden, and black wins by playing it.
    assert forbidden(FIVE_WITH_DOUBLE_THREE) is None
    board, x, y = position(FIVE_WITH_DOUBLE_THREE)
    for name in ("b5", "c5", "d5", "e5"):  # without the five the same move is a 3x3
        board[parse_point(name, 9)[::-1]] = EMPTY
    assert is_forbidden(board, x, y) == "double-three"


FIVE_WITH_OVERLINE = """
.........
.........
.....X...
.....X...
OXXXX*...
.....X...
.....X...
.....X...
.........
"""


def test_five_wins_over_an_overline_in_another_line() -> None:
    # * makes exactly five on the row and six on the file. RIF: a five takes precedence over
    # forbidden shapes, so the move is allowed and wins (interpretation documented in renju.py).
    assert forbidden(FIVE_WITH_OVERLINE) is None
    board, x, y = position(FIVE_WITH_OVERLINE)
    state = GomokuState(size=9, rule=Rule.RENJU, board=board)
    assert state.play(y * 9 + x).winner == BLACK
    assert y * 9 + x in state.winning_points(BLACK)


# -- GomokuState integration (15x15) ---------------------------------------------------------

MIDGAME = """
...............
...............
...............
..O.......O....
.......O.X.O...
...X.XO.X......
....OXXO..X.O..
.OX..X.X.O.....
...OX..XX......
.....OX..O.....
......O.X......
.........O.....
...............
...............
...............
"""  # 15 black, 15 white, black to move; f7 is a double-four and i6 a double-three

BLACK_3X3_15 = """
...............
...............
...............
...............
...............
.......X.......
.......X.......
.....XX*......O
...............
...............
...............
...............
...............
...............
O..............
"""


def state_from(text: str, to_move: int) -> tuple[GomokuState, int]:
    """A 15x15 renju state on the diagram's board with `to_move` to play, and the '*' point.
    For white to move the history needs an odd length: a black stone of the diagram stands
    in for black's last move."""
    board, x, y = position(text)
    moves: tuple[int, ...] = ()
    if to_move == WHITE:
        moves = (int(np.flatnonzero(board.reshape(-1) == BLACK)[0]),)
    return GomokuState(rule=Rule.RENJU, board=board, moves=moves), y * 15 + x


def test_play_rejects_a_forbidden_point_for_black_only() -> None:
    state, star = state_from(BLACK_3X3_15, BLACK)
    assert index_name(star, 15) == "h8"
    with pytest.raises(IllegalMove, match=r"move h8 is forbidden for black \(double-three\)"):
        state.play(star)
    # white may play there, and under the other rules black may too
    white_state, _ = state_from(BLACK_3X3_15, WHITE)
    assert white_state.play(star).board[7, 7] == WHITE
    free = GomokuState(rule=Rule.FREESTYLE, board=state.board.copy())
    assert free.play(star).board[7, 7] == BLACK


def test_legal_mask_excludes_forbidden_points_for_black() -> None:
    state, star = state_from(BLACK_3X3_15, BLACK)
    mask = state.legal_mask()
    assert not mask[star]
    assert mask.sum() == (state.board == EMPTY).sum() - 1  # nothing else is forbidden
    white_state, _ = state_from(BLACK_3X3_15, WHITE)
    assert white_state.legal_mask()[star]  # white has no restrictions
    assert GomokuState(rule=Rule.STANDARD, board=state.board.copy()).legal_mask()[star]


def test_overline_is_illegal_for_black_and_wins_for_white() -> None:
    row = "...............\n" * 7
    black = row + "....XX*XXX.....\n" + row
    state, star = state_from(black, BLACK)
    with pytest.raises(IllegalMove, match=r"forbidden for black \(overline\)"):
        state.play(star)
    assert not state.legal_mask()[star]
    assert star not in state.winning_points(BLACK)
    # the same row of white stones, white to move (a black stone in the corner for history)
    white = row + "....OO*OOO.....\n" + row[:-16] + "X.............."
    wstate, _ = state_from(white, WHITE)
    assert wstate.legal_mask()[star] and star in wstate.winning_points(WHITE)
    assert wstate.play(star).winner == WHITE


def test_winning_points_for_black_include_five_with_forbidden_shape() -> None:
    board, x, y = position(FIVE_WITH_DOUBLE_THREE)
    big = np.zeros((15, 15), dtype=np.int8)
    big[3:12, 3:12] = board  # the 9x9 diagram in the middle of a 15x15 board
    state = GomokuState(rule=Rule.RENJU, board=big)
    point = (y + 3) * 15 + x + 3
    assert state.winning_points(BLACK) == [point]
    assert state.legal_mask()[point]
    assert state.play(point).winner == BLACK


def test_forbidden_points_are_symmetric() -> None:
    # The 8 symmetries of the board move the forbidden points with it (all four directions
    # and both orientations of every pattern are handled alike).
    board = board_from_ascii(MIDGAME)
    base = forbidden_points(board)
    assert {index_name(p, 15): r for p, r in base.items()} == {
        "f7": "double-four", "i6": "double-three"}
    table = point_table(15)
    for k in range(N_SYMMETRIES):
        image = np.ascontiguousarray(transform_board(board, k))
        assert forbidden_points(image) == {int(table[k, p]): r for p, r in base.items()}


# -- an independent, slow reference: plain 2-D walking, no line tables, no candidate filter ----

DIRS = ((1, 0), (0, 1), (1, 1), (1, -1))


def _run(g: list[list[int]], x: int, y: int, dx: int, dy: int) -> int:
    size, n = len(g), 1
    for sx, sy in ((dx, dy), (-dx, -dy)):
        cx, cy = x + sx, y + sy
        while 0 <= cx < size and 0 <= cy < size and g[cy][cx] == BLACK:
            n, cx, cy = n + 1, cx + sx, cy + sy
    return n


def _end(g: list[list[int]], x: int, y: int, sx: int, sy: int) -> tuple[int, int] | None:
    """The first non-black cell from (x, y) along (sx, sy), if it is empty and on the board."""
    size = len(g)
    cx, cy = x + sx, y + sy
    while 0 <= cx < size and 0 <= cy < size and g[cy][cx] == BLACK:
        cx, cy = cx + sx, cy + sy
    return (cx, cy) if 0 <= cx < size and 0 <= cy < size and g[cy][cx] == EMPTY else None


def _fours(g: list[list[int]], x: int, y: int, dx: int, dy: int) -> int:
    completions = 0
    for sx, sy in ((dx, dy), (-dx, -dy)):
        gap = _end(g, x, y, sx, sy)
        if gap is not None:
            g[gap[1]][gap[0]] = BLACK
            completions += _run(g, gap[0], gap[1], dx, dy) == 5
            g[gap[1]][gap[0]] = EMPTY
    return 1 if completions == 2 and _run(g, x, y, dx, dy) == 4 else completions


def _straight_four(g: list[list[int]], x: int, y: int, dx: int, dy: int) -> bool:
    size = len(g)
    if _run(g, x, y, dx, dy) != 4:
        return False
    for sx, sy in ((dx, dy), (-dx, -dy)):
        end = _end(g, x, y, sx, sy)
        if end is None:
            return False
        bx, by = end[0] + sx, end[1] + sy
        if 0 <= bx < size and 0 <= by < size and g[by][bx] == BLACK:
            return False  # that end makes six, not five
    return True


def reference_forbidden(g: list[list[int]], x: int, y: int, depth: int = 0) -> str | None:
    size = len(g)
    g[y][x] = BLACK
    try:
        runs = [_run(g, x, y, dx, dy) for dx, dy in DIRS]
        if 5 in runs:
            return None
        if max(runs) > 5:
            return "overline"
        fours = [_fours(g, x, y, dx, dy) for dx, dy in DIRS]
        if sum(fours) >= 2:
            return "double-four"
        if depth >= renju.MAX_DEPTH:
            return None
        threes = 0
        for (dx, dy), f in zip(DIRS, fours, strict=True):
            if f:
                continue
            for k in (-3, -2, -1, 1, 2, 3):
                qx, qy = x + k * dx, y + k * dy
                if not (0 <= qx < size and 0 <= qy < size) or g[qy][qx] != EMPTY:
                    continue
                g[qy][qx] = BLACK
                straight = _straight_four(g, x, y, dx, dy)
                g[qy][qx] = EMPTY
                if straight and reference_forbidden(g, qx, qy, depth + 1) is None:
                    threes += 1
                    break
        return "double-three" if threes >= 2 else None
    finally:
        g[y][x] = EMPTY


def random_positions(n: int, seed: int) -> list[np.ndarray]:
    """Dense random positions in the middle of a 15x15 board, black-heavy so that many
    forbidden points of every kind occur."""
    rng = np.random.default_rng(seed)
    out = []
    region = np.array([y * 15 + x for y in range(3, 12) for x in range(3, 12)])
    for _ in range(n):
        board = np.zeros(225, dtype=np.int8)
        cells = rng.choice(region, size=int(rng.integers(15, 45)), replace=False)
        board[cells] = rng.choice([BLACK, WHITE], size=len(cells), p=[0.65, 0.35])
        out.append(board.reshape(15, 15))
    return out


def test_fast_checks_match_the_reference_everywhere() -> None:
    # `forbidden_points` (cached line tables, only the cheap candidates checked) must find
    # exactly what the slow reference finds by checking every empty point on random dense
    # positions; and every forbidden point must be among the candidates.
    reasons: dict[str, int] = {}
    for board in random_positions(40, seed=7):
        g = board.tolist()
        full = {}
        for p in np.flatnonzero(board.reshape(-1) == EMPTY):
            y, x = divmod(int(p), 15)
            r = reference_forbidden(g, x, y)
            if r is not None:
                full[int(p)] = r
        assert forbidden_points(board) == full
        assert candidate_mask(board).reshape(-1)[list(full)].all()
        for r in full.values():
            reasons[r] = reasons.get(r, 0) + 1
    assert set(reasons) == {"overline", "double-four", "double-three"}, reasons


def test_legal_mask_on_a_midgame_board_checks_only_the_candidates(monkeypatch) -> None:
    """What keeps legal_mask cheap: only the points `_candidates` lets through get the full
    forbidden-shape check, a minority of the empty points in the middle game."""
    state = GomokuState(rule=Rule.RENJU, board=board_from_ascii(MIDGAME))
    assert state.to_move == BLACK
    checked: list[int] = []
    full_check = renju._forbidden

    def counted(cells, w, i, depth, *rest):
        if depth == 0:  # deeper calls: the check's own look at the threes it would make
            checked.append(i)
        return full_check(cells, w, i, depth, *rest)

    monkeypatch.setattr(renju, "_forbidden", counted)
    mask = state.legal_mask()
    candidates = int(candidate_mask(state.board).sum())
    empty = int((state.board == EMPTY).sum())
    assert len(checked) == len(set(checked)) == candidates < empty / 2
    assert mask.sum() == empty - len(forbidden_points(state.board))


def test_is_forbidden_rejects_occupied_and_off_board_points() -> None:
    board, x, y = position(DOUBLE_THREE)
    with pytest.raises(ValueError, match="not empty"):
        is_forbidden(board, x - 1, y)
    with pytest.raises(ValueError, match="off the 9x9 board"):
        is_forbidden(board, 9, 0)
    assert forbidden_mask(board).sum() == 1
