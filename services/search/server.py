"""The search service's gRPC server: SearchService plus standard health and reflection.

Health (grpc.health.v1) tells the truth, per service name (`services.search.readiness`):

* ``""``: SERVING while the process runs: the liveness probe (restarting the search service
  does not fix Triton, so a dead Triton must not get it killed);
* ``movepred.v1.SearchService/gomoku`` and ``movepred.v1.SearchService/go`` (the latter only
  when Go is served; an unknown name answers NOT_FOUND): SERVING while that game's model has a
  READY version on Triton, NOT_SERVING while Triton is unreachable or the model is not loaded;
* ``movepred.v1.SearchService``: SERVING when every configured game's is: the readiness
  probe. Run with ``--go-model ""`` where Go is not meant to be served.

A watcher thread polls the models through the evaluators' own Triton clients five times a
second (0.5 s timeout), so health turns SERVING again within about a second of recovery; its
first poll is the start-up check, which logs each missing model with what to run (the service
starts anyway: Triton may come later). On stop every name turns NOT_SERVING before the calls in
flight are drained. Reflection lets grpcurl & co. discover the API.

Limits: requests larger than `max_message_bytes` (1 MiB by default; gRPC's own check, answered
with RESOURCE_EXHAUSTED before the servicer runs) and, optionally, more than
`max_concurrent_rpcs` RPCs at once (RESOURCE_EXHAUSTED too). Searches (GenMove + Analyze) run
at most `--max-searches` at once (default: half of `--max-workers`); one more is refused at once
with RESOURCE_EXHAUSTED, never queued, so health checks and Predict always find a free RPC
thread however many long searches clients start. Field limits are in
`services.search.validation`. Metrics (`services.search.metrics`) are served over HTTP only when
`--metrics-port` is given (0, the default, keeps them off), on loopback unless `--metrics-host`.

CLI (foreground until SIGINT/SIGTERM)::

    python -m services.search.server --port 50051 --triton-url 127.0.0.1:8001 --model gomoku_policy

Before it listens, the process warms up every served game's rules and compiled search tree
(`mcts.warm_up`: numba kernels are compiled or loaded from their cache then, not on the first
request).

Logs go through `logging` (`--log-format text|json`, `--log-level`): start-up (with the start-up
check of the models), shutdown, each change of a model's readiness, and one line per failed
request (rpc, code, details, model version where known, peer as `extra` fields).

`--processes N` runs N copies of the server on one port (SO_REUSEPORT, which grpc sets on Linux;
the kernel spreads connections over them, as in grpc's multiprocessing example): a search's tree
work is Python and holds one core, so one process caps GenMove throughput at a core's worth and
Predict at about 850 requests/s (docs/benchmarks.md). The parent only supervises: it restarts a
child that dies after having run a while, and stops them all on SIGINT/SIGTERM. With
`--metrics-port M`, child i serves its metrics on M + i.

Go requests go to the Triton model `--go-model` (default `go_policy`, compact int8 [4,S,S]
inputs, S*S+1 logits, board sizes 9..19); while Triton does not serve it they fail with
UNAVAILABLE, like Gomoku ones without `--model`. `--go-model ""` turns Go off (Go requests:
INVALID_ARGUMENT).

Security (`services.search.auth`): `--tls-cert/--tls-key` serve TLS, `--tls-client-ca` makes it
mutual; `--token-file` / `--token-env` (default `$MOVEPRED_TOKEN` when set) require
``authorization: Bearer <token>`` on every RPC but health and reflection (UNAUTHENTICATED
otherwise). A non-loopback `--host` without TLS and a token is refused unless `--insecure`.
`--health-port` answers the health service alone, in plaintext, for probes that speak neither.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services import logs, processes, settings
from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.defaults import SEARCH_PORT, TRITON_URL
from services.evaluator import PolicyEvaluator
from services.evaluator_cache import DEFAULT_CACHE_MB, EvalCache
from services.games.base import Game
from services.games.registry import default_game, registered_games
from services.repository.rollout_policy import VersionRollouts
from services.search import auth, mcts, validation
from services.search.batcher import DEFAULT_MAX_BOARDS, DEFAULT_WINDOW_S
from services.search.decoding import TolerantDecoding
from services.search.metrics import Metrics, MetricsServer
from services.search.operations import (
    DEFAULT_MAX_OPERATIONS,
    DEFAULT_OPERATION_TTL_S,
    OperationStore,
)
from services.search.ponder import DEFAULT_PONDER_SECONDS, DEFAULT_PONDER_VISITS, Ponderer
from services.search.readiness import DEFAULT_INTERVAL_S, ReadinessWatcher
from services.search.rollout_value import RolloutSource
from services.search.servicer import SearchServicer
from services.search.tree_cache import DEFAULT_MAX_ENTRIES, DEFAULT_MAX_VISITS, TreeCache
from services.triton.ports import free_port

SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name
# RPC threads. A Predict holds its thread while it waits for its Triton batch, so this also caps
# how many concurrent Predicts one process can merge into a batch: with 16, 64 concurrent
# Predicts of the paper's network travelled in batches of <= 16 and cost 1.7x a direct call on
# the 2-core CPU; with 64, 1.4x (docs/benchmarks.md, "Serving: Predict and GenMove on the
# CPU"; no change for a small model).
DEFAULT_MAX_WORKERS = 64
# Searches (GenMove + Analyze) at once, when not given: half the RPC threads, so that however
# many searches clients start, the other half is left for health checks and Predict (a search
# holds its thread for its whole budget, up to a minute). Beyond it: RESOURCE_EXHAUSTED.
SEARCH_SHARE_OF_WORKERS = 0.5

logger = logging.getLogger(__name__)


# the search trees' memory: about 5 time-bounded 19x19 searches (1.4 GB each at most), or
# thousands of 800-visit ones
DEFAULT_SEARCH_MEMORY_MB = 8192


def default_max_searches(max_workers: int) -> int:
    """The search limit for `max_workers` RPC threads: half of them, at least 1."""
    return max(1, int(max_workers * SEARCH_SHARE_OF_WORKERS))
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20  # a full 256-position Predict batch is ~0.4 MiB
SHUTDOWN_GRACE_S = 5.0
MIN_UPTIME_S = 5.0  # a child that dies sooner is a start-up failure: stop instead of restarting


@dataclass(frozen=True)
class ServiceConfig:
    """Every setting of the search service but its models and its security: the one source of
    the server's command-line flags and their defaults (`services.settings`) and of
    `build_service`'s settings. The policy models (`--model`, `--go-model`) and TLS / token
    (`services.search.auth`) have flags of their own."""

    host: str = settings.setting("127.0.0.1", "address to listen on")
    port: int = settings.port_setting(SEARCH_PORT, "0 picks a free port")
    triton_url: str = settings.setting(TRITON_URL, "Triton gRPC host:port")
    triton_timeout: float = settings.setting(5.0, "seconds per inference", minimum=0.001,
                                             maximum=3600)
    max_workers: int = settings.setting(DEFAULT_MAX_WORKERS, "RPC threads", minimum=2)
    max_searches: int | None = settings.setting(
        None, "searches (GenMove, Analyze, InferSequence) at once; more get RESOURCE_EXHAUSTED "
              "at once (default: half of --max-workers, which leaves the other half to health "
              "checks and Predict)")
    batch_size: int = settings.setting(mcts.DEFAULT_BATCH_SIZE,
                                       "leaves per evaluation request of one search", minimum=1)
    batch_window_ms: float = settings.setting(
        DEFAULT_WINDOW_S * 1000, "how long the cross-request batcher gathers requests for one "
                                 "Triton call, in milliseconds", minimum=0, maximum=10_000)
    max_batch_boards: int = settings.setting(
        DEFAULT_MAX_BOARDS, "boards per Triton call at most (the model's max_batch_size)",
        minimum=1)
    search_memory_mb: int = settings.setting(
        DEFAULT_SEARCH_MEMORY_MB, "memory the trees of the GenMove/Analyze searches running at "
        "once may hold together, in MB; each reserves its visit limit (100,000 for a search "
        "bounded by time alone) times an estimate per visit, and one that does not fit gets "
        "RESOURCE_EXHAUSTED (0: no limit)", minimum=0, maximum=1 << 30)
    tree_cache_entries: int = settings.setting(
        DEFAULT_MAX_ENTRIES, "searched trees kept for reuse (0: no tree reuse)", minimum=0)
    tree_cache_visits: int = settings.setting(
        DEFAULT_MAX_VISITS, "root visits of all kept trees together, at most", minimum=0)
    eval_cache_mb: float = settings.setting(
        DEFAULT_CACHE_MB, "memory of the cache of network answers the searches share, in MB: "
        "a board evaluated before is answered from it (0: off)", minimum=0, maximum=1 << 20)
    max_message_bytes: int = settings.setting(
        DEFAULT_MAX_MESSAGE_BYTES, "largest request accepted (RESOURCE_EXHAUSTED above)",
        minimum=1024, maximum=settings.MAX_INT32)
    max_concurrent_rpcs: int | None = settings.setting(
        None, "RPCs handled at once, more get RESOURCE_EXHAUSTED (default: no limit)",
        minimum=1)
    metrics_port: int = settings.port_setting(0, "serve Prometheus metrics on this port (0: off)")
    metrics_host: str = settings.setting("127.0.0.1", "address of the metrics endpoint")
    health_port: int | None = settings.port_setting(
        None, "also answer the gRPC health service alone, in plaintext, on this port (for "
              "probes that speak neither TLS nor tokens; default: off)")
    health_interval_s: float = settings.setting(
        DEFAULT_INTERVAL_S, "seconds between two polls of the models for health",
        flag="health-interval", minimum=0.01, maximum=3600)
    processes: int = settings.setting(
        1, "server processes sharing the port (SO_REUSEPORT), about one per core", minimum=1,
        maximum=256)
    model_repository: str = settings.setting(
        settings.DEFAULT_REPOSITORY, "model repository whose versions' rollout policies "
        "(rollout.npz beside model.pt) serve searches with rollout_lambda > 0 ('': none, such "
        "searches get FAILED_PRECONDITION)")
    ponder_seconds: float = settings.setting(
        DEFAULT_PONDER_SECONDS, "how long a GenMove asking to ponder keeps searching the "
        "opponent's turn at most, unless a request comes first (0: never ponder)", minimum=0,
        maximum=3600)
    ponder_visits: int = settings.setting(
        DEFAULT_PONDER_VISITS, "new visits of one ponder at most", minimum=1,
        maximum=validation.MAX_VISITS)
    max_operations: int = settings.setting(
        DEFAULT_MAX_OPERATIONS, "InferSequence operations held at once, running or ended "
        "(StartInferSequence); each running one also holds a search slot", minimum=1,
        maximum=4096)
    operation_ttl_s: float = settings.setting(
        DEFAULT_OPERATION_TTL_S, "seconds an ended InferSequence operation is kept for its "
        "result to be fetched", minimum=0, maximum=7 * 86400)
    # set by --insecure (services.search.auth's flags)
    insecure: bool = settings.setting(
        False, "listen beyond loopback without TLS and a token", cli=False)


# a library caller (tests, benchmarks, the demo) binds a free port unless it names one
LIBRARY_CONFIG = ServiceConfig(port=0)


@dataclass
class Service:
    """A bound, not yet started server with its parts; `start()`, then `stop()`."""

    server: grpc.Server
    port: int
    servicer: SearchServicer
    metrics: Metrics
    metrics_server: MetricsServer | None = None
    health_server: grpc.Server | None = None  # plaintext, health only (--health-port)
    health_port: int | None = None
    watcher: ReadinessWatcher | None = None  # keeps health in step with Triton

    def start(self) -> Service:
        self.server.start()
        if self.health_server is not None:
            self.health_server.start()
        if self.watcher is not None:
            self.watcher.start()
        return self

    def stop(self, grace: float | None = 0) -> None:
        if self.watcher is not None:  # every health name NOT_SERVING while draining
            self.watcher.stop()
        self.server.stop(grace).wait()
        if self.health_server is not None:
            self.health_server.stop(0).wait()
        self.servicer.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
            self.metrics_server = None


def build_service(
    evaluator: PolicyEvaluator | dict[str, PolicyEvaluator],
    config: ServiceConfig | None = None,
    *,
    go_evaluator: PolicyEvaluator | None = None,
    metrics: Metrics | None = None,
    tls: auth.ServerTLS | None = None,
    token: str | None = None,
    rollout_source: RolloutSource | None = None,
    **overrides: Any,
) -> Service:
    """The server and its parts, per `config` (None: `LIBRARY_CONFIG`, on a free port) with
    `overrides` (`ServiceConfig` field names: ``build_service(e, port=0, max_workers=8)``).
    Port 0 picks a free one; metrics_port 0: no HTTP metrics endpoint, the registry is still
    filled and readable via `Service.metrics`.
    `go_evaluator`: the Go policy (compact int8 [N,4,S,S] -> logits [N,S*S+1], S in 9..19);
    None: Go requests are refused with INVALID_ARGUMENT.

    Security (`services.search.auth`): `tls` serves TLS (mutual with a client CA), `token`
    answers RPCs without `authorization: Bearer <token>` with UNAUTHENTICATED (health and
    reflection stay open); a non-loopback host without both is refused (AuthConfigError)
    unless `insecure`. `health_port`: also serve the health service alone, in plaintext, on
    that port (0 picks one): Kubernetes' gRPC probes speak neither TLS nor tokens.

    `max_searches`: searches (GenMove, Analyze, InferSequence) at once (None:
    `default_max_searches`, half of `max_workers`); more are refused with RESOURCE_EXHAUSTED at
    once, so health and Predict always find a free RPC thread. Health (see the module
    docstring) is polled from the evaluators every `health_interval_s` once the service is
    started.

    `rollout_source`: where searches with `rollout_lambda` > 0 find the rollout policy of the
    version that answers them (default: the versions of `model_repository`)."""
    c = replace(config or LIBRARY_CONFIG, **overrides)
    if rollout_source is None and c.model_repository:
        rollout_source = VersionRollouts(Path(c.model_repository))
    host, port, max_workers, health_port = c.host, c.port, c.max_workers, c.health_port
    auth.check_exposure(host, tls, token, c.insecure)
    server_credentials = tls.credentials() if tls is not None else None  # bad files: fail here
    metrics = metrics if metrics is not None else Metrics()
    servicer_trees = TreeCache(c.tree_cache_entries, c.tree_cache_visits)
    servicer = SearchServicer(
        evaluator,
        go_evaluator=go_evaluator,
        batch_size=c.batch_size,
        batch_window_s=c.batch_window_ms / 1000.0,
        max_batch_boards=c.max_batch_boards,
        tree_cache=servicer_trees,
        metrics=metrics,
        max_searches=c.max_searches if c.max_searches is not None
        else default_max_searches(max_workers),
        search_memory_bytes=c.search_memory_mb << 20 if c.search_memory_mb else None,
        rollout_source=rollout_source,
        ponderer=Ponderer(servicer_trees, max_visits=c.ponder_visits,
                          max_seconds=c.ponder_seconds) if c.ponder_seconds > 0 else None,
        operations=OperationStore(max_operations=c.max_operations, ttl_s=c.operation_ttl_s),
        eval_cache=EvalCache.of_mb(c.eval_cache_mb),
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="movepred-rpc"),
        options=[("grpc.max_receive_message_length", c.max_message_bytes)],
        maximum_concurrent_rpcs=c.max_concurrent_rpcs,
        interceptors=((auth.BearerTokenInterceptor(token),) if token else ())
        + (TolerantDecoding(SERVICE_NAME),),
    )
    search_pb2_grpc.add_SearchServiceServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    games = servicer.evaluators  # every served game by its registered name
    watcher = ReadinessWatcher(health_servicer, games, interval_s=c.health_interval_s,
                               metrics=metrics)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    try:
        bound = (server.add_secure_port(f"{host}:{port}", server_credentials)
                 if server_credentials is not None else server.add_insecure_port(f"{host}:{port}"))
        if bound == 0:  # older grpcio returns 0 instead of raising
            raise RuntimeError(f"could not bind {host}:{port}")
        health_server, bound_health = (_health_only_server(health_servicer, host, health_port)
                                       if health_port is not None else (None, None))
        metrics_server = (metrics.serve(c.metrics_port, c.metrics_host) if c.metrics_port
                          else None)
    except BaseException:
        servicer.close()
        raise
    return Service(server, bound, servicer, metrics, metrics_server, health_server, bound_health,
                   watcher)


def _health_only_server(health_servicer: health.HealthServicer, host: str,
                        port: int) -> tuple[grpc.Server, int]:
    """A plaintext server answering the health service only (the same statuses as the main
    port), with its own two threads: probes can read a status and nothing else."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2,
                                                    thread_name_prefix="movepred-health"))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise RuntimeError(f"could not bind the health port {host}:{port}")
    return server, bound


