"""`movepred status` / `movepred stop` (services.processes) on real processes.

Each test points the pid folder at its own temporary directory ($MOVEPRED_TRITON_HOME), starts
real processes the way the Makefile does (the search service, a command under
``python -m services.processes exec``, the Triton launcher), reads them back from
`movepred status --json`, and stops them with `movepred stop`. A pid file naming a process that
is not the recorded one (pid reused: another start time) is refused and that process survives.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from services import processes
from services.triton.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


@pytest.fixture
def run_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MOVEPRED_TRITON_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts; whatever is still running at the end is stopped: SIGTERM
    first (a Triton launcher then takes its server down; SIGKILL would orphan it), SIGKILL
    after 30 s."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def movepred(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "services.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=os.environ.copy())


def status_rows() -> list[dict]:
    proc = movepred("status", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def wait_for(predicate, timeout_s: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_search_service_shows_in_status_and_stops(run_home: Path,
                                                  started: list[subprocess.Popen]) -> None:
    port, metrics_port, dead_triton = (free_port("127.0.0.1") for _ in range(3))
    proc = subprocess.Popen(
        [PYTHON, "-m", "services.search.server", "--port", str(port), "--triton-url",
         f"127.0.0.1:{dead_triton}", "--metrics-port", str(metrics_port)],
        cwd=ROOT, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    started.append(proc)
    wait_for(lambda: any(r["name"] == "search" for r in status_rows()), 90, "the pid file")
    (row,) = status_rows()
    assert row["pid"] == proc.pid and row["state"] == "running"
    assert row["ports"] == {"grpc": port, "metrics": metrics_port}
    assert row["uptime_s"] is not None and 0 <= row["uptime_s"] < 300
    # the process answers, its models do not (no Triton there): said as such
    assert row["health"] == "up, models not ready"
    assert row["metrics_url"] == f"http://127.0.0.1:{metrics_port}/metrics"
    text = movepred("status")
    assert "search" in text.stdout and str(proc.pid) in text.stdout, text.stdout

    stopped = movepred("stop", "search", "--timeout", "20")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"stopped search (pid {proc.pid}): SIGTERM" in stopped.stdout
    assert "SIGKILL" not in stopped.stdout  # it stopped gracefully
    assert proc.wait(timeout=10) == 0  # its own SIGTERM handler ran: exit code 0
    assert status_rows() == []
    assert not list(run_home.glob("run/*.pid"))


def test_exec_wrapper_keeps_the_pid_and_stop_escalates(run_home: Path,
                                                       started: list[subprocess.Popen]) -> None:
    """A command under `services.processes exec` (how `make prefect-server` runs): the pid file
    names the command's own process; one that ignores SIGTERM is killed after the timeout."""
    port = free_port("127.0.0.1")
    script = ("import signal, socket, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
              "time.sleep(600)")
    proc = subprocess.Popen(
        [PYTHON, "-m", "services.processes", "exec", "--name", "stubborn", "--port",
         f"api={port}", "--", PYTHON, "-c", script], cwd=ROOT, env=os.environ.copy())
    started.append(proc)
    wait_for(lambda: processes._tcp_health(port) == "listening", 60, "the listener")
    (row,) = status_rows()
    assert row["name"] == "stubborn" and row["pid"] == proc.pid  # exec: the same pid
    assert row["health"] == "listening" and row["ports"] == {"api": port}

    stopped = movepred("stop", "--timeout", "1")
    assert stopped.returncode == 0, stopped.stdout
    assert "SIGKILL after 1 s" in stopped.stdout
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert status_rows() == []


def test_stop_refuses_a_pid_that_is_not_the_recorded_process(
        run_home: Path, started: list[subprocess.Popen]) -> None:
    """A pid file whose pid now runs something else (another start time) is never signalled."""
    other = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(600)"])
    started.append(other)
    wait_for(lambda: processes.proc_start_ticks(other.pid) is not None, 10, "the process")
    path = processes.write_entry("web", other.pid, {"http": free_port("127.0.0.1")})
    record = json.loads(path.read_text())
    record["start_ticks"] -= 100  # the recorded process started a second earlier: not this one
    path.write_text(json.dumps(record))

    stopped = movepred("stop")
    assert stopped.returncode == 1
    assert "refused: web: pid" in stopped.stderr and "now belongs to another process" in \
        stopped.stderr
    time.sleep(0.5)
    assert other.poll() is None  # untouched
    assert not path.exists()  # the stale file is gone; status shows nothing
    assert status_rows() == []


