"""Gomoku rules, coordinates, encodings and the 8 board symmetries."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.coords import CoordinateError, parse_point, point_name
from services.games.encoding import planes_numpy, planes_torch
from services.games.gomoku.rules import (
    BLACK,
    EMPTY,
    WHITE,
    GomokuState,
    IllegalMove,
    Rule,
    board_from_ascii,
)
from services.games.symmetry import N_SYMMETRIES, inverse, point_table, transform_board

S = 15


def idx(name: str) -> int:
    x, y = parse_point(name, S)
    return y * S + x


def play(names: list[str], rule: Rule = Rule.FREESTYLE) -> GomokuState:
    return GomokuState.from_moves([idx(n) for n in names], rule=rule)


def interleave(black: list[str], white: list[str]) -> list[str]:
    out = []
    for i, b in enumerate(black):
        out.append(b)
        if i < len(white):
            out.append(white[i])
    return out


FILLER_WHITE = ["a1", "a3", "a5", "a7", "a9", "a11"]


@pytest.mark.parametrize(
    "line",
    [
        ["d4", "e4", "f4", "g4", "h4"],  # horizontal
        ["d4", "d5", "d6", "d7", "d8"],  # vertical
        ["d4", "e5", "f6", "g7", "h8"],  # diagonal
        ["h4", "g5", "f6", "e7", "d8"],  # anti-diagonal
    ],
)
def test_five_wins_in_every_direction(line: list[str]) -> None:
    before = play(interleave(line[:4], FILLER_WHITE[:4]))
    assert before.winner == EMPTY
    after = before.play(idx(line[4]))
    assert after.winner == BLACK
    assert after.is_over
    assert not after.legal_mask().any()
    with pytest.raises(IllegalMove, match="after the game ended"):
        after.play(idx("o15"))


def test_white_five_and_four_is_not_a_win() -> None:
    state = play(interleave(["a1", "a3", "a5", "a7", "o15"], ["h8", "h9", "h10", "h11"]))
    assert state.winner == EMPTY and state.to_move == WHITE
    assert state.play(idx("h12")).winner == WHITE


def test_overline_counts_only_in_freestyle() -> None:
    black = ["c3", "d3", "e3", "g3", "h3", "f3"]  # f3 joins 5 + 1: six in a row
    white = ["a10", "a12", "a14", "c10", "c12"]
    free = play(interleave(black[:5], white), Rule.FREESTYLE).play(idx("f3"))
    assert free.winner == BLACK
    exact = play(interleave(black[:5], white), Rule.STANDARD).play(idx("f3"))
    assert exact.winner == EMPTY


def test_occupied_and_off_board_moves_are_rejected() -> None:
    state = play(["h8"])
    with pytest.raises(IllegalMove, match="occupied"):
        state.play(idx("h8"))
    with pytest.raises(IllegalMove, match="off the 15x15 board"):
        state.play(S * S)
    with pytest.raises(IllegalMove, match="off the 15x15 board"):
        state.play(-1)


def test_coordinates_follow_renjunet_notation() -> None:
    assert parse_point("h8", S) == (7, 7)
    assert parse_point("a1", S) == (0, 0)
    assert parse_point("o15", S) == (14, 14)
    assert point_name(14, 0) == "o1"
    for bad in ("p1", "a0", "a16", "z", "", "h"):
        with pytest.raises(CoordinateError):
            parse_point(bad, S)


def test_coordinates_are_ascii_only() -> None:
    """Names no other program reads must not stand for points: `int` reads a fullwidth or an
    Arabic-Indic digit, and lower() turns the Kelvin sign into 'k'."""
    assert parse_point(" H8 ", S) == (7, 7) and parse_point("k4", S) == (10, 3)
    for bad in ("h\uff18", "h\u0668", "\u212a4", "h1_0", "h+8", "h 8"):
        with pytest.raises(CoordinateError, match="unknown coordinate"):
            parse_point(bad, S)


def test_gtp_vertices_are_ascii_only() -> None:
    from services.coords import VertexError, parse_gtp_vertex

    assert parse_gtp_vertex("q16", 19) == 15 * 19 + 15 and parse_gtp_vertex(" PASS", 19) is None
    for bad in ("D\uff14", "\u212a4", "pa\u017fs", "I5", "T20", "D1_0"):  # long s uppers to S
        with pytest.raises(VertexError, match="not a vertex"):
            parse_gtp_vertex(bad, 19)


def test_ascii_fixture_matches_played_moves() -> None:
    state = play(["h8", "h9", "i8"])
    board = board_from_ascii("\n".join(
        "".join("X" if (r, c) in {(7, 7), (7, 8)} else "O" if (r, c) == (8, 7) else "."
                for c in range(S)) for r in range(S - 1, -1, -1)))
    assert np.array_equal(board, state.board)


def test_symmetries_round_trip_and_move_with_the_board() -> None:
    rng = np.random.default_rng(0)
    board = rng.integers(0, 3, size=(S, S)).astype(np.int8)
    table = point_table(S)
    images = set()
    for k in range(N_SYMMETRIES):
        image = transform_board(board, k)
        assert np.array_equal(transform_board(image, inverse(k)), board)
        flat = np.empty(S * S, np.int8)
        flat[table[k]] = board.reshape(-1)  # point p moves to table[k, p]
        assert np.array_equal(flat.reshape(S, S), image)
        images.add(image.tobytes())
    assert len(images) == N_SYMMETRIES  # a random board has 8 distinct images


def test_planes_numpy_and_torch_agree() -> None:
    boards = np.random.default_rng(1).integers(0, 3, size=(4, S, S)).astype(np.int8)
    planes = planes_numpy(boards)
    assert planes.shape == (4, 3, S, S)
    assert np.array_equal(planes.sum(axis=1), np.ones((4, S, S)))
    assert np.array_equal(planes[:, 0], boards == BLACK)
    assert np.array_equal(planes[:, 2], boards == EMPTY)
    assert np.array_equal(planes_torch(torch.from_numpy(boards)).numpy(), planes)
