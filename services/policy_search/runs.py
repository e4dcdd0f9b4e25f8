"""One policy-search run of the Capture Game: a network, a board size, an optimiser, a seed and
a budget, asked and told until the budget is spent, checkpointed so that a killed run resumes
where it stopped and ends exactly as an uninterrupted one would.

The budget. The paper counts "episodes"; one episode here is one fitness evaluation, that is one
candidate network's `games` games (40) against the greedy player (`fitness.population_fitness`).
A run of `evaluations` episodes plays `evaluations * games` games. Internally the budget is that
number of games, so that a run with lazy evaluation (below) spends the same games as a plain one;
the curves' x axis is games spent / `games`, the episodes a plain run would have had by then. The
last generation is played whole, so a run may end up to one population past its budget.

What is recorded. Per generation: the episodes spent after it, every candidate's fitness, and the
best fitness told so far. Every `curve_step` episodes (at the end of the generation that crosses
a multiple of it, and after the first and last generation) the fitness of the optimiser's mean,
the network it would deploy, over `games` fresh games: the learning curve of the paper's Fig. 3.
The mean's games come from their own random stream, so how often the curve is sampled does not
change the run. At the end the mean plays `final_games` games (its final fitness, from a third
stream).

Lazy evaluation (an option beyond the paper): `lazy=(first, last)` gives each fitness `first`
games at the start and `last` at the end, the number growing linearly with the games spent; early
generations are many and noisy, late ones few and precise, for the same games in all.

Smaller step sizes (an option beyond the paper, which proposes it for "more thorough
exploration"): `pgpe_steps=(alpha_mu, alpha_sigma)` replaces PGPE's 0.2 and 0.1.

Co-evolution (an option beyond the paper, its first proposal: "co-evolution against the
best-so-far and the current mean"): `coevolution=True` has every candidate also play the run's
current mean network and its best-so-far candidate (by fitness against the greedy player), two
games each, one per colour (`fitness.generation_fitness`). The optimiser is told the mean outcome
of all the candidate's games; the history keeps the fitness against the greedy player, the
paper's, and the budget counts every game, so a co-evolving run has fewer generations for the
same games. Why: early on every candidate loses all its games to the greedy player, every
fitness is -1 and PGPE gets no step (its slow phase); games against networks of its own level
still rank the candidates.

Length shaping (an option beyond the paper, aimed at the same slow phase): `shaping=w` tells the
optimiser each candidate's mean `fitness.shaped_outcomes` against the greedy player instead of
its mean outcome: a loss counts -1 + w * plies / size^2 (holding out longer is better), a win
1 - w * plies / size^2 (winning sooner is better), so with w < 1 every win still beats every
loss, and two candidates that lose every game are still ranked. As with co-evolution, the
history, the curves and the final fitness are the plain fitness against the greedy player.
`shaping_form` "losses" counts only a loss's length (a win is +1), "fading" lets the weight
fall linearly to 0 over the budget, "until" shapes (both lengths) only until a candidate of the
run first plays even with the greedy player (plain fitness >= 0), and from then on tells the
plain fitness (latched in the run's state, so a resumed run keeps it): the tie-break is wanted
in the slow phase, and later it competes with winning more often (the shaped runs level off).

Opponent curriculum (an option beyond the paper, aimed at PGPE's slow phase, where every
candidate loses every game and no fitness ranks them): `curriculum=c` weakens the greedy
player the optimiser's candidates play: each of its moves is a random empty point with a
probability falling linearly from 1 at the start to 0 once a share c of the budget is spent
(`fitness.generation_fitness`'s `random_share`); from there on the games are the paper's.
Unlike shaping, what the optimiser is told is still the share of games won, against an
opponent that grows into the greedy player. The history's candidate fitnesses are those of the
games played (against the weakened player while it is weakened); the curves and the final
fitness are the mean network's against the greedy player itself.

Restarts (an option beyond the paper, against the premature convergence it reports for
CMA-ES): `restarts=True` runs CMA-ES as IPOP-CMA-ES (`cmaes.CMAES`): a search whose population
stops improving is ended and a new one, with twice the population, started from a fresh random
point; the run deploys the mean of the search whose last stagnation window scored best. Only
for CMA-ES.

Scouting (an option beyond the paper, aimed at PGPE's slow phase): `scout=n` spends the first
n episodes on networks drawn at random around x0 (`scout.Scouted`), plays the best
`SCOUT_SHORTLIST` of them `SCOUT_REPEATS` times more, and starts the optimiser from the one with
the best mean; the draws and the repeats count in the budget. Any optimiser.

CMA-ES first (an option beyond the paper, for PGPE): `cmaes_first=n` runs CMA-ES (the
grid's settings) for the first n episodes and hands off to PGPE at its mean, PGPE's sigma per
weight being CMA-ES's marginal standard deviation and its best fitness seen the run's
(`handoff.Handoff`): CMA-ES's fast start, PGPE's steady climb.

Against the noise of a few games per fitness (options beyond the paper): `pgpe_memory=n`
normalises PGPE's steps by the best fitness of its last n generations instead of the best ever
seen (`pgpe.PGPE`'s `memory`: one lucky early candidate no longer shrinks every later step);
`cmaes_popsize=n` gives CMA-ES a population of n instead of the library's default (a larger
population averages the noise out of its ranking); `common_draws=True` has all candidates of a
generation play against the same tie-break numbers of the greedy player (common random numbers;
`fitness.generation_fitness`'s `shared`). Any optimiser for the last.

Abandoning a stuck start (an option beyond the paper, against the runs that every optimiser
leaves on a plateau far below the others): `abandon=(e, f)` looks at a chain (the optimiser from
one start point) once it has spent e episodes of its own; if its candidates' mean fitness over
the last fifth of those episodes is below f and at least half the run's budget is still
unspent, the chain is dropped and a fresh optimiser starts from a new random network (its start
point and seed spawned from the run's, so a resumed run draws the same). Why: on MDLSTM 5x5 the
runs split early into those that climb and those that stay near -0.5 to the end, whatever the
optimiser (`docs/capture_game.md`); which kind a run is shows after a few thousand episodes, and
a second start is a fresh draw. The network deployed is the mean of the chain running at the
end; the history and curves go on across the change (the curve drops where a chain is
dropped), and every game counts in the one budget. Any optimiser.

Weight decay (an option beyond the paper, aimed at the same stuck runs): `weight_decay=c` tells
the optimiser each candidate's fitness less c times its mean squared weight; the history, the
curves and the final fitness are the plain fitness. Why: on MDLSTM 5x5 every run grows its
weights to several times the start's, and the runs that stall grow them most (CMA-ES population
30 with lazy evaluation: final norms median 38 against 27 for the runs that climb; the start's
is about 7), and play with more of their squashing functions in the flat tails (a median 68% of
the inputs against 51%, 5% at the start): there most weight changes no longer change the moves,
and the mean drifts along those flat directions with nothing to pull it back. The penalty is
that pull. It helps where the optimiser leaves the floor at once (CMA-ES with population 30
and lazy evaluation: +0.611 over thirty runs against +0.266) and hurts PGPE, which in its slow
phase sees nothing but the penalty (`docs/capture_game.md`). Any optimiser.

Given start weights (the paper's incremental scaling: train on 5x5, scale up, retrain): `init`
names a file whose weights the run starts from instead of random ones (`start.read_start`: a
weights file such as the flow's ``best_network.pt``, or a run's checkpoint, whose optimiser's
mean is the start). The networks' weights do not depend on the board size, so a 5x5 network
starts a 7x7 run as it stands. The search widths: the optimiser's own sigma_0 (PGPE's 2.0, the
paper's), `init_sigma` for every weight, or with `keep_sigma` (PGPE only, from a run's
checkpoint) the widths that run's optimiser had at its end (PGPE's sigma, CMA-ES's
sigma * sqrt(diag C)): a start that already plays loses its play under perturbations as wide
as the random start's, so the retraining may keep the previous search's widths or choose
narrower ones. The weights' CRC-32 names the cell (`-from<crc>`), so a run from other weights has
streams of its own. A chain started after an abandoned one (`abandon`) starts from random
weights as before.

Seeds. The start point x0 (the network's random initial weights) depends only on the grid seed
and the run index, so the three optimisers of a run start from the same network; the optimiser's
and the games' random streams also depend on the run's cell, so that no two cells share games.

Checkpoints. Every `checkpoint_every` generations the whole state (the optimiser object with its
random generator, pickled with cloudpickle because the CMA-ES adapter holds a closure; the two
game generators' states; the history) is written atomically (`services.atomic_files`), and once
more when the run is finished, with `done` set. Starting a run whose file exists continues from
it; a finished one is only read.
"""

