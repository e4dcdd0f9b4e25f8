"""Streaming training loader: shards -> shuffled, augmented, ready tensor batches.

`ShardStream` is an `IterableDataset` that yields whole batches, so a `DataLoader` over it runs
with `batch_size=None` (`make_loader` builds one). Each batch is a dict:

    boards  int8  [B, s, s]     Gomoku: compact cells (0 empty, 1 black, 2 white)
            int8  [B, 4, s, s]  Go: the compact planes of `services.games.go_features`
                                (stones seen from the mover, liberties, move age, ko)
    moves   int64 [B]           y * s + x, transformed together with its board; Go: s * s = pass
    results float32 [B]         only with `results=True` (value training): the mover's result,
                                1 won, 0 lost, 0.5 draw, NaN unknown (the shards' `result`)
    worker  int                 which of this rank's workers made it (used for resumption)

Boards stay compact int8 until they reach the model's device, where `expand_planes` (or the
model itself: every built model takes compact inputs) turns them into float feature planes:
`services.games.encoding.planes_torch` for Gomoku, `go_features.planes_torch` for Go. Shipping
int8 is 4x (Gomoku 3 planes) to 17x (Go) less host-to-device traffic than float planes.

The game of a split comes from its shards' `game` column (schema 2, one game per split, as
`read_split` requires); the manifest's `game` (written by the ingest flow), where present,
must agree.

Batches are views into a block of a few thousand to ~65k rows (one storage for boards and
moves); holding a batch keeps its block alive. With workers, each worker sends packets of up to
PACKET_ROWS rows and `ShardLoader` cuts them into batches in the main process: moving a tensor
between processes has a fixed cost per message that would dominate at a few hundred rows.

Order of one epoch (reproducible for a given seed, epoch, world_size and num_workers):

1. units: every non-empty (file, row group) of the split, permuted with a generator seeded by
   (seed, epoch);
2. sharding: unit i of that permutation goes to global worker i % (world_size * num_workers),
   where global worker = rank * num_workers + worker; every row goes to exactly one worker.
   With several ranks and fewer than `MIN_UNITS_PER_RANK` row groups per rank, each row
   group is first cut into equal consecutive parts, units of their own, so that every rank
   has rows and ranks get about as many;
3. augmentation, as each unit is read: an independent uniform D4 symmetry per row (generator
   seeded by (seed, epoch, unit)), applied to board and move with
   `services.games.symmetry.point_table`; for Go the same symmetry moves every one of the 4
   planes (liberties, move ages and ko are properties of points, so they move with them) and
   a pass stays s * s;
4. each worker appends its units to a shuffle buffer; whenever it holds more than
   `shuffle_buffer` rows by at least a batch, the excess (whole batches) is drawn from it
   without replacement in random order, so each row leaving is a uniform pick among all rows
   held; at the end the rest leaves in random order, as a last partial batch unless
   `drop_last` (which drops fewer than `batch_size` rows per worker).

Each pass over the loader is the next epoch (`epoch`, `epoch + 1`, ...): the stream counts its
own `__iter__` calls, which also holds in persistent workers, where `set_epoch` cannot reach.

Resumption: `state_dict()` records the epoch in progress, the batches delivered per worker
and which worker delivers next. `load_state_dict()` replays each worker's shuffle on row ids
only (no Parquet read) up to that point, reads again just the row groups that its buffer and
current block hold, and continues: the rest of the epoch is exactly the uninterrupted run's
tail, and later epochs are unchanged. With num_workers > 0 this holds per worker, and
`ShardLoader` also rotates which worker starts so that the DataLoader's round-robin gives the
same interleaving; restore before the first pass (workers get their copy of the state when
they start), with the same num_workers, world_size, rank, batch_size, shuffle_buffer and
dataset. Batches prefetched but not yet delivered are not counted: they are made again.

Distributed training: ranks receive different row groups, so their batch counts can differ by
up to a row group's worth; run `min(stream.num_batches(num_workers, rank=r) for r in
range(world_size))` steps per epoch so that no rank waits in a collective for a batch that
another rank does not have, then `end_epoch(epoch)`, so that the next pass and the
saved position are the next epoch's (services/trainer/train.py does both).
"""

from __future__ import annotations

import copy
import multiprocessing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from services.dataset.shards import (
    GAMES,
    GO_CHANNELS,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    DatasetError,
    read_manifest,
)
from services.games import encoding, go_features
from services.games.symmetry import N_SYMMETRIES, point_table

STATE_VERSION = 1
PACKET_ROWS = 16384  # rows a worker hands to the main process at once
COLUMNS = ("boards", "moves", "results")  # what a batch holds, in block order


@dataclass(frozen=True)
class _Plan:
    """What a worker needs to find its rows: small and picklable (no open files)."""

    paths: tuple[str, ...]
    unit_file: np.ndarray  # int64 [units]: index into paths
    unit_group: np.ndarray  # int64 [units]: row group inside the file
    unit_rows: np.ndarray  # int64 [units]
    unit_start: np.ndarray  # int64 [units]: id of the unit's first row (cumulative rows)
    board_size: int
    game: str = "gomoku"  # "gomoku" or "go" (shards.GAMES)
    # a unit that is a part of its row group (`_split_for_ranks`): its first row inside the
    # group, and the group's rows; None: every unit is a whole row group
    unit_offset: np.ndarray | None = None
    unit_group_rows: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return int(self.unit_rows.sum())

    @property
    def channels(self) -> int:
        """Compact planes per board: 1 (Gomoku cells) or 4 (Go)."""
        return GO_CHANNELS if self.game == "go" else 1

    @property
    def row_bytes(self) -> int:
        return self.channels * self.board_size * self.board_size

    @property
    def n_moves(self) -> int:
        """Policy outputs: every point, plus a pass for Go."""
        return self.board_size * self.board_size + (self.game == "go")


