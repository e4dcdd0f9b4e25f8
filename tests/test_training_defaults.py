"""Trainer defaults a user relies on without asking: one torch thread, a time budget that is not
cut short by a step count nobody gave, checkpoints read without running pickled code, progress
in the log."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path

import pytest
import torch

from services.dataset.build import deduplicate
from services.dataset.shards import SCHEMA_VERSION, SPLITS, atomic_write_json, write_split_shards
from services.games.gomoku.replay import source_pairs
from services.games.registry import get_game
from services.records.rif import read_rif
from services.trainer import train as trainer
from services.trainer.train import CheckpointError, TrainConfig, train
from tests.conftest import SAMPLE_RIF


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds")
    files = write_split_shards(deduplicate([source_pairs("sample", read_rif(SAMPLE_RIF)).pairs]),
                               out)
    atomic_write_json({"schema_version": SCHEMA_VERSION, "files": files,
                       "splits": {s: sum(f["rows"] for f in files if f["split"] == s)
                                  for s in SPLITS}}, out / "manifest.json")
    return out


@pytest.fixture()
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def small(**kw) -> TrainConfig:
    base = {"model": "shao_f32_n2", "batch_size": 64, "max_steps": 6, "train_eval_rows": 128}
    return TrainConfig(**{**base, **kw})


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_training_runs_on_one_thread_unless_told(dataset: Path, keep_threads) -> None:
    assert TrainConfig().num_threads == trainer.DEFAULT_THREADS == 1
    torch.set_num_threads(2)  # torch's default on a 2-core machine
    train(dataset, small(), progress=False)
    assert torch.get_num_threads() == 1
    train(dataset, small(num_threads=2), progress=False)
    assert torch.get_num_threads() == 2
    torch.set_num_threads(3)
    train(dataset, small(num_threads=0), progress=False)  # 0: the caller's setting stays
    assert torch.get_num_threads() == 3


def test_step_limit_defaults_unless_a_time_budget_is_given() -> None:
    assert TrainConfig().step_limit() == trainer.DEFAULT_MAX_STEPS
    assert TrainConfig(max_seconds=600).step_limit() == 0  # the time budget alone
    assert TrainConfig(max_seconds=600, max_steps=50).step_limit() == 50
    assert TrainConfig(max_steps=0).step_limit() == 0
    with pytest.raises(ValueError, match="max_steps"):
        TrainConfig(max_steps=-1).step_limit()


def test_time_budget_is_not_stopped_by_the_default_step_count(
        dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainer, "DEFAULT_MAX_STEPS", 3)
    untimed = train(dataset, small(max_steps=None), progress=False)
    assert untimed.metrics["steps"] == 3 and untimed.metrics["stopped"] == "max_steps"
    timed = train(dataset, small(max_steps=None, max_seconds=1.0), progress=False)
    assert timed.metrics["stopped"] == "max_seconds"
    assert timed.metrics["steps"] > 3


def test_a_config_without_a_model_trains_the_games_default(dataset: Path) -> None:
    """`TrainConfig().model` is None: the dataset's game picks it (`Game.default_config`), as every
    command line and the train flow do; the result and its checkpoint name the model."""
    assert TrainConfig().model is None
    result = train(dataset, small(model=None, max_steps=2), progress=False)
    assert result.config.model == get_game("gomoku").default_config == "shao_f32_n2_v"
    assert "value_mse" in result.metrics["validation"]  # the default has a value head


def test_cosine_schedule_without_a_step_limit_is_refused(dataset: Path) -> None:
    with pytest.raises(ValueError, match="cosine"):
        train(dataset, small(max_steps=0, max_seconds=5, lr_schedule="cosine"), progress=False)


def test_checkpoint_is_plain_and_resumes(dataset: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt.pt"
    config = small(model="shao_f32_n2_v")
    train(dataset, config, progress=False, checkpoint=ckpt)
    torch.load(ckpt, weights_only=True)  # tensors and plain values only
    resumed = train(dataset, small(model="shao_f32_n2_v", max_steps=10), progress=False,
                    checkpoint=ckpt)
    straight = train(dataset, small(model="shao_f32_n2_v", max_steps=10), progress=False)
    assert resumed.metrics["steps"] == 10
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)


class _RunsCode:
    """Unpickling this calls os.mkdir(marker): what a hostile checkpoint could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_checkpoint_that_runs_code_is_refused(dataset: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt.pt"
    train(dataset, small(), progress=False, checkpoint=ckpt)
    state = torch.load(ckpt, weights_only=True)
    marker = tmp_path / "code-ran"
    state["history"] = [_RunsCode(marker)]
    torch.save(state, ckpt)
    with pytest.raises(CheckpointError, match="plain"):
        train(dataset, small(max_steps=8), progress=False, checkpoint=ckpt)
    assert not marker.exists()


def test_go_checkpoint_that_runs_code_is_refused(tmp_path: Path) -> None:
    from services.models.weights import network

    config = "go_res_b2c32"
    marker = tmp_path / "code-ran"
    ckpt = tmp_path / "go.pt"
    torch.save({"model": network(config).state_dict(), "extra": _RunsCode(marker)}, ckpt)
    with pytest.raises(pickle.UnpicklingError, match=r"(?i)weights_only|unpickl"):
        network(config, weights=ckpt)
    assert not marker.exists()
    plain = tmp_path / "plain.pt"
    torch.save({"model": network(config, seed=1).state_dict()}, plain)
    loaded = network(config, weights=plain)
    for a, b in zip(loaded.state_dict().values(), network(config, seed=1).state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)


def test_progress_goes_to_the_log(dataset: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="services.trainer.train"):
        train(dataset, small(), progress=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "services.trainer.train"]
    assert any("1 torch thread" in line and "up to 6 steps" in line for line in lines)
    assert any(line.startswith("epoch 0") and "validation loss" in line for line in lines)
    assert any(line.startswith("stopped by max_steps after 6 steps") for line in lines)
