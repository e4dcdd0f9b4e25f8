"""A pair's split, from its position hash alone: every mirror image of a position (one hash,
`services.games.canonical`) lands in one split, and the split of a hash never changes.

`split_codes` mixes the hash's bits once more (the split must not depend on the low bits of
one Zobrist key) and compares the top 24 bits with the fractions; the out-of-core build
(`services.dataset.dedup`) computes the same in SQL.
"""

from __future__ import annotations

import math

import numpy as np

from services.games.canonical import empty_array

SPLIT_NAMES = ("train", "validation", "test")  # split_codes' code -> name


def split_codes(position_hash: np.ndarray, validation: float = 0.05,
                test: float = 0.05) -> np.ndarray:
    """int8 index into SPLIT_NAMES of each position hash (the split `split_of` names)."""
    # Mix the bits again so the split does not depend on the low bits of one Zobrist key.
    if isinstance(position_hash, np.ndarray) and position_hash.dtype == np.uint64:
        mixed = np.multiply(position_hash, np.uint64(0x9E3779B97F4A7C15),
                            out=empty_array(len(position_hash), np.uint64))
    else:
        mixed = position_hash * np.uint64(0x9E3779B97F4A7C15)
    mixed >>= np.uint64(40)
    # u = mixed / 2**24 in [0, 1) decides; u < fraction exactly when mixed < _below(fraction)
    codes = np.zeros(len(position_hash), dtype=np.int8)
    codes[mixed < _below(validation + test)] = 1
    codes[mixed < _below(test)] = 2
    return codes


def _below(fraction: float) -> np.uint64:
    """The integer bound b with (m / 2**24 < fraction) == (m < b) for integers 0 <= m < 2**24
    (the scaling by 2**24 is exact, and m < x == m < ceil(x) for an integer m)."""
    limit = float(fraction) * float(1 << 24)
    if not limit > 0:  # (NaN too)
        return np.uint64(0)
    return np.uint64(min(math.ceil(limit), 1 << 24)) if limit < 1 << 24 else np.uint64(1 << 24)


def split_of(position_hash: np.ndarray, validation: float = 0.05, test: float = 0.05) -> np.ndarray:
    """Deterministic split from the position hash: 'train', 'validation' or 'test'."""
    names = np.array(SPLIT_NAMES, dtype=object)
    return names[split_codes(position_hash, validation, test)]
