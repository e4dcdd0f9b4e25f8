"""Fault suite: kill, corrupt and overload the serving path on loopback and measure the recovery.

    .venv/bin/python benchmarks/faults.py [--quick] [--soak-seconds 600] [--only NAMES]
        [--doc docs/reliability.md | --no-doc]      (also: make faults)

Everything runs on 127.0.0.1 with free ports in a temporary folder: a real Triton
(`TritonServer`), the search service as its own process (``python -m services.search.server``),
client threads with their own `SearchClient`. Everything the suite started is stopped when it
ends, also on Ctrl-C or SIGTERM. Each scenario reports measured figures and pass or FAIL with the
reason; a scenario that raises is reported as failed with the error and the suite goes on.

Scenarios (``--only`` takes their names, comma-separated):

* ``triton-kill``: SIGKILL Triton under Predict load (several client threads): time to the
  first UNAVAILABLE answer, time until gRPC health for ``movepred.v1.SearchService`` says
  NOT_SERVING, then Triton restarted on the same ports: time from its readiness to the first OK
  Predict and to SERVING; 0 wrong answers (every OK answer's policy equals the policy computed in
  this process from the TorchScript file of the version the answer names).
* ``triton-hang``: SIGSTOP Triton (a hung server: its port still accepts, nothing answers) under
  Predict load and GenMove calls, then SIGCONT: the longest call during the hang against its
  deadline (goal: no call outlives its deadline by more than 0.5 s, none is refused for want of
  a search slot), time until health says NOT_SERVING, and from the resume to the first OK
  Predict and to SERVING; 0 wrong answers. A call's length is the client's; the service's own
  wait for the hung call ends at each request's deadline too (`servicer.wait_deadline`).
* ``service-kill``: SIGKILL the search service while clients call it, restart it on the same
  port after an outage: time from its readiness to each client's first OK call (goal <= 1 s).
* ``rollout``: rollout of a new version and rollback under Predict load: 0 failed requests.
* ``corrupt``: each corrupt kind (truncated model.pt, NaN outputs, wrong output shape, a zip
  that is not TorchScript, garbage logits = the board cells with a NaN value) published as the
  newest version: rollout refuses it, no answer ever comes from it, also after Triton restarts
  (the launcher must start on the last good version).
* ``publish-disk-full``: publish in a child process whose file size limit (RLIMIT_FSIZE) is
  below the model's size: publish fails, the old version keeps serving, no new version folder
  and no partial file is left in the repository.
* ``ingest-kill``: the ingest flow (its own process) on a generated Gomoku corpus, SIGKILLed
  while it writes its shards, then run again: the shards and manifest are byte-identical to
  those of a clean run.
* ``soak``: the maximum Predict rate (closed loop, a few seconds), then ``--soak-seconds`` at
  80% of it (open loop): p99 latency and the service's RSS at the start against the end.

The policy served is a small TorchScript network built here (`WindowPolicy`: the classic
five-window count of Gomoku programs, attack and defence), which takes a five and blocks a
four, so it passes a smoke test that asks for those, and answers a finite value.
``--quick`` shortens every phase (about 4 minutes on 2 cores) for debugging; the full run takes
about 20 minutes, 10 of them the soak. The table goes to stdout and, unless ``--no-doc``, into
the fault-suite section of docs/reliability.md with the machine, the date and the command.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # serving.py: CPU accounting from /proc

import grpc  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from benchmarks.doc_sections import write_doc_section  # noqa: E402
from benchmarks.host import cpu_model  # noqa: E402
from services import logs  # noqa: E402
from services.api.movepred.v1 import search_pb2  # noqa: E402
from services.defaults import MODEL_FILE  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.repository.publish import publish  # noqa: E402
from services.repository.versions import list_versions  # noqa: E402
from services.search.client import DEFAULT_PREDICT_TIMEOUT_S, SearchClient  # noqa: E402
from services.triton.client import PolicyClient  # noqa: E402
from services.triton.launcher import TritonServer  # noqa: E402
from services.triton.ports import free_port  # noqa: E402

logger = logging.getLogger("faults")

MODEL = get_game("gomoku").default_model  # the model the scenarios publish and serve
SERVICE_NAME = "movepred.v1.SearchService"
SIZE = 15
DOC_BEGIN = "<!-- faults:begin -->"
DOC_END = "<!-- faults:end -->"
SCENARIOS = ("triton-kill", "triton-hang", "service-kill", "rollout", "corrupt",
             "publish-disk-full", "ingest-kill", "soak")
POLICY_ATOL = 1e-4  # float32 policy from the service vs float64 reference here
CORRUPT_KINDS = ("truncated", "nan", "wrong-shape", "not-torchscript", "garbage")


# ----------------------------------------------------------------------------- models
class WindowPolicy(torch.nn.Module):
    """int8 boards [N,15,15] -> (logits [N,225], value [N]) from five-window counts.

    Every run of five cells holding stones of one colour only is worth more the more stones it
    holds (`attack` for the side to move, `defence` for the other); a point's logit is the log
    of the sum over the windows through it. So a four's completing point outweighs everything
    (a five), then blocking the opponent's four. The value is the tanh of the best attack
    against the best defence, finite for every board."""

    def __init__(self) -> None:
        super().__init__()
        k = torch.zeros(4, 1, 5, 5)
        k[0, 0, 2, :] = 1.0
        k[1, 0, :, 2] = 1.0
        k[2, 0] = torch.eye(5)
        k[3, 0] = torch.flip(torch.eye(5), dims=[1])
        self.register_buffer("kernel", k)
        self.register_buffer("attack", torch.tensor([1.0, 10.0, 60.0, 400.0, 20000.0, 20000.0]))
        self.register_buffer("defence", torch.tensor([1.0, 6.0, 30.0, 200.0, 10000.0, 10000.0]))
        ramp = (torch.arange(SIZE) - SIZE // 2).abs()
        distance = torch.maximum(ramp.view(-1, 1), ramp.view(1, -1)).float().flatten()
        self.register_buffer("centre", -0.05 * distance)  # ties go to the centre

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = boards.long()
        black = (b == 1).sum(dim=(1, 2))
        white = (b == 2).sum(dim=(1, 2))
        me_colour = torch.where(black == white, 1, 2).view(-1, 1, 1)
        me = (b == me_colour).float().unsqueeze(1)
        opp = ((b != 0) & (b != me_colour)).float().unsqueeze(1)
        mine = torch.nn.functional.conv2d(me, self.kernel, padding=2).round().long()
        theirs = torch.nn.functional.conv2d(opp, self.kernel, padding=2).round().long()
        att = torch.where(theirs == 0, self.attack[mine], torch.zeros_like(mine).float())
        dfc = torch.where(mine == 0, self.defence[theirs], torch.zeros_like(theirs).float())
        windows = att + dfc  # [N, 4, 15, 15]: the window centred on each point, per direction
        through = torch.nn.functional.conv2d(windows, self.kernel, padding=2, groups=4)
        logits = 2.0 * torch.log1p(through.sum(dim=1)).flatten(1) + self.centre
        value = torch.tanh((att.amax(dim=(1, 2, 3)) - dfc.amax(dim=(1, 2, 3))) / 1000.0)
        return logits, value


class NanPolicy(torch.nn.Module):
    """Every logit NaN."""

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        return torch.full((boards.shape[0], 225), float("nan"))


class WrongShapePolicy(torch.nn.Module):
    """224 logits per board instead of 225."""

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        return torch.zeros((boards.shape[0], 224))


class GarbagePolicy(torch.nn.Module):
    """Logits equal to the board cells (uniform over the empty points) and a NaN value."""

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = -boards.float().flatten(1)
        return logits, torch.full((boards.shape[0],), float("nan"))


def save_script(module: torch.nn.Module, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.script(module.eval()).save(str(path))
    return path


def corrupt_file(kind: str, good: Path, folder: Path) -> Path:
    """A model.pt of `kind` (see CORRUPT_KINDS) in `folder`."""
    path = folder / f"{kind}.pt"
    if kind == "truncated":
        data = good.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "nan":
        save_script(NanPolicy(), path)
    elif kind == "wrong-shape":
        save_script(WrongShapePolicy(), path)
    elif kind == "not-torchscript":
        import zipfile

        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("model/data.pkl", b"not a pickle of a TorchScript module")
            archive.writestr("model/version", b"3\n")
    elif kind == "garbage":
        save_script(GarbagePolicy(), path)
    else:
        raise ValueError(f"unknown corrupt kind {kind!r}")
    return path


# ----------------------------------------------------------------------------- positions
def random_positions(n: int, seed: int = 0) -> list[list[tuple[int, int]]]:
    """`n` playable Gomoku positions (move lists of 0-30 moves, nobody has five)."""
    from services.games.gomoku.rules import GomokuState

    rng = random.Random(seed)
    out: list[list[tuple[int, int]]] = [[]]
    while len(out) < n:
        state = GomokuState()
        moves: list[tuple[int, int]] = []
        for _ in range(rng.randint(1, 30)):
            point = rng.choice(np.flatnonzero(state.legal_mask()).tolist())
            nxt = state.play(point)
            if nxt.winner:
                break
            state = nxt
            moves.append((point % SIZE, point // SIZE))
        out.append(moves)
    return out


class Reference:
    """The policy each version must answer, computed here from that version's model.pt."""

    def __init__(self, repository: Path, positions: list[list[tuple[int, int]]]) -> None:
        from services.search import mcts, validation
        from services.search.client import position

        self.repository = repository
        self.requests = [search_pb2.PredictRequest(position=position(m), top_k=5)
                         for m in positions]
        states = [validation.predict_request(r)[0] for r in self.requests]
        self.boards = np.stack([mcts.network_input(s) for s in states]).astype(np.int8)
        self.legal = np.stack([s.legal_mask() for s in states])
        self._policies: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self._masked_softmax = mcts.masked_softmax

    def remember(self, version: int, model_file: Path) -> None:
        """Compute the policies of `version` from `model_file` (a copy of its model.pt: the
        version folder may be moved away later)."""
        model = torch.jit.load(str(model_file), map_location="cpu").eval()
        with torch.inference_mode():
            out = model(torch.from_numpy(self.boards))
        logits = (out[0] if isinstance(out, tuple) else out).numpy()
        policies = np.stack([self._masked_softmax(row, legal)
                             for row, legal in zip(logits, self.legal, strict=True)])
        with self._lock:
            self._policies[str(version)] = policies

    def check(self, index: int, response: search_pb2.PredictResponse) -> str | None:
        """None when the answer is right, else what is wrong with it."""
        with self._lock:
            policies = self._policies.get(response.model_version)
        if policies is None:
            return f"answered by version {response.model_version!r}, which never passed rollout"
        got = np.asarray(response.policy, dtype=np.float64)
        if got.shape != policies[index].shape:
            return f"policy of {got.size} entries"
        diff = float(np.max(np.abs(got - policies[index])))
        if not diff <= POLICY_ATOL:
            return f"policy differs from v{response.model_version}'s by {diff:.3g}"
        return None


