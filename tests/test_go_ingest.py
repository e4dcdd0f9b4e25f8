"""The `ingest` flow on Go records: loose KGS `.sgf` files and a KGS month archive in, schema-2
shards of compact [4, 19, 19] positions out, every record accounted for."""

from __future__ import annotations

import itertools
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from flows.ingest import ingest
from services.dataset import shards
from services.dataset.dedup import MIN_TRAIN_OCCURRENCES
from services.dataset.shards import DatasetError, read_manifest, read_split
from services.dataset.sources import read_source_pairs, write_source_pairs
from services.games.go.game import GO
from services.games.go.replay import PACKED_BOARD, pack_planes, packed_width, unpack_planes
from services.games.go.rules import TRUNCATED, TRUNCATED_NOTE
from tests.conftest import SAMPLE_RIF, SHARED_DATA
from tests.go_dedup_reference import go_deduplicate

pytestmark = pytest.mark.usefixtures("prefect_harness")

KGS = SHARED_DATA / "kgs"
KGS_TARBALL = KGS / "kgs-games-dev.tar.gz"
S = 19


def kgs_sources() -> list[Path]:
    loose = sorted((KGS / "loose").glob("*.sgf")) if (KGS / "loose").is_dir() else []
    if not loose or not KGS_TARBALL.is_file():
        pytest.skip(f"KGS games not found under {KGS} (../shared absent)")
    return [*loose, KGS_TARBALL]


def rows_of(out: Path) -> pa.Table:
    manifest = read_manifest(out)
    return pa.concat_tables([pq.read_table(out / f["path"]) for f in manifest["files"]])


@pytest.fixture(scope="module")
def go_dataset(tmp_path_factory) -> tuple[Path, dict, list[Path]]:
    """The loose KGS files, the KGS tarball and one malformed SGF file, ingested once."""
    base = tmp_path_factory.mktemp("go-ingest")
    sources = kgs_sources()
    bad = base / "broken.sgf"
    bad.write_text("(;GM[1]FF[4]SZ[19];B[pd];W[dp];B[pq")  # cut off mid-property
    out = base / "ds"
    manifest = ingest(sources=[str(p) for p in [*sources, bad]], out_dir=str(out))
    return out, manifest, sources


def test_every_record_is_ingested_or_quarantined(go_dataset) -> None:
    out, manifest, sources = go_dataset
    assert manifest["game"] == "go" and manifest["schema_version"] == shards.SCHEMA_VERSION == 2
    counts = {c["source"]: c for c in manifest["counts"]}
    assert set(counts) == {p.name for p in sources} | {"broken.sgf"}
    for c in counts.values():
        assert c["read"] == c["ingested"] + c["quarantined"] > 0, c
    quarantine = pq.read_table(out / manifest["quarantine"]["path"]).to_pylist()
    notes = [q for q in quarantine if q["reason"].startswith(TRUNCATED)]
    assert len(quarantine) == sum(c["quarantined"] + c["truncated"] for c in counts.values())
    assert len(notes) == sum(c["truncated"] for c in counts.values())
    tar = counts[KGS_TARBALL.name]
    assert tar["read"] == 96 and tar["ingested"] >= 60  # 70 19x19 games; 9x9/13x13 quarantined
    assert tar["reasons"].get("board size", 0) == tar["quarantined"]
    broken = [q for q in quarantine if q["source"] == "broken.sgf"]
    assert counts["broken.sgf"] == {**counts["broken.sgf"], "ingested": 0, "quarantined": 1}
    assert len(broken) == 1 and broken[0]["reason"] and "pq" in broken[0]["snippet"]


