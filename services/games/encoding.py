"""Board encodings for policy networks.

Boards travel compactly as int8 cells (EMPTY/BLACK/WHITE); networks see three one-hot planes
(black, white, empty) as in Shao et al. 2016. The torch version runs on whatever device the
boards are on, so the expansion happens on the GPU during training and serving.
"""

from __future__ import annotations

import numpy as np
import torch

from services.games.base import BLACK, EMPTY, WHITE

N_PLANES = 3


def planes_numpy(boards: np.ndarray) -> np.ndarray:
    """int8 [..., H, W] -> float32 [..., 3, H, W] one-hot (black, white, empty)."""
    return np.stack([boards == BLACK, boards == WHITE, boards == EMPTY], axis=-3).astype(np.float32)


def planes_torch(boards: torch.Tensor) -> torch.Tensor:
    """int8 [N, H, W] -> float32 [N, 3, H, W] one-hot (black, white, empty)."""
    # Cells 1 (black), 2 (white), 0 (empty) map to planes 0, 1, 2. Literal ints keep the
    # function TorchScript-compilable (scripted code cannot close over module globals).
    index = (boards.long() + 2) % 3
    return torch.nn.functional.one_hot(index, num_classes=3).permute(0, 3, 1, 2).float()


__all__ = ["BLACK", "EMPTY", "N_PLANES", "WHITE", "planes_numpy", "planes_torch"]