from __future__ import annotations

import logging
import pickle
import zlib
from dataclasses import MISSING, asdict, dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import torch

from services.atomic_files import atomic_write_bytes
from services.models.configs import build
from services.policy_search.base import Optimizer
from services.policy_search.cmaes import CMAES
from services.policy_search.es import MuCommaLambdaES
from services.policy_search.fitness import (
    GAMES,
    GenerationFitness,
    generation_fitness,
    population_fitness,
    populations_fitness,
)
from services.policy_search.handoff import Handoff
from services.policy_search.pgpe import PGPE
from services.policy_search.scout import Scouted
from services.policy_search.start import read_start

logger = logging.getLogger(__name__)

# the paper's two networks, k = 2 hidden neurons per sweep (services/models/configs.py)
NETWORKS = {"mdrnn": "capture_mdrnn_k2", "mdlstm": "capture_mdlstm_k2"}
OPTIMISERS = ("pgpe", "es", "cmaes")
# length shaping's forms: a loss's and a win's length count ("both"), only a loss's ("losses"),
# both with the weight falling linearly to 0 over the budget ("fading"), or both until a
# candidate first plays even with the greedy player ("until")
SHAPING_FORMS = ("both", "losses", "fading", "until")
UNTIL_FITNESS = 0.0  # "until": the plain fitness at which shaping stops
CHECKPOINT_VERSION = 1
# abandoning a stuck chain: its candidates' mean over the last ABANDON_WINDOW of its episodes
# decides, and only while at least ABANDON_BEFORE of the budget is left for the next one
ABANDON_WINDOW, ABANDON_BEFORE = 0.2, 0.5
SCOUT_SHORTLIST, SCOUT_REPEATS = 10, 10  # scouting's confirmation: the best 10 draws, 10 times
SCOUT_CONFIRMATION = SCOUT_SHORTLIST * SCOUT_REPEATS  # the confirmation's episodes


