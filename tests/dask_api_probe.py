"""A small flow on `flows.on_dask`'s local cluster (2 worker processes), run by
`tests/test_flows_dask.py` as ``python -m tests.dask_api_probe MARKER_DIR`` in a process of its
own, so that Prefect starts its temporary API server there, as for
``python -m flows.selfplay --dask`` with no PREFECT_API_URL.

Each `where_am_i` task reports, from its worker process, which Prefect API that process uses
(in two rounds: the second sees what the first's task runs started after they returned, their
events and logs). One `busy` task is left running when the flow returns, as a share still
playing when a run ends: the cluster's close then kills its worker (SIGKILL, after Dask's
timeout), which is what left a worker's own temporary server running with no parent. The flow
waits for the busy task's marker file, so that it is running at the close whatever the
machine's speed. The flow's result, with its own process's API, is printed as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from prefect import flow, get_client, task

import flows

BUSY_S = 600  # longer than any run of the test: only the cluster's close ends it


@task
def where_am_i(index: int) -> dict[str, object]:
    """The worker process's view of the Prefect API: the environment's PREFECT_API_URL, the
    task run's settings, and the temporary servers the process started itself."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import get_current_settings

    own = [s.api_url for s in SubprocessASGIServer._instances.values() if s.running]
    return {"index": index, "pid": os.getpid(), "env": os.environ.get("PREFECT_API_URL"),
            "settings": str(get_current_settings().api.url or "") or None,
            "own_servers": own}


@task
def busy(marker: str) -> None:
    """Writes `marker`, then keeps its worker busy until the worker is killed."""
    Path(marker).write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(BUSY_S)


@flow
def probe(marker_dir: str, tasks: int = 2) -> dict[str, object]:
    with get_client(sync_client=True) as client:
        flow_api = str(client.api_url).rstrip("/")
    reports = [f.result() for f in where_am_i.map(range(tasks))]
    reports += [f.result() for f in where_am_i.map(range(tasks, 2 * tasks))]
    marker = Path(marker_dir) / "busy.pid"
    busy.submit(str(marker))  # left running: the cluster's close kills its worker
    while not marker.exists():
        time.sleep(0.05)
    return {"flow_pid": os.getpid(), "flow_api": flow_api, "reports": reports,
            "busy_pid": int(marker.read_text(encoding="utf-8"))}


if __name__ == "__main__":
    print(json.dumps(flows.on_dask(probe, workers=2)(marker_dir=sys.argv[1])), flush=True)