class WatchedServer:
    """A `grpc.Server` (every other method is the server's own) whose start/stop also
    start/stop its health watcher."""

    def __init__(self, server: grpc.Server, watcher: ReadinessWatcher | None) -> None:
        self._server = server
        self._watcher = watcher

    def start(self) -> None:
        self._server.start()
        if self._watcher is not None:
            self._watcher.start()

    def stop(self, grace: float | None) -> threading.Event:
        if self._watcher is not None:
            self._watcher.stop()
        return self._server.stop(grace)

    def __getattr__(self, name: str) -> object:
        return getattr(self._server, name)


def build_server(evaluator: PolicyEvaluator, config: ServiceConfig | None = None,
                 **overrides: Any) -> tuple[WatchedServer, int]:
    """A bound but not yet started server and its port (`config` and `overrides` as for
    `build_service`; port 0 picks a free one).

    Call `server.start()`, and `server.stop(grace)` when done. (`build_service` gives the
    metrics and the servicer too.) The server's start and stop also start and stop the health
    watcher.
    """
    service = build_service(evaluator, config, **overrides)
    return WatchedServer(service.server, service.watcher), service.port


def model_flag(game: Game) -> str:
    """The flag naming `game`'s Triton model: ``--model`` for the default game (the one a
    request that names no game plays), ``--<name>-model`` for every other registered game
    (``--go-model``), so a newly registered game gets its flag without an edit here."""
    return "--model" if game is default_game() else f"--{game.name}-model"


