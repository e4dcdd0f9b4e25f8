"""Streaming training loader: shards -> shuffled, augmented, ready tensor batches.

`ShardStream` is an `IterableDataset` that yields whole batches, so a `DataLoader` over it runs
with `batch_size=None` (`make_loader` builds one). Each batch is a dict:

    boards  int8  [B, s, s]     Gomoku: compact cells (0 empty, 1 black, 2 white)
            int8  [B, 4, s, s]  Go: the compact planes of `services.games.go.features`
                                (stones seen from the mover, liberties, move age, ko)
    moves   int64 [B]           y * s + x, transformed together with its board; Go: s * s = pass
    results float32 [B]         only with `results=True` (value training): the mover's result,
                                1 won, 0 lost, 0.5 draw, NaN unknown (the shards' `result`);
                                with `value_per_game` > 0 a sample of each game's rows keeps
                                it, the others read NaN (see "Value sampling")
    targets float32 [B, n_moves] only with `targets=True` (the default on self-play shards):
                                each row's policy target as a distribution, moved with its
                                board: a full search's normalised visits, a fast search's
                                zeros (no policy loss), a records' row its played move, one-hot
                                (`row_groups.policy_targets`, docs/selfplay.md)
    worker  int                 which of this rank's workers made it (used for resumption)

Boards stay compact int8 until they reach the model's device, where the model itself (every
built model takes compact inputs), or the game's `Game.expand_planes` for a bare network, turns
them into float feature planes. Shipping
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

Value sampling (`value_per_game` k > 0, with `results`): every position of a game shares one
result, so a value head trained on all of them learns to recognise the game rather than judge
the position (AlphaGo's value network overfit that way and was trained on one position per
game; the BAKAGO report does the same). Each row keeps its result with probability
min(1, k / g), g its game's rows in the split (`game_id`), and reads NaN (no value loss)
otherwise: each game gives about k value targets per epoch, whatever its length. The draw is
the unit's own generator's (seed, epoch, unit), made before augmentation, so a resumed pass and
any worker see the same sample, and another epoch another one. The policy target of every row
is kept.

Modules: `services.dataset.row_groups` (a split's units and reading one), `.shuffle` (a
worker's shuffle buffer, block tensors), `.augment` (the D4 symmetries); this one streams
them as an epoch's batches and keeps the position.

Why the position is kept here rather than by torchdata's `StatefulDataLoader`: that loader
records the state of each item a worker yields (here a packet of up to PACKET_ROWS rows,
which the main process cuts into batches), so a position inside a packet is not one it can
hold, and a restore would still need this stream's replay on row ids to avoid reading every
row before the position again; giving up packets brings back the per-message transfer cost
they avoid. It is itself a copy of DataLoader's iterator on torch's private modules
(torchdata 0.11.0, February 2025, the latest release; it runs with torch 2.13.0, workers
included), one more dependency for a state that is a few integers per worker here, counted
in the main process and replayed exactly. One torch detail remains, in `ShardLoader.close`:
DataLoader has no public way to stop persistent workers, so it calls the live iterator's
`_shutdown_workers` (what that iterator's `__del__` calls) and drops DataLoader's
`_iterator`, which would otherwise keep them.
"""

from __future__ import annotations

import copy
import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from services.dataset.augment import Augmenter, random_symmetry_torch
from services.dataset.row_groups import (
    MIN_UNITS_PER_RANK,
    SplitPlan,
    board_matrix,
    dataset_game,
    plan_split,
    read_unit,
    split_for_ranks,
)
from services.dataset.shuffle import ShuffleBuffer, batch_tensors, plain_alloc

STATE_VERSION = 1


PACKET_ROWS = 16384  # rows a worker hands to the main process at once


COLUMNS = ("boards", "moves", "results", "targets")  # what a batch may hold, in block order


