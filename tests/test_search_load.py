"""Long searches cannot starve health checks or Predict (real Triton, the server as a process).

Before the search limit, 8 GenMoves of 8 s against `--max-workers 8` took every RPC thread: a
2 s health check and a Predict timed out, so a liveness probe would have killed a busy pod.
Now at most `--max-searches` searches run (the excess is refused with RESOURCE_EXHAUSTED at
once, not queued) and the other threads stay free: with twice the limit of long GenMoves
under way, every health check is answered while all of them still run, with p99 far inside a
probe's timeout (measured over many calls, from another process than the server's, so the
test's own threads do not compete for the server's GIL; p50 and p99 are printed), and a Predict
is answered. The bound tells starvation (a check waiting for a search's thread waits seconds)
from a slow machine, so it is a quarter of the probe's 2 s, not a speed target.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.search.client import SearchClient
from services.search.server import SERVICE_NAME
from services.triton.ports import free_port
from tests.triton_fixtures import TritonSetup, triton_server  # noqa: F401 (pytest fixture)

ROOT = Path(__file__).resolve().parents[1]
MAX_WORKERS = 8  # the Kubernetes setting (deploy/k8s/search-deployment.yaml)
MAX_SEARCHES = 4
SEARCH_MS = 8000
HEALTH_CALLS = 300
HEALTH_P99_S = 0.5  # a quarter of the 2 s probe timeout below: starvation, not speed
OPENINGS = [["h8"], ["h8", "h9"], ["h8", "i9"], ["g7"], ["h8", "g9", "i7"], ["a1"], ["o15"],
            ["h8", "h7", "h6"]]


@pytest.fixture(scope="module")
def server(triton_server: TritonSetup, tmp_path_factory) -> Iterator[str]:  # noqa: F811
    port = free_port()
    log = tmp_path_factory.mktemp("search-load") / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.search.server", "--port", str(port),
             "--triton-url", triton_server.server.grpc_url, "--go-model", "", "--capture-model", "",
             "--max-workers", str(MAX_WORKERS), "--max-searches", str(MAX_SEARCHES),
             "--log-format", "json"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    target = f"127.0.0.1:{port}"
    try:
        with SearchClient(target) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.predict(["h8"], timeout=5)
                    break
                except grpc.RpcError:
                    assert proc.poll() is None, log.read_text()
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.2)
        yield target
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        messages = [line["message"] for line in lines]
        assert any(m.startswith("movepred search service listening") for m in messages)
        assert any(m.startswith("stopped after") for m in messages), messages[-5:]


@pytest.mark.timeout(300)
def test_health_and_predict_answer_under_twice_the_search_limit(server: str) -> None:
    results: list[tuple[str, float]] = []
    lock = threading.Lock()

    def search(i: int) -> None:
        start = time.monotonic()
        try:
            with SearchClient(server) as client:
                client.genmove(OPENINGS[i % len(OPENINGS)], max_time_ms=SEARCH_MS,
                               reuse_tree=False, timeout=60)
            code = "OK"
        except grpc.RpcError as exc:
            code = exc.code().name
        with lock:
            results.append((code, time.monotonic() - start))

    threads = [threading.Thread(target=search, args=(i,)) for i in range(2 * MAX_SEARCHES)]
    for t in threads:
        t.start()
    # the excess is refused at once: MAX_SEARCHES answers long before any search ends
    deadline = time.monotonic() + SEARCH_MS / 1000 / 2
    while len(results) < MAX_SEARCHES and time.monotonic() < deadline:
        time.sleep(0.05)
    with lock:
        refused = list(results)
    assert [code for code, _ in refused] == ["RESOURCE_EXHAUSTED"] * MAX_SEARCHES, refused

    # full search load now: MAX_SEARCHES searches hold their threads for seconds
    latencies = []
    with grpc.insecure_channel(server) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for i in range(HEALTH_CALLS):
            name = ("", SERVICE_NAME)[i % 2]
            start = time.perf_counter()
            reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=2)
            latencies.append(time.perf_counter() - start)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with SearchClient(server) as client:
        predicted = client.predict(["h8", "h9"], timeout=2)
    busy = len(results) == MAX_SEARCHES  # no search had ended: the load held throughout
    for t in threads:
        t.join(timeout=SEARCH_MS / 1000 + 60)

    p50, p99 = np.percentile(latencies, [50, 99])
    print(f"health under {MAX_SEARCHES} searches ({2 * MAX_SEARCHES} started): "
          f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms")
    assert busy, results
    assert len(predicted.top_moves) == 5
    assert sorted(code for code, _ in results) == (
        ["OK"] * MAX_SEARCHES + ["RESOURCE_EXHAUSTED"] * MAX_SEARCHES)
    assert p99 < HEALTH_P99_S, (p50, p99)
