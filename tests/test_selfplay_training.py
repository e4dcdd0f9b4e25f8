"""Training on self-play data: value sampling per game, the expert share of each batch, the value
loss on held-out games (the self-play dataset's and the expert dataset's `game_test`).

Self-play games come from the deterministic `HashedEvaluator` with tiny searches; the expert
dataset is the shipped sample's. Every figure follows from the seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from services.dataset import loader, shards
from services.dataset.dedup import BuildSettings, build_shards
from services.dataset.loader import ShardStream
from services.games.gomoku.replay import source_pairs
from services.games.registry import get_game
from services.records.rif import RifGame, read_rif
from services.selfplay.openings import opening_suite
from services.selfplay.pairs import write_selfplay_pairs
from services.selfplay.worker import run_worker
from services.trainer import train as train_module
from services.trainer.train import (
    EXPERT_GAME_SPLIT,
    TrainConfig,
    batch_split,
    check_run,
    mixed_batch,
    train,
)
from tests.conftest import SAMPLE_RIF
from tests.test_selfplay import FAST, HashedEvaluator

torch.set_num_threads(1)


def _selfplay_dataset(out: Path, games: int = 10) -> Path:
    """A Gomoku self-play dataset of `games` games (Black resigns in some: a result), half of
    the games held out whole as game_test."""
    game = get_game("gomoku")
    folder = out.with_name(out.name + ".games")
    openings = opening_suite(game, 4, seed=0)
    for worker, value, count in (("w0", 0.2, games // 2), ("w1", -0.95, games - games // 2)):
        run_worker(game, HashedEvaluator(black_value=value), folder, games=count,
                   settings=FAST, concurrency=2, openings=openings, worker=worker)
    pairs = out.with_name(out.name + ".pairs.parquet")
    write_selfplay_pairs(game, folder, pairs, None)
    built_dataset([pairs], out, 0.5)
    return out


@pytest.fixture(scope="module")
def selfplay(tmp_path_factory) -> Path:
    return _selfplay_dataset(tmp_path_factory.mktemp("sp") / "data")


def built_dataset(pairs: list[Path], out: Path, holdout: float) -> dict:
    """Shards of the intermediates at `pairs` through the ingest's out-of-core build, a share
    `holdout` of the games held out whole as game_test, and their manifest (committed)."""
    built = build_shards(pairs, out, "gomoku",
                         BuildSettings(temp_dir=out.parent, threads=1, holdout_games=holdout))
    manifest = {"schema_version": shards.SCHEMA_VERSION, "game": "gomoku",
                "files": built.files, "splits": built.rows, "rows": sum(built.rows.values()),
                "counts": [], "writer": {"board_encoding": built.board_encoding}}
    (out / shards.MANIFEST).write_text(json.dumps(manifest))
    return manifest


def expert_dataset(out: Path) -> Path:
    """The shipped sample's first 120 games as an expert dataset, a fifth of the games held
    out whole as game_test."""
    out.mkdir(parents=True)
    games = [g for g in read_rif(SAMPLE_RIF) if isinstance(g, RifGame)][:120]
    pairs = out.with_name("sample.pairs.parquet")
    pq.write_table(source_pairs("sample", games).pairs, pairs)
    built_dataset([pairs], out, 0.2)
    return out


@pytest.fixture(scope="module")
def expert(tmp_path_factory) -> Path:
    return expert_dataset(tmp_path_factory.mktemp("expert") / "data")


# ---------------------------------------------------------------------------- value sampling
def test_value_sampling_keeps_about_k_rows_of_every_game():
    ids = pa.chunked_array([pa.array(["long"] * 200 + ["short"] * 10 + ["one"])])
    rows = (pa.array(["long", "short", "one"]), np.array([200.0, 10.0, 1.0]))
    kept = {"long": 0, "short": 0, "one": 0}
    draws = 400
    rng = np.random.default_rng(7)
    for _ in range(draws):
        results = np.ones(211, np.float32)
        loader.sample_values(results, ids, rows, 2.0, rng)
        known = ~np.isnan(results)
        kept["long"] += int(known[:200].sum())
        kept["short"] += int(known[200:210].sum())
        kept["one"] += int(known[210])
    # about 2 rows of each game a draw, whatever its length; a one-row game keeps its row
    assert kept["long"] / draws == pytest.approx(2.0, rel=0.15)
    assert kept["short"] / draws == pytest.approx(2.0, rel=0.15)
    assert kept["one"] == draws


@pytest.mark.integration
def test_the_loader_samples_values_per_game_and_keeps_every_policy_target(selfplay):
    def epoch(k: float, seed: int = 0) -> dict:
        stream = ShardStream(selfplay, "train", batch_size=8, shuffle_buffer=0, results=True,
                             value_per_game=k, seed=seed, drop_last=False)
        batches = list(stream)
        return {name: torch.cat([b[name] for b in batches])
                for name in ("moves", "results", "targets")}

    every, sampled = epoch(0.0), epoch(1.0)
    games = len(loader.game_rows(loader.plan_split(selfplay, "train"))[1])
    known_all = int((~torch.isnan(every["results"])).sum())
    known = int((~torch.isnan(sampled["results"])).sum())
    assert known_all == len(every["results"]) > 4 * games  # every row has its game's result
    assert 0 < known < known_all / 3 and known <= 3 * games
    # the same seed and epoch draw the same sample; the policy targets are untouched
    again = epoch(1.0)
    assert torch.equal(torch.isnan(again["results"]), torch.isnan(sampled["results"]))
    assert torch.equal(every["targets"], sampled["targets"])
    assert not torch.equal(torch.isnan(epoch(1.0, seed=1)["results"]),
                           torch.isnan(sampled["results"]))


# ---------------------------------------------------------------------------- expert share
def test_the_expert_share_of_a_batch_is_rounded_and_leaves_both_kinds():
    config = TrainConfig(model="shao_f32_n2", batch_size=64, expert_share=0.25,
                         expert_dataset="x")
    assert batch_split(config, 1) == (48, 16)
    assert batch_split(config, 2) == (24, 8)
    assert batch_split(TrainConfig(batch_size=64), 1) == (64, 0)
    with pytest.raises(ValueError, match="is 0 rows"):
        batch_split(TrainConfig(batch_size=2, expert_share=0.1, expert_dataset="x"), 1)
    with pytest.raises(ValueError, match="expert_share must be"):
        TrainConfig(expert_share=0.99)
    a = {"boards": torch.zeros(3, 2, 2, dtype=torch.int8), "moves": torch.zeros(3),
         "targets": torch.zeros(3, 4)}
    b = {"boards": torch.ones(1, 2, 2, dtype=torch.int8), "moves": torch.ones(1),
         "targets": torch.ones(1, 4), "worker": 0}
    mixed = mixed_batch(a, b)
    assert mixed["expert_rows"] == 1 and len(mixed["moves"]) == 4
    assert mixed["boards"][3].sum() == 4 and "results" not in mixed


@pytest.mark.integration
def test_training_mixes_the_expert_share_into_every_batch(selfplay, expert, monkeypatch):
    seen: list[tuple[int, int, int]] = []
    real = train_module.mixed_batch

    def spy(batch: dict, extra: dict) -> dict:
        out = real(batch, extra)
        # rows of the batch, expert rows, expert rows with a one-hot target (records' rows)
        seen.append((len(out["moves"]), out["expert_rows"],
                     int((out["targets"][-out["expert_rows"]:].max(dim=1).values == 1).sum())))
        return out

    monkeypatch.setattr(train_module, "mixed_batch", spy)
    config = TrainConfig(model="shao_f32_n2_v", batch_size=16, max_steps=6,
                         train_eval_rows=64, expert_dataset=str(expert), expert_share=0.25,
                         value_per_game=1.0)
    result = train(selfplay, config, progress=False)
    assert result.metrics["steps"] == 6 and len(seen) == 6
    assert all(rows == 16 and share == 4 and onehot == 4 for rows, share, onehot in seen)


def test_an_expert_share_needs_an_expert_dataset_of_the_same_game(selfplay, expert):
    with pytest.raises(ValueError, match="needs an expert dataset"):
        check_run(selfplay, TrainConfig(model="shao_f32_n2", batch_size=8, expert_share=0.5))
    checked = check_run(selfplay, TrainConfig(batch_size=8, expert_share=0.5,
                                              expert_dataset=str(expert)))
    assert checked.model == get_game("gomoku").default_config
    with pytest.raises(ValueError, match="is 0 rows"):
        check_run(selfplay, TrainConfig(model="shao_f32_n2", batch_size=1, expert_share=0.25,
                                        expert_dataset=str(expert)))


# ---------------------------------------------------------------------------- held-out value
@pytest.mark.integration
def test_the_value_loss_on_held_out_games_is_reported_every_epoch(selfplay, expert):
    manifest = json.loads((selfplay / shards.MANIFEST).read_text())
    assert manifest["splits"].get(shards.GAME_SPLIT)  # self-play games held out whole
    config = TrainConfig(model="shao_f32_n2_v", batch_size=8, max_steps=0, max_epochs=2,
                         train_eval_rows=64, expert_dataset=str(expert))
    result = train(selfplay, config, progress=False)
    assert len(result.history) == 2
    for evaluation in [*result.history, result.metrics]:
        for split in (shards.GAME_SPLIT, EXPERT_GAME_SPLIT):
            m = evaluation[split]
            assert m["value_n"] > 0 and 0 <= m["value_mse"] <= 4, (split, m)
            assert 0 <= m["value_sign"] <= 1
    sample = shards.read_split(expert, shards.GAME_SPLIT, results=True)
    assert result.metrics[EXPERT_GAME_SPLIT]["n"] == len(sample[1])
