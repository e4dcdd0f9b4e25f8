"""How self-play games are played: one dataclass, every figure with the source it follows.

Why these defaults:
* **Playout cap randomization** (KataGo, arXiv:1902.10565): a quarter of the moves get the full
  search (`full_visits`) and become policy targets; the rest get a fast one (`fast_visits`) that
  only advances the game, so a game costs far fewer visits and still gives a value target per
  position. Chosen over Gumbel AlphaZero because it needs nothing but the PUCT search we have
  and its gain is measured at our scale of visits (hundreds); Gumbel's advantage is at a few
  simulations a move, which our networks' policies are too weak to rely on.
* **Root Dirichlet noise** on full searches only (AlphaZero's weight 0.25), its concentration
  KataGo's: a total of 10.83 spread over the legal moves (0.03 per point of a 19x19 board).
* **Temperature 1** for the first `temperature_moves` moves (a move drawn by visits), the most
  visited move after: varied openings, sharp play after.
* **Resignation** when the side to move's root value stays below `-resign_threshold` for
  `resign_after` of its moves, except in `no_resign_share` of the games (minigo settled on
  10%), which are played out to measure how often a resignation would have been wrong. The
  loop recalibrates the threshold each iteration from those games (`services.selfplay.resign`,
  `LoopSettings.resign_fp_target`); `resign_threshold` is where it starts.
"""

from __future__ import annotations

from dataclasses import dataclass

NOISE_TOTAL_ALPHA = 10.83  # KataGo: Dirichlet concentration summed over the legal moves


@dataclass(frozen=True)
class SelfPlaySettings:
    full_visits: int = 200
    fast_visits: int = 50
    full_share: float = 0.25  # share of moves searched fully (policy targets)
    noise_weight: float = 0.25
    noise_total_alpha: float = NOISE_TOTAL_ALPHA
    temperature_moves: int = 8
    resign_threshold: float = 0.9  # resign below -0.9 (a 5% win chance)
    resign_after: int = 3
    no_resign_share: float = 0.1
    max_moves: int | None = None  # None: twice the board's points (a draw at the cap)
    batch_size: int = 16
    c_puct: float = 1.5

    def __post_init__(self) -> None:
        if not 1 <= self.fast_visits <= self.full_visits:
            raise ValueError(f"need 1 <= fast_visits <= full_visits, got {self.fast_visits}, "
                             f"{self.full_visits}")
        for name in ("full_share", "noise_weight", "no_resign_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.resign_threshold <= 1.0 or self.resign_after < 1:
            raise ValueError("resignation needs 0 < resign_threshold <= 1 and resign_after >= 1")
        if self.temperature_moves < 0 or self.noise_total_alpha < 0 or self.batch_size < 1:
            raise ValueError("temperature_moves and noise_total_alpha must be >= 0, "
                             "batch_size >= 1")
        if self.max_moves is not None and self.max_moves < 1:
            raise ValueError(f"max_moves must be >= 1, got {self.max_moves}")

    def move_cap(self, points: int) -> int:
        return self.max_moves if self.max_moves is not None else 2 * points