@dataclass(frozen=True)
class RunSpec:
    """One run of the grid. `evaluations`: the budget in episodes of `games` games each."""

    network: str
    size: int
    optimiser: str
    run: int = 0
    seed: int = 0
    evaluations: int = 12_000
    games: int = GAMES
    lazy: tuple[int, int] | None = None
    curve_step: int = 20
    final_games: int = 400
    pgpe_steps: tuple[float, float] | None = None  # PGPE's (alpha_mu, alpha_sigma); None: 0.2, 0.1
    coevolution: bool = False  # also play the run's mean and best-so-far network (see above)
    shaping: float = 0.0  # weight of the games' length in what the optimiser is told (above)
    shaping_form: str = "both"  # one of SHAPING_FORMS (above)
    restarts: bool = False  # CMA-ES with IPOP restarts (above)
    curriculum: float = 0.0  # share of the budget over which the opponent grows greedy (above)
    scout: int = 0  # episodes of random draws around x0 before the optimiser starts (above)
    cmaes_first: int = 0  # episodes of CMA-ES before PGPE takes over (above)
    pgpe_memory: int = 0  # PGPE's m: best of the last n generations (0: best ever; above)
    cmaes_popsize: int = 0  # CMA-ES's population (0: the library's default, 4 + 3 ln d; above)
    common_draws: bool = False  # a generation's candidates meet the same opponent draws (above)
    abandon: tuple[int, float] | None = None  # (episodes, fitness): drop a stuck chain (above)
    weight_decay: float = 0.0  # told fitness minus this x the mean squared weight (above)
    init: str | None = None  # a file of start weights instead of random ones (above)
    init_sigma: float = 0.0  # the optimiser's starting width for every weight (0: its own)
    keep_sigma: bool = False  # PGPE from `init`'s run checkpoint: that optimiser's widths

    def __post_init__(self) -> None:
        if self.network not in NETWORKS:
            raise ValueError(f"network {self.network!r}: one of {', '.join(NETWORKS)}")
        if self.optimiser not in OPTIMISERS:
            raise ValueError(f"optimiser {self.optimiser!r}: one of {', '.join(OPTIMISERS)}")
        if self.evaluations < 1 or self.games < 1 or self.curve_step < 1 or self.final_games < 1:
            raise ValueError("evaluations, games, curve_step and final_games must be >= 1")
        if self.lazy is not None and (len(self.lazy) != 2 or min(self.lazy) < 1):
            raise ValueError(f"lazy must be (games first, games last), both >= 1: {self.lazy}")
        if self.pgpe_steps is not None and (self.optimiser != "pgpe" or len(self.pgpe_steps) != 2
                                            or min(self.pgpe_steps) <= 0):
            raise ValueError(f"pgpe_steps must be (alpha_mu, alpha_sigma), both > 0, and only "
                             f"for pgpe: {self.pgpe_steps} with {self.optimiser}")
        if not 0 <= self.shaping < 1:
            raise ValueError(f"shaping must be in [0, 1) (a win must still beat a loss): "
                             f"{self.shaping}")
        if not 0 <= self.curriculum <= 1:
            raise ValueError(f"curriculum must be a share of the budget in [0, 1]: "
                             f"{self.curriculum}")
        if self.scout and not (self.scout >= SCOUT_SHORTLIST
                               and self.scout + SCOUT_CONFIRMATION < self.evaluations):
            raise ValueError(f"scout must be at least {SCOUT_SHORTLIST} draws and leave "
                             f"the optimiser episodes after its {SCOUT_CONFIRMATION}-episode "
                             f"confirmation: {self.scout} of {self.evaluations}")
        if self.cmaes_first and (self.optimiser != "pgpe"
                                 or not 0 < self.cmaes_first < self.evaluations):
            raise ValueError(f"cmaes_first must leave PGPE episodes and is for pgpe only: "
                             f"{self.cmaes_first} of {self.evaluations} with {self.optimiser}")
        if self.pgpe_memory and (self.optimiser != "pgpe" or self.pgpe_memory < 1):
            raise ValueError(f"pgpe_memory must be >= 1 generations and is for pgpe only: "
                             f"{self.pgpe_memory} with {self.optimiser}")
        if self.cmaes_popsize and (self.optimiser != "cmaes" or self.cmaes_popsize < 2):
            raise ValueError(f"cmaes_popsize must be >= 2 and is for cmaes only: "
                             f"{self.cmaes_popsize} with {self.optimiser}")
        if self.restarts and self.optimiser != "cmaes":
            raise ValueError(f"restarts are for cmaes only, not {self.optimiser}")
        if self.abandon is not None and (
                len(self.abandon) != 2 or not 1 <= self.abandon[0] <= ABANDON_BEFORE
                * self.evaluations or not -1 < self.abandon[1] <= 1):
            raise ValueError(f"abandon must be (episodes in [1, {ABANDON_BEFORE:g} x the "
                             f"budget], fitness in (-1, 1]): {self.abandon} of "
                             f"{self.evaluations}")
        if not 0 <= self.weight_decay < 1:
            raise ValueError(f"weight_decay must be in [0, 1): {self.weight_decay}")
        if self.shaping_form not in SHAPING_FORMS:
            raise ValueError(f"shaping_form {self.shaping_form!r}: one of "
                             f"{', '.join(SHAPING_FORMS)}")
        if not (self.init_sigma >= 0 and np.isfinite(self.init_sigma)):
            raise ValueError(f"init_sigma must be >= 0 (0: the optimiser's own): "
                             f"{self.init_sigma}")
        if self.keep_sigma and (self.init is None or self.optimiser != "pgpe"
                                or self.init_sigma):
            raise ValueError("keep_sigma needs init (a run checkpoint), pgpe and no "
                             "init_sigma")
        if self.init is not None:
            start = read_start(self.init, NETWORKS[self.network])  # ValueError: not a start
            if self.keep_sigma and start.widths is None:
                raise ValueError(f"keep_sigma: {self.init} holds no optimiser's widths (a "
                                 "run checkpoint of PGPE or CMA-ES has them)")

    @property
    def cell(self) -> str:
        """The grid cell: network, board, optimiser (and the lazy schedule and PGPE's step sizes
        where they are not the paper's)."""
        lazy = f"-lazy{self.lazy[0]}to{self.lazy[1]}" if self.lazy else ""
        steps = f"-steps{self.pgpe_steps[0]:g}x{self.pgpe_steps[1]:g}" if self.pgpe_steps else ""
        coevolution = "-coev" if self.coevolution else ""
        form = "" if self.shaping_form == "both" else self.shaping_form
        shaping = f"-shape{self.shaping:g}{form}" if self.shaping else ""
        restarts = "-ipop" if self.restarts else ""
        curriculum = f"-curriculum{self.curriculum:g}" if self.curriculum else ""
        scout = f"-scout{self.scout}" if self.scout else ""
        cmaes_first = f"-cmaesfirst{self.cmaes_first}" if self.cmaes_first else ""
        memory = f"-memory{self.pgpe_memory}" if self.pgpe_memory else ""
        popsize = f"-pop{self.cmaes_popsize}" if self.cmaes_popsize else ""
        common = "-common" if self.common_draws else ""
        abandon = (f"-abandon{self.abandon[0]}below{self.abandon[1]:g}" if self.abandon
                   else "")
        decay = f"-decay{self.weight_decay:g}" if self.weight_decay else ""
        init = (f"-from{read_start(self.init, NETWORKS[self.network]).tag}"
                if self.init is not None else "")
        sigma = ("-keptsigma" if self.keep_sigma
                 else f"-sigma{self.init_sigma:g}" if self.init_sigma else "")
        return (f"{self.network}-{self.size}x{self.size}-{self.optimiser}{popsize}{restarts}{lazy}"
                f"{steps}{memory}{common}{coevolution}{shaping}{curriculum}{scout}{cmaes_first}"
                f"{abandon}{decay}{init}{sigma}")

    @property
    def name(self) -> str:
        return f"{self.cell}-run{self.run:02d}"

    @property
    def budget_games(self) -> int:
        return self.evaluations * self.games

    def shaping_now(self, spent: int, reached: bool = False) -> float:
        """The length shaping's weight once `spent` games of the budget are spent (`reached`:
        a candidate has played even with the greedy player, which ends the "until" form)."""
        if self.shaping_form == "until" and reached:
            return 0.0
        if self.shaping_form != "fading":
            return self.shaping
        return self.shaping * max(0.0, 1.0 - spent / self.budget_games)

    def random_share_now(self, spent: int) -> float:
        """The share of the opponent's moves that are random once `spent` games of the budget
        are spent: from 1 down to 0 at `curriculum` of the budget (0 without a curriculum)."""
        if not self.curriculum:
            return 0.0
        return max(0.0, 1.0 - spent / (self.curriculum * self.budget_games))

    @property
    def shaping_counts_wins(self) -> bool:
        """Whether a win's length counts in the shaped outcome (all forms but "losses")."""
        return self.shaping_form != "losses"

    def draws_shared_by(self, candidates: int) -> int:
        """How many consecutive candidates of a generation of `candidates` share their
        opponent's draws: all of them with `common_draws` (PGPE's pair, CMA-ES's or the
        ES's population), else 1 (each its own)."""
        return max(candidates, 1) if self.common_draws else 1  # an empty one shares nothing

    def games_now(self, spent: int) -> int:
        """Games per fitness evaluation once `spent` games of the budget are spent."""
        if self.lazy is None:
            return self.games
        first, last = self.lazy
        return max(1, round(first + (last - first) * min(spent / self.budget_games, 1.0)))


