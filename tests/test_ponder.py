"""Pondering: a background search of the position the opponent faces, kept for the next request,
yielding to real requests, bounded by its budget and the service's slots."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

from services.games.registry import get_game
from services.search import mcts
from services.search.ponder import Ponderer
from services.search.tree_cache import TreeCache
from tests.evaluators import Output, UniformEvaluator

GOMOKU = get_game("gomoku")
CENTRE = 7 * 15 + 7


class GatedEvaluator(UniformEvaluator):
    """Answers that prefer the lower points steeply (so visits go deep); after `free` calls
    each call waits for `gate` (a slow network), and `fail` makes every call raise (the
    inference server went away)."""

    def __init__(self, free: int = 10**9) -> None:
        self.calls = 0
        self.free = free
        self.gate = threading.Event()
        self.fail = False
        self.waiting = threading.Event()

    def infer(self, boards: np.ndarray) -> Output:
        self.calls += 1
        if self.fail:
            raise ConnectionError("inference server unavailable")
        if self.calls > self.free:
            self.waiting.set()
            self.gate.wait(30)
        n, size = boards.shape[0], boards.shape[-1]
        ramp = -0.5 * np.arange(size * size, dtype=np.float32)
        return Output(np.tile(ramp, (n, 1)))


class Slot:
    """A search slot as the servicer holds one: a semaphore, entered before the ponder."""

    def __init__(self) -> None:
        self.semaphore = threading.BoundedSemaphore(1)

    @contextlib.contextmanager
    def held(self):
        assert self.semaphore.acquire(blocking=False)
        try:
            yield
        finally:
            self.semaphore.release()

    @property
    def free(self) -> bool:
        if self.semaphore.acquire(blocking=False):
            self.semaphore.release()
            return True
        return False


def _after_our_move(evaluator) -> tuple[mcts.State, mcts.Search]:
    """The engine answered CENTRE's reply; the ponder continues under the chosen move."""
    state = GOMOKU.start().play(CENTRE)
    search = mcts.Search(state, evaluator, batch_size=8)
    search.run(64)
    move = search.result().move
    child = search.root.child(move)
    assert child is not None and child.priors is not None
    return state.play(move), mcts.Search(child, evaluator, batch_size=8)


def _wait(ponderer: Ponderer) -> None:
    for _ in range(3000):
        if ponderer.active == 0:
            return
        threading.Event().wait(0.01)
    raise AssertionError("the ponder did not end")


def test_ponder_tree_serves_the_next_request():
    evaluator = GatedEvaluator()
    trees = TreeCache()
    ponderer = Ponderer(trees, max_visits=200, max_seconds=60)
    faced, ponder_search = _after_our_move(evaluator)
    before = ponder_search.root.visits
    slot = Slot()
    assert ponderer.start(faced, ponder_search, slot.held())
    _wait(ponderer)
    assert ponderer.stats.visits == 200 and ponderer.stats.kept == 1
    assert slot.free  # released once the tree was kept
    reply = int(ponder_search.root.moves[ponder_search.root.best_child()])
    hit = trees.take(faced.play(reply))
    assert hit is not None and hit.extension == 1
    assert hit.visits > 0
    assert ponder_search.root.visits == before + 200


def test_a_real_request_stops_the_ponder_at_a_batch_boundary():
    evaluator = GatedEvaluator()
    trees = TreeCache()
    ponderer = Ponderer(trees, max_visits=10**6, max_seconds=600)
    faced, ponder_search = _after_our_move(evaluator)
    evaluator.free = evaluator.calls + 2  # the ponder's third batch hangs on the network
    slot = Slot()
    assert ponderer.start(faced, ponder_search, slot.held())
    assert evaluator.waiting.wait(30)
    stopper = threading.Thread(target=ponderer.yield_to_request)
    stopper.start()
    evaluator.gate.set()  # the batch in flight ends; no further batch starts
    stopper.join(30)
    assert not stopper.is_alive() and ponderer.active == 0
    assert ponderer.stats.preempted == 1 and slot.free
    assert trees.take(faced) is not None  # kept under the position the opponent faces
    assert ponderer.stats.visits < 100


def test_one_ponder_at_a_time_and_the_refused_one_releases_its_slot():
    evaluator = GatedEvaluator()
    ponderer = Ponderer(TreeCache(), max_visits=10**6, max_seconds=600, max_ponders=1)
    faced, first = _after_our_move(evaluator)
    _, second = _after_our_move(evaluator)
    evaluator.free = evaluator.calls + 1
    assert ponderer.start(faced, first)
    assert evaluator.waiting.wait(30)
    slot = Slot()
    assert not ponderer.start(faced, second, slot.held())
    assert slot.free and ponderer.stats.refused == 1
    evaluator.gate.set()
    ponderer.close()
    assert ponderer.active == 0


def test_an_evaluator_failure_ends_the_ponder_quietly():
    evaluator = GatedEvaluator()
    trees = TreeCache()
    ponderer = Ponderer(trees, max_visits=500, max_seconds=60)
    faced, ponder_search = _after_our_move(evaluator)
    evaluator.fail = True
    slot = Slot()
    assert ponderer.start(faced, ponder_search, slot.held())
    _wait(ponderer)
    assert ponderer.stats.failed == 1 and slot.free
    assert trees.take(faced) is not None  # the reused tree (clean) is kept all the same


def test_budget_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        Ponderer(TreeCache(), max_visits=0)
