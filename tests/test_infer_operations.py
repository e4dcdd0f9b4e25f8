"""InferSequence as an operation: the store's bounds, time-to-live, cancel and progress, and
StartInferSequence / GetInferSequence / CancelInferSequence over real gRPC and Triton.

First part (unit): `OperationStore` with a clock the test moves and works the test releases:
at most `max_operations` held, an ended one dropped first to make room and all running ones
refusing a new one (`OperationsBusy`); an ended one forgotten after its time-to-live
(`OperationNotFound`); a cancel that waits for the work and leaves a finished one as it is;
the resources released before the end is seen; failures described; `close` cancelling the
running ones; `ForegroundGate` holding a waiting operation while a real search runs.

Second part (skipped without a ``tritonserver`` binary): a service on one Triton (the tiny
Gomoku policy, an untrained Go network); a started operation is polled to DONE and its result
is the in-process inference's (same stones, seed, budget and network); another, long, one
reports growing progress while holding a search slot and is cancelled, giving its slot back;
bad requests are INVALID_ARGUMENT naming `request.<field>`, an unknown id NOT_FOUND, a server
full of running operations RESOURCE_EXHAUSTED with ErrorInfo OPERATIONS_BUSY.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import grpc
import pytest

from services.api import errors
from services.api.movepred.v1 import search_pb2
from services.games.registry import get_game
from services.move_order.annealing import AnnealingParams
from services.move_order.problem import problem_from_stones
from services.search.client import SearchClient
from services.search.operations import (
    ForegroundGate,
    Operation,
    OperationCancelled,
    OperationNotFound,
    OperationsBusy,
    OperationState,
    OperationStore,
)
from services.search.servicer import (
    MAX_OPERATION_TIME_MS,
    InferenceJob,
    WatchedEvaluator,
    infer_sequence_response,
    run_inference,
)
from services.triton.client import PolicyClient
from tests.test_infer_sequence import (
    GO_BLACK,
    GO_SIZE,
    GO_WHITE,
    GOMOKU_BLACK,
    GOMOKU_WHITE,
    SMALL,
    check_order,
    rpc_error,
    triton_url,  # noqa: F401  (the module's Triton fixture)
)
from tests.triton_fixtures import gomoku_and_go_service as search_service


# --------------------------------------------------------------------------- the store
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Gated:
    """A work that reports progress, then waits for `release` (or its cancel flag)."""

    def __init__(self, result: object = "answer") -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.result = result

    def __call__(self, op: Operation) -> object:
        op.report(steps_done=1, steps_total=10, best_geometric_mean=0.25)
        self.started.set()
        while not self.release.wait(0.01):
            if op.cancelled.is_set():
                raise OperationCancelled()
        return self.result


def wait_state(store: OperationStore, op_id: str, state: OperationState) -> None:
    deadline = time.monotonic() + 10
    while store.get(op_id).state is not state:
        assert time.monotonic() < deadline, store.get(op_id)
        time.sleep(0.005)


class Held:
    """A resource the store must release when the work ends."""

    def __init__(self) -> None:
        self.held = False

    def stack(self) -> ExitStack:
        stack = ExitStack()
        self.held = True
        stack.callback(setattr, self, "held", False)
        return stack


def test_an_operation_reports_progress_then_its_result_and_releases_its_resources() -> None:
    clock = Clock()
    store = OperationStore(max_operations=2, ttl_s=60, clock=clock)
    work, resource = Gated(), Held()
    started = store.start(work, resource.stack())
    assert started.state is OperationState.RUNNING and started.expires_in_s == 0
    assert work.started.wait(10)
    clock.now += 5
    running = store.get(started.operation_id)
    assert running.progress.steps_done == 1 and running.progress.steps_total == 10
    assert running.progress.best_geometric_mean == 0.25 and running.elapsed_s == 5
    assert resource.held and store.running == 1
    work.release.set()
    wait_state(store, started.operation_id, OperationState.DONE)
    assert not resource.held  # released before the end was seen
    clock.now += 10
    done = store.get(started.operation_id)
    assert done.result == "answer" and done.error is None
    assert done.elapsed_s == 5 and done.expires_in_s == 50  # ended at 105, kept 60 s
    assert store.running == 0


def test_an_ended_operation_is_forgotten_after_its_time_to_live() -> None:
    clock = Clock()
    store = OperationStore(ttl_s=30, clock=clock)
    work = Gated()
    work.release.set()
    op_id = store.start(work).operation_id
    wait_state(store, op_id, OperationState.DONE)
    clock.now += 29.9
    assert store.get(op_id).state is OperationState.DONE
    clock.now += 0.1
    with pytest.raises(OperationNotFound, match=op_id):
        store.get(op_id)
    assert len(store) == 0
    with pytest.raises(OperationNotFound):
        store.cancel(op_id)


def test_a_full_store_drops_the_first_ended_and_refuses_when_all_run() -> None:
    clock = Clock()
    store = OperationStore(max_operations=2, ttl_s=3600, clock=clock)
    first, second = Gated(), Gated()
    first_id = store.start(first).operation_id
    second_id = store.start(second).operation_id
    resource = Held()
    with pytest.raises(OperationsBusy, match="at most 2"):
        store.start(Gated(), resource.stack())
    assert not resource.held  # a refused operation gives its resources back at once
    second.release.set()
    wait_state(store, second_id, OperationState.DONE)
    clock.now += 1
    first.release.set()
    wait_state(store, first_id, OperationState.DONE)
    third = Gated()
    third_id = store.start(third).operation_id  # makes room: drops `second`, ended first
    with pytest.raises(OperationNotFound):
        store.get(second_id)
    assert store.get(first_id).state is OperationState.DONE
    assert len(store) == 2
    third.release.set()
    wait_state(store, third_id, OperationState.DONE)


def test_cancel_stops_a_running_operation_and_leaves_a_finished_one() -> None:
    store = OperationStore()
    work, resource = Gated(), Held()
    op_id = store.start(work, resource.stack()).operation_id
    assert work.started.wait(10)
    cancelled = store.cancel(op_id)  # waits for the work to stop
    assert cancelled.state is OperationState.CANCELLED and cancelled.result is None
    assert not resource.held
    done = Gated()
    done.release.set()
    done_id = store.start(done).operation_id
    wait_state(store, done_id, OperationState.DONE)
    assert store.cancel(done_id).state is OperationState.DONE
    assert store.get(done_id).result == "answer"


def test_a_failing_work_is_described_and_close_cancels_the_running_ones() -> None:
    def broken(op: Operation) -> None:
        raise ValueError("no network")

    store = OperationStore(describe_error=lambda exc: ("UNAVAILABLE", str(exc)))
    failed_id = store.start(broken).operation_id
    wait_state(store, failed_id, OperationState.FAILED)
    assert store.get(failed_id).error == ("UNAVAILABLE", "no network")
    work = Gated()
    running_id = store.start(work).operation_id
    assert work.started.wait(10)
    store.close()
    assert store.get(running_id).state is OperationState.CANCELLED
    with pytest.raises(RuntimeError, match="closed"):
        store.start(Gated())


def test_an_operation_waits_while_a_real_search_runs() -> None:
    gate = ForegroundGate()
    waited: list[float] = []
    stop = threading.Event()
    with gate.search():
        assert gate.busy
        waiter = threading.Thread(target=lambda: waited.append(gate.wait_clear(stop.is_set)))
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive()  # held while the search runs
    waiter.join(10)
    assert not waiter.is_alive() and waited[0] > 0 and not gate.busy
    with gate.search():  # a give-up ends the wait too (cancelled, out of time)
        stop.set()
        assert gate.wait_clear(stop.is_set) >= 0


# --------------------------------------------------------------------------- Triton up
@pytest.fixture(scope="module")
def served(triton_url: str) -> Iterator[str]:  # noqa: F811
    with search_service(triton_url, max_searches=3, max_operations=2) as service:
        yield f"127.0.0.1:{service.port}"


def test_an_operation_answers_what_the_in_process_inference_does(
        served: str, triton_url: str) -> None:  # noqa: F811
    with SearchClient(served) as client:
        started = client.start_infer_sequence(GOMOKU_BLACK, GOMOKU_WHITE, **SMALL)
        assert started.state == search_pb2.OPERATION_STATE_RUNNING and started.operation_id
        polls: list[search_pb2.InferSequenceOperation] = []
        done = client.wait_infer_sequence(started.operation_id, poll_s=0.05, timeout=120,
                                          on_progress=polls.append)
    assert done.state == search_pb2.OPERATION_STATE_DONE, done.error_message
    assert done.steps_done == done.steps_total == SMALL["iterations"]
    reply = done.result
    assert done.best_geometric_mean == pytest.approx(reply.geometric_mean)
    assert done.evaluator_calls == reply.evaluator_calls and done.boards == reply.boards
    assert done.expires_in_ms > 0 and done.elapsed_ms > 0
    assert all(p.steps_done <= p.steps_total for p in polls)
    check_order(reply, "gomoku", 15, GOMOKU_BLACK, GOMOKU_WHITE)
    # the same inference in this process, on the same served network
    game = get_game("gomoku")
    problem = problem_from_stones(game, [game.parse_move(m, 15) for m in GOMOKU_BLACK],
                                  [game.parse_move(m, 15) for m in GOMOKU_WHITE])
    params = AnnealingParams(iterations=SMALL["iterations"], restarts=SMALL["restarts"],
                             seed=SMALL["seed"])
    policy = PolicyClient(triton_url, "gomoku_policy", timeout_s=30.0)
    try:
        watched = WatchedEvaluator(policy)
        local = infer_sequence_response(
            InferenceJob(problem, params, MAX_OPERATION_TIME_MS),
            run_inference(problem, params, watched, 256), watched)
    finally:
        policy.close()
    assert [m.name for m in reply.moves] == [m.name for m in local.moves]
    assert [m.name for m in reply.greedy_moves] == [m.name for m in local.greedy_moves]
    assert reply.geometric_mean == pytest.approx(local.geometric_mean, rel=1e-6)
    assert list(reply.restart_geometric_means) == pytest.approx(
        list(local.restart_geometric_means), rel=1e-6)
    assert (reply.model_name, reply.iterations) == ("gomoku_policy", SMALL["iterations"])


def test_a_long_operation_reports_progress_and_is_cancelled(triton_url: str) -> None:  # noqa: F811
    budget = dict(iterations=40_000, restarts=2, seed=3)  # far past a unary call's 60 s
    with search_service(triton_url, max_searches=2, max_operations=1) as service:
        target = f"127.0.0.1:{service.port}"
        m = service.metrics
        with SearchClient(target) as client:
            op_id = client.start_infer_sequence(GO_BLACK, GO_WHITE, game="go",
                                                board_size=GO_SIZE, **budget).operation_id
            assert m.value("movepred_searches_active") == 1  # it holds a search slot
            deadline = time.monotonic() + 60
            seen = client.get_infer_sequence(op_id)
            while seen.steps_done < 3:
                assert time.monotonic() < deadline, seen
                assert seen.state == search_pb2.OPERATION_STATE_RUNNING, seen.error_message
                time.sleep(0.05)
                seen = client.get_infer_sequence(op_id)
            later = client.get_infer_sequence(op_id)
            assert later.steps_total == budget["iterations"]
            assert later.steps_done >= seen.steps_done and later.elapsed_ms > seen.elapsed_ms
            assert later.best_geometric_mean > 0 and later.evaluator_calls > 0
            assert not later.HasField("result") and later.expires_in_ms == 0
            # the store holds its one operation, running: another is refused for now
            busy = rpc_error(client.start_infer_sequence, GO_BLACK, GO_WHITE, game="go",
                             board_size=GO_SIZE, **budget)
            assert busy.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, busy.details()
            assert errors.error_reason(busy) == errors.OPERATIONS_BUSY
            cancelled = client.cancel_infer_sequence(op_id)
            assert cancelled.state == search_pb2.OPERATION_STATE_CANCELLED
            assert not cancelled.HasField("result") and cancelled.expires_in_ms > 0
            assert m.value("movepred_searches_active") == 0  # the slot is back
            # an ended operation makes room for the next
            again = client.start_infer_sequence(GOMOKU_BLACK, GOMOKU_WHITE, **SMALL)
            done = client.wait_infer_sequence(again.operation_id, poll_s=0.05, timeout=120)
            assert done.state == search_pb2.OPERATION_STATE_DONE
            with pytest.raises(grpc.RpcError) as gone:
                client.get_infer_sequence(op_id)  # dropped to make room
            assert gone.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(("options", "field"), [
    (dict(max_time_ms=MAX_OPERATION_TIME_MS + 1), "request.max_time_ms"),
    (dict(iterations=200_001), "request.iterations"),
    (dict(neighbour="swap3"), "request.neighbour"),
])
def test_bad_operations_are_invalid_argument_naming_the_request_field(
        served: str, options: dict, field: str) -> None:
    with SearchClient(served) as client:
        error = rpc_error(client.start_infer_sequence, GOMOKU_BLACK, GOMOKU_WHITE, **options)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert [v.field for v in errors.field_violations(error)] == [field]
        off_board = rpc_error(client.start_infer_sequence, [(20, 3)], [], game="go",
                              board_size=GO_SIZE)
        assert [v.field for v in errors.field_violations(off_board)] == ["request.black[0]"]
        unknown = rpc_error(client.get_infer_sequence, "no-such-operation")
        assert unknown.code() == grpc.StatusCode.NOT_FOUND
        assert "no-such-operation" in unknown.details()
