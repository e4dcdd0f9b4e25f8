"""Serving benchmark: Triton start-up, Predict latency and throughput through the search service
against calling Triton directly (the baseline, measured in the same run on the same model), at
several client concurrencies, and GenMove playouts/s for concurrent searches.

    .venv/bin/python benchmarks/serving.py [--concurrency 1,16,64] [--requests 2000]
        [--level-seconds 12] [--genmove-concurrency 1,8] [--genmove-visits 800]
        [--genmove-rounds 2] [--model shao_f32_n2] [--triton-env OMP_WAIT_POLICY=PASSIVE]
        [--service-arg=--max-workers=32]

The model is freshly initialised (latency does not depend on the weights). The search service
runs in its own process (`python -m services.search.server`, its default settings: 64 RPC
worker threads, cross-request batcher); Triton in its own. For each concurrency C, C client
threads of this process each hold their own channel (a `PolicyClient` for the direct calls, a
`SearchClient` for the service) and send requests back to back until the level's request count
(`--requests`, all threads together) or its time cap (`--level-seconds`) is reached; each
thread first sends `--warmup` untimed requests. Direct and service runs alternate per level.
Figures: latency p50/p99 in ms, throughput in requests/s (completed timed requests over the
wall time of the timed part), the ratios service/direct, and the CPU seconds each process
(this load generator, the search service, Triton with its python-backend stub) used in the
level, plus the cores used by every other process of the machine and the hypervisor's steal
(from /proc/stat): on a small machine the load generator competes for the same cores, and so
do other jobs; a level whose "other processes" figure is not near 0 was measured under outside
load. (On a VM, steal is high where the cores idle between short requests, as at C = 1.)

`--triton-env KEY=VALUE` sets extra environment for the Triton process only, e.g.
`OMP_WAIT_POLICY=PASSIVE`: by default the stub's OpenMP threads (torch on CPU) spin-wait after
each request, which costs several ms of CPU per request when requests arrive spaced out.

`--service-arg ARG` (repeatable) adds ARG to the search service's command line, e.g.
`--service-arg=--max-workers=32`, to compare service settings against the same baseline.

GenMove: C concurrent searches (each thread its own channel, `disable_tree_reuse`, a different
opening per thread), `--genmove-rounds` searches per thread; playouts/s = all visits / wall time.
`--services K` starts K search-service processes on the one Triton (horizontal scaling, as the
Kubernetes manifests deploy it: a search's tree work is Python and holds one core) and spreads
the GenMove threads over them round-robin; Predict goes to the first, or with `--predict-spread`
its client threads are spread over them in turn (each thread keeps its one connection).

`--instances N`, `--queue-delay-us D` and `--kind KIND_CPU|KIND_GPU` rewrite the published
copy of the model's config.pbtxt (instance_group count and kind, dynamic_batching's
max_queue_delay_microseconds) before Triton starts, to choose them by measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.games.registry import get_game  # noqa: E402
from services.models.configs import spec  # noqa: E402
from services.search.client import SearchClient  # noqa: E402
from services.search.server import DEFAULT_MAX_WORKERS  # noqa: E402
from services.trainer.publish import publish_model  # noqa: E402
from services.triton.client import PolicyClient  # noqa: E402
from services.triton.launcher import TritonServer  # noqa: E402
from services.triton.ports import free_port  # noqa: E402
from services.triton.rollout import read_model_config  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
PREDICT_MOVES = ["h8", "h9", "i8", "g7"]
# one opening per concurrent search (cycled), so that concurrent searches do different work
GENMOVE_OPENINGS = [
    ["h8", "h9", "i8", "g7"], ["h8", "i9", "g9", "j7"], ["h8", "g8", "i9", "h10"],
    ["h8", "h7", "g9", "j8"], ["h8", "i8", "h9", "g10"], ["h8", "j9", "i7", "g9"],
    ["h8", "g9", "h10", "i9"], ["h8", "i7", "j8", "g8"],
]


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
    if not samples:
        return float("nan"), float("nan")
    a = np.array(samples) * 1000.0
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def tree_cpu_seconds(root_pid: int, descendants: bool = True) -> float:
    """CPU time (user + system) of a process and (unless told not to) its live descendants,
    from /proc."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        if descendants:
            todo.extend(p for p, pp in parents.items() if pp == pid)
    return total


