"""Go records -> (position, next move) pairs in compact form, canonical under the 8 symmetries.

Each position is stored as the compact int8 [4, S, S] planes of services/games/go_features.py
seen from the player who moved, so a policy net gets liberties, recent moves and ko without
replaying the game. The canonical image is the one whose stones (channel 0) have the smallest
(Zobrist hash, move), ties between images broken on the bytes of all four planes; the same
symmetry is applied to every channel and to the move (a pass, S*S, is unchanged). The
position hash is that smallest stones hash, so all images of a position share a split.

Speed: the 8 stones hashes of a replayed game's positions are running XORs along the game
(`running_image_hashes`, from the moves and captures the replay reports), and the chosen
images are written with one strided copy per symmetry, not one index per cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import pyarrow as pa

from services.dataset.canonical import frozen_point_table, split_of, symmetry_zobrist
from services.games.go import BLACK, WHITE, replay
from services.games.go_fast import game_compact
from services.games.go_features import COMPACT_CHANNELS, compact
from services.games.symmetry import N_SYMMETRIES, transform_board
from services.records.sgf import SgfGame

_NO_MOVE = np.iinfo(np.int32).max


@dataclass(frozen=True)
class GoPairs:
    inputs: np.ndarray  # int8 [n, 4, S, S]
    moves: np.ndarray  # int16 [n], S*S = pass
    to_move: np.ndarray  # int8 [n]
    plies: np.ndarray  # int16 [n]
    results: np.ndarray  # float32 [n]: 1 the mover won, 0 lost, 0.5 draw, NaN unknown
    ranks: list[str]  # the mover's rank as the record gives it
    error: str | None
    # the replay's set-up position and captures ([m, 2] int32: move index, point), when it
    # reported them: the positions' symmetry hashes then run along the game
    initial: bytes | None = None
    captures: np.ndarray | None = None

    def image_hashes(self) -> np.ndarray | None:
        """uint64 [n, 8], the stones hash of every image of every position, when the replay
        reported its captures (else None: `canonicalize` hashes the boards)."""
        if self.captures is None or self.initial is None:
            return None
        return running_image_hashes(self.inputs.shape[-1], self.initial, self.to_move,
                                    self.moves, self.captures)


def game_pairs(game: SgfGame) -> GoPairs:
    """Replay the main line; an illegal move ends the pairs there (and is reported).

    Uses the incremental replay of services/games/go_fast.py, which writes every position's
    planes in one pass; the output is byte-identical to `game_pairs_reference`."""
    c = game_compact(game)
    return _pairs(game, c.inputs, c.moves, c.to_move, c.error, c.initial, c.captures)


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
           error: str | None, initial: bytes | None = None,
           captures: np.ndarray | None = None) -> GoPairs:
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
                   error, initial, captures)


def canonicalize(inputs: np.ndarray, moves: np.ndarray,
                 image_hashes: np.ndarray | None = None):
    """(canonical inputs, canonical moves, position hashes) for compact Go inputs.

    The canonical image of a pair is the one with the smallest (stones hash, move, full plane
    bytes) over its 8 images: the hash and move decide almost always; the bytes break the
    ties between images whose stones hash and move are equal but whose other planes differ
    (a symmetric shape of stones with asymmetric move ages or ko), so a pair and each of its
    mirror images have exactly one canonical form and always merge in dedup.

    `image_hashes`: uint64 [n, 8], the stones hash of each image when the caller has them
    (`running_image_hashes`); otherwise they are computed from the stones plane.
    """
    n, _, s, _ = inputs.shape
    area = s * s
    if image_hashes is None:
        image_hashes = board_image_hashes(inputs[:, 0].reshape(n, area), s)
    moves = np.asarray(moves)
    table = frozen_point_table(s)
    on_board = moves < area
    image_moves = np.where(on_board, table[:, np.where(on_board, moves, 0)],
                           moves).T  # [n, 8]
    smallest = image_hashes.min(axis=1, keepdims=True)
    tied = image_hashes == smallest
    least_move = np.where(tied, image_moves, _NO_MOVE).min(axis=1, keepdims=True)
    tied &= image_moves == least_move
    best = np.argmax(tied, axis=1)  # the first (smallest k) of the images still tied
    several = np.flatnonzero(tied.sum(axis=1) > 1)
    if len(several):
        best[several] = _least_bytes(inputs[several], tied[several])
    cols = np.arange(n)
    return (_images(inputs, best), image_moves[cols, best].astype(np.int16),
            image_hashes[cols, best])


def _least_bytes(inputs: np.ndarray, tied: np.ndarray) -> np.ndarray:
    """For each of a few rows: the symmetry, among its `tied` ones ([t, 8] bool), whose image
    of all the planes has the smallest bytes (the smallest k among equal images)."""
    images = np.stack([transform_board(inputs, k) for k in range(N_SYMMETRIES)], axis=1)
    flat = images.reshape(len(inputs), N_SYMMETRIES, -1)
    out = np.empty(len(inputs), dtype=np.intp)
    for i, (row, ks) in enumerate(zip(flat, tied, strict=True)):
        out[i] = min(np.flatnonzero(ks).tolist(), key=lambda k, row=row: row[k].tobytes())
    return out


def _images(inputs: np.ndarray, best: np.ndarray) -> np.ndarray:
    """inputs[i] moved by symmetry best[i], every plane: one strided copy per symmetry."""
    out = np.empty_like(inputs)
    for k in range(N_SYMMETRIES):
        rows = np.flatnonzero(best == k)
        if len(rows) == len(inputs):
            out[...] = transform_board(inputs, k)
        elif len(rows):
            out[rows] = transform_board(inputs[rows], k)
    return out


def board_image_hashes(stones: np.ndarray, size: int) -> np.ndarray:
    """uint64 [n, 8]: the Zobrist hash of each symmetry image of each flat board [n, S*S]
    (image k puts the cell at p on point_table[k, p]), from the boards' stones."""
    n = len(stones)
    rows, points = np.nonzero(stones)  # row-major: grouped by row
    keys = symmetry_zobrist(size)[:, points, stones[rows, points].astype(np.intp)]  # [8, m]
    hashes = np.zeros((n, N_SYMMETRIES), dtype=np.uint64)
    if len(rows):
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        hashes[rows[starts]] = np.bitwise_xor.reduceat(keys, starts, axis=1).T
    return hashes


