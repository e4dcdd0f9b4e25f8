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

Parallel tempering (`AnnealingParams.tempering`, lock-step only). Beyond the paper: instead of
each chain cooling from `t_start` to `t_end` on its own, chain c runs at the fixed temperature
t_end * (t_start / t_end)^(c / (restarts - 1)) (chain 0 the coldest), and after every step
neighbouring chains offer to exchange their orders, accepted with probability
min(1, exp((1/T_c - 1/T_c+1) * (E_c - E_c+1))) (the replica-exchange rule, which keeps each
chain's stationary distribution): an order found by a hot chain travels down to the cold one
that refines it, and a cold chain stuck in a local optimum hands it up to be shaken loose. The
exchanges cost no evaluation (both costs are known), so the boards per step are the same as
independent chains'. The exchanges draw from one more child of the seed sequence.

Final descent (`AnnealingParams.polish`). Beyond the paper: the best order of the annealing
ends in a steepest descent over every swp2 and mov2 neighbour (`neighbours.every_neighbour`):
each sweep costs all of them in one `rescore_many` call (large batches, which the network runs
faster per board than the chains' steps) and moves to the best one that is cheaper, until none
is. The annealing's last stretch at t_end still accepts small losses, so the best order it saw
is often a neighbour or two away from a local optimum that it never visited.

Stopping (`should_stop`). The annealing asks `should_stop()` before every step (lock-step) or
iteration (one after another) and, when it answers True, stops there: the answer is the best
order seen so far, or the greedy one when that is better, marked `stopped`. The greedy order
itself always completes (it is every answer's floor, n evaluator calls).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from services.evaluator import PolicyEvaluator
from services.move_order.greedy import greedy_order
from services.move_order.likelihood import DEFAULT_MAX_BOARDS, PrefixScorer, Scored
from services.move_order.neighbours import NAMES, every_neighbour, propose
from services.move_order.problem import Problem
from services.quoting import shown

log = logging.getLogger(__name__)

INITS = ("greedy", "random")
RANDOM_INIT_TRIES = 1000  # shuffles tried for a legal random order before giving up
# neighbours `polish` costs per evaluator call: each changes up to n positions, so a call holds
# at most this many times n positions and policies, and a stop is seen between calls
POLISH_CHUNK = 128


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
    tempering: bool = False  # chains at fixed temperatures exchanging orders (lockstep only)
    polish: bool = False  # the best order ends in a steepest descent over its neighbours

    def __post_init__(self) -> None:
        if self.iterations is not None and self.iterations < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations}")
        if self.restarts < 1:
            raise ValueError(f"restarts must be >= 1, got {self.restarts}")
        if not (self.t_start > 0 and self.t_end > 0):
            raise ValueError(f"temperatures must be > 0, got {self.t_start} -> {self.t_end}")
        if self.neighbour not in NAMES:
            raise ValueError(f"unknown neighbour {shown(self.neighbour)} "
                             f"(one of {', '.join(NAMES)})")
        if self.init not in INITS:
            raise ValueError(f"unknown init {shown(self.init)} (one of {', '.join(INITS)})")
        if self.candidates < 1 or (self.candidates > 1 and not self.lockstep):
            raise ValueError(f"candidates must be >= 1, and 1 without lockstep, got "
                             f"{self.candidates} (lockstep {self.lockstep})")
        if self.tempering and not self.lockstep:
            raise ValueError("tempering exchanges orders between lock-step chains: it needs "
                             "lockstep")

    def iterations_for(self, n: int) -> int:
        return default_iterations(n) if self.iterations is None else self.iterations


def temperature(iteration: int, iterations: int, t_start: float, t_end: float) -> float:
    """T at `iteration` of `iterations`: t_start at the first, t_end at the last."""
    if iterations <= 1:
        return t_start
    return t_start * (t_end / t_start) ** (iteration / (iterations - 1))


def ladder(chains: int, t_start: float, t_end: float) -> list[float]:
    """The fixed temperatures of parallel tempering's chains, coldest first: t_end to t_start,
    geometrically spaced (one chain: t_end)."""
    if chains == 1:
        return [t_end]
    return [temperature(chains - 1 - c, chains, t_start, t_end) for c in range(chains)]


@dataclass(frozen=True)
class RestartResult:
    initial: Scored
    best: Scored
    proposals: int  # neighbours costed (legal in every prefix)
    accepted: int
    illegal: int  # neighbours rejected by the rules, without a call
    stopped: bool = False  # `should_stop` ended it before its iterations


@dataclass(frozen=True)
class InferenceResult:
    best: Scored
    greedy: Scored  # the greedy order (computed whatever the init: the reference point)
    restarts: tuple[RestartResult, ...]
    calls: int  # evaluator calls
    boards: int  # positions evaluated
    iterations: int  # per restart (asked for)
    stopped: bool = False  # `should_stop` ended the annealing: `best` is the best so far
    exchanges: int = 0  # orders exchanged between tempering chains
    sweeps: int = 0  # sweeps of the final descent (`polish`)

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
           on_accept: Callable[[Scored], None] | None = None,
           should_stop: Callable[[], bool] | None = None) -> RestartResult:
    """One annealing run from `initial`; `on_accept` sees every accepted order; the run ends
    early (`stopped`) when `should_stop()` answers True before an iteration."""
    current = best = initial
    proposals = accepted = illegal = 0
    for it in range(iterations):
        if should_stop is not None and should_stop():
            return RestartResult(initial, best, proposals, accepted, illegal, stopped=True)
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
                    on_accept: Callable[[Scored], None] | None = None,
                    should_stop: Callable[[], bool] | None = None,
                    exchange_rng: np.random.Generator | None = None
                    ) -> tuple[list[RestartResult], int]:
    """One annealing chain per initial order, advanced in lock step: at each iteration every
    running chain proposes `params.candidates` neighbours from its own generator, and all of
    them are costed in one `rescore_many` call; each chain then takes its cheapest legal
    candidate through the acceptance test, drawing from its generator exactly where `anneal`
    would. A chain stops where `anneal` would (no neighbour applies); all stop (`stopped`)
    when `should_stop()` answers True before a step. With `params.tempering` each chain keeps
    its `ladder` temperature and neighbouring chains offer to exchange orders after every step
    (drawing from `exchange_rng`). Returns the chains' results and the exchanges made."""
    if len(initials) != len(rngs):
        raise ValueError(f"{len(initials)} initial orders for {len(rngs)} generators")
    chains = len(initials)
    current = list(initials)
    best = list(initials)
    proposals = [0] * chains
    accepted = [0] * chains
    illegal = [0] * chains
    running = [True] * chains
    stopped = False
    exchanges = 0
    temperatures = ladder(chains, params.t_start, params.t_end) if params.tempering else None
    if temperatures is not None and exchange_rng is None:
        raise ValueError("tempering needs an exchange_rng")
    for it in range(iterations):
        if should_stop is not None and should_stop():
            stopped = True
            break
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
        cooled = temperature(it, iterations, params.t_start, params.t_end)
        for c, candidate in sorted(choice.items()):
            t = cooled if temperatures is None else temperatures[c]
            delta = candidate.cost - current[c].cost
            if delta <= 0 or rngs[c].random() < math.exp(-delta / t):
                current[c] = candidate
                accepted[c] += 1
                if on_accept is not None:
                    on_accept(candidate)
                if candidate.cost < best[c].cost:
                    best[c] = candidate
        if temperatures is not None and exchange_rng is not None:
            exchanges += exchange(current, temperatures, it % 2, exchange_rng)
    results = [RestartResult(initials[c], best[c], proposals[c], accepted[c], illegal[c],
                             stopped=stopped) for c in range(chains)]
    return results, exchanges


