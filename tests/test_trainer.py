"""Trainer: the paper's network, resume-to-same-result, checkpoints, export check, the gate."""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from services.models.configs import build
from services.models.export import ExportError, export_torchscript
from services.models.shao import ShaoPolicyNet
from services.records.rif import RifGame, read_rif
from services.repository.publish import publish
from services.repository.versions import list_versions
from services.trainer.metrics import stage_labels, stage_of
from services.trainer.publish import check_gate
from services.trainer.train import (
    DEAD_VALUE_STD,
    CheckpointError,
    TrainConfig,
    dead_value_head,
    redraw_value_head,
    train,
)
from tests.conftest import SAMPLE_RIF
from tests.training_recipes import write_dataset, write_sample_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_sample_dataset(tmp_path_factory.mktemp("ds"))


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


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
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
    # the training-loss curve: a point every curve_every (10) steps, not only per epoch
    assert [c["step"] for c in result.curve] == list(range(10, 151, 10))
    losses = [c["loss"] for c in result.curve]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
@pytest.mark.parametrize("model", ["shao_f32_n2", "shao_f32_n2_v"])
def test_killed_run_resumes_to_the_same_result(dataset: Path, tmp_path: Path, model: str) -> None:
    straight = train(dataset, small(model=model, max_steps=60), progress=False)
    ckpt = tmp_path / "ckpt.pt"
    # "killed" at step 25
    train(dataset, small(model=model, max_steps=25), progress=False, checkpoint=ckpt)
    resumed = train(dataset, small(model=model, max_steps=60), progress=False, checkpoint=ckpt)
    assert resumed.metrics["steps"] == 60
    # the curve goes on where it stopped: the point at step 30 averages steps 21-30 of both runs
    assert resumed.curve == straight.curve and len(straight.curve) == 6
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_worker_fed_training_matches_in_process_and_resumes(dataset: Path,
                                                            tmp_path: Path) -> None:
    # a worker process makes the same batches in the same order as the training process would,
    # so the weights are the same; a run killed mid-epoch resumes from the worker loader's state
    straight = train(dataset, small(max_steps=45), progress=False)
    fed = train(dataset, small(max_steps=45, loader_workers=1), progress=False)
    ckpt = tmp_path / "ckpt.pt"
    train(dataset, small(max_steps=20, loader_workers=1), progress=False, checkpoint=ckpt)
    resumed = train(dataset, small(max_steps=45, loader_workers=1), progress=False,
                    checkpoint=ckpt)
    for other in (fed, resumed):
        for a, b in zip(straight.model.state_dict().values(), other.model.state_dict().values(),
                        strict=True):
            assert torch.equal(a, b)


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_value_head_learns_whose_side_wins(tmp_path: Path) -> None:
    # the sample's games rewritten so that Black always wins: every Black-to-move row has
    # result 1 and every White-to-move row 0, so the value must follow the side to move
    games = [dataclasses.replace(g, bresult=1.0) for g in read_rif(SAMPLE_RIF)
             if isinstance(g, RifGame)]
    ds = write_dataset(tmp_path / "ds", games)
    result = train(ds, small(model="shao_f32_n2_v", max_steps=120), progress=False)
    for split in ("train", "validation", "test"):
        m = result.metrics[split]
        assert m["value_n"] == m["n"] and m["finite"]
        assert m["value_sign"] > 0.99 and m["value_mse"] < 0.05, (split, m)
        assert m["value_std"] > 0.9  # +1 on Black's turns, -1 on White's
    assert result.metrics["validation"]["top1"] > 0.05  # the policy learns next to it
    path = tmp_path / "v.pt"
    export_torchscript(result.model, path)
    empty = torch.zeros(1, 15, 15, dtype=torch.int8)
    one_black = empty.clone()
    one_black[0, 7, 7] = 1
    logits, value = torch.jit.load(str(path))(torch.cat([empty, one_black]))
    assert logits.shape == (2, 225) and value.shape == (2,)
    assert value[0] > 0.9 and value[1] < -0.9  # Black to move wins; White to move loses


def test_value_metrics_on_real_results(dataset: Path) -> None:
    result = train(dataset, small(model="shao_f32_n2_v", max_steps=30), progress=False)
    for split in ("train", "validation", "test"):
        m = result.metrics[split]
        assert m["value_n"] > 0.9 * m["n"]  # the sample's games all have a result
        assert 0 <= m["value_sign"] <= 1 and 0 <= m["value_mse"] <= 4
    policy_only = train(dataset, small(max_steps=2), progress=False)
    assert "value_mse" not in policy_only.metrics["validation"]


