"""The (mu, lambda) evolution strategy with self-adaptive local mutation (Schwefel), the
paper's ES: mu = 5 parents, lambda = 30 offspring, comma selection (the parents die, the best
mu offspring become the next parents), no recombination.

Every individual carries its own step sizes, one per parameter ("local" mutation), and mutates
them before its parameters (log-normal self-adaptation):

    sigma'_i = sigma_i * exp(tau' * N(0, 1) + tau * N_i(0, 1))
    x'_i     = x_i + sigma'_i * N_i(0, 1)

with tau' = 1 / sqrt(2 d) (shared by the individual's step sizes) and tau = 1 / sqrt(2 sqrt(d))
(per step size). Selection on x' also selects the step sizes that produced it, so the step size
adapts without a rule of its own. Offspring j descends from parent j mod mu (each parent has
lambda / mu children). `mean` is the parents' mean.
"""

from __future__ import annotations

import numpy as np

from services.policy_search.base import Optimizer


class MuCommaLambdaES(Optimizer):
    def __init__(self, x0: np.ndarray, sigma0: float = 1.0, mu: int = 5, lam: int = 30,
                 min_sigma: float = 1e-8, seed: int = 0) -> None:
        x0 = np.asarray(x0, dtype=np.float64).reshape(-1)
        super().__init__(len(x0))
        if not 1 <= mu <= lam or sigma0 <= 0:
            raise ValueError(f"need 1 <= mu <= lambda and sigma0 > 0 (mu={mu}, lambda={lam})")
        self.mu, self.lam, self.min_sigma = mu, lam, min_sigma
        self.parents = np.tile(x0, (mu, 1))
        self.parent_sigmas = np.full((mu, self.dim), float(sigma0))
        self.tau_global = 1 / np.sqrt(2 * self.dim)
        self.tau_local = 1 / np.sqrt(2 * np.sqrt(self.dim))
        self._rng = np.random.default_rng(seed)
        self._sigmas = self.parent_sigmas

    @property
    def mean(self) -> np.ndarray:
        return self.parents.mean(0)

    def _propose(self) -> np.ndarray:
        which = np.arange(self.lam) % self.mu
        rng = self._rng
        log_step = (self.tau_global * rng.standard_normal((self.lam, 1))
                    + self.tau_local * rng.standard_normal((self.lam, self.dim)))
        self._sigmas = np.maximum(self.parent_sigmas[which] * np.exp(log_step), self.min_sigma)
        return self.parents[which] + self._sigmas * rng.standard_normal((self.lam, self.dim))

    def _update(self, population: np.ndarray, fitnesses: np.ndarray) -> None:
        best = np.argsort(-fitnesses, kind="stable")[:self.mu]
        self.parents = population[best].copy()
        self.parent_sigmas = self._sigmas[best].copy()
