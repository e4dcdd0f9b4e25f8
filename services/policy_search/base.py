"""The ask/tell interface of the optimisers: `ask()` proposes a population of flat parameter
vectors [n, d], `tell(fitnesses)` reports their fitnesses (higher is better) in the same order.

The caller evaluates a whole population at once, so one batched call plays every candidate's
games; the optimiser never calls the fitness itself. `evaluations` counts the fitness values
told so far (the paper's "episodes": one evaluation is one candidate's fitness, that is 40
games), `mean` is the current centre of the search distribution, the network to play with.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class Optimizer(ABC):
    """A seeded black-box maximiser over R^d, asked and told one population at a time."""

    def __init__(self, dim: int) -> None:
        if dim < 1:
            raise ValueError(f"dimension must be >= 1, got {dim}")
        self.dim = dim
        self.evaluations = 0
        self.best_fitness = -np.inf
        self.best_x: np.ndarray | None = None
        self._asked: np.ndarray | None = None

    @property
    @abstractmethod
    def mean(self) -> np.ndarray:
        """The centre of the search distribution, [d]."""

    def ask(self) -> np.ndarray:
        """The next population to evaluate, [n, d] (float64). Asking again before `tell`
        is an error: the fitnesses would not match the population."""
        if self._asked is not None:
            raise RuntimeError("ask() again before tell(): tell the last population first")
        self._asked = np.asarray(self._propose(), dtype=np.float64)
        return self._asked.copy()

    def tell(self, fitnesses: np.ndarray) -> None:
        """Fitnesses of the population of the last `ask`, in its order."""
        if self._asked is None:
            raise RuntimeError("tell() without ask()")
        f = np.asarray(fitnesses, dtype=np.float64).reshape(-1)
        if len(f) != len(self._asked):
            raise ValueError(f"{len(self._asked)} candidates were asked, {len(f)} fitnesses told")
        if not np.all(np.isfinite(f)):
            raise ValueError("fitnesses must be finite")
        population, self._asked = self._asked, None
        self.evaluations += len(f)
        i = int(np.argmax(f))
        if f[i] > self.best_fitness:
            self.best_fitness, self.best_x = float(f[i]), population[i].copy()
        self._update(population, f)

    @abstractmethod
    def _propose(self) -> np.ndarray:
        """A new population [n, d]."""

    @abstractmethod
    def _update(self, population: np.ndarray, fitnesses: np.ndarray) -> None:
        """Learn from the population and its fitnesses."""