def fresh_progress(epoch: int, workers: int) -> dict:
    """The position at the start of `epoch`: no batch delivered by any of `workers`."""
    return {"epoch": epoch, "batches": [0] * workers, "next_worker": 0}


class ShardStream(IterableDataset):
    """Shuffled, augmented batches of one split, sharded across workers and ranks."""

    def __init__(self, dataset_dir: str | Path, split: str = "train", batch_size: int = 256,
                 shuffle_buffer: int = 65536, seed: int = 0, epoch: int = 0,
                 augment: bool = True, rank: int = 0, world_size: int = 1,
                 drop_last: bool = True, results: bool = False,
                 targets: bool | None = None, value_per_game: float = 0.0):
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not value_per_game >= 0:
            raise ValueError(f"value_per_game must be >= 0, got {value_per_game}")
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
        self.plan = split_for_ranks(plan_split(self.dataset_dir, split), world_size)
        # also deliver every row's policy target (None: where the shards hold them)
        self.targets = self.plan.policy_targets if targets is None else targets
        self.board_size = self.plan.board_size
        self.game = self.plan.game  # "gomoku" or "go": decides board shape and move range
        # value sampling (see the module): the split's game ids and each one's rows
        self.value_per_game = float(value_per_game) if results else 0.0
        self.game_rows = game_rows(self.plan) if self.value_per_game else None
        self._next_epoch = epoch  # epoch of the next __iter__ call in this process
        self._resume: dict | None = None
        self._progress = fresh_progress(epoch, 1)
        self._augmenter: Augmenter | None = None
        # >0: in workers, yield packets of that many batches (`ShardLoader` sets it)
        self.packet_batches = 0

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

    @property
    def columns(self) -> tuple[str, ...]:
        """The names of a batch's tensors, in block order (`COLUMNS` this stream delivers)."""
        return ("boards", "moves", *(("results",) if self.results else ()),
                *(("targets",) if self.targets else ()))

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
        cols = self._empty_columns(len(ids), results, False)
        unit_of = np.searchsorted(plan.unit_start, ids, side="right") - 1
        for unit in np.unique(unit_of).tolist():
            slots = np.flatnonzero(unit_of == unit)
            local = ids[slots] - plan.unit_start[unit]
            for out, col in zip(cols, read_unit(plan, unit, results, False), strict=True):
                out[slots] = col[local]
        return (cols[0].reshape(len(ids), *self.board_shape), *cols[1:])

    def _specs(self, results: bool | None = None,
               targets: bool | None = None) -> list[tuple[tuple[int, ...], Any]]:
        """(shape of one row, dtype) of each column a row carries: boards, moves[, results]
        [, targets] (None: as the stream delivers them)."""
        specs = [((self.plan.row_bytes,), np.int8), ((), np.int64)]
        if self.results if results is None else results:
            specs.append(((), np.float32))
        if self.targets if targets is None else targets:
            specs.append(((self.plan.n_moves,), np.float32))
        return specs

    def _empty_columns(self, rows: int, results: bool | None = None,
                       targets: bool | None = None) -> list[np.ndarray]:
        return [np.empty((rows, *tail), dtype=dtype)
                for tail, dtype in self._specs(results, targets)]

    def units_of(self, epoch: int, global_worker: int, global_workers: int) -> np.ndarray:
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
            units = self.units_of(epoch, rank * local + role, self.world_size * local)
            rows = int(self.plan.unit_rows[units].sum())
            total += rows // self.batch_size if self.drop_last else -(-rows // self.batch_size)
        return total

    def _batches_in(self, rows: int) -> int:
        b = self.batch_size
        return rows // b if self.drop_last else -(-rows // b)

    def _open(self, epoch: int, g: int, global_workers: int,
              skip: int) -> tuple[ShuffleBuffer, tuple[torch.Tensor, torch.Tensor] | None, int]:
        """Stream of global worker g, positioned after `skip` batches.

        Returns (stream, current block or None, first batch inside it). To skip, the stream
        runs on row ids (no Parquet read, same generator calls), then the rows that its buffer
        and current block hold are read again from their row groups.
        """
        plan = self.plan
        units = self.units_of(epoch, g, global_workers)
        rng = np.random.default_rng([self.seed, epoch, 1, global_workers, g])
        shape = (self.shuffle_buffer, self.batch_size, int(plan.unit_rows.max()))
        specs = self._specs()

        def load(unit: int, outs: list[np.ndarray]) -> int:
            return self._load_into(unit, epoch, outs)

        if skip == 0:
            return ShuffleBuffer(units, load, specs, *shape, rng, self._alloc), None, 0

        def ids(unit: int, outs: list[np.ndarray]) -> int:
            rows = int(plan.unit_rows[unit])
            outs[0][:rows] = np.arange(plan.unit_start[unit], plan.unit_start[unit] + rows)
            return rows

        id_specs = [((), np.int64)]
        sim = ShuffleBuffer(units, ids, id_specs, *shape, rng, plain_alloc(id_specs))
        left = skip
        while (held_block := sim.next_block()) is not None:
            batches = self._batches_in(len(held_block[0]))
            if left < batches:
                break
            left -= batches
        stream = ShuffleBuffer(units, load, specs, *shape, sim.rng, self._alloc)
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
        block = batch_tensors(rows, self.board_size, shared, self.plan.channels, self.results,
                              self.plan.n_moves if self.targets else 0)
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
        cols = read_unit(self.plan, unit, self.results, self.targets,
                         game_ids=self.game_rows is not None)
        if self.game_rows is not None:
            sample_values(cols[2], cols.pop(), self.game_rows, self.value_per_game,
                          np.random.default_rng([self.seed, epoch, 3, unit]))
        n = len(cols[1])
        if not self.augment:
            for out, col in zip(outs, cols, strict=True):
                out[:n] = col
            return n
        if self._augmenter is None:
            self._augmenter = Augmenter(self.board_size, self.plan.channels)
        rng = np.random.default_rng([self.seed, epoch, 2, unit])
        moved = (cols[-1], outs[-1][:n]) if self.targets else (None, None)
        order = self._augmenter(cols[0], cols[1], rng, outs[0], outs[1], *moved)
        travelling = len(cols) - (1 if self.targets else 0)  # columns that move unchanged
        for out, col in zip(outs[2:travelling], cols[2:travelling], strict=True):
            np.take(col, order, out=out[:n])
        return n

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[dict]:
        info = get_worker_info()
        workers = info.num_workers if info is not None else 1
        worker = info.id if info is not None else 0
        epoch = self._next_epoch
        self._next_epoch += 1
        progress = self.start_progress(epoch, workers)
        self._resume = None
        role = (worker + progress["next_worker"]) % workers
        skip = progress["batches"][role]
        self._progress = progress
        g = self.rank * workers + role
        packet = self.packet_batches if info is not None else 0
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
                batch = {name: t[s:e] for name, t in zip(self.columns, block, strict=True)}
                batch["worker"] = role
                if packet:
                    batch["batches"] = j - i
                yield batch
                i = j
            block = None
        if self._progress is progress:
            self._progress = fresh_progress(epoch + 1, workers)

    # ------------------------------------------------------------------ resumption

    def start_progress(self, epoch: int, workers: int) -> dict:
        """Where a pass over `epoch` with `workers` workers starts: a restored state or 0
        (`ShardLoader` asks, to count the batches its workers deliver)."""
        resume = self._resume
        if resume is None or resume["epoch"] != epoch or not any(resume["batches"]):
            return fresh_progress(epoch, workers)
        if len(resume["batches"]) != workers:
            raise ValueError(f"state was saved with {len(resume['batches'])} worker(s) per rank, "
                             f"this loader has {workers}; resume with the same num_workers")
        return {"epoch": epoch, "batches": list(resume["batches"]),
                "next_worker": int(resume["next_worker"]) % workers}

    def _fingerprint(self) -> dict:
        return {"split": self.split, "rows": self.rows, "units": len(self.plan.unit_rows),
                "batch_size": self.batch_size, "shuffle_buffer": self.shuffle_buffer,
                "augment": self.augment, "drop_last": self.drop_last, "rank": self.rank,
                "world_size": self.world_size,
                **({"value_per_game": self.value_per_game} if self.value_per_game else {})}

    def state_dict(self) -> dict:
        """Position in the data stream: epoch in progress, batches delivered per worker.

        Tracks iteration in this process (num_workers=0); with workers use
        `ShardLoader.state_dict`, which counts the batches the main process received.
        """
        progress = self._resume if self._resume is not None else self._progress
        return self.state_at(progress)

    def state_at(self, progress: dict) -> dict:
        """The state of this stream at `progress` (a pass's position)."""
        return {"version": STATE_VERSION, "seed": self.seed, **copy.deepcopy(progress),
                **self._fingerprint()}

    def end_epoch(self, epoch: int) -> None:
        """Leave `epoch` (the pass in progress, or a restored position in it) where it stands:
        the next pass, and `state_dict` from now on, start epoch + 1 (num_workers=0). For
        distributed training, where every rank stops after the batches all ranks have."""
        self._next_epoch = epoch + 1
        self._resume = None
        self._progress = fresh_progress(epoch + 1, len(self._progress["batches"]))

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