@dataclass
class History:
    """What a run recorded (see the module docstring); lists so that a checkpoint appends."""

    generation_episodes: list[float] = field(default_factory=list)  # after each generation
    generation_games: list[int] = field(default_factory=list)  # games per fitness in it
    fitness: list[np.ndarray] = field(default_factory=list)  # each candidate's, per generation
    best_so_far: list[float] = field(default_factory=list)
    curve_episodes: list[float] = field(default_factory=list)
    curve_fitness: list[float] = field(default_factory=list)  # the mean's, at those episodes


@dataclass
class RunResult:
    spec: RunSpec
    history: History
    mean: np.ndarray  # the final mean weights
    final_fitness: float  # the mean's fitness over spec.final_games games
    generations: int
    restarts: int = 0  # the optimiser's restarts (CMA-ES with `restarts`)
    chains: int = 1  # start points the run tried (more than one with `abandon`)

    def population_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """The paper's Fig. 3 quantity, the average fitness of the evaluated candidates, per
        `curve_step` episodes: (the episodes at each bin's end, the bin's average fitness).
        Within a generation the candidates take their episodes in order."""
        h, step = self.history, self.spec.curve_step
        if not h.fitness:
            return np.zeros(0), np.zeros(0)
        starts = np.concatenate([[0.0], h.generation_episodes[:-1]])
        position = np.concatenate([
            start + np.arange(1, len(f) + 1) * games / self.spec.games
            for start, f, games in zip(starts, h.fitness, h.generation_games, strict=True)])
        fitness = np.concatenate(h.fitness).astype(np.float64)
        bins = np.maximum(np.ceil(position / step).astype(np.int64) - 1, 0)
        counts = np.bincount(bins)
        used = counts > 0
        means = np.bincount(bins, weights=fitness)[used] / counts[used]
        return (np.flatnonzero(used) + 1.0) * step, means

    def summary(self) -> dict[str, Any]:
        """A small, picklable, JSON-able digest (what a flow task returns)."""
        h = self.history
        x, y = self.population_curve()
        return {"name": self.spec.name, "cell": self.spec.cell, "spec": asdict(self.spec),
                "final_fitness": self.final_fitness, "generations": self.generations,
                "restarts": self.restarts, "chains": self.chains,
                "episodes": h.generation_episodes[-1] if h.generation_episodes else 0.0,
                "curve_episodes": list(h.curve_episodes),
                "curve_fitness": list(h.curve_fitness),
                "population_episodes": [float(v) for v in x],
                "population_fitness": [round(float(v), 4) for v in y],
                "mean": [float(v) for v in self.mean]}


