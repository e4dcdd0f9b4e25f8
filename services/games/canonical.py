"""Symmetry-canonical positions and their 64-bit hashes.

A (position, move) pair and its 7 mirror images are one training example. Each pair is mapped
to the image whose (Zobrist hash, move) is smallest; dedup then compares the full canonical
board bytes and move, so a hash collision can never merge two different positions. The
position hash (the minimum over the 8 images of the board alone) also decides the split, so a
position and all its mirror images always land in the same split.

How it is computed: the hash of image k is the XOR over the stones of
`zobrist_table[point_table[k, p], colour]`, so `symmetry_zobrist` folds the point table into
one key table per symmetry and no image is ever materialised to be hashed; only the winning
image of each pair is written out. Along a game the 8 hashes are running XORs of one key per
move (`canonical_pairs`), so every position of every game is hashed in O(1) per symmetry.
tests/reference_impls.py holds the plain 8-full-boards implementation; `canonicalize` and
`canonical_pairs` must return exactly what it returns.
"""

from __future__ import annotations

from functools import cache
from itertools import pairwise

import numpy as np
import pyarrow as pa

from services.games.symmetry import N_SYMMETRIES, point_table

ZOBRIST_SEED = 20160101  # fixed forever: changing it changes every hash and split
_NO_MOVE = np.iinfo(np.int32).max
# rows per block in canonical_pairs: its scratch arrays (8 B per stone on each row's board)
# and the block's boards stay in cache; 2**15 measured fastest, 2**18 a third slower
_BLOCK_ROWS = 1 << 15
# numpy's threshold for madvise(MADV_HUGEPAGE) (see `empty_array`)
_HUGE_ARRAY_BYTES = 1 << 22


@cache
def zobrist_table(size: int) -> np.ndarray:
    """uint64 [size*size, 3]: one random key per (point, cell value); empty cells hash to 0."""
    rng = np.random.Generator(np.random.PCG64(ZOBRIST_SEED + size))
    table = rng.integers(0, 2**64, size=(size * size, 3), dtype=np.uint64)
    table[:, 0] = 0
    return table


@cache
def symmetry_zobrist(size: int) -> np.ndarray:
    """uint64 [8, size*size, 3]: key of a stone at p in image k, zobrist_table[table[k, p]]."""
    keys = zobrist_table(size)[point_table(size)]
    keys.flags.writeable = False
    return keys


@cache
def frozen_point_table(size: int) -> np.ndarray:
    """`point_table(size)` computed once per size and read-only (shared by every caller)."""
    table = point_table(size)
    table.flags.writeable = False
    return table


