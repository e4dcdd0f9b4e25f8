"""Random board symmetries applied to a batch of compact boards and their moves."""

from __future__ import annotations

import numpy as np

from services.games.symmetry import N_SYMMETRIES, point_table


def random_symmetry(boards: np.ndarray, moves: np.ndarray, rng: np.random.Generator):
    """Apply an independent random D4 symmetry to each (board [s, s], move) of the batch."""
    n, size, _ = boards.shape
    table = point_table(size)
    ks = rng.integers(0, N_SYMMETRIES, size=n)
    flat = boards.reshape(n, -1)
    out = np.empty_like(flat)
    out[np.arange(n)[:, None], table[ks]] = flat
    return out.reshape(n, size, size), table[ks, moves]
