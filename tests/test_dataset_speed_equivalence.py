"""The vectorised ingest path gives exactly what the simple reference implementation gives.

`replay_games`, `canonical_pairs`, `canonicalize`, `source_pairs` and `deduplicate` replaced
per-move replays, 8 full-board images per pair, Python bytes per row and an Arrow group_by
(benchmarks/ingest.py measures by how much). Those plain versions are `replay` and the
functions of tests/reference_impls.py; here both run on the shipped sample, on the real
RenjuNet-derived games of ../shared (skipped when absent) and on corrupted and adversarial
inputs, and must agree value for value, down to the bytes of the shards they lead to.
"""

from __future__ import annotations

import dataclasses
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from services.dataset import build, splits
from services.dataset.build import deduplicate
from services.dataset.shards import SPLITS, split_parts, write_split_shards
from services.dataset.splits import split_codes, split_of
from services.games import canonical, pair_tables
from services.games.canonical import canonical_pairs, canonicalize, zobrist_table
from services.games.gomoku.replay import pairs_table, replay, replay_games, source_pairs
from services.games.gomoku.rules import Rule
from services.games.symmetry import N_SYMMETRIES, point_table
from services.records import rif
from services.records.rif import RifGame, read_rif
from services.records.rif_writer import write_rif
from tests.conftest import RENJUNET_TSV, SAMPLE_RIF, TsvGame, renjunet_games
from tests.reference_impls import (
    canonicalize_reference,
    deduplicate_reference,
    pairs_table_reference,
    source_pairs_reference,
)

S = 15
SORT_KEY = [("position_hash", "ascending"), ("move", "ascending"), ("board", "ascending")]


def sample_games() -> list[tuple[int, ...]]:
    return [g.moves for g in read_rif(SAMPLE_RIF) if isinstance(g, RifGame)]


def real_games() -> list[tuple[int, ...]]:
    return [g.moves for g in renjunet_games()]