# ----------------------------------------------------------------------------- load
@dataclass
class Call:
    sent: float  # time.monotonic()
    done: float
    code: str  # grpc.StatusCode name
    version: str = ""
    wrong: str | None = None
    client: int = 0


class PredictLoad:
    """`threads` clients (each its own SearchClient) sending Predicts back to back, or paced at
    `rate` requests/s in all (open loop: a late request is sent at once, never skipped)."""

    def __init__(self, target: str, reference: Reference, threads: int,
                 rate: float | None = None, timeout_s: float = 2.0,
                 error_pause_s: float = 0.01) -> None:
        self.target = target
        self.reference = reference
        self.threads = threads
        self.rate = rate
        self.timeout_s = timeout_s
        self.error_pause_s = error_pause_s
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []

    def __enter__(self) -> PredictLoad:
        for i in range(self.threads):
            worker = threading.Thread(target=self._run, args=(i,), daemon=True,
                                      name=f"faults-load-{i}")
            worker.start()
            self._workers.append(worker)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=self.timeout_s + 5)
        self._workers.clear()

    def _run(self, i: int) -> None:
        rng = random.Random(i)
        n = len(self.reference.requests)
        interval = self.threads / self.rate if self.rate else 0.0
        next_at = time.monotonic() + rng.random() * interval
        positions = [r.position for r in self.reference.requests]
        with SearchClient(self.target) as client:
            while not self._stop.is_set():
                if interval:
                    delay = next_at - time.monotonic()
                    if delay > 0 and self._stop.wait(delay):
                        break
                    next_at += interval
                index = rng.randrange(n)
                sent = time.monotonic()
                try:
                    response = client.predict(positions[index], timeout=self.timeout_s)
                    call = Call(sent, time.monotonic(), "OK", response.model_version,
                                self.reference.check(index, response), i)
                except grpc.RpcError as exc:
                    call = Call(sent, time.monotonic(), exc.code().name, client=i)
                with self._lock:
                    self.calls.append(call)
                if call.code != "OK" and not interval:
                    self._stop.wait(self.error_pause_s)

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)


