"""Pondering: the service keeps searching on the opponent's time, and the next move continues.

Why: a GenMove answer leaves the machine idle until the opponent's reply, and the reply's
request then starts from what tree reuse kept. Leela Zero and KataGo ponder (GTP's ``ponder``
option), Rapfi does between Gomocup turns: after the engine's move they search the position the
opponent now faces, so the visits spent on the likely replies are already there when the reply
comes. Here a finished search hands its subtree for the position after its chosen move to a
`Ponderer`, which searches it in a background thread and then keeps it in the service's
`TreeCache` under that position: the next request, that position plus the opponent's reply,
takes the reply's subtree from the cache (tree reuse's one-move extension) with all its visits.
A ponder searches through the evaluator of the search it continues (leaf values mixed with
rollouts at that search's lambda, if any) and keeps its tree under the same mix.

Bounds (a ponder is a search like any other, never a cost a real request pays):

* it **yields at once to a real request**: the servicer calls `yield_to_request` before any
  RPC runs; every ponder stops at its next batch boundary (a batch of leaves, milliseconds),
  its tree goes to the cache, and only then does the request take its slot and look up its tree;
* it holds a search slot and a memory reservation of the service (`--max-searches`,
  `--search-memory-mb`), handed to it by the servicer as `resources` and released after its
  tree is in the cache; no free slot or memory: no ponder;
* it stops at its budget, `max_visits` new visits or `max_seconds`, whichever comes first: a
  client that goes away sends no next request, and the ponder simply ends at its budget;
* at most `max_ponders` ponders run at once (one per game being played against the service,
  typically); a further one is refused (`start` returns False) rather than queued.

A failed batch (the inference server went away) ends the ponder quietly: the search leaves its
tree clean (`Search.step`), the tree still goes to the cache, and the next real request meets
the failure itself and reports it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field

from services.search import mcts
from services.search.rollout_value import tree_key
from services.search.tree_cache import TreeCache

log = logging.getLogger(__name__)

DEFAULT_MAX_PONDERS = 1
DEFAULT_PONDER_VISITS = 20_000
DEFAULT_PONDER_SECONDS = 30.0


@dataclass
class PonderStats:
    """What the ponders did, for metrics and tests (cumulative)."""

    started: int = 0
    refused: int = 0  # `max_ponders` already running
    preempted: int = 0  # stopped by a real request
    visits: int = 0  # new visits of all ponders
    failed: int = 0  # ended by an evaluator error
    kept: int = 0  # trees put into the cache


@dataclass
class _Ponder:
    state: mcts.State
    search: mcts.Search
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


class Ponderer:
    """Runs ponder searches in background threads and keeps their trees in `trees`."""

    def __init__(
        self,
        trees: TreeCache,
        *,
        max_visits: int = DEFAULT_PONDER_VISITS,
        max_seconds: float = DEFAULT_PONDER_SECONDS,
        max_ponders: int = DEFAULT_MAX_PONDERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_visits < 1 or max_seconds <= 0 or max_ponders < 1:
            raise ValueError("ponder budgets must be positive: got "
                             f"{max_visits=} {max_seconds=} {max_ponders=}")
        self.trees = trees
        self.max_visits = max_visits
        self.max_seconds = max_seconds
        self.max_ponders = max_ponders
        self.clock = clock
        self.stats = PonderStats()
        self._running: list[_Ponder] = []
        self._lock = threading.Lock()

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._running)

    def start(
        self,
        state: mcts.State,
        search: mcts.Search,
        resources: AbstractContextManager | None = None,
        participant: Callable[[], AbstractContextManager] | None = None,
    ) -> bool:
        """Ponder `search` (a new or reused search whose root is `state`, not started or
        started) in the background; False when `max_ponders` already run (then `resources`,
        entered by the caller, are released here at once).

        `resources`: what the ponder holds while it runs and gives back once its tree is in
        the cache (the service's search slot and memory reservation, entered already);
        `participant`: a context manager factory registering the ponder with the batcher
        while it searches (`BatchingEvaluator.participant`), so the batcher never waits for
        it needlessly."""
        owned = ExitStack()
        if resources is not None:
            owned.enter_context(resources)
        with self._lock:
            if len(self._running) >= self.max_ponders:
                self.stats.refused += 1
                owned.close()
                return False
            ponder = _Ponder(state, search)
            self._running.append(ponder)
            self.stats.started += 1
        ponder.thread = threading.Thread(target=self._run, args=(ponder, owned, participant),
                                         name="ponder", daemon=True)
        ponder.thread.start()
        return True

    def _run(self, ponder: _Ponder, owned: ExitStack,
             participant: Callable[[], AbstractContextManager] | None) -> None:
        search = ponder.search
        before = search.visits
        try:
            with owned:
                try:
                    with participant() if participant is not None else ExitStack():
                        search.start()
                        cap = search.total_visits + self.max_visits
                        end = self.clock() + self.max_seconds
                        search.run(cap, end, ponder.stop.is_set)
                except mcts.GameOverError:
                    pass
                except Exception as exc:  # a ponder never fails a request
                    with self._lock:
                        self.stats.failed += 1
                    log.info("ponder of %s ended by %s: %s", ponder.state.moves,
                             type(exc).__name__, exc)
                finally:
                    kept = search.root.priors is not None and self.trees.put(
                        ponder.state, search.root, search.model_name, search.model_version,
                        mix=tree_key(search.evaluator))
                    with self._lock:
                        self.stats.visits += search.visits - before
                        self.stats.kept += int(kept)
        finally:
            with self._lock:
                self._running.remove(ponder)

    def yield_to_request(self, timeout_s: float = 10.0) -> int:
        """Stop every ponder at its next batch boundary and wait until its tree is in the cache
        and its resources are released (a real request is about to run); returns how many
        were stopped."""
        with self._lock:
            running = list(self._running)
            self.stats.preempted += len(running)
        for ponder in running:
            ponder.stop.set()
        for ponder in running:
            if ponder.thread is not None:
                ponder.thread.join(timeout_s)
        return len(running)

    def close(self) -> None:
        """Stop every ponder (the server is stopping)."""
        self.yield_to_request()


__all__ = ["DEFAULT_MAX_PONDERS", "DEFAULT_PONDER_SECONDS", "DEFAULT_PONDER_VISITS",
           "PonderStats", "Ponderer"]
