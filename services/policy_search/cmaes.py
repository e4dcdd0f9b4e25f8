"""CMA-ES (Hansen & Ostermeier 2001) from the `cma` library (pinned in requirements.txt), behind
the ask/tell interface of `services.policy_search.base`.

The library does the sampling, selection, step-size and covariance adaptation; this adapter
only turns maximisation into the library's minimisation, counts evaluations and draws the
library's normal samples from its own seeded numpy Generator (the `randn` option), so that two
runs with the same seed agree and no global numpy random state is touched. The population size
is the library's default, 4 + floor(3 ln d), unless given.
"""

from __future__ import annotations

import cma
import numpy as np

from services.policy_search.base import Optimizer


class _Normals:
    """The library's `randn` option: standard normals [lam, n] from a seeded Generator (an
    object rather than a closure, so that the optimiser pickles for a checkpoint)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def __call__(self, lam: int, n: int) -> np.ndarray:
        return self.rng.standard_normal((lam, n))


class CMAES(Optimizer):
    def __init__(self, x0: np.ndarray, sigma0: float = 1.0, popsize: int | None = None,
                 seed: int = 0) -> None:
        x0 = np.asarray(x0, dtype=np.float64).reshape(-1)
        super().__init__(len(x0))
        options: dict = {"randn": _Normals(np.random.default_rng(seed)),
                         "seed": np.nan, "verbose": -9, "verb_log": 0, "verb_disp": 0}
        if popsize is not None:
            options["popsize"] = popsize
        self.es = cma.CMAEvolutionStrategy(x0, sigma0, options)

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(self.es.mean, dtype=np.float64).copy()

    @property
    def popsize(self) -> int:
        return int(self.es.popsize)

    def _propose(self) -> np.ndarray:
        self._candidates = self.es.ask()
        return np.asarray(self._candidates)

    def _update(self, population: np.ndarray, fitnesses: np.ndarray) -> None:
        self.es.tell(self._candidates, list(-fitnesses))
