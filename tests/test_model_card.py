"""Model cards: every published version's metadata.json says which data, code and recipe made
it and how good it is, and `movepred serving` prints it.

* the train flow (real Prefect, the shipped sample ingested) publishes v1 whose card has every
  field: model config, dataset manifest hash and rows (equal to the manifest's), the git
  commit of this checkout, the TrainConfig, metrics (top-1/top-5 per split, top-1 by stage,
  value figures), the gate's decision, the created time; `movepred serving` against a real
  Triton serving it prints each of them;
* a Go version published by hand (`services.trainer.publish`, every game's one publish path) on
  a dataset carries the same fields, metrics and stored positions included, and no path into a
  temporary folder that no longer exists; one published from a trainer checkpoint takes the
  checkpoint's recipe and last evaluation; a dataset of another game is refused;
* a Capture Game version published from a policy search's best_network.pt carries its fitness.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from services.trainer.train import TrainConfig
from tests.conftest import SAMPLE_RIF

ROOT = Path(__file__).resolve().parents[1]
STEPS = 30


def commit() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def paths_in(value: Any) -> list[str]:
    """Every string in a JSON value that names an absolute path."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in paths_in(v)]
    if isinstance(value, list):
        return [p for v in value for p in paths_in(v)]
    return [value] if isinstance(value, str) and value.startswith("/") else []