@cache
def _mover_keys(size: int) -> np.ndarray:
    """uint64 [16, S*S, 3]: rows 0-7 the image keys of a stone of absolute colour c as Black
    sees it (own = 1 = Black), rows 8-15 as White sees it (its colour swapped)."""
    keys = symmetry_zobrist(size)
    out = np.concatenate([keys, keys[:, :, [0, 2, 1]]])
    out.flags.writeable = False
    return out




def running_image_hashes(size: int, initial: bytes, to_move: np.ndarray, moves: np.ndarray,
                         captures: np.ndarray) -> np.ndarray:
    """`board_image_hashes` of the stones plane of every position of a replayed game (seen
    from its mover), without looking at the boards: each image's hash is a running XOR of
    one key per stone placed (a move) or removed (a capture), one pass over the game's
    changes instead of one over every stone of every position.

    `initial`: the set-up position (flat bytes, absolute colours); `to_move`, `moves` (S*S =
    pass): the applied moves; `captures`: int32 [m, 2], (index of the capturing move, point).
    """
    n, area = len(moves), size * size
    keys = _mover_keys(size)
    placed = np.flatnonzero(moves < area)
    seen = np.concatenate([placed + 1, captures[:, 0] + 1])  # first position without/with it
    points = np.concatenate([moves[placed], captures[:, 1]]).astype(np.intp)
    colours = np.concatenate([to_move[placed], 3 - to_move[captures[:, 0]]]).astype(np.intp)
    if len(captures):
        order = np.argsort(seen, kind="stable")
        seen, points, colours = seen[order], points[order], colours[order]
    running = np.zeros((2 * N_SYMMETRIES, len(seen) + 1), dtype=np.uint64)
    np.bitwise_xor.accumulate(keys[:, points, colours], axis=1, out=running[:, 1:])
    hashes = running[:, np.searchsorted(seen, np.arange(n), side="right")]  # [16, n]
    start = np.frombuffer(initial, dtype=np.int8)
    stones = np.flatnonzero(start)
    if len(stones):
        hashes ^= np.bitwise_xor.reduce(keys[:, stones, start[stones].astype(np.intp)],
                                        axis=1)[:, None]
    return np.where(to_move == WHITE, hashes[N_SYMMETRIES:], hashes[:N_SYMMETRIES]).T


