"""The out-of-core build's split on the shipped sample, and the trainer's report of the
game-level held-out split next to the position split."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from services.dataset.build import deduplicate
from services.dataset.dedup import BuildSettings, build_shards, sorted_pairs
from services.dataset.shards import GAME_SPLIT, SCHEMA_VERSION, atomic_write_json
from services.games.gomoku.replay import source_pairs
from services.records.rif import read_rif
from services.trainer.train import TrainConfig, train
from tests.conftest import SAMPLE_RIF


@pytest.fixture(scope="module")
def intermediate(tmp_path_factory) -> tuple[Path, pa.Table]:
    """The sample's raw pairs as the ingest flow's Gomoku intermediate (rule column added)."""
    folder = tmp_path_factory.mktemp("work")
    pairs = source_pairs("selfplay.rif", read_rif(SAMPLE_RIF)).pairs
    path = folder / "selfplay.pairs.parquet"
    pq.write_table(pairs.append_column("rule", pa.array([""] * pairs.num_rows)), path)
    return path, pairs


def test_without_held_out_games_or_the_occurrence_rule_it_is_the_in_memory_dedup(
        intermediate, tmp_path: Path) -> None:
    """Exactness: the DuckDB query merges exactly what `deduplicate` merges, row for row."""
    path, pairs = intermediate
    settings = BuildSettings(min_train_occurrences=2**31, holdout_games=0.0, threads=1,
                             temp_dir=tmp_path)
    got = pa.Table.from_batches(list(sorted_pairs([path], "gomoku", settings)))
    want = deduplicate([pairs])
    for name in ("board", "move", "ply", "count", "position_hash", "game_id", "source",
                 "split", "to_move", "board_size", "result"):
        assert got[name].to_pylist() == want[name].to_pylist(), name


def test_a_tight_memory_limit_spills_and_gives_the_same_shards(intermediate,
                                                               tmp_path: Path) -> None:
    path, _ = intermediate
    roomy = build_shards([path], tmp_path / "a", "gomoku",
                         BuildSettings(temp_dir=tmp_path, threads=1)).files
    tight = build_shards([path], tmp_path / "b", "gomoku",
                         BuildSettings(temp_dir=tmp_path, threads=1, memory_limit="64MB")).files
    assert roomy == tight
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".duckdb-spill")]


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_trainer_reports_top1_on_held_out_games_next_to_the_position_split(
        intermediate, tmp_path: Path) -> None:
    path, _ = intermediate
    out = tmp_path / "ds"
    files, splits, *_ = build_shards([path], out, "gomoku", BuildSettings(temp_dir=tmp_path))
    assert splits[GAME_SPLIT] > 0
    atomic_write_json({"schema_version": SCHEMA_VERSION, "files": files, "splits": splits},
                      out / "manifest.json")
    config = TrainConfig(model="shao_f32_n2", batch_size=64, max_steps=20, train_eval_rows=128)
    metrics = train(out, config, progress=False).metrics
    assert {"validation", "test", GAME_SPLIT} <= set(metrics)
    assert 0 <= metrics[GAME_SPLIT]["top1"] <= 1
    assert metrics[GAME_SPLIT]["top5"] >= metrics[GAME_SPLIT]["top1"]


def test_sql_hash_mix_is_the_split_codes_mix_at_every_bit() -> None:
    """The query's split of a hash must be `canonical.split_codes`' own: the SQL mix (64-bit
    product on 32-bit halves) gives numpy's wrapping product's top 24 bits."""
    import duckdb
    import numpy as np

    from services.dataset import dedup

    rng = np.random.default_rng(3)
    hashes = np.concatenate([
        np.array([0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1], np.uint64),
        rng.integers(0, 2**64 - 1, 10_000, dtype=np.uint64, endpoint=True)])
    con = duckdb.connect()
    try:
        con.register("t", pa.table({"h": pa.array(hashes, pa.uint64())}))
        got = con.execute(f"SELECT ({dedup._mixed('h')})::UBIGINT AS m FROM t").fetchnumpy()["m"]
    finally:
        con.close()
    want = (hashes * np.uint64(dedup._MIX)) >> np.uint64(64 - dedup._SPLIT_BITS)
    assert (np.asarray(got, np.uint64) == want).all()