def machine_seconds() -> tuple[float, float]:
    """(busy, steal): CPU seconds the machine's processes and interrupts have used since boot,
    and the seconds a virtual machine's hypervisor gave to others while this one wanted to run
    (/proc/stat; on a VM, levels with many short idle gaps show several tenths of a core)."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    steal = values[7] if len(values) > 7 else 0
    guest = sum(values[8:10])  # already counted in user and nice
    return (sum(values) - guest - idle - steal) / _TICK, steal / _TICK


def cpu_by_process(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds per named process tree ("bench", this process and the parent of the others,
    counts alone), plus "machine": every process on the machine, and "steal" (`machine_seconds`)."""
    out = {name: tree_cpu_seconds(pid, descendants=name != "bench") for name, pid in pids.items()}
    out["machine"], out["steal"] = machine_seconds()
    return out


@dataclass
class Level:
    latencies: list[float]
    wall_s: float
    errors: int
    cpu: dict[str, float]

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.wall_s if self.wall_s > 0 else 0.0


def _started(worker: Callable[[int], None], concurrency: int) -> list[threading.Thread]:
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    return threads


@dataclass
class Span:
    wall_s: float = 0.0
    cpu: dict[str, float] | None = None


@contextlib.contextmanager
def _span(pids: dict[str, int]) -> Iterator[Span]:
    """Wall time and CPU seconds by process (`cpu_by_process`) of the block, filled at its end."""
    span = Span()
    cpu0 = cpu_by_process(pids)
    start = time.perf_counter()
    yield span
    span.wall_s = time.perf_counter() - start
    span.cpu = {name: s - cpu0[name] for name, s in cpu_by_process(pids).items()}


def run_level(
    makes: list[Callable[[], tuple[Callable[[], object], Callable[[], None]]]],
    concurrency: int,
    total_requests: int,
    max_seconds: float,
    warmup: int,
    pids: dict[str, int],
) -> list[Level]:
    """`concurrency` threads, each with its own connection to every target from `makes` (a
    call and its close), share `total_requests` timed rounds, stopping early at `max_seconds`.
    A round is one request to each target, in an order that rotates from round to round and
    thread to thread: with several targets they are measured interleaved, under the same
    conditions. One Level per target; with several, a target's wall time is the level's wall
    time times its share of the timed latencies, and every Level carries the level's CPU."""
    calls = [[make() for make in makes] for _ in range(concurrency)]
    ready = threading.Barrier(concurrency + 1)
    lock = threading.Lock()
    budget = [total_requests]
    stop_at = [0.0]
    per_target: list[list[list[float]]] = [[[] for _ in makes] for _ in range(concurrency)]
    errors = [0] * len(makes)

    def take() -> bool:
        with lock:
            if budget[0] <= 0 or time.perf_counter() > stop_at[0]:
                return False
            budget[0] -= 1
            return True

    def worker(i: int) -> None:
        mine = calls[i]
        try:
            for _ in range(warmup):
                for call, _close in mine:
                    call()
        except Exception:
            ready.abort()  # the main thread's wait raises instead of hanging
            raise
        ready.wait()
        ready.wait()  # the timed part starts when every thread is warm
        out = per_target[i]
        round_ = i
        while take():
            for step in range(len(mine)):
                j = (round_ + step) % len(mine)
                t = time.perf_counter()
                try:
                    mine[j][0]()
                except Exception:  # counted and reported, not timed
                    with lock:
                        errors[j] += 1
                    continue
                out[j].append(time.perf_counter() - t)
            round_ += 1

    threads = _started(worker, concurrency)
    ready.wait()
    with _span(pids) as span:
        stop_at[0] = time.perf_counter() + max_seconds
        ready.wait()
        for t in threads:
            t.join()
    wall, cpu = span.wall_s, span.cpu
    for mine in calls:
        for _call, close in mine:
            close()
    latencies = [[x for out in per_target for x in out[j]] for j in range(len(makes))]
    timed = sum(sum(xs) for xs in latencies) or 1.0
    return [
        Level(xs, wall if len(makes) == 1 else wall * sum(xs) / timed, errors[j], cpu)
        for j, xs in enumerate(latencies)
    ]


