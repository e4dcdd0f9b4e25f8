"""The 8 symmetries of a square board (the dihedral group D4).

Symmetry k in 0..7: rotate k % 4 quarter turns, then transpose when k >= 4. Works on boards
shaped [..., size, size] and on flat point indices, so positions and moves transform together.
"""

from __future__ import annotations

import numpy as np

N_SYMMETRIES = 8


def transform_board(board: np.ndarray, k: int) -> np.ndarray:
    out = np.rot90(board, k % 4, axes=(-2, -1))
    if k >= 4:
        out = np.swapaxes(out, -2, -1)
    return out


def inverse(k: int) -> int:
    """The symmetry that undoes k (transposes are their own inverse)."""
    return k if k >= 4 else (4 - k) % 4


def point_table(size: int) -> np.ndarray:
    """table[k, p] = index of point p after symmetry k (int32, shape [8, size*size])."""
    ids = np.arange(size * size, dtype=np.int32).reshape(size, size)
    table = np.empty((N_SYMMETRIES, size * size), dtype=np.int32)
    for k in range(N_SYMMETRIES):
        moved = transform_board(ids, k)  # moved[new_y, new_x] = old index
        table[k, moved.reshape(-1)] = np.arange(size * size, dtype=np.int32)
    return table

