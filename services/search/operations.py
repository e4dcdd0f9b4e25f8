"""Long-running operations of the search service: InferSequence's background runs.

Why: the paper's move-order recipe costs minutes of CPU a position (the 40-stone one several
minutes on a small machine), past what a unary call may be held for (60 s). A client starts an
operation, gets its id at once, polls its progress and fetches the result, as with
google.longrunning operations or a KataGo analysis query id; a client that disconnects loses
nothing, and one that never comes back costs the run and the time-to-live.

`OperationStore` holds them in memory, bounded:

* at most `max_operations` held, running or ended; a new one first drops the expired ones,
  then the ended one that ended first; all held still running: `OperationsBusy` (the servicer
  answers RESOURCE_EXHAUSTED, capacity in use now);
* an ended operation (done, failed, cancelled) is kept `ttl_s` after it ended, then forgotten
  (`OperationNotFound`, NOT_FOUND);
* each runs `work` in a thread of its own, holding `resources` (the service's search slot and
  memory reservation, entered by the caller) until `work` returns: they are released before
  the operation is seen to end, so a client that sees it done can start the next one at once;
* `cancel` asks the work to stop (`Operation.cancelled`, read by the work between its steps)
  and waits for it; `close` cancels every running one (the server stops).

`ForegroundGate` is how an operation yields to the real searches: the servicer enters it
around every GenMove / Analyze / InferSequence search, and an operation's work waits at its
next step while any runs (on 2 cores, a background annealing thread would otherwise take the
interpreter from a real request's search every few milliseconds).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MAX_OPERATIONS = 16
DEFAULT_OPERATION_TTL_S = 3600.0
# how long `cancel` waits for the work to reach its next step (a step is one network call)
CANCEL_WAIT_S = 10.0
# how often a paused operation looks again at its cancel flag and time budget
PAUSE_POLL_S = 0.1


class OperationState(enum.Enum):
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


class OperationCancelled(Exception):
    """Raised by an operation's work when it stopped because it was cancelled."""


class OperationsBusy(RuntimeError):
    """Every held operation still runs and the store holds its most."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the server holds at most {limit} InferSequence operations and all of them are "
            "running: retry later, or cancel one")
        self.limit = limit


class OperationNotFound(LookupError):
    """No operation of that id is held: never started here, expired, or the server restarted."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(
            f"no operation {operation_id!r} on this server (never started here, expired after "
            "its time-to-live, or the server restarted)")
        self.operation_id = operation_id


@dataclass(frozen=True)
class Progress:
    """What an operation's work reports while it runs."""

    steps_done: int = 0
    steps_total: int = 0
    best_geometric_mean: float = 0.0
    calls: int = 0
    boards: int = 0
    paused_s: float = 0.0


@dataclass(frozen=True)
class OperationView:
    """An operation as a client sees it at one instant."""

    operation_id: str
    state: OperationState
    progress: Progress
    elapsed_s: float
    expires_in_s: float  # 0 while running
    result: Any = None  # DONE only
    error: tuple[str, str] | None = None  # FAILED only: (code name, message)


@dataclass
class Operation:
    """One operation: its work's thread, cancel flag and what it reported."""

    operation_id: str
    started: float
    cancelled: threading.Event = field(default_factory=threading.Event)
    state: OperationState = OperationState.RUNNING
    progress: Progress = field(default_factory=Progress)
    ended: float | None = None
    result: Any = None
    error: tuple[str, str] | None = None
    thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def report(self, **changes: Any) -> None:
        """Update the progress (the work's thread calls this between its steps)."""
        with self._lock:
            self.progress = replace(self.progress, **changes)

    def view(self, now: float, ttl_s: float) -> OperationView:
        with self._lock:
            end = self.ended if self.ended is not None else now
            expires = 0.0 if self.ended is None else max(0.0, self.ended + ttl_s - now)
            return OperationView(self.operation_id, self.state, self.progress,
                                 end - self.started, expires, self.result, self.error)


def unexpected_error(exc: BaseException) -> tuple[str, str]:
    """The default description of a work's failure: ("UNKNOWN", repr)."""
    return "UNKNOWN", repr(exc)


