"""Cross-request batching (`services.search.batcher`) with in-process evaluators.

The evaluators here answer logits computed from each board, so a caller that received another
caller's rows would be caught. The service's Triton path is covered in test_search_service.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np
import pytest

from services.evaluator import EvaluatorError, EvaluatorTimeout
from services.games.gomoku.rules import GomokuState
from services.search import mcts
from services.search.batcher import BatchingEvaluator, BatchOutput
from services.search.metrics import Metrics
from services.triton.client import TritonUnavailableError
from tests.evaluators import HungEvaluator


@dataclass(frozen=True)
class Out:
    logits: np.ndarray
    model_name: str = "fake"
    model_version: str = "3"


def board_logits(boards: np.ndarray) -> np.ndarray:
    """A deterministic function of each board alone: stones push their neighbours' logits."""
    b = boards.reshape(len(boards), -1).astype(np.float32)
    return (np.roll(b, 1, axis=1) * 0.7 + np.roll(b, -16, axis=1) * 0.3 - b).astype(np.float32)


class BoardEvaluator:
    """Records every call; optional delay and failure."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: list[int] = []
        self.delay_s = delay_s
        self.fail: Exception | None = None
        self.lock = threading.Lock()

    def infer(self, boards: np.ndarray) -> Out:
        with self.lock:
            self.calls.append(len(boards))
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        return Out(board_logits(boards))


def boards_for(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.choice(np.array([0, 1, 2], np.int8), size=(n, 15, 15), p=[0.7, 0.15, 0.15])


@pytest.fixture()
def make_batcher():
    made: list[BatchingEvaluator] = []

    def make(inner, **kwargs) -> BatchingEvaluator:
        b = BatchingEvaluator(inner, **kwargs)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


NEVER_S = 1e6  # a window that never ends within a test: what is sent went for another reason


def answered(batcher: BatchingEvaluator, calls: list[Callable[[], object]]) -> list:
    """Run `calls` in threads at once and return their results; fails (after closing the
    batcher, which releases the callers) if they are not all answered within a minute: with
    a window of NEVER_S, only the rule under test sends their call."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        if wait(futures, timeout=60).not_done:
            batcher.close()
            pytest.fail("the callers were not answered: their call waited for the window")
        return [f.result() for f in futures]


def run_participants(batcher: BatchingEvaluator, sizes: list[int]) -> list[np.ndarray]:
    """One thread per size: register, wait for all, then infer once; returns the logits."""
    barrier = threading.Barrier(len(sizes))

    def one(i: int) -> np.ndarray:
        with batcher.participant():
            barrier.wait(timeout=10)
            return batcher.infer(boards_for(i, sizes[i])).logits

    return answered(batcher, [lambda i=i: one(i) for i in range(len(sizes))])


def test_concurrent_participants_share_one_call_and_get_their_own_rows(make_batcher) -> None:
    inner = BoardEvaluator()
    metrics = Metrics()
    batcher = make_batcher(inner, window_s=NEVER_S, metrics=metrics)
    sizes = [1, 16, 3, 16, 7, 16, 2, 9]
    results = run_participants(batcher, sizes)  # all eight were waiting: the batch went at once
    assert inner.calls == [sum(sizes)]
    for i, logits in enumerate(results):
        np.testing.assert_array_equal(logits, board_logits(boards_for(i, sizes[i])))
    assert metrics.value("movepred_triton_batch_boards_sum") == sum(sizes)
    assert metrics.value("movepred_triton_batch_requests_sum") == len(sizes)
    assert metrics.value("movepred_triton_batch_boards_count") == 1


def test_max_boards_caps_a_call_and_never_splits_a_request(make_batcher) -> None:
    inner = BoardEvaluator()
    batcher = make_batcher(inner, window_s=5.0, max_boards=100)
    sizes = [40] * 6 + [120]  # the 120-board request is larger than a call: it travels alone
    results = run_participants(batcher, sizes)
    assert sum(inner.calls) == sum(sizes)
    assert all(n <= 100 and n % 40 == 0 for n in inner.calls if n != 120)
    assert 120 in inner.calls
    for i, logits in enumerate(results):
        np.testing.assert_array_equal(logits, board_logits(boards_for(i, sizes[i])))


def test_a_lone_caller_pays_no_window(make_batcher) -> None:
    inner = BoardEvaluator()
    batcher = make_batcher(inner, window_s=NEVER_S)

    def alone() -> BatchOutput:
        out = batcher.infer(boards_for(0, 4))  # not a participant: counts as one while waiting
        with batcher.participant():
            batcher.infer(boards_for(1, 4))
        return out

    [out] = answered(batcher, [alone])
    assert out.model_version == "3" and inner.calls == [4, 4]