def _column_values(pf: pq.ParquetFile, path: Path, name: str) -> set:
    """Distinct values of a column in a shard, from row-group statistics (min and max: enough
    to see a second value) or, where they are absent, from the column itself."""
    meta = pf.metadata
    column = pf.schema_arrow.get_field_index(name)
    if column < 0:
        raise DatasetError(f"{path}: no {name!r} column")
    values: set = set()
    for rg in range(meta.num_row_groups):
        if meta.row_group(rg).num_rows == 0:
            continue
        stats = meta.row_group(rg).column(column).statistics
        if stats is None or not stats.has_min_max:
            return set(pc.unique(pf.read(columns=[name]).column(0)).to_pylist())
        values.update({stats.min, stats.max})
    return values


def _board_size_of(pf: pq.ParquetFile, path: Path) -> set[int]:
    """Board sizes in a shard (see `_column_values`)."""
    return {int(v) for v in _column_values(pf, path, "board_size")}


def _game_of(pf: pq.ParquetFile, path: Path) -> set[str]:
    """Games in a shard (see `_column_values`); values are bytes in some statistics."""
    return {v.decode() if isinstance(v, bytes) else str(v)
            for v in _column_values(pf, path, "game")}


def _plan_split(dataset_dir: Path, split: str) -> _Plan:
    """Check the split's shards (presence, schema version, columns, row counts) and list units."""
    manifest_path = dataset_dir / "manifest.json"
    manifest = read_manifest(dataset_dir)
    entries = [e for e in manifest.get("files", []) if e.get("split") == split]
    if not entries:
        raise DatasetError(f"{manifest_path}: split {split!r} has no shards")
    paths: list[str] = []
    unit_file, unit_group, unit_rows = [], [], []
    sizes: dict[int, str] = {}
    games: dict[str, str] = {}
    for entry in entries:
        path = dataset_dir / entry["path"]
        if not path.is_file():
            raise DatasetError(f"{path}: shard listed in the manifest is missing")
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as e:
            raise DatasetError(f"{path}: not a readable Parquet file ({e})") from e
        try:
            schema = pf.schema_arrow
            version = (schema.metadata or {}).get(SCHEMA_KEY)
            if version != str(SCHEMA_VERSION).encode():
                raise DatasetError(
                    f"{path}: schema version {version!r}, expected {SCHEMA_VERSION}")
            for name, ok in (("board", _is_binary), ("move", pa.types.is_integer)):
                index = schema.get_field_index(name)
                if index < 0 or not ok(schema.field(index).type):
                    found = schema.field(index).type if index >= 0 else "missing"
                    raise DatasetError(f"{path}: column {name!r} is {found}")
            meta = pf.metadata
            if "rows" in entry and meta.num_rows != entry["rows"]:
                raise DatasetError(
                    f"{path}: {meta.num_rows} rows, the manifest says {entry['rows']}")
            for size in _board_size_of(pf, path):
                sizes.setdefault(size, str(path))
            for game in _game_of(pf, path):
                games.setdefault(game, str(path))
            for rg in range(meta.num_row_groups):
                rows = meta.row_group(rg).num_rows
                if rows:
                    unit_file.append(len(paths))
                    unit_group.append(rg)
                    unit_rows.append(rows)
        except (pa.ArrowException, OSError) as e:
            raise DatasetError(f"{path}: unreadable metadata ({e})") from e
        finally:
            pf.close()
        paths.append(str(path))
    if not unit_rows:
        raise DatasetError(f"{manifest_path}: split {split!r} is empty "
                           f"(0 rows in {len(entries)} shard(s))")
    if len(sizes) != 1:
        where = ", ".join(f"{s} in {p}" for s, p in sorted(sizes.items()))
        raise DatasetError(f"{manifest_path}: split {split!r} mixes board sizes ({where})")
    if len(games) != 1 or not set(games) <= set(GAMES):
        where = ", ".join(f"{g!r} in {p}" for g, p in sorted(games.items()))
        raise DatasetError(f"{manifest_path}: split {split!r} must hold one game of "
                           f"{GAMES}, found {where}")
    game = next(iter(games))
    if manifest.get("game", game) != game:
        raise DatasetError(f"{manifest_path}: says game {manifest['game']!r}, but the shards "
                           f"of split {split!r} hold {game!r} rows ({games[game]})")
    rows = np.asarray(unit_rows, dtype=np.int64)
    return _Plan(paths=tuple(paths), unit_file=np.asarray(unit_file, dtype=np.int64),
                 unit_group=np.asarray(unit_group, dtype=np.int64), unit_rows=rows,
                 unit_start=np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64),
                 board_size=next(iter(sizes)), game=game)


# a multi-rank plan has at least this many units per rank (row groups cut into parts if need be)
MIN_UNITS_PER_RANK = 4


