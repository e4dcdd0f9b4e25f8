"""Go rules on ASCII-board fixtures (minigo style), features, scoring and record replay.

Fixtures are drawn top row first ('X' Black, 'O' White, '.' empty) and named with GTP
coordinates (row 1 at the bottom, no letter I), the way the boards print.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from services.games.go.features import compact
from services.games.go.rules import (
    BLACK,
    EMPTY,
    HISTORY_LEN,
    WHITE,
    GoState,
    IllegalMove,
    board_from_ascii,
    neighbours,
    point_name,
    replay,
    sgf_name,
    sgf_point,
)
from tests.go_reference import compact_reference, legal_mask_reference, liberties_reference

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
KGS_TARBALL = SHARED_DATA / "kgs" / "kgs-games-dev.tar.gz"
GTP = "ABCDEFGHJKLMNOPQRSTUVWXYZ"


def pt(name: str, size: int = 5) -> int:
    """GTP name ('C3') -> flat index y * size + x."""
    return (int(name[1:]) - 1) * size + GTP.index(name[0].upper())


def at(s: GoState, name: str) -> int:
    return s.cells[pt(name, s.size)]


def play(s: GoState, *names: str) -> GoState:
    for name in names:
        s = s.play(None if name == "pass" else pt(name, s.size))
    return s


def reason(s: GoState, name: str | None, color: int | None = None) -> str:
    with pytest.raises(IllegalMove) as exc:
        s.play(None if name is None else pt(name, s.size), color)
    return exc.value.reason


# ---- coordinates ---------------------------------------------------------------------------------
def test_coordinates_follow_the_repository_and_sgf_conventions() -> None:
    assert pt("A1", 19) == 0 and pt("T19", 19) == 360 and pt("J1", 19) == 8
    assert sgf_point(15, 3, 19) == pt("Q16", 19)  # SGF 'pd': column p, 4th row from the top
    assert sgf_name(pt("Q16", 19), 19) == "pd" and sgf_name(pt("A1", 19), 19) == "as"
    assert point_name(pt("Q16", 19), 19) == "Q16" and point_name(None, 19) == "pass"
    board = board_from_ascii("X....\n.....\n.....\n.....\n....O")
    assert board[4, 0] == BLACK and board[0, 4] == WHITE  # board[y, x], y = 0 at the bottom
    s = GoState.from_board(board)
    assert s.board.dtype == np.int8 and (s.board == board).all()


# ---- captures ------------------------------------------------------------------------------------
CENTRE = """
.....
..X..
.XO..
..X..
.....
"""


def test_single_stone_capture_in_the_centre() -> None:
    after = GoState.from_ascii(CENTRE).play(pt("D3"))
    assert at(after, "C3") == EMPTY and at(after, "D3") == BLACK
    assert after.captures == {BLACK: 1, WHITE: 0} and after.to_move == WHITE
    assert after.ko is None  # D3 keeps three liberties: no ko


def test_multi_stone_capture_on_the_edge() -> None:
    s = GoState.from_ascii("""
        .....
        .....
        .XXX.
        XOOO.
        XOOOX
    """)
    after = s.play(pt("E2"))
    assert all(at(after, n) == EMPTY for n in ("B2", "C2", "D2", "B1", "C1", "D1"))
    assert after.captures[BLACK] == 6 and at(after, "E2") == BLACK


def test_corner_capture() -> None:
    s = GoState.from_ascii("""
        .....
        .....
        .....
        .....
        OX...
    """)
    after = s.play(pt("A2"))
    assert at(after, "A1") == EMPTY and after.captures[BLACK] == 1


def test_two_groups_captured_by_one_move() -> None:
    s = GoState.from_ascii("""
        .....
        .....
        .X.X.
        XO.OX
        .X.X.
    """)
    after = s.play(pt("C2"))
    assert at(after, "B2") == EMPTY and at(after, "D2") == EMPTY
    assert after.captures[BLACK] == 2


# ---- suicide -------------------------------------------------------------------------------------
SUICIDE = """
.....
.....
OO...
XXO..
.OO..
"""


def test_single_stone_suicide_is_illegal() -> None:
    s = GoState.from_ascii("""
        .....
        .....
        .....
        .O...
        O.O..
    """)
    assert reason(s, "B1") == "suicide"
    assert not s.legal_mask()[pt("B1")]
    assert s.is_legal(pt("B1"), WHITE)  # White may fill its own eye


def test_multi_stone_suicide_is_illegal_but_the_same_point_captures_for_the_other_side() -> None:
    s = GoState.from_ascii(SUICIDE)
    assert reason(s, "A1") == "suicide"
    after = s.play(pt("A1"), WHITE)  # White A1 takes the two black stones' last liberty
    assert at(after, "A2") == EMPTY and at(after, "B2") == EMPTY
    assert after.captures[WHITE] == 2


def test_a_move_without_liberties_that_captures_is_not_suicide() -> None:
    s = GoState.from_ascii("""
        .....
        .....
        .....
        XO...
        .XO..
    """, to_move=WHITE)
    after = s.play(pt("A1"))  # no empty neighbour, but B1 loses its last liberty
    assert at(after, "B1") == EMPTY and at(after, "A1") == WHITE


# ---- snapback and ko -----------------------------------------------------------------------------
def test_snapback_is_allowed() -> None:
    s = GoState.from_ascii("""
        .....
        .....
        XXXX.
        OOOX.
        ..OX.
    """)
    s = play(s, "B1")  # throw-in: White can take it...
    s = play(s, "A1")
    assert at(s, "B1") == EMPTY and s.captures[WHITE] == 1
    assert s.ko is None  # A1 joined A2: not a single stone, so not a ko
    s = play(s, "B1")  # ...and Black takes back five stones at once
    assert s.captures[BLACK] == 5
    assert all(at(s, n) == EMPTY for n in ("A1", "A2", "B2", "C2", "C1"))


KO = """
.....
.XO..
XO.O.
.XO..
.....
"""


def test_simple_ko_retake_is_illegal_until_a_ko_threat_is_exchanged() -> None:
    s = play(GoState.from_ascii(KO), "C3")  # Black takes the white stone on B3
    assert at(s, "B3") == EMPTY and s.ko == pt("B3")
    assert reason(s, "B3") == "ko"
    assert not s.legal_mask()[pt("B3")] and s.legal_mask()[pt("E1")]
    s = play(s, "E1", "E5")  # White's ko threat, Black answers
    assert s.ko is None
    s = play(s, "B3")  # the retake is legal now and sets the ko the other way
    assert at(s, "C3") == EMPTY and at(s, "B3") == WHITE and s.ko == pt("C3")
    assert reason(s, "C3") == "ko"


def test_a_pass_also_lifts_the_ko() -> None:
    s = play(GoState.from_ascii(KO), "C3", "pass", "pass")
    assert s.is_over
    s = play(GoState.from_ascii(KO), "C3", "pass", "E5")
    assert s.ko is None and s.is_legal(pt("B3"))


# ---- other illegal moves, set-up -----------------------------------------------------------------
def test_occupied_off_board_and_setup_errors_name_their_reason() -> None:
    s = GoState.from_ascii(CENTRE)
    assert reason(s, "C3") == "occupied"
    with pytest.raises(IllegalMove) as exc:
        s.play(25)
    assert exc.value.reason == "off board" and exc.value.point == 25
    with pytest.raises(IllegalMove, match="occupied"):
        s.add_stones(black=[pt("C4")])
    with pytest.raises(IllegalMove, match="occupied"):
        GoState(5).add_stones(black=[pt("A1")], white=[pt("A1")])
    with pytest.raises(IllegalMove, match="off board"):
        GoState(5).add_stones(white=[-1])
    with pytest.raises(ValueError, match="board size"):
        GoState(26)
    cleared = s.add_stones(empty=[pt("C3")], white=[pt("A1")])
    assert at(cleared, "C3") == EMPTY and at(cleared, "A1") == WHITE


def test_either_colour_may_move_as_in_sgf_records() -> None:
    s = GoState(9).play(pt("E5", 9), WHITE)
    assert s.to_move == BLACK and at(s, "E5") == WHITE
    s = s.play(pt("C3", 9), WHITE)
    assert at(s, "C3") == WHITE and s.to_move == BLACK


# ---- passes and scoring --------------------------------------------------------------------------
def test_two_consecutive_passes_end_the_game() -> None:
    s = play(GoState(5), "C3", "pass", "D3", "pass")
    assert not s.is_over and s.passes == 1
    s = s.play(None)
    assert s.is_over and s.move_number == 5
    assert reason(s, "A1") == "game over" and reason(s, None) == "game over"
    assert not s.legal_mask(include_pass=True).any()
    resumed = s.resume()
    assert not resumed.is_over and resumed.is_legal(pt("A1"))
    assert resumed.cells == s.cells


def test_area_score_counts_stones_and_single_colour_regions_with_komi() -> None:
    split = GoState.from_ascii("""
        .XO..
        .XO..
        .XO..
        .XO..
        .XO..
    """)
    assert split.area() == (10, 15)
    assert split.score(komi=0.5) == -5.5
    dame = GoState.from_ascii("""
        .X.O.
        .X.O.
        .X.O.
        .X.O.
        .X.O.
    """)
    assert dame.area() == (10, 10)  # the middle column touches both: nobody's
    assert dame.score(7.5) == -7.5 and dame.score(0) == 0
    assert GoState(9).score(6.5) == -6.5  # empty board: no territory for anybody
    one = GoState(9).play(pt("E5", 9))
    assert one.score(7.5) == 81 - 7.5


# ---- features ------------------------------------------------------------------------------------
def test_liberties_per_point() -> None:
    libs = GoState.from_ascii(CENTRE).liberties()
    assert libs.shape == (5, 5) and libs.dtype == np.int16
    y, x = divmod(pt("C3"), 5)
    assert libs[y, x] == 1  # the white stone in atari
    y, x = divmod(pt("C4"), 5)
    assert libs[y, x] == 3
    assert libs[0, 0] == 0  # empty point
    chain = GoState.from_ascii(SUICIDE).liberties().reshape(-1)
    assert chain[pt("A2")] == chain[pt("B2")] == 1  # one group, one liberty (A1)


def test_history_keeps_the_last_positions_and_moves() -> None:
    s = GoState(9)
    names = ["E5", "C3", "G7", "pass", "C7", "G3", "D4", "F6", "B2", "H8"]
    states = [s]
    for n in names:
        s = s.play(None if n == "pass" else pt(n, 9))
        states.append(s)
    assert len(s.history) == HISTORY_LEN and s.history[0] == s.cells
    hist = s.board_history()
    assert hist.shape == (HISTORY_LEN, 9, 9)
    for i in range(HISTORY_LEN):
        assert (hist[i] == states[-1 - i].board).all()
    assert s.last_moves[-1] == pt("H8", 9) and len(s.last_moves) == HISTORY_LEN
    assert None in s.last_moves  # the pass
    early = GoState(9).play(pt("E5", 9)).board_history(4)
    assert early[2:].sum() == 0  # zero-padded before the start
    handicap = GoState(9).add_stones(black=[pt("C3", 9), pt("G7", 9)], to_move=WHITE)
    assert len(handicap.history) == 1 and handicap.move_number == 0  # set-up is not a step
    assert handicap.play(pt("E5", 9)).board_history(2)[1].sum() == 2  # the two stones


def test_legal_mask_agrees_with_play_and_no_group_is_left_without_liberties() -> None:
    rng = random.Random(7)
    for size in (5, 7):
        s = GoState(size)
        for _ in range(400):
            mask = s.legal_mask(include_pass=True)
            for p in range(size * size):
                assert mask[p] == s.is_legal(p), (p, s.ascii())
            assert mask[-1] == (not s.is_over)
            if s.is_over:
                break
            choices = [int(p) for p in np.flatnonzero(mask[:-1])]
            move = rng.choice(choices) if choices and rng.random() > 0.03 else None
            s = s.play(move)
            libs = s.liberties().reshape(-1)
            stones = np.frombuffer(s.cells, dtype=np.int8) != EMPTY
            assert (libs[stones] > 0).all()


@pytest.mark.parametrize("size", [9, 19])
def test_compiled_liberties_and_mask_equal_the_interpreted_rules_through_long_games(
        size: int) -> None:
    """Random games long enough for big groups, captures and ko: the compiled scans agree with
    the interpreted references and with `play` (the mask, for both colours)."""
    rng = random.Random(size)
    s = GoState(size)
    captures = 0
    for _ in range(size * size * 2):
        assert s.liberties().reshape(-1).tolist() == liberties_reference(s), s.ascii()
        for colour in (None, BLACK, WHITE):
            planes = compact(s, to_move=colour)
            assert planes.dtype == np.int8 and planes.shape == (4, size, size)
            assert (planes == compact_reference(s, to_move=colour)).all(), s.ascii()
        for colour in (BLACK, WHITE):
            mask = [bool(v) for v in s.legal_mask(colour)]
            assert mask == legal_mask_reference(s, colour), s.ascii()
            assert mask == [s.is_legal(p, colour) for p in range(size * size)], s.ascii()
        choices = np.flatnonzero(s.legal_mask())
        if not len(choices):
            break
        before = sum(s.captures.values())
        s = s.play(int(rng.choice(list(choices))) if rng.random() > 0.02 else None)
        captures += sum(s.captures.values()) > before
    assert captures > 10  # the games exercised captures


# ---- replay --------------------------------------------------------------------------------------
def record(size: int, moves: list[tuple[int, str]], black=(), white=(), pl=None):
    return SimpleNamespace(
        size=size,
        setup_black=tuple(pt(n, size) for n in black),
        setup_white=tuple(pt(n, size) for n in white),
        moves=tuple((c, None if n == "pass" else pt(n, size)) for c, n in moves),
        player_to_move=pl,
    )


def test_replay_stops_at_an_illegal_move_and_reports_it() -> None:
    good = record(5, [(WHITE, "C3"), (BLACK, "D4")], black=["B2", "D2"], pl=WHITE)
    r = replay(good)
    assert r.error is None and r.played == 2 and len(r.states) == 3
    assert at(r.states[0], "B2") == BLACK and r.states[0].to_move == WHITE
    bad = record(5, [(BLACK, "B1"), (WHITE, "A2"), (BLACK, "A1"), (WHITE, "E5")],
                 white=["C1", "B2"])
    r = replay(bad)
    assert r.played == 2 and len(r.states) == 3
    assert r.error == "move 3 (B A1): suicide: A1"
    assert replay(bad, keep_states=False).states[-1].cells == r.states[-1].cells
    occupied = record(5, [(BLACK, "C3")], black=["A1"], white=["A1"])
    assert replay(occupied).error.startswith("set-up: occupied")
    assert replay(SimpleNamespace(size=30, setup_black=(), setup_white=(), moves=(),
                                  player_to_move=None)).error == "board size 30 is not supported"


def test_replay_resumes_after_two_passes_unless_told_not_to() -> None:
    r = record(5, [(BLACK, "C3"), (WHITE, "pass"), (BLACK, "pass"), (WHITE, "D4")])
    assert replay(r).error is None and replay(r).resumed == 1
    strict = replay(r, allow_resume=False)
    assert strict.error == "move 4 (W D4): game over: two consecutive passes ended the game"


def test_kgs_games_replay_legally() -> None:
    if not KGS_TARBALL.exists():
        pytest.skip(f"KGS games not found at {KGS_TARBALL} (../shared absent)")
    from services.records.sgf import SgfGame, read_archive

    games = [g for g in read_archive(KGS_TARBALL) if isinstance(g, SgfGame)]
    assert len(games) == 96  # 95 files, one of which holds two games
    results = [replay(g) for g in games]  # its speed: benchmarks/go_replay.py
    moves = sum(r.played for r in results)
    errors = {g.source: r.error for g, r in zip(games, results, strict=True) if r.error}
    assert errors == {}
    assert moves == sum(len(g.moves) for g in games)
    last = results[0].states[-1]
    assert last.move_number == len(games[0].moves)


def test_a_states_key_is_its_rules_state_and_its_last_moves() -> None:
    """Two orders of the same moves: the same key without the last moves, different keys
    while the moves in the window differ, the same again once they have left it."""
    a = GoState(9).play(0).play(10).play(2)
    b = GoState(9).play(2).play(10).play(0)
    assert a.key(0) == b.key(0) and a.key(1) != b.key(1) and a.key() != b.key()
    later_a, later_b = a.play(40).play(41).play(42), b.play(40).play(41).play(42)
    assert later_a.key(3) == later_b.key(3) and later_a.key(4) != later_b.key(4)
    assert a.key(0) != a.play(None).key(0)  # the side to move and the passes


def test_the_scan_benchmark_finds_the_compiled_scans_identical_on_real_positions() -> None:
    """benchmarks/go_scan.py on a few KGS games: every position's liberties and legal mask are
    the references' (its exit status says so), and it prints the speed ratio."""
    if not KGS_TARBALL.exists():
        pytest.skip(f"KGS games not found at {KGS_TARBALL} (../shared absent)")
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "go_scan.py"), "--games", "4",
                          str(KGS_TARBALL)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    identical = [line.split()[-2] for line in out.stdout.splitlines() if "identical" in line]
    done, total = identical[0].split("/")
    assert done == total and int(total.replace(",", "")) > 100
    assert "ratio" in out.stdout


def test_the_compiled_scans_neighbour_table_is_the_rules_neighbours_on_every_size() -> None:
    from services.games.grid_kernels import neighbour_table

    for size in range(2, 26):
        table = neighbour_table(size)
        assert [tuple(int(q) for q in row if q >= 0) for row in table] == list(neighbours(size))


@pytest.mark.parametrize("size", [2, 3, 25])
def test_compiled_scans_on_the_smallest_and_largest_boards(size: int) -> None:
    rng = random.Random(size)
    s = GoState(size)
    for _ in range(size * size * 2):
        assert s.liberties().reshape(-1).tolist() == liberties_reference(s), s.ascii()
        for colour in (BLACK, WHITE):
            assert [bool(v) for v in s.legal_mask(colour)] == legal_mask_reference(s, colour)
        assert (compact(s) == compact_reference(s)).all()
        choices = np.flatnonzero(s.legal_mask())
        if not len(choices) or s.is_over:
            break
        s = s.play(int(rng.choice(list(choices))) if rng.random() > 0.1 else None)