def game_rows(plan: SplitPlan) -> tuple[pa.Array, np.ndarray]:
    """(the split's distinct game ids, each one's rows in the split): what value sampling
    divides by. Reads the `game_id` column of the split's shards (strings only, once)."""
    paths = sorted(set(plan.paths))
    ids = pa.chunked_array([pq.read_table(p, columns=["game_id"]).column(0) for p in paths])
    counts = pc.value_counts(ids.combine_chunks()).flatten()
    return counts[0], counts[1].to_numpy().astype(np.float64)


def sample_values(results: np.ndarray, game_ids: pa.ChunkedArray,
                  rows: tuple[pa.Array, np.ndarray], per_game: float,
                  rng: np.random.Generator) -> None:
    """Keep each row's result with probability min(1, per_game / its game's rows), NaN
    otherwise (in place; see "Value sampling" in the module)."""
    ids, counts = rows
    at = pc.index_in(game_ids, value_set=ids).to_numpy(zero_copy_only=False)
    # a game id missing from the table (cannot happen for the table's own split): kept
    size = np.where(np.isnan(at), 1.0, counts[np.nan_to_num(at).astype(np.int64)]) \
        if at.dtype.kind == "f" else counts[at]
    keep = rng.random(len(results)) < np.minimum(1.0, per_game / np.maximum(size, 1.0))
    results[~keep] = np.nan


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
            dataset.packet_batches = max(1, PACKET_ROWS // dataset.batch_size)
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
        progress = ds.start_progress(epoch, self._roles)
        iterator = super().__iter__()  # workers / the fetcher take their copy of ds here
        self._live = iterator
        if self.num_workers > 0:  # ds itself is not iterated here: mirror what workers do
            ds.set_epoch(epoch + 1)
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
            self._progress = fresh_progress(progress["epoch"] + 1, self._roles)

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
        ds.set_epoch(epoch + 1)
        self._progress = fresh_progress(epoch + 1, self._roles)

    def state_dict(self) -> dict:
        ds: ShardStream = self.dataset
        if self._progress is None:
            return ds.state_dict()
        return ds.state_at(self._progress)

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


__all__ = ["COLUMNS", "MIN_UNITS_PER_RANK", "PACKET_ROWS", "STATE_VERSION", "ShardLoader",
           "ShardStream", "board_matrix", "dataset_game", "fresh_progress",
           "make_loader", "random_symmetry_torch"]