def _dead_head_weights(path: Path) -> Path:
    """A `shao_f32_n2_v` network whose value head's ReLU units are all dead: its 1x1 conv's
    bias far below anything the trunk's features can lift (no gradient passes it again)."""
    net = build("shao_f32_n2_v")
    with torch.no_grad():
        net.value_head.conv.bias.fill_(-1e4)
    torch.save(net.state_dict(), path)
    return path


def test_a_dead_value_head_is_reported_and_drawn_anew_on_request(dataset: Path, tmp_path: Path,
                                                                caplog) -> None:
    dead = _dead_head_weights(tmp_path / "dead.pt")
    with caplog.at_level(logging.WARNING, logger="services.trainer.train"):
        kept = train(dataset, small(model="shao_f32_n2_v", max_steps=20, init_weights=str(dead)),
                     progress=False)
    m = kept.metrics["validation"]
    # one number everywhere (a Gomoku head turns it by the mover: +-c, a spread of |c|)
    assert m["value_std"] < DEAD_VALUE_STD
    assert dead_value_head(kept.metrics) == ("validation", m["value_std"])
    assert "nearly one value everywhere" in caplog.text and "--fresh-value-head" in caplog.text
    assert torch.all(kept.model.value_head.conv.bias < -1e3)  # 20 steps did not revive it
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="services.trainer.train"):
        fresh = train(dataset, small(model="shao_f32_n2_v", max_steps=20, init_weights=str(dead),
                                     fresh_value_head=True, learning_rate=1e-3),
                      progress=False)
    assert torch.all(fresh.model.value_head.conv.bias.abs() < 1.0)
    assert fresh.metrics["validation"]["value_std"] > 0


def test_redraw_value_head_keeps_the_rest_and_repeats_by_seed() -> None:
    net = build("shao_f32_n2_v")
    with torch.no_grad():
        net.value_head.conv.bias.fill_(-1e4)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    redraw_value_head(net, 7)
    after = net.state_dict()
    for key, value in before.items():
        same = torch.equal(value, after[key])
        assert same != key.startswith("value_head."), key
    again = build("shao_f32_n2_v")
    redraw_value_head(again, 7)
    for key, value in again.state_dict().items():
        if key.startswith("value_head."):
            assert torch.equal(value, after[key]), key
    with pytest.raises(ValueError, match="no value head"):
        redraw_value_head(build("shao_f32_n2"), 7)


