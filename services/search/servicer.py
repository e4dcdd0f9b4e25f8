"""gRPC servicer of `movepred.v1.SearchService`: validation, the policy network, the search.

Every request is validated before any inference (bad requests get INVALID_ARGUMENT naming the
field, even while Triton is down). Error mapping:

* `RequestTooLarge` (over a fixed limit: budget, positions, moves, replay work per request)
  -> INVALID_ARGUMENT "<field>: ...", BadRequest reason OVER_LIMIT: the same request never
  passes, so it is not the retryable RESOURCE_EXHAUSTED
* `SearchLimitExceeded` (`max_searches` GenMove/Analyze/InferSequence already running)
  -> RESOURCE_EXHAUSTED, ErrorInfo SEARCH_SLOTS_BUSY,
  at once, never queued: a waiting search would hold an RPC thread that health and Predict need
* `SearchMemoryExceeded` (the running searches' trees would pass `search_memory_bytes`:
  `SearchMemory`) -> RESOURCE_EXHAUSTED, ErrorInfo SEARCH_MEMORY_BUSY, saying what it needs
  and what is held; `SearchNeverFits` (a tree over the whole limit, whatever runs)
  -> INVALID_ARGUMENT naming max_visits
* `InvalidRequest` (and a finished game)          -> INVALID_ARGUMENT "<field>: <message>",
  BadRequest reason INVALID
* bytes that are not the request message (invalid UTF-8 in a string; `decoding`)
  -> INVALID_ARGUMENT "request: not a valid <Method> request: ..."
* `TritonUnavailableError` (refused, down, late)  -> UNAVAILABLE "Triton is unreachable: ..."
* `EvaluatorTimeout` (the network gave no answer before the request's own deadline: a hung
  or overloaded Triton, the call queued behind another; `wait_deadline`) -> DEADLINE_EXCEEDED
  "no answer from the policy network ...", the thread and search slot freed at the deadline
  instead of after the hung call
* `NonFiniteOutputError` (NaN/Inf logits, or a non-finite value next to finite ones), or the
  same refused by policy_model.py inside Triton -> INTERNAL naming the model and version,
  counted in `movepred_nonfinite_outputs_total{model}`: a broken model's answer is never
  turned into a policy or a move
* `TritonRequestError` / unusable evaluator reply -> INTERNAL

The INVALID_ARGUMENT and RESOURCE_EXHAUSTED answers carry google.rpc details
(`services.api.errors`): a BadRequest field violation naming the field, an ErrorInfo reason.

Every call that does not end OK is logged once (logger `services.search.servicer`): INFO for
the client's failures (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, CANCELLED, DEADLINE_EXCEEDED),
WARNING for the service's (UNAVAILABLE, INTERNAL), ERROR with the traceback for an unexpected
exception; `rpc`, `code`, `details`, `model`, `model_version` (where known) and `peer` are
`extra` fields, which `--log-format json` writes out.

Nothing about a failure is cached: every request calls the evaluator afresh, so the service
recovers by itself as soon as Triton answers again. Whether it can answer at all is what its
gRPC health says (`services.search.readiness`, polled from the evaluators).

All inference of one game goes through one `BatchingEvaluator`: the leaves of concurrent
GenMove/Analyze searches and the boards of Predict calls share Triton requests (a Predict's
positions always travel in one). Every served game has a batcher, in front of its own
evaluator (Triton models `gomoku_policy`, `go_policy`, ...); a request of a game the server has
no evaluator for gets INVALID_ARGUMENT ("position.game: GO is not served ...").
The searches ask their game's batcher through a cache of the network's answers
(`services.evaluator_cache.CachingEvaluator`, one `EvalCache` for all games, bounded by
`--eval-cache-mb`, counted in `movepred_eval_cache_boards_total{result}`): a board a search
reaches by another move order, or that an earlier request's search evaluated, is not sent
again. Only finite answers are kept, and a new model version empties it.
GenMove and Analyze continue the cached tree of an earlier request of the same game when there
is one (`TreeCache`), stop between batches when the client cancels or the deadline comes near,
and then store their tree for the next move.

InferSequence (the most likely order of a position's stones, `services.move_order`) is a search
too: it takes a slot, sends its positions through its game's batcher, and its work is bounded
by MAX_INFER_STEPS annealing steps and MAX_INFER_TIME_MS (over them: INVALID_ARGUMENT naming
the limit). The annealing asks between its steps whether to stop (`infer_order`'s
`should_stop`): its time budget or the call's deadline (less the reply's margin) ends it with
the best order found (`stopped_early`), and a cancelled call ends it without an answer.

StartInferSequence / GetInferSequence / CancelInferSequence run the same inference as a
background operation (`services.search.operations`) for budgets past the unary call's 60 s:
validated as InferSequence (fields under `request.`, max_time_ms up to MAX_OPERATION_TIME_MS),
admitted like a search (a search slot and a memory reservation for the inference's caches,
`inference_bytes`, held until it ends; `OperationsBusy` when the store is full of running
ones -> RESOURCE_EXHAUSTED, ErrorInfo OPERATIONS_BUSY), run in a thread of its own that waits
between its steps while a real search runs (`ForegroundGate`). Its calls go to the game's
batcher as plain callers, not participants, so a real search never waits for its boards. An
unknown or expired id is NOT_FOUND. The server's close cancels the running ones.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import numpy as np

from services.api import errors
from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.evaluator import (
    EvaluatorError,
    EvaluatorTimeout,
    NonFiniteOutputError,
    PolicyEvaluator,
    PolicyOutput,
    finite_outputs,
    value_rows,
)
from services.evaluator_cache import CachingEvaluator, EvalCache
from services.games.base import BLACK
from services.games.registry import UnknownGame, default_game, game_for_proto, get_game
from services.move_order.annealing import AnnealingParams, default_iterations, infer_order
from services.move_order.likelihood import (
    DEFAULT_CACHE_SIZE,
    DEFAULT_PREFIX_CACHE_SIZE,
    DEFAULT_TRANSITION_CACHE_SIZE,
    Scored,
)
from services.move_order.problem import Problem, problem_from_stones
from services.search import mcts, validation
from services.search.batcher import DEFAULT_MAX_BOARDS, DEFAULT_WINDOW_S, BatchingEvaluator
from services.search.decoding import decoded
from services.search.metrics import Metrics
from services.search.operations import (
    ForegroundGate,
    Operation,
    OperationCancelled,
    OperationNotFound,
    OperationsBusy,
    OperationState,
    OperationStore,
    OperationView,
)
from services.search.ponder import Ponderer
from services.search.rollout_value import (
    NoRolloutPolicy,
    RolloutSource,
    RolloutValueEvaluator,
    check_lambda,
    tree_key,
)
from services.search.tree_cache import TreeCache
from services.triton.client import TritonRequestError, TritonUnavailableError

T = TypeVar("T")

logger = logging.getLogger(__name__)

# How services/triton/policy_model.py words its refusal of a non-finite answer (the model runs
# inside Triton, which passes the message on): counted like a non-finite answer found here.
NONFINITE_MARKER = "non-finite"
# Failures that are the client's business (a bad or too large request, a cancelled call, an
# expired deadline) are logged at INFO; the others (Triton down, a broken model, a bug) at
# WARNING, or ERROR with the traceback for an unexpected exception.
CLIENT_CODES = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
})

# Calls that only read or stop an operation: they do no search, so a ponder goes on through
# them (a client polling its operation every second would otherwise end every ponder)
POLLING_RPCS = frozenset({"GetInferSequence", "CancelInferSequence"})
# Part of the request deadline kept back for building and sending the GenMove/Analyze reply
# (on a loaded 2-core machine one batch plus the reply took up to ~0.2 s); besides, a search
# does not start a batch that its recent batches say would end after that point.
DEADLINE_MARGIN_FRACTION = 0.2
DEADLINE_MARGIN_MAX_S = 0.5
# what of the request's deadline a wait for the network leaves for the status (`wait_deadline`)
REPLY_ALLOWANCE_FRACTION = 0.05
REPLY_ALLOWANCE_MAX_S = 0.05


State = mcts.State


def move_point(move: int, state: State) -> search_pb2.Point:
    """The proto Point of a move of `state`'s game (the pass: `is_pass`)."""
    return state.game.move_point(move, state.size)


