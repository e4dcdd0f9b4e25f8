"""Raw training pairs of games whose boards are cells, as tables of the intermediate layout.

A game whose network input is its board of cells (int8 [S, S]: 0 empty, 1 black, 2 white),
like Gomoku or a game added with its own replay, turns its replayed positions into the ingest's
raw pairs here: each (board, move) in its canonical symmetry image
(`services.games.canonical`), one row per occurrence, with the columns the dedup and the
shards read (the shards' columns but `split`; a `rule` column is the replay's to add).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from services.games.canonical import canonicalize

# rows of one board column chunk: its int32 offsets must stay below 2**31 bytes
_MAX_CHUNK_BYTES = 2**31 - 1


def mover_results(bresults: np.ndarray, plies: np.ndarray) -> np.ndarray:
    """float32 result of the player making each move (Black moves at even plies) from Black's
    result of its game: 1 won, 0 lost, 0.5 draw, NaN unknown (what the value head learns)."""
    b = np.asarray(bresults, np.float32)
    return np.where(np.asarray(plies) % 2 == 0, b, np.float32(1) - b).astype(np.float32)


def pairs_table(boards: np.ndarray, moves: np.ndarray, to_move: np.ndarray, plies: np.ndarray,
                game_ids: list[str], source: str, results: np.ndarray | None, *,
                size: int) -> pa.Table:
    """Raw pairs of S x S cell boards (int8, [n, S, S] or [n, S * S]) canonicalised
    (`services.games.canonical.canonicalize`); one row per occurrence (count 1), not yet
    deduplicated."""
    flat = np.asarray(boards).reshape(len(moves), size * size)
    cb, cm, h = canonicalize(flat, moves, size)
    return raw_pairs_table(cb, cm, to_move, plies, h, pa.array(game_ids, pa.string()), source,
                           results, size)


def binary_column(rows: np.ndarray) -> pa.ChunkedArray:
    """A [n, width] byte matrix as a binary column wrapping its buffer (no copy per row)."""
    rows = np.ascontiguousarray(rows).view(np.uint8)
    n, width = rows.shape
    per_chunk = max(1, _MAX_CHUNK_BYTES // max(width, 1))
    chunks = []
    for r0 in range(0, n, per_chunk):
        part = rows[r0:r0 + per_chunk]
        offsets = np.arange(0, (len(part) + 1) * width, width, dtype=np.int32)
        chunks.append(pa.Array.from_buffers(
            pa.binary(), len(part), [None, pa.py_buffer(offsets), pa.py_buffer(part)]))
    return pa.chunked_array(chunks, pa.binary())


def raw_pairs_table(boards: np.ndarray, moves: np.ndarray, to_move: np.ndarray,
                    plies: np.ndarray, hashes: np.ndarray, game_ids: pa.Array,
                    source: str, results: np.ndarray | None, size: int) -> pa.Table:
    """The intermediate layout of canonical pairs of cell boards (`board` the S * S cells)."""
    n = len(moves)
    if results is None:
        results = np.full(n, np.nan, np.float32)
    return pa.table({
        "board": binary_column(boards),
        "move": pa.array(moves, pa.int16()),
        "board_size": pa.array(np.full(n, size, np.int8)),
        "to_move": pa.array(np.asarray(to_move).astype(np.int8)),
        "ply": pa.array(np.asarray(plies).astype(np.int16)),
        "count": pa.array(np.ones(n, np.int32)),
        "position_hash": pa.array(hashes, pa.uint64()),
        "result": pa.array(np.asarray(results, np.float32), pa.float32()),
        "game_id": game_ids,
        "source": pa.repeat(pa.scalar(source, pa.string()), n),
    })
