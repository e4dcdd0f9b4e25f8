"""Prometheus metrics of the search service.

Every `Metrics` owns its own `CollectorRegistry` (several servers can live in one process, as
in the tests); `serve()` exposes it over HTTP with `prometheus_client.start_http_server`,
on loopback unless told otherwise. The server turns it on with `--metrics-port` (0: off).

Series (all prefixed `movepred_`):

* `requests_total{rpc, code}`: RPCs handled, by method and final gRPC status code name
  (OK, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE, INTERNAL, CANCELLED, ...).
* `request_duration_seconds{rpc}`: handling time (histogram).
* `triton_batch_boards`: boards per Triton infer call (histogram; the cross-request batcher
  merges the leaves of concurrent searches and Predict batches into one call).
* `triton_batch_requests`: evaluation requests merged into one Triton infer call (histogram).
* `triton_infer_duration_seconds`: one Triton infer call (histogram).
* `triton_errors_total{kind}`: failed Triton calls: unavailable, request, bad_output, other.
* `search_playouts_total`: simulations run by GenMove and Analyze (reused visits excluded).
* `tree_reuse_total{result}`: tree cache lookups, hit or miss; `tree_reused_visits_total`.
* `eval_cache_boards_total{result}`: boards the searches asked the network for, answered from
  the cache of its answers (hit: `services.evaluator_cache`) or sent to it (miss).
* `nonfinite_outputs_total{model}`: requests failed with INTERNAL because the model answered
  NaN/Inf logits or a non-finite value (found by the service, or refused by the model inside
  Triton). Anything above 0 means a broken model is serving: roll it back.
* `searches_active`: searches (GenMove, Analyze, InferSequence) running now;
  `searches_rejected_total`: searches refused with RESOURCE_EXHAUSTED because `--max-searches`
  were already running.
* `model_ready{game}`: 1 while the game's model is ready on Triton (the health watcher's last
  poll), else 0.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from services.evaluator import EvaluatorError
from services.triton.client import TritonRequestError, TritonUnavailableError

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
REQUESTS_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
ERROR_KINDS = ("unavailable", "request", "bad_output", "other")


def error_kind(exc: BaseException) -> str:
    if isinstance(exc, TritonUnavailableError):
        return "unavailable"
    if isinstance(exc, TritonRequestError):
        return "request"
    if isinstance(exc, EvaluatorError):
        return "bad_output"
    return "other"


@dataclass
class MetricsServer:
    """A running metrics endpoint; `close()` stops it."""

    httpd: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self.httpd.server_address[0]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "movepred_requests", "RPCs handled, by method and status code", ["rpc", "code"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "movepred_request_duration_seconds", "RPC handling time", ["rpc"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.triton_batch_boards = Histogram(
            "movepred_triton_batch_boards", "Boards per Triton infer call",
            buckets=BATCH_BUCKETS, registry=r,
        )
        self.triton_batch_requests = Histogram(
            "movepred_triton_batch_requests", "Evaluation requests merged into one Triton call",
            buckets=REQUESTS_BUCKETS, registry=r,
        )
        self.triton_seconds = Histogram(
            "movepred_triton_infer_duration_seconds", "Time of one Triton infer call",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.triton_errors = Counter(
            "movepred_triton_errors", "Failed Triton infer calls, by kind", ["kind"], registry=r
        )
        for kind in ERROR_KINDS:
            self.triton_errors.labels(kind)
        self.playouts = Counter(
            "movepred_search_playouts", "Simulations run by GenMove and Analyze", registry=r
        )
        self.tree_reuse = Counter(
            "movepred_tree_reuse", "Tree cache lookups, by result", ["result"], registry=r
        )
        for result in ("hit", "miss"):
            self.tree_reuse.labels(result)
        self.reused_visits = Counter(
            "movepred_tree_reused_visits", "Root visits taken over from cached trees", registry=r
        )
        self.eval_cache = Counter(
            "movepred_eval_cache_boards", "Boards the searches asked for, by whether the cache "
            "of network answers had them", ["result"], registry=r,
        )
        for result in ("hit", "miss"):
            self.eval_cache.labels(result)
        self.nonfinite_outputs = Counter(
            "movepred_nonfinite_outputs", "Requests failed because the model answered NaN/Inf",
            ["model"], registry=r,
        )
        self.searches_active = Gauge(
            "movepred_searches_active", "GenMove/Analyze/InferSequence searches running now",
            registry=r
        )
        self.searches_rejected = Counter(
            "movepred_searches_rejected",
            "Searches refused (RESOURCE_EXHAUSTED): the search limit was reached", registry=r,
        )
        self.model_ready = Gauge(
            "movepred_model_ready", "1 while the game's model is ready on Triton", ["game"],
            registry=r,
        )

    # ------------------------------------------------------------------ recording
    def request(self, rpc: str, code: str, seconds: float) -> None:
        self.requests.labels(rpc, code).inc()
        self.request_seconds.labels(rpc).observe(seconds)

    def triton_call(
        self, boards: int, requests: int, seconds: float, error: BaseException | None
    ) -> None:
        self.triton_batch_boards.observe(boards)
        self.triton_batch_requests.observe(requests)
        self.triton_seconds.observe(seconds)
        if error is not None:
            self.triton_errors.labels(error_kind(error)).inc()

    def eval_cache_lookup(self, hits: int, misses: int) -> None:
        """One search evaluator call: `hits` boards from the cache, `misses` to the network."""
        if hits:
            self.eval_cache.labels("hit").inc(hits)
        if misses:
            self.eval_cache.labels("miss").inc(misses)

    # ------------------------------------------------------------------ reading
    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent), e.g. value("movepred_requests_total",
        rpc="Predict", code="OK")."""
        v = self.registry.get_sample_value(name, labels)
        return 0.0 if v is None else float(v)

    def serve(self, port: int, host: str = "127.0.0.1") -> MetricsServer:
        """Expose the registry at http://host:port/metrics (port 0 picks a free one)."""
        httpd, thread = start_http_server(port, addr=host, registry=self.registry)
        return MetricsServer(httpd, thread)