def _streams(spec: RunSpec, chain: int = 0
             ) -> tuple[np.random.SeedSequence, np.random.SeedSequence]:
    """(the run's start-point stream, the cell's stream) from the grid seed; for a later
    `chain` (a start after an abandoned one), streams of their own spawned from the same keys."""
    cell_key = zlib.crc32(spec.cell.encode())
    if chain:
        return (np.random.SeedSequence(spec.seed, spawn_key=(spec.run, 0, chain)),
                np.random.SeedSequence(spec.seed, spawn_key=(spec.run, cell_key, 0, chain)))
    start = np.random.SeedSequence(spec.seed, spawn_key=(spec.run,))
    cell = np.random.SeedSequence(spec.seed, spawn_key=(spec.run, cell_key))
    return start, cell


def network_for(spec: RunSpec) -> torch.nn.Module:
    return build(NETWORKS[spec.network])


def start_point(spec: RunSpec, net: torch.nn.Module, chain: int = 0) -> np.ndarray:
    """x0: N(0, 1) initial weights (the networks' own init), the same for every optimiser, or
    the spec's `init` weights; `chain` > 0: the start drawn after that many abandoned ones."""
    if spec.init is not None and not chain:
        return read_start(spec.init, NETWORKS[spec.network]).weights.copy()
    rng = np.random.default_rng(_streams(spec, chain)[0])
    return rng.standard_normal(net.n_weights())


def next_chain(spec: RunSpec, net: torch.nn.Module, chain: int) -> Optimizer:
    """The optimiser of the run's `chain`-th start (1 after the first abandoned start): a new
    random network, and a seed of its own."""
    seed = int(_streams(spec, chain)[1].generate_state(1)[0])
    return make_optimiser(spec, start_point(spec, net, chain), seed)


