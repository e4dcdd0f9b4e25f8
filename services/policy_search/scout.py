"""Scouting: random search around the start point before the optimiser proper, which then starts
from the best network found.

Why. On the Capture Game PGPE spends its first few thousand episodes near -1 (its slow phase):
the paper's start is a random network that loses every game, and PGPE's mean only moves when
one of a pair's two candidates wins a game the other loses. Drawn at random around the same
start, though, about one network in ten wins a game and one to three in a thousand score -0.5
or better over 40 games (MDLSTM 5x5), so a thousand draws are a cheap way out of the slow phase.
Measured at the paper's budget, PGPE did not hold the starts found this way: they are sharp
peaks, lost at PGPE's search width (`docs/capture_game.md`, "Scouting").

How. `samples` candidates x0 + sigma * N(0, I) are drawn in generations of `batch`; the
`shortlist` best by their fitness are then played `repeats` times each in one generation (a
40-game fitness is noisy: the best of a thousand draws is picked partly for its luck), and the
one with the best mean over those repeats is the start of the optimiser `make_inner(start)`.
Every evaluation counts in the budget like any other (`Optimizer.evaluations`). Until the inner
optimiser exists the network to play (`mean`) is the best draw so far (x0 before any).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from services.policy_search.base import Optimizer


class Scouted(Optimizer):
    """`samples` random draws around x0, a confirmation of the best `shortlist`, then the
    optimiser `make_inner(start)` from the confirmed best (see the module docstring)."""

    def __init__(self, x0: np.ndarray, make_inner: Callable[[np.ndarray], Optimizer],
                 samples: int, shortlist: int = 10, repeats: int = 10, sigma: float = 1.0,
                 batch: int = 100, seed: int = 0) -> None:
        x0 = np.asarray(x0, dtype=np.float64).reshape(-1)
        super().__init__(len(x0))
        if samples < 1 or not 1 <= shortlist <= samples or repeats < 1 or batch < 1:
            raise ValueError("samples, repeats and batch must be >= 1 and shortlist in "
                             f"[1, samples]: {samples}, {shortlist}, {repeats}, {batch}")
        if sigma <= 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        self.x0, self.make_inner = x0, make_inner
        self.samples, self.shortlist, self.repeats = samples, shortlist, repeats
        self.sigma, self.batch = sigma, batch
        self._rng = np.random.default_rng(seed)
        self.drawn = 0
        self._top_x = np.empty((0, self.dim))  # the best draws so far, best first
        self._top_f = np.empty(0)
        self.start: np.ndarray | None = None  # the confirmed best draw, once chosen
        self.start_fitness: float | None = None  # its mean over the confirmation games
        self.inner: Optimizer | None = None

    @property
    def mean(self) -> np.ndarray:
        if self.inner is not None:
            return self.inner.mean
        return self._top_x[0].copy() if len(self._top_x) else self.x0.copy()

    @property
    def phase(self) -> str:
        """"draws", "confirmation" or "optimiser"."""
        if self.inner is not None:
            return "optimiser"
        return "confirmation" if self.drawn >= self.samples else "draws"

    def _propose(self) -> np.ndarray:
        if self.inner is not None:
            return self.inner.ask()
        if self.phase == "confirmation":
            return np.repeat(self._top_x, self.repeats, axis=0)
        n = min(self.batch, self.samples - self.drawn)
        return self.x0 + self.sigma * self._rng.standard_normal((n, self.dim))

    def _update(self, population: np.ndarray, fitnesses: np.ndarray) -> None:
        if self.inner is not None:
            self.inner.tell(fitnesses)
            return
        if self.phase == "confirmation":
            means = fitnesses.reshape(len(self._top_x), self.repeats).mean(1)
            best = int(np.argmax(means))  # ties: the better draw (the list is best first)
            self.start, self.start_fitness = self._top_x[best].copy(), float(means[best])
            self.inner = self.make_inner(self.start)
            return
        self.drawn += len(population)
        x = np.concatenate([self._top_x, population])
        f = np.concatenate([self._top_f, fitnesses])
        keep = np.argsort(-f, kind="stable")[:self.shortlist]
        self._top_x, self._top_f = x[keep], f[keep]
