"""`make up` / `make down` (scripts/stack.py): the local stack in the background.

`up` on a small model repository (the tiny Gomoku policy as version 1) starts Triton, the search
service and the web board detached, each waited for until healthy, with their logs in the log
folder; `movepred status` then lists the three running and ready; a second `up` leaves them
alone; `down` stops them and nothing is left in the registry. The pid folder is the test's own
($MOVEPRED_TRITON_HOME), so no other Triton of this machine is seen or stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from services.repository.publish import publish
from services.triton.ports import free_port
from tests.triton_fixtures import MODEL_NAME, build_tiny_policy, make_repository

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

pytestmark = [
    pytest.mark.integration,  # Triton, the search service and the board in subprocesses
]


def run(env: dict, *argv: str, timeout: float = 420) -> subprocess.CompletedProcess:
    return subprocess.run([PY, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def status(env: dict) -> dict[str, dict]:
    shown = run(env, "-m", "services.cli", "status", "--json", timeout=60)
    assert shown.returncode == 0, shown.stderr
    return {row["name"]: row for row in json.loads(shown.stdout)}


@pytest.mark.timeout(600)
def test_up_starts_the_stack_in_the_background_and_down_stops_it(tmp_path: Path) -> None:
    from tests.triton_fixtures import require_tritonserver

    require_tritonserver()
    repository = make_repository(tmp_path)
    publish(build_tiny_policy(tmp_path / "tiny.pt"), repository, MODEL_NAME)
    env = {**os.environ, "MOVEPRED_TRITON_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    logs = tmp_path / "log"
    web_port = free_port()
    up_argv = ["scripts/stack.py", "up", "--repository", str(repository),
               "--triton-grpc-port", str(free_port()), "--triton-http-port", str(free_port()),
               "--triton-metrics-port", str(free_port()), "--search-port", str(free_port()),
               "--search-metrics-port", str(free_port()), "--web-port", str(web_port),
               "--search-args", "--go-model= --capture-model=", "--log-dir", str(logs),
               "--timeout", "240"]
    try:
        up = run(env, *up_argv)
        assert up.returncode == 0, up.stdout + up.stderr
        rows = status(env)
        assert {name: rows[name]["health"] for name in ("triton", "search", "web")} == \
            dict.fromkeys(("triton", "search", "web"), "ready"), rows
        for name in ("triton", "search", "web"):
            assert (logs / f"{name}.log").stat().st_size > 0, name
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/api/status",
                                    timeout=10) as answer:
            assert answer.status == 200
        again = run(env, *up_argv)  # already up: left alone
        assert again.returncode == 0 and again.stdout.count("already runs") == 3, again.stdout
        assert {n: r["pid"] for n, r in status(env).items()} == \
            {n: r["pid"] for n, r in rows.items()}
    finally:
        down = run(env, "scripts/stack.py", "down", "--timeout", "20", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert [line.split()[1] for line in down.stdout.splitlines()
            if line.startswith("stopped")] == ["web", "search", "triton"], down.stdout
    assert status(env) == {}


def test_up_reports_a_piece_that_cannot_start_and_leaves_nothing(tmp_path: Path) -> None:
    """Triton on a repository that is not there exits at once: `up` says so with its log's
    end, and nothing of the stack stays behind."""
    from tests.triton_fixtures import require_tritonserver

    require_tritonserver()
    env = {**os.environ, "MOVEPRED_TRITON_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    up = run(env, "scripts/stack.py", "up", "--repository", str(tmp_path / "missing"),
             "--triton-grpc-port", str(free_port()), "--triton-http-port", str(free_port()),
             "--triton-metrics-port", str(free_port()), "--log-dir", str(tmp_path / "log"),
             "--timeout", "120", timeout=200)
    assert up.returncode == 1, up.stdout + up.stderr
    assert "error: triton exited" in up.stderr and "triton.log" in up.stderr, up.stderr
    assert "search: starting" not in up.stdout
    assert status(env) == {}