def exchange(current: list[Scored], temperatures: Sequence[float], parity: int,
             rng: np.random.Generator) -> int:
    """Replica exchange between the chains (c, c + 1) for c of `parity` (alternating pairs
    per step, so every pair is offered every other step): swapped in place with probability
    min(1, exp((1/T_c - 1/T_c+1) * (E_c - E_c+1))); returns the exchanges made."""
    made = 0
    for c in range(parity, len(current) - 1, 2):
        d = (1 / temperatures[c] - 1 / temperatures[c + 1]) * (current[c].cost
                                                               - current[c + 1].cost)
        if d >= 0 or rng.random() < math.exp(d):
            current[c], current[c + 1] = current[c + 1], current[c]
            made += 1
    return made


def polish(scorer: PrefixScorer, start: Scored,
           should_stop: Callable[[], bool] | None = None) -> tuple[Scored, int, bool]:
    """Steepest descent from `start`: each sweep costs every swp2 and mov2 neighbour of the
    current order, `POLISH_CHUNK` of them per `rescore_many` call, and moves to the cheapest
    when it is cheaper; ends at an order none of whose neighbours is, or when `should_stop()`
    answers True before a chunk. Returns the order, the sweeps made (a sweep cut short is not
    one) and whether it was stopped.

    Why chunks: a sweep has about n**2 neighbours (22,000 for 150 stones), and one call held
    every changed position and its policy at once (gigabytes), past any deadline."""
    current = start
    sweeps = 0
    while True:
        neighbours = every_neighbour(current.order)
        best: Scored | None = None
        for i in range(0, max(len(neighbours), 1), POLISH_CHUNK):
            if should_stop is not None and should_stop():
                return current, sweeps, True
            chunk = neighbours[i:i + POLISH_CHUNK]
            for c in scorer.rescore_many([(current, order, first) for order, first in chunk]):
                if c is not None and c.cost < (current if best is None else best).cost:
                    best = c
        sweeps += 1
        if best is None:
            return current, sweeps, False
        current = best