def test_the_window_bounds_the_wait_for_busy_participants(make_batcher) -> None:
    inner = BoardEvaluator()
    batcher = make_batcher(inner, window_s=0.3)
    registered = threading.Event()
    release = threading.Event()

    def idle_participant() -> None:  # registered, but never sends anything
        with batcher.participant():
            registered.set()
            release.wait(10)

    thread = threading.Thread(target=idle_participant)
    thread.start()
    try:
        assert registered.wait(5)
        with batcher.participant():
            batcher.infer(boards_for(0, 2))
        # answered while the idle participant is still registered: the window ended the wait
        assert thread.is_alive() and not release.is_set()
    finally:
        release.set()
        thread.join()
    assert inner.calls == [2]


def test_an_error_reaches_every_caller_of_the_call_then_it_recovers(make_batcher) -> None:
    inner = BoardEvaluator()
    metrics = Metrics()
    batcher = make_batcher(inner, window_s=5.0, metrics=metrics)
    inner.fail = TritonUnavailableError("Triton is down", "UNAVAILABLE")
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        with batcher.participant():
            barrier.wait(timeout=10)
            try:
                batcher.infer(boards_for(i, 2))
            except TritonUnavailableError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(errors) == 3 and len({id(e) for e in errors}) == 3  # one object per caller
    assert all(e.status == "UNAVAILABLE" and "Triton is down" in str(e) for e in errors)
    assert metrics.value("movepred_triton_errors_total", kind="unavailable") == 1
    inner.fail = None
    assert batcher.infer(boards_for(0, 1)).logits.shape == (1, 225)


