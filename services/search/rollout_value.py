"""Leaf values mixed with fast rollouts: BAKAGO's / AlphaGo's `V = (1 - lambda) v + lambda z`.

Why at the evaluator: every search (the service's tree, whatever replaces it, self-play) asks a
`PolicyEvaluator` for its leaves, so a wrapper around the evaluator mixes the values for all
of them without knowing any tree. `RolloutValueEvaluator.infer` asks the inner evaluator, then
plays rollouts from the same boards with the game's compiled rollouts (`Game.rollouts`) and
the rollout policy of the version that answered (`RolloutSource.weights_for(model name,
version)`: the one published with it, `services.repository.rollout_policy`), and answers the
inner logits with values `(1 - lambda) v + lambda z`: v the network's value for the side to
move (0 for a network without a value head, so lambda = 1 is pure rollouts), z the mean
rollout result for that side in [-1, 1]. Lambda 0 is the search as it was: `infer` returns
the inner answer itself, no rollout played.

Rollouts are seeded: call i of a wrapper plays with seed `call_seed(i)`, so a search is as
repeatable as its evaluator. A version without a rollout policy, asked for lambda > 0, is
`NoRolloutPolicy` (the service answers FAILED_PRECONDITION).

Komi (Go): the rollouts score the board for the leaf's side to move, and Go's network input does
not say which colour that is. The search knows it (it replays the moves): the wrapper says it
`takes_colours` and the search passes them, `infer(boards, colours=...)`
(`services.search.puct.infer_leaves`); a call without them, for rollouts that need them
(`Rollouts.needs_colours`), is a ValueError rather than a guessed komi.

Tree reuse: a tree's values are mixed with rollouts at one lambda by one rollout policy;
`tree_key` names both, and the tree cache keeps and finds trees under it, so a tree is only
continued by a search that mixes the same way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.evaluator import EvaluatorError, PolicyEvaluator, PolicyOutput, finite_outputs
from services.games.base import Position
from services.games.rollout import Rollouts, RolloutWeights

DEFAULT_ROLLOUTS_PER_LEAF = 1


class NoRolloutPolicy(EvaluatorError):
    """Rollouts asked for (lambda > 0) from a model version published without a rollout
    policy."""

    def __init__(self, model_name: str, model_version: str, why: str = "") -> None:
        super().__init__(why or f"model {model_name} version {model_version} has no rollout "
                         "policy (publish it with one, or search with rollout_lambda 0)")
        self.model_name = model_name
        self.model_version = model_version


class RolloutSource(Protocol):
    """Where the rollout policy of a served version is found."""

    def weights_for(self, model_name: str, model_version: str) -> RolloutWeights | None: ...


@dataclass(frozen=True)
class FixedRollouts:
    """One rollout policy for every version (benchmarks, tests, a local player)."""

    weights: RolloutWeights

    def weights_for(self, model_name: str, model_version: str) -> RolloutWeights:
        return self.weights


@dataclass(frozen=True)
class MixedOutput:
    """The inner answer with mixed values."""

    logits: np.ndarray
    values: np.ndarray
    model_name: str
    model_version: str


def check_lambda(value: float) -> float:
    """`value` as a mixing weight; ValueError unless it is a number in [0, 1]."""
    lam = float(value)
    if not 0.0 <= lam <= 1.0:  # NaN fails too
        raise ValueError(f"must be in [0, 1], got {value}")
    return lam


class RolloutValueEvaluator:
    """A `PolicyEvaluator` whose values are `(1 - lam) v + lam z` (see the module docstring)."""

    def __init__(self, inner: PolicyEvaluator, rollouts: Rollouts, source: RolloutSource,
                 lam: float, *, seed: int = 0, rollouts_per_leaf: int = DEFAULT_ROLLOUTS_PER_LEAF,
                 move_cap: int = 0, komi: float = 0.0) -> None:
        self.inner = inner
        self.rollouts = rollouts
        self.source = source
        self.lam = check_lambda(lam)
        self.seed = int(seed)
        self.rollouts_per_leaf = max(1, int(rollouts_per_leaf))
        self.move_cap = int(move_cap)
        self.komi = float(komi)
        self._policies: set[str] = set()  # the fingerprints of the rollout policies used
        self.calls = 0
        self._lock = threading.Lock()

    @classmethod
    def for_search(cls, inner: PolicyEvaluator, state: Position, source: RolloutSource,
                   lam: float, **options) -> RolloutValueEvaluator:
        """The wrapper for a search of `state`: its game's rollouts under its rule and its
        komi (if any)."""
        game = state.game
        rule = getattr(state, "rule", "")
        komi = getattr(state, "komi", 0.0)
        rollouts = game.rollouts(str(rule.value if hasattr(rule, "value") else ""))
        if rollouts is None:
            raise ValueError(f"{game.title} has no rollouts")
        return cls(inner, rollouts, source, lam, komi=float(komi or 0.0), **options)

    @property
    def takes_colours(self) -> bool:
        """Whether `infer` needs each board's side-to-move colour: the rollouts score with a
        komi (Go) and lambda > 0."""
        return self.lam > 0.0 and self.rollouts.needs_colours

    def continues(self, policy: str) -> None:
        """The search through this wrapper goes on with a tree whose values were mixed with
        the rollout policy of fingerprint `policy` (`RolloutWeights.fingerprint`, from the
        tree cache): `tree_key` counts it as used, so the tree is kept again even if no
        rollout is played before the search ends."""
        with self._lock:
            self._policies.add(policy)

    def tree_key(self) -> tuple[object, ...] | None:
        """What a tree searched through this wrapper was mixed with, for the tree cache: ()
        for lambda 0 (the network alone), (lambda, the rollout policy's fingerprint) after
        rollouts by one policy; None (keep no tree) when no rollout policy is known yet or
        the search mixed two (the served version changed during it)."""
        if self.lam == 0.0:
            return ()
        with self._lock:
            if len(self._policies) != 1:
                return None
            return (self.lam, next(iter(self._policies)))

    def call_seed(self, call: int) -> int:
        """The rollout seed of the wrapper's call number `call` (0 first)."""
        return (self.seed * 1_000_003 + call) % (2**63)

    def infer(self, boards: np.ndarray, *args, colours: np.ndarray | None = None
              ) -> PolicyOutput:
        """The inner answer for `boards`, its values mixed with rollouts from them; `args`
        go to the inner evaluator (a batcher's deadline). `colours`: the side to move's
        colour at each board, required where `takes_colours` (ValueError without)."""
        if self.takes_colours and colours is None:
            raise ValueError(f"{type(self.rollouts).__name__} score with a komi: the caller "
                             "must pass each board's side to move (colours=)")
        out = self.inner.infer(boards, *args)
        if self.lam == 0.0:
            return out
        name, version = str(out.model_name), str(out.model_version)
        weights = self.source.weights_for(name, version)
        if weights is None:
            raise NoRolloutPolicy(name, version)
        values = finite_outputs(out.logits, getattr(out, "values", None), name, version)
        n = len(boards)
        v = np.zeros(n) if values is None else values.astype(np.float64)
        with self._lock:
            call = self.calls
            self.calls += 1
            self._policies.add(weights.fingerprint)
        z = self.rollouts.play(boards, weights, seed=self.call_seed(call),
                               rollouts=self.rollouts_per_leaf, move_cap=self.move_cap,
                               komi=self.komi, colours=colours)
        mixed = (1.0 - self.lam) * v + self.lam * z
        return MixedOutput(out.logits, mixed.astype(np.float32), name, version)


def tree_key(evaluator: PolicyEvaluator) -> tuple[object, ...] | None:
    """What the leaf values of a search through `evaluator` were mixed with (the tree
    cache's key besides the position): () for a plain network, else
    `RolloutValueEvaluator.tree_key`."""
    if isinstance(evaluator, RolloutValueEvaluator):
        return evaluator.tree_key()
    return ()
