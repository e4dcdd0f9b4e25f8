"""SGF export of Gomoku games, and `movepred play` against the real search service.

The written text is checked literally for a known game and parsed back by two readers: sgfmill
(which reads any GM) and the project's own Go-oriented `services.records.sgf.read_sgf`, which
rejects GM[4] by design ("not a Go game") but, given the same text as GM[1], must read the same
points (it shares the repository's coordinate convention, so this checks the row flip).

`movepred play` needs a real Triton (skipped without a ``tritonserver`` binary).
"""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path

import pytest
from sgfmill import sgf

from services import cli
from services.coords import parse_point
from services.games.gomoku.rules import BLACK, WHITE, GomokuState, Rule
from services.protocols.sgf_export import play_game, result_of
from services.records.sgf import SgfGame, SgfRejected, read_sgf
from services.records.sgf_writer import (
    app_version,
    game_to_sgf,
    parse_sgf_point,
    sgf_point,
    write_sgf,
)
from services.search.client import SearchClient
from tests.triton_fixtures import search_service, triton_server  # noqa: F401  (fixtures)


def idx(name: str) -> int:
    x, y = parse_point(name, 15)
    return y * 15 + x


def sgfmill_moves(text: str) -> tuple[sgf.Sgf_game, list[tuple[int, int]]]:
    """(game, [(colour 1/2, point y * 15 + x)]) via sgfmill (rows count from the bottom)."""
    game = sgf.Sgf_game.from_string(text)
    moves = []
    for node in game.get_main_sequence()[1:]:
        colour, (row, col) = node.get_move()
        moves.append((BLACK if colour == "b" else WHITE, row * game.get_size() + col))
    return game, moves


def test_sgf_points() -> None:
    assert sgf_point(idx("h8")) == "hh"  # the centre
    assert sgf_point(idx("a1")) == "ao"  # bottom-left: last row letter
    assert sgf_point(idx("a15")) == "aa"  # top-left
    assert sgf_point(idx("o15")) == "oa"
    assert sgf_point(idx("i9")) == "ig"
    assert [parse_sgf_point(sgf_point(p)) for p in range(225)] == list(range(225))
    with pytest.raises(ValueError):
        sgf_point(225)
    with pytest.raises(ValueError):
        parse_sgf_point("pa")


GAME = [idx("h8"), idx("i9"), idx("a1"), idx("o15")]


def test_known_game_text() -> None:
    text = game_to_sgf(
        GAME,
        rule=Rule.RENJU,
        black="Alice",
        white="Bob [x]",
        result="B+",
        comments={1: "block ]\\ here"},
        date=dt.date(2024, 5, 6),
    )
    assert text == (
        f"(;FF[4]GM[4]CA[UTF-8]AP[movepred:{app_version()}]SZ[15]RU[renju]"
        "PB[Alice]PW[Bob [x\\]]DT[2024-05-06]RE[B+]\n"
        ";B[hh];W[ig]C[block \\]\\\\ here]\n"
        ";B[ao];W[oa])\n"
    )


def test_round_trip_through_sgfmill_and_the_project_reader() -> None:
    state = GomokuState.from_moves([idx(m) for m in ["h8", "a1", "i8", "a2", "j8", "a3"]])
    moves = [*state.moves, idx("k8"), idx("b15"), idx("l8")]
    final = GomokuState.from_moves(moves)
    assert result_of(final) == "B+"
    comments = {0: "first move", 8: "five: g8-l8\nline two"}
    text = game_to_sgf(
        moves,
        rule="standard",
        white="white\nplayer",
        result=result_of(final),
        comments=comments,
        game_comment="a test game",
        event="unit test",
    )
    game, read = sgfmill_moves(text)
    root = game.get_root()
    assert root.get("GM") == 4 and root.get("SZ") == 15 and root.get("FF") == 4
    assert root.get("RU") == "standard" and root.get("RE") == "B+"
    assert root.get("PB") == "movepred" and root.get("PW") == "white player"
    assert root.get("GC") == "a test game" and root.get("EV") == "unit test"
    assert root.get("AP") == ("movepred", app_version())
    assert dt.date.fromisoformat(root.get("DT")) == dt.date.today()
    assert read == [(BLACK if i % 2 == 0 else WHITE, p) for i, p in enumerate(moves)]
    nodes = game.get_main_sequence()[1:]
    assert {i: n.get("C") for i, n in enumerate(nodes) if n.has_property("C")} == comments

    # the project's reader is for Go: GM[4] is turned away with a reason, never an exception
    (rejected,) = read_sgf(text, source="export.sgf")
    assert isinstance(rejected, SgfRejected) and rejected.reason.startswith("not a Go game (GM[4]")
    (as_go,) = read_sgf(text.replace("GM[4]", "GM[1]"), source="export.sgf")
    assert isinstance(as_go, SgfGame), as_go
    assert as_go.size == 15 and as_go.result_raw == "B+" and as_go.winner == BLACK
    assert list(as_go.moves) == read  # same points, rows counted from the bottom


