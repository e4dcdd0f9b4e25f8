"""Go pairs are exactly symmetry-canonical: a pair and each of its 8 images canonicalise to
the same row, also when images tie on the stones hash and the move but differ in the other
planes (move ages, ko), and the running hashes along a game are the boards' hashes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.games.go.replay import (
    GoPairs,
    board_image_hashes,
    canonicalize,
    game_pairs,
    pairs_table,
    pairs_tables,
)
from services.games.symmetry import N_SYMMETRIES, point_table
from services.records.sgf import SgfGame, read_archive

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ARCHIVES = (SHARED_DATA / "kgs" / "kgs-games-dev.tar.gz",
            SHARED_DATA / "go-other" / "go-games-other-dev.tar.gz")


def images_of(inputs: np.ndarray, moves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All 8 images of each pair: ([n * 8, 4, S, S], [n * 8]), image k of pair i at 8i + k."""
    n, c, s, _ = inputs.shape
    table = point_table(s)
    out = np.empty((n, N_SYMMETRIES, c, s * s), np.int8)
    out_moves = np.empty((n, N_SYMMETRIES), np.int16)
    flat = inputs.reshape(n, c, s * s)
    for k in range(N_SYMMETRIES):
        out[:, k][:, :, table[k]] = flat
        out_moves[:, k] = np.where(moves < s * s, table[k][np.minimum(moves, s * s - 1)], moves)
    return out.reshape(n * N_SYMMETRIES, c, s, s), out_moves.reshape(-1)


def unmerged(inputs: np.ndarray, moves: np.ndarray) -> int:
    """How many pairs have an image whose canonical row differs from the pair's own."""
    canon, cmoves, hashes = canonicalize(*images_of(inputs, moves))
    n = len(inputs)
    rows = [canon.reshape(n, N_SYMMETRIES, -1)[i] for i in range(n)]
    cm = cmoves.reshape(n, N_SYMMETRIES)
    ch = hashes.reshape(n, N_SYMMETRIES)
    return sum(1 for i in range(n)
               if len({r.tobytes() for r in rows[i]}) > 1 or len(set(cm[i].tolist())) > 1
               or len(set(ch[i].tolist())) > 1)


def test_images_that_tie_on_stones_and_move_still_give_one_row() -> None:
    """Two black stones mirror each other across the diagonal and the move is the centre, so
    an image and its transpose have the same stones hash and move; their move-age planes
    differ (the stones were played at different times): the full planes decide."""
    s = 9
    inputs = np.zeros((1, 4, s, s), np.int8)
    inputs[0, 0, 6, 2] = inputs[0, 0, 2, 6] = 2  # the mover's opponent's stones
    inputs[0, 1, 6, 2] = inputs[0, 1, 2, 6] = 4
    inputs[0, 2, 6, 2], inputs[0, 2, 2, 6] = 1, 2  # played last, and the move before
    moves = np.array([4 * s + 4], np.int16)
    hashes = board_image_hashes(images_of(inputs, moves)[0][:, 0].reshape(8, -1), s)
    assert len(set(hashes[:, 0].tolist())) < N_SYMMETRIES  # some images do tie on the hash
    assert unmerged(inputs, moves) == 0
    canon, _, _ = canonicalize(*images_of(inputs, moves))
    assert len({c.tobytes() for c in canon}) == 1
    # the one chosen: of the images with the smallest stones hash, the smallest by bytes
    all_images = images_of(inputs, moves)[0].reshape(N_SYMMETRIES, -1)
    least = hashes[:, 0] == hashes[:, 0].min()
    assert least.sum() > 1
    assert canon[0].tobytes() == min(i.tobytes() for i in all_images[least])


def test_a_pass_and_an_empty_board_canonicalise_to_themselves() -> None:
    inputs = np.zeros((2, 4, 5, 5), np.int8)
    moves = np.array([25, 12], np.int16)  # a pass; the centre
    canon, cmoves, hashes = canonicalize(inputs, moves)
    assert cmoves.tolist() == [25, 12] and not canon.any() and hashes.tolist() == [0, 0]
    assert unmerged(inputs, moves) == 0


