"""Random board symmetries applied to a batch of compact inputs and their moves.

Inputs are [N, S, S] (Gomoku cells) or [N, C, S, S] (Go compact channels); every channel of a
sample gets the same symmetry as its move. A move index of S*S (Go's pass) is left unchanged.
"""

from __future__ import annotations

import numpy as np

from services.games.symmetry import N_SYMMETRIES, point_table


def random_symmetry(boards: np.ndarray, moves: np.ndarray, rng: np.random.Generator):
    """Apply an independent random D4 symmetry to each (input, move) of the batch."""
    n, size = boards.shape[0], boards.shape[-1]
    points = size * size
    table = point_table(size)
    ks = rng.integers(0, N_SYMMETRIES, size=n)
    flat = boards.reshape(n, -1, points)
    out = np.empty_like(flat)
    out[np.arange(n)[:, None, None], np.arange(flat.shape[1])[None, :, None],
        table[ks][:, None, :]] = flat
    moves = np.asarray(moves)
    on_board = moves < points
    new_moves = moves.copy()
    new_moves[on_board] = table[ks[on_board], moves[on_board]]
    return out.reshape(boards.shape), new_moves