def infer_order(problem: Problem, evaluator: PolicyEvaluator,
                params: AnnealingParams | None = None, *,
                max_boards: int = DEFAULT_MAX_BOARDS,
                on_accept: Callable[[Scored], None] | None = None,
                should_stop: Callable[[], bool] | None = None,
                on_greedy: Callable[[Scored], None] | None = None) -> InferenceResult:
    """The most likely order of `problem`'s stones found by `params.restarts` annealing runs,
    and the greedy order, computed first whatever the init (NoLegalOrder when it finds no
    legal order). `should_stop` is asked between annealing iterations: when it answers True
    the annealing ends there and the result is the best order so far (the greedy order when
    none is better), `stopped`; the restarts not begun are left out of `restarts`.
    `on_greedy` is told the greedy order once it is complete (a progress report's floor)."""
    params = params or AnnealingParams()
    scorer = PrefixScorer(problem, evaluator, max_boards)
    iterations = params.iterations_for(problem.n)
    # child r seeds restart r; one more (child `restarts`) draws the tempering exchanges
    seeds = np.random.SeedSequence(params.seed).spawn(params.restarts + 1)
    exchange_rng = np.random.default_rng(seeds.pop())
    greedy = greedy_order(scorer)
    if on_greedy is not None:
        on_greedy(greedy)
    rngs = [np.random.default_rng(seed) for seed in seeds]
    initials: list[Scored] = []
    for r, rng in enumerate(rngs):
        initial = random_order(scorer, rng) if params.init == "random" else greedy
        if initial is None:
            log.warning("no legal random order in %d shuffles: restart %d starts from the "
                        "greedy order", RANDOM_INIT_TRIES, r)
            initial = greedy
        initials.append(initial)
    exchanges = 0
    if params.lockstep:
        runs, exchanges = anneal_lockstep(scorer, initials, iterations, rngs, params, on_accept,
                                          should_stop, exchange_rng)
    else:
        runs = []
        for initial, rng in zip(initials, rngs, strict=True):
            runs.append(anneal(scorer, initial, iterations, rng, params, on_accept,
                               should_stop))
            if runs[-1].stopped:
                break
    stopped = any(run.stopped for run in runs)
    for r, run in enumerate(runs):
        log.debug("restart %d: geometric mean %.4f (from %.4f), %d/%d accepted", r,
                  run.best.geometric_mean, run.initial.geometric_mean, run.accepted,
                  run.proposals)
    finished = [run.best for run in runs]
    best = min([greedy, *finished] if stopped else finished, key=lambda s: s.cost)
    sweeps = 0
    if params.polish and not stopped:
        best, sweeps, stopped = polish(scorer, best, should_stop)
    if stopped:
        log.debug("stopped after %d evaluator calls: geometric mean %.4f", scorer.calls,
                  best.geometric_mean)
    return InferenceResult(best, greedy, tuple(runs), scorer.calls, scorer.boards, iterations,
                           stopped, exchanges, sweeps)