# Packed planes: the compact planes' values are small (stones 0-2, liberties and ages 0-4,
# ko 0-1), so each plane packs into bytes that hold several cells: 5 cells of base 3, 3 of
# base 5, 8 of base 2 (19x19: 1,444 bytes -> 361). Cells are digits, the first most
# significant, so the packing is a bijection that keeps the byte order: packed boards are
# equal exactly when the boards are, and sort as the boards do (why dedup groups and sorts
# them: a quarter of the bytes to hash, compare, spill and sort).
PACKED_BOARD = "packed_board"  # the column of packed boards in a Go intermediate
_PLANE_RADIX = (3, 5, 5, 2)
_PLANE_DIGITS = (5, 3, 3, 8)  # cells per byte: radix ** digits <= 256


def packed_width(size: int) -> int:
    """Bytes of a packed board of the given board size."""
    area = size * size
    return sum(-(-area // d) for d in _PLANE_DIGITS)


@cache
def _digit_table(radix: int, digits: int) -> np.ndarray:
    """uint8 [radix ** digits, digits]: the digits of each byte value, first most significant."""
    values = np.arange(radix ** digits)
    powers = radix ** np.arange(digits - 1, -1, -1)
    table = (values[:, None] // powers % radix).astype(np.uint8)
    table.flags.writeable = False
    return table


def pack_planes(boards: np.ndarray, size: int) -> np.ndarray:
    """uint8 [n, packed_width(size)]: compact boards (int8 or uint8 [n, 4 * size * size], the
    plane bytes) packed. A value outside its plane's range raises ValueError (the packing
    would not be a bijection)."""
    n, area = len(boards), size * size
    planes = np.asarray(boards).view(np.uint8).reshape(n, COMPACT_CHANNELS, area)
    out = np.empty((n, packed_width(size)), np.uint8)
    at = 0
    for c, (radix, digits) in enumerate(zip(_PLANE_RADIX, _PLANE_DIGITS, strict=True)):
        plane = planes[:, c]
        if n and int(plane.max()) >= radix:
            raise ValueError(f"compact plane {c} holds {int(plane.max())}, outside 0-{radix - 1}")
        width = -(-area // digits)
        if radix == 2:
            out[:, at:at + width] = np.packbits(plane, axis=1)
        else:
            padded = np.zeros((n, width * digits), np.uint8)
            padded[:, :area] = plane
            padded = padded.reshape(n, width, digits)
            code = padded[:, :, 0].copy()
            for d in range(1, digits):
                code *= radix
                code += padded[:, :, d]
            out[:, at:at + width] = code
        at += width
    return out


def unpack_planes(packed: np.ndarray, size: int, out: np.ndarray | None = None) -> np.ndarray:
    """`pack_planes` undone: uint8 [n, 4 * size * size] plane bytes (into `out`, of that many
    bytes, when given)."""
    n, area = len(packed), size * size
    if out is None:
        out = np.empty((n, COMPACT_CHANNELS, area), np.uint8)
    out = out.reshape(n, COMPACT_CHANNELS, area)
    at = 0
    for c, (radix, digits) in enumerate(zip(_PLANE_RADIX, _PLANE_DIGITS, strict=True)):
        width = -(-area // digits)
        part = packed[:, at:at + width]
        if radix == 2:
            out[:, c] = np.unpackbits(part, axis=1, count=area)
        else:
            table = _digit_table(radix, digits)
            out[:, c] = np.take(table, part, axis=0).reshape(n, width * digits)[:, :area]
        at += width
    return out.reshape(n, COMPACT_CHANNELS * area)


def pairs_table(pairs: GoPairs, game_id: str, source: str, rule: str = "") -> pa.Table:
    """One row per occurrence, canonicalised (count 1), in the shards' column layout."""
    return pairs_tables([pairs], [game_id], source, [rule])


def pairs_tables(games: Sequence[GoPairs], game_ids: Sequence[str], source: str,
                 rules: Sequence[str]) -> pa.Table:
    """`pairs_table` of many games as one table (the games' rows one after the other).

    Why batched: per game the numpy and Arrow calls cost more than the work in them (a
    19x19 game has ~200 positions); over a batch the symmetry images are one strided copy
    per symmetry and every column one array."""
    games = list(games)
    if not games:
        return pairs_table(GoPairs(np.zeros((0, COMPACT_CHANNELS, 0, 0), np.int8),
                                   np.empty(0, np.int16), np.empty(0, np.int8),
                                   np.empty(0, np.int16), np.empty(0, np.float32), [], None),
                           "", source)
    sizes = [g.inputs.shape[-1] for g in games]
    if len(set(sizes)) > 1:  # one board size per array: runs of equal size, in order
        tables, start = [], 0
        for i in range(1, len(games) + 1):
            if i == len(games) or sizes[i] != sizes[start]:
                tables.append(pairs_tables(games[start:i], game_ids[start:i], source,
                                           rules[start:i]))
                start = i
        return pa.concat_tables(tables)
    size = sizes[0]
    lengths = np.array([len(g.moves) for g in games], dtype=np.int64)
    n = int(lengths.sum())
    width = COMPACT_CHANNELS * size * size
    if n * width >= 2**31 and len(games) > 1:  # binary offsets are 32-bit: two tables
        half = len(games) // 2
        return pa.concat_tables([
            pairs_tables(games[:half], game_ids[:half], source, rules[:half]),
            pairs_tables(games[half:], game_ids[half:], source, rules[half:])])
    inputs = np.concatenate([g.inputs for g in games])
    moves = np.concatenate([g.moves for g in games])
    hashes = [g.image_hashes() for g in games]
    image_hashes = (np.concatenate(hashes) if all(h is not None for h in hashes) else None)
    if n:
        canon, moves, position_hash = canonicalize(inputs, moves, image_hashes)
    else:
        canon, position_hash = inputs, np.zeros(0, np.uint64)
    del inputs
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    data = pa.py_buffer(np.ascontiguousarray(canon).reshape(-1).view(np.uint8))
    board = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), data])
    game_of_row = np.repeat(np.arange(len(games)), lengths)
    ranks = pa.array([r for g in games for r in g.ranks], pa.string())
    return pa.table({
        "game": pa.array(["go"], pa.string()).take(np.zeros(n, np.int32)),
        "rule": pa.array(list(rules), pa.string()).take(game_of_row),
        "board_size": pa.array(np.full(n, size, np.int8)),
        "board": board,
        "move": pa.array(moves, pa.int16()),
        "to_move": pa.array(np.concatenate([g.to_move for g in games]).astype(np.int8)),
        "ply": pa.array(np.concatenate([g.plies for g in games]).astype(np.int16)),
        "count": pa.array(np.ones(n, np.int32)),
        "position_hash": pa.array(position_hash, pa.uint64()),
        "result": pa.array(np.concatenate([g.results for g in games]).astype(np.float32),
                           pa.float32()),
        "mover_rank": ranks,
        "game_id": pa.array(list(game_ids), pa.string()).take(game_of_row),
        "source": pa.array([source], pa.string()).take(np.zeros(n, np.int32)),
    })


__all__ = ["PACKED_BOARD", "GoPairs", "board_image_hashes", "canonicalize", "game_pairs",
           "game_pairs_reference", "pack_planes", "packed_width", "pairs_table", "pairs_tables",
           "running_image_hashes", "split_of", "unpack_planes"]
