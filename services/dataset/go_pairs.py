"""Go records -> (position, next move) pairs in compact form, canonical under the 8 symmetries.

Each position is stored as the compact int8 [4, S, S] planes of services/games/go_features.py
seen from the player who moved, so a policy net gets liberties, recent moves and ko without
replaying the game. The canonical image is the one whose stones (channel 0) have the smallest
(Zobrist hash, move); the same symmetry is applied to every channel and to the move (a pass,
S*S, is unchanged). The position hash is that smallest stones hash, so all images of a
position share a split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from services.dataset.canonical import split_of, zobrist
from services.games.go import BLACK, WHITE, replay
from services.games.go_fast import game_compact
from services.games.go_features import COMPACT_CHANNELS, compact
from services.games.symmetry import N_SYMMETRIES, point_table
from services.records.sgf import SgfGame


@dataclass(frozen=True)
class GoPairs:
    inputs: np.ndarray  # int8 [n, 4, S, S]
    moves: np.ndarray  # int16 [n], S*S = pass
    to_move: np.ndarray  # int8 [n]
    plies: np.ndarray  # int16 [n]
    results: np.ndarray  # float32 [n]: 1 the mover won, 0 lost, 0.5 draw, NaN unknown
    ranks: list[str]  # the mover's rank as the record gives it
    error: str | None


def game_pairs(game: SgfGame) -> GoPairs:
    """Replay the main line; an illegal move ends the pairs there (and is reported).

    Uses the incremental replay of services/games/go_fast.py, which writes every position's
    planes in one pass; the output is byte-identical to `game_pairs_reference`."""
    c = game_compact(game)
    return _pairs(game, c.inputs, c.moves, c.to_move, c.error)


def game_pairs_reference(game: SgfGame) -> GoPairs:
    """The simple implementation `game_pairs` must match: `replay` keeping every `GoState`,
    then `compact` (a full-board liberty count) per position."""
    rep = replay(game, keep_states=True)
    n = rep.played
    s = game.size
    inputs = np.zeros((n, COMPACT_CHANNELS, s, s), dtype=np.int8)
    moves = np.empty(n, dtype=np.int16)
    to_move = np.empty(n, dtype=np.int8)
    for i in range(n):
        color, point = game.moves[i]
        inputs[i] = compact(rep.states[i], to_move=color)
        moves[i] = s * s if point is None else point
        to_move[i] = color
    return _pairs(game, inputs, moves, to_move, rep.error)


def _pairs(game: SgfGame, inputs: np.ndarray, moves: np.ndarray, to_move: np.ndarray,
           error: str | None) -> GoPairs:
    """Results (from the mover's side) and ranks around the replayed inputs."""
    n = len(moves)
    if game.winner in (BLACK, WHITE):
        results = np.where(to_move == game.winner, 1.0, 0.0).astype(np.float32)
    elif game.winner == 0:
        results = np.full(n, 0.5, dtype=np.float32)
    else:
        results = np.full(n, np.nan, dtype=np.float32)
    ranks = [game.black_rank if c == BLACK else game.white_rank for c in to_move.tolist()]
    return GoPairs(inputs, moves, to_move, np.arange(n, dtype=np.int16), results, ranks,
                   error)


def canonicalize(inputs: np.ndarray, moves: np.ndarray):
    """(canonical inputs, canonical moves, position hashes) for compact Go inputs."""
    n, c, s, _ = inputs.shape
    points = s * s
    table = point_table(s)
    flat = inputs.reshape(n, c, points)
    hashes = np.empty((N_SYMMETRIES, n), dtype=np.uint64)
    image_moves = np.empty((N_SYMMETRIES, n), dtype=np.int16)
    stones = np.empty((n, points), dtype=np.int8)
    on_board = moves < points
    for k in range(N_SYMMETRIES):
        stones[:, table[k]] = flat[:, 0]
        hashes[k] = zobrist(stones, s)
        image_moves[k] = np.where(on_board, table[k][np.minimum(moves, points - 1)], moves)
    order = np.lexsort((np.arange(N_SYMMETRIES)[:, None].repeat(n, 1), image_moves, hashes),
                       axis=0)
    best = order[0]
    cols = np.arange(n)
    out = np.empty_like(flat)
    out[cols[:, None, None], np.arange(c)[None, :, None], table[best][:, None, :]] = flat
    return out.reshape(inputs.shape), image_moves[best, cols], hashes[best, cols]


def pairs_table(pairs: GoPairs, game_id: str, source: str, rule: str = "") -> pa.Table:
    """One row per occurrence, canonicalised (count 1), in the shards' column layout."""
    n = len(pairs.moves)
    size = pairs.inputs.shape[-1] if n else 0
    canon, moves, hashes = (canonicalize(pairs.inputs, pairs.moves) if n
                            else (pairs.inputs, pairs.moves, np.zeros(0, np.uint64)))
    width = COMPACT_CHANNELS * size * size
    data = np.ascontiguousarray(canon).reshape(-1).view(np.uint8)
    offsets = np.arange(n + 1, dtype=np.int32) * width
    board = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                   pa.py_buffer(data.tobytes())])
    return pa.table({
        "game": pa.array(["go"] * n, pa.string()),
        "rule": pa.array([rule] * n, pa.string()),
        "board_size": pa.array(np.full(n, size, np.int8)),
        "board": board,
        "move": pa.array(moves, pa.int16()),
        "to_move": pa.array(pairs.to_move),
        "ply": pa.array(pairs.plies),
        "count": pa.array(np.ones(n, np.int32)),
        "position_hash": pa.array(hashes, pa.uint64()),
        "result": pa.array(pairs.results, pa.float32()),
        "mover_rank": pa.array(pairs.ranks, pa.string()),
        "game_id": pa.array([game_id] * n, pa.string()),
        "source": pa.array([source] * n, pa.string()),
    })


__all__ = ["GoPairs", "canonicalize", "game_pairs", "game_pairs_reference", "pairs_table",
           "split_of"]