def corrupted(games: list[tuple[int, ...]], seed: int = 0) -> list[tuple[int, ...]]:
    """Games broken the ways records break: repeated and off-board points, moves after a five,
    empty games, random fillings of the board (fives anywhere), and a few intact ones."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(400):
        m = list(games[i % len(games)])
        kind = i % 7
        if kind == 0 and len(m) > 2:
            m.insert(int(rng.integers(1, len(m))), m[int(rng.integers(0, len(m) - 1))])
        elif kind == 1:
            m.insert(int(rng.integers(0, len(m) + 1)), int(rng.choice([-1, 225, 400])))
        elif kind == 2:  # play on after the game's last (often winning) move
            m += [p for p in rng.permutation(S * S).tolist() if p not in m][:3]
        elif kind == 3:
            m = rng.permutation(S * S)[: int(rng.integers(0, S * S + 1))].tolist()
        elif kind == 4:
            m = []
        elif kind == 5:
            m = m[: int(rng.integers(1, len(m) + 1))]
        out.append(tuple(m))
    return out


@pytest.mark.parametrize("rule", [Rule.FREESTYLE, Rule.STANDARD, Rule.RENJU])
def test_replay_games_gives_what_replay_gives(rule: Rule) -> None:
    games = sample_games()[:60] + corrupted(sample_games())
    if rule is Rule.RENJU:
        games = games[::4]  # replayed one by one either way: a sample is enough
    batch = replay_games(games, S, rule)
    one_by_one = [replay(g, S, rule) for g in games]
    assert batch.errors == [r.error for r in one_by_one]
    assert batch.legal.tolist() == [len(r.moves) for r in one_by_one]
    assert np.array_equal(batch.moves, np.concatenate([r.moves for r in one_by_one]))
    assert np.array_equal(batch.plies, np.concatenate([r.plies for r in one_by_one]))
    assert batch.moves.dtype == np.int16 and batch.plies.dtype == np.int16
    assert any(e and "after the game ended" in e for e in batch.errors)
    assert any(e and "occupied" in e for e in batch.errors)
    assert any(e and "off the" in e for e in batch.errors)


def test_replay_games_on_real_games() -> None:
    games = real_games() + corrupted(real_games(), seed=1)
    batch = replay_games(games)
    one_by_one = [replay(g) for g in games]
    assert batch.errors == [r.error for r in one_by_one]
    assert batch.legal.tolist() == [len(r.moves) for r in one_by_one]


def _assert_same(got: tuple, want: tuple) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b)


@pytest.fixture(scope="module")
def sample_and_corrupted() -> tuple[list[tuple[int, ...]], tuple]:
    """The sample's games and corrupted copies, with their eight-image reference pairs
    (computed once: the reference is the slow part and does not depend on the block size)."""
    games = sample_games() + corrupted(sample_games(), seed=2)
    reference = [replay(g) for g in games]
    boards = np.concatenate([r.boards for r in reference])
    moves = np.concatenate([r.moves for r in reference])
    return games, canonicalize_reference(boards, moves, S)


@pytest.mark.parametrize("block_rows", [None, 7, 1000])
def test_canonical_pairs_match_the_eight_image_reference(monkeypatch, block_rows,
                                                         sample_and_corrupted) -> None:
    if block_rows:  # blocks end at game boundaries: small ones cut between many games
        monkeypatch.setattr(canonical, "_BLOCK_ROWS", block_rows)
    games, reference = sample_and_corrupted
    batch = replay_games(games)
    _assert_same(canonical_pairs(batch.moves, batch.legal, S), reference)


def test_canonical_pairs_on_real_games() -> None:
    reference = [replay(g) for g in real_games()]
    lengths = np.array([len(r.moves) for r in reference])
    boards = np.concatenate([r.boards for r in reference])
    moves = np.concatenate([r.moves for r in reference])
    _assert_same(canonical_pairs(moves, lengths, S), canonicalize_reference(boards, moves, S))


def test_canonicalize_matches_reference_on_symmetric_and_random_boards() -> None:
    rng = np.random.default_rng(3)
    table = point_table(S)
    boards = [np.zeros(S * S, np.int8)]  # every image the same board: ties broken by move, k
    centre = np.zeros(S * S, np.int8)
    centre[112] = 1
    boards.append(centre)
    for _ in range(40):
        b = np.zeros(S * S, np.int8)
        b[rng.choice(S * S, int(rng.integers(0, 60)), replace=False)] = rng.integers(1, 3)
        boards.append(b)
    images, moves = [], []
    for b in boards:
        move = int(rng.integers(0, S * S))
        for k in range(N_SYMMETRIES):
            image = np.empty_like(b)
            image[table[k]] = b
            images.append(image)
            moves.append(table[k][move])
    images, moves = np.array(images), np.array(moves, np.int16)
    got = canonicalize(images, moves, S)
    _assert_same(got, canonicalize_reference(images, moves, S))
    assert len({row.tobytes() for row in got[0].reshape(-1, 8, S * S)[0]}) == 1


def test_hashes_canonical_forms_and_splits_are_pinned() -> None:
    # literals from the original implementation: the seed, the keys, the canonical choice and
    # the split mixing must never change (every hash and split would move)
    table = zobrist_table(S)
    assert [int(table[112, 1]), int(table[0, 2]), int(table[224, 1])] == [
        7905122306795958721, 12332897213139896896, 12300948294674757661]
    game = replay([112, 113, 127, 98, 140, 30])
    _, moves, hashes = canonical_pairs(game.moves, [len(game.moves)], S)
    assert hashes.tolist() == [0, 7905122306795958721, 3879863540958434945,
                               885510002196869252, 1513241926993580489, 3070342711620867532]
    assert moves.tolist() == [112, 97, 97, 128, 84, 2]
    assert split_of(hashes).tolist() == ["test", "train", "train", "train", "validation",
                                         "train"]
    assert np.array(splits.SPLIT_NAMES)[split_codes(hashes)].tolist() == \
        split_of(hashes).tolist()
    edge = np.array([0, 1, 2**63, 12345678901234567890, 2**64 - 1], np.uint64)
    assert split_of(edge).tolist() == ["test", "train", "train", "train", "train"]


def _tsv_games() -> list:
    return renjunet_games() if RENJUNET_TSV.exists() else []


@pytest.fixture(scope="module")
def mixed_rif(tmp_path_factory) -> Path:
    """Sample and real games, with records the reader rejects and games replay refuses
    interleaved, so quarantine order matters."""
    games = [g for g in read_rif(SAMPLE_RIF) if isinstance(g, RifGame)][:150]
    real = _tsv_games()
    bad = [TsvGame(f"bad-{i}", g, 1.0, "x", "y", "z")
           for i, g in enumerate(corrupted([g.moves for g in games], seed=5)[:60])
           if g and all(0 <= p < S * S for p in g) and len(set(g)) == len(g)]
    mixed: list = []
    for i, g in enumerate([*games, *real]):
        mixed.append(dataclasses.replace(g, game_id=f"{i}") if isinstance(g, RifGame)
                     else dataclasses.replace(g, game_id=f"r{i}"))
        if i % 5 == 0 and bad:
            mixed.append(bad.pop())
    path = write_rif(mixed, tmp_path_factory.mktemp("mixed") / "mixed.rif")
    text = path.read_text().replace(
        "</games>", '<game id="x1"><move>h8 p16</move></game><game id="x2"><move>h8 h8</move>'
        '</game><game id="3"><move>h8</move></game></games>')
    path.write_text(text)
    return path


def test_source_pairs_matches_reference(mixed_rif: Path) -> None:
    fast = source_pairs("mixed", read_rif(mixed_rif))
    slow = source_pairs_reference("mixed", read_rif(mixed_rif))
    assert fast.pairs.schema == slow.pairs.schema
    assert fast.pairs.equals(slow.pairs)
    assert (fast.read, fast.ingested) == (slow.read, slow.ingested)
    assert fast.quarantine == slow.quarantine  # same rows, same order
    assert fast.quarantined > 10 and fast.read == fast.ingested + fast.quarantined


def test_source_pairs_of_nothing_and_of_rejects_only() -> None:
    assert source_pairs("none", []).pairs.equals(source_pairs_reference("none", []).pairs)
    data = b'<database><games><game id="1"><move>z9</move></game></games></database>'
    fast, slow = (f("bad", read_rif(data)) for f in (source_pairs, source_pairs_reference))
    assert fast.pairs.equals(slow.pairs) and fast.quarantine == slow.quarantine


def test_pairs_table_matches_reference() -> None:
    records = [g for g in read_rif(SAMPLE_RIF) if isinstance(g, RifGame)][:20]
    games = [g.moves for g in records]
    reps = [replay(g) for g in games]
    args = (np.concatenate([r.boards for r in reps]), np.concatenate([r.moves for r in reps]),
            np.concatenate([r.to_move for r in reps]), np.concatenate([r.plies for r in reps]),
            [f"g{i}" for i, r in enumerate(reps) for _ in r.moves], "s")
    results = pair_tables.mover_results(
        np.concatenate([np.full(len(r.moves), g.bresult, np.float32)
                        for g, r in zip(records, reps, strict=True)]), args[3])
    assert pairs_table(*args, results).equals(pairs_table_reference(*args, results))
    assert set(np.unique(results).tolist()) <= {0.0, 0.5, 1.0}


def _chunked(table: pa.Table, rows: int) -> pa.Table:
    return pa.concat_tables([table.slice(i, rows) for i in range(0, table.num_rows, rows)])


def _shard_order_keys(table: pa.Table) -> list[tuple]:
    rank = {s: i for i, s in enumerate(SPLITS)}
    return [(rank[r["split"]], r["position_hash"], r["move"], r["board"])
            for r in table.select(["split", "position_hash", "move", "board"]).to_pylist()]


def _assert_dedup_equal(tables: list[pa.Table], ordered: bool = True) -> pa.Table:
    fast = deduplicate(tables)
    slow = deduplicate_reference(tables)
    assert fast.schema == slow.schema
    assert fast.sort_by(SORT_KEY).equals(slow.sort_by(SORT_KEY))
    if ordered:  # the shards' order: split, then (hash, move, board bytes)
        keys = _shard_order_keys(fast)
        assert keys == sorted(keys)
    return fast


@pytest.fixture(scope="module")
def real_pairs(mixed_rif: Path) -> pa.Table:
    return source_pairs("mixed", read_rif(mixed_rif)).pairs


def test_deduplicate_matches_reference(real_pairs: pa.Table) -> None:
    sample = source_pairs("sample", read_rif(SAMPLE_RIF)).pairs
    out = _assert_dedup_equal([real_pairs, sample])
    assert out.num_rows < real_pairs.num_rows + sample.num_rows
    # chunked the way the flow reads its intermediate files back, and with sliced chunks
    _assert_dedup_equal([_chunked(real_pairs, 1000), _chunked(sample, 333)])
    _assert_dedup_equal([real_pairs.slice(17, 5000)])
    counts = np.random.default_rng(7).integers(1, 4, real_pairs.num_rows).astype(np.int32)
    plies = np.random.default_rng(8).integers(0, 200, real_pairs.num_rows).astype(np.int16)
    weighted = real_pairs.set_column(real_pairs.schema.get_field_index("count"), "count",
                                     pa.array(counts))
    weighted = weighted.set_column(weighted.schema.get_field_index("ply"), "ply",
                                   pa.array(plies))
    _assert_dedup_equal([weighted, real_pairs])
    _assert_dedup_equal([real_pairs.slice(0, 0)])


def test_deduplicate_string_minimums_every_way(real_pairs: pa.Table) -> None:
    n = real_pairs.num_rows
    rng = np.random.default_rng(6)
    names = ["a", "b", "ab", "", "zz\x7f", "é", "王", "12345678", "123456789", "a\x00", "a\x00b"]
    for values in (names[:8], names):  # <= 8 bytes and no NUL, then the general path
        pick = rng.integers(0, len(values), n)
        strings = pa.array([values[i] for i in pick], pa.string())
        table = real_pairs.set_column(real_pairs.schema.get_field_index("game_id"), "game_id",
                                      strings)
        table = table.set_column(table.schema.get_field_index("source"), "source",
                                 pa.array([values[i] for i in pick[::-1]], pa.string()))
        _assert_dedup_equal([_chunked(table, 997)])
    # one source per chunk, two sources
    half = real_pairs.slice(0, n // 2)
    other = half.set_column(half.schema.get_field_index("source"), "source",
                            pa.array(["another"] * half.num_rows, pa.string()))
    _assert_dedup_equal([half, other, real_pairs])


def test_deduplicate_hash_collisions_never_merge(real_pairs: pa.Table) -> None:
    t = real_pairs.slice(0, 3000)
    hashes = t["position_hash"].to_numpy()
    for collide in (hashes >> np.uint64(58), hashes & np.uint64(0x3F)):
        # still a function of the board, but 64 values for thousands of different boards
        twisted = t.set_column(t.schema.get_field_index("position_hash"), "position_hash",
                               pa.array(collide, pa.uint64()))
        out = _assert_dedup_equal([twisted], ordered=False)
        assert out.num_rows == deduplicate([t]).num_rows > 64


def test_sort_pairs_is_exact_where_the_top_hash_bits_tie() -> None:
    # the sort key holds only the hash's top bits: here runs of thousands of rows share them
    rng = np.random.default_rng(11)
    n = 6000
    hashes = (rng.integers(0, 4, n).astype(np.uint64) << np.uint64(62)) | \
        rng.integers(0, 300, n).astype(np.uint64)
    moves = rng.integers(0, S * S, n).astype(np.int16)
    major = split_codes(hashes)
    order, same = build._sort_pairs(hashes, moves, major)
    assert sorted(order.tolist()) == list(range(n))
    keys = list(zip(major[order].tolist(), hashes[order].tolist(), moves[order].tolist(),
                    strict=True))
    assert keys == sorted(keys)
    assert same.tolist() == [a[1:] == b[1:] for a, b in pairwise(keys)]


def test_deduplicate_with_hashes_that_share_their_top_bits(real_pairs: pa.Table) -> None:
    # still a function of the board (the fast route), but the top bits tie for many rows and
    # different boards share a hash (regrouped by board bytes): the result and its order hold
    h = real_pairs["position_hash"].to_numpy()
    for folded in ((h >> np.uint64(60) << np.uint64(60)) | (h & np.uint64(0xFFF)),
                   h & np.uint64(0xFF)):
        t = real_pairs.set_column(real_pairs.schema.get_field_index("position_hash"),
                                  "position_hash", pa.array(folded, pa.uint64()))
        out = _assert_dedup_equal([_chunked(t, 4096)])
        assert out.num_rows == deduplicate_reference([t]).num_rows


def test_shard_writer_slices_an_ordered_table_and_sorts_any_other(real_pairs: pa.Table,
                                                                   tmp_path: Path) -> None:
    table = deduplicate([real_pairs])
    parts = split_parts(table)
    assert [split for split, _ in parts] == list(SPLITS)
    address = table["board"].chunks[0].buffers()[2].address
    for _, part in parts:  # slices of the table as it is: no copy
        assert all(c.buffers()[2].address == address for c in part["board"].chunks)
    want = write_split_shards(table, tmp_path / "ordered")
    rng = np.random.default_rng(5)
    shuffled = table.take(pa.array(rng.permutation(table.num_rows)))
    assert write_split_shards(shuffled, tmp_path / "shuffled") == want
    # the same bytes whatever the chunks (Parquet pages follow them)
    assert write_split_shards(_chunked(table, 333), tmp_path / "chunked") == want
    # one split out of order, the others in it; rows of unknown splits are left out
    backwards = pa.concat_tables([parts[0][1], parts[2][1][::-1], parts[1][1]])
    assert write_split_shards(backwards, tmp_path / "backwards") == want
    other = pa.concat_tables([table, table.slice(0, 50).set_column(
        table.schema.get_field_index("split"), "split", pa.array(["holdout"] * 50))])
    assert write_split_shards(other, tmp_path / "other") == want
    # ties on (hash, move), different boards: the board bytes decide
    tied = table.slice(0, 2).set_column(table.schema.get_field_index("position_hash"),
                                        "position_hash", pa.array([7, 7], pa.uint64()))
    tied = tied.set_column(table.schema.get_field_index("move"), "move",
                           pa.array([3, 3], pa.int16()))
    tied = tied.set_column(table.schema.get_field_index("split"), "split",
                           pa.array(["train", "train"]))
    by_board = tied.sort_by([("board", "ascending")])
    for t in (by_board, by_board[::-1]):
        assert split_parts(t)[0][1].equals(by_board)


def test_deduplicate_refuses_tables_source_pairs_cannot_make(real_pairs: pa.Table) -> None:
    t = real_pairs.slice(0, 500)
    with_null = t.set_column(t.schema.get_field_index("game_id"), "game_id",
                             pa.array([None, *t["game_id"].to_pylist()[1:]], pa.string()))
    boards = t["board"].to_pylist()
    ragged = t.set_column(0, "board", pa.array([boards[0][:-1], *boards[1:]], pa.binary()))
    narrow = t.set_column(t.schema.get_field_index("move"), "move", t["move"].cast(pa.int32()))
    for table in (with_null, ragged, narrow):
        with pytest.raises(ValueError, match="not a pair table"):
            deduplicate([table])
    # one (board, move) under two position hashes: the hash is not a function of the board
    rehashed = t.set_column(t.schema.get_field_index("position_hash"), "position_hash",
                            pc.bit_wise_xor(t["position_hash"], pa.scalar(1, pa.uint64())))
    with pytest.raises(ValueError, match="several position hashes"):
        deduplicate([t, rehashed])
    assert deduplicate([rehashed]).num_rows == deduplicate([t]).num_rows


@pytest.mark.parametrize("chunk_rows", [None, 997])
def test_shards_are_byte_identical_to_the_reference_pipeline(mixed_rif: Path, tmp_path: Path,
                                                             chunk_rows: int | None) -> None:
    pairs = source_pairs("mixed", read_rif(mixed_rif)).pairs
    if chunk_rows:  # as the flow reads its intermediate files back
        pairs = _chunked(pairs, chunk_rows)
    fast = deduplicate([pairs])
    slow = deduplicate_reference([source_pairs_reference("mixed", read_rif(mixed_rif)).pairs])
    a = write_split_shards(fast, tmp_path / "fast")
    b = write_split_shards(slow, tmp_path / "slow")
    assert [(f["path"], f["rows"], f["sha256"]) for f in a] == \
        [(f["path"], f["rows"], f["sha256"]) for f in b]
    for f in a:
        assert (tmp_path / "fast" / f["path"]).read_bytes() == \
            (tmp_path / "slow" / f["path"]).read_bytes()


@pytest.mark.parametrize("text", [
    "h8 h9 i8", "H8 h9", "h8 H8", "h08 h9", "h8 h8", "a1", "o15 a1 h8 o15", "h8 p16",
    "h8\u00a0h9", "h8 h\u0668", "h8 ح8", "  \n ", "h8\r\n\th9  i10",
])
def test_move_parsing_fast_path_matches_token_parse(text: str) -> None:
    tokens = text.split()
    want = ((), "empty game") if not tokens else rif._parse_tokens(tokens, S)
    assert rif.parse_moves(text) == want


def test_reader_builds_complete_games() -> None:
    game = next(g for g in read_rif(SAMPLE_RIF) if isinstance(g, RifGame))
    assert set(vars(game)) == {f.name for f in dataclasses.fields(RifGame)}
    assert game == RifGame(**vars(game)) and hash(game) == hash(RifGame(**vars(game)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        game.game_id = "x"  # type: ignore[misc]
