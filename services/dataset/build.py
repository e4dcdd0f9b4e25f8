"""The in-memory dedup of pair tables: what the shards hold, from every source's raw pairs.

The games replay their records into raw pairs (`Game.replay_source`; the Gomoku one is
`services.games.gomoku.replay.source_pairs`); `deduplicate` merges every source's pairs under
symmetry and assigns splits. The ingest flow deduplicates out of core instead
(`services.dataset.dedup`), to the same rows.

It works on whole columns: `deduplicate` sorts the rows by (split, position hash, move),
compares the full board bytes of neighbours with equal keys (so a hash collision never merges
different positions), reduces each group with numpy and gathers the unique boards once, in
the order the shards store them (so the shard writer only slices). Its results (and the Gomoku
replay's) are the ones the plain per-game / Arrow group_by implementations in
tests/reference_impls.py give (row for row; `deduplicate`'s row order is the shards'), which
the equivalence tests and benchmarks/ingest.py compare them with.

Memory: most of the CPU time that is not the code's own work is the kernel providing new
pages (about 1-3 s per GB on the VMs this runs on), so the large passes work a block at a
time in cache-sized scratch, large arrays come from `empty_array` (ordinary pages; numpy
would ask for huge pages) and nothing board-sized is copied more than once.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from services import step_times
from services.dataset.splits import SPLIT_NAMES, split_codes
from services.games.canonical import empty_array
from services.games.pair_tables import binary_column

# deduplicate's scratch, in boards: rows gathered per step from a chunked board column
_TAKE_ROWS = 1 << 18
# rows per block where each block is worked on while it is in cache (boards gathered and
# compared or fingerprinted, short strings packed): a few MB. A board column of many chunks
# is read _TAKE_ROWS rows at a time instead (each block is gathered chunk by chunk)
_GATHER_ROWS = 1 << 14
# rows per block of 8-byte columns (sort keys, neighbour comparisons): 512 KiB
_BLOCK_ROWS = 1 << 16
_PAIR_COLUMNS = {
    "board": pa.binary(), "move": pa.int16(), "board_size": pa.int8(), "to_move": pa.int8(),
    "ply": pa.int16(), "count": pa.int32(), "position_hash": pa.uint64(),
    "game_id": pa.string(), "source": pa.string(),
}


def deduplicate(tables: list[pa.Table]) -> pa.Table:
    """Merge identical canonical (board, move) pairs, summing counts; then assign splits.

    Rows are grouped by (position hash, move), neighbours' full board bytes compared (so a
    hash collision never merges different positions), and come out in the order the shards
    store them: by split (train, validation, test), then (position hash, move, board bytes),
    whatever the rows' order in `tables`, so `write_split_shards` writes slices of the result
    as they are. The result is an Arrow group_by on (board, move)'s, row for row.

    Raises ValueError for tables not in the pair layout `source_pairs` makes (column types,
    fixed-width boards, no nulls) and for tables in which one (board, move) carries several
    position hashes: the hash is a function of the canonical board, so neither comes out of
    the ingest, and grouping by hash would split such a pair across groups.
    """
    table = pa.concat_tables(tables)
    with step_times.step("dedup: board matrix"):
        boards = _FixedRows.of(table)
    if boards is None:
        raise ValueError("deduplicate: not a pair table (the columns, types, fixed-width "
                         "boards and no nulls source_pairs gives)")
    n = table.num_rows
    with step_times.step("dedup: sort by (split, hash, move)"):
        hashes = _numpy(table["position_hash"], np.uint64)
        moves = _numpy(table["move"], np.int16)
        # the shards' order: by split (a function of the hash), then (hash, move)
        row_splits = split_codes(hashes)
        order, same = _sort_pairs(hashes, moves, row_splits)
    with step_times.step("dedup: compare boards"):
        # rows next to an equal key, each read once: neighbour pairs (p, p + 1) with
        # same[p] must hold equal boards, else the run is regrouped by board bytes
        involved = np.flatnonzero(np.r_[same, False] | np.r_[False, same])
        differ = []
        step = boards.block_rows
        block = min(len(involved), step + 1)
        buffer = empty_array((block, boards.width), np.uint8)
        scratch = empty_array((min(block, _TAKE_ROWS), boards.width), np.uint8)
        for k in range(0, len(involved), step):
            pos = involved[k:k + step + 1]  # one row of overlap with the next block
            rows = boards.take(order[pos], buffer, scratch)
            pair = same[pos[:-1]] & (pos[1:] == pos[:-1] + 1)
            unequal = pair & ~_rows_equal(rows[:-1], rows[1:])
            if unequal.any():
                differ.append(pos[:-1][unequal])
        del buffer, scratch
        if differ:  # equal keys, different boards: regroup those runs by (hash, board bytes)
            _regroup_by_board(boards, hashes, order, same, np.concatenate(differ))
    with step_times.step("dedup: reduce groups + split"):
        starts = np.flatnonzero(np.r_[True, ~same]) if n else np.zeros(0, np.int64)
        del same
        # each group's first row, groups in (split, hash, move, board) order
        first = _take(order, starts, empty_array(len(starts), np.intp))

        def group_min(column: str, dtype) -> np.ndarray:
            values = _numpy(table[column], dtype)
            if n and values.min() == values.max():  # one value (board_size): no gather
                return np.full(len(starts), values[0], dtype)
            return _reduce_groups(np.minimum, values, order, starts)

        counts = _numpy(table["count"], np.int32)
        if n and counts.min() == counts.max() == 1:  # raw pairs: the group sizes
            count = empty_array(len(starts), np.int64)
            np.subtract(starts[1:], starts[:-1], out=count[:-1])
            count[-1:] = n - starts[-1:]
        else:
            count = _reduce_groups(np.add, counts, order, starts, np.int64)
        columns = {
            "move": pa.array(_take(moves, first), pa.int16()),
            "board_size": pa.array(group_min("board_size", np.int8), pa.int8()),
            "to_move": pa.array(group_min("to_move", np.int8), pa.int8()),
            "ply": pa.array(group_min("ply", np.int16), pa.int16()),
            "count": pa.array(count, pa.int64()),
            # a group's rows share their hash (sorted by it)
            "position_hash": pa.array(_take(hashes, first, empty_array(len(first), np.uint64)),
                                      pa.uint64()),
            "split": _split_column(_take(row_splits, first)),
        }
        if "result" in table.column_names:
            columns["result"] = pa.array(_group_mean_known(
                _numpy(table["result"], np.float32), order, starts), pa.float32())
    with step_times.step("dedup: min game_id / source"):
        columns["game_id"] = _group_min_string(table["game_id"], order, starts)
        columns["source"] = _group_min_string(table["source"], order, starts)
    with step_times.step("dedup: unique boards"):
        unique_boards, fingerprints = _gather_rows(boards, first)
    with step_times.step("dedup: check no pair in two groups"):
        if not _all_different(unique_boards, columns["move"].to_numpy(), fingerprints):
            raise ValueError("deduplicate: one (board, move) under several position hashes "
                             "(the hash must be a function of the canonical board)")
    columns["board"] = binary_column(unique_boards)
    names = ["board", "move", "board_size", "to_move", "ply", "count", "position_hash",
             "result", "game_id", "source", "split"]
    return pa.table({name: columns[name] for name in names if name in columns})


def _group_mean_known(values: np.ndarray, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per group, the mean of its non-NaN values (NaN when it has none), as float32."""
    known = ~np.isnan(values)
    if not known.any():
        return np.full(len(starts), np.nan, np.float32)
    sums = _reduce_groups(np.add, np.where(known, values, 0).astype(np.float64), order, starts)
    counts = _reduce_groups(np.add, known.astype(np.int32), order, starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan).astype(np.float32)