def test_dead_process_is_reported_stale_and_cleaned(run_home: Path) -> None:
    proc = subprocess.Popen([PYTHON, "-c", "pass"])
    proc.wait(timeout=30)
    path = processes.write_entry("web", proc.pid, {"http": 1})
    (row,) = processes.status()
    assert row["state"].startswith("stale: ") and row["health"] is None
    assert not path.exists()


def tiny_repository(tmp_path: Path) -> Path:
    """A model repository holding one published tiny policy (skips without tritonserver)."""
    from tests.triton_fixtures import (
        MODEL_NAME,
        build_tiny_policy,
        make_repository,
        publish,
        require_tritonserver,
    )

    require_tritonserver()
    repository = make_repository(tmp_path)
    publish(build_tiny_policy(tmp_path / "tiny.pt"), repository, MODEL_NAME)
    return repository


def test_triton_launcher_shows_in_status_and_stops(run_home: Path,
                                                   started: list[subprocess.Popen],
                                                   tmp_path: Path) -> None:
    from tests.triton_fixtures import MODEL_NAME

    repository = tiny_repository(tmp_path)
    grpc_port, http_port, metrics_port = (free_port("127.0.0.1") for _ in range(3))
    launcher = subprocess.Popen(
        [PYTHON, "-m", "services.triton.server", "--repository", str(repository),
         "--grpc-port", str(grpc_port), "--http-port", str(http_port),
         "--metrics-port", str(metrics_port)],
        cwd=ROOT, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(launcher)

    def ready() -> bool:
        rows = status_rows()
        return bool(rows) and rows[0]["health"] == "ready" and processes._http_health(
            f"http://127.0.0.1:{http_port}/v2/models/{MODEL_NAME}/ready") == "ready"

    wait_for(ready, 180, "Triton ready with its model")
    (row,) = status_rows()
    assert row["name"] == "triton" and row["state"] == "running"
    assert row["ports"] == {"grpc": grpc_port, "http": http_port, "metrics": metrics_port}
    assert row["metrics_url"] == f"http://127.0.0.1:{metrics_port}/metrics"
    server_pid = row["pid"]
    assert processes.cmdline(server_pid)[0].endswith("tritonserver")
    # Strict readiness is off, so /v2/health/ready stays 200 without a model; status must not
    # say ready then: it reads the repository index
    unload = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v2/repository/models/{MODEL_NAME}/unload", data=b"{}")
    with urllib.request.urlopen(unload, timeout=30) as answer:
        assert answer.status == 200
    assert processes._http_health(f"http://127.0.0.1:{http_port}/v2/health/ready") == "ready"
    unloaded = f"up, not ready: {MODEL_NAME} (UNAVAILABLE: unloaded)"  # after UNLOADING
    wait_for(lambda: status_rows()[0]["health"] == unloaded, 60, "status to see the unload")

    stopped = movepred("stop", "triton", "--timeout", "30")
    assert stopped.returncode == 0, stopped.stdout
    assert f"to its launcher (pid {launcher.pid})" in stopped.stdout
    assert "SIGKILL" not in stopped.stdout
    assert launcher.wait(timeout=30) == 0  # the launcher shut its server down and exited
    assert not processes.alive(server_pid)
    assert status_rows() == []


def test_triton_launcher_stopped_while_starting_takes_its_server_down(
        run_home: Path, started: list[subprocess.Popen], tmp_path: Path) -> None:
    """SIGTERM before the launcher is ready (models still loading) stops the server too,
    instead of ending the launcher and orphaning tritonserver."""
    repository = tiny_repository(tmp_path)
    launcher = subprocess.Popen(
        [PYTHON, "-m", "services.triton.server", "--repository", str(repository)],
        cwd=ROOT, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(launcher)
    wait_for(lambda: bool(processes.read_entries()), 120, "the tritonserver pid file")
    (entry,) = processes.read_entries()
    launcher.send_signal(signal.SIGTERM)  # as `movepred stop` does, maybe mid start-up
    assert launcher.wait(timeout=60) in (0, 1)  # its handler ran (not killed by the signal)
    wait_for(lambda: not processes.alive(entry.pid), 30, "tritonserver to exit")
