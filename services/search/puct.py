"""What every PUCT tree of the platform shares: its answers, its batch loop and its budget.

Why a module of its own: the search runs on two trees. The compiled one
(`services.search.compiled_tree`, behind `services.search.mcts.Search`) serves every game that
gives compiled rules (`Game.search_kernels`); the interpreted one (`services.search.interpreted`)
serves a game that gives none (a new game works before anyone compiles its rules) and is what
the compiled tree is checked against, visit for visit. Both report the same `SearchResult`,
stop on the same budgets, deadlines and proven wins (`SearchLoop`), and read the network's
answer the same way (`masked_softmax`, `leaf_values`), so they agree wherever both can run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from services import numerics
from services.evaluator import EvaluatorError, PolicyEvaluator, value_rows
from services.games.base import Position

State = Position

DEFAULT_C_PUCT = 1.5
DEFAULT_BATCH_SIZE = 16
VIRTUAL_LOSS = 1.0  # added to N and taken from W on the path while a leaf awaits the network
DEFAULT_NOISE_WEIGHT = 0.25  # AlphaZero's share of the Dirichlet noise in the root's priors


class GameOverError(ValueError):
    """The position has no legal move (somebody made five, the board is full, or every empty
    point is forbidden for black under renju; Go: two consecutive passes ended the game)."""


def network_input(state: State) -> np.ndarray:
    """What the policy network takes for `state` (its game's `network_input`)."""
    return state.game.network_input(state)


def policy_size(state: State) -> int:
    """Entries of the policy of `state`: its points (and the pass, last, in games with one)."""
    return state.game.policy_size(state.size)


def masked_softmax(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Softmax of `logits` over the points where `legal` holds; exactly 0 elsewhere (float64).

    The legal logits must be finite: a NaN or infinite one raises ValueError (callers check
    the network's answer with `finite_outputs` first, which names the model). Turning NaN into
    a policy (uniform, say) would serve a broken model's garbage as an answer.
    """
    legal = np.asarray(legal, dtype=bool)
    if not np.isfinite(np.asarray(logits).reshape(legal.shape)[legal]).all():
        raise ValueError("masked_softmax: the legal logits must be finite (NaN or Inf found)")
    return numerics.masked_softmax(np.ravel(logits), legal.ravel()).reshape(legal.shape)


def infer_leaves(evaluator: PolicyEvaluator, boards: np.ndarray,
                 colours: Callable[[], np.ndarray]) -> Any:
    """`evaluator.infer(boards)`, with `colours=colours()` (int8 [N], BLACK / WHITE: each
    leaf's side to move) for an evaluator that says it `takes_colours` (leaf values mixed
    with Go rollouts: the komi goes to one colour, and Go's input does not say which).
    The search knows every leaf's colour; it works them out only for such an evaluator."""
    if getattr(evaluator, "takes_colours", False):
        return evaluator.infer(boards, colours=colours())  # type: ignore[call-arg]
    return evaluator.infer(boards)


def leaf_values(values: np.ndarray | None, n: int) -> np.ndarray:
    """Leaf values (float64 [n], for the player who moved into each node) from the network's
    values for the side to move there: -v, clipped to [-1, 1]; 0 (a draw) everywhere when
    `values` is None (no value head; `finite_outputs` turns an all-NaN answer into None and
    refuses any other non-finite value before this runs)."""
    rows = value_rows(values, n)
    if rows is None:
        return np.zeros(n)
    v = rows.astype(np.float64)
    if not np.isfinite(v).all():
        raise EvaluatorError("leaf values must be finite (check them with finite_outputs)")
    return 0.0 - np.clip(v, -1.0, 1.0)


@dataclass(frozen=True)
class ChildStats:
    move: int
    visits: int
    prior: float  # the network's probability of the move over all legal points
    value: float  # mean value for the player making the move (0 when unvisited)
    principal_variation: tuple[int, ...] = ()  # starts with `move`


@dataclass(frozen=True)
class SearchResult:
    move: int
    visits: int  # visits of the chosen move
    total_visits: int  # visits of the root's children together, reused ones included
    prior: float  # network probability of the chosen move over all legal points
    value: float  # root mean value for the side to move, in [-1, 1]
    principal_variation: tuple[int, ...]  # starts with `move`
    model_name: str
    model_version: str
    children: tuple[ChildStats, ...]  # most visited first
    evaluator_calls: int
    evaluated_leaves: int  # boards sent to the evaluator, root included
    elapsed_s: float
    reused_visits: int = 0  # part of total_visits that came with a reused tree
    new_visits: int = 0  # simulations run by this search (total_visits - reused_visits)


class SearchLoop:
    """The batch loop of a PUCT search, whatever holds its tree: `batches` and `run` call a
    subclass's `start()` (classify and evaluate the root once) and `step(max_new)` (one batch
    of simulations; returns how many ran).

    Why: the compiled search here and the interpreted reference it must agree with
    (`services.search.interpreted`) stop on the same budgets, deadlines and proven wins; one loop
    keeps them stopping alike, and one `result` reports them alike. A subclass sets its
    counters with `_count_from` and its `root`, and gives `start`, `step`, `child_variation`
    and `principal_variation`.
    """

    root: Any  # a `Node` of the subclass's tree: moves, priors, child_n, child_w, network_prior
    visits: int
    reused_visits: int
    model_name: str
    model_version: str
    evaluator_calls: int
    evaluated_leaves: int
    clock: Callable[[], float]
    started_at: float
    batch_seconds: float
    proven_win: bool

    def start(self) -> None:
        raise NotImplementedError

    def step(self, max_new: float = math.inf) -> int:
        raise NotImplementedError

    def child_variation(self, i: int) -> tuple[int, ...]:
        raise NotImplementedError

    def principal_variation(self) -> tuple[int, ...]:
        raise NotImplementedError

    def _explore(self, noise_alpha: float, noise_weight: float, temperature: float,
                 seed: int | None) -> None:
        """The exploration options (ValueError for negative ones or a weight outside [0, 1]):
        Dirichlet noise of concentration `noise_alpha` mixed into the root's priors with
        weight `noise_weight` for the root's selection only, and a move drawn by visits **
        (1 / `temperature`); both from a generator seeded with `seed`."""
        if noise_alpha < 0 or not 0 <= noise_weight <= 1 or temperature < 0:
            raise ValueError(f"bad exploration options: {noise_alpha=} {noise_weight=} "
                             f"{temperature=}")
        self.noise_alpha = noise_alpha
        self.noise_weight = noise_weight
        self.temperature = temperature
        self.rng = np.random.default_rng(seed)
        self._root_priors = np.zeros(0)  # the root's priors with noise (empty: none)

    def _noise_root(self) -> None:
        """Draw the root's noisy priors (`start` calls it once the root has its priors)."""
        if self.noise_alpha > 0 and len(self.root.moves) > 1:
            priors = self.root.priors
            assert priors is not None
            noise = self.rng.dirichlet(np.full(len(priors), self.noise_alpha))
            self._root_priors = (1.0 - self.noise_weight) * priors + self.noise_weight * noise

    def _chosen(self, n: np.ndarray, best: int) -> int:
        """The result's move: the most visited (`best`), or one drawn by visits ** (1 / T)."""
        if self.temperature <= 0 or n.sum() <= 0:
            return best
        weights = (n / n.max()) ** (1.0 / self.temperature)  # scaled: no overflow
        return int(self.rng.choice(len(n), p=weights / weights.sum()))

    def _options(self, evaluator: PolicyEvaluator, c_puct: float, batch_size: int) -> None:
        """The search's evaluator and PUCT options (ValueError for a batch_size below 1)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.evaluator = evaluator
        self.c_puct = c_puct
        self.batch_size = batch_size

    def _count_from(self, reused_visits: int, model_name: str, model_version: str,
                    clock: Callable[[], float]) -> None:
        """The counters a search starts with (no visit, no evaluator call yet)."""
        self.reused_visits = reused_visits
        self.model_name = model_name
        self.model_version = model_version
        self.evaluator_calls = 0
        self.evaluated_leaves = 0
        self.visits = 0  # simulations run by this search
        self.clock = clock
        self.started_at = clock()
        self.proven_win = False
        self.batch_seconds = 0.0  # running estimate of one batch's duration

    @property
    def total_visits(self) -> int:
        return self.reused_visits + self.visits

    def batches(
        self,
        max_visits: int,
        end: float = math.inf,
        should_stop: Callable[[], bool] | None = None,
        deadline: float | None = None,
    ) -> Iterator[int]:
        """Run batches until the root has `max_visits` visits (reused ones included; 0: no
        visit limit), the clock passes `end` (a time budget), `should_stop()` holds, or
        a proven win has been visited; yields the root's total visits after each batch.

        `deadline` is a hard end (e.g. the request deadline): a batch that would probably not
        finish before it (judged by the recent batches' durations) is not started.
        """
        self.start()
        limit = max_visits - self.reused_visits if max_visits > 0 else math.inf
        while self.visits < limit:
            now = self.clock()
            if now >= end or (deadline is not None and now + self.batch_seconds >= deadline):
                break
            if self.proven_win and self.total_visits > 0:
                break
            if should_stop is not None and should_stop():
                break
            done = self.step(limit - self.visits)
            elapsed = self.clock() - now
            # rises at once with a slow batch, decays slowly: a cautious guess for `deadline`
            self.batch_seconds = max(elapsed, 0.7 * self.batch_seconds + 0.3 * elapsed)
            if done == 0:
                break  # cannot happen on a clean tree (no leaf awaits the network between batches)
            yield self.total_visits

    def run(
        self,
        max_visits: int,
        end: float = math.inf,
        should_stop: Callable[[], bool] | None = None,
        deadline: float | None = None,
    ) -> None:
        for _ in self.batches(max_visits, end, should_stop, deadline):
            pass

    def result(self, top_children: int = 10, started: float | None = None) -> SearchResult:
        root = self.root
        priors = root.priors
        assert priors is not None, "start() the search first"
        moves = root.moves
        order = np.lexsort((moves, -priors, -root.child_n))
        n, w = root.child_n.astype(np.float64), root.child_w
        chosen = self._chosen(n, int(order[0]))
        q = np.divide(w, n, out=np.zeros_like(w), where=n > 0)
        children = tuple(
            ChildStats(
                move=int(moves[i]),
                visits=int(n[i]),
                prior=root.network_prior(int(i)),
                value=float(q[i]),
                principal_variation=self.child_variation(int(i)),
            )
            for i in order[:top_children]
        )
        total = float(n.sum())
        started = self.started_at if started is None else started
        return SearchResult(
            move=int(moves[chosen]),
            visits=int(n[chosen]),
            total_visits=int(total),
            prior=root.network_prior(chosen),
            value=float(w.sum() / total) if total > 0 else 0.0,
            principal_variation=(self.principal_variation() if chosen == order[0]
                                 else self.child_variation(chosen)),
            model_name=self.model_name,
            model_version=self.model_version,
            children=children,
            evaluator_calls=self.evaluator_calls,
            evaluated_leaves=self.evaluated_leaves,
            elapsed_s=self.clock() - started,
            reused_visits=self.reused_visits,
            new_visits=self.visits,
        )


def search_budget(state: State, tree: Any, max_visits: int, max_time_ms: int, batch_size: int,
                  clock: Callable[[], float]) -> tuple[float, float]:
    """`search`'s arguments checked (ValueError: see there), then (its start on `clock`, the
    end of its time budget, inf for none)."""
    if max_visits < 0 or max_time_ms < 0:
        raise ValueError(f"budgets must be >= 0, got {max_visits=} {max_time_ms=}")
    if max_visits == 0 and max_time_ms == 0:
        raise ValueError("give max_visits or max_time_ms (both 0 would search forever)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if tree is not None and not np.array_equal(tree.state.board, state.board):
        raise ValueError("tree is not a search of this position")
    started = clock()
    return started, started + max_time_ms / 1000.0 if max_time_ms > 0 else math.inf


def run_search(make: Callable[..., SearchLoop], state: State, evaluator: PolicyEvaluator, *,
               max_visits: int, max_time_ms: int, deadline: float | None, c_puct: float,
               batch_size: int, top_children: int, tree: Any, should_stop: Callable[[], bool]
               | None, clock: Callable[[], float], **exploration: Any) -> SearchResult:
    """One whole search with the tree `make` builds (`services.search.mcts.search`: the
    arguments, budgets and errors are described there)."""
    started, end = search_budget(state, tree, max_visits, max_time_ms, batch_size, clock)
    s = make(tree if tree is not None else state, evaluator, c_puct=c_puct,
             batch_size=batch_size, clock=clock, **exploration)
    s.run(max_visits, end, should_stop, deadline)
    return s.result(top_children, started)
