"""Symmetry-canonical positions and their 64-bit hashes.

A (position, move) pair and its 7 mirror images are one training example. Each pair is mapped
to the image whose (Zobrist hash, move) is smallest; dedup then compares the full canonical
board bytes and move, so a hash collision can never merge two different positions. The
position hash (the minimum over the 8 images of the board alone) also decides the split, so a
position and all its mirror images always land in the same split.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from services.games.symmetry import N_SYMMETRIES, point_table

ZOBRIST_SEED = 20160101  # fixed forever: changing it changes every hash and split


@cache
def zobrist_table(size: int) -> np.ndarray:
    """uint64 [size*size, 3]: one random key per (point, cell value); empty cells hash to 0."""
    rng = np.random.Generator(np.random.PCG64(ZOBRIST_SEED + size))
    table = rng.integers(0, 2**64, size=(size * size, 3), dtype=np.uint64)
    table[:, 0] = 0
    return table


def zobrist(boards: np.ndarray, size: int) -> np.ndarray:
    """uint64 hash of each flat int8 board in [n, size*size]."""
    keys = zobrist_table(size)[np.arange(size * size), boards.astype(np.intp)]
    return np.bitwise_xor.reduce(keys, axis=1)


def canonicalize(boards: np.ndarray, moves: np.ndarray, size: int):
    """Return (canonical boards, canonical moves, position hashes) for flat boards [n, s*s]."""
    table = point_table(size)
    n = len(boards)
    images = np.empty((N_SYMMETRIES, n, size * size), dtype=np.int8)
    hashes = np.empty((N_SYMMETRIES, n), dtype=np.uint64)
    image_moves = np.empty((N_SYMMETRIES, n), dtype=np.int16)
    for k in range(N_SYMMETRIES):
        images[k][:, table[k]] = boards
        hashes[k] = zobrist(images[k], size)
        image_moves[k] = table[k][moves]
    # lexsort's last key is primary: smallest hash, then smallest move, then smallest k.
    order = np.lexsort((np.arange(N_SYMMETRIES)[:, None].repeat(n, 1), image_moves, hashes), axis=0)
    best = order[0]
    cols = np.arange(n)
    return images[best, cols], image_moves[best, cols], hashes[best, cols]


def split_of(position_hash: np.ndarray, validation: float = 0.05, test: float = 0.05) -> np.ndarray:
    """Deterministic split from the position hash: 'train', 'validation' or 'test'."""
    # Mix the bits again so the split does not depend on the low bits of one Zobrist key.
    mixed = (position_hash * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    u = mixed.astype(np.float64) / float(1 << 24)
    out = np.full(len(position_hash), "train", dtype=object)
    out[u < validation + test] = "validation"
    out[u < test] = "test"
    return out
