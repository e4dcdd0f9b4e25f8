"""The loader's augmentation: an independent uniform D4 board symmetry per row.

`Augmenter` applies it to a unit's rows in numpy as the loader reads them; for Go every one
of the 4 compact planes moves with the same symmetry (liberties, move ages and ko are
properties of points) and a pass (move s*s) stays a pass. `random_symmetry_torch` does the
same to batches already on a device, for a loader built with `augment=False`.
"""

from __future__ import annotations

import numpy as np
import torch

from services.games.symmetry import N_SYMMETRIES, point_table


class Augmenter:
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
        # the same for a policy's entries (the pass stays): policy targets move by it
        self.move_inverse = np.argsort(self.move_table, axis=1)
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
                 out_boards: np.ndarray, out_moves: np.ndarray,
                 targets: np.ndarray | None = None,
                 out_targets: np.ndarray | None = None) -> np.ndarray:
        """Write the transformed rows (in grouped order); return that order, the row each
        output came from, for columns that travel along unchanged. `targets` (float [n,
        policy entries], policy targets) move with their row's symmetry into `out_targets`
        (the same draws: the boards and moves come out the same with or without them)."""
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
        if targets is not None and out_targets is not None:
            grouped_targets = np.take(targets, order, axis=0)
            start = 0
            for k, count in enumerate(np.bincount(ks, minlength=N_SYMMETRIES).tolist()):
                if count:  # entry q of the image is entry inverse[k, q] of the row
                    np.take(grouped_targets[start:start + count],
                            self.move_inverse[k, :targets.shape[1]], axis=1,
                            out=out_targets[start:start + count])
                start += count
        return order


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
    cells = size * size
    channels = boards[0].numel() // cells if n else 1  # planes per row move alike
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
