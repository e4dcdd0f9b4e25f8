"""Go pairs: compact inputs from real KGS games, canonical under symmetry, pass moves kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.games.go.replay import (
    canonicalize,
    game_pairs,
    pack_planes,
    packed_width,
    pairs_table,
    unpack_planes,
)
from services.games.go.rules import MAX_SIZE, MIN_SIZE
from services.games.symmetry import N_SYMMETRIES, point_table
from services.records.sgf import SgfGame, read_sgf

KGS_LOOSE = Path(__file__).resolve().parents[2] / "shared" / "data" / "kgs" / "loose"


def first_kgs_game() -> SgfGame:
    files = sorted(KGS_LOOSE.glob("*.sgf")) if KGS_LOOSE.exists() else []
    if not files:
        pytest.skip(f"real KGS games not found at {KGS_LOOSE} (../shared absent)")
    return next(g for g in read_sgf(files[0]) if isinstance(g, SgfGame))


def test_pairs_of_a_real_game_follow_its_moves() -> None:
    game = first_kgs_game()
    pairs = game_pairs(game)
    assert pairs.error is None
    n = len(game.moves)
    assert len(pairs.moves) == n and pairs.inputs.shape[1:] == (4, game.size, game.size)
    for i in (0, n // 2, n - 1):
        color, point = game.moves[i]
        assert pairs.to_move[i] == color
        assert pairs.moves[i] == (game.size**2 if point is None else point)
        if point is not None:
            assert pairs.inputs[i, 0].flat[point] == 0  # the move goes on an empty point
    assert pairs.inputs[0, 0].sum() == 0 or game.setup_black or game.setup_white
    assert np.isnan(pairs.results).all() or set(np.unique(pairs.results)) <= {0.0, 0.5, 1.0}


def test_every_image_of_a_position_canonicalises_to_one_row() -> None:
    pairs = game_pairs(first_kgs_game())
    i = len(pairs.moves) // 2
    s = pairs.inputs.shape[-1]
    table = point_table(s)
    images = np.empty((N_SYMMETRIES, 4, s * s), np.int8)
    moves = np.empty(N_SYMMETRIES, np.int16)
    for k in range(N_SYMMETRIES):
        images[k][:, table[k]] = pairs.inputs[i].reshape(4, -1)
        moves[k] = table[k][pairs.moves[i]] if pairs.moves[i] < s * s else pairs.moves[i]
    canon, cmoves, hashes = canonicalize(images.reshape(N_SYMMETRIES, 4, s, s), moves)
    assert len({c.tobytes() for c in canon}) == 1
    assert len(set(cmoves.tolist())) == 1 and len(set(hashes.tolist())) == 1


def test_pass_moves_survive_canonicalisation() -> None:
    inputs = np.zeros((2, 4, 9, 9), np.int8)
    inputs[:, 0, 2, 3] = 1
    moves = np.array([81, 81], np.int16)
    _, cmoves, _ = canonicalize(inputs, moves)
    assert cmoves.tolist() == [81, 81]


def test_pairs_table_has_one_row_per_move() -> None:
    game = first_kgs_game()
    table = pairs_table(game_pairs(game), "g1", "loose")
    assert table.num_rows == len(game.moves)
    assert len(table["board"][0].as_py()) == 4 * game.size**2
    assert set(table["game"].to_pylist()) == {"go"}


@pytest.mark.parametrize("size", range(MIN_SIZE, MAX_SIZE + 1))
def test_packing_round_trips_on_every_board_size(size: int) -> None:
    """Each size leaves its own partial last byte per plane (cells mod 5, 3, 8): random
    planes at every value of their range pack and unpack to themselves."""
    area = size * size
    rng = np.random.default_rng(size)
    bounds = [[3] * area + [5] * area + [5] * area + [2] * area]
    boards = rng.integers(0, bounds, (50, 4 * area), dtype=np.uint8)
    packed = pack_planes(boards, size)
    assert packed.shape == (50, packed_width(size))
    assert (unpack_planes(packed, size) == boards).all()