def _split_for_ranks(plan: _Plan, world_size: int) -> _Plan:
    """With fewer than `MIN_UNITS_PER_RANK` units per rank, each row group cut into equal
    consecutive parts (units of their own) until there are that many: ranks shard by unit,
    and a split of a few row groups (a small dataset: 65,536 rows a group) would otherwise
    leave ranks with no rows, or with far fewer than others, and every rank stops its epoch
    at the fewest. A part is read as its whole row group, then sliced (more reading, on small
    data only). One rank, or enough row groups: the plan as it is."""
    units = len(plan.unit_rows)
    if world_size == 1 or units >= MIN_UNITS_PER_RANK * world_size:
        return plan
    parts = -(-MIN_UNITS_PER_RANK * world_size // units)
    unit_file, unit_group, unit_rows, unit_offset, group_rows = [], [], [], [], []
    for u in range(units):
        rows = int(plan.unit_rows[u])
        cuts = np.linspace(0, rows, min(parts, rows) + 1).astype(np.int64)
        for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            unit_file.append(plan.unit_file[u])
            unit_group.append(plan.unit_group[u])
            unit_rows.append(hi - lo)
            unit_offset.append(lo)
            group_rows.append(rows)
    rows = np.asarray(unit_rows, dtype=np.int64)
    return _Plan(paths=plan.paths, unit_file=np.asarray(unit_file, dtype=np.int64),
                 unit_group=np.asarray(unit_group, dtype=np.int64), unit_rows=rows,
                 unit_start=np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64),
                 board_size=plan.board_size, game=plan.game,
                 unit_offset=np.asarray(unit_offset, dtype=np.int64),
                 unit_group_rows=np.asarray(group_rows, dtype=np.int64))


def dataset_game(dataset_dir: str | Path, split: str = "train") -> tuple[str, int]:
    """(game, board size) of a dataset's split, from its shards: what a trainer or flow needs
    to pick a model configuration before reading any rows."""
    plan = _plan_split(Path(dataset_dir), split)
    return plan.game, plan.board_size


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def board_matrix(column: pa.ChunkedArray | pa.Array, cells: int,
                 where: str = "board") -> np.ndarray:
    """int8 [n, cells] view of a binary column whose values are all `cells` bytes long.

    No per-row Python: the array's offsets are checked to be evenly spaced, then its data
    buffer is viewed in place (the view keeps the Arrow buffer alive).
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    n = len(column)
    if column.null_count:
        raise DatasetError(f"{where}: {column.null_count} null board(s)")
    if n == 0:
        return np.zeros((0, cells), dtype=np.int8)
    if not _is_binary(column.type):
        raise DatasetError(f"{where}: board column is {column.type}, expected binary")
    _, offsets_buf, data_buf = column.buffers()
    width = 8 if pa.types.is_large_binary(column.type) else 4
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if width == 8 else np.int32,
                            count=n + 1, offset=column.offset * width)
    first = int(offsets[0])
    if int(offsets[-1]) - first != n * cells or np.any(np.diff(offsets) != cells):
        lengths = np.unique(np.diff(offsets))
        raise DatasetError(f"{where}: boards must all be {cells} bytes, found lengths "
                           f"{lengths[:5].tolist()}")
    return np.frombuffer(data_buf, dtype=np.int8, count=n * cells, offset=first).reshape(n, cells)


def _read_unit(plan: _Plan, unit: int, results: bool = False) -> list[np.ndarray]:
    """Boards int8 [n, channels*s*s] and moves int64 [n] of one row group, then with
    `results` the mover's results float32 [n] (NaN where unknown)."""
    path = plan.paths[plan.unit_file[unit]]
    rg = int(plan.unit_group[unit])
    where = f"{path}: row group {rg}"
    try:
        # checksums are verified where the writer stored them
        pf = pq.ParquetFile(path, page_checksum_verification=True)
        try:
            columns = ["board", "move", "result"] if results else ["board", "move"]
            table = pf.read_row_group(rg, columns=columns, use_threads=False)
        finally:
            pf.close()
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{where}: cannot be read ({e})") from e
    expected = plan.unit_rows[unit] if plan.unit_group_rows is None else \
        plan.unit_group_rows[unit]
    if table.num_rows != expected:
        raise DatasetError(f"{where}: {table.num_rows} rows, expected {expected} "
                           "(file changed since the loader was created?)")
    if plan.unit_offset is not None:  # a part of the row group
        table = table.slice(int(plan.unit_offset[unit]), int(plan.unit_rows[unit]))
    boards = board_matrix(table.column("board"), plan.row_bytes, where)
    move_col = table.column("move")
    if move_col.null_count:
        raise DatasetError(f"{where}: {move_col.null_count} null move(s)")
    moves = move_col.to_numpy()
    if moves.min() < 0 or moves.max() >= plan.n_moves:
        raise DatasetError(f"{where}: move outside 0..{plan.n_moves - 1} "
                           f"(min {moves.min()}, max {moves.max()})")
    cols = [boards, moves.astype(np.int64)]
    if results:
        cols.append(table.column("result").to_numpy(zero_copy_only=False).astype(np.float32))
    return cols