def test_rows_are_the_unique_pairs_with_go_columns(go_dataset) -> None:
    out, manifest, _ = go_dataset
    rows = rows_of(out)
    # a pair is one row per side of the game split: held-out games' rows stay apart
    held = [s == shards.GAME_SPLIT for s in rows["split"].to_pylist()]
    keys = set(zip(held, rows["board"].to_pylist(), rows["move"].to_pylist(), strict=True))
    assert rows.num_rows == len(keys) == manifest["rows"] == sum(manifest["splits"].values())
    assert manifest["splits"].get(shards.GAME_SPLIT, 0) > 0
    assert sum(rows["count"].to_pylist()) == manifest["raw_pairs"] == sum(
        c["pairs"] for c in manifest["counts"])
    assert set(rows["game"].to_pylist()) == {"go"}
    assert set(rows["board_size"].to_pylist()) == {S}
    # the boards packed, as the build sorted them (a quarter of the bytes), and said so
    assert manifest["writer"]["board_encoding"] == shards.PACKED_BOARDS
    assert {len(b) for b in rows["board"].to_pylist()} == {packed_width(S)}
    planes = unpack_planes(np.frombuffer(b"".join(rows["board"].to_pylist()), np.uint8)
                           .reshape(rows.num_rows, -1), S).reshape(-1, 4, S, S)
    assert set(np.unique(planes[:, 0]).tolist()) == {0, 1, 2}
    moves = np.asarray(rows["move"].to_pylist())
    assert (moves == S * S).any() and ((moves >= 0) & (moves <= S * S)).all()  # passes kept
    result = rows["result"].to_numpy(zero_copy_only=False)
    known = result[~np.isnan(result)]
    assert len(known) and ((known >= 0) & (known <= 1)).all()
    assert any(rows["mover_rank"].to_pylist())  # KGS records give ranks
    assert any(rows["rule"].to_pylist())  # and rules


def test_read_split_gives_compact_go_planes(go_dataset) -> None:
    out, manifest, _ = go_dataset
    for split, n in manifest["splits"].items():
        boards, moves, plies = read_split(out, split)
        assert boards.shape == (n, 4, S, S) and n > 0
        assert len(moves) == len(plies) == n
        assert set(np.unique(boards[:, 0]).tolist()) <= {0, 1, 2}


def test_an_illegal_move_truncates_the_game_and_is_counted(tmp_path: Path) -> None:
    # B plays on W's stone at move 3: the two pairs before it are kept
    path = tmp_path / "illegal.sgf"
    path.write_text("(;GM[1]FF[4]SZ[19]RE[B+R];B[pd];W[dp];B[dp];W[pp])")
    result = read_source_pairs(GO, path, board_size=19)
    assert (result.read, result.ingested, result.quarantined,
            result.notes[TRUNCATED_NOTE]) == (1, 1, 0, 1)
    assert result.pairs.num_rows == 2
    assert result.quarantine[0]["reason"].startswith(TRUNCATED)
    table = go_deduplicate([result.pairs])
    assert sorted(table["result"].to_pylist()) == [0.0, 1.0]  # Black won: B 1, W 0


def test_a_run_mixing_go_and_gomoku_is_refused(tmp_path: Path) -> None:
    sgf = tmp_path / "one.sgf"
    sgf.write_text("(;GM[1]FF[4]SZ[19];B[pd];W[dp])")
    with pytest.raises(ValueError, match=r"several games \(go, gomoku\): ingest each game"):
        ingest(sources=[str(sgf), str(SAMPLE_RIF)], out_dir=str(tmp_path / "ds"))


