"""`flows.on_dask`'s local cluster on Prefect's temporary API server (no PREFECT_API_URL):
its worker processes use the flow's own server, and the run leaves no Prefect server behind.

The flow runs in a process of its own (`tests/dask_api_probe.py`), as ``python -m flows.selfplay
--dask`` does: its Prefect starts the temporary server there, and that process's Prefect home is
the test's, so every process the run started is known by its environment (PREFECT_HOME) and
none of another test or user is looked at or touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 300  # a bound for a hung run, not a speed check


def _prefect_servers_of(home: Path) -> list[int]:
    """The live Prefect API servers (uvicorn running Prefect's app) whose environment has
    PREFECT_HOME=`home`: started by the run under test, by nobody else."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if (b"uvicorn" in cmdline and b"prefect.server.api.server:create_app" in cmdline
                and f"PREFECT_HOME={home}".encode() in environ):
            found.append(int(proc.name))
    return found


def _eventually(condition, bound_s: float = 60.0) -> bool:
    """Whether `condition()` holds within `bound_s` (a bound for a process that is ending,
    not a speed check)."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            if condition():
                return True
        except OSError:  # the process ended while being read
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


@pytest.mark.integration
def test_local_dask_workers_use_the_flows_temporary_prefect_server(tmp_path):
    """Two local worker processes, no PREFECT_API_URL anywhere: each task run in a worker
    finds the flow's server in its settings and its process's environment and starts no server
    of its own (also after earlier task runs there finished: their events and logs), and when
    the run ends with a worker busy, which the cluster's close SIGKILLs, no Prefect server of
    the run is left running."""
    home = tmp_path / "prefect-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_PROFILE")}
    env.update(PREFECT_HOME=str(home), OMP_NUM_THREADS="1")
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    try:
        # files, not pipes: a server left behind would hold a pipe open and hang the read
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.run(
                [sys.executable, "-m", "tests.dask_api_probe", str(tmp_path)], cwd=ROOT,
                env=env, stdout=stdout, stderr=stderr, timeout=RUN_TIMEOUT_S, check=False)
        assert proc.returncode == 0, err.read_text()[-3000:]
        result = json.loads(out.read_text().strip().splitlines()[-1])
        flow_api = result["flow_api"]
        assert flow_api.startswith("http://127.0.0.1:") and flow_api.endswith("/api")
        reports = result["reports"]
        assert sorted(r["index"] for r in reports) == [0, 1, 2, 3]
        for report in reports:
            assert report["pid"] != result["flow_pid"]  # ran in a worker process
            assert report["settings"] == flow_api, report
            assert report["env"] == flow_api, report
            assert report["own_servers"] == [], report
        # the busy worker was killed, and neither its server nor the flow's is left (both
        # end asynchronously after the flow's process returns: waited for, up to a bound)
        busy = Path(f"/proc/{result['busy_pid']}/cmdline")
        assert _eventually(lambda: not busy.exists() or not busy.read_bytes()), "worker alive"
        assert _eventually(lambda: _prefect_servers_of(home) == []), _prefect_servers_of(home)
    finally:
        for pid in _prefect_servers_of(home):  # the run's own, should any be left
            os.kill(pid, signal.SIGTERM)