def make_optimiser(spec: RunSpec, x0: np.ndarray, seed: int) -> Optimizer:
    """The paper's settings: PGPE one symmetric pair per generation (alpha_mu 0.2, alpha_sigma
    0.1, sigma_0 2.0, or the spec's `pgpe_steps`); the (5, 30)-ES; CMA-ES with the library's
    default population. With `scout`, the same optimiser after scouting around x0 (the draws'
    stream spawned from `seed`, the optimiser's own seed unchanged). With `cmaes_first`, CMA-ES
    seeded with `seed` and then PGPE with a seed spawned from it."""
    if spec.cmaes_first:
        return Handoff(CMAES(x0, seed=seed), spec.cmaes_first, partial(_pgpe_after, spec, seed))
    if spec.scout:
        draws_seed = np.random.SeedSequence(seed, spawn_key=(1,))
        return Scouted(x0, partial(_optimiser, spec, seed=seed), samples=spec.scout,
                       shortlist=SCOUT_SHORTLIST, repeats=SCOUT_REPEATS,
                       seed=int(draws_seed.generate_state(1)[0]))
    return _optimiser(spec, x0, seed)


def _pgpe_after(spec: RunSpec, seed: int, first: CMAES) -> PGPE:
    """PGPE taking over from CMA-ES at its mean with its per-weight widths."""
    pgpe_seed = int(np.random.SeedSequence(seed, spawn_key=(2,)).generate_state(1)[0])
    return _pgpe(spec, first.mean, pgpe_seed, sigma0=first.stds)


def _pgpe(spec: RunSpec, x0: np.ndarray, seed: int, **kwargs: Any) -> PGPE:
    """PGPE from x0 with the spec's `pgpe_steps` where given, else PGPE's own (the paper's)."""
    if "sigma0" not in kwargs:
        if spec.keep_sigma:
            kwargs["sigma0"] = read_start(spec.init, NETWORKS[spec.network]).widths
        elif spec.init_sigma:
            kwargs["sigma0"] = spec.init_sigma
    if spec.pgpe_steps:
        kwargs.update(alpha_mu=spec.pgpe_steps[0], alpha_sigma=spec.pgpe_steps[1])
    return PGPE(x0, seed=seed, memory=spec.pgpe_memory or None, **kwargs)


def _optimiser(spec: RunSpec, x0: np.ndarray, seed: int) -> Optimizer:
    """The spec's optimiser from x0 (see `make_optimiser`)."""
    if spec.optimiser == "pgpe":
        return _pgpe(spec, x0, seed)
    widths = {"sigma0": spec.init_sigma} if spec.init_sigma else {}
    if spec.optimiser == "es":
        return MuCommaLambdaES(x0, seed=seed, **widths)
    return CMAES(x0, seed=seed, restarts=spec.restarts, popsize=spec.cmaes_popsize or None,
                 **widths)


def _fresh_state(spec: RunSpec, net: torch.nn.Module) -> dict[str, Any]:
    cell = _streams(spec)[1]
    opt_seed, games_seq, curve_seq, final_seq = cell.spawn(4)
    opt = make_optimiser(spec, start_point(spec, net), int(opt_seed.generate_state(1)[0]))
    return {"version": CHECKPOINT_VERSION, "spec": asdict(spec), "optimiser": opt,
            "games_rng": np.random.default_rng(games_seq).bit_generator.state,
            "curve_rng": np.random.default_rng(curve_seq).bit_generator.state,
            "final_seed": int(final_seq.generate_state(1)[0]),
            "spent": 0, "generations": 0, "history": History(), "done": False,
            "final_fitness": None}


def _generator(state: dict) -> np.random.Generator:
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng


def load_state(path: Path) -> dict[str, Any] | None:
    """A checkpoint's state, or None where there is none."""
    path = Path(path)
    if not path.exists():
        return None
    with path.open("rb") as f:
        state = pickle.load(f)
    if state.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: checkpoint version {state.get('version')}, "
                         f"this code reads {CHECKPOINT_VERSION}")
    return state