def move_name(move: int, state: State) -> str:
    """A move in its game's notation: "h8" for Gomoku, the GTP vertex ("D4", "pass") for Go."""
    return state.game.move_name(move, state.size)


def _color(color: int) -> search_pb2.Color.ValueType:
    return search_pb2.COLOR_BLACK if color == BLACK else search_pb2.COLOR_WHITE


def top_moves(policy: np.ndarray, legal: np.ndarray, k: int) -> list[int]:
    """The k most probable legal points; ties go to the lower point index."""
    points = np.flatnonzero(legal)
    order = np.argsort(-policy[points], kind="stable")  # stable: ties keep the index order
    return points[order[:k]].tolist()


def search_end(max_time_ms: int, time_remaining: float | None) -> tuple[float, float | None]:
    """(end, deadline) `time.monotonic()` instants for a search: the end of its time budget,
    and the request deadline less a margin for the reply (None without a deadline)."""
    now = time.monotonic()
    end = now + max_time_ms / 1000.0 if max_time_ms > 0 else math.inf
    if time_remaining is None:
        return end, None
    margin = min(DEADLINE_MARGIN_MAX_S, DEADLINE_MARGIN_FRACTION * time_remaining)
    return end, now + max(0.0, time_remaining - margin)


def wait_deadline(time_remaining: float | None) -> float | None:
    """The `time.monotonic()` instant a wait for the network gives up (None: no deadline): the
    request's own deadline less `REPLY_ALLOWANCE_*` for the status to reach the client. Later
    than `search_end`'s deadline on purpose: a batch that runs past the search's soft stop (the
    root's first evaluation included) still finishes and is answered within the reply margin;
    only a call that cannot be answered in time at all is given up, its thread freed."""
    if time_remaining is None:
        return None
    allowance = min(REPLY_ALLOWANCE_MAX_S, REPLY_ALLOWANCE_FRACTION * time_remaining)
    return time.monotonic() + max(0.0, time_remaining - allowance)


