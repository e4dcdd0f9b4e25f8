"""Loader benchmark: positions/s delivered as ready tensors by `services.dataset.loader`, against
reading the same shards with `pyarrow.parquet.read_table` (the baseline, measured in the same run).

    .venv/bin/python benchmarks/loader.py [--rows 2000000] [--batch-size 256] [--workers 0 1 2]
                                          [--dataset DIR]

The dataset is synthetic but has the shards' exact schema and writer options (LZ4 boards, row groups
of `ROW_GROUP_ROWS`, `ROWS_PER_SHARD` per file): positions of a geometric number of stones
(mean ~37, like the shipped sample) clustered around a random centre. It is written once to
--data (default /tmp/movepred-loader-bench-<rows>-<board codec>) and reused. `--dataset DIR`
times the train split of an existing dataset instead (e.g. a Go dataset from the ingest flow,
whose boards are stored packed and unpacked by the loader).

For each configuration the loader runs two epochs; the second is timed (persistent workers
already started; the shuffle buffer's fill at the start of the epoch is included). Figures:
positions/s of wall time; positions per CPU-second of all processes involved (the main process
plus its workers), which is the per-core rate and is less sensitive to other load on the
machine; and the main (training) process's own CPU time per position. The consumer only
receives each batch (no model, no copy to a device).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from services.dataset import shards  # noqa: E402
from services.dataset.loader import dataset_game, make_loader  # noqa: E402

SIZE = 15
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> tuple[float, float]:
    """CPU time (user + system) of this process and of its live children, from /proc."""
    me = os.getpid()
    own = children = 0.0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds = (int(fields[11]) + int(fields[12])) / _TICK
        if int(entry.name) == me:
            own += seconds
        elif int(fields[1]) == me:
            children += seconds
    return own, children


def synthetic_chunk(rng: np.random.Generator, n: int) -> pa.Table:
    cells = SIZE * SIZE
    ply = np.minimum(rng.geometric(1 / 38, n) - 1, cells - 1)
    yx = np.indices((SIZE, SIZE), dtype=np.float32).reshape(2, 1, cells)
    centre = rng.normal(SIZE // 2, 2.0, (2, n, 1)).astype(np.float32)
    dist = (yx[0] - centre[0]) ** 2 + (yx[1] - centre[1]) ** 2 + 1.0
    key = dist * rng.exponential(1.0, (n, cells)).astype(np.float32)
    order = np.argsort(key, axis=1)
    stone = (1 + np.arange(cells) % 2).astype(np.int8)
    values = np.where(np.arange(cells)[None, :] < ply[:, None], stone[None, :], 0).astype(np.int8)
    boards = np.zeros((n, cells), dtype=np.int8)
    np.put_along_axis(boards, order, values, axis=1)
    moves = order[np.arange(n), ply]
    offsets = np.arange(0, (n + 1) * cells, cells, dtype=np.int32)
    board_col = pa.Array.from_buffers(pa.binary(), n,
                                      [None, pa.py_buffer(offsets), pa.py_buffer(boards)])
    return shards.with_pair_columns(pa.table({
        "board": board_col,
        "move": pa.array(moves.astype(np.int16)),
        "board_size": pa.array(np.full(n, SIZE, np.int8)),
        "to_move": pa.array((1 + ply % 2).astype(np.int8)),
        "ply": pa.array(ply.astype(np.int16)),
        "count": pa.array(np.ones(n, np.int32)),
        "position_hash": pa.array(rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64)),
        "game_id": pa.array(["synthetic"] * n, pa.string()),
        "source": pa.array(["synthetic"] * n, pa.string()),
        "split": pa.array(["train"] * n, pa.string()),
        "result": pa.array(rng.choice(np.array([0.0, 0.5, 1.0], np.float32), n)),
    }))


def make_dataset(out: Path, rows: int, seed: int = 0) -> None:
    """Synthetic train shards with the writer options of services.dataset.shards."""
    manifest = out / "manifest.json"
    if manifest.exists() and shards.read_manifest(out)["rows"] == rows:
        return
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    files, written, index = [], 0, 0
    t = time.perf_counter()
    while written < rows:
        shard_rows = min(shards.ROWS_PER_SHARD, rows - written)
        path = out / f"train-{index:05d}.parquet"
        options = shards.parquet_options(shards.PAIR_SCHEMA)
        with pq.ParquetWriter(path, shards.PAIR_SCHEMA, compression=options["compression"],
                              use_dictionary=options["use_dictionary"],
                              write_statistics=options["write_statistics"],
                              store_schema=True) as writer:
            done = 0
            while done < shard_rows:
                n = min(shards.ROW_GROUP_ROWS, shard_rows - done)
                writer.write_table(synthetic_chunk(rng, n), row_group_size=shards.ROW_GROUP_ROWS)
                done += n
        files.append({"path": path.name, "split": "train", "rows": shard_rows,
                      "sha256": shards.sha256_file(path)})
        written += shard_rows
        index += 1
    shards.atomic_write_json({"schema_version": shards.SCHEMA_VERSION, "rows": rows,
                              "splits": {"train": rows}, "files": files}, manifest)
    print(f"wrote {rows:,} synthetic rows in {len(files)} shard(s) to {out} "
          f"({time.perf_counter() - t:.1f} s)")


def baseline(out: Path, use_threads: bool) -> tuple[float, float]:
    paths = sorted(out.glob("train-*.parquet"))
    c, t = sum(cpu_seconds()), time.perf_counter()
    rows = 0
    for path in paths:
        rows += pq.read_table(path, columns=["board", "move"], use_threads=use_threads).num_rows
    wall, cpu = time.perf_counter() - t, sum(cpu_seconds()) - c
    return rows / wall, rows / max(cpu, 1e-9)


def run_loader(out: Path, workers: int, batch_size: int,
               augment: bool) -> tuple[float, float, float]:
    """Positions/s, positions per CPU-second (all processes), main-process CPU ns per position."""
    loader = make_loader(out, "train", batch_size=batch_size, num_workers=workers, seed=0,
                         epoch=0, pin_memory=False, augment=augment)
    for _ in loader:  # epoch 0: starts the workers, warms caches
        pass
    (own0, kids0), t = cpu_seconds(), time.perf_counter()
    rows = 0
    for batch in loader:  # epoch 1, timed
        rows += batch["moves"].shape[0]
    (own1, kids1), wall = cpu_seconds(), time.perf_counter() - t
    cpu = own1 - own0 + kids1 - kids0
    del loader
    return rows / wall, rows / max(cpu, 1e-9), (own1 - own0) / rows * 1e9


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2],
                        help="num_workers values to run with augmentation (0 also runs without)")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--dataset", type=Path, default=None,
                        help="an existing dataset folder: its train split, nothing generated")
    args = parser.parse_args(argv)
    if args.dataset:
        out = args.dataset
        manifest = shards.read_manifest(out)
        args.rows = manifest["splits"]["train"]
        game, size = dataset_game(out)
        print(f"dataset {out}: {game} {size}x{size}, board encoding "
              f"{shards.board_encoding(manifest)}")
    else:
        out = args.data or Path(f"/tmp/movepred-loader-bench-{args.rows}-{shards.BOARD_CODEC}")
        make_dataset(out, args.rows)
    size_mb = sum(p.stat().st_size for p in out.glob("train-*.parquet")) / 1e6
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f} at start; torch {torch.__version__}, "
          f"pyarrow {pa.__version__}, numpy {np.__version__}")
    print(f"dataset: {args.rows:,} rows, {size_mb:.0f} MB of shards; batch {args.batch_size}, "
          f"shuffle buffer 65,536 rows per worker\n")
    print(f"{'configuration':<38}{'positions/s':>12}{'per CPU-s':>12}{'main ns/pos':>12}"
          f"{'ratio to 1-thread read':>25}")
    base_wall, base_cpu = baseline(out, use_threads=True)
    print(f"{'baseline read_table, threads':<38}{base_wall:>12,.0f}{base_cpu:>12,.0f}")
    base1_wall, base1_cpu = baseline(out, use_threads=False)
    print(f"{'baseline read_table, 1 thread':<38}{base1_wall:>12,.0f}{base1_cpu:>12,.0f}")
    runs = [(0, False)] + [(w, True) for w in args.workers]
    for workers, augment in runs:
        wall, cpu, main_ns = run_loader(out, workers, args.batch_size, augment)
        name = f"loader num_workers={workers}" + ("" if augment else ", no augmentation")
        print(f"{name:<38}{wall:>12,.0f}{cpu:>12,.0f}{main_ns:>12,.0f}"
              f"{f'{wall / base1_wall:.2f} wall, {cpu / base1_cpu:.2f} CPU':>25}")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
