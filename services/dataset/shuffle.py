"""One loader worker's shuffle buffer, and the tensors a block of batches is gathered into.

`ShuffleBuffer` turns a worker's units, in order, into blocks of whole batches drawn from a
buffer without replacement (so each row leaving is a uniform pick among the rows held); it
works on real rows or, to fast-forward a restored loader, on row ids alone, making the same
generator calls either way. `batch_tensors` lays a block's columns out in one storage (shared
memory in a worker), so a block crosses to the main process as one message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch


class ShuffleBuffer:
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


def plain_alloc(dtypes: list[tuple[tuple[int, ...], Any]]):
    def alloc(rows: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        arrays = [np.empty((rows, *tail), dtype=dtype) for tail, dtype in dtypes]
        return arrays, arrays
    return alloc


def batch_tensors(n: int, size: int, shared: bool = False, channels: int = 1,
                  results: bool = False, targets: int = 0) -> tuple[torch.Tensor, ...]:
    """boards int8 [n, s, s] (or [n, channels, s, s] when channels > 1) and moves int64 [n]
    (and with `results` results float32 [n], with `targets` > 0 policy targets float32
    [n, targets]) as views of one uint8 storage.

    `shared`: allocate it in shared memory (in a worker, as torch's default_collate does),
    which saves copying the block there when it is sent to the main process.
    """
    shape = (n, size, size) if channels == 1 else (n, channels, size, size)
    cells = n * channels * size * size
    offset = -(-cells // 8) * 8  # int64 view must start 8-aligned
    at_targets = offset + 8 * n + (4 * n if results else 0)
    total = at_targets + 4 * n * targets
    if shared:
        raw = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(total))
    else:
        raw = torch.empty(total, dtype=torch.uint8)
    boards = raw[:cells].view(torch.int8).view(shape)
    moves = raw[offset:offset + 8 * n].view(torch.int64)
    out: tuple[torch.Tensor, ...] = (boards, moves)
    if results:
        out += (raw[offset + 8 * n:at_targets].view(torch.float32),)
    if targets:
        out += (raw[at_targets:].view(torch.float32).view(n, targets),)
    return out
