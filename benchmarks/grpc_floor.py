"""The floor of a Python gRPC hop, for `benchmarks/serving.py`: a server that answers
`movepred.v1.SearchService/Predict` with stored response bytes, doing no work at all.

    .venv/bin/python benchmarks/grpc_floor.py --port P --response FILE [--max-workers 16]

It is built like the search service's server (a sync `grpc.server` on a thread pool, of the
search server's size when started by `benchmarks/serving.py`; its own process), so a
`SearchClient` pointed at it measures what the client -> Python server -> client trip alone
costs. The search service's Predict is
that trip plus its Triton call: `(direct + floor) / direct` is the best latency ratio against
calling Triton directly that any Python gRPC front end could reach on the machine, and the
floor's throughput is the most a single such process answers.
"""

from __future__ import annotations

import argparse
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

SERVICE = "movepred.v1.SearchService"


def build(port: int, response: bytes, max_workers: int) -> grpc.Server:
    # no (de)serializers: the handler gets the request bytes and returns the stored bytes
    predict = grpc.unary_unary_rpc_method_handler(lambda request, context: response)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"Predict": predict}),)
    )
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise RuntimeError(f"could not bind 127.0.0.1:{port}")
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--response", type=Path, required=True,
                        help="serialized PredictResponse to answer every call with")
    parser.add_argument("--max-workers", type=int, default=64)
    args = parser.parse_args(argv)
    server = build(args.port, args.response.read_bytes(), args.max_workers)
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
