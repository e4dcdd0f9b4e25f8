"""`make train` / `make ingest` as a user meets them: one-line errors that name the next command,
a published version that is reported even when Triton is down, one default per budget, and the
flows' log lines in the Prefect run's log (the UI's Logs tab)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flows  # noqa: F401  (Prefect defaults before Prefect is imported)
from flows.train import build_parser, serving_hint, train_flow
from services import settings
from services.trainer.train import DEFAULT_MAX_STEPS, DEFAULT_THREADS, TrainConfig
from tests.conftest import SAMPLE_RIF

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, prefect_harness) -> Path:
    from flows.ingest import ingest

    out = tmp_path_factory.mktemp("flowcli") / "dataset"
    ingest(sources=[str(SAMPLE_RIF)], out_dir=str(out))
    return out


@pytest.mark.integration  # the flow's command line in a subprocess
def test_train_without_a_dataset_says_to_ingest(tmp_path: Path) -> None:
    missing = tmp_path / "artifacts" / "dataset"
    run = subprocess.run([sys.executable, "-m", "flows.train", "--dataset", str(missing)],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    assert run.stderr.strip() == (f"error: no dataset at {missing}: run `make ingest` first "
                                  f"(or `python -m flows.ingest SOURCES --out {missing}`)")
    assert "Traceback" not in run.stderr
    missing.mkdir(parents=True)  # a manifest cut short (a disk full): one line, not a traceback
    (missing / "manifest.json").write_text("")
    run = subprocess.run([sys.executable, "-m", "flows.train", "--dataset", str(missing)],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.startswith(f"error: {missing / 'manifest.json'}: unreadable manifest")


def test_train_with_triton_down_publishes_reports_and_names_the_next_command(
        dataset: Path, tmp_path: Path) -> None:
    url = f"127.0.0.1:{free_port()}"  # nothing listens there
    repo, run_dir = tmp_path / "repo", tmp_path / "run"
    run = subprocess.run(
        [sys.executable, "-m", "flows.train", "--dataset", str(dataset), "--repository",
         str(repo), "--run-dir", str(run_dir), "--steps", "20", "--batch-size", "64",
         "--triton-url", url], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout
    assert (repo / "gomoku_policy" / "1" / "model.pt").is_file()
    report = (run_dir / "report.md").read_text()
    assert "published **gomoku_policy v1**" in report
    assert "| game_test |" in report  # top-1 on whole held-out games next to the position split
    last = run.stdout.strip().splitlines()[-1]
    assert last == serving_hint(url, str(repo), "gomoku_policy", 1)
    assert f"Triton at {url} is not reachable" in last and "but not served" in last
    assert f"-m services.triton.server --repository {repo}" in last
    assert f"movepred rollout --triton-url {url} --repository {repo}" in last
    assert "not served" in report


def test_bad_training_settings_are_one_line_before_anything_runs(
        dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--eval-batch 0 failed after a whole epoch (range() step 0), -1 reported loss 0 and
    top-1 0 to the gate; --grad-clip -1 flipped every gradient; a batch larger than the train
    split trained no step for every epoch, then published the untrained network; an unknown
    or other game's model was a Prefect traceback."""
    from flows.train import main

    run_dir = tmp_path / "run"
    base = ["--dataset", str(dataset), "--run-dir", str(run_dir), "--steps", "1"]
    usage = {  # argparse's own refusal: exit 2 with the flag named
        ("--eval-batch", "0"): "must be >= 1", ("--eval-batch", "-1"): "must be >= 1",
        ("--grad-clip", "-1"): "must be >= 0", ("--threads", "-1"): "must be in 0..1024",
        ("--train-eval-rows", "-1"): "must be >= 1", ("--batch-size", "0"): "must be >= 1",
        ("--learning-rate", "nan"): "must be >= 0", ("--steps", "-1"): "must be >= 0",
        ("--loader-workers", "-1"): "must be in 0..256", ("--epochs", "0"): "must be >= 1",
        ("--model", "shao_f9_n9"): "invalid choice",
    }
    for flag, message in usage.items():
        with pytest.raises(SystemExit) as exited:
            main([*base, *flag])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and message in err and flag[0] in err, (flag, err)
    # known only from the dataset: one line on stderr, exit 2
    rows = json.loads((dataset / "manifest.json").read_text())["splits"]["train"]
    for flag, message in (
            (["--batch-size", str(rows + 1)], f"{rows} train rows give no batch of {rows + 1}"),
            (["--model", "go_res_b2c32"], "holds gomoku positions, model config 'go_res_b2c32'"),
    ):
        assert main([*base, *flag]) == 2, flag
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not run_dir.exists()  # nothing ran
    # a config built in code (a Prefect parameter, a deployment) is refused the same way
    with pytest.raises(ValueError, match=r"grad_clip must be >= 0, got -1; eval_batch must be "
                                         r">= 1, got 0"):
        TrainConfig(eval_batch=0, grad_clip=-1)
    with pytest.raises(ValueError, match="model must be one of"):
        TrainConfig(model="shao_f9_n9")