def genmove_level(
    targets: list[str], concurrency: int, visits: int, rounds: int, pids: dict[str, int]
) -> tuple[int, float, list[float], dict[str, float]]:
    """(visits done, wall s, per-search seconds, cpu by process) for `concurrency` threads each
    running `rounds` searches without tree reuse, thread i on service i mod len(targets)."""
    clients = [SearchClient(targets[i % len(targets)]) for i in range(concurrency)]
    for i, c in enumerate(clients):  # warm the channel (and the service's code paths)
        c.genmove(GENMOVE_OPENINGS[i % len(GENMOVE_OPENINGS)], max_visits=32, reuse_tree=False)
    done = [0] * concurrency
    durations: list[list[float]] = [[] for _ in range(concurrency)]
    ready = threading.Barrier(concurrency + 1)

    def worker(i: int) -> None:
        moves = GENMOVE_OPENINGS[i % len(GENMOVE_OPENINGS)]
        ready.wait()
        for _ in range(rounds):
            t = time.perf_counter()
            r = clients[i].genmove(moves, max_visits=visits, reuse_tree=False)
            durations[i].append(time.perf_counter() - t)
            done[i] += r.total_visits - r.reused_visits

    threads = _started(worker, concurrency)
    with _span(pids) as span:
        ready.wait()
        for t in threads:
            t.join()
    for c in clients:
        c.close()
    return sum(done), span.wall_s, [x for xs in durations for x in xs], span.cpu


@dataclass
class Floor:
    process: subprocess.Popen
    target: str


def start_floor(service_target: str, tmp: Path) -> Floor:
    """Start benchmarks/grpc_floor.py answering with the service's own Predict response (the
    same bytes on the wire), once it is healthy."""
    with SearchClient(service_target) as client:
        response = client.predict(PREDICT_MOVES)
    path = tmp / "predict_response.bin"
    path.write_bytes(response.SerializeToString())
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "grpc_floor.py"), "--port", str(port),
         "--response", str(path), "--max-workers", str(DEFAULT_MAX_WORKERS)], cwd=ROOT)
    target = f"127.0.0.1:{port}"
    try:
        wait_for_health(target)
    except BaseException:
        process.terminate()
        raise
    return Floor(process, target)


@contextlib.contextmanager
def _restoring(restore: Callable[[], None]) -> Iterator[None]:
    try:
        yield
    finally:
        restore()