class HealthWatch:
    """Polls gRPC health for `service` every `period_s` on its own channel: (time, status)."""

    def __init__(self, target: str, service: str = SERVICE_NAME, period_s: float = 0.02) -> None:
        self.target = target
        self.service = service
        self.period_s = period_s
        self.samples: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="faults-health")

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with grpc.insecure_channel(self.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while not self._stop.is_set():
                try:
                    status = stub.Check(health_pb2.HealthCheckRequest(service=self.service),
                                        timeout=0.5).status
                    text = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
                except grpc.RpcError as exc:
                    text = exc.code().name
                self.samples.append((time.monotonic(), text))
                self._stop.wait(self.period_s)

    def first(self, status: str, after: float) -> float | None:
        return next((t for t, s in list(self.samples) if t >= after and s == status), None)


def percentile_ms(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1000.0, q)) if values else float("nan")


# ----------------------------------------------------------------------------- processes
def rss_mb(pid: int) -> float:
    """Resident set size of a process and its children, in MiB (0 when it is gone)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs) / (1 << 20)
    except psutil.Error:
        return 0.0


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal the process group of `proc` (started with start_new_session) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError, PermissionError):  # leftovers of the group
        os.killpg(proc.pid, signal.SIGKILL)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


class Stack:
    """The servers of the suite (Triton, the search service) on fixed loopback ports, so that
    a restarted one comes back where its clients look for it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.repository = root / "model_repository"
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.service_port = free_port()
        self.triton: TritonServer | None = None
        self.service: subprocess.Popen | None = None
        self.service_log = root / "search-service.log"
        self.triton_starts = 0

    @property
    def triton_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.service_port}"

    def start_triton(self) -> float:
        """Start Triton (stopping a previous one first); returns its start-up seconds."""
        self.stop_triton()
        self.triton_starts += 1
        self.triton = TritonServer(self.repository, models=(MODEL,), grpc_port=self.grpc_port,
                                   http_port=self.http_port, startup_timeout_s=120,
                                   log_path=self.root / f"tritonserver-{self.triton_starts}.log")
        t0 = time.monotonic()
        self.triton.start()
        return time.monotonic() - t0

    def kill_triton(self) -> None:
        """SIGKILL the tritonserver process only (its python stubs are left to notice)."""
        assert self.triton is not None and self.triton.pid is not None
        os.kill(self.triton.pid, signal.SIGKILL)

    def signal_triton(self, sig: int) -> None:
        """Send `sig` to the tritonserver process only (SIGSTOP: it hangs, SIGCONT: it goes on)."""
        assert self.triton is not None and self.triton.pid is not None
        os.kill(self.triton.pid, sig)

    def stop_triton(self) -> None:
        if self.triton is not None:
            self.triton.stop(grace_s=5)
            self.triton = None

    def start_service(self, timeout_s: float = 90.0) -> float:
        """Start the search service process; returns the time it first answered health."""
        self.stop_service()
        cmd = [sys.executable, "-m", "services.search.server", "--port", str(self.service_port),
               "--triton-url", self.triton_url, "--model", MODEL, "--go-model", "",
               "--capture-model", "",
               "--triton-timeout", "2"]
        log = open(self.service_log, "ab")  # noqa: SIM115 - the child keeps it
        self.service = subprocess.Popen(cmd, cwd=ROOT, env=child_env(), stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        log.close()
        return wait_for_health(self.target, self.service, timeout_s)

    def kill_service(self) -> None:
        assert self.service is not None
        kill_group(self.service, signal.SIGKILL)

    def stop_service(self) -> None:
        if self.service is not None:
            kill_group(self.service, signal.SIGTERM)
            self.service = None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_service()
        with contextlib.suppress(Exception):
            self.stop_triton()

    def policy_client(self) -> PolicyClient:
        return PolicyClient(self.triton_url, model_name=MODEL, timeout_s=10.0)

    def service_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.service_log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


def wait_for_health(target: str, proc: subprocess.Popen | None, timeout_s: float) -> float:
    """Poll health ("" service) until the server answers; the monotonic time it did."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                stub.Check(health_pb2.HealthCheckRequest(), timeout=0.5, wait_for_ready=False)
                return time.monotonic()
            except grpc.RpcError:
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"the search service exited with code {proc.returncode}"
                                       ) from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no health answer from {target} in {timeout_s:.0f} s"
                                       ) from None
                time.sleep(0.01)


def wait_ok(target: str, reference: Reference, timeout_s: float) -> None:
    """Until a Predict through the service answers OK."""
    deadline = time.monotonic() + timeout_s
    with SearchClient(target) as client:
        while True:
            try:
                client.predict(reference.requests[0].position, timeout=2)
                return
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


# ----------------------------------------------------------------------------- results
@dataclass
class Figure:
    name: str
    value: str
    goal: str = ""
    passed: bool | None = None  # None: informational


@dataclass
class Outcome:
    scenario: str
    figures: list[Figure] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, name: str, value: str, goal: str = "", passed: bool | None = None,
            why: str = "") -> None:
        self.figures.append(Figure(name, value, goal, passed))
        if passed is False:
            self.failures.append(why or f"{name}: {value} (goal {goal})")

    @property
    def passed(self) -> bool:
        return not self.failures


def seconds_text(value: float | None) -> str:
    return "never" if value is None else f"{value:.3f} s"


def within(value: float | None, goal: float) -> bool:
    return value is not None and value <= goal


def delay(at: float | None, since: float) -> float | None:
    """Seconds from `since` to `at`; None when `at` never came."""
    return None if at is None else at - since


def add_delay(out: Outcome, name: str, at: float | None, since: float, goal_s: float) -> None:
    """One judged row: the delay from `since` to `at`, goal at most `goal_s` seconds."""
    value = delay(at, since)
    out.add(name, seconds_text(value), f"<= {goal_s:g} s", within(value, goal_s))


def codes_text(calls: list[Call]) -> str:
    counts = Counter(c.code for c in calls)
    return ", ".join(f"{k} {v}" for k, v in counts.most_common())


def wait_recovered(load: PredictLoad, health: HealthWatch, since: float, within_s: float
                   ) -> None:
    """Wait (at most `within_s`) for an OK Predict sent after `since` and health SERVING after
    it, then one more second of load."""
    until = since + within_s
    while time.monotonic() < until:
        ok_after = [c for c in load.snapshot() if c.code == "OK" and c.sent >= since]
        if ok_after and health.first("SERVING", since) is not None:
            break
        time.sleep(0.05)
    time.sleep(1.0)


def add_wrong_answers(out: Outcome, calls: list[Call]) -> None:
    """The judged row of wrong answers among the OK Predicts."""
    wrong = [c for c in calls if c.code == "OK" and c.wrong]
    out.add("wrong answers", f"{len(wrong)} of {sum(c.code == 'OK' for c in calls)} OK",
            "0", not wrong, f"wrong answers: {wrong[0].wrong if wrong else ''}")


# ----------------------------------------------------------------------------- scenarios
@dataclass
class Suite:
    stack: Stack
    reference: Reference
    quick: bool
    soak_seconds: float
    work: Path
    good_model: Path
    good_versions: list[int] = field(default_factory=list)

    # ---- helpers
    def ensure_up(self) -> None:
        """Triton and the service running and answering (restarted when a scenario left
        them down)."""
        if self.stack.triton is None or not self.stack.triton.is_running():
            self.stack.start_triton()
        if self.stack.service is None or self.stack.service.poll() is not None:
            self.stack.start_service()
        wait_ok(self.stack.target, self.reference, 60)

    def serving(self) -> list[int]:
        with self.stack.policy_client() as client:
            return sorted(int(v) for v in client.ready_versions(MODEL) if v.isdigit())

    def publish_good(self, seed_note: str) -> int:
        version = publish(self.good_model, self.stack.repository, MODEL,
                          metadata={"note": seed_note})
        self.reference.remember(version, self.good_model)
        return version

    def threads(self) -> int:
        return 4

    # ---- SIGKILL Triton
    def triton_kill(self, out: Outcome) -> None:
        self.ensure_up()
        steady = 2.0 if self.quick else 4.0
        outage = 2.0 if self.quick else 5.0
        with HealthWatch(self.stack.target) as health, \
                PredictLoad(self.stack.target, self.reference, self.threads()) as load:
            time.sleep(steady)
            healthy_before = health.first("SERVING", 0.0) is not None
            killed = time.monotonic()
            self.stack.kill_triton()
            time.sleep(outage)
            t_start = time.monotonic()
            startup = self.stack.start_triton()
            ready = time.monotonic()
            wait_recovered(load, health, ready, 10 if self.quick else 20)
            load.stop()
            calls = load.snapshot()
        unavailable = min((c.done for c in calls if c.code == "UNAVAILABLE" and c.done >= killed),
                          default=None)
        not_serving = health.first("NOT_SERVING", killed)
        first_ok = min((c.done for c in calls if c.code == "OK" and c.sent >= ready),
                       default=None)
        serving = health.first("SERVING", ready)
        out.add("health SERVING before the kill", "yes" if healthy_before else "no", "yes",
                healthy_before)
        add_delay(out, "time to first UNAVAILABLE", unavailable, killed, 2.0)
        add_delay(out, "time to health NOT_SERVING", not_serving, killed, 2.0)
        out.add("Triton restart (outage, start-up)",
                f"{outage:.0f} s down, ready {startup:.2f} s after the start at "
                f"+{t_start - killed:.1f} s")
        add_delay(out, "Triton ready -> first OK Predict", first_ok, ready, 1.0)
        add_delay(out, "Triton ready -> health SERVING", serving, ready, 1.0)
        out.add("requests (by code)", codes_text(calls))
        add_wrong_answers(out, calls)

    # ---- SIGSTOP Triton: hung, not dead
    def triton_hang(self, out: Outcome) -> None:
        self.ensure_up()
        steady = 2.0 if self.quick else 4.0
        hang = 4.0 if self.quick else 10.0
        deadline_s = 2.0
        searches: list[Call] = []
        stop = threading.Event()

        def genmoves() -> None:  # a search client alongside the Predict load
            with SearchClient(self.stack.target) as client:
                while not stop.is_set():
                    sent = time.monotonic()
                    try:
                        client.genmove(["h8"], max_visits=64, timeout=deadline_s,
                                       reuse_tree=False)  # every search asks Triton
                        code = "OK"
                    except grpc.RpcError as exc:
                        code = exc.code().name
                    searches.append(Call(sent, time.monotonic(), code))
                    stop.wait(0.05)

        searcher = threading.Thread(target=genmoves, daemon=True, name="faults-genmove")
        with HealthWatch(self.stack.target) as health, \
                PredictLoad(self.stack.target, self.reference, self.threads(),
                            timeout_s=deadline_s) as load:
            searcher.start()
            time.sleep(steady)
            stopped = time.monotonic()
            self.stack.signal_triton(signal.SIGSTOP)
            try:
                time.sleep(hang)
            finally:
                resumed = time.monotonic()
                self.stack.signal_triton(signal.SIGCONT)
            wait_recovered(load, health, resumed, 10 if self.quick else 20)
            stop.set()
            load.stop()
            searcher.join(deadline_s + 5)
            calls = load.snapshot()
        during = [c for c in [*calls, *searches] if stopped <= c.sent < resumed]
        longest = max((c.done - c.sent for c in during), default=None)
        out.add("hang", f"{hang:.0f} s (SIGSTOP, then SIGCONT); calls' deadline "
                        f"{deadline_s:.0f} s")
        out.add("longest call sent during the hang", seconds_text(longest),
                f"<= {deadline_s + 0.5:g} s", within(longest, deadline_s + 0.5),
                f"a call sent during the hang took {seconds_text(longest)}, past its "
                f"{deadline_s:g} s deadline")
        add_delay(out, "time to health NOT_SERVING", health.first("NOT_SERVING", stopped),
                  stopped, 2.0)
        add_delay(out, "resumed -> first OK Predict",
                  min((c.done for c in calls if c.code == "OK" and c.sent >= resumed),
                      default=None), resumed, 1.0)
        add_delay(out, "resumed -> health SERVING", health.first("SERVING", resumed), resumed,
                  1.0)
        out.add("Predicts (by code)", codes_text(calls))
        refused = [c for c in searches if c.code == "RESOURCE_EXHAUSTED"]
        out.add("GenMoves (by code)", codes_text(searches), "no RESOURCE_EXHAUSTED",
                not refused, f"{len(refused)} GenMove(s) found no free search slot")
        add_wrong_answers(out, calls)

    # ---- SIGKILL the search service
    def service_kill(self, out: Outcome) -> None:
        self.ensure_up()
        outage = 3.0 if self.quick else 20.0
        threads = self.threads()
        with PredictLoad(self.stack.target, self.reference, threads, timeout_s=1.0,
                         error_pause_s=0.005) as load:
            time.sleep(1.5)
            self.stack.kill_service()
            time.sleep(outage)
            ready = self.stack.start_service()
            deadline = ready + 30
            while time.monotonic() < deadline:
                calls = load.snapshot()
                back = {c.client for c in calls if c.code == "OK" and c.done >= ready}
                if len(back) == threads:
                    break
                time.sleep(0.05)
            time.sleep(0.5)
            load.stop()
            calls = load.snapshot()
        firsts = []
        for i in range(threads):
            first = min((c.done for c in calls if c.client == i and c.code == "OK"
                         and c.done >= ready), default=None)
            firsts.append(delay(first, ready))
        worst = None if any(f is None for f in firsts) else max(firsts)
        out.add("outage", f"{outage:.0f} s (SIGKILL, restart on the same port)")
        out.add("service ready -> every client's first OK call", seconds_text(worst), "<= 1 s",
                within(worst, 1.0),
                f"clients back {', '.join(seconds_text(f) for f in firsts)} after the "
                "service was ready (goal <= 1 s)")
        out.add("requests (by code)", codes_text(calls))
        wrong = [c for c in calls if c.code == "OK" and c.wrong]
        out.add("wrong answers", str(len(wrong)), "0", not wrong)

    # ---- rollout and rollback under load
    def rollout_rollback(self, out: Outcome) -> None:
        from services.triton.rollout import rollback, rollout

        self.ensure_up()
        version = self.publish_good("rollout under load")
        with PredictLoad(self.stack.target, self.reference, self.threads()) as load, \
                self.stack.policy_client() as client:
            time.sleep(1.0)
            t0 = time.monotonic()
            report = rollout(client, self.stack.repository, version, MODEL)
            t1 = time.monotonic()
            time.sleep(1.0)
            back = rollback(client, self.stack.repository, MODEL)
            t2 = time.monotonic()
            time.sleep(1.0)
            load.stop()
            calls = load.snapshot()
        self.good_versions.append(version)
        failed = [c for c in calls if c.code != "OK"]
        wrong = [c for c in calls if c.code == "OK" and c.wrong]
        versions = Counter(c.version for c in calls if c.code == "OK")
        out.add("rollout", f"v{report.previous} -> v{report.current} in {t1 - t0:.2f} s")
        out.add("rollback", f"v{back.previous} -> v{back.current} in {t2 - t1:.2f} s")
        out.add("answers by version", ", ".join(f"v{k} {n}" for k, n in sorted(versions.items())))
        out.add("failed requests", f"{len(failed)} of {len(calls)}", "0", not failed,
                f"failed requests during rollout/rollback: {codes_text(failed)}")
        out.add("wrong answers", str(len(wrong)), "0", not wrong)

    # ---- corrupt versions
    def corrupt(self, out: Outcome) -> None:
        from services.triton.rollout import RolloutError, rollout

        self.ensure_up()
        folder = self.work / "corrupt"
        folder.mkdir(parents=True, exist_ok=True)
        for kind in CORRUPT_KINDS:
            self._corrupt_kind(out, kind, folder, rollout, RolloutError)

    def _corrupt_kind(self, out: Outcome, kind: str, folder: Path, rollout: Callable[..., Any],
                      rollout_error: type[Exception]) -> None:
        last_good = self.serving()
        bad = corrupt_file(kind, self.good_model, folder)
        try:  # first line of defence: the publisher's own test run
            publish(bad, self.stack.repository, MODEL)
            publisher = "accepted"
            version = max(list_versions(self.stack.repository, MODEL))
        except Exception as exc:
            publisher = f"refused ({type(exc).__name__})"
            if kind == "truncated":  # corrupted on disk after a good publish
                version = publish(self.good_model, self.stack.repository, MODEL)
                (self.stack.repository / MODEL / str(version) / MODEL_FILE).write_bytes(
                    bad.read_bytes())
            else:
                version = publish(bad, self.stack.repository, MODEL, validate=False)
        with PredictLoad(self.stack.target, self.reference, 2) as load, \
                self.stack.policy_client() as client:
            time.sleep(0.5)
            try:
                rollout(client, self.stack.repository, version, MODEL)
                refused = "NOT refused"
            except rollout_error as exc:
                refused = f"refused: {str(exc).splitlines()[0][:90]}"
            except Exception as exc:
                refused = f"failed with {type(exc).__name__}: {str(exc)[:90]}"
            served_after_rollout = self.serving()
            time.sleep(0.5)
            restart_error = ""
            try:
                self.stack.start_triton()
                wait_ok(self.stack.target, self.reference, 30)
                served_after_restart = self.serving()
                time.sleep(1.0)
            except Exception as exc:
                restart_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                served_after_restart = []
            load.stop()
            calls = load.snapshot()
        from_bad = [c for c in calls if c.code == "OK" and c.version == str(version)]
        wrong = [c for c in calls if c.code == "OK" and c.wrong]
        name = f"{kind} as v{version}"
        out.add(f"{name}: publisher", publisher)
        out.add(f"{name}: rollout", refused, "refused", refused.startswith("refused"),
                f"{kind}: rollout {refused}")
        out.add(f"{name}: served after rollout", _versions(served_after_rollout),
                _versions(last_good), served_after_rollout == last_good,
                f"{kind}: after the refused rollout Triton serves "
                f"{_versions(served_after_rollout)}, not {_versions(last_good)}")
        if restart_error:
            out.add(f"{name}: Triton restart", restart_error, "starts", False,
                    f"{kind}: Triton did not restart: {restart_error}")
            self.ensure_up()
        else:
            out.add(f"{name}: served after restart", _versions(served_after_restart),
                    _versions(last_good), served_after_restart == last_good,
                    f"{kind}: after a restart Triton serves {_versions(served_after_restart)}, "
                    f"not the last good {_versions(last_good)}")
        out.add(f"{name}: answers from it", f"{len(from_bad)} of {len(calls)}", "0",
                not from_bad, f"{kind}: {len(from_bad)} answers came from v{version}")
        out.add(f"{name}: wrong answers", str(len(wrong)), "0", not wrong,
                f"{kind}: {len(wrong)} wrong answers ({wrong[0].wrong if wrong else ''})")

    # ---- publish with the disk full
    def publish_disk_full(self, out: Outcome) -> None:
        self.ensure_up()
        model_dir = self.stack.repository / MODEL
        before = sorted(p.name for p in model_dir.iterdir())
        served_before = self.serving()
        limit = max(1024, self.good_model.stat().st_size // 2)
        script = (
            "import resource, signal, sys\n"
            "from pathlib import Path\n"
            "from services.repository.publish import publish\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
            f"v = publish(Path({str(self.good_model)!r}), Path({str(self.stack.repository)!r}),"
            f" {MODEL!r})\n"
            "print('published', v)\n"
        )
        with PredictLoad(self.stack.target, self.reference, 2) as load:
            time.sleep(0.5)
            child = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=child_env(),
                                   capture_output=True, text=True, timeout=300)
            time.sleep(1.0)
            load.stop()
            calls = load.snapshot()
        after = sorted(p.name for p in model_dir.iterdir())
        new = sorted(set(after) - set(before) - {".rollout.lock"})
        error = (child.stderr.strip().splitlines() or ["(no error text)"])[-1]
        failed = [c for c in calls if c.code != "OK"]
        out.add("file size limit", f"{limit} bytes (model.pt {self.good_model.stat().st_size})")
        out.add("publish", f"failed: {error[:120]}" if child.returncode else
                f"succeeded ({child.stdout.strip()})", "fails", child.returncode != 0)
        out.add("left in the model folder", ", ".join(new) or "nothing new", "nothing new",
                not new, f"publish left {new} in {model_dir}")
        served_after = self.serving()
        out.add("served after", _versions(served_after), _versions(served_before),
                served_after == served_before)
        out.add("requests during publish", f"{len(calls) - len(failed)} OK of {len(calls)}",
                "all OK", not failed, f"failed requests: {codes_text(failed)}")

    # ---- ingest killed mid-write
    def ingest_kill(self, out: Outcome) -> None:
        games = 1500 if self.quick else 6000
        corpus = self.work / "ingest" / "corpus.rif"
        make_corpus(corpus, games)
        clean = self.work / "ingest" / "clean"
        killed_dir = self.work / "ingest" / "killed"
        t0 = time.monotonic()
        run_ingest(corpus, clean, timeout_s=900)
        clean_s = time.monotonic() - t0
        where = kill_ingest_mid_write(corpus, killed_dir, clean_s)
        t1 = time.monotonic()
        run_ingest(corpus, killed_dir, timeout_s=900)
        rerun_s = time.monotonic() - t1
        a, b = tree_digest(clean), tree_digest(killed_dir)
        differ = sorted(set(a) ^ set(b)) + sorted(k for k in set(a) & set(b) if a[k] != b[k])
        out.add("corpus", f"{games} generated games, {corpus.stat().st_size >> 10} KiB; clean "
                          f"run {clean_s:.1f} s, rerun after the kill {rerun_s:.1f} s")
        out.add("killed", where)
        out.add("files differing from the clean run", ", ".join(differ[:5]) or
                f"none ({len(a)} files identical)", "none", not differ,
                f"after kill + rerun these files differ from a clean run: {differ[:5]}")

    # ---- soak
    def soak(self, out: Outcome) -> None:
        self.ensure_up()
        probe = 4.0 if self.quick else 10.0
        with PredictLoad(self.stack.target, self.reference, 8) as load:
            time.sleep(1.0)
            start = time.monotonic()
            time.sleep(probe)
            end = time.monotonic()
            load.stop()
            calls = load.snapshot()
        done = [c for c in calls if start <= c.done <= end and c.code == "OK"]
        max_rate = len(done) / (end - start)
        rate = 0.8 * max_rate
        window = min(60.0, self.soak_seconds / 4)
        pid = self.stack.service.pid if self.stack.service else 0
        triton_pid = self.stack.triton.pid if self.stack.triton else None
        triton_rss = [rss_mb(triton_pid) if triton_pid else 0.0]
        samples: list[Sample] = []
        # the client's default deadline: the soak looks for degradation over time; a request
        # held up by a stall of the shared machine is counted apart (over 2 s)
        with PredictLoad(self.stack.target, self.reference, 8, rate=rate,
                         timeout_s=DEFAULT_PREDICT_TIMEOUT_S) as load:
            t0 = time.monotonic()
            while time.monotonic() - t0 < self.soak_seconds:
                samples.append(Sample.take(t0, pid))
                time.sleep(min(5.0, self.soak_seconds / 20))
            samples.append(Sample.take(t0, pid))
            triton_rss.append(rss_mb(triton_pid) if triton_pid else 0.0)
            load.stop()
            calls = load.snapshot()
        t_end = samples[-1].t
        ok = [c for c in calls if c.code == "OK"]
        first = [c for c in ok if c.sent - t0 <= window]
        last = [c for c in ok if c.sent - t0 >= t_end - window]
        failed = [c for c in calls if c.code != "OK"]
        wrong = [c for c in ok if c.wrong]
        achieved = len(calls) / max(1e-9, t_end)
        p99_first = percentile_ms([c.done - c.sent for c in first], 99)
        p99_last = percentile_ms([c.done - c.sent for c in last], 99)
        head, tail = Sample.span(samples, 0.0, window), Sample.span(samples, t_end - window, t_end)
        cpu_first = head.service_cpu / max(1, len(first)) * 1000
        cpu_last = tail.service_cpu / max(1, len(last)) * 1000
        out.add("maximum Predict rate", f"{max_rate:.0f} requests/s (8 clients, closed loop, "
                                        f"{probe:.0f} s)")
        out.add("soak", f"{self.soak_seconds:.0f} s at {rate:.0f} requests/s asked "
                        f"({achieved:.0f}/s sent, {len(calls)} requests)")
        minutes = [Sample.span(samples, m * 60.0, (m + 1) * 60.0) for m in range(int(t_end // 60))]
        per_minute_cpu = [span.service_cpu / max(1, sum(
            1 for c in ok if m * 60 <= c.sent - t0 < (m + 1) * 60)) * 1000
            for m, span in enumerate(minutes)]
        out.add(f"service CPU per 1000 requests, first {window:.0f} s -> last {window:.0f} s",
                f"{cpu_first:.2f} s -> {cpu_last:.2f} s" + (
                    " (per minute: " + ", ".join(f"{v:.2f}" for v in per_minute_cpu) + ")"
                    if per_minute_cpu else ""))
        other = (f"{head.other_cores:.2f} -> {tail.other_cores:.2f} cores used by processes "
                 "outside the suite")
        busier = tail.other_cores - head.other_cores > OUTSIDE_LOAD_MARGIN
        latency_ok = p99_last <= 2 * p99_first + 5
        out.add(f"p99 latency, first {window:.0f} s -> last {window:.0f} s",
                f"{p99_first:.1f} ms -> {p99_last:.1f} ms ({other})",
                "last <= 2x first + 5 ms, judged unless outside load grew by "
                f"> {OUTSIDE_LOAD_MARGIN} cores",
                None if busier and not latency_ok else latency_ok)
        per_minute = [percentile_ms([c.done - c.sent for c in ok
                                     if m * 60 <= c.sent - t0 < (m + 1) * 60], 99)
                      for m in range(int(t_end // 60))]
        if per_minute:
            out.add("p99 latency per minute", ", ".join(f"{v:.0f}" for v in per_minute) + " ms")
        rss_first, rss_last = samples[1].rss if len(samples) > 1 else samples[0].rss, \
            samples[-1].rss
        out.add("service RSS, start -> end", f"{rss_first:.0f} MiB -> {rss_last:.0f} MiB",
                "growth <= 10% + 20 MiB", rss_last <= 1.1 * rss_first + 20)
        out.add("Triton RSS (with its python stub), start -> end",
                f"{triton_rss[0]:.0f} MiB -> {triton_rss[-1]:.0f} MiB")
        out.add("requests over 2 s", str(sum(1 for c in ok if c.done - c.sent > 2.0)))
        out.add(f"failed requests ({DEFAULT_PREDICT_TIMEOUT_S:.0f} s deadline)",
                f"{len(failed)} of {len(calls)}", "0", not failed,
                f"failed requests in the soak: {codes_text(failed)}")
        out.add("wrong answers", str(len(wrong)), "0", not wrong)


OUTSIDE_LOAD_MARGIN = 0.25  # cores: more outside load than this in the last window


@dataclass
class Sample:
    """One soak sample: seconds since the start, the service's RSS (MiB) and CPU seconds, and
    the CPU seconds of the whole machine and of this suite's process tree (Triton, service,
    load generator) since boot."""

    t: float
    rss: float
    service_cpu: float
    machine_cpu: float
    suite_cpu: float

    @classmethod
    def take(cls, t0: float, service_pid: int) -> Sample:
        from serving import machine_seconds, tree_cpu_seconds

        return cls(time.monotonic() - t0, rss_mb(service_pid), tree_cpu_seconds(service_pid),
                   machine_seconds()[0], tree_cpu_seconds(os.getpid()))

    @staticmethod
    def span(samples: list[Sample], start: float, end: float) -> Span:
        """CPU used between the samples nearest `start` and `end`."""
        a = min(samples, key=lambda x: abs(x.t - start))
        b = min(samples, key=lambda x: abs(x.t - end))
        seconds = max(1e-9, b.t - a.t)
        other = (b.machine_cpu - a.machine_cpu) - (b.suite_cpu - a.suite_cpu)
        return Span(b.service_cpu - a.service_cpu, max(0.0, other) / seconds)


@dataclass
class Span:
    service_cpu: float  # CPU seconds of the search service
    other_cores: float  # cores used on average by processes outside the suite


def _versions(versions: list[int]) -> str:
    return ", ".join(f"v{v}" for v in versions) or "nothing"


# ----------------------------------------------------------------------------- ingest
def make_corpus(path: Path, games: int, seed: int = 0) -> Path:
    """A .rif of `games` random Gomoku games (each move next to the stones, up to a five or
    40-90 moves), written by `write_rif`."""
    from services.games.gomoku.rules import GomokuState
    from services.records.rif import RifGame
    from services.records.rif_writer import write_rif

    rng = random.Random(seed)
    records = []
    for g in range(games):
        state = GomokuState()
        moves: list[int] = [7 * SIZE + 7]
        state = state.play(moves[0])
        for _ in range(rng.randint(40, 90)):
            near = [p for p in (m + dy * SIZE + dx for m in moves[-6:] for dy in (-1, 0, 1)
                                for dx in (-1, 0, 1))
                    if 0 <= p < SIZE * SIZE and state.board.flat[p] == 0]
            if not near:
                break
            point = rng.choice(near)
            state = state.play(point)
            moves.append(point)
            if state.winner:
                break
        records.append(RifGame(source=path.name, game_id=str(g + 1), moves=tuple(moves),
                               bresult=0.5))
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_rif(records, path, date="2024-01-01")


def ingest_command(corpus: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "flows.ingest", str(corpus), "--out", str(out),
            "--no-progress"]


def run_ingest(corpus: Path, out: Path, timeout_s: float) -> None:
    proc = subprocess.Popen(ingest_command(corpus, out), cwd=ROOT, env=child_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    finally:
        kill_group(proc)
    if proc.returncode != 0:
        tail = "\n".join(output.decode(errors="replace").splitlines()[-10:])
        raise RuntimeError(f"ingest exited with {proc.returncode}:\n{tail}")


def kill_ingest_mid_write(corpus: Path, out: Path, clean_s: float) -> str:
    """Run ingest into `out` and SIGKILL it (its whole process group) as soon as a shard is
    being written (a temporary file in `out`); if none is seen, at 90% of the clean run's
    time. Returns what was happening when it was killed."""
    proc = subprocess.Popen(ingest_command(corpus, out), cwd=ROOT, env=child_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    where = ""
    try:
        while proc.poll() is None:
            temps = [p.name for p in out.glob(".*.tmp")] if out.is_dir() else []
            if temps:
                where = f"while writing {temps[0]} at {time.monotonic() - t0:.1f} s"
                break
            if time.monotonic() - t0 > 0.9 * clean_s:
                where = f"at {time.monotonic() - t0:.1f} s (90% of a clean run; no temporary " \
                        "file seen)"
                break
            time.sleep(0.002)
        else:
            where = "never: it finished first"
    finally:
        kill_group(proc)
    left = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    return f"{where}; left behind: {', '.join(left[:6]) or 'nothing'}"


def tree_digest(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder`."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- report
def machine() -> str:
    """CPU model and core count (nproc), e.g. "AMD EPYC, 2 cores"."""
    return f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report(outcomes: list[Outcome], machine_text: str, date: str, command: str) -> str:
    lines = ["| scenario | result | seconds |", "|---|---|---|"]
    for o in outcomes:
        result = "pass" if o.passed else "FAIL: " + "; ".join(o.failures)
        lines.append(f"| {o.scenario} | {_cell(result)} | {o.seconds:.0f} |")
    lines += ["", "| figure | value | goal | result | machine | date | command |",
              "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        for f in o.figures:
            if f.passed is None:
                result = "not judged" if f.goal else ""
            else:
                result = "pass" if f.passed else "FAIL"
            lines.append(f"| {o.scenario}: {_cell(f.name)} | {_cell(f.value)} | "
                         f"{_cell(f.goal)} | {result} | {machine_text} | {date} | `{command}` |")
    return "\n".join(lines)


FAULTS_INTRO = """\
`benchmarks/faults.py` (`make faults`) runs a real Triton, the search service as its own
process and client threads on 127.0.0.1, then kills, corrupts and loads them (scenarios in the
script's docstring). "Wrong answers" compares every OK Predict's policy with the policy computed
in the suite's process from the TorchScript file of the version the answer names (max abs
difference <= 1e-4). A row with FAIL says what was seen instead of the goal.
"""


# ----------------------------------------------------------------------------- main
class Interrupted(BaseException):
    """SIGTERM: leave like Ctrl-C, through every cleanup."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Interrupted()


