"""CMA-ES (Hansen & Ostermeier 2001) from the `cma` library (pinned in requirements.txt), behind
the ask/tell interface of `services.policy_search.base`, optionally with IPOP restarts.

The library does the sampling, selection, step-size and covariance adaptation; this adapter
only turns maximisation into the library's minimisation, counts evaluations and draws the
library's normal samples from its own seeded numpy Generator (the `randn` option), so that two
runs with the same seed agree and no global numpy random state is touched. The population size
is the library's default, 4 + floor(3 ln d), unless given.

Restarts (`restarts=True`, IPOP-CMA-ES after Auger & Hansen 2005): CMA-ES converges early on
the Capture Game (the paper's finding: its step size collapses while the network is still
mediocre, and which optimum it lands in varies widely from run to run). With restarts, a
search that stagnates is ended and a new one started from a fresh random point (drawn as the
networks' initial weights, N(0, 1)) with twice the population, which makes the search more
global and averages the noise of 40-game fitnesses over more candidates. The library's own
termination criteria do not fit a noisy fitness (its flat-fitness and tolerance tests fire on
the all-lost generations of the start, its stagnation test only after hundreds of
generations), so stagnation is judged here, on the population's average fitness, a precise
figure (a generation of 15 candidates is 600 games): a search stagnates when the average over
its last `window` generations is less than `min_gain` above the average over the `window`
before. `window` is `STAGNATION_EPISODES` evaluations' worth of generations (at least
`MIN_WINDOW`), so a restart runs at least two windows.

What a restarted search deploys (`mean`): the mean of the search, finished or current, whose
last window had the highest average fitness, so that a restart late in the budget, still
near its random start, never replaces a good network found before.
"""

from __future__ import annotations

import logging
import math

import cma
import numpy as np

from services.policy_search.base import Optimizer

logger = logging.getLogger(__name__)

STAGNATION_EPISODES = 600  # evaluations per stagnation window (40 generations of 15)
MIN_WINDOW = 10  # generations per window at least, however large the population
MIN_GAIN = 0.02  # the least rise of the window average, on the [-1, 1] fitness scale


class _Normals:
    """The library's `randn` option: standard normals [lam, n] from a seeded Generator (an
    object rather than a closure, so that the optimiser pickles for a checkpoint)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def __call__(self, lam: int, n: int) -> np.ndarray:
        return self.rng.standard_normal((lam, n))


class CMAES(Optimizer):
    def __init__(self, x0: np.ndarray, sigma0: float = 1.0, popsize: int | None = None,
                 seed: int = 0, restarts: bool = False, min_gain: float = MIN_GAIN) -> None:
        x0 = np.asarray(x0, dtype=np.float64).reshape(-1)
        super().__init__(len(x0))
        self._normals = _Normals(np.random.default_rng(seed))
        self.sigma0 = sigma0
        self.restarts = restarts
        self.min_gain = min_gain
        self.restarts_done = 0
        self._averages: list[float] = []  # the current search's population average per generation
        self._kept: tuple[float, np.ndarray] | None = None  # best finished search: (score, mean)
        self.es = self._search(x0, popsize)

    def __setstate__(self, state: dict) -> None:
        """Checkpoints written before restarts existed: a plain search."""
        state.setdefault("restarts", False)
        state.setdefault("min_gain", MIN_GAIN)
        state.setdefault("restarts_done", 0)
        state.setdefault("_averages", [])
        state.setdefault("_kept", None)
        state.setdefault("sigma0", 1.0)
        if "_normals" not in state:
            state["_normals"] = state["es"].opts["randn"]
        self.__dict__.update(state)

    def _search(self, x0: np.ndarray, popsize: int | None) -> cma.CMAEvolutionStrategy:
        options: dict = {"randn": self._normals, "seed": np.nan, "verbose": -9,
                         "verb_log": 0, "verb_disp": 0}
        if popsize is not None:
            options["popsize"] = popsize
        return cma.CMAEvolutionStrategy(x0, self.sigma0, options)

    @property
    def window(self) -> int:
        """Generations per stagnation window at the current population size."""
        return max(MIN_WINDOW, math.ceil(STAGNATION_EPISODES / self.popsize))

    def _score(self) -> float | None:
        """The current search's last-window average fitness (None before a full window)."""
        w = self.window
        return float(np.mean(self._averages[-w:])) if len(self._averages) >= w else None

    @property
    def mean(self) -> np.ndarray:
        current = np.asarray(self.es.mean, dtype=np.float64)
        score = self._score()
        if self._kept is not None and (score is None or self._kept[0] > score):
            current = self._kept[1]
        return current.copy()

    @property
    def stds(self) -> np.ndarray:
        """The current search's standard deviation per parameter, sigma * sqrt(diag C)."""
        return np.asarray(self.es.stds, dtype=np.float64).copy()

    @property
    def popsize(self) -> int:
        return int(self.es.popsize)

    def _propose(self) -> np.ndarray:
        self._candidates = self.es.ask()
        return np.asarray(self._candidates)

    def _update(self, population: np.ndarray, fitnesses: np.ndarray) -> None:
        self.es.tell(self._candidates, list(-fitnesses))
        if not self.restarts:
            return
        self._averages.append(float(np.mean(fitnesses)))
        if self._stagnated():
            self._restart()

    def _stagnated(self) -> bool:
        w, a = self.window, self._averages
        if len(a) < 2 * w:
            return False
        return float(np.mean(a[-w:])) < float(np.mean(a[-2 * w:-w])) + self.min_gain

    def _restart(self) -> None:
        """Keep the finished search's mean if its last window is the best so far, and start a
        new search from a random point with twice the population."""
        score = self._score()
        assert score is not None  # a stagnated search has two windows
        if self._kept is None or score > self._kept[0]:
            self._kept = (score, np.asarray(self.es.mean, dtype=np.float64).copy())
        popsize = 2 * self.popsize
        self.restarts_done += 1
        logger.info("CMA-ES restart %d after %d evaluations: last window %.3f, best kept %.3f; "
                    "population %d", self.restarts_done, self.evaluations, score,
                    self._kept[0], popsize)
        self._averages = []
        self.es = self._search(self._normals.rng.standard_normal(self.dim), popsize)
