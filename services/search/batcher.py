"""Cross-request batching: concurrent searches (and Predict calls) share Triton requests.

Each search evaluates its leaves in batches of `batch_size` boards; with many concurrent
searches, sending each batch as its own Triton request wastes the network's batch dimension.
`BatchingEvaluator` sits between the searches and the real evaluator (the Triton client), much
like KataGo's analysis engine batches the positions of concurrent queries: callers hand their
boards to `infer` and block; one worker thread takes the first waiting request, gathers the
others that arrive within `window_s` (about 2 ms) or until `max_boards` boards (Triton's
`max_batch_size`, `services.defaults.MAX_BATCH_BOARDS`), sends ONE infer call with all of
them, and gives every caller its own rows of the answer (or the error, to every caller of that
call).

It does not wait needlessly: searches register as *participants* (`with batcher.participant()`)
for their whole run, and a plain `infer` caller counts as one while it waits; when every
participant is already waiting, nobody can add to the batch, so it is sent at once. A lone
search or Predict therefore pays no window; and a request that finds the batcher idle (no
search registered, nothing waiting, no call in flight) is sent from its caller's thread, which
spares it the two thread hand-overs (~0.2 ms of a Predict on the 2-core machine). A request
is never split, so the positions of one Predict always travel in one Triton call; requests
are merged only while the total stays within `max_boards` (one larger than that travels
alone). The network's values (`values`, float32 [N], when the evaluator's answer has them) are
split per caller like the logits.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from services.defaults import MAX_BATCH_BOARDS
from services.evaluator import EvaluatorError, EvaluatorTimeout, PolicyEvaluator, value_rows
from services.search.metrics import Metrics

DEFAULT_WINDOW_S = 0.002
DEFAULT_MAX_BOARDS = MAX_BATCH_BOARDS  # every served model's max_batch_size


@dataclass(frozen=True)
class BatchOutput:
    logits: np.ndarray
    model_name: str
    model_version: str
    values: np.ndarray | None = None  # float32 [N] (NaN: no value head); None: none sent


class _Request:
    __slots__ = ("boards", "done", "error", "output", "transient")

    def __init__(self, boards: np.ndarray, transient: bool) -> None:
        self.boards = boards
        self.transient = transient
        self.done = threading.Event()
        self.output: BatchOutput | None = None
        self.error: BaseException | None = None


class BatchingEvaluator:
    """A `PolicyEvaluator` that merges concurrent `infer` calls into single calls of `inner`."""

    def __init__(
        self,
        inner: PolicyEvaluator,
        *,
        max_boards: int = DEFAULT_MAX_BOARDS,
        window_s: float = DEFAULT_WINDOW_S,
        metrics: Metrics | None = None,
    ) -> None:
        if max_boards < 1 or window_s < 0:
            raise ValueError(f"need max_boards >= 1 and window_s >= 0, got {max_boards} {window_s}")
        self.inner = inner
        self.max_boards = max_boards
        self.window_s = window_s
        self.metrics = metrics
        self.calls = 0  # infer calls made on `inner`
        self.last_model: tuple[str, str] | None = None  # (name, version) of the last answer
        self._cv = threading.Condition()
        self._queue: deque[_Request] = deque()
        self._participants = 0
        self._transient = 0
        self._in_flight = 0  # calls of `inner` under way (the worker's, or a lone caller's)
        self._local = threading.local()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="movepred-batcher", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ callers
    @contextlib.contextmanager
    def participant(self, deadline: float | None = None) -> Iterator[None]:
        """Mark the calling thread as a search that will call `infer` again and again;
        `deadline` (a `time.monotonic()` instant, the outermost one counts) bounds each of its
        waits for an answer (see `infer`)."""
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth == 0:
            self._local.deadline = deadline
            with self._cv:
                self._participants += 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                self._local.deadline = None
                with self._cv:
                    self._participants -= 1
                    self._cv.notify_all()  # the batch being gathered may now be complete

    def infer(self, boards: np.ndarray, deadline: float | None = None) -> BatchOutput:
        """The rows of one (merged) call of `inner` for `boards`. `deadline` (a
        `time.monotonic()` instant; default the participant's): a wait for the answer that
        would pass it gives up with EvaluatorTimeout, its boards left out of any call not yet
        sent. Without it a hung call held every caller queued behind it, one after another,
        past their own deadlines."""
        if deadline is None:
            deadline = getattr(self._local, "deadline", None)
        arr = np.ascontiguousarray(boards)
        if arr.ndim not in (3, 4) or arr.shape[0] < 1:  # Go: compact [N, 4, size, size]
            raise EvaluatorError(
                "boards must be [N, size, size] (Go: [N, 4, size, size]) with N >= 1, got "
                f"{arr.shape}"
            )
        transient = getattr(self._local, "depth", 0) == 0
        with self._cv:
            if self._closed:
                raise EvaluatorError("the batching evaluator is closed")
            # Nobody else is searching, waiting or being served: nothing could join this
            # request, so it is sent from this thread, without the two hand-overs to the worker.
            alone = transient and not (
                self._queue or self._in_flight or self._participants or self._transient
            )
            request = _Request(arr, transient=transient and not alone)
            if alone:
                self._in_flight += 1
            else:
                if request.transient:
                    self._transient += 1
                self._queue.append(request)
                self._cv.notify_all()
        if alone:
            self._run([request])
        waited = time.monotonic()
        if not request.done.wait(None if deadline is None else max(0.0, deadline - waited)):
            self._give_up(request, time.monotonic() - waited)
        if request.error is not None:
            raise copy.copy(request.error)  # one exception object per waiting thread
        assert request.output is not None
        return request.output

    def _give_up(self, request: _Request, waited_s: float) -> None:
        """The caller's deadline passed before its answer: take its boards out of the queue
        (a call already under way finishes for nobody) and raise EvaluatorTimeout, unless the
        answer came just now."""
        with self._cv:
            if request.done.is_set():
                return
            queued = request in self._queue
            if queued:
                self._queue.remove(request)
                if request.transient:
                    self._transient -= 1
                self._cv.notify_all()  # the batch being gathered may now be complete
        where = ("in the queue behind another call" if queued
                 else "its boards taken into a call that has not answered")
        raise EvaluatorTimeout(f"no answer from the policy network within the request's "
                               f"deadline ({waited_s:.2f} s waited {where})")

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the worker; waiting and later callers get EvaluatorError."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout=timeout_s)

    # ------------------------------------------------------------------ worker
    def _gather(self) -> list[_Request] | None:
        """Wait for work, then gather one batch (None once closed and drained), counted in
        flight from here on."""
        with self._cv:
            batch = self._collect()
            if batch:
                self._in_flight += 1
            return batch

    def _collect(self) -> list[_Request] | None:
        """`_gather` under the lock."""
        while not self._queue:
            if self._closed:
                return None
            self._cv.wait()
        if self._closed:
            batch = list(self._queue)
            self._queue.clear()
            error = EvaluatorError("the batching evaluator is closed")
            for r in batch:
                r.error = error
            self._finish(batch)
            return []
        batch: list[_Request] = []
        boards = 0
        end = time.monotonic() + self.window_s
        shape = self._queue[0].boards.shape[1:]
        while True:
            while self._queue:
                nxt = self._queue[0]
                if batch and (
                    boards + len(nxt.boards) > self.max_boards or nxt.boards.shape[1:] != shape
                ):
                    return batch  # full: the rest goes with the next call
                batch.append(self._queue.popleft())
                boards += len(nxt.boards)
            if boards >= self.max_boards or len(batch) >= self._participants + self._transient:
                return batch  # full, or every participant is waiting in this batch
            remaining = end - time.monotonic()
            if remaining <= 0 or self._closed:
                return batch
            self._cv.wait(remaining)

    def _finish(self, batch: list[_Request]) -> None:
        """Wake the callers of `batch` (holding the lock)."""
        for r in batch:
            if r.transient:
                self._transient -= 1
            r.done.set()

    def _loop(self) -> None:
        while True:
            batch = self._gather()
            if batch is None:
                return
            if batch:
                self._run(batch)

    def _run(self, batch: list[_Request]) -> None:
        sizes = [len(r.boards) for r in batch]
        total = sum(sizes)
        error: BaseException | None = None
        started = time.perf_counter()
        try:
            parts = [r.boards for r in batch]
            boards = np.concatenate(parts) if len(parts) > 1 else parts[0]
            out = self.inner.infer(boards)
            logits = np.asarray(out.logits)
            if logits.ndim != 2 or logits.shape[0] != total:
                raise EvaluatorError(f"evaluator returned logits {logits.shape} for {total} boards")
            # evaluators without a value head send none
            values = value_rows(getattr(out, "values", None), total)
            if values is not None:
                values = values.astype(np.float32, copy=False)
            name, version = str(out.model_name), str(out.model_version)
            offset = 0
            for r, n in zip(batch, sizes, strict=True):
                rows = None if values is None else values[offset : offset + n]
                r.output = BatchOutput(logits[offset : offset + n], name, version, rows)
                offset += n
            self.last_model = (name, version)
        except BaseException as exc:  # every caller must wake up, whatever went wrong
            error = exc
            for r in batch:
                r.error = exc
        finally:
            elapsed = time.perf_counter() - started
            if self.metrics is not None:
                self.metrics.triton_call(total, len(batch), elapsed, error)
            with self._cv:
                self.calls += 1
                self._in_flight -= 1
                self._finish(batch)
