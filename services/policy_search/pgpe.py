"""PGPE (Sehnke et al. 2010): policy gradients with parameter-based exploration, with symmetric
sampling and reward normalisation, as the Capture Game paper used it (PyBrain's PGPE).

Each parameter theta_i is drawn from N(mu_i, sigma_i^2). A generation draws `pairs`
perturbations eps ~ N(0, sigma^2) and evaluates mu + eps and mu - eps (symmetric sampling: the
difference of the two fitnesses estimates the gradient along eps with the baseline cancelled).
With r+ and r- the pair's fitnesses, m the best fitness seen so far and b a moving-average
baseline of the pairs' mean fitness r = (r+ + r-) / 2:

    mu    += alpha_mu    * (r+ - r-) / (2m - r+ - r-) * eps
    sigma += alpha_sigma * (r - b) / (m - b) * (eps^2 - sigma^2) / sigma   (only where r > b)
    b      = 0.9 b + 0.1 r

Dividing by the distance to the best fitness seen is the reward normalisation: the steps do not
depend on the fitness's scale, and shrink as the pair nears the best. Sigma follows only
positive sigma gradients (a pair better than the baseline), which keeps one pair's step from
taking sigma below 0.9 sigma (several pairs' steps add up: sigma is kept >= `min_sigma`). The first
generation only sets the baseline (no update), as in PyBrain. With more than one pair the
pairs' steps add up, so a generation of N pairs moves about as far as N one-pair generations
would from the same point, and a budget of evaluations buys the same learning whatever N (one
pair is PyBrain's and the paper's setting; more pairs batch more games per call).
alpha_mu = 0.2, alpha_sigma = 0.1 and sigma_0 = 2.0 are the paper's and PyBrain's defaults.

`memory` (off by default, the paper's rule): m is the best fitness of the last `memory`
generations instead of the best ever seen. Why: a fitness is a mean of a few noisy games, and a
lucky candidate early in a run lifts m for good; from then on every pair's step is divided by
a distance to a best that the search never reaches again, so the mean barely moves while its
pairs are near the floor (in the Capture Game's runs the best fitness seen early and the
length of PGPE's slow phase go together; docs/capture_game.md). A recent best keeps the steps
the size the rule means.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from services.policy_search.base import Optimizer


class PGPE(Optimizer):
    def __init__(self, x0: np.ndarray, sigma0: float | np.ndarray = 2.0, alpha_mu: float = 0.2,
                 alpha_sigma: float = 0.1, pairs: int = 1, min_sigma: float = 1e-8,
                 seed: int = 0, memory: int | None = None) -> None:
        """`sigma0`: one starting sigma for every parameter, or one each (a hand-off from
        another optimiser's search widths). `memory`: generations whose best fitness
        normalises the steps (None: the best ever seen, the paper's)."""
        x0 = np.asarray(x0, dtype=np.float64).reshape(-1)
        super().__init__(len(x0))
        sigma = np.broadcast_to(np.asarray(sigma0, dtype=np.float64), (self.dim,)).copy()
        if pairs < 1 or not np.all(sigma > 0) or (memory is not None and memory < 1):
            raise ValueError("pairs and memory must be >= 1 and sigma0 > 0")
        self._mu = x0.copy()
        self.sigma = sigma
        self.alpha_mu, self.alpha_sigma, self.pairs = alpha_mu, alpha_sigma, pairs
        self.min_sigma = min_sigma
        self.memory = memory
        self._recent_best: deque[float] = deque(maxlen=memory)
        self.baseline: float | None = None
        self._rng = np.random.default_rng(seed)
        self._eps = np.zeros((pairs, self.dim))

    def __setstate__(self, state: dict) -> None:
        """Checkpoints written before `memory` existed: the paper's m, the best ever seen."""
        state.setdefault("memory", None)
        state.setdefault("_recent_best", deque(maxlen=None))
        self.__dict__.update(state)

    @property
    def mean(self) -> np.ndarray:
        return self._mu.copy()

    def _propose(self) -> np.ndarray:
        """[2 * pairs, d]: rows 2i and 2i + 1 are mu + eps_i and mu - eps_i."""
        self._eps = self._rng.normal(0.0, self.sigma, size=(self.pairs, self.dim))
        population = np.empty((2 * self.pairs, self.dim))
        population[0::2] = self._mu + self._eps
        population[1::2] = self._mu - self._eps
        return population

    def _update(self, population: np.ndarray, fitnesses: np.ndarray) -> None:
        r_plus, r_minus = fitnesses[0::2], fitnesses[1::2]
        r_mean = (r_plus + r_minus) / 2
        m = self._normaliser(fitnesses)
        if self.baseline is None:
            self.baseline = float(r_mean.mean())
            return
        b, eps = self.baseline, self._eps
        span = 2 * m - r_plus - r_minus  # > 0 wherever r+ != r- (one of them is below m)
        step_mu = np.where(r_plus != r_minus, (r_plus - r_minus) / np.where(span > 0, span, 1), 0)
        step_sigma = (r_mean - b) / (m - b) if m > b else np.zeros_like(r_mean)  # a recent m
        # may be below the baseline; the best ever seen never is
        step_sigma = np.maximum(step_sigma, 0.0)
        self._mu = self._mu + self.alpha_mu * (step_mu[:, None] * eps).sum(0)
        sigma = self.sigma + self.alpha_sigma * (
            step_sigma[:, None] * (eps ** 2 - self.sigma ** 2) / self.sigma).sum(0)
        self.sigma = np.maximum(sigma, self.min_sigma)
        self.baseline = 0.9 * b + 0.1 * float(r_mean.mean())

    def _normaliser(self, fitnesses: np.ndarray) -> float:
        """m of the rule: the best fitness ever seen, or, with `memory`, the best of the last
        `memory` generations (this one included, so m is never below the pair's fitnesses)."""
        if self.memory is None:
            return self.best_fitness
        self._recent_best.append(float(fitnesses.max()))
        return max(self._recent_best)