def model_dest(game: Game) -> str:
    return model_flag(game).removeprefix("--").replace("-", "_")


def served_models(args: argparse.Namespace) -> dict[Game, str]:
    """The games this server serves, with their model names (a game whose flag is empty is not
    served: its requests get INVALID_ARGUMENT naming the game)."""
    return {g: getattr(args, model_dest(g)) for g in registered_games()
            if getattr(args, model_dest(g))}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: the models, one flag per `ServiceConfig` field (with the field's
    default), TLS and token (`services.search.auth`), logging."""
    p = argparse.ArgumentParser(prog="python -m services.search.server", description=__doc__)
    for game in registered_games():
        p.add_argument(model_flag(game), dest=model_dest(game), default=game.default_model,
                       help=f"{game.title} policy model name on Triton (default "
                            f"{game.default_model}; empty: {game.title} is not served)")
    settings.add_arguments(p, ServiceConfig, title="service settings (ServiceConfig)")
    auth.add_server_arguments(p)
    logs.add_arguments(p)
    args = p.parse_args(argv)
    if not served_models(args):
        p.error("every game's model is empty: name at least one model to serve ("
                + ", ".join(model_flag(g) for g in registered_games()) + ")")
    if args.max_searches is not None and not 1 <= args.max_searches < args.max_workers:
        p.error(f"--max-searches must be in 1..{args.max_workers - 1} (below --max-workers, so "
                f"health and Predict keep a thread), got {args.max_searches}")
    try:
        args.tls, args.token = auth.server_security_from(args)
        auth.check_exposure(args.host, args.tls, args.token, args.insecure)
    except auth.AuthConfigError as exc:
        p.error(str(exc))
    return args


def _child(argv: list[str]) -> None:
    sys.exit(main(argv))


def serve_processes(argv: list[str], args: argparse.Namespace) -> int:
    """Run `args.processes` single-process servers on one port and supervise them."""
    port = args.port or free_port(args.host)
    ctx = multiprocessing.get_context("spawn")  # no grpc state is shared across a fork

    def start(i: int) -> tuple[multiprocessing.Process, float]:
        extra = ["--processes", "1", "--port", str(port)]
        if args.metrics_port:
            extra += ["--metrics-port", str(args.metrics_port + i)]
        child = ctx.Process(target=_child, args=([*argv, *extra],), name=f"movepred-search-{i}")
        child.start()
        return child, time.monotonic()

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    children = [start(i) for i in range(args.processes)]
    pid_file = _write_pid_file(args, port)
    logger.info("movepred search service: %d processes on %s:%d", args.processes, args.host,
                port, extra={"processes": args.processes, "port": port})
    code = 0
    while not stop.wait(0.5):
        for i, (child, started) in enumerate(children):
            if child.is_alive():
                continue
            if time.monotonic() - started < MIN_UPTIME_S:
                logger.error("process %d exited with code %s during start-up; stopping", i,
                             child.exitcode)
                code = 1
                stop.set()
                break
            logger.warning("process %d (pid %s) exited with code %s; restarting", i, child.pid,
                           child.exitcode)
            children[i] = start(i)
    for child, _ in children:
        if child.is_alive():
            child.terminate()  # SIGTERM: each child stops its server gracefully
    for child, _ in children:
        child.join(SHUTDOWN_GRACE_S + 5)
        if child.is_alive():
            child.kill()
            child.join()
    processes.remove_entry(pid_file)
    return code


def _write_pid_file(args: argparse.Namespace, port: int, metrics_port: int | None = None,
                    health_port: int | None = None) -> Path | None:
    """``search-<port>.pid`` for `movepred status/stop` (`services.processes`): this process,
    its ports and how to ask its health (the plaintext health port, else the service port when
    it speaks plaintext)."""
    ports = {"grpc": port}
    if metrics_port or args.metrics_port:
        ports["metrics"] = metrics_port or args.metrics_port
    health_port = health_port or args.health_port
    if health_port:
        ports["health"] = health_port
    connect = "127.0.0.1" if args.host in ("", "0.0.0.0", "::") else args.host
    check = ({"grpc": f"{connect}:{health_port}", "service": SERVICE_NAME} if health_port else
             {"tcp": str(port)} if args.tls else
             {"grpc": f"{connect}:{port}", "service": SERVICE_NAME})
    details = {"metrics_url": f"http://{args.metrics_host}:{ports['metrics']}/metrics"
               } if "metrics" in ports else {}
    try:
        return processes.write_entry("search", os.getpid(), ports, check,
                                     triton_url=args.triton_url, processes=args.processes,
                                     **details)
    except OSError as exc:
        logger.warning("cannot write the pid file: %s", exc)
        return None


def main(argv: list[str] | None = None) -> int:
    from services.triton.client import PolicyClient  # CLI only: build_server takes any evaluator

    args = _parse_args(argv)
    logs.configure_from(args)
    if args.processes > 1:
        return serve_processes(list(sys.argv[1:] if argv is None else argv), args)
    models = served_models(args)
    clients = {
        game.name: PolicyClient(args.triton_url, model_name=model, timeout_s=args.triton_timeout,
                                game=game)
        for game, model in models.items()
    }
    try:
        service = build_service(clients, settings.from_args(ServiceConfig, args),
                                tls=args.tls, token=args.token)
    except (RuntimeError, OSError, ValueError) as exc:
        logger.error("cannot start the search service: %s", exc)
        for client in clients.values():
            client.close()
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    for game in models:  # compiled rules and tree ready before the first request
        started = time.monotonic()
        mcts.warm_up(game)
        logger.info("rules of %s and its search tree ready in %.2f s", game.title,
                    time.monotonic() - started, extra={"game": game.name})
    service.start()
    pid_file = None
    if multiprocessing.parent_process() is None:  # a --processes child: the parent has it
        pid_file = _write_pid_file(
            args, service.port, service.metrics_server.port if service.metrics_server else None,
            service.health_port)
    host = f"[{args.host}]" if ":" in args.host else args.host
    metrics = f", metrics {service.metrics_server.url}" if service.metrics_server else ""
    served = ", ".join(f"{game.title} model {model}" for game, model in models.items())
    searches = service.servicer.max_searches
    logger.info(
        "movepred search service listening on %s:%d (Triton %s, %s%s; %d RPC threads, "
        "%s searches at once)", host, service.port, args.triton_url, served, metrics,
        args.max_workers, searches,
        extra={"port": service.port, "triton_url": args.triton_url,
               "models": {game.name: model for game, model in models.items()},
               "max_workers": args.max_workers, "max_searches": searches},
    )
    while not stop.wait(0.5):  # short waits keep the main thread responsive to signals
        pass
    logger.info("stopping: health NOT_SERVING, finishing calls in flight (up to %.0f s)",
                SHUTDOWN_GRACE_S)
    started = time.monotonic()
    service.stop(SHUTDOWN_GRACE_S)
    for client in clients.values():
        client.close()
    processes.remove_entry(pid_file)
    logger.info("stopped after %.1f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