def test_a_hung_call_gives_up_at_each_callers_deadline_and_sends_nothing_more(
        make_batcher) -> None:
    """Callers waited (`done.wait()`) with no limit: behind a hung Triton call every caller
    stayed queued past its own deadline, holding its gRPC thread and search slot. Now each
    gives up at its deadline with EvaluatorTimeout, and its boards never go to Triton."""
    inner = HungEvaluator()
    batcher = make_batcher(inner, window_s=0.0)
    outcomes: dict[str, str] = {}

    def in_the_call() -> None:  # the first call has reached (hung) Triton
        waited = time.monotonic()
        while not inner.calls and time.monotonic() - waited < 30:
            time.sleep(0.005)

    def search(name: str, deadline_s: float, first: bool = False) -> None:
        if not first:
            in_the_call()
        with batcher.participant(time.monotonic() + deadline_s):
            try:
                batcher.infer(boards_for(len(outcomes), 2))
                outcomes[name] = "answered"
            except EvaluatorTimeout as exc:
                outcomes[name] = str(exc)

    def predict() -> None:
        in_the_call()
        try:
            batcher.infer(boards_for(9, 1), deadline=time.monotonic() + 0.3)
            outcomes["predict"] = "answered"
        except EvaluatorTimeout as exc:
            outcomes["predict"] = str(exc)

    # the first caller's deadline leaves a loaded machine seconds to send its call
    threads = [threading.Thread(target=search, args=("hung", 5.0, True), daemon=True),
               threading.Thread(target=search, args=("queued", 0.3), daemon=True),
               threading.Thread(target=predict, daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert inner.calls == [2], inner.calls  # the first caller's call, hung
    assert "its boards taken into a call that has not answered" in outcomes["hung"], outcomes
    assert "in the queue behind another call" in outcomes["queued"], outcomes
    assert "in the queue behind another call" in outcomes["predict"], outcomes
    inner.release.set()
    assert batcher.infer(boards_for(0, 1)).logits.shape == (1, 225)  # it recovers
    assert inner.calls == [2, 1]  # the given-up boards were never sent


def test_wrong_output_shape_is_an_evaluator_error(make_batcher) -> None:
    class Short:
        def infer(self, boards: np.ndarray) -> Out:
            return Out(np.zeros((len(boards) - 1, 225), np.float32))

    batcher = make_batcher(Short())
    with pytest.raises(EvaluatorError, match="for 3 boards"):
        batcher.infer(boards_for(0, 3))


@dataclass(frozen=True)
class ValueOut:
    logits: np.ndarray
    values: np.ndarray
    model_name: str = "fake"
    model_version: str = "4"


def board_values(boards: np.ndarray) -> np.ndarray:
    """A value per board from the board alone (NaN for boards with an even stone count, like a
    model without a value head would answer), so mixed-up rows would be caught."""
    stones = (boards.reshape(len(boards), -1) != 0).sum(axis=1)
    return np.where(stones % 2 == 1, np.tanh(stones / 50.0), np.nan).astype(np.float32)


def test_values_are_split_per_caller_like_the_logits(make_batcher) -> None:
    class WithValues(BoardEvaluator):
        def infer(self, boards: np.ndarray) -> ValueOut:
            return ValueOut(super().infer(boards).logits, board_values(boards)[:, None])

    inner = WithValues()
    batcher = make_batcher(inner, window_s=5.0)
    sizes = [3, 1, 16, 5]
    barrier = threading.Barrier(len(sizes))

    def one(i: int):
        with batcher.participant():
            barrier.wait(timeout=10)
            return batcher.infer(boards_for(i, sizes[i]))

    with ThreadPoolExecutor(len(sizes)) as pool:
        outs = list(pool.map(one, range(len(sizes))))
    assert inner.calls == [sum(sizes)]  # one call
    for i, out in enumerate(outs):
        boards = boards_for(i, sizes[i])
        np.testing.assert_array_equal(out.logits, board_logits(boards))
        assert out.values is not None and out.values.shape == (sizes[i],)  # [N, 1] -> [N]
        np.testing.assert_array_equal(out.values, board_values(boards))  # NaN where NaN
        assert out.model_version == "4"
    assert batcher.infer(boards_for(0, 2)).values.shape == (2,)
    plain = make_batcher(BoardEvaluator())  # an evaluator without values: None
    assert plain.infer(boards_for(0, 2)).values is None


def test_wrong_values_shape_is_an_evaluator_error(make_batcher) -> None:
    class Short:
        def infer(self, boards: np.ndarray) -> ValueOut:
            return ValueOut(board_logits(boards), np.zeros(len(boards) + 1, np.float32))

    batcher = make_batcher(Short())
    with pytest.raises(EvaluatorError, match="values"):
        batcher.infer(boards_for(0, 3))


def test_closed_batcher_refuses(make_batcher) -> None:
    batcher = make_batcher(BoardEvaluator())
    batcher.close()
    with pytest.raises(EvaluatorError, match="closed"):
        batcher.infer(boards_for(0, 1))


def test_concurrent_searches_match_sequential_ones_with_fewer_calls(make_batcher) -> None:
    games = [[112], [112, 113], [112, 128, 96], [0], [224, 112], [100, 101, 102], [7], [56, 57]]
    states = [GomokuState.from_moves(m) for m in games]
    sequential = BoardEvaluator()
    expected = [mcts.search(s, sequential, max_visits=96, batch_size=8) for s in states]

    inner = BoardEvaluator(delay_s=0.002)
    batcher = make_batcher(inner, window_s=0.002)

    def one(state: GomokuState) -> mcts.SearchResult:
        with batcher.participant():
            return mcts.search(state, batcher, max_visits=96, batch_size=8)

    with ThreadPoolExecutor(len(states)) as pool:
        got = list(pool.map(one, states))
    for a, b in zip(expected, got, strict=True):  # batching changes nothing about a search
        assert (a.move, a.principal_variation, a.children) == (b.move, b.principal_variation,
                                                               b.children)
        assert b.model_version == "3"
    assert sum(inner.calls) == sum(sequential.calls)  # the same boards...
    assert len(inner.calls) < len(sequential.calls)  # ...in fewer calls
    assert max(inner.calls) > 8


class ThreadRecorder(BoardEvaluator):
    """Also records which thread made each call."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__(delay_s)
        self.threads: list[str] = []

    def infer(self, boards: np.ndarray) -> Out:
        with self.lock:
            self.threads.append(threading.current_thread().name)
        return super().infer(boards)


def test_a_lone_request_is_sent_from_the_callers_thread(make_batcher) -> None:
    """Nothing could join it, so the worker's two hand-overs are skipped; its answer and the
    call count are as through the worker."""
    inner = ThreadRecorder()
    batcher = make_batcher(inner)
    boards = boards_for(5, 3)
    out = batcher.infer(boards)
    np.testing.assert_array_equal(out.logits, board_logits(boards))
    assert inner.threads == [threading.current_thread().name] and batcher.calls == 1
    inner.fail = TritonUnavailableError("down")
    with pytest.raises(TritonUnavailableError, match="down"):
        batcher.infer(boards)
    assert batcher.calls == 2 and batcher.last_model == ("fake", "3")


def test_requests_go_through_the_worker_while_a_search_runs_or_a_call_is_in_flight(
    make_batcher,
) -> None:
    inner = ThreadRecorder(delay_s=0.2)
    batcher = make_batcher(inner, window_s=0.05)
    with batcher.participant():  # a search is running: its next batch may join
        batcher.infer(boards_for(1, 2))
    assert inner.threads == ["movepred-batcher"]
    # a lone request is in flight (from its caller's thread); the ones arriving meanwhile go
    # to the worker, which merges those that wait while its own call is in flight
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(batcher.infer, boards_for(2, 1))
        time.sleep(0.05)
        rest = [pool.submit(batcher.infer, boards_for(3 + i, 1)) for i in range(3)]
        outs = [f.result() for f in [first, *rest]]
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out.logits, board_logits(boards_for(2 + i, 1)))
    assert inner.threads[1].startswith("ThreadPoolExecutor") and inner.calls[1] == 1
    assert set(inner.threads[2:]) == {"movepred-batcher"}
    assert sum(inner.calls[2:]) == 3 and len(inner.calls[2:]) <= 2
