"""Simulated annealing over move orders (the paper's recipe, every value a parameter).

Each restart starts from the initial order (greedy by default, or a random legal order), and
for `iterations` steps proposes a neighbour (`neighbours.propose`), costs it
(`PrefixScorer.rescore`: one evaluator call for the changed prefixes) and accepts it with
probability min(1, exp(-dE / T)), dE the cost difference; a neighbour that breaks the rules of
a prefix is rejected without a call. T falls geometrically from `t_start` to `t_end` over the
iterations (the paper gives the ends, 1.0 and 0.1, not the shape). The best order seen over
all restarts is the answer. Randomness comes from one seed: restart r draws from the r-th
child of `numpy.random.SeedSequence(seed)`, so a result is reproducible and a restart's draws
do not depend on how many draws the others made.

The paper ran 5,000 iterations for 20-stone and 20,000 for 40-stone positions, i.e.
5,000 * (n / 20)^2, which `default_iterations` extends to any n.

Schedule (`AnnealingParams.lockstep`). The paper runs the restarts one after another, one
evaluator call per candidate: a call carries only the changed prefixes of one order (a few
boards), so a network call's fixed cost dominates. With `lockstep` (the default) the restarts
are chains advanced together: at each step every chain proposes its neighbour(s) and the
changed prefixes of all of them go to the evaluator in one call (`PrefixScorer.rescore_many`),
so the network sees batches of tens to hundreds of boards. Each chain draws from its own
generator in the same order as alone, so with one candidate per chain every restart is the
paper's chain step for step: same proposals, same acceptances, same result, given an evaluator
whose outputs do not depend on the batch a board travels in. `candidates` > 1 lets a chain
propose several neighbours per step (all in the same call) and take the cheapest of them
through the acceptance test: more boards per step, fewer steps for the same boards.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from services.move_order.greedy import greedy_order
from services.move_order.likelihood import DEFAULT_MAX_BOARDS, PrefixScorer, Scored
from services.move_order.neighbours import NAMES, propose
from services.move_order.problem import Problem
from services.search.mcts import PolicyEvaluator

log = logging.getLogger(__name__)

INITS = ("greedy", "random")
RANDOM_INIT_TRIES = 1000  # shuffles tried for a legal random order before giving up


def default_iterations(n: int) -> int:
    """The paper's iterations for n stones: 5,000 at 20, 20,000 at 40 (5,000 * (n/20)^2)."""
    return max(1, round(5000 * (n / 20) ** 2))


@dataclass(frozen=True)
class AnnealingParams:
    iterations: int | None = None  # per restart; None: default_iterations(n)
    restarts: int = 5
    t_start: float = 1.0
    t_end: float = 0.1
    neighbour: str = "mix"  # one of neighbours.NAMES
    init: str = "greedy"  # one of INITS
    seed: int = 0
    lockstep: bool = True  # restarts advanced together, one evaluator call per step
    candidates: int = 1  # neighbours per chain per step (lockstep only)

    def __post_init__(self) -> None:
        if self.iterations is not None and self.iterations < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations}")
        if self.restarts < 1:
            raise ValueError(f"restarts must be >= 1, got {self.restarts}")
        if not (self.t_start > 0 and self.t_end > 0):
            raise ValueError(f"temperatures must be > 0, got {self.t_start} -> {self.t_end}")
        if self.neighbour not in NAMES:
            raise ValueError(f"unknown neighbour {self.neighbour!r} (one of {', '.join(NAMES)})")
        if self.init not in INITS:
            raise ValueError(f"unknown init {self.init!r} (one of {', '.join(INITS)})")
        if self.candidates < 1 or (self.candidates > 1 and not self.lockstep):
            raise ValueError(f"candidates must be >= 1, and 1 without lockstep, got "
                             f"{self.candidates} (lockstep {self.lockstep})")

    def iterations_for(self, n: int) -> int:
        return default_iterations(n) if self.iterations is None else self.iterations


def temperature(iteration: int, iterations: int, t_start: float, t_end: float) -> float:
    """T at `iteration` of `iterations`: t_start at the first, t_end at the last."""
    if iterations <= 1:
        return t_start
    return t_start * (t_end / t_start) ** (iteration / (iterations - 1))


@dataclass(frozen=True)
class RestartResult:
    initial: Scored
    best: Scored
    proposals: int  # neighbours costed (legal in every prefix)
    accepted: int
    illegal: int  # neighbours rejected by the rules, without a call


@dataclass(frozen=True)
class InferenceResult:
    best: Scored
    greedy: Scored  # the greedy order (computed whatever the init: the reference point)
    restarts: tuple[RestartResult, ...]
    calls: int  # evaluator calls
    boards: int  # positions evaluated
    iterations: int  # per restart

    @property
    def spread(self) -> float:
        """The standard deviation of the restarts' best geometric means (the paper's
        stability figure)."""
        return float(np.std([r.best.geometric_mean for r in self.restarts]))


def random_order(scorer: PrefixScorer, rng: np.random.Generator) -> Scored | None:
    """A uniformly shuffled order that is legal in every prefix (None when
    `RANDOM_INIT_TRIES` shuffles found none)."""
    problem = scorer.problem
    for _ in range(RANDOM_INIT_TRIES):
        order = [0] * problem.n
        order[0::2] = rng.permutation(problem.black).tolist()
        order[1::2] = rng.permutation(problem.white).tolist()
        result = scorer.score(order)
        if result is not None:
            return result
    return None