class _Stream:
    """One worker's rows for one epoch: its units in order, through a shuffle buffer, in blocks.

    Each loaded unit is appended to the buffer; once it holds at least `shuffle_buffer +
    batch_size` rows, a block of whole batches (all but `shuffle_buffer` rows, rounded down to
    a multiple of `batch_size`) is drawn from it without replacement, in random order, so every
    row leaving is a uniform pick among all rows held. When the units run out, the rest leaves
    as one final block in random order. Works on real rows (columns boards, moves) or, to
    fast-forward, on row ids alone: both make the same generator calls and stay in step.
    `load(unit, outs)` writes a unit's rows into `outs` (views of the buffer's free end) and
    returns their number; `alloc(rows)` gives the arrays a block is gathered into and what
    `next_block` returns.
    """

    def __init__(self, units: np.ndarray, load: Callable[[int, list[np.ndarray]], int],
                 specs: list[tuple[tuple[int, ...], Any]], shuffle_buffer: int, batch_size: int,
                 max_unit_rows: int, rng: np.random.Generator,
                 alloc: Callable[[int], tuple[list[np.ndarray], Any]]):
        self.units, self.load, self.rng, self.alloc = units, load, rng, alloc
        self.keep, self.batch_size = shuffle_buffer, batch_size
        capacity = shuffle_buffer + batch_size + max_unit_rows
        self.bufs = [np.empty((capacity, *tail), dtype=dtype) for tail, dtype in specs]
        self.spares = [np.empty_like(buf) for buf in self.bufs]
        self.n = 0  # rows held in the buffer
        self.next_unit = 0  # position in self.units of the next unit to load
        self.blocks = 0  # blocks returned so far

    def next_block(self) -> Any:
        """The next block (see `alloc`), or None at the end of the epoch."""
        while self.next_unit < len(self.units):
            # load(unit, outs) writes the unit's rows at the end of the buffer, returns how many
            self.n += self.load(int(self.units[self.next_unit]), [b[self.n:] for b in self.bufs])
            self.next_unit += 1
            k = (self.n - self.keep) // self.batch_size * self.batch_size
            if k > 0:
                return self._draw(self.rng.choice(self.n, k, replace=False))
        if self.n == 0:
            return None
        return self._draw(self.rng.permutation(self.n))

    def _draw(self, picked: np.ndarray) -> Any:
        arrays, block = self.alloc(len(picked))
        for buf, out in zip(self.bufs, arrays, strict=True):
            np.take(buf, picked, axis=0, out=out, mode="clip")  # in range; "clip": no extra copy
        # the rows not picked move, in order, to the front of the spare buffer (a streaming
        # copy, cheaper than filling the holes from the tail), which becomes the buffer
        keep = np.ones(self.n, dtype=bool)
        keep[picked] = False
        kept = np.flatnonzero(keep)
        for buf, spare in zip(self.bufs, self.spares, strict=True):
            np.take(buf, kept, axis=0, out=spare[:len(kept)], mode="clip")
        self.bufs, self.spares = self.spares, self.bufs
        self.n = len(kept)
        self.blocks += 1
        return block


def _plain_alloc(dtypes: list[tuple[tuple[int, ...], Any]]):
    def alloc(rows: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        arrays = [np.empty((rows, *tail), dtype=dtype) for tail, dtype in dtypes]
        return arrays, arrays
    return alloc


class _Augmenter:
    """An independent uniform D4 symmetry per row, applied to boards and moves together.

    Rows are grouped by their symmetry (a stable sort of the draws, then one row gather), so
    each symmetry is one vectorised copy of its group: the inverse point table as a `take`
    along the cells in general, cheaper forms where the symmetry allows (identity: plain copy;
    mirror top/bottom: whole rows of cells move; half turn: the cells in reverse order). The
    output is in grouped order; the shuffle buffer then mixes the rows.

    With `channels` > 1 (Go's compact planes) a row is `channels` boards of cells one after the
    other; a group is viewed as [rows * channels, cells] (no copy), so every plane of a row
    moves with the same symmetry in the same vectorised copy. Moves go through the point table
    extended by one column: index s*s (Go's pass) maps to itself under every symmetry.
    """

    def __init__(self, size: int, channels: int = 1):
        self.size, self.cells, self.channels = size, size * size, channels
        table = point_table(size).astype(np.int64)  # table[k, p]: where p goes under k
        pass_column = np.full((N_SYMMETRIES, 1), size * size, dtype=np.int64)
        self.move_table = np.concatenate([table, pass_column], axis=1)  # [8, s*s + 1]
        self.table = table
        self.inverse = np.argsort(self.table, axis=1)  # inverse[k, q]: which p lands on q
        ids = np.arange(self.cells)
        self.kinds: list[tuple[str, np.ndarray | None]] = []
        for k in range(N_SYMMETRIES):
            inv = self.inverse[k]
            rows = inv.reshape(size, size)[:, 0] // size
            if np.array_equal(inv, ids):
                self.kinds.append(("copy", None))
            elif np.array_equal(inv, ids[::-1]):
                self.kinds.append(("reverse", None))
            elif np.array_equal(inv.reshape(size, size), rows[:, None] * size + np.arange(size)):
                self.kinds.append(("rows", rows))
            else:
                self.kinds.append(("take", inv))

    def _apply(self, k: int, src: np.ndarray, dst: np.ndarray) -> None:
        if self.channels > 1:  # [n, c*cells] -> [n*c, cells]: views of contiguous rows
            if not dst.flags.c_contiguous:  # reshape would copy, and the writes be lost
                raise RuntimeError("augmentation output rows must be contiguous")
            src = src.reshape(-1, self.cells)
            dst = dst.reshape(-1, self.cells)
        kind, index = self.kinds[k]
        if kind == "copy":
            dst[:] = src
        elif kind == "reverse":
            dst[:] = src[:, ::-1]
        elif kind == "rows":
            row = np.dtype((np.void, self.size))  # a row of cells as one element
            np.take(src.view(row), index, axis=1, out=dst.view(row), mode="clip")
        else:
            np.take(src, index, axis=1, out=dst, mode="clip")  # in range; "clip": no extra copy

    def __call__(self, boards: np.ndarray, moves: np.ndarray, rng: np.random.Generator,
                 out_boards: np.ndarray, out_moves: np.ndarray) -> np.ndarray:
        """Write the transformed rows (in grouped order); return that order, the row each
        output came from, for columns that travel along unchanged."""
        n = len(moves)
        ks = rng.integers(0, N_SYMMETRIES, n, dtype=np.int8)
        order = np.argsort(ks, kind="stable")
        grouped = np.take(boards, order, axis=0)
        start = 0
        for k, count in enumerate(np.bincount(ks, minlength=N_SYMMETRIES).tolist()):
            if count:
                self._apply(k, grouped[start:start + count], out_boards[start:start + count])
            start += count
        out_moves[:n] = self.move_table[ks[order], moves[order]]
        return order


def _batch_tensors(n: int, size: int, shared: bool = False, channels: int = 1,
                   results: bool = False) -> tuple[torch.Tensor, ...]:
    """boards int8 [n, s, s] (or [n, channels, s, s] when channels > 1) and moves int64 [n]
    (and with `results` results float32 [n]) as views of one uint8 storage.

    `shared`: allocate it in shared memory (in a worker, as torch's default_collate does),
    which saves copying the block there when it is sent to the main process.
    """
    shape = (n, size, size) if channels == 1 else (n, channels, size, size)
    cells = n * channels * size * size
    offset = -(-cells // 8) * 8  # int64 view must start 8-aligned
    total = offset + 8 * n + (4 * n if results else 0)
    if shared:
        raw = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(total))
    else:
        raw = torch.empty(total, dtype=torch.uint8)
    boards = raw[:cells].view(torch.int8).view(shape)
    moves = raw[offset:offset + 8 * n].view(torch.int64)
    if not results:
        return boards, moves
    return boards, moves, raw[offset + 8 * n:].view(torch.float32)


_DEVICE_TABLES: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}


