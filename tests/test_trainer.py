"""Trainer: the paper's network, resume-to-same-result, checkpoints, export check, the gate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from services.dataset.build import deduplicate, source_pairs
from services.dataset.shards import SCHEMA_VERSION, SPLITS, atomic_write_json, write_split_shards
from services.models.configs import build
from services.models.shao import ShaoPolicyNet
from services.records.rif import read_rif
from services.trainer import gate
from services.trainer.export import ExportError, export_torchscript
from services.trainer.metrics import stage_labels, stage_of
from services.trainer.train import CheckpointError, TrainConfig, train
from services.triton.publisher import list_versions, publish
from tests.conftest import SAMPLE_RIF


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds")
    result = source_pairs("sample", read_rif(SAMPLE_RIF))
    files = write_split_shards(deduplicate([result.pairs]), out)
    atomic_write_json({"schema_version": SCHEMA_VERSION, "files": files,
                       "splits": {s: sum(f["rows"] for f in files if f["split"] == s)
                                  for s in SPLITS}}, out / "manifest.json")
    return out


def small(**kw) -> TrainConfig:
    base = {"model": "shao_f32_n2", "batch_size": 64, "max_steps": 40, "train_eval_rows": 256}
    return TrainConfig(**{**base, **kw})


def test_shao_network_matches_the_paper_layout() -> None:
    net = ShaoPolicyNet(filters=128, n_convs=4)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.kernel_size for c in convs] == [(5, 5)] + [(3, 3)] * 4 + [(1, 1)]
    assert convs[0].in_channels == 3 and convs[-1].out_channels == 1
    assert net(torch.zeros(2, 3, 15, 15)).shape == (2, 225)
    fc = ShaoPolicyNet(filters=8, n_convs=0, head="fc")
    assert fc(torch.zeros(1, 3, 15, 15)).shape == (1, 225)


def test_stage_buckets_follow_fig7() -> None:
    assert stage_of(np.array([0, 9, 10, 99, 100, 180])).tolist() == [0, 0, 1, 9, 10, 10]
    assert stage_labels()[0] == "0-9" and stage_labels()[-1] == "100+"


def test_training_learns_and_reports_metrics(dataset: Path) -> None:
    result = train(dataset, small(max_steps=150), progress=False)
    m = result.metrics
    assert m["steps"] == 150 and m["stopped"] == "max_steps"
    assert m["validation"]["top1"] > 0.1  # uniform guessing over ~200 points gives ~0.005
    assert m["validation"]["top5"] >= m["validation"]["top1"]
    assert "0-9" in m["validation"]["top1_by_stage"]
    # every epoch reports train, validation and test; only validation drives early stopping
    assert result.history and all({"train", "validation", "test"} <= set(h)
                                  for h in result.history)
    assert m["test"] == result.history[-1]["test"] and m["game"] == "gomoku"


def test_killed_run_resumes_to_the_same_result(dataset: Path, tmp_path: Path) -> None:
    straight = train(dataset, small(max_steps=60), progress=False)
    ckpt = tmp_path / "ckpt.pt"
    train(dataset, small(max_steps=25), progress=False, checkpoint=ckpt)  # "killed" at step 25
    resumed = train(dataset, small(max_steps=60), progress=False, checkpoint=ckpt)
    assert resumed.metrics["steps"] == 60
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)


def test_checkpoint_from_another_config_is_refused(dataset: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt.pt"
    train(dataset, small(max_steps=2), progress=False, checkpoint=ckpt)
    with pytest.raises(CheckpointError, match="shao_f32_n2"):
        train(dataset, small(model="shao_f128_n0", max_steps=4), progress=False, checkpoint=ckpt)


def test_export_refuses_a_model_with_nan(tmp_path: Path) -> None:
    model = build("shao_f32_n2")
    with torch.no_grad():
        model.net.head.bias.fill_(float("nan"))
    with pytest.raises(ExportError, match="NaN"):
        export_torchscript(model, tmp_path / "model.pt")
    assert not (tmp_path / "model.pt").exists()


def test_gate_refuses_a_worse_model_and_leaves_the_repository(dataset: Path,
                                                                 tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    good = train(dataset, small(max_steps=150), progress=False)
    export_torchscript(good.model, tmp_path / "good.pt")
    publish(tmp_path / "good.pt", repo)
    assert gate.check(good.metrics, repo, "gomoku_policy", dataset).passed

    worse = train(dataset, small(max_steps=1, seed=3), progress=False)
    decision = gate.check(worse.metrics, repo, "gomoku_policy", dataset, tolerance=0.01)
    assert not decision.passed
    assert "below version 1" in decision.reason
    assert list_versions(repo) == [1]

    nan_metrics = {**good.metrics, "validation": {**good.metrics["validation"], "finite": False}}
    assert "NaN" in gate.check(nan_metrics, repo, "gomoku_policy", dataset).reason