def tune_config(repo: Path, model_name: str, instances: int | None, kind: str | None,
                queue_delay_us: int | None, max_batch_size: int | None = None) -> str:
    """Rewrite the published config.pbtxt's instance group, batching delay and largest batch;
    returns a one-line summary of the settings Triton will run with."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = read_model_config(repo, model_name)
    group = config.instance_group[0]
    if instances is not None:
        group.count = instances
    if kind is not None:
        group.kind = model_config_pb2.ModelInstanceGroup.Kind.Value(kind)
    if queue_delay_us is not None:
        config.dynamic_batching.max_queue_delay_microseconds = queue_delay_us
    if max_batch_size is not None:
        config.max_batch_size = max_batch_size
    (repo / model_name / "config.pbtxt").write_text(text_format.MessageToString(config))
    return (f"instances {group.count} x "
            f"{model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind)}, "
            f"max_queue_delay {config.dynamic_batching.max_queue_delay_microseconds} us, "
            f"max_batch_size {config.max_batch_size}")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _cpu_text(cpu: dict[str, float], wall: float) -> str:
    ours = {name: s for name, s in cpu.items() if name not in ("machine", "steal")}
    others = max(0.0, cpu["machine"] - sum(ours.values()))
    parts = [f"{name} {s:.2f}" for name, s in ours.items()]
    return (f"cpu s: {', '.join(parts)} (= {sum(ours.values()) / wall:.2f} cores); "
            f"other processes {others / wall:.2f} cores, hypervisor steal "
            f"{cpu['steal'] / wall:.2f} cores")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=_ints, default=[1, 16, 64],
                        help="Predict client threads per level, comma separated")
    parser.add_argument("--requests", type=int, default=2000,
                        help="timed requests per level and target, all threads together")
    parser.add_argument("--level-seconds", type=float, default=12.0,
                        help="time cap of one level's timed part, per target")
    parser.add_argument("--warmup", type=int, default=5, help="untimed requests per thread")
    parser.add_argument("--genmove-concurrency", type=_ints, default=[1, 8])
    parser.add_argument("--genmove-visits", type=int, default=800)
    parser.add_argument("--genmove-rounds", type=int, default=2, help="searches per thread")
    parser.add_argument("--model", default="shao_f32_n2")
    parser.add_argument("--triton-log", type=Path, help="keep Triton's log here")
    parser.add_argument("--services", type=int, default=1,
                        help="search-service processes; GenMove threads go round-robin")
    parser.add_argument("--predict-spread", action="store_true",
                        help="spread the Predict client threads over the --services processes "
                             "in turn (as a load balancer spreads connections over replicas); "
                             "default: every Predict goes to the first")
    parser.add_argument("--instances", type=int, help="Triton model instances (config)")
    parser.add_argument("--kind", choices=["KIND_CPU", "KIND_GPU"], help="instance kind")
    parser.add_argument("--queue-delay-us", type=int,
                        help="dynamic batching max_queue_delay_microseconds")
    parser.add_argument("--triton-env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment of the Triton process only (repeatable), e.g. "
                             "OMP_WAIT_POLICY=PASSIVE")
    parser.add_argument("--service-arg", action="append", default=[], metavar="ARG",
                        help="extra argument of the search service's command line (repeatable), "
                             "e.g. --service-arg=--max-workers=32")
    parser.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True,
                        help="also measure the Python gRPC floor (benchmarks/grpc_floor.py)")
    parser.add_argument("--interleave-up-to", type=int, default=1, metavar="C",
                        help="levels with concurrency <= C measure their targets interleaved "
                             "(round by round) instead of one after the other")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.triton_env):
        parser.error("--triton-env takes KEY=VALUE")
    triton_env = dict(item.split("=", 1) for item in args.triton_env)
    started = time.perf_counter()
    board = np.zeros((1, 15, 15), np.int8)
    board[0, 7, 7] = board[0, 7, 8] = 1  # h8, i8 (black)
    board[0, 8, 7] = board[0, 6, 6] = 2  # h9, g7 (white): the position of PREDICT_MOVES
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    print(f"machine: {platform.node()} {platform.machine()} cpus={os.cpu_count()} gpu={gpu} "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} model={args.model}"
          + (f" triton env {triton_env}" if triton_env else "")
          + (f" service args {args.service_arg}" if args.service_arg else ""), flush=True)
    rows = []
    gen_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        publish_model(repo, config=args.model)  # every game's one publish path
        model = get_game(spec(args.model).game).default_model
        print("triton model config: " + tune_config(repo, model, args.instances,
                                                     args.kind, args.queue_delay_us), flush=True)
        saved = {key: os.environ.get(key) for key in triton_env}

        def restore_environ() -> None:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

        os.environ.update(triton_env)  # TritonServer hands os.environ on to the server
        t = time.perf_counter()
        with (
            _restoring(restore_environ),
            TritonServer(repo, log_path=args.triton_log or Path(tmp) / "triton.log") as triton,
        ):
            startup = time.perf_counter() - t
            restore_environ()  # the search service gets the original environment
            print(f"triton start-up (process start -> model ready): {startup:.2f} s", flush=True)
            # The service runs in its own process, as deployed: sharing this process's GIL with
            # the load generator would charge the client's work to the service.
            ports = [free_port() for _ in range(args.services)]
            services = [subprocess.Popen(
                [sys.executable, "-m", "services.search.server", "--port", str(port),
                 "--triton-url", triton.grpc_url, *args.service_arg],
                cwd=ROOT, stdout=subprocess.DEVNULL) for port in ports]
            targets = [f"127.0.0.1:{port}" for port in ports]
            target = targets[0]
            servers = list(services)  # stopped at the end, with the floor when there is one
            try:
                for t_ in targets:
                    wait_for_health(t_)
                assert triton.pid is not None
                pids = {"bench": os.getpid(), "triton": triton.pid,
                        **{f"service{i or ''}": s.pid for i, s in enumerate(services)}}
                measure_floor = args.floor and bool(args.concurrency)
                if measure_floor:
                    floor = start_floor(target, Path(tmp))
                    servers.append(floor.process)
                    pids["floor"] = floor.process.pid

                def direct_call():
                    client = PolicyClient(triton.grpc_url)
                    return (lambda: client.infer(board)), client.close

                def predict_call(*addresses: str):
                    """One client per thread, the threads spread over `addresses` in turn."""
                    turn = itertools.count()

                    def make():
                        client = SearchClient(addresses[next(turn) % len(addresses)])
                        return (lambda: client.predict(PREDICT_MOVES)), client.close
                    return make

                service_targets = targets if args.predict_spread else [target]
                makes = {"direct": direct_call, "service": predict_call(*service_targets)}
                if measure_floor:
                    makes["floor"] = predict_call(floor.target)
                for c in args.concurrency:
                    together = c <= args.interleave_up_to
                    groups = [list(makes)] if together else [[name] for name in makes]
                    levels = {}
                    for group in groups:
                        measured = run_level([makes[n] for n in group], c, args.requests,
                                             args.level_seconds, args.warmup, pids)
                        levels.update(zip(group, measured, strict=True))
                    for k, (name, lv) in enumerate(levels.items()):
                        p50, p99 = percentiles(lv.latencies)
                        cpu = ("(interleaved: cpu of the whole level above)" if together and k
                               else _cpu_text(lv.cpu, lv.wall_s))
                        print(f"  C={c:<3} {name:<8} n={len(lv.latencies):<5} "
                              f"p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  "
                              f"{lv.throughput:7.0f} req/s  errors {lv.errors}  {cpu}",
                              flush=True)
                    rows.append((c, together, levels))
                for c in args.genmove_concurrency:
                    visits, wall, each, cpu = genmove_level(
                        targets, c, args.genmove_visits, args.genmove_rounds, pids)
                    gen_rows.append((c, visits, wall, each, cpu))
                    print(f"  GenMove C={c}: {visits} visits in {wall:.2f} s  "
                          f"{_cpu_text(cpu, wall)}", flush=True)
            finally:
                for server in servers:
                    server.terminate()
                for server in servers:
                    server.wait(timeout=30)
    print()
    spread = args.services if args.predict_spread else 1
    print(f"Predict (1 position, top 5) via search service ({spread} process(es)) vs direct "
          f"Triton infer (batch 1); {args.requests} requests per level or "
          f"{args.level_seconds:g} s")
    print(f"{'C':>3} | {'direct p50':>10} {'p99':>8} {'req/s':>7} | {'service p50':>11} "
          f"{'p99':>8} {'req/s':>7} | {'ratio p50':>9} {'p99':>6} {'req/s':>6}")
    for c, together, levels in rows:
        d, s = levels["direct"], levels["service"]
        d50, d99 = percentiles(d.latencies)
        s50, s99 = percentiles(s.latencies)
        print(f"{c:>3} | {d50:10.2f} {d99:8.2f} {d.throughput:7.0f} | {s50:11.2f} {s99:8.2f} "
              f"{s.throughput:7.0f} | {s50 / d50:8.2f}x {s99 / d99:5.2f}x "
              f"{s.throughput / d.throughput:5.2f}x" + ("  (interleaved)" if together else ""))
    if args.floor and rows:
        print("Python gRPC floor (benchmarks/grpc_floor.py: the Predict trip with no work behind "
              "it); bound = (direct p50 + floor p50) / direct p50, the best ratio p50 a Python "
              "front end could reach where requests do not overlap (C = 1)")
        for c, _together, levels in rows:
            d50, _ = percentiles(levels["direct"].latencies)
            f = levels["floor"]
            f50, f99 = percentiles(f.latencies)
            bound = f"  bound {(d50 + f50) / d50:.2f}x" if c == 1 else ""
            print(f"{c:>3} | floor p50 {f50:7.2f} ms  p99 {f99:7.2f} ms  {f.throughput:7.0f} req/s "
                  f"({f.throughput / levels['direct'].throughput:.2f}x direct's){bound}")
    print(f"GenMove {args.genmove_visits} visits, no tree reuse, "
          f"{args.genmove_rounds} searches per client, {args.services} service process(es)")
    for c, visits, wall, each, _ in gen_rows:
        print(f"  {c} concurrent: {visits / wall:6.0f} playouts/s "
              f"(per search p50 {np.percentile(each, 50):.2f} s, max {max(each):.2f} s)")
    print(f"total benchmark time {time.perf_counter() - started:.0f} s, "
          f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