def _take(values: np.ndarray, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """values[rows] for valid rows; np.take without its per-index range check, up to twice
    as fast on large random gathers."""
    return np.take(values, rows, out=out, mode="clip")


def _reduce_groups(ufunc: np.ufunc, values: np.ndarray, order: np.ndarray, starts: np.ndarray,
                   dtype=None) -> np.ndarray:
    """`ufunc.reduceat(values[order], starts)` (in `dtype`), a block of whole groups at a time:
    no gathered copy of the whole column."""
    n, groups = len(order), len(starts)
    out = empty_array(groups, dtype or values.dtype)
    g0 = 0
    while g0 < groups:
        r0 = int(starts[g0])
        g1 = max(g0 + 1, int(np.searchsorted(starts, r0 + _BLOCK_ROWS, side="right")))
        r1 = int(starts[g1]) if g1 < groups else n
        part = _take(values, order[r0:r1])
        if dtype is not None:
            part = part.astype(dtype)
        ufunc.reduceat(part, starts[g0:g1] - r0, out=out[g0:g1])
        g0 = g1
    return out


def _split_column(codes: np.ndarray) -> pa.Array:
    """The split names of int8 codes into SPLIT_NAMES."""
    return pa.array(SPLIT_NAMES, pa.string()).take(pa.array(codes, pa.int8()))


def _gather_rows(boards: _FixedRows, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 [len(rows), width]: the boards of `rows` in that order, their fingerprints).

    The rows are written once, into the buffer the board column then wraps as it is; each
    block's fingerprints are taken while the block is in cache.
    """
    n, width = len(rows), boards.width
    if n == 0 or width == 0:
        return np.zeros((n, width), np.uint8), np.zeros(n, np.uint64)
    out = empty_array((n, width), np.uint8)
    fingerprints = empty_array(n, np.uint64)
    step = boards.block_rows
    scratch = empty_array((min(n, step), width), np.uint8)
    for r0 in range(0, n, step):
        block = out[r0:r0 + step]
        boards.take(rows[r0:r0 + step], block, scratch)
        fingerprints[r0:r0 + len(block)] = _fingerprints(block)
    return out, fingerprints


def _fingerprints(rows: np.ndarray) -> np.ndarray:
    """A 64-bit fingerprint of each row of a uint8 [n, width] matrix (equal rows, equal
    fingerprints), read 8 bytes at a time, a block of rows at a time."""
    n, width = rows.shape
    words = width // 8
    rows = np.ascontiguousarray(rows)
    weights = np.random.default_rng(width).integers(1, 2**64, size=words + width % 8 + 1,
                                                    dtype=np.uint64) | np.uint64(1)
    out = empty_array(n, np.uint64)
    for r0 in range(0, n, _GATHER_ROWS):
        block = rows[r0:r0 + _GATHER_ROWS]
        k = len(block)
        fp = out[r0:r0 + k]
        fp[:] = 0
        if words:  # (an integer matmul: wraps around as the products do, no [k, words] temp)
            w = np.ndarray((k, words), np.uint64, buffer=block, strides=(width, 8))
            np.matmul(w, weights[:words], out=fp)
        for j in range(words * 8, width):
            fp += block[:, j].astype(np.uint64) * weights[words + j - words * 8]
    return out


def _all_different(rows: np.ndarray, moves: np.ndarray,
                   fingerprints: np.ndarray | None = None) -> bool:
    """Whether no two (row bytes, move) pairs are equal; fingerprints first, bytes to confirm."""
    n = len(rows)
    if n < 2:
        return True
    key = _fingerprints(rows) if fingerprints is None else fingerprints
    # sort (top bits of fingerprint ^ mixed move, row): one sort of 64-bit values, no argsort
    row_bits = np.uint64((n - 1).bit_length())
    keys = empty_array(n, np.uint64)
    for r0 in range(0, n, _BLOCK_ROWS):  # (no full-size temporaries)
        part = moves[r0:r0 + _BLOCK_ROWS].astype(np.uint64)
        part *= np.uint64(0x9E3779B97F4A7C15)
        part ^= key[r0:r0 + _BLOCK_ROWS]
        part >>= row_bits
        part <<= row_bits
        part |= np.arange(r0, r0 + len(part), dtype=np.uint64)
        keys[r0:r0 + _BLOCK_ROWS] = part
    key = keys
    key.sort()
    index = empty_array(n, np.intp)
    np.bitwise_and(key, (np.uint64(1) << row_bits) - np.uint64(1), out=index.view(np.uint64))
    key >>= row_bits
    twins = np.flatnonzero(key[1:] == key[:-1])
    if not len(twins):
        return True
    a, b = index[twins], index[twins + 1]
    equal = _rows_equal(np.take(rows, a, axis=0), np.take(rows, b, axis=0)) & \
        (moves[a] == moves[b])
    return not equal.any()


def _sort_pairs(hashes: np.ndarray, moves: np.ndarray,
                major: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row order by (major, hash, move) (`major`: small codes 0..3, a function of the hash:
    the split), and `same`: whether each row has the next one's (hash, move)."""
    n = len(hashes)
    row_bits = max(1, (n - 1).bit_length())
    if n and moves.min() >= 0 and moves.max() < 1024 and row_bits <= 26 and \
            major.min() >= 0 and major.max() < 4:
        # one sort of 64-bit keys, (major, top hash bits, move, row), is twice as fast as
        # argsort; runs of equal top bits whose hashes differ are put in order after it
        rows = np.uint64(row_bits)
        drop = np.uint64(2 + 10 + row_bits)  # the hash's low bits, left out of the key
        key = np.right_shift(hashes, drop, out=empty_array(n, np.uint64))
        key <<= np.uint64(10 + row_bits)
        for r0 in range(0, n, _BLOCK_ROWS):  # (no full-size temporaries)
            part = major[r0:r0 + _BLOCK_ROWS].astype(np.uint64)
            part <<= np.uint64(62)
            key[r0:r0 + _BLOCK_ROWS] |= part
            part = moves[r0:r0 + _BLOCK_ROWS].astype(np.uint64)
            part <<= rows
            part |= np.arange(r0, r0 + len(part), dtype=np.uint64)
            key[r0:r0 + _BLOCK_ROWS] |= part
        key.sort()
        order = empty_array(n, np.intp)
        np.bitwise_and(key, np.uint64((1 << row_bits) - 1), out=order.view(np.uint64))
        key >>= rows  # (major, top hash bits, move)
        same = np.empty(n - 1, bool)
        top_equal = np.empty(n - 1, bool)  # (major, top hash bits) equal to the next row's
        mixed = []  # of those, rows whose hash differs from the next row's
        for r0 in range(0, n - 1, _BLOCK_ROWS):
            k = key[r0:r0 + _BLOCK_ROWS + 1]
            h = _take(hashes, order[r0:r0 + _BLOCK_ROWS + 1])
            hash_equal = h[1:] == h[:-1]
            r1 = r0 + len(k) - 1
            np.equal(k[1:], k[:-1], out=same[r0:r1])
            same[r0:r1] &= hash_equal
            k = k[1:] ^ k[:-1]
            k >>= np.uint64(10)
            np.equal(k, 0, out=top_equal[r0:r1])
            top_mixed = np.flatnonzero(top_equal[r0:r1] & ~hash_equal)
            if len(top_mixed):
                mixed.append(top_mixed + r0)
        if mixed:
            _sort_runs_by_hash(key, order, same, top_equal, hashes, moves, major,
                               np.concatenate(mixed), row_bits)
        return order, same
    order = np.lexsort((moves, hashes, major))
    return order, ((hashes[order[1:]] == hashes[order[:-1]])
                   & (moves[order[1:]] == moves[order[:-1]]))


def _sort_runs_by_hash(key: np.ndarray, order: np.ndarray, same: np.ndarray,
                       top_equal: np.ndarray, hashes: np.ndarray, moves: np.ndarray,
                       major: np.ndarray, mixed: np.ndarray, row_bits: int) -> None:
    """`_sort_pairs`: put the rows of each run of equal (major, top hash bits) (`top_equal`:
    row p's with row p + 1's) that holds one of the positions `mixed` in (hash, move) order,
    and update `key` and `same` there (in place)."""
    run = np.empty(len(order), np.int32 if len(order) < 2**31 else np.int64)  # run of each row
    run[0] = 0
    np.cumsum(~top_equal, dtype=run.dtype, out=run[1:])
    runs = np.unique(run[mixed])
    begin, end = np.searchsorted(run, runs), np.searchsorted(run, runs, side="right")
    del run
    length = end - begin
    sub = np.arange(int(length.sum())) + np.repeat(begin - (np.cumsum(length) - length), length)
    rows = order[sub]
    # (the runs are in (major, top hash bits) order, which (major, hash) order keeps)
    by_key = np.lexsort((rows, moves[rows], hashes[rows], major[rows]))
    rows = rows[by_key]
    order[sub] = rows
    # the key as `_sort_pairs` left it: (major, top hash bits, move)
    key[sub] = (major[rows].astype(np.uint64) << np.uint64(62 - row_bits)
                | (hashes[rows] >> np.uint64(12 + row_bits)) << np.uint64(10)
                | moves[rows].astype(np.uint64))
    at = np.unique(np.r_[sub - 1, sub])
    at = at[(at >= 0) & (at < len(same))]
    same[at] = (key[at] == key[at + 1]) & (hashes[order[at]] == hashes[order[at + 1]])


def _numpy(column: pa.ChunkedArray, dtype) -> np.ndarray:
    return np.asarray(column.to_numpy(), dtype=dtype)


class _FixedRows:
    """The board column's chunks as uint8 [rows, width] views of their buffers (no copy),
    read by global row index."""

    def __init__(self, parts: list[np.ndarray], width: int) -> None:
        self.parts = parts
        self.width = width
        self.starts = np.cumsum([0] + [len(p) for p in parts])
        # rows to gather per call in a blockwise pass (see _GATHER_ROWS)
        self.block_rows = _GATHER_ROWS if len(parts) <= 1 else _TAKE_ROWS

    @classmethod
    def of(cls, table: pa.Table) -> _FixedRows | None:
        """The table's boards when it has the pair layout (column types, no nulls, every
        board the same length); None otherwise."""
        for name, kind in _PAIR_COLUMNS.items():
            if name not in table.column_names:
                return None
            column = table[name]
            if column.type != kind or column.null_count:
                return None
        parts, width = [], None
        for chunk in table["board"].chunks:
            if len(chunk) == 0:
                continue
            _, offsets_buf, data_buf = chunk.buffers()
            offsets = np.frombuffer(offsets_buf, np.int32, count=len(chunk) + 1,
                                    offset=chunk.offset * 4)
            lengths = np.diff(offsets)
            width = int(lengths[0]) if width is None else width
            if width == 0 or (lengths != width).any():
                return None
            data = np.frombuffer(data_buf, np.uint8, count=int(offsets[-1] - offsets[0]),
                                 offset=int(offsets[0]))
            parts.append(data.reshape(len(chunk), width))
        return cls(parts, width or 0)

    def take(self, rows: np.ndarray, out: np.ndarray | None = None,
             scratch: np.ndarray | None = None) -> np.ndarray:
        """uint8 [len(rows), width]: the boards of the given rows, in that order (into `out`,
        through `scratch` of at least min(len(rows), _TAKE_ROWS) rows, when given)."""
        if out is None:
            out = np.empty((len(rows), self.width), np.uint8)
        out = out[:len(rows)]
        # np.take with out= and mode="clip" (the indices are valid): many times faster here
        # than rows-indexing or np.take's default mode
        if len(self.parts) == 1:
            return np.take(self.parts[0], rows, axis=0, out=out, mode="clip")
        # several chunks: per block of rows, gather part by part into a scratch buffer, then
        # put the rows back in order (memory: the result plus one block)
        if scratch is None:
            scratch = empty_array((min(len(rows), _TAKE_ROWS), self.width), np.uint8)
        part_type = np.int16 if len(self.parts) < 2**15 else np.int32
        for b0 in range(0, len(rows), _TAKE_ROWS):
            block = rows[b0:b0 + _TAKE_ROWS]
            part = (np.searchsorted(self.starts, block, side="right") - 1).astype(part_type)
            by_part = np.argsort(part, kind="stable")  # a radix sort for small integers
            bounds = np.searchsorted(part[by_part], np.arange(len(self.parts) + 1))
            for p in np.flatnonzero(np.diff(bounds)).tolist():
                s0, s1 = int(bounds[p]), int(bounds[p + 1])
                np.take(self.parts[p], block[by_part[s0:s1]] - self.starts[p], axis=0,
                        out=scratch[s0:s1], mode="clip")
            back = np.empty(len(block), np.intp)
            back[by_part] = np.arange(len(block))
            np.take(scratch[:len(block)], back, axis=0, out=out[b0:b0 + len(block)],
                    mode="clip")
        return out


def _rows_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """bool per row: a[i] == b[i] for uint8 [n, width] matrices, compared 8 bytes at a time."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    n, width = a.shape
    words = width // 8
    equal = np.ones(n, bool)
    if words and n:
        def as_words(x: np.ndarray) -> np.ndarray:  # unaligned uint64 view of each row's head
            return np.ndarray((n, words), np.uint64, buffer=x, strides=(width, 8))

        equal &= (as_words(a) == as_words(b)).all(axis=1)
    if width % 8:
        equal &= (a[:, words * 8:] == b[:, words * 8:]).all(axis=1)
    return equal


def _regroup_by_board(boards: _FixedRows, hashes: np.ndarray, order: np.ndarray,
                      same: np.ndarray, differ: np.ndarray) -> None:
    """Re-sort by (hash, board bytes) each run of equal keys that holds different boards,
    and mark in `same` which neighbours are then the same pair (in place)."""
    run_start = np.flatnonzero(np.r_[True, ~same])
    run_end = np.r_[run_start[1:], len(order)]
    for r in np.unique(np.searchsorted(run_start, differ, side="right") - 1).tolist():
        s, e = int(run_start[r]), int(run_end[r])
        rows = order[s:e]
        keys = [(int(h), b.tobytes()) for h, b in zip(hashes[rows], boards.take(rows),
                                                        strict=True)]
        by_key = sorted(range(e - s), key=keys.__getitem__)
        order[s:e] = rows[by_key]
        same[s:e - 1] = [keys[a] == keys[b] for a, b in pairwise(by_key)]


def _group_min_string(column: pa.ChunkedArray, order: np.ndarray,
                      starts: np.ndarray) -> pa.Array:
    """Per group, the smallest string (byte order, as Arrow's min) of a null-free column."""
    chunks = [c for c in column.chunks if len(c)]
    constant = _chunk_constants(chunks)
    if constant is not None and len(set(constant)) == 1:  # one source: nothing to compare
        if len(chunks[0]) >= len(starts):  # rows that hold that string: a slice, no copy
            return chunks[0].slice(0, len(starts))
        return pa.repeat(pa.scalar(constant[0], pa.string()), len(starts))
    codes, decode = _string_codes(column, chunks, constant)
    return decode(_reduce_groups(np.minimum, codes, order, starts))


def _chunk_constants(chunks: list[pa.Array]) -> list[str] | None:
    """The value of each chunk when every chunk holds one value only, else None."""
    values = []
    for chunk in chunks:
        head = chunk[0]
        if chunk[len(chunk) - 1] != head or not pc.all(pc.equal(chunk, head)).as_py():
            return None
        values.append(head.as_py())
    return values


def _string_codes(column: pa.ChunkedArray, chunks: list[pa.Array],
                  constant: list[str] | None):
    """(per-row integer codes ordered as the strings are, codes -> string array)."""
    if constant is not None:  # each chunk one value (a source name): sort those
        distinct = sorted(set(constant), key=lambda v: v.encode())
        code = {v: i for i, v in enumerate(distinct)}
        codes = np.repeat(np.array([code[v] for v in constant], np.int64),
                          [len(c) for c in chunks])
        values = pa.array(distinct, pa.string())
        return codes, lambda smallest: values.take(pa.array(smallest, pa.int64()))
    packed = _packed_short_strings(chunks)
    if packed is not None:  # at most 8 bytes and no NUL: the big-endian bytes are the code
        return packed, _unpack_short_strings
    encoded = pc.dictionary_encode(column)  # one dictionary shared by every chunk
    dictionary = encoded.chunks[-1].dictionary
    by_value = pc.sort_indices(dictionary).to_numpy()
    rank = np.empty(len(by_value), np.int64)
    rank[by_value] = np.arange(len(by_value))
    codes = rank[np.concatenate([c.indices.to_numpy() for c in encoded.chunks])]
    return codes, lambda smallest: dictionary.take(pa.array(by_value[smallest], pa.int64()))


def _packed_short_strings(chunks: list[pa.Array]) -> np.ndarray | None:
    """uint64 per string: its UTF-8 bytes big-endian, zero-padded; None unless every string
    has at most 8 bytes and none holds a NUL (where padding would make two strings equal)."""
    out = empty_array(sum(len(c) for c in chunks), np.uint64)
    done = 0
    for chunk in chunks:
        _, offsets_buf, data_buf = chunk.buffers()
        offsets = np.frombuffer(offsets_buf, np.int32, count=len(chunk) + 1,
                                offset=chunk.offset * 4)
        size = int(offsets[-1] - offsets[0])
        data = np.frombuffer(data_buf, np.uint8, count=size, offset=int(offsets[0]))
        if not data.all():
            return None
        for r0 in range(0, len(chunk), _GATHER_ROWS):  # a block at a time, in cache
            bounds = offsets[r0:r0 + _GATHER_ROWS + 1]
            lengths = np.diff(bounds)
            if lengths.max() > 8:
                return None
            k = len(lengths)
            _pack_block(data[bounds[0] - offsets[0]:bounds[-1] - offsets[0]],
                        bounds[:-1] - bounds[0], lengths, out[done + r0:done + r0 + k])
        done += len(chunk)
    return out


def _pack_block(data: np.ndarray, start: np.ndarray, lengths: np.ndarray,
                out: np.ndarray) -> None:
    """`_packed_short_strings` of one block: strings at `start` (int32) in `data`."""
    size = len(data)
    padded = np.zeros(size // 8 + 2, np.uint64)  # whole words, one spare at the end
    padded.view(np.uint8)[:size] = data
    # the 8 bytes from each string's start: two little-endian words, shifted together
    start = start.astype(np.int64)
    word = start >> 3
    value = np.take(padded, word, out=out)
    word += 1
    high = np.take(padded, word)
    del word
    start &= 7
    start <<= 3  # the start's bit offset in its word
    shift = start.view(np.uint64)
    value >>= shift
    np.subtract(np.uint64(64), shift, out=shift)
    high <<= shift  # (a shift by 64 leaves the word: zeroed below)
    high[shift == 64] = 0
    value |= high
    del high
    # keep the string's own bytes: shift the rest out at the top, back again
    np.multiply(np.uint64(8), np.uint64(8) - lengths.astype(np.uint64), out=shift)
    value <<= shift
    value >>= shift
    value[lengths == 0] = 0  # (shifts by 64 leave the word)
    value.byteswap(inplace=True)  # first byte most significant


def _unpack_short_strings(packed: np.ndarray) -> pa.Array:
    """The strings `_packed_short_strings` packed: the big-endian bytes as 8-byte binaries,
    trailing NULs (the padding; no string holds one) trimmed."""
    data = packed.byteswap()  # first byte first
    fixed = pa.Array.from_buffers(pa.binary(8), len(packed), [None, pa.py_buffer(data)])
    return pc.utf8_rtrim(fixed.cast(pa.binary()).cast(pa.string()), characters="\x00")