def _real_games() -> list[SgfGame]:
    if not all(p.is_file() for p in ARCHIVES):
        pytest.skip(f"Go archives not found under {SHARED_DATA} (../shared absent)")
    return [g for p in ARCHIVES for g in read_archive(p) if isinstance(g, SgfGame)]


def test_real_positions_with_tied_images_merge_with_their_mirror_images() -> None:
    """On the real archives: every position whose images tie on (stones hash, move) (an
    early, symmetric shape with the move on its axis), and whose tie the hash and move
    alone cannot break, has one canonical row for all its images. The running hashes of the
    fast replay equal the boards' own hashes on every position."""
    games = _real_games()
    tied_inputs, tied_moves = [], []
    checked_hashes = 0
    for game in games:
        pairs = game_pairs(game)
        n = len(pairs.moves)
        if not n:
            continue
        s = game.size
        hashes = pairs.image_hashes()
        np.testing.assert_array_equal(hashes, board_image_hashes(
            pairs.inputs[:, 0].reshape(n, s * s), s))
        checked_hashes += n
        table = point_table(s)
        moves = pairs.moves.astype(np.int64)
        image_moves = np.where(moves < s * s, table[:, np.minimum(moves, s * s - 1)], moves).T
        smallest = hashes.min(axis=1, keepdims=True)
        at_min = hashes == smallest
        least = np.where(at_min, image_moves, 1 << 30).min(axis=1, keepdims=True)
        tied = (at_min & (image_moves == least)).sum(axis=1) > 1
        if tied.any() and s == 19:  # (one board size per array)
            tied_inputs.append(pairs.inputs[tied])
            tied_moves.append(pairs.moves[tied])
    inputs, moves = np.concatenate(tied_inputs), np.concatenate(tied_moves)
    distinct = {(a.tobytes(), b): i for i, (a, b) in enumerate(zip(inputs, moves.tolist(),
                                                                   strict=True))}
    rows = sorted(distinct.values())
    print(f"\n{checked_hashes} positions' hashes checked; {len(inputs)} positions with tied "
          f"images ({len(rows)} distinct)")
    assert checked_hashes > 700_000 and len(inputs) > 1000
    assert unmerged(inputs[rows], moves[rows]) == 0


def test_a_batch_of_games_gives_the_rows_of_each_game() -> None:
    games = _real_games()[:40]
    pairs = [game_pairs(g) for g in games]
    pairs = [p for p in pairs if len(p.moves)]
    ids = [f"g{i}" for i in range(len(pairs))]
    rules = ["Japanese" if i % 2 else "" for i in range(len(pairs))]
    batch = pairs_tables(pairs, ids, "src", rules)
    one_by_one = [pairs_table(p, i, "src", r) for p, i, r in zip(pairs, ids, rules, strict=True)]
    assert batch.num_rows == sum(t.num_rows for t in one_by_one)
    for name in batch.column_names:
        want = [v for t in one_by_one for v in t[name].to_pylist()]
        got = batch[name].to_pylist()
        if name == "result":
            np.testing.assert_array_equal(np.array(got, float), np.array(want, float))
        else:
            assert got == want, name


def test_pairs_without_replay_captures_hash_their_boards() -> None:
    """GoPairs made without the replay's captures (the reference path) hash the boards."""
    inputs = np.zeros((1, 4, 5, 5), np.int8)
    inputs[0, 0, 1, 1] = 1
    p = GoPairs(inputs, np.array([3], np.int16), np.array([1], np.int8),
                np.array([0], np.int16), np.array([np.nan], np.float32), ["1d"], None)
    assert p.image_hashes() is None
    table = pairs_table(p, "g", "s")
    assert table["position_hash"][0].as_py() == int(
        board_image_hashes(inputs[:, 0].reshape(1, -1), 5).min())
