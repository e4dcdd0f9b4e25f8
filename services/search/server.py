"""The search service's gRPC server: SearchService plus standard health and reflection.

Health (grpc.health.v1) reports SERVING for "" and "movepred.v1.SearchService" once the server
is built: it says the service process is up, not that Triton is (requests say that, with
UNAVAILABLE). Reflection lets grpcurl & co. discover the API.

CLI (foreground until SIGINT/SIGTERM)::

    python -m services.search.server --port 50051 --triton-url 127.0.0.1:8001 --model gomoku_policy
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.search import mcts
from services.search.servicer import SearchServicer

SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name
DEFAULT_PORT = 50051
DEFAULT_TRITON_URL = "127.0.0.1:8001"
SHUTDOWN_GRACE_S = 5.0


def build_server(
    evaluator: mcts.PolicyEvaluator,
    port: int = 0,
    host: str = "127.0.0.1",
    max_workers: int = 8,
    *,
    batch_size: int = mcts.DEFAULT_BATCH_SIZE,
) -> tuple[grpc.Server, int]:
    """A bound but not yet started server and its port (port 0 picks a free one).

    Call `server.start()`, and `server.stop(grace)` when done.
    """
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers))
    search_pb2_grpc.add_SearchServiceServicer_to_server(
        SearchServicer(evaluator, batch_size=batch_size), server
    )
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:  # older grpcio returns 0 instead of raising
        raise RuntimeError(f"could not bind {host}:{port}")
    return server, bound


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.search.server", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    p.add_argument("--triton-url", default=DEFAULT_TRITON_URL, help="Triton gRPC host:port")
    p.add_argument("--model", default="gomoku_policy", help="policy model name on Triton")
    p.add_argument("--triton-timeout", type=float, default=5.0, help="seconds per inference")
    p.add_argument("--max-workers", type=int, default=8)
    p.add_argument(
        "--batch-size",
        type=int,
        default=mcts.DEFAULT_BATCH_SIZE,
        help="leaves per Triton request during search",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from services.triton.client import PolicyClient  # CLI only: build_server takes any evaluator

    args = _parse_args(argv)
    client = PolicyClient(args.triton_url, model_name=args.model, timeout_s=args.triton_timeout)
    try:
        server, port = build_server(
            client, args.port, args.host, args.max_workers, batch_size=args.batch_size
        )
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(
        f"movepred search service listening on {host}:{port} "
        f"(Triton {args.triton_url}, model {args.model})",
        flush=True,
    )
    while not stop.wait(0.5):  # short waits keep the main thread responsive to signals
        pass
    print("stopping...", flush=True)
    server.stop(SHUTDOWN_GRACE_S).wait()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
