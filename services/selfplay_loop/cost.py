"""What a stage of the loop cost over all its runs, a killed run included.

A stage's summary is written once, when the stage ends; a run killed before that would lose
its CPU time, and the rerun's summary would count only the resumed part (self-play plays only
the missing games, training resumes from its checkpoint). Each run therefore keeps a ledger
file while it works: ``<iteration folder>/cost/<name>.json`` holds one entry per run of that
stage (or of that self-play share): the process it ran in (`process_identity`: host, pid and
a token drawn once per process, so neither a reused pid nor containers that all run as pid 1
merge two processes), its process's CPU clock at its start and so far, and its wall seconds,
rewritten every `DEFAULT_PERIOD_S` seconds and when the run ends. A killed run's entry is
stale by at most that period.

Self-play shares keep ledgers of their own (``selfplay-<worker>.json``), because a share may
run in another process (a Dask worker) whose CPU the stage's process does not see. A share
that ran inside the stage's process, or beside other shares on threads of one process,
measured that whole process: `earlier_cost` counts the union of each process's intervals on
its own CPU clock, so overlapping runs count once. A share also writes its entry after every
game it finishes, so a killed self-play loses at most the games it had in flight.
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from services.atomic_files import atomic_write_text

log = logging.getLogger(__name__)

COST_DIR = "cost"  # in an iteration's folder
DEFAULT_PERIOD_S = 30.0
SHARE_PREFIX = "selfplay-"  # a self-play share's ledger: selfplay-<worker>.json


def process_cpu_seconds() -> float:
    """CPU time of this process (every thread) and of its finished, waited-for children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


_IDENTITY: tuple[int, str] | None = None


def process_identity() -> str:
    """This process: host, pid and a token drawn once per process (a forked child, whose pid
    differs, draws its own)."""
    global _IDENTITY
    pid = os.getpid()
    if _IDENTITY is None or _IDENTITY[0] != pid:
        _IDENTITY = (pid, f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}")
    return _IDENTITY[1]


@dataclass(frozen=True)
class RunCost:
    """One run's cost so far: the process it ran in, that process's CPU clock
    (`process_cpu_seconds`) at the run's start and at its last write, and its wall seconds."""

    process: str
    cpu_start: float
    cpu_end: float
    wall_seconds: float

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_end - self.cpu_start


def read_runs(path: Path) -> list[RunCost]:
    """The runs a ledger file holds; none when it is missing. A ledger that cannot be read
    (a disk fault, a hand edit) is logged and counted as empty: it describes the cost, and
    losing it must not stop the loop."""
    try:
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        return [RunCost(str(r["process"]), float(r["cpu_start"]), float(r["cpu_end"]),
                        float(r["wall_seconds"])) for r in runs]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("cost ledger %s is unreadable (%s): its earlier runs are not counted",
                    path, error)
        return []


class CostLedger:
    """This run's entry in the ledger at `path`, after the entries of the runs before it
    (`earlier`). Use as a context manager: the entry is written every `period_s` seconds
    from a daemon thread, and once more on exit."""

    def __init__(self, path: Path, *, period_s: float = DEFAULT_PERIOD_S) -> None:
        if period_s <= 0:
            raise ValueError(f"the ledger's period must be positive, got {period_s}")
        self.path = Path(path)
        self.period_s = period_s
        self.earlier = read_runs(self.path)
        # a killed run's half-written ledger (one run of a stage or share writes at a time)
        try:
            for leftover in self.path.parent.glob(f".{self.path.name}.*.tmp"):
                leftover.unlink(missing_ok=True)
        except OSError as error:
            log.warning("cost ledger %s: leftovers not removed: %s", self.path, error)
        self._cpu = process_cpu_seconds()
        self._wall = time.perf_counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def now(self) -> RunCost:
        """This run's cost so far."""
        return RunCost(process_identity(), round(self._cpu, 3),
                       round(process_cpu_seconds(), 3),
                       round(time.perf_counter() - self._wall, 3))

    def write(self) -> None:
        """Write the earlier runs and this one's cost so far (atomically; measured under the
        lock, so a later write never puts an older figure over a newer one)."""
        with self._lock:
            runs = [asdict(r) for r in (*self.earlier, self.now())]
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(json.dumps({"runs": runs}, indent=1), self.path)

    def try_write(self) -> None:
        """`write`, an OS error logged: the ledger describes the work, it must not stop it
        (nor hide the error a failing stage raises); the next write tries again."""
        try:
            self.write()
        except OSError as error:
            log.warning("cost ledger %s not written: %s", self.path, error)

    def _beat(self) -> None:
        while not self._stop.wait(self.period_s):
            self.try_write()

    def __enter__(self) -> CostLedger:
        self.try_write()
        self._thread = threading.Thread(target=self._beat, name="cost-ledger", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.try_write()


def stage_ledger(cost_dir: Path, stage: str) -> Path:
    """The ledger file of a stage's own process."""
    return Path(cost_dir) / f"{stage}.json"


def share_ledger(cost_dir: Path, worker: str) -> Path:
    """The ledger file of a self-play share."""
    return Path(cost_dir) / f"{SHARE_PREFIX}{worker}.json"


def earlier_cost(stage_runs: Iterable[RunCost],
                 share_runs: Iterable[RunCost]) -> dict[str, float]:
    """What the runs before this one cost. CPU by process: the union of the intervals its
    runs (stage and shares alike) covered on its CPU clock, so runs that overlapped in one
    process (shares on threads, a share inside the stage's process, whose entry may be a
    period fresher than the stage's) count once, and a process that only played shares (a
    Dask worker) counts its shares. Wall time is the stage's runs' own (its shares ran at the
    same time)."""
    stage_runs = list(stage_runs)
    spans: dict[str, list[tuple[float, float]]] = {}
    for run in (*stage_runs, *share_runs):
        spans.setdefault(run.process, []).append((run.cpu_start, max(run.cpu_start,
                                                                     run.cpu_end)))
    cpu = sum(_union_length(s) for s in spans.values())
    return {"runs": len(stage_runs), "cpu_seconds": round(cpu, 3),
            "wall_seconds": round(sum(r.wall_seconds for r in stage_runs), 3)}


def _union_length(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the intervals `spans`."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


__all__ = ["COST_DIR", "DEFAULT_PERIOD_S", "CostLedger", "RunCost", "earlier_cost",
           "process_cpu_seconds", "process_identity", "read_runs", "share_ledger",
           "stage_ledger"]
