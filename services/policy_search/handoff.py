"""Hand-off: one optimiser for the start of a run's budget, another from where it stands.

Why. On the Capture Game the paper's optimisers are good at different phases. CMA-ES leaves the
random start fast (its mean network at about -0.4 after 2,500 episodes on MDLSTM 5x5, where
PGPE's is still near -1) and then converges early, its step size collapsing while the network is
mediocre. PGPE is slow to leave the start (every candidate loses every game, so its mean gets no
step) and then climbs steadily, still rising at 12,000 episodes (`docs/capture_game.md`). Handing
off lets each do the phase it is good at.

What carries over. The second optimiser is made from the first (`make_second(first)`: its mean
and its search widths; for CMA-ES to PGPE, PGPE's per-parameter sigma is CMA-ES's marginal
standard deviation sigma * sqrt(diag C), the same search distribution per weight). It also takes
the run's best fitness so far as its own: PGPE's reward normalisation divides by the distance to
the best fitness seen, and starting that at -inf would let the first pair that wins a single game
move the mean a full step away from the network the first optimiser found.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from services.policy_search.base import Optimizer


class Handoff(Optimizer):
    """`first` until it has been told `episodes` evaluations (its last generation whole), then
    `make_second(first)` (see the module docstring)."""

    def __init__(self, first: Optimizer, episodes: int,
                 make_second: Callable[[Optimizer], Optimizer]) -> None:
        super().__init__(first.dim)
        if episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {episodes}")
        self.first, self.episodes, self.make_second = first, episodes, make_second
        self.second: Optimizer | None = None
        self.handed_off_at: int | None = None  # evaluations when the second took over

    @property
    def current(self) -> Optimizer:
        return self.second if self.second is not None else self.first

    @property
    def mean(self) -> np.ndarray:
        return self.current.mean

    def _propose(self) -> np.ndarray:
        return self.current.ask()

    def _update(self, population: np.ndarray, fitnesses: np.ndarray) -> None:
        self.current.tell(fitnesses)
        if self.second is None and self.first.evaluations >= self.episodes:
            second = self.make_second(self.first)
            if second.dim != self.dim:
                raise ValueError(f"the second optimiser has {second.dim} parameters, the "
                                 f"first {self.dim}")
            second.best_fitness = self.best_fitness
            second.best_x = None if self.best_x is None else self.best_x.copy()
            self.second, self.handed_off_at = second, self.evaluations