class OperationStore:
    """The operations of one service (see the module's docstring)."""

    def __init__(
        self,
        *,
        max_operations: int = DEFAULT_MAX_OPERATIONS,
        ttl_s: float = DEFAULT_OPERATION_TTL_S,
        describe_error: Callable[[BaseException], tuple[str, str]] = unexpected_error,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_operations < 1 or ttl_s < 0:
            raise ValueError(f"need max_operations >= 1 and ttl_s >= 0, got {max_operations} "
                             f"{ttl_s}")
        self.max_operations = max_operations
        self.ttl_s = ttl_s
        self.describe_error = describe_error
        self.clock = clock
        self._held: dict[str, Operation] = {}
        self._lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ queries
    @property
    def running(self) -> int:
        with self._lock:
            return sum(op.state is OperationState.RUNNING for op in self._held.values())

    def __len__(self) -> int:
        with self._lock:
            self._expire(self.clock())
            return len(self._held)

    def get(self, operation_id: str) -> OperationView:
        now = self.clock()
        with self._lock:
            self._expire(now)
            op = self._held.get(operation_id)
        if op is None:
            raise OperationNotFound(operation_id)
        return op.view(now, self.ttl_s)

    # ------------------------------------------------------------------ changes
    def start(self, work: Callable[[Operation], Any],
              resources: ExitStack | None = None) -> OperationView:
        """Run `work(operation)` in a new thread holding `resources` (entered by the caller;
        released here when the work ends, or at once when the operation is refused:
        `OperationsBusy`). The work returns the result, raises `OperationCancelled` when it
        stopped for `operation.cancelled`, or fails (`describe_error` says how)."""
        owned = resources if resources is not None else ExitStack()
        try:
            now = self.clock()
            with self._lock:
                if self._closed:
                    raise RuntimeError("the operation store is closed")
                self._make_room(now)
                op = Operation(uuid.uuid4().hex, now)
                self._held[op.operation_id] = op
        except BaseException:
            owned.close()
            raise
        op.thread = threading.Thread(target=self._run, args=(op, work, owned),
                                     name=f"operation-{op.operation_id[:8]}", daemon=True)
        op.thread.start()
        return op.view(now, self.ttl_s)

    def cancel(self, operation_id: str, wait_s: float = CANCEL_WAIT_S) -> OperationView:
        """Ask the operation to stop and wait (up to `wait_s`) until it has; an ended one is
        left as it is."""
        with self._lock:
            op = self._held.get(operation_id)
        if op is None:
            raise OperationNotFound(operation_id)
        op.cancelled.set()
        if op.thread is not None and op.thread is not threading.current_thread():
            op.thread.join(wait_s)
        return op.view(self.clock(), self.ttl_s)

    def close(self, wait_s: float = CANCEL_WAIT_S) -> None:
        """Cancel every running operation and wait for them (the server is stopping)."""
        with self._lock:
            self._closed = True
            running = [op for op in self._held.values() if op.state is OperationState.RUNNING]
        for op in running:
            op.cancelled.set()
        for op in running:
            if op.thread is not None:
                op.thread.join(wait_s)

    # ------------------------------------------------------------------ internals
    def _run(self, op: Operation, work: Callable[[Operation], Any], owned: ExitStack) -> None:
        state, result, error = OperationState.DONE, None, None
        try:
            with owned:  # the slot and memory go back before the end is seen
                try:
                    result = work(op)
                except OperationCancelled:
                    state = OperationState.CANCELLED
                except Exception as exc:
                    state, error = OperationState.FAILED, self.describe_error(exc)
                    log.info("operation %s failed: %s: %s", op.operation_id, *error)
        finally:
            ended = self.clock()
            with op._lock:
                op.state, op.result, op.error, op.ended = state, result, error, ended

    def _expire(self, now: float) -> None:
        """Drop the ended operations past their time-to-live (under the lock)."""
        for key in [k for k, op in self._held.items()
                    if op.ended is not None and now - op.ended >= self.ttl_s]:
            del self._held[key]

    def _make_room(self, now: float) -> None:
        """Room for one more (under the lock): expired ones first, then the ended one that
        ended first; OperationsBusy when every held one runs."""
        self._expire(now)
        if len(self._held) < self.max_operations:
            return
        ended = [op for op in self._held.values() if op.ended is not None]
        if not ended:
            raise OperationsBusy(self.max_operations)
        oldest = min(ended, key=lambda op: op.ended or 0.0)
        del self._held[oldest.operation_id]


class ForegroundGate:
    """Counts the real searches running; a background operation waits while any does."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._running = 0
        self._cv = threading.Condition()

    @property
    def busy(self) -> bool:
        with self._cv:
            return self._running > 0

    @contextlib.contextmanager
    def search(self) -> Iterator[None]:
        """Around one real search (GenMove, Analyze, InferSequence)."""
        with self._cv:
            self._running += 1
        try:
            yield
        finally:
            with self._cv:
                self._running -= 1
                self._cv.notify_all()

    def wait_clear(self, give_up: Callable[[], bool],
                   poll_s: float = PAUSE_POLL_S) -> float:
        """Wait until no real search runs, or `give_up()` says so (cancelled, out of time);
        returns the seconds waited."""
        started = self.clock()
        with self._cv:
            while self._running > 0 and not give_up():
                self._cv.wait(poll_s)
        return self.clock() - started


__all__ = ["CANCEL_WAIT_S", "DEFAULT_MAX_OPERATIONS", "DEFAULT_OPERATION_TTL_S",
           "ForegroundGate", "Operation", "OperationCancelled", "OperationNotFound",
           "OperationState", "OperationStore", "OperationView", "OperationsBusy", "Progress"]