def assert_card(meta: dict, dataset: Path | None, splits: tuple[str, ...]) -> None:
    from services.repository.model_card import CARD_FIELDS

    for field in (*CARD_FIELDS, "published_at", "sha256", "version", "source"):
        assert field in meta, field
    assert meta["code"]["commit"] == commit()
    assert meta["model_config"]["parameters"] > 0 and meta["model_config"]["name"]
    if dataset is not None:
        manifest = (dataset / "manifest.json").read_bytes()
        assert meta["dataset"]["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
        rows = {}
        for entry in json.loads(manifest)["files"]:
            rows[entry["split"]] = rows.get(entry["split"], 0) + entry["rows"]
        assert meta["dataset"]["rows"] == rows and sum(rows.values()) > 0
    for split in splits:
        m = meta["metrics"][split]
        assert 0.0 <= m["top1"] <= m["top5"] <= 1.0 and m["n"] > 0, split
    assert meta["metrics_source"]
    for path in paths_in(meta):  # nothing names a temporary folder that is gone
        assert Path(path).exists(), path


@pytest.fixture(scope="module")
def trained(tmp_path_factory, prefect_harness) -> dict:
    from flows.ingest import ingest
    from flows.train import train_flow

    work = tmp_path_factory.mktemp("card")
    ingest(sources=[str(SAMPLE_RIF)], out_dir=str(work / "dataset"))
    out = train_flow(dataset_dir=str(work / "dataset"), repository=str(work / "repo"),
                     config=TrainConfig(max_steps=STEPS, batch_size=64),
                     run_dir=str(work / "run"))
    assert out["version"] == 1
    meta = json.loads((work / "repo" / "gomoku_policy" / "1" / "metadata.json").read_text())
    return {"work": work, "meta": meta, **out}


def test_train_flow_version_carries_its_model_card(trained) -> None:
    meta = trained["meta"]
    assert_card(meta, trained["work"] / "dataset", ("train", "validation", "test"))
    assert meta["config"]["max_steps"] == STEPS and meta["config"]["model"].endswith("_v")
    assert meta["model_config"]["name"] == meta["config"]["model"]
    assert meta["model_config"]["value_head"] is True
    assert meta["metrics"]["validation"]["top1_by_stage"]  # top-1 by game stage
    assert "value_mse" in meta["metrics"]["validation"]
    assert meta["gate"]["passed"] is True and meta["gate"]["reason"]
    assert meta["gate"]["candidate_top1"] == pytest.approx(meta["metrics"]["validation"]["top1"])
    assert meta["source"] == f"train run {(trained['work'] / 'run').resolve()}"


def test_movepred_serving_prints_the_model_card(trained) -> None:
    from services.triton.launcher import TritonServer

    repo = trained["work"] / "repo"
    meta = trained["meta"]
    with TritonServer(repo, log_path=trained["work"] / "triton.log") as triton:
        proc = subprocess.run(
            [sys.executable, "-m", "services.cli", "serving", "--triton-url", triton.grpc_url,
             "--repository", str(repo)], capture_output=True, text=True, timeout=120, cwd=ROOT,
            env=os.environ.copy())
        as_json = subprocess.run(
            [sys.executable, "-m", "services.cli", "serving", "--triton-url", triton.grpc_url,
             "--repository", str(repo), "--json"], capture_output=True, text=True,
            timeout=120, cwd=ROOT, env=os.environ.copy())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    assert "Triton serves v1" in text
    assert f"model card: gomoku_policy v1, created {meta['published_at']}" in text
    assert f"model config: {meta['model_config']['name']} (gomoku" in text
    assert meta["dataset"]["manifest_sha256"][:12] in text
    assert f"commit {commit()}" in text
    assert f"max_steps {STEPS}" in text  # the recipe
    top1 = meta["metrics"]["validation"]["top1"]
    assert f"validation  top-1 {100 * top1:.1f}%" in text
    assert "top-1 by stage (plies): 0-9 " in text and "value MSE" in text
    assert f"gate: passed: {meta['gate']['reason']}" in text
    card = json.loads(as_json.stdout)["model_card"]
    assert card["sha256"] == meta["sha256"] and card["gate"] == meta["gate"]


@pytest.fixture(scope="module")
def go_dataset(tmp_path_factory) -> Path:
    from tests.test_go_training import random_games_sgf, write_go_dataset

    base = tmp_path_factory.mktemp("go-card")
    sgf = base / "random.sgf"
    sgf.write_text(random_games_sgf(24, 9, seed=1))
    write_go_dataset([sgf], base / "ds", 9)
    return base / "ds"


def test_a_go_card_has_metrics_and_no_dangling_path(tmp_path: Path, go_dataset: Path) -> None:
    from services.trainer.publish import publish_model

    repo = tmp_path / "repo"
    version = publish_model(repo, config="go_res_b2c32", seed=3, dataset=go_dataset)
    meta = json.loads((repo / "go_policy" / str(version) / "metadata.json").read_text())
    splits = tuple(s for s, n in meta["dataset"]["rows"].items() if n)
    assert "validation" in splits
    assert_card(meta, go_dataset, splits)
    assert meta["model_config"] == {**meta["model_config"], "name": "go_res_b2c32",
                                    "game": "go", "value_head": False}
    assert meta["metrics"]["validation"]["top1_by_stage"]
    assert meta["source"] == "untrained go_res_b2c32, seed 3"
    assert meta["gate"]["passed"] is None  # published by hand: said as such
    assert meta["config"] is None  # no training recipe: untrained
    assert meta["game"] == "go" and meta["pass_move"] is True  # the backend's logits width
    stored = meta["smoke_positions"]  # validation positions for the rollout's smoke test
    assert stored["rows"] > 0 and 0 <= stored["top1"] <= 1
    assert (repo / "go_policy" / str(version) / stored["file"]).is_file()


def test_a_dataset_of_another_game_is_refused(tmp_path: Path, go_dataset: Path) -> None:
    from services.trainer.publish import publish_model

    with pytest.raises(ValueError, match="is a go dataset, 'capture_mdrnn_k2' a capture network"):
        publish_model(tmp_path / "repo", config="capture_mdrnn_k2", dataset=go_dataset)
    assert not (tmp_path / "repo").exists()


def test_a_go_card_from_a_checkpoint(tmp_path: Path) -> None:
    from services.models.weights import network
    from services.trainer.publish import publish_model

    net = network("go_res_b2c32", seed=5)
    recipe = {"model": "go_res_b2c32", "max_steps": 7, "batch_size": 16}
    evaluation = {"step": 7, "epoch": 1, "validation": {"top1": 0.25, "top5": 0.5, "n": 10,
                                                        "loss": 3.0}}
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save({"model": net.state_dict(), "config": recipe, "history": [evaluation]},
               checkpoint)
    version = publish_model(tmp_path / "repo", weights=checkpoint)  # it names its config
    meta = json.loads((tmp_path / "repo" / "go_policy" / str(version) / "metadata.json")
                      .read_text())
    assert_card(meta, None, ("validation",))
    assert meta["config"] == recipe and meta["metrics"]["validation"]["top1"] == 0.25
    assert meta["source"] == str(checkpoint.resolve()) and meta["dataset"] is None


def test_a_capture_card_has_the_policy_search_fitness(tmp_path: Path) -> None:
    from services.games.capture.game import CAPTURE
    from services.models.configs import build
    from services.repository.model_card import render
    from services.trainer.publish import publish_model

    config = CAPTURE.default_config
    weights = tmp_path / "best_network.pt"
    torch.save({"config": config, "model": build(config).state_dict(),
                "board_size": 5, "fitness": 0.625, "run": "cell-0"}, weights)
    version = publish_model(tmp_path / "repo", weights=weights)
    folder = next((tmp_path / "repo").iterdir()) / str(version)
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["metrics"]["policy_search"] == {"fitness": 0.625, "board_size": 5,
                                                "run": "cell-0"}
    assert meta["model_config"]["name"] == config
    assert meta["code"]["commit"] == commit() and meta["source"] == str(weights.resolve())
    assert any("fitness 0.625" in line for line in render(meta))