class SearchLimitExceeded(RuntimeError):
    """Every search slot is taken (`max_searches` GenMove/Analyze/InferSequence searches
    already run)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the server runs at most {limit} searches (GenMove, Analyze, InferSequence) at "
            "once and all are busy: retry later, or start the server with a larger --max-searches"
        )
        self.limit = limit


class SearchMemoryExceeded(RuntimeError):
    """The running searches' trees hold so much of `search_memory_bytes` that this one's might
    not fit."""

    def __init__(self, message: str, need: int, held: int, limit: int,
                 field: str = "max_visits") -> None:
        super().__init__(message)
        self.need, self.held, self.limit = need, held, limit
        self.field = field  # what a request changes for a search that never fits


class SearchNeverFits(SearchMemoryExceeded):
    """This search's tree alone may pass `search_memory_bytes`: no retry helps, fewer visits
    do (answered INVALID_ARGUMENT naming max_visits)."""


# bytes a search tree holds per visit and policy point (one node a visit, arrays over its
# candidates): measured with tracemalloc at 27 (Gomoku) and 35-36 (Go 9x9, 19x19), rounded up
VISIT_BYTES_PER_POINT = 40


class SearchMemory:
    """Admission by memory: each search reserves what its tree may grow to (its visit cap
    times `VISIT_BYTES_PER_POINT` times the game's policy points) while it runs; one that
    would take the reserved total past `limit_bytes` is refused at once. Without it a 20-byte
    GenMove (19x19, 100,000 visits) could build a tree of over a gigabyte, and the searches
    allowed at once could take the machine's memory together."""

    def __init__(self, limit_bytes: int | None) -> None:
        self.limit_bytes = limit_bytes  # None: no limit
        self.reserved = 0
        self._lock = threading.Lock()

    @staticmethod
    def tree_bytes(state: State, visits: int) -> int:
        return visits * VISIT_BYTES_PER_POINT * mcts.policy_size(state)

    @contextlib.contextmanager
    def reserve(self, state: State, visits: int) -> Iterator[None]:
        need = self.tree_bytes(state, visits)
        with self._lock:
            limit = self.limit_bytes
            if limit is not None and need > limit:
                mb = 1 << 20
                fits = limit // (VISIT_BYTES_PER_POINT * mcts.policy_size(state))
                raise SearchNeverFits(
                    f"this search may need {need / mb:.0f} MB of tree ({visits} visits on "
                    f"{mcts.policy_size(state)} points), more than the server's "
                    f"{limit / mb:.0f} MB (--search-memory-mb) for all searches: ask at most "
                    f"{fits} visits", need, self.reserved, limit)
            if limit is not None and self.reserved + need > limit:
                mb = 1 << 20
                raise SearchMemoryExceeded(
                    f"this search may need {need / mb:.0f} MB of tree ({visits} visits on "
                    f"{mcts.policy_size(state)} points), and the searches running now hold "
                    f"{self.reserved / mb:.0f} MB of the server's {limit / mb:.0f} MB "
                    "(--search-memory-mb): retry later or ask fewer visits",
                    need, self.reserved, limit)
            self.reserved += need
        try:
            yield
        finally:
            with self._lock:
                self.reserved -= need

    @contextlib.contextmanager
    def reserve_bytes(self, need: int, what: str, field: str) -> Iterator[None]:
        """Reserve `need` bytes for something other than a tree (`what`, for the messages;
        `field`, what a request never fitting is told about)."""
        mb = 1 << 20
        with self._lock:
            limit = self.limit_bytes
            if limit is not None and need > limit:
                raise SearchNeverFits(
                    f"{what} may need {need / mb:.0f} MB, more than the server's "
                    f"{limit / mb:.0f} MB (--search-memory-mb) for all searches", need,
                    self.reserved, limit, field)
            if limit is not None and self.reserved + need > limit:
                raise SearchMemoryExceeded(
                    f"{what} may need {need / mb:.0f} MB, and the searches running now hold "
                    f"{self.reserved / mb:.0f} MB of the server's {limit / mb:.0f} MB "
                    "(--search-memory-mb): retry later", need, self.reserved, limit, field)
            self.reserved += need
        try:
            yield
        finally:
            with self._lock:
                self.reserved -= need


@dataclass
class Call:
    """What the servicer learnt about one RPC while handling it, for its log line."""

    rpc: str
    model_name: str = ""
    model_version: str = ""

    def served_by(self, model_name: str, model_version: str) -> None:
        self.model_name, self.model_version = str(model_name), str(model_version)


def nonfinite_model(exc: BaseException) -> str | None:
    """The model named by a non-finite-output failure (found here, or refused by the model
    inside Triton); None for any other failure."""
    if isinstance(exc, NonFiniteOutputError):
        return exc.model_name or "?"
    if isinstance(exc, TritonRequestError) and NONFINITE_MARKER in str(exc):
        found = re.match(r"infer (\S+)", str(exc))  # PolicyClient: "infer <model> ..."
        return found.group(1) if found else "?"
    return None


@dataclass(frozen=True)
class Failure:
    """How a failed call ends: its code, message and google.rpc details."""

    code: grpc.StatusCode
    message: str
    details: tuple[Any, ...] = ()


def _invalid(field: str, message: str, reason: str = errors.INVALID) -> Failure:
    """INVALID_ARGUMENT "<field>: <message>" with the BadRequest violation naming `field`."""
    return Failure(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {message}",
                   (errors.bad_request(field, message, reason),))


def _status(exc: BaseException) -> Failure | None:
    """The gRPC status for a known failure (None: unexpected, let gRPC report UNKNOWN)."""
    if isinstance(exc, SearchNeverFits):
        return _invalid(exc.field, str(exc), errors.OVER_LIMIT)
    if isinstance(exc, OperationsBusy):
        return Failure(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), (errors.error_info(
            errors.OPERATIONS_BUSY, max_operations=exc.limit),))
    if isinstance(exc, OperationNotFound):
        return Failure(grpc.StatusCode.NOT_FOUND, str(exc))
    if isinstance(exc, SearchLimitExceeded):
        return Failure(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), (errors.error_info(
            errors.SEARCH_SLOTS_BUSY, max_searches=exc.limit),))
    if isinstance(exc, SearchMemoryExceeded):
        return Failure(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), (errors.error_info(
            errors.SEARCH_MEMORY_BUSY, needed_bytes=exc.need, held_bytes=exc.held,
            limit_bytes=exc.limit),))
    if isinstance(exc, validation.RequestTooLarge):
        return _invalid(exc.field, exc.message, errors.OVER_LIMIT)
    if isinstance(exc, validation.InvalidRequest):
        return _invalid(exc.field, exc.message)
    if isinstance(exc, NoRolloutPolicy):
        return Failure(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    if isinstance(exc, mcts.GameOverError):
        return _invalid("position", str(exc))
    if isinstance(exc, TritonUnavailableError):
        return Failure(grpc.StatusCode.UNAVAILABLE, f"Triton is unreachable: {exc}")
    if isinstance(exc, EvaluatorTimeout):
        return Failure(grpc.StatusCode.DEADLINE_EXCEEDED, str(exc))
    if isinstance(exc, NonFiniteOutputError):
        return Failure(grpc.StatusCode.INTERNAL, f"policy network failed: {exc}")
    if isinstance(exc, (TritonRequestError, EvaluatorError)):
        return Failure(grpc.StatusCode.INTERNAL, f"policy network failed: {exc}")
    return None


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    """Answers Predict with the network's policy, GenMove and Analyze with a PUCT search."""

    def __init__(
        self,
        evaluator: PolicyEvaluator | Mapping[str, PolicyEvaluator],
        *,
        go_evaluator: PolicyEvaluator | None = None,
        batch_size: int = mcts.DEFAULT_BATCH_SIZE,
        c_puct: float = mcts.DEFAULT_C_PUCT,
        batch_window_s: float = DEFAULT_WINDOW_S,
        max_batch_boards: int = DEFAULT_MAX_BOARDS,
        tree_cache: TreeCache | None = None,
        metrics: Metrics | None = None,
        max_searches: int | None = None,
        search_memory_bytes: int | None = None,
        rollout_source: RolloutSource | None = None,
        ponderer: Ponderer | None = None,
        operations: OperationStore | None = None,
        eval_cache: EvalCache | None = None,
    ) -> None:
        """`evaluator`: the policy of the default game (Gomoku), or a mapping from registered
        game names to their policies (every game the server serves); `go_evaluator`: Go's
        policy (None: Go is not served, unless the mapping names it).

        `max_searches`: GenMove/Analyze searches run at once, at most (more are refused
        with RESOURCE_EXHAUSTED at once, never queued: a queued search would hold an RPC
        thread that health checks and Predict need); None: no limit.

        `search_memory_bytes`: what the trees of the GenMove/Analyze searches running at once
        may hold together (`SearchMemory`); None: no limit.

        `rollout_source`: where the rollout policy of a served version is found, for searches
        asked for `rollout_lambda` > 0 (`services.search.rollout_value`); None: such a search
        is refused with FAILED_PRECONDITION.

        `operations`: where StartInferSequence's operations are held (default: an
        `OperationStore` with its default bounds).

        `eval_cache`: the network answers the searches of every game share (default: an
        `EvalCache` of its default size; one of size 0 turns it off)."""
        if max_searches is not None and max_searches < 1:
            raise ValueError(f"max_searches must be >= 1 (or None), got {max_searches}")
        self.max_searches = max_searches
        self._search_slots = (
            threading.BoundedSemaphore(max_searches) if max_searches is not None else None
        )
        self.evaluators = served_evaluators(evaluator, go_evaluator)
        self.batch_size = batch_size
        self.c_puct = c_puct
        self.metrics = metrics if metrics is not None else Metrics()
        # one batcher per served game: each game's boards have their own shape and model
        self.batchers = {
            name: BatchingEvaluator(
                e, max_boards=max_batch_boards, window_s=batch_window_s, metrics=self.metrics
            )
            for name, e in self.evaluators.items()
        }
        self.eval_cache = eval_cache if eval_cache is not None else EvalCache()
        # what the searches ask: each game's batcher behind the shared cache of answers
        self.search_evaluators = {
            name: CachingEvaluator(b, self.eval_cache, namespace=name,
                                   on_lookup=self.metrics.eval_cache_lookup,
                                   served_model=lambda b=b: b.last_model)
            for name, b in self.batchers.items()
        }
        self.trees = tree_cache if tree_cache is not None else TreeCache()
        self.search_memory = SearchMemory(search_memory_bytes)
        self.rollout_source = rollout_source
        # pondering (GenMove's `ponder`): None, never; its trees go to this service's cache
        self.ponderer = ponderer
        if ponderer is not None and ponderer.trees is not self.trees:
            raise ValueError("the ponderer must keep its trees in the service's tree cache")
        self.operations = operations if operations is not None else OperationStore()
        self.operations.describe_error = operation_error
        self.foreground = ForegroundGate()  # the real searches an operation waits for

    def close(self) -> None:
        """Stop the ponders, the operations and the batching threads (after the server has
        stopped)."""
        if self.ponderer is not None:
            self.ponderer.close()
        self.operations.close()
        for batcher in self.batchers.values():
            batcher.close()

    def batcher_for(self, state: State, field: str = "position") -> BatchingEvaluator:
        """The batcher of `state`'s game; InvalidRequest when this server does not serve it."""
        game = state.game
        batcher = self.batchers.get(game.name)
        if batcher is None:
            raise validation.InvalidRequest(
                f"{field}.game",
                f"{game.title.upper()} is not served by this server (it runs without a "
                f"{game.title} model)",
            )
        return batcher

    # ------------------------------------------------------------------ RPCs
    def Predict(
        self, request: search_pb2.PredictRequest, context: grpc.ServicerContext
    ) -> search_pb2.PredictResponse:
        return self._unary("Predict", context,
                           lambda call: self._predict(decoded(request), call,
                                                       context.time_remaining()))

    def GenMove(
        self, request: search_pb2.GenMoveRequest, context: grpc.ServicerContext
    ) -> search_pb2.GenMoveResponse:
        return self._unary("GenMove", context,
                           lambda call: self._genmove(decoded(request), context, call))

    def Analyze(
        self, request: search_pb2.AnalyzeRequest, context: grpc.ServicerContext
    ) -> Iterator[search_pb2.AnalyzeResponse]:
        # the call is also counted when gRPC drops the generator of a cancelled call
        with self._observed("Analyze", context) as call:
            yield from self._analyze(decoded(request), context, call)

    def InferSequence(
        self, request: search_pb2.InferSequenceRequest, context: grpc.ServicerContext
    ) -> search_pb2.InferSequenceResponse:
        return self._unary(
            "InferSequence", context,
            lambda call: self._infer_sequence(decoded(request), context, call)
        )

    def StartInferSequence(
        self, request: search_pb2.StartInferSequenceRequest, context: grpc.ServicerContext
    ) -> search_pb2.StartInferSequenceResponse:
        return self._unary(
            "StartInferSequence", context,
            lambda call: self._start_infer_sequence(decoded(request), call))

    def GetInferSequence(
        self, request: search_pb2.GetInferSequenceRequest, context: grpc.ServicerContext
    ) -> search_pb2.GetInferSequenceResponse:
        return self._unary(
            "GetInferSequence", context,
            lambda call: search_pb2.GetInferSequenceResponse(operation=operation_message(
                self.operations.get(decoded(request).operation_id))))

    def CancelInferSequence(
        self, request: search_pb2.CancelInferSequenceRequest, context: grpc.ServicerContext
    ) -> search_pb2.CancelInferSequenceResponse:
        return self._unary(
            "CancelInferSequence", context,
            lambda call: search_pb2.CancelInferSequenceResponse(operation=operation_message(
                self.operations.cancel(decoded(request).operation_id))))

    # ------------------------------------------------------------------ plumbing
    def _unary(
        self, rpc: str, context: grpc.ServicerContext, work: Callable[[Call], T]
    ) -> T:
        with self._observed(rpc, context) as call:
            return work(call)

    @contextlib.contextmanager
    def _observed(self, rpc: str, context: grpc.ServicerContext) -> Iterator[Call]:
        """Turn the known failures of the body into gRPC status codes; count the call however
        it ends (GeneratorExit of a dropped stream included: not an Exception, so not mapped),
        and log one line for a call that did not end OK."""
        started = time.perf_counter()
        if self.ponderer is not None and rpc not in POLLING_RPCS:
            self.ponderer.yield_to_request()  # a ponder never delays a real request
        call = Call(rpc)
        code = grpc.StatusCode.OK
        details = ""
        unexpected: BaseException | None = None
        try:
            yield call
        except Exception as exc:
            failure = _status(exc)
            if failure is None:
                code, details, unexpected = grpc.StatusCode.UNKNOWN, repr(exc), exc
                raise
            code, details = failure.code, failure.message
            model = nonfinite_model(exc)
            if model is not None:
                self.metrics.nonfinite_outputs.labels(model).inc()
            if isinstance(exc, NonFiniteOutputError):
                call.served_by(exc.model_name, exc.model_version)
            if failure.details:
                context.abort_with_status(
                    errors.rich_status(failure.code, failure.message, failure.details))
            else:
                context.abort(failure.code, failure.message)
            raise AssertionError("context.abort always raises") from exc  # pragma: no cover
        finally:
            code = self._record(rpc, context, code, started)
            if code != grpc.StatusCode.OK:
                self._log_failure(call, context, code, details, unexpected)

    def _record(
        self, rpc: str, context: grpc.ServicerContext, code: grpc.StatusCode, started: float
    ) -> grpc.StatusCode:
        """Count the call; returns its final code (an OK body of a call that the client
        cancelled, or whose deadline passed, ended CANCELLED / DEADLINE_EXCEEDED)."""
        if code == grpc.StatusCode.OK and not context.is_active():
            remaining = context.time_remaining()
            expired = remaining is not None and remaining <= 0
            code = grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED
        self.metrics.request(rpc, code.name, time.perf_counter() - started)
        return code

    @staticmethod
    def _log_failure(
        call: Call,
        context: grpc.ServicerContext,
        code: grpc.StatusCode,
        details: str,
        unexpected: BaseException | None,
    ) -> None:
        """One line per failed call, its facts as `extra` fields (JSON logs carry them)."""
        if not details:
            details = "the client cancelled the call" if code == grpc.StatusCode.CANCELLED \
                else "the deadline passed" if code == grpc.StatusCode.DEADLINE_EXCEEDED else ""
        try:
            peer = context.peer()
        except Exception:  # a log line must not fail the call
            peer = ""
        if unexpected is not None:
            level = logging.ERROR
        elif code in CLIENT_CODES:
            level = logging.INFO
        else:
            level = logging.WARNING
        version = f" (model {call.model_name} v{call.model_version})" if call.model_version else ""
        logger.log(
            level,
            "%s failed: %s: %s%s",
            call.rpc, code.name, details, version,
            exc_info=unexpected,
            extra={
                "rpc": call.rpc,
                "code": code.name,
                "details": details,
                "model": call.model_name,
                "model_version": call.model_version,
                "peer": peer,
            },
        )

    @contextlib.contextmanager
    def _search_slot(self, foreground: bool = True) -> Iterator[None]:
        """Hold one of the `max_searches` slots for a search, or fail at once when none is
        free (SearchLimitExceeded: RESOURCE_EXHAUSTED, not a queue). A `foreground` search (a
        client's, not a ponder or an operation) makes the operations wait while it runs."""
        slots = self._search_slots
        if slots is not None and not slots.acquire(blocking=False):
            self.metrics.searches_rejected.inc()
            raise SearchLimitExceeded(self.max_searches or 0)
        self.metrics.searches_active.inc()
        try:
            with self.foreground.search() if foreground else contextlib.nullcontext():
                yield
        finally:
            self.metrics.searches_active.dec()
            if slots is not None:
                slots.release()

    def _new_search(self, state: State, reuse: bool, rollout_lambda: float = 0.0
                    ) -> mcts.Search:
        """A search of `state`, continuing a cached tree of the same game whose values were
        mixed the same way (the network alone, or rollouts at `rollout_lambda` by the served
        version's rollout policy) when there is one; with `rollout_lambda` > 0 its leaf
        values mix in rollouts."""
        batcher = self.batcher_for(state)
        evaluator: PolicyEvaluator = self.search_evaluators[state.game.name]
        wrapper = None
        if rollout_lambda > 0:
            wrapper = self._rollout_evaluator(evaluator, state, rollout_lambda)
            evaluator = wrapper
        hit = None
        if reuse and self.trees.enabled:
            served = batcher.last_model
            mix = self._tree_mix(served, rollout_lambda)
            if mix is not None:
                hit = self.trees.take(state, served[1] if served is not None else None, mix)
            self.metrics.tree_reuse.labels("hit" if hit is not None else "miss").inc()
            if hit is not None and wrapper is not None and mix:
                wrapper.continues(str(mix[1]))
        if hit is not None:
            self.metrics.reused_visits.inc(hit.visits)
            return mcts.Search(
                hit.root,
                evaluator,
                c_puct=self.c_puct,
                batch_size=self.batch_size,
                model_name=hit.model_name,
                model_version=hit.model_version,
            )
        return mcts.Search(state, evaluator, c_puct=self.c_puct, batch_size=self.batch_size)

    def _tree_mix(self, served: tuple[str, str] | None, rollout_lambda: float
                  ) -> tuple[object, ...] | None:
        """What a search's leaf values will be mixed with, as the tree cache keys it
        (`rollout_value.tree_key`): () for the network alone; (lambda, the fingerprint of the
        rollout policy of the `served` version) with rollouts; None when that is unknown (no
        version answered yet, or it has no rollout policy): no cached tree fits."""
        if rollout_lambda == 0:
            return ()
        if served is None or self.rollout_source is None:
            return None
        weights = self.rollout_source.weights_for(*served)
        return None if weights is None else (check_lambda(rollout_lambda), weights.fingerprint)

    def _rollout_evaluator(self, evaluator: PolicyEvaluator, state: State,
                           rollout_lambda: float) -> RolloutValueEvaluator:
        """The game's network (`evaluator`) with its leaf values mixed with rollouts
        (FAILED_PRECONDITION when the service has no rollout policies, the game no
        rollouts)."""
        if self.rollout_source is None:
            raise NoRolloutPolicy("", "", "this service has no rollout policies (it was started "
                                  "without a model repository): search with rollout_lambda 0")
        if state.game.rollouts() is None:
            raise validation.InvalidRequest("rollout_lambda",
                                            f"{state.game.title} has no rollouts")
        return RolloutValueEvaluator.for_search(evaluator, state, self.rollout_source,
                                                rollout_lambda)

    def _finish_search(self, state: State, search: mcts.Search, reuse: bool) -> None:
        """Count the playouts and keep the tree for the game's next move (a clean tree: this
        runs only when no batch failed). Called once the answer is built: a cached tree may be
        taken and searched on by another request at once."""
        self.metrics.playouts.inc(search.visits)
        if reuse:
            self.trees.put(state, search.root, search.model_name, search.model_version,
                           mix=tree_key(search.evaluator))

    # ------------------------------------------------------------------ Predict
    def _predict(
        self, request: search_pb2.PredictRequest, call: Call, time_remaining: float | None
    ) -> search_pb2.PredictResponse:
        states, k, batched = validation.predict_batch(request)
        batcher = self.batcher_for(states[0], "positions[0]" if batched else "position")
        boards = np.stack([mcts.network_input(s) for s in states]).astype(np.int8, copy=False)
        # one Triton call (the batcher never splits a request), waited for until the deadline
        out = batcher.infer(boards, wait_deadline(time_remaining))
        call.served_by(out.model_name, out.model_version)
        logits = np.asarray(out.logits, dtype=np.float32)
        points = mcts.policy_size(states[0])
        if logits.shape != (len(states), points):
            raise EvaluatorError(f"evaluator returned logits of shape {logits.shape}")
        values = predict_values(
            finite_outputs(logits, getattr(out, "values", None), str(out.model_name),
                                str(out.model_version)),
            len(states),
        )
        fields = [position_policy(s, row, k) for s, row in zip(states, logits, strict=True)]
        # `position` is answered twice: in the top-level fields and as results[0]
        single = {} if batched else {**fields[0], "value": values[0]}
        return search_pb2.PredictResponse(
            model_name=str(out.model_name),
            model_version=str(out.model_version),
            results=[
                search_pb2.PositionPolicy(**f, value=v)
                for f, v in zip(fields, values, strict=True)
            ],
            **single,
        )

    # ------------------------------------------------------------------ GenMove
    def _genmove(
        self, request: search_pb2.GenMoveRequest, context: grpc.ServicerContext, call: Call
    ) -> search_pb2.GenMoveResponse:
        state, budget = validation.genmove_request(request)
        k = validation.max_candidates(request.max_candidates, points=mcts.policy_size(state))
        batcher = self.batcher_for(state)
        with self._search_slot(), self.search_memory.reserve(state, budget.visit_cap):
            remaining = context.time_remaining()
            end, deadline = search_end(budget.max_time_ms, remaining)
            rollout_lambda = validation.rollout_lambda(request)
            reuse = not request.disable_tree_reuse
            search = self._new_search(state, reuse, rollout_lambda)
            try:
                with batcher.participant(wait_deadline(remaining)):
                    search.run(budget.visit_cap, end, lambda: not context.is_active(), deadline)
            finally:
                if search.model_version:
                    call.served_by(search.model_name, search.model_version)
            # the answer is read off the tree before the cache holds it: from then on another
            # request may take the tree and search on in it
            result = search.result(top_children=k)
            response = genmove_response(state, result, k)
            ponder = self._ponder_search(state, search, result.move) \
                if request.ponder and reuse else None
            if ponder is None:
                self._finish_search(state, search, reuse)
            else:
                self.metrics.playouts.inc(search.visits)
        if ponder is not None:
            response.pondering = self._start_ponder(*ponder, batcher)
            if not response.pondering:  # keep the tree for the next move all the same
                self.trees.put(state, search.root, search.model_name, search.model_version,
                               mix=tree_key(search.evaluator))
        return response

    def _ponder_search(self, state: State, search: mcts.Search, move: int
                       ) -> tuple[State, mcts.Search] | None:
        """The search a ponder continues after `search` chose `move`: the chosen move's
        subtree (with its visits), or a fresh search of the position after it; None when
        this service does not ponder or the move ends the game. The rest of `search`'s tree
        is dropped: the opponent's reply will be asked below the chosen move."""
        if self.ponderer is None:
            return None
        after = state.play(move)
        if after.is_over:
            return None
        child = search.root.child(move)
        root = child if child is not None and child.priors is not None and \
            not child.terminal else after
        return after, mcts.Search(root, search.evaluator, c_puct=self.c_puct,
                                  batch_size=self.batch_size, model_name=search.model_name,
                                  model_version=search.model_version)

    def _start_ponder(self, state: State, search: mcts.Search,
                      batcher: BatchingEvaluator) -> bool:
        """Hand `search` to the ponderer with a search slot and memory of its own; False (no
        ponder) when none is free or a ponder already runs."""
        assert self.ponderer is not None
        resources = contextlib.ExitStack()
        try:
            resources.enter_context(self._search_slot(foreground=False))
            resources.enter_context(self.search_memory.reserve(
                state, search.total_visits + self.ponderer.max_visits))
        except (SearchLimitExceeded, SearchMemoryExceeded):
            resources.close()
            return False
        return self.ponderer.start(state, search, resources, batcher.participant)

    # ------------------------------------------------------------------ Analyze
    def _analyze(
        self, request: search_pb2.AnalyzeRequest, context: grpc.ServicerContext, call: Call
    ) -> Iterator[search_pb2.AnalyzeResponse]:
        a = validation.analyze_request(request)
        self.batcher_for(a.state)  # an unserved game: INVALID_ARGUMENT, not a search slot
        with self._search_slot(), self.search_memory.reserve(a.state, a.budget.visit_cap):
            yield from self._analysis(a, request, context, call)

    def _analysis(
        self,
        a: validation.Analysis,
        request: search_pb2.AnalyzeRequest,
        context: grpc.ServicerContext,
        call: Call,
    ) -> Iterator[search_pb2.AnalyzeResponse]:
        remaining = context.time_remaining()
        end, deadline = search_end(a.budget.max_time_ms, remaining)
        waits_end = wait_deadline(remaining)
        stopped = threading.Event()
        context.add_callback(stopped.set)  # runs when the RPC ends, e.g. cancelled by the client

        def should_stop() -> bool:
            return stopped.is_set() or not context.is_active()

        rollout_lambda = validation.rollout_lambda(request)
        reuse = not request.disable_tree_reuse
        search = self._new_search(a.state, reuse, rollout_lambda)
        batcher = self.batcher_for(a.state)
        every = a.report_every
        with batcher.participant(waits_end):
            search.start()
        call.served_by(search.model_name, search.model_version)
        next_report = (search.total_visits // every + 1) * every
        cap = a.budget.visit_cap
        batches = search.batches(cap, end, should_stop, deadline)
        while True:
            # registered with the batcher only while searching, never while a report is sent;
            # the report at the end of the budget is the final one, sent below
            report = None
            with batcher.participant(waits_end):
                for total in batches:
                    if total >= next_report and not total >= cap:
                        next_report = (total // every + 1) * every
                        report = analyze_response(a.state, search, a.candidates, final=False)
                        break
            if report is None:
                break
            yield report
        final = analyze_response(a.state, search, a.candidates, final=True)  # before the cache
        if request.ponder and reuse and self.ponderer is not None and not should_stop():
            self.metrics.playouts.inc(search.visits)
            final.pondering = self._start_ponder(a.state, search, batcher)
            if not final.pondering:  # keep the tree for the next request all the same
                self.trees.put(a.state, search.root, search.model_name, search.model_version,
                               mix=tree_key(search.evaluator))
        else:
            self._finish_search(a.state, search, reuse)
        if not should_stop():
            yield final

    # ------------------------------------------------------------------ InferSequence
    def _infer_sequence(
        self, request: search_pb2.InferSequenceRequest, context: grpc.ServicerContext,
        call: Call
    ) -> search_pb2.InferSequenceResponse:
        job = infer_sequence_request(request)
        with top_level_fields("request."):
            batcher = self.batcher_for(job.problem.start, "request")
        with self._search_slot():
            remaining = context.time_remaining()
            end, deadline = search_end(job.max_time_ms, remaining)
            watched = WatchedEvaluator(batcher)
            stop = StopWhen(end if deadline is None else min(end, deadline),
                            lambda: not context.is_active())
            try:
                with batcher.participant(wait_deadline(remaining)):
                    inferred = run_inference(job.problem, job.params, watched,
                                             batcher.max_boards, stop)
            finally:
                if watched.model is not None:
                    call.served_by(*watched.model)
            if not context.is_active():
                return search_pb2.InferSequenceResponse()  # nobody reads it: the call ended
        return infer_sequence_response(job, inferred, watched)

    def _start_infer_sequence(self, request: search_pb2.StartInferSequenceRequest,
                              call: Call) -> search_pb2.StartInferSequenceResponse:
        with request_fields("request."):
            job = infer_sequence_request(request.request, MAX_OPERATION_TIME_MS)
            with top_level_fields("request."):
                batcher = self.batcher_for(job.problem.start, "request")
        resources = contextlib.ExitStack()
        try:
            resources.enter_context(self._search_slot(foreground=False))
            resources.enter_context(self.search_memory.reserve_bytes(
                inference_bytes(job.problem.game.policy_size(job.problem.size)),
                "an InferSequence operation's caches", "request"))
        except BaseException:
            resources.close()
            raise
        view = self.operations.start(
            lambda op: self._run_operation(op, job, batcher), resources)
        logger.info("InferSequence operation %s started: %d stones, %d x %d steps",
                    view.operation_id, job.problem.n, job.params.restarts,
                    job.params.iterations)
        return search_pb2.StartInferSequenceResponse(operation=operation_message(view))

    def _run_operation(self, op: Operation, job: InferenceJob, batcher: BatchingEvaluator
                       ) -> search_pb2.InferSequenceResponse:
        """The inference of one operation, in its thread: stops between steps when cancelled
        or out of time, waits while real searches run, reports its progress."""
        watched = WatchedEvaluator(batcher)  # a plain caller of the batcher, never waited for
        end = time.monotonic() + job.max_time_ms / 1000.0
        params = job.params
        total = params.iterations if params.lockstep else params.iterations * params.restarts
        progress = {"steps_done": 0, "best": 0.0, "paused_s": 0.0}

        def give_up() -> bool:
            return op.cancelled.is_set() or time.monotonic() >= end

        def report() -> None:
            op.report(steps_done=progress["steps_done"], steps_total=total,
                      best_geometric_mean=progress["best"], calls=watched.calls,
                      boards=watched.boards, paused_s=progress["paused_s"])

        def improved(order: Scored) -> None:
            progress["best"] = max(progress["best"], order.geometric_mean)

        asked = [0]

        def should_stop() -> bool:
            progress["steps_done"] = min(total, asked[0])
            asked[0] += 1
            report()
            if self.foreground.busy:
                progress["paused_s"] += self.foreground.wait_clear(give_up)
            return give_up()

        report()
        result = infer_order(job.problem, watched, params, max_boards=batcher.max_boards,
                             on_accept=improved, should_stop=should_stop, on_greedy=improved)
        restarts = () if result.stopped else tuple(r.best for r in result.restarts)
        inferred = Inference(result.best, result.greedy, restarts, result.iterations,
                             watched.calls, watched.boards, stopped_early=result.stopped)
        improved(result.best)
        if not result.stopped:
            progress["steps_done"] = total
        report()
        if result.stopped and op.cancelled.is_set():
            raise OperationCancelled()
        return infer_sequence_response(job, inferred, watched)


def operation_error(exc: BaseException) -> tuple[str, str]:
    """How an operation's failure is reported: the status code name and message the unary
    InferSequence would have ended with."""
    failure = _status(exc)
    if failure is None:
        return grpc.StatusCode.UNKNOWN.name, repr(exc)
    return failure.code.name, failure.message


_OPERATION_STATES = {
    OperationState.RUNNING: search_pb2.OPERATION_STATE_RUNNING,
    OperationState.DONE: search_pb2.OPERATION_STATE_DONE,
    OperationState.CANCELLED: search_pb2.OPERATION_STATE_CANCELLED,
    OperationState.FAILED: search_pb2.OPERATION_STATE_FAILED,
}


def operation_message(view: OperationView) -> search_pb2.InferSequenceOperation:
    p = view.progress
    message = search_pb2.InferSequenceOperation(
        operation_id=view.operation_id, state=_OPERATION_STATES[view.state],
        steps_done=p.steps_done, steps_total=p.steps_total,
        best_geometric_mean=p.best_geometric_mean, evaluator_calls=p.calls, boards=p.boards,
        elapsed_ms=view.elapsed_s * 1000.0, paused_ms=p.paused_s * 1000.0,
        expires_in_ms=view.expires_in_s * 1000.0)
    if view.state is OperationState.DONE and view.result is not None:
        message.result.CopyFrom(view.result)
    if view.error is not None:
        message.error_code, message.error_message = view.error
    return message


def inference_bytes(policy_points: int) -> int:
    """What an inference's caches may hold at most (`PrefixScorer`'s bounds): float32 logits
    rows by input, masked float64 policies by move sequence and by input with their keys and
    positions (~1 KB each), positions by transition: an estimate from the bounds, reserved
    against --search-memory-mb while an operation runs (about 180 MB on 19x19)."""
    position = 1024
    return (DEFAULT_CACHE_SIZE * policy_points * 4
            + DEFAULT_PREFIX_CACHE_SIZE * 2 * (policy_points * 8 + position)
            + DEFAULT_TRANSITION_CACHE_SIZE * position)


@contextlib.contextmanager
def request_fields(prefix: str) -> Iterator[None]:
    """InvalidRequest raised inside with `prefix` put before its field: the inference of a
    StartInferSequence is its field `request`."""
    try:
        yield
    except validation.InvalidRequest as exc:
        raise type(exc)(prefix + exc.field, exc.message) from None


def served_evaluators(
    evaluator: PolicyEvaluator | Mapping[str, PolicyEvaluator],
    go_evaluator: PolicyEvaluator | None = None,
) -> dict[str, PolicyEvaluator]:
    """Registered game name -> evaluator of every game served (see `SearchServicer`);
    ValueError for a name that no game is registered under."""
    single = not isinstance(evaluator, Mapping)
    served = {default_game().name: evaluator} if single else dict(evaluator)
    if go_evaluator is not None:
        served[game_for_proto(search_pb2.GAME_GO).name] = go_evaluator
    for name in served:
        try:
            get_game(name)
        except UnknownGame as exc:
            raise ValueError(str(exc)) from None
    return served


def predict_values(values: np.ndarray | None, n: int) -> list[float | None]:
    """The network's value of each of `n` positions for its side to move, None where there is
    none (no value output, or NaN: a network without a value head)."""
    rows = value_rows(values, n)
    if rows is None:
        return [None] * n
    return [float(x) if np.isfinite(x) else None for x in rows.astype(np.float32, copy=False)]


def position_policy(state: State, logits: np.ndarray, k: int) -> dict[str, Any]:
    """The masked policy, top moves and side to move of one position, as the fields of a
    `PositionPolicy` (which a single-position `PredictResponse` repeats at its top level)."""
    legal = state.legal_mask()
    policy = mcts.masked_softmax(logits, legal)
    return {
        "policy": policy.astype(np.float32).tolist(),
        "top_moves": [
            search_pb2.MoveProbability(
                point=move_point(p, state),
                name=move_name(p, state),
                probability=float(policy[p]),
            )
            for p in top_moves(policy, legal, k)
        ],
        "to_move": _color(state.to_move),
    }


def move_candidates(children: tuple[mcts.ChildStats, ...], state: State) -> list:
    return [
        search_pb2.MoveCandidate(
            move=move_point(c.move, state),
            name=move_name(c.move, state),
            visits=c.visits,
            value=c.value,
            prior=c.prior,
            principal_variation=[move_point(p, state) for p in c.principal_variation],
            principal_variation_names=[move_name(p, state) for p in c.principal_variation],
        )
        for c in children
    ]


def genmove_response(
    state: State, result: mcts.SearchResult, candidates: int = validation.DEFAULT_CANDIDATES
) -> search_pb2.GenMoveResponse:
    return search_pb2.GenMoveResponse(
        move=move_point(result.move, state),
        name=move_name(result.move, state),
        color=_color(state.to_move),
        visits=result.visits,
        total_visits=result.total_visits,
        prior=result.prior,
        value=result.value,
        principal_variation=[move_point(p, state) for p in result.principal_variation],
        principal_variation_names=[move_name(p, state) for p in result.principal_variation],
        model_name=result.model_name,
        model_version=result.model_version,
        reused_visits=result.reused_visits,
        candidates=move_candidates(result.children[:candidates], state),
    )


def analyze_response(
    state: State, search: mcts.Search, candidates: int, final: bool
) -> search_pb2.AnalyzeResponse:
    r = search.result(top_children=candidates)
    return search_pb2.AnalyzeResponse(
        candidates=move_candidates(r.children, state),
        total_visits=r.total_visits,
        reused_visits=r.reused_visits,
        value=r.value,
        to_move=_color(state.to_move),
        final=final,
        elapsed_ms=r.elapsed_s * 1000.0,
        model_name=r.model_name,
        model_version=r.model_version,
    )


# ---------------------------------------------------------------------- InferSequence
# An inference is a search: it holds a search slot, and its work is bounded so that one request
# cannot hold the service. restarts * iterations (evaluator calls, each of at most `stones`
# boards) is at most MAX_INFER_STEPS: the paper's recipe for 40 stones (5 restarts of 20,000) is
# 100,000. Unset iterations are the paper's default, lowered to fit the limit.
DEFAULT_INFER_RESTARTS = 5
MAX_INFER_RESTARTS = 64
MAX_INFER_STEPS = 200_000
# And its time: max_time_ms 0 means this much (an inference stops with its best order so far).
MAX_INFER_TIME_MS = validation.MAX_TIME_MS
# The same for an operation (StartInferSequence): the paper's 40-stone recipe costs 150-420
# CPU s a position on a 2-core machine, more while real searches make it wait.
MAX_OPERATION_TIME_MS = 3_600_000


@dataclass(frozen=True)
class InferenceJob:
    """A validated InferSequence request."""

    problem: Problem
    params: AnnealingParams
    max_time_ms: int


@dataclass(frozen=True)
class Inference:
    """What the annealing found: the best order, the greedy one, each restart's best (none
    when the time budget, the deadline or a cancellation cut the annealing short:
    `stopped_early`), the evaluator's work."""

    best: Scored
    greedy: Scored
    restarts: tuple[Scored, ...]
    iterations: int
    calls: int
    boards: int
    stopped_early: bool


class StopWhen:
    """An inference's `should_stop`: True once the call has ended (`cancelled()`: the client
    cancelled it, or its deadline passed) or `end` (a `time.monotonic()` instant: the time
    budget, or the deadline less the reply's margin) has come. Remembers whether it said so."""

    def __init__(self, end: float, cancelled: Callable[[], bool]) -> None:
        self.end = end
        self.cancelled = cancelled
        self.stopped = False

    def __call__(self) -> bool:
        if not self.stopped:
            self.stopped = self.cancelled() or time.monotonic() >= self.end
        return self.stopped


class WatchedEvaluator:
    """The batcher, counting its calls and boards and remembering the model that answered."""

    def __init__(self, inner: PolicyEvaluator) -> None:
        self.inner = inner
        self.calls = 0
        self.boards = 0
        self.model: tuple[str, str] | None = None

    def infer(self, boards: np.ndarray) -> PolicyOutput:
        out = self.inner.infer(boards)
        self.calls += 1
        self.boards += len(boards)
        self.model = (str(out.model_name), str(out.model_version))
        return out


@contextlib.contextmanager
def top_level_fields(prefix: str) -> Iterator[None]:
    """InvalidRequest raised inside with `prefix` taken off its field: InferSequence's game,
    rule and board size are fields of the request itself, not of a `position`."""
    try:
        yield
    except validation.InvalidRequest as exc:
        if not exc.field.startswith(prefix):
            raise
        raise type(exc)(exc.field.removeprefix(prefix), exc.message) from None


def _stone_points(points: Any, size: int, field: str) -> list[int]:
    """Flat points of request stones, each on the `size` board and not a pass."""
    flat = []
    for i, p in enumerate(points):
        if p.is_pass:
            raise validation.InvalidRequest(f"{field}[{i}]", "a pass is not a stone")
        if not (0 <= p.x < size and 0 <= p.y < size):
            raise validation.InvalidRequest(
                f"{field}[{i}]", f"({p.x}, {p.y}) is off the {size}x{size} board")
        flat.append(p.y * size + p.x)
    return flat


def infer_sequence_request(request: search_pb2.InferSequenceRequest,
                           max_time_ms: int = MAX_INFER_TIME_MS) -> InferenceJob:
    """An InferSequence request validated (before any inference): InvalidRequest naming the
    field for a game or rule not known, stones off the board, given twice or in counts no
    alternation reaches, and for a budget over the limits (which it names); `max_time_ms` is
    the time limit (the unary call's, or an operation's)."""
    with top_level_fields("request."):
        game = validation.game_of(search_pb2.Position(game=request.game,
                                                      game_name=request.game_name), "request")
    if request.iterations < 0:
        raise validation.InvalidRequest("iterations", f"must be >= 0, got {request.iterations}")
    if not 0 <= request.restarts <= MAX_INFER_RESTARTS:
        raise validation.InvalidRequest(
            "restarts", f"must be in 0..{MAX_INFER_RESTARTS}, got {request.restarts}")
    if not 0 <= request.max_time_ms <= max_time_ms:
        raise validation.InvalidRequest(
            "max_time_ms", f"must be in 0..{max_time_ms}, got {request.max_time_ms}")
    size = game.request_size(request.board_size)
    with top_level_fields("position."):
        black = _stone_points(request.black, size, "black")
        white = _stone_points(request.white, size, "white")
        problem = problem_from_stones(game, black, white, request.board_size, request.rule)
    restarts = request.restarts or DEFAULT_INFER_RESTARTS
    iterations = request.iterations or min(default_iterations(problem.n),
                                           MAX_INFER_STEPS // restarts)
    if restarts * iterations > MAX_INFER_STEPS:
        raise validation.InvalidRequest(
            "iterations", f"restarts * iterations must be at most {MAX_INFER_STEPS}, got "
            f"{restarts} * {iterations} = {restarts * iterations}")
    try:
        params = AnnealingParams(iterations=iterations, restarts=restarts,
                                 neighbour=request.neighbour or "mix",
                                 init=request.init or "greedy", seed=request.seed,
                                 tempering=request.tempering, polish=request.polish)
    except ValueError as exc:  # the one of the two named first in its message
        text = str(exc)
        field = "neighbour" if text.startswith("unknown neighbour") else "init"
        raise validation.InvalidRequest(field, text) from None
    return InferenceJob(problem, params, request.max_time_ms or max_time_ms)


def run_inference(problem: Problem, params: AnnealingParams, evaluator: WatchedEvaluator,
                  max_boards: int, should_stop: Callable[[], bool] | None = None) -> Inference:
    """`infer_order` on `evaluator`, stopped between annealing steps when `should_stop` says
    so: the answer is then the best order so far, or the greedy order (which always completes:
    it is every answer's floor) when that is better; the restarts did not finish, so none is
    reported."""
    result = infer_order(problem, evaluator, params, max_boards=max_boards,
                         should_stop=should_stop)
    restarts = () if result.stopped else tuple(r.best for r in result.restarts)
    return Inference(result.best, result.greedy, restarts, result.iterations, evaluator.calls,
                     evaluator.boards, stopped_early=result.stopped)


def inferred_moves(problem: Problem, order: Scored) -> list[search_pb2.InferredMove]:
    size = problem.size
    return [
        search_pb2.InferredMove(
            point=problem.game.move_point(m, size),
            name=problem.name(m),
            color=_color(problem.color_at(i)),
            probability=float(order.factors[i]),
        )
        for i, m in enumerate(order.order)
    ]


def infer_sequence_response(job: InferenceJob, inferred: Inference,
                            watched: WatchedEvaluator) -> search_pb2.InferSequenceResponse:
    means = [s.geometric_mean for s in inferred.restarts]
    spread = dict(restarts_min=min(means), restarts_max=max(means),
                  restarts_std=float(np.std(means))) if means else {}
    name, version = watched.model or ("", "")
    return search_pb2.InferSequenceResponse(
        moves=inferred_moves(job.problem, inferred.best),
        geometric_mean=inferred.best.geometric_mean,
        greedy_moves=inferred_moves(job.problem, inferred.greedy),
        greedy_geometric_mean=inferred.greedy.geometric_mean,
        restart_geometric_means=means,
        **spread,
        iterations=inferred.iterations,
        evaluator_calls=inferred.calls,
        boards=inferred.boards,
        stopped_early=inferred.stopped_early,
        model_name=name,
        model_version=version,
    )