def test_gomoku_datasets_still_read_as_cells(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    manifest = ingest(sources=[str(SAMPLE_RIF)], out_dir=str(out))
    assert manifest["game"] == "gomoku"
    boards, _, _ = read_split(out, "train")
    assert boards.shape == (manifest["splits"]["train"], 15, 15)
    rows = rows_of(out)
    assert set(rows["game"].to_pylist()) == {"gomoku"}
    results = rows["result"].to_numpy(zero_copy_only=False)  # the mover's, from <bresult>
    assert not np.isnan(results).any() and ((results >= 0) & (results <= 1)).all()


def test_old_and_mixed_shards_are_refused_naming_the_file(tmp_path: Path, go_dataset) -> None:
    src, manifest, _ = go_dataset
    out = tmp_path / "ds"
    shutil.copytree(src, out)
    train = next(out / f["path"] for f in manifest["files"] if f["split"] == "train")
    table = pq.read_table(train)
    pq.write_table(table.replace_schema_metadata({shards.SCHEMA_KEY: b"1"}), train)
    with pytest.raises(DatasetError, match=rf"{train.name}: schema version 1, expected 2"):
        read_split(out, "train")
    games = pa.array(["gomoku"] + ["go"] * (table.num_rows - 1))
    mixed = table.set_column(table.schema.get_field_index("game"), "game", games)
    pq.write_table(mixed.cast(shards.PAIR_SCHEMA), train)
    with pytest.raises(DatasetError, match=rf"{train.name}: mixes games"):
        read_split(out, "train")


def test_positions_met_in_many_games_train_and_positions_never_leak(go_dataset) -> None:
    """Real KGS games: the empty board and the common openings are in train (split by
    position hash alone, the empty board went wholesale to one split, test here); positions
    stay within one of train / validation / test; held-out games keep their openings."""
    out, _, _ = go_dataset
    rows = rows_of(out).select(["board", "move", "count", "split", "position_hash", "ply"])
    split = rows["split"].to_pylist()
    hashes = rows["position_hash"].to_pylist()
    counts = rows["count"].to_pylist()
    stones = unpack_planes(np.frombuffer(b"".join(rows["board"].to_pylist()), np.uint8)
                           .reshape(rows.num_rows, -1), S)[:, :S * S]
    empty_splits = {sp for no_stone, sp in zip(~stones.any(axis=1), split, strict=True)
                    if no_stone}
    assert "train" in empty_splits and not empty_splits & {"validation", "test"}
    assert shards.GAME_SPLIT in empty_splits  # the held-out games' openings are theirs too
    occurrences: dict[int, int] = {}
    split_of_hash: dict[int, set[str]] = {}
    for h, c, sp in zip(hashes, counts, split, strict=True):
        if sp != shards.GAME_SPLIT:
            occurrences[h] = occurrences.get(h, 0) + c
            split_of_hash.setdefault(h, set()).add(sp)
    assert all(len(s) == 1 for s in split_of_hash.values())  # no position in two splits
    common = [h for h, n in occurrences.items() if n >= MIN_TRAIN_OCCURRENCES]
    assert len(common) > 10  # openings recur across real games
    assert all(split_of_hash[h] == {"train"} for h in common)
    rare = {next(iter(split_of_hash[h])) for h, n in occurrences.items()
            if n < MIN_TRAIN_OCCURRENCES}
    assert rare == {"train", "validation", "test"}


def test_manifest_names_the_codecs_written(go_dataset) -> None:
    out, manifest, _ = go_dataset
    assert manifest["writer"]["compression"] == {"board": "lz4", "other columns": "zstd"}
    entry = next(f for f in manifest["files"] if f["rows"])
    meta = pq.ParquetFile(out / entry["path"]).metadata.row_group(0)
    codecs = {meta.column(i).path_in_schema: meta.column(i).compression
              for i in range(meta.num_columns)}
    assert codecs.pop("board") == "LZ4"  # (LZ4_RAW in Parquet's words is reported as LZ4)
    assert set(codecs.values()) == {"ZSTD"}


def test_streamed_intermediate_holds_the_in_memory_pairs(tmp_path: Path, monkeypatch) -> None:
    from services.dataset import sources as source_pairs_module
    from services.games.go import replay as go_replay

    monkeypatch.setattr(source_pairs_module, "BATCH_ROWS", 100)  # many row groups
    monkeypatch.setattr(go_replay, "TABLE_ROWS", 100)  # of many tables
    sources = kgs_sources()
    want = read_source_pairs(GO, sources[-1], board_size=19)
    got = write_source_pairs(GO, sources[-1], tmp_path / "pairs.parquet", board_size=19)
    table = pq.read_table(tmp_path / "pairs.parquet")
    assert pq.ParquetFile(tmp_path / "pairs.parquet").metadata.num_row_groups > 2
    assert got.rows == table.num_rows == want.pairs.num_rows
    # the intermediate holds the boards packed: unpacked, they are the in-memory boards
    boards = np.frombuffer(b"".join(want.pairs["board"].to_pylist()), np.uint8)
    packed = np.frombuffer(b"".join(table[PACKED_BOARD].to_pylist()), np.uint8)
    assert (unpack_planes(packed.reshape(table.num_rows, -1), 19).reshape(-1) == boards).all()
    expected = want.pairs.set_column(
        want.pairs.column_names.index("board"), PACKED_BOARD,
        pa.array([row.tobytes() for row in pack_planes(boards.reshape(table.num_rows, -1), 19)],
                 pa.binary())).select(table.column_names).cast(table.schema)
    for name in table.column_names:
        if name == "result":  # NaN (unknown) is no value equal to itself
            np.testing.assert_array_equal(table[name].to_numpy(), expected[name].to_numpy())
        else:
            assert table[name].equals(expected[name]), name
    assert (got.read, got.ingested, got.quarantine) == (want.read, want.ingested,
                                                         want.quarantine)


def test_go_incremental_run_writes_the_bytes_of_a_run_from_scratch(tmp_path: Path) -> None:
    loose = kgs_sources()[:-1]
    a, b = loose[: len(loose) // 2], loose[len(loose) // 2:]
    out = tmp_path / "ds"
    ingest(sources=[str(p) for p in a], out_dir=str(out))
    two = ingest(sources=[str(p) for p in a + b], out_dir=str(out))
    fresh = tmp_path / "fresh"
    scratch = ingest(sources=[str(p) for p in a + b], out_dir=str(fresh))
    assert two["files"] == scratch["files"]
    for f in two["files"]:
        assert (out / f["path"]).read_bytes() == (fresh / f["path"]).read_bytes()


def test_packed_boards_are_equal_and_ordered_exactly_as_the_boards() -> None:
    """Dedup groups and sorts packed boards: packing must be a bijection that keeps the byte
    order of the compact planes (real positions, and every value at the planes' bounds)."""
    pairs = read_source_pairs(GO, kgs_sources()[-1], board_size=19).pairs
    boards = np.frombuffer(b"".join(pairs["board"].to_pylist()), np.uint8).reshape(
        pairs.num_rows, -1)
    rng = np.random.default_rng(0)
    edge = rng.integers(0, [[3] * 361 + [5] * 361 + [5] * 361 + [2] * 361], (300, 1444),
                        dtype=np.uint8)
    boards = np.concatenate([boards, edge, edge[:10]])  # equal rows among them
    packed = pack_planes(boards, 19)
    assert packed.shape == (len(boards), packed_width(19)) == (len(boards), 361)
    assert (unpack_planes(packed, 19) == boards).all()
    plain = [row.tobytes() for row in boards]
    small = [row.tobytes() for row in packed]
    by_plain = sorted(range(len(plain)), key=plain.__getitem__)
    assert by_plain == sorted(range(len(small)), key=small.__getitem__)
    assert all((plain[a] == plain[b]) == (small[a] == small[b])
               for a, b in itertools.pairwise(by_plain))
    too_big = boards[:1].copy()
    too_big[0, 361] = 5  # a liberty count beyond the plane's range
    with pytest.raises(ValueError, match="plane 1"):
        pack_planes(too_big, 19)


def test_duckdb_build_gives_the_in_memory_go_dedup_row_for_row(tmp_path: Path,
                                                                monkeypatch) -> None:
    """Exactness and order on real games: the out-of-core query (packed boards; DuckDB sorts
    by (split, hash, move) and the runs of equal keys are put in board order as they stream
    by) gives `go_deduplicate`'s rows in the shards' order, with batches of 5 rows so that
    runs straddle batch boundaries."""
    from services.dataset import dedup

    monkeypatch.setattr(dedup, "FETCH_ROWS", 5)
    source = kgs_sources()[-1]
    path = tmp_path / "pairs.parquet"
    write_source_pairs(GO, source, path, board_size=19)
    settings = dedup.BuildSettings(min_train_occurrences=2**31, holdout_games=0.0, threads=1,
                                   temp_dir=tmp_path)
    got = pa.Table.from_batches(list(dedup.sorted_pairs([path], "go", settings)))
    want = pa.concat_tables([part for _, part in shards.split_parts(
        go_deduplicate([read_source_pairs(GO, source, board_size=19).pairs]))])
    hashes, moves = want["position_hash"].to_numpy(), want["move"].to_numpy()
    tied = (hashes[1:] == hashes[:-1]) & (moves[1:] == moves[:-1])
    assert tied.sum() > 10  # positions with equal stones and move, other ages or ko
    assert got.num_rows == want.num_rows
    for name in ("board", "move", "ply", "count", "position_hash", "game_id", "source",
                 "split", "to_move", "board_size", "mover_rank", "game"):
        assert got[name].to_pylist() == want[name].to_pylist(), name
    np.testing.assert_allclose(got["result"].to_numpy(), want["result"].to_numpy(), rtol=1e-6)


def test_both_dedups_keep_the_rule_of_the_smallest_game_id(tmp_path: Path) -> None:
    """A pair played in games under different rules: the in-memory and the out-of-core
    dedup both keep the rule of the game with the smallest id (the in-memory one once took
    the smallest rule name, which differs from it here). Real games, each given a rule whose
    name sorts the other way round from its id."""
    from services.dataset import dedup

    source = kgs_sources()[-1]
    path = tmp_path / "pairs.parquet"
    write_source_pairs(GO, source, path, board_size=19)
    raw = pq.read_table(path)
    ids = sorted(set(raw["game_id"].to_pylist()))
    rule_of = {g: f"rule-{len(ids) - i:05d}" for i, g in enumerate(ids)}  # reversed order
    raw = raw.set_column(raw.column_names.index("rule"), "rule",
                         pa.array([rule_of[g] for g in raw["game_id"].to_pylist()]))
    pq.write_table(raw, path)
    settings = dedup.BuildSettings(min_train_occurrences=2**31, holdout_games=0.0, threads=1,
                                   temp_dir=tmp_path)
    out_of_core = pa.Table.from_batches(list(dedup.sorted_pairs([path], "go", settings)))
    pairs = read_source_pairs(GO, source, board_size=19).pairs
    pairs = pairs.set_column(pairs.column_names.index("rule"), "rule",
                             pa.array([rule_of[g] for g in pairs["game_id"].to_pylist()]))
    in_memory = pa.concat_tables([part for _, part in shards.split_parts(
        go_deduplicate([pairs]))])
    smallest = [rule_of[g] for g in in_memory["game_id"].to_pylist()]
    merged = np.flatnonzero(in_memory["count"].to_numpy() > 1)
    assert len({rule_of[g] for g in raw["game_id"].to_pylist()}) > 1
    assert any(len(set(raw.filter(pc.equal(raw["position_hash"], h))["rule"]
                       .to_pylist())) > 1
               for h in in_memory["position_hash"].to_numpy()[merged][:200])  # mixed pairs
    assert in_memory["rule"].to_pylist() == smallest
    assert out_of_core["rule"].to_pylist() == smallest


def test_sorted_raw_rows_merge_into_pairs_across_batches() -> None:
    """`dedup._merged`: raw rows sorted by (split, hash, move) become one pair per (split,
    hash, move, board), in board order inside equal keys, also when a run of equal keys
    straddles batches: count summed, smallest ply / rank / game id / source, the rule of the
    smallest game id, the mean of the known results (NaN when none is known). Game ids and
    sources travel as the ranks of their strings (`game_no`, `source_no`) and are named
    back after the merge (`dedup._named`)."""
    from services.dataset import dedup

    rows = [  # (split_code, hash, move, board, ply, count, result, rank, game_id, rule)
        (0, 5, 1, b"b", 9, 1, 1.0, "2d", "g3", "Japanese"),
        (0, 5, 1, b"a", 7, 1, float("nan"), "1k", "g2", "Chinese"),
        (0, 5, 1, b"b", 4, 2, 0.0, "1d", "g1", "Korean"),
        (0, 5, 1, b"b", 6, 1, float("nan"), "3d", "g1", "AGA"),
        (0, 6, 1, b"z", 3, 1, float("nan"), "5k", "g4", ""),
        (2, 1, 0, b"c", 1, 1, 0.5, "", "g5", ""),
    ]
    cols = list(zip(*rows, strict=True))
    n = len(rows)
    table = pa.table({
        "board": pa.array(cols[3], pa.binary()), "move": pa.array(cols[2], pa.int16()),
        "game": pa.array(["go"] * n), "rule": pa.array(cols[9]),
        "board_size": pa.array([19] * n, pa.int8()), "to_move": pa.array([1] * n, pa.int8()),
        "ply": pa.array(cols[4], pa.int16()), "count": pa.array(cols[5], pa.int32()),
        "position_hash": pa.array(cols[1], pa.uint64()),
        "result": pa.array(cols[6], pa.float32()), "mover_rank": pa.array(cols[7]),
        "game_no": pa.array([int(g[1:]) - 1 for g in cols[8]], pa.int32()),
        "source_no": pa.array([0] * n, pa.int32()),
        "split": pa.array([shards.SPLITS[c] for c in cols[0]]),
        "split_code": pa.array(cols[0], pa.int32()),
    })
    batches = [table.slice(0, 2).to_batches()[0], table.slice(2, 3).to_batches()[0],
               table.slice(5).to_batches()[0]]  # the run of hash 5 spans two batches
    unique: Counter = Counter()
    game_ids, sources = pa.array([f"g{i}" for i in range(1, 6)]), pa.array(["s"])
    got = pa.Table.from_batches([dedup._named(b, game_ids, sources)
                                 for b in dedup._merged(batches, unique)])
    assert unique == {0: 4}  # source 0 is in each of the 4 pairs
    assert "split_code" not in got.column_names
    assert got["board"].to_pylist() == [b"a", b"b", b"z", b"c"]
    assert got["count"].to_pylist() == [1, 4, 1, 1]
    assert got["ply"].to_pylist() == [7, 4, 3, 1]
    assert got["mover_rank"].to_pylist() == ["1k", "1d", "5k", ""]
    assert got["game_id"].to_pylist() == ["g2", "g1", "g4", "g5"]
    assert got["source"].to_pylist() == ["s"] * 4
    assert got["rule"].to_pylist() == ["Chinese", "AGA", "", ""]  # g1's smallest rule
    result = got["result"].to_numpy()
    assert np.isnan(result[0]) and result[1] == 0.5 and np.isnan(result[2]) and result[3] == 0.5
    assert got["split"].to_pylist() == [shards.SPLITS[0]] * 3 + [shards.SPLITS[2]]


def test_each_source_s_unique_count_is_the_rows_its_build_alone_writes(tmp_path: Path) -> None:
    """`build_shards` counts each source's unique pairs in the merged stream of all sources:
    the count is the number of rows a build of that source alone writes, on real games with
    repeated keys (the same stones and move, other ages or ko) and pairs that two sources
    share."""
    from services.dataset import dedup

    paths = []
    for source in kgs_sources()[-2:]:
        paths.append(tmp_path / f"{source.name}.pairs.parquet")
        write_source_pairs(GO, source, paths[-1], source.name, board_size=19)
    settings = dedup.BuildSettings(temp_dir=tmp_path)
    raw = pq.read_table(paths[-1], columns=["position_hash", "move"])
    keys = set(zip(raw["position_hash"].to_pylist(), raw["move"].to_pylist(), strict=True))
    assert len(keys) < raw.num_rows  # some keys repeat: the boards of those are compared
    built = dedup.build_shards(paths, tmp_path / "both", "go", settings)
    alone = {p.name.removesuffix(".pairs.parquet"):
             sum(b.num_rows for b in dedup.sorted_pairs([p], "go", settings)) for p in paths}
    assert built.unique_pairs == alone
    assert sum(alone.values()) > sum(built.rows.values())  # the sources share pairs
