"""Serving benchmark: Triton start-up, and Predict latency through the search service against
calling Triton directly (the baseline, measured in the same run on the same model).

    .venv/bin/python benchmarks/serving.py [--requests 500] [--model shao_f32_n2]

The model is freshly initialised (latency does not depend on the weights). Prints p50/p99 in
milliseconds and the ratio service/direct.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.models.configs import build  # noqa: E402
from services.search.client import SearchClient  # noqa: E402
from services.trainer.export import export_torchscript  # noqa: E402
from services.triton.client import PolicyClient  # noqa: E402
from services.triton.publisher import publish  # noqa: E402
from services.triton.server import TritonServer, free_port  # noqa: E402


def wait_for_health(target: str, timeout_s: float = 30.0) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                return
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def percentiles(samples: list[float]) -> tuple[float, float]:
    a = np.array(samples) * 1000.0
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def timed(fn, n: int, warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--model", default="shao_f32_n2")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        export_torchscript(build(args.model), Path(tmp) / "model.pt")
        publish(Path(tmp) / "model.pt", repo)
        t = time.perf_counter()
        with TritonServer(repo, log_path=Path(tmp) / "triton.log") as triton:
            startup = time.perf_counter() - t
            client = PolicyClient(triton.grpc_url)
            # The service runs in its own process, as deployed: sharing this process's GIL with
            # the load generator would charge the client's work to the service.
            port = free_port()
            service = subprocess.Popen(
                [sys.executable, "-m", "services.search.server", "--port", str(port),
                 "--triton-url", triton.grpc_url], cwd=ROOT)
            wait_for_health(f"127.0.0.1:{port}")
            moves = ["h8", "h9", "i8", "g7"]
            board = np.zeros((1, 15, 15), np.int8)
            board[0, 7, 7] = board[0, 7, 8] = 1
            board[0, 8, 7] = board[0, 6, 6] = 2
            direct = timed(lambda: client.infer(board), args.requests)
            with SearchClient(f"127.0.0.1:{port}") as search:
                via = timed(lambda: search.predict(moves), args.requests)
                gen_t = time.perf_counter()
                r = search.genmove(moves, max_visits=800)
                gen_s = time.perf_counter() - gen_t
            service.terminate()
            service.wait(timeout=30)
            client.close()
    d50, d99 = percentiles(direct)
    p50, p99 = percentiles(via)
    print(f"machine: {platform.machine()} {platform.processor() or ''} "
          f"cpus={__import__('os').cpu_count()} model={args.model}")
    print(f"triton start-up (process start -> model ready): {startup:.2f} s")
    print(f"direct Triton infer, batch 1 : p50 {d50:.2f} ms  p99 {d99:.2f} ms  (baseline)")
    print(f"Predict via search service   : p50 {p50:.2f} ms  p99 {p99:.2f} ms  "
          f"ratio p50 {p50 / d50:.2f}x  p99 {p99 / d99:.2f}x")
    print(f"GenMove 800 visits: {gen_s:.2f} s = {r.total_visits / gen_s:.0f} playouts/s "
          f"(move {r.name})")


if __name__ == "__main__":
    main()