def saved_spec(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's spec with the defaults of the fields added to RunSpec after it was
    written, so that older checkpoints are still read back as the runs they are."""
    defaults = {f.name: f.default for f in fields(RunSpec) if f.default is not MISSING}
    return {**defaults, **state["spec"]}


def _save(state: dict, path: Path) -> None:
    atomic_write_bytes(cloudpickle.dumps(state), path)


def _result(spec: RunSpec, state: dict) -> RunResult:
    opt = state["optimiser"]
    return RunResult(spec, state["history"], opt.mean, float(state["final_fitness"]),
                     state["generations"], getattr(opt, "restarts_done", 0),
                     state.get("chains", 1))


def run(spec: RunSpec, checkpoint: Path, checkpoint_every: int = 10,
        stop_after: int | None = None) -> RunResult | None:
    """Run `spec` to the end of its budget, continuing from `checkpoint` where it exists, and
    return its result. `stop_after`: stop after that many generations of this call without
    writing anything more (what a kill between two checkpoints leaves behind); returns None."""
    return run_together([spec], [checkpoint], checkpoint_every, stop_after)[0]


@dataclass
class _LiveRun:
    """One run of a lock-step batch between two generations: its spec, checkpoint path,
    state (what is saved) and the generators restored from that state."""

    spec: RunSpec
    checkpoint: Path
    state: dict[str, Any]
    games_rng: np.random.Generator
    curve_rng: np.random.Generator
    opponents_told: np.ndarray | None = None  # the networks of the generation being played

    @property
    def opt(self) -> Optimizer:
        return self.state["optimiser"]

    def next_opponents(self) -> np.ndarray | None:
        """The networks a co-evolving run's candidates also play this generation (kept for
        `tell`): its mean, and its best candidate so far against the greedy player once there
        is one; None without co-evolution."""
        if not self.spec.coevolution:
            return None
        best = self.state.get("best_greedy_x")
        self.opponents_told = np.stack([self.opt.mean] + ([best] if best is not None else []))
        return self.opponents_told

    def tell(self, population: np.ndarray, part: GenerationFitness, games: int) -> None:
        """Tell the optimiser the generation's fitnesses: against the greedy player (its
        length-shaped version with `shaping`), or, when co-evolving, the mean over all of a
        candidate's games; keep the best candidate against the greedy player."""
        greedy = part.greedy
        told = part.shaped if part.shaped is not None else greedy
        decay = self.spec.weight_decay * np.mean(np.square(population), axis=1)
        if part.versus is None:
            self.opt.tell(told - decay)
            return
        extra = 2 * len(self.opponents_told)
        self.opt.tell((told * games + part.versus * extra) / (games + extra) - decay)
        i = int(np.argmax(greedy))
        if greedy[i] > self.state.get("best_greedy", -np.inf):
            self.state["best_greedy"], self.state["best_greedy_x"] = float(greedy[i]), \
                population[i].copy()

    def abandon_if_stuck(self, net: torch.nn.Module, spent_before: int) -> None:
        """With `abandon=(e, f)`: at the generation where the running chain's own games pass
        e episodes, drop it for a fresh start if its candidates' mean fitness over the last
        fifth of them is below f and at least half the budget is left (module docstring)."""
        if self.spec.abandon is None:
            return
        episodes, threshold = self.spec.abandon
        games = self.spec.games
        start = self.state.get("chain_start", 0)  # games spent when the chain began
        due = start + episodes * games
        if not spent_before < due <= self.state["spent"]:
            return
        if self.state["spent"] > ABANDON_BEFORE * self.spec.budget_games:
            return
        h = self.state["history"]
        since = (start + (1 - ABANDON_WINDOW) * episodes * games) / games
        recent = [f for e, f in zip(h.generation_episodes, h.fitness, strict=True) if e > since]
        fitness = float(np.concatenate(recent).mean())
        if fitness >= threshold:
            return
        chain = self.state.get("chains", 1)
        logger.info("%s: chain %d at %.3f after %d episodes, below %g: a fresh start",
                    self.spec.name, chain, fitness, episodes, threshold)
        self.state["optimiser"] = next_chain(self.spec, net, chain)
        self.state["chains"], self.state["chain_start"] = chain + 1, self.state["spent"]

    def save(self) -> None:
        self.state["games_rng"] = self.games_rng.bit_generator.state
        self.state["curve_rng"] = self.curve_rng.bit_generator.state
        _save(self.state, self.checkpoint)


def _open(spec: RunSpec, checkpoint: Path, net: torch.nn.Module) -> dict[str, Any]:
    """The run's state: read back from `checkpoint`, or fresh where there is none."""
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    state = load_state(checkpoint)
    if state is not None and saved_spec(state) != asdict(spec):
        raise ValueError(f"{checkpoint} holds another run: {state['spec']}")
    if state is None:
        return _fresh_state(spec, net)
    if not state["done"]:
        logger.info("%s: resuming after generation %d (%d of %d games)", spec.name,
                    state["generations"], state["spent"], spec.budget_games)
    return state