def empty_array(shape: int | tuple[int, ...], dtype) -> np.ndarray:
    """np.empty(shape, dtype), large ones in memory from Arrow's pool.

    numpy asks the kernel for transparent huge pages (madvise) on arrays of 4 MiB and more;
    where the host has to find (compact) or back such pages first, as on the VMs this runs
    on, touching a fresh array of them costs up to three times what ordinary pages cost.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes < _HUGE_ARRAY_BYTES:
        return np.empty(shape, dtype)
    return np.frombuffer(pa.allocate_buffer(nbytes), dtype).reshape(shape)


def zobrist(boards: np.ndarray, size: int) -> np.ndarray:
    """uint64 hash of each flat int8 board in [n, size*size]."""
    keys = zobrist_table(size)[np.arange(size * size), boards.astype(np.intp)]
    return np.bitwise_xor.reduce(keys, axis=1)


def _choose_images(hashes: np.ndarray, image_moves: np.ndarray) -> np.ndarray:
    """Index k in 0..7 of the smallest (hash, move, k) per row of [n, 8] hashes and moves."""
    smallest = hashes.min(axis=1, keepdims=True)
    tied = np.where(hashes == smallest, image_moves, _NO_MOVE)
    return np.argmin(tied, axis=1)  # argmin returns the first (smallest k) of equal moves


def canonicalize(boards: np.ndarray, moves: np.ndarray, size: int):
    """Return (canonical boards, canonical moves, position hashes) for flat boards [n, s*s]."""
    boards = np.asarray(boards)
    moves = np.asarray(moves)
    n, cells = len(boards), size * size
    table = point_table(size)
    rows, points = np.nonzero(boards)  # the stones, row-major: grouped by row
    colors = boards[rows, points].astype(np.intp)
    keys = symmetry_zobrist(size)[:, points, colors]  # [8, stones]
    hashes = np.zeros((n, N_SYMMETRIES), dtype=np.uint64)
    if len(rows):
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        hashes[rows[starts]] = np.bitwise_xor.reduceat(keys, starts, axis=1).T
    image_moves = table[:, moves.astype(np.intp)].T  # [n, 8]
    best = _choose_images(hashes, image_moves)
    cols = np.arange(n)
    out = np.zeros((n, cells), dtype=np.int8)
    out[rows, table[best[rows], points]] = boards[rows, points]
    return out, image_moves[cols, best].astype(np.int16), hashes[cols, best]


def canonical_pairs(moves: np.ndarray, lengths: np.ndarray, size: int):
    """Canonical pairs of every position of many games, without building their raw boards.

    `moves` holds the games' moves back to back (legal, Black first) and `lengths` how many
    belong to each game. Row i of the result is the pair (position before that move, move):
    exactly `canonicalize` applied to the boards `replay` gives, game after game. Returns
    (canonical boards int8 [n, size*size], canonical moves int16 [n], position hashes uint64).
    """
    moves = np.asarray(moves, dtype=np.intp)
    lengths = np.asarray(lengths, dtype=np.int64)
    n, cells = len(moves), size * size
    if n == 0:
        return np.zeros((0, cells), np.int8), np.empty(0, np.int16), np.empty(0, np.uint64)
    boards = empty_array((n, cells), np.int8)  # zeroed block by block, as it is filled
    canon_moves = np.empty(n, dtype=np.int16)
    hashes = empty_array(n, np.uint64)
    if moves.min() < 0 or moves.max() >= cells:
        raise ValueError(f"canonical_pairs: a move off the {size}x{size} board")
    game_ends = np.cumsum(lengths)
    game_starts = game_ends - lengths
    # blocks of whole games, so running hashes and stones never cross a block boundary
    marks = np.arange(_BLOCK_ROWS, n, _BLOCK_ROWS)
    bounds = np.unique(np.r_[0, game_ends[np.searchsorted(game_ends, marks)], n])
    first = np.searchsorted(game_starts, bounds[:-1], side="left")
    last = np.searchsorted(game_starts, bounds[1:], side="left")
    for (r0, r1), g0, g1 in zip(pairwise(bounds.tolist()), first.tolist(), last.tolist(),
                                strict=True):
        boards[r0:r1] = 0
        _canonical_block(moves[r0:r1], lengths[g0:g1][lengths[g0:g1] > 0], size,
                         boards[r0:r1], canon_moves[r0:r1], hashes[r0:r1])
    return boards, canon_moves, hashes


def _canonical_block(moves: np.ndarray, lengths: np.ndarray, size: int, boards: np.ndarray,
                     canon_moves: np.ndarray, hashes: np.ndarray) -> None:
    """`canonical_pairs` for whole games of one block, written into the given output slices."""
    n, cells = len(moves), size * size
    starts = np.cumsum(lengths) - lengths
    game_start = np.repeat(starts, lengths)  # per row: row of its game's first move
    ply = np.arange(n) - game_start  # stones on the board before each move
    # the 8 images' hashes of every position: exclusive running XOR of the moves' keys,
    # restarted at each game's first move by folding the previous game's total into its key
    keys = np.take(symmetry_zobrist(size).reshape(N_SYMMETRIES, -1),
                   moves * 3 + (ply % 2 + 1), axis=1, mode="clip")  # [8, n]; Black (1) at
    # even plies (mode="clip" here and below: the indices are in range, no check per index)
    totals = np.bitwise_xor.reduceat(keys, starts, axis=1)
    keys[:, starts[1:]] ^= totals[:, :-1]
    image_hashes = np.bitwise_xor.accumulate(keys, axis=1)
    keys[:, starts[1:]] ^= totals[:, :-1]
    image_hashes ^= keys  # inclusive -> exclusive: the position before the move
    # smallest (hash, move, k): among the images of smallest hash, the smallest move * 8 + k
    image_moves = np.take(frozen_point_table(size), moves, axis=1, mode="clip")  # [8, n] int32
    smallest = image_hashes.min(axis=0)
    tie_break = np.where(image_hashes == smallest, image_moves * N_SYMMETRIES
                         + np.arange(N_SYMMETRIES, dtype=np.int32)[:, None], _NO_MOVE)
    chosen = tie_break.min(axis=0)
    best = chosen % N_SYMMETRIES
    canon_moves[:] = chosen // N_SYMMETRIES
    hashes[:] = smallest
    # the chosen image of each position: stone j of a game (played at ply j) lies on the board
    # of each later row of the game, at image_moves[best[row], j]; one scatter per colour
    index_type = np.intp  # numpy's own index type: no conversion in take / scatter
    flat_moves = image_moves.reshape(-1)  # (k, row) -> k * n + row
    flat_boards = boards.reshape(-1)
    row_base = np.arange(0, n * cells, cells, dtype=index_type)
    first = (best * n + game_start).astype(index_type)  # in flat_moves: stone 0 in image best
    for parity in (0, 1):  # Black's stones (even plies), then White's
        count = ((ply + 1 - parity) // 2).astype(index_type)  # stones of that colour on board
        total = int(count.sum())
        if total == 0:
            continue
        before = np.cumsum(count) - count
        lookup = np.repeat(first + parity - 2 * before.astype(index_type), count)
        lookup += np.arange(0, 2 * total, 2, dtype=index_type)  # stones parity, parity+2, ...
        target = np.repeat(row_base, count)
        target += np.take(flat_moves, lookup, mode="clip")
        flat_boards[target] = parity + 1
