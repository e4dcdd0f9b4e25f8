"""Go records -> (position, next move) pairs in compact form, canonical under the 8 symmetries.

Each position is stored as the compact int8 [4, S, S] planes of services/games/go/features.py
seen from the player who moved, so a policy net gets liberties, recent moves and ko without
replaying the game. The canonical image is the one whose stones (channel 0) have the smallest
(Zobrist hash, move), ties between images broken on the bytes of all four planes; the same
symmetry is applied to every channel and to the move (a pass, S*S, is unchanged). The
position hash is that smallest stones hash, so all images of a position share a split.

Speed: the 8 stones hashes of a replayed game's positions come from the compiled replay
(`services.games.go.fast`: running XORs along the game); the choice of each position's image
and the writing of it are compiled loops (numba, cached on disk) that read each board once
and materialise no other image. The Parquet intermediates' path (`game_packed_pairs`) goes
further: one kernel replays the game, chooses each position's image as it reaches it and
packs that image straight from the replay's board, so no position's planes are written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
from numba import njit

from services.games.base import SourceResult, quarantine_row
from services.games.canonical import frozen_point_table, symmetry_zobrist
from services.games.go.fast import (
    LEGAL,
    OFF_BOARD_MOVE,
    PASS,
    game_compact,
    game_start,
    move_arrays,
    move_error,
    play,
    start_state,
)
from services.games.go.features import COMPACT_CHANNELS, MAX_LIBERTIES, RECENT_MOVES
from services.games.go.rules import BLACK, GAME_NAME, TRUNCATED, TRUNCATED_NOTE, WHITE
from services.games.grid_kernels import neighbour_table
from services.games.symmetry import N_SYMMETRIES
from services.records.sgf import SgfGame, SgfRejected, read_archive, read_sgf

# rows of games canonicalised and tabled together: big enough that numpy and Arrow calls
# are few, small enough (~12 MB of boards) that the memory is reused, not faulted in anew
TABLE_ROWS = 1 << 13


@dataclass(frozen=True)
class GoPairs:
    inputs: np.ndarray  # int8 [n, 4, S, S]
    moves: np.ndarray  # int16 [n], S*S = pass
    to_move: np.ndarray  # int8 [n]
    plies: np.ndarray  # int16 [n]
    results: np.ndarray  # float32 [n]: 1 the mover won, 0 lost, 0.5 draw, NaN unknown
    ranks: list[str]  # the mover's rank as the record gives it
    error: str | None
    # uint64 [n, 8], the stones hash of every image of every position, when the replay
    # reported them (else `canonicalize` hashes the boards)
    hashes: np.ndarray | None = None

    def image_hashes(self) -> np.ndarray | None:
        """uint64 [n, 8], the stones hash of every image of every position, when the replay
        reported them (else None: `canonicalize` hashes the boards)."""
        return self.hashes


def game_pairs(game: SgfGame) -> GoPairs:
    """Replay the main line; an illegal move ends the pairs there (and is reported).

    Uses the compiled incremental replay of services/games/go/fast.py, which writes every
    position's planes and stones hashes in one pass; the output is byte-identical to what
    `replay` + `compact` give (tests/go_reference.py)."""
    c = game_compact(game, symmetry_zobrist(game.size))
    return pairs_of(game, c.inputs, c.moves, c.to_move, c.error, c.image_hashes)


def pairs_of(game: SgfGame, inputs: np.ndarray, moves: np.ndarray, to_move: np.ndarray,
             error: str | None, hashes: np.ndarray | None = None) -> GoPairs:
    """Results (from the mover's side) and ranks around the replayed inputs."""
    results, ranks = _results_and_ranks(game, to_move)
    return GoPairs(inputs, moves, to_move, np.arange(len(moves), dtype=np.int16), results,
                   ranks, error, hashes)


def _results_and_ranks(game: SgfGame, to_move: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Each position's result from its mover's side and the mover's rank."""
    ranks = [game.black_rank if c == BLACK else game.white_rank for c in to_move.tolist()]
    return _results(game, to_move), ranks


def _results(game: SgfGame, to_move: np.ndarray) -> np.ndarray:
    """float32 [n]: 1 the mover won, 0 lost, 0.5 draw, NaN unknown."""
    n = len(to_move)
    if game.winner in (BLACK, WHITE):
        return np.where(to_move == game.winner, 1.0, 0.0).astype(np.float32)
    if game.winner == 0:
        return np.full(n, 0.5, dtype=np.float32)
    return np.full(n, np.nan, dtype=np.float32)


def canonicalize(inputs: np.ndarray, moves: np.ndarray,
                 image_hashes: np.ndarray | None = None):
    """(canonical inputs, canonical moves, position hashes) for compact Go inputs.

    The canonical image of a pair is the one with the smallest (stones hash, move, full plane
    bytes) over its 8 images: the hash and move decide almost always; the bytes break the
    ties between images whose stones hash and move are equal but whose other planes differ
    (a symmetric shape of stones with asymmetric move ages or ko), so a pair and each of its
    mirror images have exactly one canonical form and always merge in dedup.

    `image_hashes`: uint64 [n, 8], the stones hash of each image when the caller has them
    (the replay's); otherwise they are computed from the stones plane.
    """
    n, _, s, _ = inputs.shape
    boards, best, canon_moves, position_hash = _choice(inputs, moves, image_hashes)
    out = np.empty((n, COMPACT_CHANNELS * s * s), np.uint8)
    _write_images(boards, best, _inverse_table(s), out)
    return out.view(np.int8).reshape(inputs.shape), canon_moves, position_hash


def canonicalize_packed(inputs: np.ndarray, moves: np.ndarray,
                        image_hashes: np.ndarray | None = None):
    """`canonicalize` with the canonical boards packed (`pack_planes`): uint8 [n,
    packed_width(S)], packed board by board as each image is chosen (the batch's unpacked
    images are never materialised)."""
    boards, best, canon_moves, position_hash = _choice(inputs, moves, image_hashes)
    return _packed_images(boards, best, inputs.shape[-1]), canon_moves, position_hash


def _choice(inputs: np.ndarray, moves: np.ndarray, image_hashes: np.ndarray | None):
    """(the boards as uint8 [n, 4 * S * S], the canonical symmetry of each, its move, its
    stones hash)."""
    n, _, s, _ = inputs.shape
    area = s * s
    boards = np.ascontiguousarray(inputs).view(np.uint8).reshape(n, COMPACT_CHANNELS * area)
    if image_hashes is None:
        image_hashes = board_image_hashes(boards[:, :area], s)
    best = np.empty(n, np.int8)
    canon_moves = np.empty(n, np.int16)
    position_hash = np.empty(n, np.uint64)
    _choose_images(boards, np.asarray(moves).astype(np.int64, copy=False),
                   np.ascontiguousarray(image_hashes, np.uint64), frozen_point_table(s),
                   _inverse_table(s), best, canon_moves, position_hash)
    return boards, best, canon_moves, position_hash


@cache
def _inverse_table(size: int) -> np.ndarray:
    """int32 [8, S*S]: inverse[k, q] = the point that symmetry k moves to q, so image k of a
    plane is `plane[inverse[k]]` (read-only, one per size)."""
    table = frozen_point_table(size)
    inverse = np.empty_like(table)
    for k in range(N_SYMMETRIES):
        inverse[k, table[k]] = np.arange(size * size, dtype=table.dtype)
    inverse.flags.writeable = False
    return inverse


@njit(cache=True)
def _image_less(board, k1, k2, inverse):
    """Whether image k1 of `board` (all planes, uint8) has smaller bytes than image k2."""
    area = inverse.shape[1]
    for c in range(COMPACT_CHANNELS):
        at = c * area
        for q in range(area):
            a = board[at + inverse[k1, q]]
            b = board[at + inverse[k2, q]]
            if a != b:
                return a < b
    return False


@njit(cache=True)
def _choose_images(boards, moves, hashes, table, inverse, best, canon_moves, position_hash):
    """For each row: the symmetry with the smallest (stones hash, move, image bytes), the
    smallest k among equal images; its move and hash."""
    area = table.shape[1]
    for i in range(boards.shape[0]):
        m = moves[i]
        chosen = 0
        chosen_move = table[0, m] if m < area else m
        for k in range(1, N_SYMMETRIES):
            image_move = table[k, m] if m < area else m
            h, least = hashes[i, k], hashes[i, chosen]
            if h < least or (h == least and (
                    image_move < chosen_move or (image_move == chosen_move and _image_less(
                        boards[i], k, chosen, inverse)))):
                chosen = k
                chosen_move = image_move
        best[i] = chosen
        canon_moves[i] = chosen_move
        position_hash[i] = hashes[i, chosen]


@njit(cache=True)
def _write_images(boards, best, inverse, out):
    """out[i] = image best[i] of boards[i], every plane."""
    area = inverse.shape[1]
    for i in range(boards.shape[0]):
        k = best[i]
        for c in range(COMPACT_CHANNELS):
            at = c * area
            for q in range(area):
                out[i, at + q] = boards[i, at + inverse[k, q]]


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


_PAD = 120  # a multiple of every plane's cells per byte: planes padded to it pack whole


@njit(cache=True)
def _pack_images(boards, best, table, inverse, out, maxima):
    """out[i] = image best[i] of boards[i] packed; maxima[c]: the largest value of plane c
    seen (a value beyond the plane's radix packs wrongly: the caller refuses it).

    The dense planes (stones, liberties) are gathered into a zero-padded scratch row first,
    so that the packing loops run over contiguous cells with constant radices and digit
    counts (the compiler unrolls them). The sparse ones (move ages: the last few moves; ko:
    one point at most) are packed by adding each nonzero cell's digit at its image point
    into zeroed bytes. The layout is `_PLANE_RADIX` / `_PLANE_DIGITS`, spelled out here."""
    area = inverse.shape[1]
    pad = -(-area // _PAD) * _PAD
    image = np.zeros(2 * pad, np.uint8)
    w3, w5, w8 = -(-area // 3), -(-area // 5), -(-area // 8)
    for i in range(boards.shape[0]):
        k = best[i]
        for c in range(2):
            src, dst = c * area, c * pad
            most = np.uint8(0)
            for q in range(area):
                v = boards[i, src + inverse[k, q]]
                image[dst + q] = v
                if v > most:
                    most = v
            if most > maxima[c]:
                maxima[c] = most
        row = out[i]
        for b in range(w5):  # stones: 5 cells of base 3
            j = 5 * b
            row[b] = (((image[j] * 3 + image[j + 1]) * 3 + image[j + 2]) * 3
                      + image[j + 3]) * 3 + image[j + 4]
        for b in range(w3):  # liberties: 3 cells of base 5
            j = pad + 3 * b
            row[w5 + b] = (image[j] * 5 + image[j + 1]) * 5 + image[j + 2]
        ages, ko = w5 + w3, w5 + 2 * w3
        row[ages:ko + w8] = 0
        for p in range(area):
            v = boards[i, 2 * area + p]
            if v:  # move ages: 3 cells of base 5
                if v > maxima[2]:
                    maxima[2] = v
                q = table[k, p]
                row[ages + q // 3] += v * (25 if q % 3 == 0 else (5 if q % 3 == 1 else 1))
            v = boards[i, 3 * area + p]
            if v:  # ko: 8 cells of base 2
                if v > maxima[3]:
                    maxima[3] = v
                q = table[k, p]
                row[ko + q // 8] += v << (7 - q % 8)


@njit(cache=True)
def _unpack_rows(packed, area, base3, base5, base2, out):
    """`_pack_images` of the identity undone: out[i] (uint8 [4 * area]) from packed[i];
    `baseR`: the digits of each byte value in base R, first most significant. The whole
    bytes of a plane are spread with constant digit counts (unrolled stores), a plane's
    last, partial byte digit by digit."""
    w3, w5, w8 = -(-area // 3), -(-area // 5), -(-area // 8)
    f3, f5, f8 = area // 3, area // 5, area // 8
    for i in range(packed.shape[0]):
        src = packed[i]
        dst = out[i]
        for b in range(f5):  # stones: 5 cells of base 3
            t = base3[src[b]]
            at = 5 * b
            dst[at] = t[0]
            dst[at + 1] = t[1]
            dst[at + 2] = t[2]
            dst[at + 3] = t[3]
            dst[at + 4] = t[4]
        for b in range(f5, w5):
            for d in range(area - 5 * b):
                dst[5 * b + d] = base3[src[b], d]
        at = w5
        for c in range(1, 3):  # liberties, move ages: 3 cells of base 5
            plane = c * area
            for b in range(f3):
                t = base5[src[at + b]]
                o = plane + 3 * b
                dst[o] = t[0]
                dst[o + 1] = t[1]
                dst[o + 2] = t[2]
            for b in range(f3, w3):
                for d in range(area - 3 * b):
                    dst[plane + 3 * b + d] = base5[src[at + b], d]
            at += w3
        plane = 3 * area
        for b in range(f8):  # ko: 8 cells of base 2
            t = base2[src[at + b]]
            o = plane + 8 * b
            for d in range(8):
                dst[o + d] = t[d]
        for b in range(f8, w8):
            for d in range(area - 8 * b):
                dst[plane + 8 * b + d] = base2[src[at + b], d]


def _packed_images(boards: np.ndarray, best: np.ndarray, size: int) -> np.ndarray:
    """uint8 [n, packed_width(size)]: image best[i] of each uint8 board [n, 4 * S * S], packed
    (ValueError for a value outside its plane's range: the packing would be no bijection)."""
    out = np.empty((len(boards), packed_width(size)), np.uint8)
    maxima = np.zeros(COMPACT_CHANNELS, np.int64)
    _pack_images(boards, best, frozen_point_table(size), _inverse_table(size), out, maxima)
    for c, radix in enumerate(_PLANE_RADIX):
        if maxima[c] >= radix:
            raise ValueError(f"compact plane {c} holds {int(maxima[c])}, outside 0-{radix - 1}")
    return out


def pack_planes(boards: np.ndarray, size: int) -> np.ndarray:
    """uint8 [n, packed_width(size)]: compact boards (int8 or uint8 [n, 4 * size * size], the
    plane bytes) packed. A value outside its plane's range raises ValueError (the packing
    would not be a bijection)."""
    n = len(boards)
    flat = np.ascontiguousarray(boards).view(np.uint8).reshape(n, COMPACT_CHANNELS * size * size)
    return _packed_images(flat, np.zeros(n, np.int8), size)


def unpack_planes(packed: np.ndarray, size: int, out: np.ndarray | None = None) -> np.ndarray:
    """`pack_planes` undone: uint8 [n, 4 * size * size] plane bytes (into `out`, of that many
    bytes, when given)."""
    n, area = len(packed), size * size
    if out is None:
        out = np.empty((n, COMPACT_CHANNELS * area), np.uint8)
    out = out.reshape(n, COMPACT_CHANNELS * area)
    _unpack_rows(np.ascontiguousarray(packed, np.uint8).reshape(n, packed_width(size)), area,
                 _digit_table(3, 5), _digit_table(5, 3), _digit_table(2, 8), out)
    return out


@cache
def _digit_table(radix: int, digits: int) -> np.ndarray:
    """uint8 [256, digits]: the digits of each byte value in base `radix`, first most
    significant (bytes beyond radix ** digits never occur in a packed board)."""
    values = np.arange(256)
    powers = radix ** np.arange(digits - 1, -1, -1)
    table = (values[:, None] // powers % radix).astype(np.uint8)
    table.flags.writeable = False
    return table


# ---- the replay, canonical choice and packing in one pass (the intermediates' path) ------
@dataclass(frozen=True)
class PackedPairs:
    """A replayed main line as the Parquet intermediates hold it: each position's canonical
    image packed (`boards`, what `canonicalize_packed` gives for `game_pairs`' inputs),
    canonical `moves`, `position_hash`, and the columns `GoPairs` has."""

    boards: np.ndarray  # uint8 [n, packed_width(size)]
    moves: np.ndarray  # int16 [n], canonical (S*S = pass)
    position_hash: np.ndarray  # uint64 [n]
    to_move: np.ndarray  # int8 [n]
    plies: np.ndarray  # int16 [n]
    results: np.ndarray  # float32 [n]
    rank_pair: tuple[str, str]  # (Black's, White's) rank as the record gives them
    error: str | None
    size: int

    @property
    def ranks(self) -> list[str]:
        """The mover's rank of each position (`GoPairs.ranks`)."""
        return [self.rank_pair[c == WHITE] for c in self.to_move.tolist()]


def game_packed_pairs(game: SgfGame) -> PackedPairs:
    """`game_pairs` + `canonicalize_packed` in one compiled pass (`_replay_packed`): no
    position's planes are written out, each is packed straight from the replay's board in
    its canonical image. The same rows, byte for byte (tests/test_go_pairs.py)."""
    size = game.size
    start = game_start(game)
    if isinstance(start, str):
        return _packed_pairs(game, np.zeros((0, packed_width(size)), np.uint8),
                             np.empty(0, np.int16), np.empty(0, np.uint64),
                             np.empty(0, np.int8), start, size)
    colours, points = move_arrays(game.moves)
    n = len(colours)
    boards = np.empty((n, packed_width(size)), np.uint8)
    canon_moves = np.empty(n, np.int16)
    position_hash = np.empty(n, np.uint64)
    played, why = _replay_packed(np.frombuffer(start, np.uint8), colours, points,
                                 neighbour_table(size), symmetry_zobrist(size),
                                 frozen_point_table(size), _inverse_table(size), boards,
                                 canon_moves, position_hash)
    error = None if why == LEGAL else move_error(played, *game.moves[played], size, why)
    return _packed_pairs(game, boards[:played], canon_moves[:played], position_hash[:played],
                         colours[:played], error, size)


def _packed_pairs(game: SgfGame, boards: np.ndarray, moves: np.ndarray,
                  position_hash: np.ndarray, to_move: np.ndarray, error: str | None,
                  size: int) -> PackedPairs:
    results = _results(game, to_move)
    return PackedPairs(boards, moves, position_hash, to_move,
                       np.arange(len(moves), dtype=np.int16), results,
                       (game.black_rank, game.white_rank), error, size)


if _PLANE_RADIX[1] <= MAX_LIBERTIES or _PLANE_RADIX[2] <= RECENT_MOVES:
    raise ImportError("the packed layout cannot hold the compact planes' liberties / ages")


@njit(cache=True)
def _replay_packed(cells0, colours, points, nbrs, keys, table, inverse, out, canon_moves,
                   position_hash):
    """`_replay`'s game (services/games/go/fast.py), each position written as
    `_choose_images` + `_pack_images` would write its planes: the symmetry with the
    smallest (stones hash, move, image bytes), packed. The image bytes are only built for a
    tie on (hash, move) (symmetric positions: the empty board, early openings). Returns
    (moves applied, why the replay stopped)."""
    area = cells0.shape[0]
    n = colours.shape[0]
    cells, root, nxt, gsize, libp, mark, seen, clock, hashes, scratch, gained, ko = \
        start_state(cells0, nbrs, keys)
    board = np.zeros(COMPACT_CHANNELS * area, np.uint8)  # a position's planes, for ties
    ages = np.zeros(area, np.uint8)
    view = np.zeros(3, np.uint8)
    w3, w5, w8 = -(-area // 3), -(-area // 5), -(-area // 8)
    f3, f5 = area // 3, area // 5
    for j in range(n):
        colour = colours[j]
        point = points[j]
        if point != PASS and (point < 0 or point >= area):
            return j, OFF_BOARD_MOVE
        half = N_SYMMETRIES if colour == WHITE else 0
        m = area if point == PASS else point
        chosen = 0
        chosen_move = table[0, m] if m < area else m
        built = False
        for k in range(1, N_SYMMETRIES):
            image_move = table[k, m] if m < area else m
            h, least = hashes[half + k], hashes[half + chosen]
            if h > least or (h == least and image_move > chosen_move):
                continue
            if h == least and image_move == chosen_move:
                if not built:
                    _position_planes(j, colour, points, cells, libp, ko, board)
                    built = True
                if not _image_less(board, k, chosen, inverse):
                    continue
            chosen = k
            chosen_move = image_move
        canon_moves[j] = chosen_move
        position_hash[j] = hashes[half + chosen]
        view[1] = 1 if colour == BLACK else 2
        view[2] = 3 - view[1]
        inv = inverse[chosen]  # image point q shows the board's point inv[q]
        row = out[j]
        for b in range(f5):  # stones: 5 cells of base 3, gathered straight from the board
            i = 5 * b
            row[b] = (((view[cells[inv[i]]] * 3 + view[cells[inv[i + 1]]]) * 3
                       + view[cells[inv[i + 2]]]) * 3 + view[cells[inv[i + 3]]]) * 3 \
                + view[cells[inv[i + 4]]]
        for b in range(f5, w5):  # the partial last byte: zero cells past the board
            code = 0
            for q in range(5 * b, 5 * b + 5):
                code = code * 3 + (view[cells[inv[q]]] if q < area else 0)
            row[b] = code
        for b in range(f3):  # liberties: 3 cells of base 5
            i = 3 * b
            row[w5 + b] = (libp[inv[i]] * 5 + libp[inv[i + 1]]) * 5 + libp[inv[i + 2]]
        for b in range(f3, w3):
            code = 0
            for q in range(3 * b, 3 * b + 3):
                code = code * 5 + (libp[inv[q]] if q < area else 0)
            row[w5 + b] = code
        at_ages, at_ko = w5 + w3, w5 + 2 * w3
        row[at_ages:at_ko + w8] = 0
        for age in range(RECENT_MOVES, 0, -1):  # oldest first: the newest wins on a point
            i = j - age
            if i >= 0 and 0 <= points[i] < area:
                ages[points[i]] = age
        for age in range(RECENT_MOVES, 0, -1):
            i = j - age
            if i >= 0 and 0 <= points[i] < area and ages[points[i]]:
                q = table[chosen, points[i]]
                v = ages[points[i]]
                row[at_ages + q // 3] += v * (25 if q % 3 == 0 else (5 if q % 3 == 1 else 1))
                ages[points[i]] = 0
        if ko[0] >= 0:
            q = table[chosen, ko[0]]
            row[at_ko + q // 8] += 1 << (7 - q % 8)
        if point == PASS:
            ko[0] = -1
            continue
        why = play(point, colour, cells, root, nxt, gsize, libp, mark, seen, clock, nbrs, keys,
                   hashes, ko, scratch, gained)
        if why != LEGAL:
            return j, why
    return n, LEGAL


@njit(cache=True)
def _position_planes(j, colour, points, cells, libp, ko, board):
    """`board` (uint8 [4 * area]) = position j's compact planes, as `_replay` writes them."""
    area = cells.shape[0]
    for p in range(area):
        v = cells[p]
        board[p] = 0 if v == 0 else (1 if v == colour else 2)
        board[area + p] = libp[p]
    board[2 * area:] = 0
    for age in range(RECENT_MOVES, 0, -1):
        i = j - age
        if i >= 0 and 0 <= points[i] < area:
            board[2 * area + points[i]] = age
    if ko[0] >= 0:
        board[3 * area + ko[0]] = 1


def packed_pairs_tables(games: Sequence[PackedPairs], game_ids: Sequence[str], source: str,
                        rules: Sequence[str]) -> pa.Table:
    """`pairs_tables(..., packed=True)` of the games `game_packed_pairs` replayed."""
    games = list(games)
    sizes = [g.size for g in games]
    if len(set(sizes)) > 1:  # one board size per array: runs of equal size, in order
        tables, start = [], 0
        for i in range(1, len(games) + 1):
            if i == len(games) or sizes[i] != sizes[start]:
                tables.append(packed_pairs_tables(games[start:i], game_ids[start:i], source,
                                                  rules[start:i]))
                start = i
        return pa.concat_tables(tables)
    boards = np.concatenate([g.boards for g in games])
    return _pairs_columns(games, game_ids, source, rules, sizes[0], PACKED_BOARD,
                          fixed_binary(boards), np.concatenate([g.moves for g in games]),
                          np.concatenate([g.position_hash for g in games]))


def pairs_table(pairs: GoPairs, game_id: str, source: str, rule: str = "") -> pa.Table:
    """One row per occurrence, canonicalised (count 1), in the shards' column layout."""
    return pairs_tables([pairs], [game_id], source, [rule])


def pairs_tables(games: Sequence[GoPairs], game_ids: Sequence[str], source: str,
                 rules: Sequence[str], packed: bool = False) -> pa.Table:
    """`pairs_table` of many games as one table (the games' rows one after the other).
    `packed`: the boards packed (`pack_planes`) in a `PACKED_BOARD` column in place of
    `board`, as the Parquet intermediates hold them.

    Why batched: per game the numpy and Arrow calls cost more than the work in them (a
    19x19 game has ~200 positions); over a batch the canonical images are one compiled loop
    and every column one array."""
    games = list(games)
    if not games:
        return pairs_tables([GoPairs(np.zeros((0, COMPACT_CHANNELS, 0, 0), np.int8),
                                     np.empty(0, np.int16), np.empty(0, np.int8),
                                     np.empty(0, np.int16), np.empty(0, np.float32), [], None)],
                            [""], source, [""], packed)
    sizes = [g.inputs.shape[-1] for g in games]
    if len(set(sizes)) > 1:  # one board size per array: runs of equal size, in order
        tables, start = [], 0
        for i in range(1, len(games) + 1):
            if i == len(games) or sizes[i] != sizes[start]:
                tables.append(pairs_tables(games[start:i], game_ids[start:i], source,
                                           rules[start:i], packed))
                start = i
        return pa.concat_tables(tables)
    size = sizes[0]
    lengths = np.array([len(g.moves) for g in games], dtype=np.int64)
    n = int(lengths.sum())
    width = COMPACT_CHANNELS * size * size
    if n * width >= 2**31 and len(games) > 1:  # binary offsets are 32-bit: two tables
        half = len(games) // 2
        return pa.concat_tables([
            pairs_tables(games[:half], game_ids[:half], source, rules[:half], packed),
            pairs_tables(games[half:], game_ids[half:], source, rules[half:], packed)])
    inputs = np.concatenate([g.inputs for g in games])
    moves = np.concatenate([g.moves for g in games])
    hashes = [g.image_hashes() for g in games]
    image_hashes = (np.concatenate(hashes) if all(h is not None for h in hashes) else None)
    canonical = canonicalize_packed if packed else canonicalize
    canon, moves, position_hash = canonical(inputs, moves, image_hashes)
    del inputs
    board = fixed_binary(canon.reshape(n, packed_width(size) if packed else width).view(np.uint8))
    return _pairs_columns(games, game_ids, source, rules, size,
                          PACKED_BOARD if packed else "board", board, moves, position_hash,
                          pa.array([r for g in games for r in g.ranks], pa.string()))


def _pairs_columns(games: Sequence[GoPairs | PackedPairs], game_ids: Sequence[str],
                   source: str, rules: Sequence[str], size: int, board_name: str,
                   board: pa.Array, moves: np.ndarray, position_hash: np.ndarray,
                   ranks: pa.Array | None = None) -> pa.Table:
    """The table of the games' rows (one after the other), around their canonical boards,
    moves and position hashes; `ranks`: the mover rank column (None: from each game's
    `rank_pair`)."""
    n = len(moves)
    lengths = np.array([len(g.moves) for g in games], dtype=np.int64)
    game_of_row = np.repeat(np.arange(len(games)), lengths)
    to_move = np.concatenate([g.to_move for g in games]).astype(np.int8)
    if ranks is None:  # two ranks a game (`PackedPairs.rank_pair`): taken per row
        pair_values = pa.array([r for g in games for r in g.rank_pair], pa.string())
        ranks = pair_values.take(2 * game_of_row + (to_move == WHITE))
    return pa.table({
        "game": pa.array([GAME_NAME], pa.string()).take(np.zeros(n, np.int32)),
        "rule": pa.array(list(rules), pa.string()).take(game_of_row),
        "board_size": pa.array(np.full(n, size, np.int8)),
        board_name: board,
        "move": pa.array(moves, pa.int16()),
        "to_move": pa.array(to_move),
        "ply": pa.array(np.concatenate([g.plies for g in games]).astype(np.int16)),
        "count": pa.array(np.ones(n, np.int32)),
        "position_hash": pa.array(position_hash, pa.uint64()),
        "result": pa.array(np.concatenate([g.results for g in games]).astype(np.float32),
                           pa.float32()),
        "mover_rank": ranks,
        "game_id": pa.array(list(game_ids), pa.string()).take(game_of_row),
        "source": pa.array([source], pa.string()).take(np.zeros(n, np.int32)),
    })


def fixed_binary(rows: np.ndarray) -> pa.Array:
    """A [n, width] uint8 matrix as a binary array over its buffer (no copy when it is
    contiguous)."""
    rows = np.ascontiguousarray(rows)
    n, width = rows.shape
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(width)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(rows.reshape(-1))])


def replay_source(path: Path, result: SourceResult, board_size: int | None,
                  packed: bool) -> Iterator[pa.Table]:
    """`GoGame.replay_source`: tables of the ingested games' pairs (boards packed or not,
    `pairs_tables`), in record order, at least one; read / ingested / quarantine / truncated
    counted into `result` on the way.

    Bookkeeping: a record the reader rejects (`SgfRejected`) and a game of another board size
    than `board_size` is quarantined (one quarantine row, reason and snippet); a game whose
    replay hits an illegal move keeps the pairs before that move and counts as ingested, with
    a `TRUNCATED` note in the quarantine table."""
    name = result.source
    replay = game_packed_pairs if packed else game_pairs
    batch: list[tuple[GoPairs | PackedPairs, str, str]] = []  # games tabled together (speed)
    held = 0
    yielded = False
    for record in _records(path):
        result.read += 1
        rid = _record_id(record, name)
        if isinstance(record, SgfRejected):
            result.quarantine.append(quarantine_row(name, rid, record.reason, record.snippet))
            continue
        if board_size is not None and record.size != board_size:
            result.quarantine.append(quarantine_row(
                name, rid, f"board size {record.size} (this dataset holds "
                f"{board_size}x{board_size} games)", _moves_snippet(record, record.size)))
            continue
        try:
            pairs = replay(record)
        except Exception as exc:  # a record the replay cannot handle at all
            result.quarantine.append(quarantine_row(
                name, rid, f"replay failed: {exc}", _moves_snippet(record, record.size)))
            continue
        result.ingested += 1
        if pairs.error is not None:
            result.note(TRUNCATED_NOTE)
            result.quarantine.append(quarantine_row(
                name, rid, f"{TRUNCATED}{pairs.error} (pairs kept up to move "
                f"{len(pairs.moves)})", _moves_snippet(record, record.size)))
        if len(pairs.moves):
            batch.append((pairs, f"{record.source}#{record.game_index}", record.rules))
            held += len(pairs.moves)
            if held >= TABLE_ROWS:
                yield _batch_table(batch, name, packed)
                yielded = True
                batch, held = [], 0
    if batch or not yielded:
        yield _batch_table(batch, name, packed)


def _records(path: Path) -> Iterable[SgfGame | SgfRejected]:
    if path.name.lower().endswith(".sgf"):
        return read_sgf(path)
    return read_archive(path)


def _record_id(record: SgfGame | SgfRejected, name: str) -> str:
    """'game N', prefixed with the archive member when the record comes from one."""
    own = record.record_id if isinstance(record, SgfRejected) else f"game {record.game_index}"
    member = record.source.split(":", 1)[1] if record.source.startswith(name + ":") else ""
    return f"{member}: {own}" if member else own


def _moves_snippet(game: SgfGame, size: int) -> str:
    out = []
    for color, point in game.moves[:40]:
        where = "pass" if point is None else f"{point % size},{point // size}"
        out.append(f"{'BW'[color - 1]}[{where}]")
    return " ".join(out)


def _batch_table(batch: list[tuple[GoPairs | PackedPairs, str, str]], name: str,
                 packed: bool) -> pa.Table:
    if not batch:
        return pairs_tables([], [], name, [], packed)
    games, ids, rules = zip(*batch, strict=True)
    if packed:  # replayed straight into canonical packed images (`game_packed_pairs`)
        return packed_pairs_tables(games, ids, name, rules)
    return pairs_tables(games, ids, name, rules)


__all__ = ["PACKED_BOARD", "GoPairs", "PackedPairs", "board_image_hashes", "canonicalize",
           "canonicalize_packed", "fixed_binary", "game_packed_pairs", "game_pairs",
           "pack_planes", "packed_pairs_tables", "packed_width", "pairs_of", "pairs_table",
           "pairs_tables", "replay_source", "unpack_planes"]