def run_together(specs: list[RunSpec], checkpoints: list[Path], checkpoint_every: int = 10,
                 stop_after: int | None = None) -> list[RunResult | None]:
    """Several runs of one network on one board size (a cell's runs, typically) in lock step:
    at every generation each unfinished run asks its optimiser, and all their populations play
    as one batch (`fitness.populations_fitness`), as do their mean networks' curve points and
    final games. Each run keeps its own optimiser, generators and checkpoint, so each ends
    exactly as it would alone (`run`), whatever it is batched with and wherever a kill stopped
    it; the batch only saves per-call cost. Returns the results in the order of `specs`, None
    for a run not finished because `stop_after` generations of this call were reached."""
    if len(specs) != len(checkpoints):
        raise ValueError(f"{len(specs)} specs and {len(checkpoints)} checkpoints")
    if not specs:
        return []
    if len({(s.network, s.size) for s in specs}) != 1:
        raise ValueError("runs played together share one network and board size: "
                         + ", ".join(sorted({f"{s.network} {s.size}x{s.size}" for s in specs})))
    if len({s.name for s in specs}) != len(specs):
        raise ValueError("the same run twice in one batch")
    net = network_for(specs[0])
    size = specs[0].size
    results: list[RunResult | None] = [None] * len(specs)
    live: list[tuple[int, _LiveRun]] = []
    for i, (spec, checkpoint) in enumerate(zip(specs, checkpoints, strict=True)):
        state = _open(spec, Path(checkpoint), net)
        if state["done"]:
            results[i] = _result(spec, state)
        else:
            live.append((i, _LiveRun(spec, Path(checkpoint), state,
                                     _generator(state["games_rng"]),
                                     _generator(state["curve_rng"]))))
    step = 0
    while live:
        if stop_after is not None and step >= stop_after:
            return results
        games = [r.spec.games_now(r.state["spent"]) for _, r in live]
        populations = [r.opt.ask() for _, r in live]
        opponents = [r.next_opponents() for _, r in live]
        parts = generation_fitness(net, populations, size, [r.games_rng for _, r in live],
                                   games, opponents,
                                   [r.spec.shaping_now(r.state["spent"],
                                                       r.state.get("shaping_reached", False))
                                    for _, r in live],
                                   [r.spec.shaping_counts_wins for _, r in live],
                                   [r.spec.random_share_now(r.state["spent"]) for _, r in live],
                                   [r.spec.draws_shared_by(len(p))
                                    for (_, r), p in zip(live, populations, strict=True)])
        curve_due = []
        for (_, r), population, part, g in zip(live, populations, parts, games, strict=True):
            r.tell(population, part, g)
            fitness = part.greedy
            state, h = r.state, r.state["history"]
            if (r.spec.shaping_form == "until" and fitness.size
                    and fitness.max() >= UNTIL_FITNESS):
                state["shaping_reached"] = True
            if part.versus is not None:
                g += 2 * len(r.opponents_told)  # the games against the networks
            spent_before = state["spent"]
            before = spent_before / r.spec.games
            state["spent"] += len(population) * g
            state["generations"] += 1
            episodes = state["spent"] / r.spec.games
            h.generation_episodes.append(episodes)
            h.generation_games.append(g)
            h.fitness.append(fitness.astype(np.float32))
            h.best_so_far.append(max(float(r.opt.best_fitness),
                                     h.best_so_far[-1] if h.best_so_far else -np.inf))
            r.abandon_if_stuck(net, spent_before)
            if (state["generations"] == 1 or state["spent"] >= r.spec.budget_games
                    or int(episodes // r.spec.curve_step) > int(before // r.spec.curve_step)):
                curve_due.append((r, episodes))
        if curve_due:
            curve = populations_fitness(net, [r.opt.mean[None] for r, _ in curve_due], size,
                                        [r.curve_rng for r, _ in curve_due],
                                        [r.spec.games for r, _ in curve_due])
            for (r, episodes), mean_fit in zip(curve_due, curve, strict=True):
                r.state["history"].curve_episodes.append(episodes)
                r.state["history"].curve_fitness.append(float(mean_fit[0]))
        step += 1
        finished = [(i, r) for i, r in live if r.state["spent"] >= r.spec.budget_games]
        if finished:
            final = populations_fitness(
                net, [r.opt.mean[None] for _, r in finished], size,
                [np.random.default_rng(r.state["final_seed"]) for _, r in finished],
                [r.spec.final_games for _, r in finished])
            for (i, r), final_fit in zip(finished, final, strict=True):
                r.state["final_fitness"] = float(final_fit[0])
                r.state["done"] = True
                r.save()
                results[i] = result = _result(r.spec, r.state)
                logger.info("%s: %d generations, %.0f episodes, final fitness %.3f",
                            r.spec.name, result.generations,
                            r.state["history"].generation_episodes[-1], result.final_fitness)
        live = [(i, r) for i, r in live if not r.state["done"]]
        for _, r in live:
            if r.state["generations"] % checkpoint_every == 0:
                r.save()
    return results


def weights_fitness(network: str, weights: np.ndarray, size: int, games: int,
                    seed: int = 0) -> float:
    """The fitness of one weight vector of `network` on `size` boards over `games` games
    (the same weights play any board size: a trained 5x5 network asked on 7x7 or 9x9)."""
    net = build(NETWORKS[network])
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(size, games)))
    return float(population_fitness(net, np.asarray(weights, np.float64)[None], size, rng,
                                    games=games)[0])


def network_with(network: str, weights: np.ndarray) -> torch.nn.Module:
    """The `network` module holding `weights` (a flat vector), ready to save or export."""
    net = build(NETWORKS[network])
    net.set_flat(torch.as_tensor(np.asarray(weights), dtype=torch.float32))
    return net.eval()