def run_suite(names: list[str], quick: bool, soak_seconds: float, root: Path
              ) -> list[Outcome]:
    torch.set_num_threads(1)
    stack = Stack(root)
    (stack.repository / MODEL).mkdir(parents=True)
    shutil.copyfile(ROOT / "model_repository" / MODEL / "config.pbtxt",
                    stack.repository / MODEL / "config.pbtxt")
    good = save_script(WindowPolicy(), root / "models" / "window.pt")
    reference = Reference(stack.repository, random_positions(24))
    suite = Suite(stack, reference, quick, soak_seconds, root, good)
    outcomes: list[Outcome] = []
    try:
        needs_servers = any(n != "ingest-kill" for n in names)
        if needs_servers:
            v1 = suite.publish_good("first version")
            suite.good_versions.append(v1)
            startup = stack.start_triton()
            logger.info("Triton ready in %.1f s on %s", startup, stack.triton_url)
            with stack.policy_client() as client:
                from services.triton.rollout import rollout

                rollout(client, stack.repository, v1, MODEL)  # the record: v1 serves
            stack.start_service()
            wait_ok(stack.target, reference, 60)
        runners: dict[str, Callable[[Outcome], None]] = {
            "triton-kill": suite.triton_kill,
            "triton-hang": suite.triton_hang,
            "service-kill": suite.service_kill,
            "rollout": suite.rollout_rollback,
            "corrupt": suite.corrupt,
            "publish-disk-full": suite.publish_disk_full,
            "ingest-kill": suite.ingest_kill,
            "soak": suite.soak,
        }
        for name in names:
            out = Outcome(name)
            logger.info("scenario %s ...", name)
            t0 = time.monotonic()
            try:
                runners[name](out)
            except Exception as exc:
                logger.error("scenario %s failed: %s\n%s", name, exc, traceback.format_exc())
                out.failures.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                                    if str(exc) else type(exc).__name__)
                tail = stack.service_tail()
                logger.info("search service log tail:\n%s", tail)
            out.seconds = time.monotonic() - t0
            logger.info("scenario %s: %s", name, "pass" if out.passed else
                        "FAIL: " + "; ".join(out.failures))
            outcomes.append(out)
    finally:
        stack.close()
    for out in outcomes:  # the temporary folder's name says nothing to a reader of the table
        for f in out.figures:
            f.value = f.value.replace(str(root), "$TMP")
        out.failures = [text.replace(str(root), "$TMP") for text in out.failures]
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/faults.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="short phases (a 20 s soak unless --soak-seconds), for debugging")
    parser.add_argument("--soak-seconds", type=float, default=None,
                        help="soak length (default 600, --quick 20)")
    parser.add_argument("--only", default="", help=f"scenarios to run, of {', '.join(SCENARIOS)}")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "reliability.md")
    parser.add_argument("--no-doc", action="store_true", help="print the table only")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary folder (logs, repository) for inspection")
    logs.add_arguments(parser)
    args = parser.parse_args(argv)
    logs.configure_from(args)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(SCENARIOS)
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
    soak_seconds = args.soak_seconds if args.soak_seconds is not None else (
        20.0 if args.quick else 600.0)
    # Explicit handlers: SIGINT is inherited as ignored by a background job, and SIGTERM
    # must also unwind through every cleanup.
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _on_sigterm),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    root = Path(tempfile.mkdtemp(prefix="movepred-faults-"))
    started = time.monotonic()
    try:
        outcomes = run_suite(names, args.quick, soak_seconds, root)
    except (KeyboardInterrupt, Interrupted):
        logger.error("interrupted: everything the suite started is stopped")
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if args.keep:
            logger.info("kept %s", root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    command = " ".join([".venv/bin/python benchmarks/faults.py",
                        *(sys.argv[1:] if argv is None else argv)])
    text = report(outcomes, machine(), date, command)
    sys.stdout.write(text + "\n")
    logger.info("fault suite: %d of %d scenarios pass in %.0f s",
                sum(o.passed for o in outcomes), len(outcomes), time.monotonic() - started)
    if not args.no_doc:
        write_doc_section(args.doc, DOC_BEGIN, DOC_END, FAULTS_INTRO + "\n" + text,
                          "Fault suite")
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # killed servers leave no core files
    sys.exit(main())
