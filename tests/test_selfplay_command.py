"""``movepred selfplay``: the self-play loop flow from the project's command (its flags and help
the flow's own, run as a child process)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from services import cli
from services.selfplay.loop import LoopState
from services.selfplay_loop.cli import flow_command


def test_the_command_hands_every_word_to_the_flow():
    parser, commands = cli.build_parser()
    words = ["--game", "go", "--iterations", "1", "-v", "--help"]
    args = parser.parse_args(["selfplay", *words])
    assert args.command == "selfplay" and args.args == words and "selfplay" in commands
    assert flow_command(words) == [sys.executable, "-m", "flows.selfplay", *words]


@pytest.mark.integration  # starts the flow's Python in a child process
def test_help_lists_the_flows_flags(capfd):
    assert cli.main(["selfplay", "--help"]) == 0
    out = capfd.readouterr().out
    for flag in ("--run-dir", "--iterations", "--games", "--expert-dataset", "--expert-share",
                 "--value-per-game", "--selfplay-full-visits"):
        assert flag in out, flag


@pytest.mark.integration
def test_a_bad_setting_is_the_flows_usage_error(capfd):
    assert cli.main(["selfplay", "--games", "0"]) == 2
    assert "--games" in capfd.readouterr().err


@pytest.mark.usefixtures("prefect_harness")
def test_one_tiny_iteration_runs_from_the_command(tmp_path, monkeypatch, capfd):
    from prefect.settings import PREFECT_API_URL

    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run = tmp_path / "run"
    code = cli.main(["selfplay", "--run-dir", str(run), "--iterations", "1", "--game",
                     "gomoku", "--repository", str(tmp_path / "repo"), "--games", "2",
                     "--concurrency", "1", "--openings", "2", "--train-steps", "2",
                     "--batch-size", "8", "--gate-visits", "2", "--gate-max-games", "2",
                     "--selfplay-full-visits", "4", "--selfplay-fast-visits", "2",
                     "--selfplay-max-moves", "16", "--selfplay-batch-size", "4"])
    out = capfd.readouterr().out
    assert code == 0, out[-2000:]
    summary = json.loads(out[out.rindex("{\n"):])
    assert summary["finished_iterations"] == 1 and summary["run_dir"] == str(run)
    state = LoopState.load(Path(run))
    assert state.history[0]["selfplay"]["games"] == 2
    assert state.history[0]["train"]["value_per_game"] == 1.0
