"""The cost of an order: 1 / the geometric mean of the policy's probabilities of its moves.

The likelihood of an order m_1..m_n is prod_i P(m_i | s_{i-1}), each factor the policy of the
position before the move, masked to that position's legal moves (`numerics.masked_softmax`);
the geometric mean makes orders of different lengths comparable (the paper's cost).

A candidate of the annealing differs from the current order from some ply k on: the positions
s_0..s_k and their policies are the same, so `PrefixScorer.rescore` keeps them and sends only
s_{k+1}..s_{n-1} to the evaluator, all in ONE `infer` call (split only above `max_boards`, the
served model's batch limit). A candidate that breaks the rules of a prefix costs no call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from services import numerics
from services.games.base import Position
from services.move_order.problem import Problem
from services.search.mcts import EvaluatorError, PolicyEvaluator, finite_outputs

DEFAULT_MAX_BOARDS = 256  # max_batch_size of the served models' config.pbtxt
# a factor below this counts as this: a legal move the network gives 0 keeps a finite cost
MIN_PROBABILITY = 1e-300


@dataclass(frozen=True)
class Scored:
    """An order with what its cost was computed from: `states[i]` is the position after `i`
    moves (n + 1 of them), `policies[i]` the masked policy at `states[i]` (n of them, float64
    rows over the game's policy entries), `factors[i]` the probability of move `i`."""

    order: tuple[int, ...]
    states: tuple[Position, ...]
    policies: tuple[np.ndarray, ...]
    factors: np.ndarray

    @property
    def log_likelihood(self) -> float:
        return float(np.log(np.maximum(self.factors, MIN_PROBABILITY)).sum())

    @property
    def geometric_mean(self) -> float:
        """The geometric mean of the factors (1 for an empty order)."""
        n = len(self.order)
        return math.exp(self.log_likelihood / n) if n else 1.0

    @property
    def cost(self) -> float:
        """1 / geometric mean: lower is more likely."""
        return 1.0 / self.geometric_mean


def scored(order: Sequence[int], states: Sequence[Position],
           policies: Sequence[np.ndarray]) -> Scored:
    """A `Scored` from its states and policies (the factors are read off the policies)."""
    factors = np.array([policies[i][m] for i, m in enumerate(order)], dtype=np.float64)
    return Scored(tuple(int(m) for m in order), tuple(states), tuple(policies), factors)


class PrefixScorer:
    """Costs of orders of one problem on one evaluator; counts its calls and boards sent."""

    def __init__(self, problem: Problem, evaluator: PolicyEvaluator,
                 max_boards: int = DEFAULT_MAX_BOARDS) -> None:
        if max_boards < 1:
            raise ValueError(f"max_boards must be >= 1, got {max_boards}")
        self.problem = problem
        self.evaluator = evaluator
        self.max_boards = max_boards
        self.calls = 0  # evaluator `infer` calls
        self.boards = 0  # positions sent in them

    def policies(self, states: Sequence[Position]) -> list[np.ndarray]:
        """The masked policy of each state, in one `infer` call per `max_boards` states."""
        out: list[np.ndarray] = []
        game = self.problem.game
        width = game.policy_size(self.problem.size)
        for lo in range(0, len(states), self.max_boards):
            chunk = states[lo:lo + self.max_boards]
            boards = np.stack([game.network_input(s) for s in chunk])
            answer = self.evaluator.infer(boards)
            self.calls += 1
            self.boards += len(chunk)
            logits = np.asarray(answer.logits)
            if logits.shape != (len(chunk), width):
                raise EvaluatorError(f"evaluator returned logits {logits.shape} for "
                                     f"{len(chunk)} boards of {width} moves")
            finite_outputs(logits, None, answer.model_name, answer.model_version)
            legal = np.stack([s.legal_mask() for s in chunk])
            out.extend(numerics.masked_softmax(logits, legal))
        return out

    def score(self, order: Sequence[int]) -> Scored | None:
        """The cost of `order` from scratch (one call for all its prefixes); None when the
        order breaks the rules of some prefix."""
        states = self.problem.replay(order)
        if states is None or not self.problem.is_order(order):
            return None
        all_states = [self.problem.start, *states]
        return scored(order, all_states, self.policies(all_states[:-1]))

    def rescore(self, current: Scored, order: Sequence[int], first: int) -> Scored | None:
        """The cost of `order`, equal to `current.order` before ply `first`: the positions
        s_0..s_first and their policies are `current`'s, s_first+1..s_n-1 are evaluated in
        one call. None (and no call) when a move from `first` on breaks the rules."""
        new_states = self.problem.replay(order, current.states[first], first)
        if new_states is None:
            return None
        states = [*current.states[:first + 1], *new_states]
        fresh = self.policies(states[first + 1:len(order)])
        return scored(order, states, [*current.policies[:first + 1], *fresh])