def random_symmetry_torch(boards: torch.Tensor, moves: torch.Tensor,
                          generator: torch.Generator | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """The loader's augmentation for batches already on a device: int8 [B, s, s] boards (or
    Go's [B, 4, s, s] planes, all planes alike) and their moves, an independent uniform D4
    symmetry per row (one gather); a move of s*s (pass) stays s*s.

    For a loader built with `augment=False` when the CPU, not the accelerator, is the limit:
    on a GPU this costs next to nothing, while on the CPU it is a large share of the loader's
    work (see benchmarks/loader.py).
    """
    n, size = boards.shape[0], boards.shape[-1]
    channels = boards.shape[1] if boards.dim() == 4 else 1
    cells = size * size
    key = (size, str(boards.device))
    if key not in _DEVICE_TABLES:
        table = torch.as_tensor(point_table(size), dtype=torch.int64, device=boards.device)
        extended = torch.cat([table, torch.full((N_SYMMETRIES, 1), cells, dtype=torch.int64,
                                                device=boards.device)], dim=1)
        _DEVICE_TABLES[key] = (extended, torch.argsort(table, dim=1))
    table, inverse = _DEVICE_TABLES[key]
    ks = torch.randint(0, N_SYMMETRIES, (n,), device=boards.device, generator=generator)
    index = inverse[ks].unsqueeze(1).expand(n, channels, cells)
    out = torch.gather(boards.reshape(n, channels, cells), 2, index)
    return out.view(boards.shape), table[ks, moves]


def expand_planes(boards: torch.Tensor) -> torch.Tensor:
    """Compact int8 boards of a batch -> float feature planes, on the boards' device: Gomoku
    [B, s, s] -> [B, 3, s, s] (encoding.planes_torch), Go [B, 4, s, s] -> [B, 17, s, s]
    (go_features.planes_torch). Built models do this themselves; this is for code that feeds
    a bare network."""
    if boards.dim() == 4:
        return go_features.planes_torch(boards)
    return encoding.planes_torch(boards)


class ShardStream(IterableDataset):
    """Shuffled, augmented batches of one split, sharded across workers and ranks."""

    def __init__(self, dataset_dir: str | Path, split: str = "train", batch_size: int = 256,
                 shuffle_buffer: int = 65536, seed: int = 0, epoch: int = 0,
                 augment: bool = True, rank: int = 0, world_size: int = 1,
                 drop_last: bool = True, results: bool = False):
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, "
                             f"world_size {world_size}")
        if seed < 0 or epoch < 0 or shuffle_buffer < 0:
            raise ValueError("seed, epoch and shuffle_buffer must be >= 0")
        self.dataset_dir = Path(dataset_dir)
        self.split = split
        self.batch_size = batch_size
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed
        self.augment = augment
        self.rank, self.world_size = rank, world_size
        self.drop_last = drop_last
        self.results = results  # also deliver the mover's result of every row
        self.plan = _split_for_ranks(_plan_split(self.dataset_dir, split), world_size)
        self.board_size = self.plan.board_size
        self.game = self.plan.game  # "gomoku" or "go": decides board shape and move range
        self._next_epoch = epoch  # epoch of the next __iter__ call in this process
        self._resume: dict | None = None
        self._progress = self._fresh_progress(epoch, 1)
        self._augmenter: _Augmenter | None = None
        self._packet_batches = 0  # >0: in workers, yield packets of that many batches

    # ------------------------------------------------------------------ order of an epoch

    @property
    def epoch(self) -> int:
        """The epoch the next pass will run."""
        return self._next_epoch

    def set_epoch(self, epoch: int) -> None:
        """Choose the next pass's epoch (num_workers=0 or non-persistent workers only)."""
        self._next_epoch = epoch
        self._resume = None

    @property
    def rows(self) -> int:
        return self.plan.rows

    @property
    def n_moves(self) -> int:
        """Size of the policy over this split's moves: s*s, plus one (pass) for Go."""
        return self.plan.n_moves

    @property
    def board_shape(self) -> tuple[int, ...]:
        """Shape of one compact board in a batch: (s, s) or Go's (4, s, s)."""
        s = self.board_size
        return (s, s) if self.plan.channels == 1 else (self.plan.channels, s, s)

    def read_rows(self, ids: np.ndarray, results: bool = False) -> tuple[np.ndarray, ...]:
        """Boards [n, *board_shape] and moves of rows by id, as stored (no augmentation), then
        with `results` their results (see the module doc).

        Ids count rows over the split's shards in manifest order, the order of `read_split`,
        so a trainer can evaluate a fixed sample of a large train split without holding the
        whole split in memory; each row group involved is read once.
        """
        plan = self.plan
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= plan.rows):
            raise IndexError(f"row ids must be in 0..{plan.rows - 1}")
        cols = self._empty_columns(len(ids), results)
        unit_of = np.searchsorted(plan.unit_start, ids, side="right") - 1
        for unit in np.unique(unit_of).tolist():
            slots = np.flatnonzero(unit_of == unit)
            local = ids[slots] - plan.unit_start[unit]
            for out, col in zip(cols, _read_unit(plan, unit, results), strict=True):
                out[slots] = col[local]
        return (cols[0].reshape(len(ids), *self.board_shape), *cols[1:])

    def _specs(self, results: bool | None = None) -> list[tuple[tuple[int, ...], Any]]:
        """(shape of one row, dtype) of each column a row carries: boards, moves[, results]."""
        specs = [((self.plan.row_bytes,), np.int8), ((), np.int64)]
        with_results = self.results if results is None else results
        return [*specs, ((), np.float32)] if with_results else specs

    def _empty_columns(self, rows: int, results: bool | None = None) -> list[np.ndarray]:
        return [np.empty((rows, *tail), dtype=dtype) for tail, dtype in self._specs(results)]

    def _units_of(self, epoch: int, global_worker: int, global_workers: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, epoch, 0])
        order = rng.permutation(len(self.plan.unit_rows))
        return order[global_worker::global_workers]

    def num_batches(self, num_workers: int = 0, epoch: int | None = None,
                    rank: int | None = None) -> int:
        """Batches one rank receives in an epoch (all of its workers together)."""
        epoch = self._next_epoch if epoch is None else epoch
        rank = self.rank if rank is None else rank
        local = max(1, num_workers)
        total = 0
        for role in range(local):
            units = self._units_of(epoch, rank * local + role, self.world_size * local)
            rows = int(self.plan.unit_rows[units].sum())
            total += rows // self.batch_size if self.drop_last else -(-rows // self.batch_size)
        return total

    def _batches_in(self, rows: int) -> int:
        b = self.batch_size
        return rows // b if self.drop_last else -(-rows // b)

    def _open(self, epoch: int, g: int, global_workers: int,
              skip: int) -> tuple[_Stream, tuple[torch.Tensor, torch.Tensor] | None, int]:
        """Stream of global worker g, positioned after `skip` batches.

        Returns (stream, current block or None, first batch inside it). To skip, the stream
        runs on row ids (no Parquet read, same generator calls), then the rows that its buffer
        and current block hold are read again from their row groups.
        """
        plan = self.plan
        units = self._units_of(epoch, g, global_workers)
        rng = np.random.default_rng([self.seed, epoch, 1, global_workers, g])
        shape = (self.shuffle_buffer, self.batch_size, int(plan.unit_rows.max()))
        specs = self._specs()

        def load(unit: int, outs: list[np.ndarray]) -> int:
            return self._load_into(unit, epoch, outs)

        if skip == 0:
            return _Stream(units, load, specs, *shape, rng, self._alloc), None, 0

        def ids(unit: int, outs: list[np.ndarray]) -> int:
            rows = int(plan.unit_rows[unit])
            outs[0][:rows] = np.arange(plan.unit_start[unit], plan.unit_start[unit] + rows)
            return rows

        id_specs = [((), np.int64)]
        sim = _Stream(units, ids, id_specs, *shape, rng, _plain_alloc(id_specs))
        left = skip
        while (held_block := sim.next_block()) is not None:
            batches = self._batches_in(len(held_block[0]))
            if left < batches:
                break
            left -= batches
        stream = _Stream(units, load, specs, *shape, sim.rng, self._alloc)
        stream.n, stream.next_unit, stream.blocks = sim.n, sim.next_unit, sim.blocks
        for buf, col in zip(stream.bufs, self._rows_of(sim.bufs[0][:sim.n], epoch), strict=True):
            buf[:sim.n] = col
        if held_block is None:  # this worker's epoch was already over
            return stream, None, 0
        cols = self._rows_of(held_block[0], epoch)
        arrays, block = self._alloc(len(cols[0]))
        for out, col in zip(arrays, cols, strict=True):
            out[:] = col
        return stream, block, left

    def _alloc(self, rows: int) -> tuple[list[np.ndarray], tuple[torch.Tensor, ...]]:
        """A block's tensors (one storage: a worker shares it once per block) + numpy views."""
        shared = get_worker_info() is not None
        block = _batch_tensors(rows, self.board_size, shared, self.plan.channels, self.results)
        return [block[0].numpy().reshape(rows, -1), *(t.numpy() for t in block[1:])], block

    def _rows_of(self, ids: np.ndarray, epoch: int) -> list[np.ndarray]:
        """The columns of rows given by id, as the stream delivers them (augmented): reads
        each row group involved once."""
        plan = self.plan
        cols = self._empty_columns(len(ids))
        unit_of = np.searchsorted(plan.unit_start, ids, side="right") - 1
        for unit in np.unique(unit_of).tolist():
            slots = np.flatnonzero(unit_of == unit)
            unit_cols = self._empty_columns(int(plan.unit_rows[unit]))
            self._load_into(unit, epoch, unit_cols)
            local = ids[slots] - plan.unit_start[unit]
            for out, col in zip(cols, unit_cols, strict=True):
                out[slots] = col[local]
        return cols

    def _load_into(self, unit: int, epoch: int, outs: list[np.ndarray]) -> int:
        """Write a row group's rows into the outputs (boards, moves[, results]), augmented with
        the unit's own generator (so a restore, which reads the unit again, gets the same
        symmetries whichever worker reads it); return the number of rows."""
        cols = _read_unit(self.plan, unit, self.results)
        n = len(cols[1])
        if not self.augment:
            for out, col in zip(outs, cols, strict=True):
                out[:n] = col
            return n
        if self._augmenter is None:
            self._augmenter = _Augmenter(self.board_size, self.plan.channels)
        rng = np.random.default_rng([self.seed, epoch, 2, unit])
        order = self._augmenter(cols[0], cols[1], rng, outs[0], outs[1])
        for out, col in zip(outs[2:], cols[2:], strict=True):
            np.take(col, order, out=out[:n])
        return n

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[dict]:
        info = get_worker_info()
        workers = info.num_workers if info is not None else 1
        worker = info.id if info is not None else 0
        epoch = self._next_epoch
        self._next_epoch += 1
        progress = self._start_progress(epoch, workers)
        self._resume = None
        role = (worker + progress["next_worker"]) % workers
        skip = progress["batches"][role]
        self._progress = progress
        g = self.rank * workers + role
        packet = self._packet_batches if info is not None else 0
        return self._generate(epoch, role, g, self.world_size * workers, skip, workers, packet)

    def _generate(self, epoch: int, role: int, g: int, global_workers: int, skip: int,
                  workers: int, packet: int) -> Iterator[dict]:
        stream, block, first = self._open(epoch, g, global_workers, skip)
        b = self.batch_size
        step = max(1, packet)
        progress = self._progress
        while True:
            if block is None:
                block = stream.next_block()
                if block is None:
                    break
                first = 0
            rows = len(block[1])
            batches = self._batches_in(rows)
            i = first
            while i < batches:
                # packets sit on a fixed grid inside the block, so a restore starting at batch
                # `first` ends its first packet where the uninterrupted run's packet ended
                j = min(batches, (i // step + 1) * step)
                s, e = i * b, min(j * b, rows)
                progress["batches"][role] += j - i
                progress["next_worker"] = (role + 1) % workers
                batch = {name: t[s:e] for name, t in zip(COLUMNS, block, strict=False)}
                batch["worker"] = role
                if packet:
                    batch["batches"] = j - i
                yield batch
                i = j
            block = None
        if self._progress is progress:
            self._progress = self._fresh_progress(epoch + 1, workers)

    # ------------------------------------------------------------------ resumption

    def _fresh_progress(self, epoch: int, workers: int) -> dict:
        return {"epoch": epoch, "batches": [0] * workers, "next_worker": 0}

    def _start_progress(self, epoch: int, workers: int) -> dict:
        """Where a pass over `epoch` with `workers` workers starts: a restored state or 0."""
        resume = self._resume
        if resume is None or resume["epoch"] != epoch or not any(resume["batches"]):
            return self._fresh_progress(epoch, workers)
        if len(resume["batches"]) != workers:
            raise ValueError(f"state was saved with {len(resume['batches'])} worker(s) per rank, "
                             f"this loader has {workers}; resume with the same num_workers")
        return {"epoch": epoch, "batches": list(resume["batches"]),
                "next_worker": int(resume["next_worker"]) % workers}

    def _fingerprint(self) -> dict:
        return {"split": self.split, "rows": self.rows, "units": len(self.plan.unit_rows),
                "batch_size": self.batch_size, "shuffle_buffer": self.shuffle_buffer,
                "augment": self.augment, "drop_last": self.drop_last, "rank": self.rank,
                "world_size": self.world_size}

    def state_dict(self) -> dict:
        """Position in the data stream: epoch in progress, batches delivered per worker.

        Tracks iteration in this process (num_workers=0); with workers use
        `ShardLoader.state_dict`, which counts the batches the main process received.
        """
        progress = self._resume if self._resume is not None else self._progress
        return self._state(progress)

    def _state(self, progress: dict) -> dict:
        return {"version": STATE_VERSION, "seed": self.seed, **copy.deepcopy(progress),
                **self._fingerprint()}

    def end_epoch(self, epoch: int) -> None:
        """Leave `epoch` (the pass in progress, or a restored position in it) where it stands:
        the next pass, and `state_dict` from now on, start epoch + 1 (num_workers=0). For
        distributed training, where every rank stops after the batches all ranks have."""
        self._next_epoch = epoch + 1
        self._resume = None
        self._progress = self._fresh_progress(epoch + 1, len(self._progress["batches"]))

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state` at the next pass (seed and epoch are taken from it)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"loader state version {state.get('version')}, "
                             f"expected {STATE_VERSION}")
        mine = self._fingerprint()
        differ = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
        if differ:
            raise ValueError("loader state does not match this loader "
                             + ", ".join(f"{k}: saved {a!r}, here {b!r}"
                                         for k, (a, b) in differ.items()))
        self.seed = int(state["seed"])
        self._next_epoch = int(state["epoch"])
        progress = {"epoch": int(state["epoch"]), "batches": [int(b) for b in state["batches"]],
                    "next_worker": int(state["next_worker"])}
        self._resume = progress
        self._progress = copy.deepcopy(progress)


def _worker_context() -> multiprocessing.context.BaseContext:
    """The forkserver context, its server preloading this module (torch, pyarrow) so that each
    worker starts as a cheap fork of it."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


class ShardLoader(DataLoader):
    """DataLoader over a ShardStream that also knows its position (see the module doc).

    With workers, each worker hands over packets of up to PACKET_ROWS rows (whole batches,
    views of one storage) and this loader cuts them into batches: passing a tensor between
    processes costs a fixed amount per message, too much to pay per batch of a few hundred
    rows. `prefetch_factor` therefore counts packets per worker.
    """

    def __init__(self, dataset: ShardStream, **kwargs: Any):
        if kwargs.get("num_workers", 0) > 0:
            # workers come from a clean forkserver, not forked from this process: a fork of a
            # process running other threads (Prefect's API client and event loop in a flow run)
            # left workers that exited with code 1 at shutdown
            kwargs.setdefault("multiprocessing_context", _worker_context())
        super().__init__(dataset, batch_size=None, **kwargs)
        self._roles = max(1, self.num_workers)
        if self.num_workers > 0:
            dataset._packet_batches = max(1, PACKET_ROWS // dataset.batch_size)
        self._started = False
        self._progress: dict | None = None
        self._live: Any = None  # the DataLoader iterator of the pass in progress

    @property
    def epoch(self) -> int:
        """The epoch of the pass in progress, or of the next pass."""
        if self._progress is not None:
            return self._progress["epoch"]
        return self.dataset.epoch

    def __len__(self) -> int:
        return self.dataset.num_batches(self.num_workers, epoch=self.epoch)

    def __iter__(self) -> Iterator[dict]:
        ds: ShardStream = self.dataset
        epoch = ds.epoch
        progress = ds._start_progress(epoch, self._roles)
        iterator = super().__iter__()  # workers / the fetcher take their copy of ds here
        self._live = iterator
        if self.num_workers > 0:  # ds itself is not iterated here: mirror what workers do
            ds._next_epoch = epoch + 1
            ds._resume = None
        self._started = True
        self._progress = progress
        return self._track(iterator, progress)

    def _track(self, iterator: Iterator[dict], progress: dict) -> Iterator[dict]:
        b = self.dataset.batch_size
        for packet in iterator:
            role = packet["worker"]
            count = packet.get("batches", 1)
            tensors = {name: packet[name] for name in COLUMNS if name in packet}
            for i in range(count):
                progress["batches"][role] += 1
                # the DataLoader goes round-robin over packets: while one is being cut, its
                # worker is still the one that delivers next
                progress["next_worker"] = role if i + 1 < count else (role + 1) % self._roles
                if count == 1:
                    yield {**tensors, "worker": role}
                else:
                    s = i * b
                    yield {**{k: t[s:s + b] for k, t in tensors.items()}, "worker": role}
        if self._progress is progress:
            self._progress = self.dataset._fresh_progress(progress["epoch"] + 1, self._roles)

    def close(self) -> None:
        """Stop the worker processes now rather than when the garbage collector gets to the
        iterator (persistent workers otherwise outlive the loop that used them)."""
        shutdown = getattr(self._live, "_shutdown_workers", None)  # persistent: the _iterator
        if shutdown is not None:
            shutdown()
        self._live = None
        self._iterator = None  # a later pass starts new workers

    def end_epoch(self, epoch: int) -> None:
        """Leave `epoch` unfinished, as `ShardStream.end_epoch`: the next pass (which workers
        start as their next epoch too) and `state_dict` are at epoch + 1."""
        ds: ShardStream = self.dataset
        if self._started and self.num_workers > 0 and ds.epoch != epoch + 1:
            raise RuntimeError(f"the workers are past epoch {epoch}: end an epoch only while "
                               "its pass is the last one started")
        ds._next_epoch, ds._resume = epoch + 1, None
        self._progress = ds._fresh_progress(epoch + 1, self._roles)

    def state_dict(self) -> dict:
        ds: ShardStream = self.dataset
        if self._progress is None:
            return ds.state_dict()
        return ds._state(self._progress)

    def load_state_dict(self, state: dict) -> None:
        if self._started and self.num_workers > 0:
            raise RuntimeError("load_state_dict must come before the first pass: the workers "
                               "already hold their copy of the stream")
        batches = state.get("batches", [])
        if any(batches) and len(batches) != self._roles:
            raise ValueError(f"state was saved with {len(batches)} worker(s) per rank, this "
                             f"loader has {self._roles}; resume with the same num_workers")
        self.dataset.load_state_dict(state)
        self._progress = None


def make_loader(dataset_dir: str | Path, split: str = "train", batch_size: int = 256,
                num_workers: int = 0, seed: int = 0, epoch: int = 0,
                pin_memory: bool | None = None, prefetch_factor: int = 4,
                **stream_options: Any) -> ShardLoader:
    """A DataLoader of ready batches (dicts of tensors) over `ShardStream`.

    pin_memory defaults to `torch.cuda.is_available()`; `stream_options` go to ShardStream
    (shuffle_buffer, augment, rank, world_size, drop_last). Workers are persistent, so each
    pass over the loader is the next epoch without re-forking. Memory per worker (or in the
    main process when num_workers=0): two buffers of shuffle_buffer + batch_size + one row
    group of rows, plus the block being delivered and the row group being read: about 150 MB
    (peak RSS growth measured) for 15x15 boards with the defaults, plus prefetch_factor packets
    per worker in flight. A 19x19 Go row is 1,444 bytes (4 planes) against 225, so the same
    settings hold about 6x as much; a whole Go training process with them (loader in the main
    process, validation and test in memory) peaked at 1.45 GB RSS (docs/go_training.md).
    Lower shuffle_buffer to bound it.
    """
    stream = ShardStream(dataset_dir, split=split, batch_size=batch_size, seed=seed,
                         epoch=epoch, **stream_options)
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    extra: dict[str, Any] = {}
    if num_workers > 0:
        extra = {"persistent_workers": True, "prefetch_factor": prefetch_factor}
    return ShardLoader(stream, num_workers=num_workers, pin_memory=pin_memory, **extra)