def test_invalid_games_are_refused() -> None:
    with pytest.raises(ValueError, match=r"moves\[1\]: point hh is already occupied"):
        game_to_sgf([idx("h8"), idx("h8")])
    with pytest.raises(ValueError, match=r"moves\[0\]: point 225 is off the 15x15 board"):
        game_to_sgf([225])
    with pytest.raises(ValueError, match=r"comments for moves \[2\]"):
        game_to_sgf(GAME[:2], comments={2: "no such move"})
    with pytest.raises(ValueError):
        game_to_sgf(GAME, rule="caro")


def test_write_sgf_and_empty_game(tmp_path: Path) -> None:
    path = write_sgf(tmp_path / "deep" / "g.sgf", GAME, result="?", date="2024-01-02")
    text = path.read_text(encoding="utf-8")
    assert text == game_to_sgf(GAME, result="?", date="2024-01-02")
    assert "RU[freestyle]" in text and "RE[?]" in text and "PW[movepred]" in text
    empty = game_to_sgf([], result=None, date="2024-01-02")
    assert "RE[" not in empty and empty.endswith("DT[2024-01-02])\n")
    game, moves = sgfmill_moves(empty)
    assert moves == [] and game.get_size() == 15


def test_result_of() -> None:
    assert result_of(GomokuState()) is None
    white_five = ["a1", "h8", "a3", "h9", "a5", "h10", "a7", "h11", "a9", "h12"]
    assert result_of(GomokuState.from_moves([idx(m) for m in white_five])) == "W+"


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_play_reports_a_dead_service(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.sgf"
    target = f"127.0.0.1:{closed_port()}"
    assert cli.main(["play", "--target", target, "--out", str(out)]) == cli.EXIT_RPC_ERROR
    assert "UNAVAILABLE" in capsys.readouterr().err and not out.exists()
    assert cli.main(["play", "--visits", "-1", "--out", str(out)]) == cli.EXIT_USAGE


# --------------------------------------------------------------------------- with real Triton


def replay(path: Path, rule: Rule) -> tuple[sgf.Sgf_game, GomokuState]:
    game, moves = sgfmill_moves(path.read_text(encoding="utf-8"))
    state = GomokuState(rule=rule)
    for i, (colour, point) in enumerate(moves):
        assert colour == (BLACK if i % 2 == 0 else WHITE)
        state = state.play(point)  # IllegalMove if the service played an illegal move
    return game, state


@pytest.mark.timeout(240)
def test_movepred_play_writes_a_legal_game(
    service: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "game.sgf"
    argv = ["play", "--target", service, "--visits", "1", "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "  1. black " in printed and f"wrote {out}" in printed
    game, state = replay(out, Rule.FREESTYLE)
    root = game.get_root()
    assert root.get("GM") == 4 and root.get("RU") == "freestyle"
    assert "gomoku_policy v1, 1 visit)" in root.get("PB")
    # played to the end: five (B+ / W+) or a full board (0); never stopped early
    assert state.is_over
    assert root.get("RE") == result_of(state)
    first = game.get_main_sequence()[1]
    assert "visits" in first.get("C") and "/1" in first.get("C")


@pytest.mark.timeout(240)
def test_movepred_play_move_limit_and_renju(service: str, tmp_path: Path) -> None:
    out = tmp_path / "renju.sgf"
    argv = ["play", "--target", service, "--visits", "4", "--rule", "renju"]
    assert cli.main([*argv, "--max-moves", "12", "--out", str(out), "--quiet"]) == 0
    game, state = replay(out, Rule.RENJU)
    assert game.get_root().get("RU") == "renju"
    if state.is_over:  # five within 12 moves: the result says who
        assert game.get_root().get("RE") == result_of(state)
    else:
        assert len(state.moves) == 12 and game.get_root().get("RE") == "?"


@pytest.mark.timeout(240)
def test_play_game_with_a_time_budget(service: str) -> None:
    with SearchClient(service) as client:
        game = play_game(client, max_visits=0, max_time_ms=50, max_moves=4)
    assert len(game.moves) == 4 and game.result == "?"
    assert game.player.endswith("50 ms)")
    GomokuState.from_moves(game.moves)
    assert game.record_text(".sgf").count(";B[") == 2