def test_hint_for_the_default_repository_is_make_triton() -> None:
    hint = serving_hint("127.0.0.1:8001", "model_repository", "go_policy", 3)
    assert "Next: `make triton`" in hint and "--model-name go_policy" in hint


def test_one_default_per_budget_and_one_thread() -> None:
    args = build_parser().parse_args([])
    assert args.max_steps is None and args.num_threads == DEFAULT_THREADS == 1
    config = settings.from_args(TrainConfig, args)
    assert config == TrainConfig()
    assert config.step_limit() == DEFAULT_MAX_STEPS
    assert settings.from_args(TrainConfig, build_parser().parse_args(
        ["--seconds", "600"])).step_limit() == 0
    helptext = build_parser().format_help()
    assert f"default {DEFAULT_MAX_STEPS}" in helptext and "--seconds" in helptext
    # the flow takes the settings as one TrainConfig, none of them as a parameter of its own
    params = inspect.signature(train_flow.fn).parameters
    assert params["config"].default is None
    assert not set(params) & set(settings.field_defaults(TrainConfig))

    from flows.schedules import train_deployment

    deployment = train_deployment()
    assert deployment.parameters["config"] == dataclasses.asdict(TrainConfig())


def _flow_run_logs(flow_run_id) -> list[tuple[int, str]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    async def read() -> list[tuple[int, str]]:
        async with get_client() as client:
            logs = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
        return [(log.level, log.message) for log in logs]

    return asyncio.run(read())


def _wait_for_logs(flow_run_id, wanted: list[str]) -> list[str]:
    """The run's messages once every `wanted` text is among them (logs are sent in batches)."""
    deadline = time.monotonic() + 60
    while True:
        messages = [m for level, m in _flow_run_logs(flow_run_id) if level >= 20]
        if all(any(w in m for m in messages) for w in wanted) or time.monotonic() > deadline:
            return messages
        time.sleep(0.5)


def test_flow_runs_show_their_info_logs_in_prefect(dataset: Path, tmp_path: Path) -> None:
    from flows.ingest import ingest

    state = ingest(sources=[str(SAMPLE_RIF)], out_dir=str(tmp_path / "ds2"), return_state=True)
    wanted = ["ingesting 1 gomoku source", "committed"]
    messages = _wait_for_logs(state.state_details.flow_run_id, wanted)
    assert all(any(w in m for m in messages) for w in wanted), messages

    state = train_flow(dataset_dir=str(dataset), repository=str(tmp_path / "repo"),
                       config=TrainConfig(max_steps=8, batch_size=64, curve_every=2),
                       run_dir=str(tmp_path / "run"),
                       return_state=True)
    # the flow's own lines and the trainer's progress (standard logging, services.*)
    wanted = ["training shao_f32_n2_v (gomoku)", "1 torch thread", "stopped by max_steps",
              "gate passed", "published gomoku_policy v1"]
    messages = _wait_for_logs(state.state_details.flow_run_id, wanted)
    assert all(any(w in m for m in messages) for w in wanted), messages
    _check_curve_artifacts(tmp_path / "run")


def _check_curve_artifacts(run_dir: Path) -> None:
    """The short run's curve has a point every 2 steps (more than the one evaluation at its
    end), drawn as a line, and both charts are the run's image artifacts."""
    import base64
    import io

    import torch
    from matplotlib import image
    from prefect.artifacts import Artifact

    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)["state"]
    assert [c["step"] for c in state["curve"]] == [2, 4, 6, 8]
    for key in ("train-curves", "train-stages"):
        artifact = Artifact.get(key)
        assert artifact is not None and artifact.type == "image", key
        assert artifact.data.startswith("data:image/png;base64,")
        png = base64.b64decode(artifact.data.split(",", 1)[1])
        assert png == (run_dir / f"{key.split('-')[1]}.png").read_bytes()
    curves = image.imread(io.BytesIO((run_dir / "curves.png").read_bytes()))
    assert curves.shape[:2] == (400, 1000)  # 10 x 4 inches at 100 dpi
