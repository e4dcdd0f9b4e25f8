"""The train flow publishes a version with its stored positions and rolls it out on a running
Triton through the smoke test; a refusal is the flow's answer, not a traceback.

The module trains the demo's network the demo's way (`scripts/demo.py`'s `DEMO_TRAINING`, a
recipe `tests/test_training_recipes.py` checks to pass with margin on every float path) and
checks that it passes every blocking smoke check, then trains a one-step network that the smoke
test must refuse and quarantine while v1 keeps serving.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from services.repository.smoke_positions import SMOKE_POSITIONS_FILE, read_smoke_positions
from services.repository.versions import QUARANTINE_DIR, list_versions
from services.trainer.metrics import evaluate
from services.triton.client import PolicyClient
from services.triton.launcher import TritonServer
from services.triton.rollout import read_state, rollout
from tests.conftest import SAMPLE_RIF
from tests.training_recipes import SERVED_RECIPES
from tests.triton_fixtures import MODEL_NAME, require_tritonserver

pytestmark = [
    pytest.mark.timeout(900),  # training 600 steps and two version loads on a busy 2-core box
    pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"),
]



@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, prefect_harness) -> dict:
    from flows.ingest import ingest
    from flows.train import train_flow

    require_tritonserver()
    work = tmp_path_factory.mktemp("train-rollout")
    ingest(sources=[str(SAMPLE_RIF)], out_dir=str(work / "dataset"))
    out = train_flow(dataset_dir=str(work / "dataset"), repository=str(work / "repo"),
                     config=SERVED_RECIPES["make demo"],
                     run_dir=str(work / "run1"))
    assert out["version"] == 1
    with TritonServer(work / "repo", log_path=work / "triton.log",
                      startup_timeout_s=120) as triton:
        yield {"work": work, "repo": work / "repo", "dataset": work / "dataset",
               "url": triton.grpc_url, **out}


def test_publish_stores_real_positions_and_their_top1(trained: dict) -> None:
    folder = trained["repo"] / MODEL_NAME / "1"
    boards, moves = read_smoke_positions(folder / SMOKE_POSITIONS_FILE)
    assert boards.dtype == np.int8 and boards.shape[1:] == (15, 15)
    assert 0 < len(moves) <= 256 and moves.shape == (len(boards),)
    assert (boards.reshape(len(boards), -1)[np.arange(len(moves)), moves] == 0).all()
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["value_head"] is True
    assert meta["smoke_positions"]["rows"] == len(moves)
    model = torch.jit.load(str(folder / "model.pt"), map_location="cpu")
    assert meta["smoke_positions"]["top1"] == pytest.approx(
        evaluate(model, boards, moves, "cpu", game=meta["game"])["top1"])


def test_the_demo_network_passes_every_blocking_smoke_check(trained: dict) -> None:
    with PolicyClient(trained["url"]) as client:
        report = rollout(client, trained["repo"], 1)  # already serving: smoke-tested only
    checks = {c.name: c for c in report.smoke}
    print("DEMO-SMOKE", json.dumps({n: c.detail for n, c in checks.items()}))
    assert report.smoke_passed and not report.changed, report.to_markdown()
    for name in ("tactics", "value", "top-1 (stored positions)"):
        assert checks[name].blocking and checks[name].passed, checks[name]
    assert checks["agreement with serving"].skipped  # v1 is the serving version


def test_a_refused_version_is_the_flow_answer_and_is_quarantined(trained: dict) -> None:
    from flows.train import train_flow
    from services.trainer.train import TrainConfig

    out = train_flow(dataset_dir=str(trained["dataset"]), repository=str(trained["repo"]),
                     config=TrainConfig(max_steps=1, batch_size=64, seed=1, num_threads=1),
                     gate_tolerance=1.0, run_dir=str(trained["work"] / "run2"),
                     triton_url=trained["url"])
    assert out["version"] == 2 and out["published"]
    assert out["served"] is False
    rolled = out["rollout"]
    assert "smoke test failed" in rolled["reason"] and "tactics" in rolled["reason"]
    assert rolled["serving"] == 1 and rolled["quarantined"] == "quarantine/2"
    assert "refused" in out["next"] and "v1 keeps serving" in out["next"]
    report = (Path(out["run_dir"]) / "report.md").read_text()
    assert "rollout refused it" in report
    repo = trained["repo"]
    assert list_versions(repo, MODEL_NAME) == [1]
    assert (repo / MODEL_NAME / QUARANTINE_DIR / "2" / "reason.json").is_file()
    assert read_state(repo, MODEL_NAME)["current"] == 1
    with PolicyClient(trained["url"]) as client:
        assert client.ready_versions() == ["1"]
        assert client.infer(np.zeros((1, 15, 15), np.int8)).model_version == "1"