def test_fresh_value_head_needs_weights_and_a_value_head(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give --init-weights"):
        train(dataset, small(model="shao_f32_n2_v", fresh_value_head=True), progress=False)
    dead = _dead_head_weights(tmp_path / "dead.pt")
    with pytest.raises(ValueError, match="a _v one"):
        train(dataset, small(init_weights=str(dead), fresh_value_head=True), progress=False)


def test_checkpoint_from_another_config_is_refused(dataset: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt.pt"
    train(dataset, small(max_steps=2), progress=False, checkpoint=ckpt)
    with pytest.raises(CheckpointError, match="shao_f32_n2"):
        train(dataset, small(model="shao_f128_n0", max_steps=4), progress=False, checkpoint=ckpt)


def test_a_damaged_checkpoint_is_a_checkpoint_error_not_a_traceback(dataset: Path,
                                                                     tmp_path: Path) -> None:
    """A checkpoint cut short raised RuntimeError from torch's zip reader, an empty one
    EOFError, one missing its keys KeyError: tracebacks (a Job crash-looping) instead of
    "damaged checkpoint ... delete it to start over"."""
    ckpt = tmp_path / "ckpt.pt"
    train(dataset, small(max_steps=2), progress=False, checkpoint=ckpt)
    whole = ckpt.read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))  # written through a temporary file, renamed
    edited = torch.load(ckpt, weights_only=True)
    del edited["optimizer"]
    no_optimizer = tmp_path / "no-optimizer.pt"
    torch.save(edited, no_optimizer)
    torch.save({"weights": 1}, tmp_path / "foreign.pt")
    cases = {"cut": whole[: len(whole) // 2], "empty": b""}
    for name, data in cases.items():
        (tmp_path / f"{name}.pt").write_bytes(data)
    for name in ("cut", "empty", "no-optimizer", "foreign"):
        with pytest.raises(CheckpointError, match="start over") as info:
            train(dataset, small(max_steps=4), progress=False, checkpoint=tmp_path / f"{name}.pt")
        assert str(tmp_path / f"{name}.pt") in str(info.value), name


def test_a_checkpoint_resumes_only_on_the_dataset_it_began_on(dataset: Path,
                                                                tmp_path: Path) -> None:
    """A re-ingest since (another manifest) was resumed at the old loader position, over other
    rows, or refused with a loader-state message naming no cause."""
    import shutil

    copy = tmp_path / "dataset"
    shutil.copytree(dataset, copy)
    ckpt = tmp_path / "ckpt.pt"
    train(copy, small(max_steps=2), progress=False, checkpoint=ckpt)
    manifest = copy / "manifest.json"
    manifest.write_text(manifest.read_text().replace("{", '{"note": "re-ingested", ', 1))
    with pytest.raises(CheckpointError, match=r"began on another version of .*start over"):
        train(copy, small(max_steps=4), progress=False, checkpoint=ckpt)


def test_a_finished_run_rerun_takes_no_more_steps(dataset: Path, tmp_path: Path) -> None:
    """A run stopped by its epoch limit, rerun on its checkpoint, trained one more epoch each
    time (the budgets were checked only inside the loop)."""
    ckpt = tmp_path / "ckpt.pt"
    first = train(dataset, small(max_steps=0, max_epochs=1, batch_size=512), progress=False,
                  checkpoint=ckpt)
    again = train(dataset, small(max_steps=0, max_epochs=1, batch_size=512), progress=False,
                  checkpoint=ckpt)
    assert first.metrics["stopped"] == again.metrics["stopped"] == "max_epochs"
    assert again.metrics["steps"] == first.metrics["steps"] > 0
    assert again.metrics["epochs"] == first.metrics["epochs"] == 1


def test_held_out_splits_are_checked_like_the_train_split(dataset: Path, tmp_path: Path) -> None:
    """A validation move outside the board was an IndexError at the first evaluation, after an
    epoch (a device-side assert on a GPU), and -100 was silently left out of the loss; a
    missing test split was a traceback from inside the flow."""
    import json
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from services.dataset.shards import DatasetError, read_split
    from services.trainer.train import check_run

    for bad_move in (225, -100):
        copy = tmp_path / f"moved-{bad_move}"
        shutil.copytree(dataset, copy)
        manifest = json.loads((copy / "manifest.json").read_text())
        entry = next(f for f in manifest["files"] if f["split"] == "validation")
        path = copy / entry["path"]
        table = pq.read_table(path)
        moves = table["move"].to_pylist()
        moves[len(moves) // 2] = bad_move
        index = table.schema.get_field_index("move")
        pq.write_table(table.set_column(index, table.schema.field(index),
                                        pa.array(moves, table.schema.field(index).type)), path)
        with pytest.raises(DatasetError, match=r"split 'validation': move outside 0\.\.224"):
            read_split(copy, "validation")
    no_test = tmp_path / "no-test"
    shutil.copytree(dataset, no_test)
    manifest = json.loads((no_test / "manifest.json").read_text())
    manifest["files"] = [f for f in manifest["files"] if f["split"] != "test"]
    (no_test / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match="split 'test' has no shards"):
        check_run(no_test, small())


def test_export_refuses_a_model_with_nan(tmp_path: Path) -> None:
    model = build("shao_f32_n2")
    with torch.no_grad():
        model.net.head.bias.fill_(float("nan"))
    with pytest.raises(ExportError, match="NaN"):
        export_torchscript(model, tmp_path / "model.pt")
    assert not (tmp_path / "model.pt").exists()


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_gate_refuses_a_worse_model_and_leaves_the_repository(dataset: Path,
                                                                 tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    good = train(dataset, small(max_steps=150), progress=False)
    export_torchscript(good.model, tmp_path / "good.pt")
    publish(tmp_path / "good.pt", repo)
    assert check_gate(good.metrics, repo, "gomoku_policy", dataset).passed

    worse = train(dataset, small(max_steps=1, seed=3), progress=False)
    decision = check_gate(worse.metrics, repo, "gomoku_policy", dataset, tolerance=0.01)
    assert not decision.passed
    assert "below version 1" in decision.reason
    assert list_versions(repo) == [1]

    nan_metrics = {**good.metrics, "validation": {**good.metrics["validation"], "finite": False}}
    assert "NaN" in check_gate(nan_metrics, repo, "gomoku_policy", dataset).reason