def anneal(scorer: PrefixScorer, initial: Scored, iterations: int, rng: np.random.Generator,
           params: AnnealingParams,
           on_accept: Callable[[Scored], None] | None = None) -> RestartResult:
    """One annealing run from `initial`; `on_accept` sees every accepted order."""
    current = best = initial
    proposals = accepted = illegal = 0
    for it in range(iterations):
        move = propose(params.neighbour, current.order, rng, it)
        if move is None:
            break  # too few stones for any neighbour
        order, first = move
        candidate = scorer.rescore(current, order, first)
        if candidate is None:
            illegal += 1
            continue
        proposals += 1
        delta = candidate.cost - current.cost
        t = temperature(it, iterations, params.t_start, params.t_end)
        if delta <= 0 or rng.random() < math.exp(-delta / t):
            current = candidate
            accepted += 1
            if on_accept is not None:
                on_accept(current)
            if current.cost < best.cost:
                best = current
    return RestartResult(initial, best, proposals, accepted, illegal)


def anneal_lockstep(scorer: PrefixScorer, initials: Sequence[Scored], iterations: int,
                    rngs: Sequence[np.random.Generator], params: AnnealingParams,
                    on_accept: Callable[[Scored], None] | None = None
                    ) -> list[RestartResult]:
    """One annealing chain per initial order, advanced in lock step: at each iteration every
    running chain proposes `params.candidates` neighbours from its own generator, and all of
    them are costed in one `rescore_many` call; each chain then takes its cheapest legal
    candidate through the acceptance test, drawing from its generator exactly where `anneal`
    would. A chain stops where `anneal` would (no neighbour applies)."""
    if len(initials) != len(rngs):
        raise ValueError(f"{len(initials)} initial orders for {len(rngs)} generators")
    chains = len(initials)
    current = list(initials)
    best = list(initials)
    proposals = [0] * chains
    accepted = [0] * chains
    illegal = [0] * chains
    running = [True] * chains
    for it in range(iterations):
        batch: list[tuple[Scored, Sequence[int], int]] = []
        owner: list[int] = []
        for c in range(chains):
            if not running[c]:
                continue
            for _ in range(params.candidates):
                move = propose(params.neighbour, current[c].order, rngs[c], it)
                if move is None:
                    running[c] = False
                    break
                batch.append((current[c], move[0], move[1]))
                owner.append(c)
        if not batch:
            break
        costed = scorer.rescore_many(batch)
        choice: dict[int, Scored] = {}
        for c, candidate in zip(owner, costed, strict=True):
            if candidate is None:
                illegal[c] += 1
                continue
            proposals[c] += 1
            if c not in choice or candidate.cost < choice[c].cost:
                choice[c] = candidate
        t = temperature(it, iterations, params.t_start, params.t_end)
        for c, candidate in sorted(choice.items()):
            delta = candidate.cost - current[c].cost
            if delta <= 0 or rngs[c].random() < math.exp(-delta / t):
                current[c] = candidate
                accepted[c] += 1
                if on_accept is not None:
                    on_accept(candidate)
                if candidate.cost < best[c].cost:
                    best[c] = candidate
    return [RestartResult(initials[c], best[c], proposals[c], accepted[c], illegal[c])
            for c in range(chains)]


def infer_order(problem: Problem, evaluator: PolicyEvaluator,
                params: AnnealingParams | None = None, *,
                max_boards: int = DEFAULT_MAX_BOARDS,
                on_accept: Callable[[Scored], None] | None = None) -> InferenceResult:
    """The most likely order of `problem`'s stones found by `params.restarts` annealing runs,
    and the greedy order, computed first whatever the init (NoLegalOrder when it finds no
    legal order)."""
    params = params or AnnealingParams()
    scorer = PrefixScorer(problem, evaluator, max_boards)
    iterations = params.iterations_for(problem.n)
    seeds = np.random.SeedSequence(params.seed).spawn(params.restarts)
    greedy = greedy_order(scorer)
    rngs = [np.random.default_rng(seed) for seed in seeds]
    initials: list[Scored] = []
    for r, rng in enumerate(rngs):
        initial = random_order(scorer, rng) if params.init == "random" else greedy
        if initial is None:
            log.warning("no legal random order in %d shuffles: restart %d starts from the "
                        "greedy order", RANDOM_INIT_TRIES, r)
            initial = greedy
        initials.append(initial)
    if params.lockstep:
        runs = anneal_lockstep(scorer, initials, iterations, rngs, params, on_accept)
    else:
        runs = [anneal(scorer, initial, iterations, rng, params, on_accept)
                for initial, rng in zip(initials, rngs, strict=True)]
    for r, run in enumerate(runs):
        log.debug("restart %d: geometric mean %.4f (from %.4f), %d/%d accepted", r,
                  run.best.geometric_mean, run.initial.geometric_mean, run.accepted,
                  run.proposals)
    best = min((run.best for run in runs), key=lambda s: s.cost)
    return InferenceResult(best, greedy, tuple(runs), scorer.calls, scorer.boards, iterations)
