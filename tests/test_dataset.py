"""Pairs, symmetry-canonical dedup, splits, shards, and the ingest flow under Prefect."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from services.dataset.build import deduplicate
from services.dataset.shards import GAME_SPLIT, DatasetError, read_manifest, read_split
from services.dataset.splits import split_of
from services.games.canonical import canonicalize, zobrist
from services.games.gomoku.replay import pairs_table, replay, source_pairs
from services.games.symmetry import N_SYMMETRIES, point_table
from services.records.rif import read_rif
from services.records.rif_writer import write_rif
from tests.conftest import SAMPLE_RIF, TsvGame, renjunet_games

S = 15


def test_replay_gives_position_before_each_move() -> None:
    game = replay([112, 113, 127])
    assert game.error is None
    assert game.boards.shape == (3, S * S)
    assert not game.boards[0].any()
    assert game.boards[2][112] == 1 and game.boards[2][113] == 2 and game.boards[2][127] == 0
    assert list(game.to_move) == [1, 2, 1]


def test_replay_stops_at_an_illegal_move_with_reason() -> None:
    game = replay([112, 113, 112, 5])
    assert len(game.moves) == 2
    assert "ply 3" in game.error and "occupied" in game.error


def test_all_symmetric_images_share_one_canonical_form() -> None:
    game = replay([112, 113, 127, 98, 140, 30])
    table = point_table(S)
    board, move = game.boards[5], game.moves[5]
    images = np.empty((N_SYMMETRIES, S * S), np.int8)
    moves = np.empty(N_SYMMETRIES, np.int16)
    for k in range(N_SYMMETRIES):
        images[k][table[k]] = board
        moves[k] = table[k][move]
    cb, cm, h = canonicalize(images, moves, S)
    assert len({row.tobytes() for row in cb}) == 1
    assert len(set(cm.tolist())) == 1
    assert len(set(h.tolist())) == 1
    assert len(set(split_of(h).tolist())) == 1


def test_symmetric_duplicates_merge_with_counts() -> None:
    # h8 then i8 and h8 then h9 are mirror images: one pair after dedup, count 2.
    a = replay([112, 113])
    b = replay([112, 127])
    t1 = pairs_table(a.boards, a.moves, a.to_move, a.plies, ["a", "a"], "s")
    t2 = pairs_table(b.boards, b.moves, b.to_move, b.plies, ["b", "b"], "s")
    merged = deduplicate([t1, t2])
    assert merged.num_rows == 2  # (empty board, h8) and (h8 played, its neighbour)
    assert sorted(merged["count"].to_pylist()) == [2, 2]


def test_hash_collision_never_merges_different_positions() -> None:
    a, b = replay([112, 113]), replay([0, 224])
    t1 = pairs_table(a.boards[1:], a.moves[1:], a.to_move[1:], a.plies[1:], ["a"], "s")
    t2 = pairs_table(b.boards[1:], b.moves[1:], b.to_move[1:], b.plies[1:], ["b"], "s")
    # Force a collision: same 64-bit position hash on two different positions.
    forced = t2.set_column(t2.schema.get_field_index("position_hash"), "position_hash",
                           t1["position_hash"])
    merged = deduplicate([t1, forced])
    assert merged.num_rows == 2
    assert merged["count"].to_pylist() == [1, 1]


def test_zobrist_distinguishes_every_real_position() -> None:
    games = renjunet_games(limit=200)
    boards = np.concatenate([replay(g.moves).boards for g in games])
    unique_boards = {row.tobytes() for row in boards}
    unique_hashes = set(zobrist(np.frombuffer(b"".join(unique_boards), np.int8)
                                .reshape(-1, S * S), S).tolist())
    assert len(unique_hashes) == len(unique_boards)


def test_no_test_position_occurs_in_training_under_any_symmetry(renjunet_rif: Path) -> None:
    result = source_pairs("renjunet", read_rif(renjunet_rif))
    table = deduplicate([result.pairs])
    by_split: dict[str, set[bytes]] = {}
    for board, split in zip(table["board"].to_pylist(), table["split"].to_pylist(), strict=True):
        by_split.setdefault(split, set()).add(board)
    assert by_split["train"].isdisjoint(by_split["test"])
    assert by_split["train"].isdisjoint(by_split["validation"])
    # and every mirror image of a test board, canonicalised, is that same test board
    table_k = point_table(S)
    for board in list(by_split["test"])[:50]:
        flat = np.frombuffer(board, np.int8)
        for k in range(N_SYMMETRIES):
            image = np.empty_like(flat)
            image[table_k[k]] = flat
            cb, _, _ = canonicalize(image[None], np.zeros(1, np.int16), S)
            assert cb[0].tobytes() not in by_split["train"]


def test_source_counts_reconcile_with_bad_records(tmp_path: Path) -> None:
    games = renjunet_games(limit=20)
    bad = TsvGame("bad-replay", (112, 113, 112), 1.0, "x", "y", "z")  # repeated point
    path = write_rif([*games, bad], tmp_path / "mixed.rif")
    text = path.read_text().replace("</games>", '<game id="9999"><move>h8 p16</move></game>'
                                    "</games>")
    path.write_text(text)
    result = source_pairs("mixed", read_rif(path))
    assert result.read == 22
    assert result.read == result.ingested + result.quarantined
    reasons = " | ".join(q["reason"] for q in result.quarantine)
    assert "p16" in reasons and "repeated" in reasons


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.usefixtures("prefect_harness")
def test_ingest_flow_writes_unique_pairs_and_reruns_identically(tmp_path: Path) -> None:
    from flows.ingest import ingest

    out = tmp_path / "ds"
    manifest = ingest(sources=[str(SAMPLE_RIF)], out_dir=str(out))
    shards = sorted(out.glob("*-0000*.parquet"))
    assert {p.name.split("-")[0] for p in shards} == {"train", "validation", "test",
                                                      GAME_SPLIT}
    rows = pa.concat_tables([pq.read_table(p) for p in shards])
    # a pair has one row among the held-out games' and one among the others'
    keys = {(s == GAME_SPLIT, b, m) for s, b, m in zip(
        rows["split"].to_pylist(), rows["board"].to_pylist(), rows["move"].to_pylist(),
        strict=True)}
    assert rows.num_rows == len(keys) == manifest["rows"]
    assert sum(rows["count"].to_pylist()) == manifest["raw_pairs"]
    c = manifest["counts"][0]
    assert c["read"] == c["ingested"] + c["quarantined"] and c["ingested"] > 0
    assert read_manifest(out)["splits"]["train"] == read_split(out, "train")[0].shape[0]
    _the_readme_queries_agree(out, manifest)

    first = {p.name: _sha(p) for p in out.iterdir()}
    ingest(sources=[str(SAMPLE_RIF)], out_dir=str(out))
    assert {p.name: _sha(p) for p in out.iterdir()} == first


def _the_readme_queries_agree(out: Path, manifest: dict) -> None:
    """The one-line queries of docs/reference.md (polars, pyarrow, duckdb) open the shards
    as they are."""
    import glob

    import duckdb
    import polars as pl

    train = str(out / "train-*.parquet")
    by_engine = {
        "polars": pl.scan_parquet(train).select(pl.len(), pl.col("count").sum()).collect().row(0),
        "pyarrow": (lambda t: (t.num_rows, pc.sum(t["count"]).as_py()))(
            pq.ParquetDataset(glob.glob(train)).read(columns=["count"])),
        "duckdb": duckdb.sql(f"SELECT count(*), sum(count) FROM '{train}'").fetchall()[0],
    }
    rows = {engine: int(r[0]) for engine, r in by_engine.items()}
    assert rows == dict.fromkeys(by_engine, manifest["splits"]["train"])
    assert len({int(r[1]) for r in by_engine.values()}) == 1


def test_reading_a_broken_dataset_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no manifest"):
        read_split(tmp_path, "train")


def test_rows_carry_the_movers_result_averaged_over_occurrences(tmp_path: Path) -> None:
    # two games open alike (h8 h9 ...): Black won one, lost the other; a third has no result
    h8, h9, i8, g8, i9 = 7 * 15 + 7, 8 * 15 + 7, 7 * 15 + 8, 7 * 15 + 6, 8 * 15 + 8
    games = [TsvGame("1", (h8, h9, i8), 1.0, "a", "b", "x"),
             TsvGame("2", (h8, h9, g8), 0.0, "a", "b", "x"),
             TsvGame("3", (h8, i9), None, "a", "b", "x")]
    path = write_rif(games, tmp_path / "results.rif")
    table = deduplicate([source_pairs(path.name, read_rif(path)).pairs])
    by_ply: dict[int, list[float]] = {}
    for ply, result in zip(table["ply"].to_pylist(), table["result"].to_pylist(), strict=True):
        by_ply.setdefault(ply, []).append(result)
    # ply 0: (empty, h8) occurred 3 times, results known twice: Black 1 and 0 -> 0.5
    assert by_ply[0] == [0.5]
    # ply 1: White's h9 (twice: White lost, then won -> 0.5), White's i9 (result unknown)
    assert sorted(by_ply[1], key=lambda r: r == r) == [pytest.approx(float("nan"), nan_ok=True),
                                                        0.5]
    # ply 2: Black's i8 (Black won) and g8 (Black lost) are mirror images: one pair, 0.5
    assert by_ply[2] == [0.5]
    assert sum(table["count"].to_pylist()) == 8


def test_the_empty_board_and_common_openings_train(tmp_path: Path, renjunet_rif: Path) -> None:
    """Split by position hash alone, the empty board (in every game) went wholesale to test
    and the trained network never saw it. Real RenjuNet games and the sample: positions met
    in several games are in train, every position sits in one of train / validation / test,
    and the held-out games keep their openings (game_test)."""
    from flows.ingest import ingest
    from services.dataset.dedup import MIN_TRAIN_OCCURRENCES

    out = tmp_path / "ds"
    manifest = ingest(sources=[str(renjunet_rif), str(SAMPLE_RIF)], out_dir=str(out))
    rows = pa.concat_tables([pq.read_table(out / f["path"]) for f in manifest["files"]])
    empty = bytes(S * S)
    splits = rows["split"].to_pylist()
    boards = rows["board"].to_pylist()
    assert {sp for b, sp in zip(boards, splits, strict=True) if b == empty} == {"train",
                                                                                GAME_SPLIT}
    occurrences: dict[int, int] = {}
    where: dict[int, set[str]] = {}
    for h, c, sp in zip(rows["position_hash"].to_pylist(), rows["count"].to_pylist(), splits,
                        strict=True):
        if sp != GAME_SPLIT:
            occurrences[h] = occurrences.get(h, 0) + c
            where.setdefault(h, set()).add(sp)
    assert all(len(w) == 1 for w in where.values())
    common = [h for h, n in occurrences.items() if n >= MIN_TRAIN_OCCURRENCES]
    assert len(common) > 100 and all(where[h] == {"train"} for h in common)
    # the openings: every position of the first four plies met in 10+ games trains
    opening = {h for h, p, sp in zip(rows["position_hash"].to_pylist(), rows["ply"].to_pylist(),
                                     splits, strict=True) if p < 4 and sp != GAME_SPLIT}
    book = [h for h in opening if occurrences[h] >= 10]
    assert len(book) > 5 and all(where[h] == {"train"} for h in book)
    assert manifest["splits"][GAME_SPLIT] > 0 and manifest["splits"]["test"] > 0
