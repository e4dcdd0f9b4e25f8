"""Ingest benchmark: game records -> deduplicated Parquet shards, stage by stage.

    .venv/bin/python benchmarks/ingest.py [--games 66000] [--reference-games 2000]
                                          [--dedup-rows 10000000] [--repeat 3]

    .venv/bin/python benchmarks/ingest.py --memory [--sizes 1000000,10000000]
    .venv/bin/python benchmarks/ingest.py --game go [ARCHIVE ...] [--repeat 3] [--profile]

`--memory`: peak RSS and per-position cost of Go ingests of growing KGS-like corpora and of
the real ../shared Go archives (benchmarks/ingest_memory.py, which documents its options).
`--game go`: Go ingest speed end to end on Go archives, with and without Prefect, against
sgfmill parse + replay in the same run (benchmarks/ingest_go.py, which documents its options).

Inputs: a RenjuNet-size `.rif` of `--games` self-play games from the project's own generator
(`services.games.gomoku.selfplay`, the same games `generate(games, seed)` gives, played on two
processes and cached under --cache, so only the first run pays for it), and the real
RenjuNet-derived games of ../shared (tests/conftest.py's `renjunet_games`), written as a .rif.

Figures, each measured in a fresh child process (so peak memory is that run's own):
  * end to end, records -> shards (parse, pairs, dedup + split, shard writing), per stage:
    CPU seconds (user + system, all threads of the process), wall seconds, RSS at the start
    and peak RSS during the stage (the kernel's high-water mark, reset before each stage
    through /proc/self/clear_refs); positions/s per core = raw pairs / CPU seconds of the
    whole run. Best and median of --repeat runs.
  * the steps inside `source_pairs` and `deduplicate` (`services.step_times.STEP_TIMES`);
  * the shard writer's own parts (default columns, the splits' parts in shard order: slices
    of `deduplicate`'s output, which comes in that order, else filter + sort; Parquet encoding
    with and without compression, SHA-256, write + fsync), re-done one by one with the functions and
    options of services/dataset/shards.py;
  * the simple reference implementation (token-by-token move parsing, per-move replay, 8
    full-board images per pair, Python bytes per row, Arrow group_by, Python split strings)
    against the current code on the first --reference-games games, in the same run, with a
    check that both write byte-identical shards;
  * dedup + split of --dedup-rows synthetic rows (pair layout, chunks of 65,536 rows as the
    flow reads its intermediates back, ~44 % duplicates): time and peak memory, optionally
    against the reference (--dedup-reference).

CPU time is the per-core figure and is less sensitive to other load on the machine than wall
time; on a shared machine both move with the neighbours, so repeat and compare medians.
System time is mostly page faults on memory the process touches for the first time (on the
dev-2c VM of docs/benchmarks.md, about 2.5 s per GB when the host has to back it); user time is
the part the code's own work decides.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services import step_times  # noqa: E402
from services.dataset import build, shards  # noqa: E402
from services.dataset.shards import (  # noqa: E402
    ROW_GROUP_ROWS,
    ROWS_PER_SHARD,
    SPLITS,
    write_quarantine,
    write_split_shards,
)
from services.games import pair_tables  # noqa: E402
from services.games.gomoku import replay as gomoku_replay  # noqa: E402
from services.records import rif  # noqa: E402
from services.records.rif import RifGame, read_rif  # noqa: E402
from tests.reference_impls import deduplicate_reference, source_pairs_reference  # noqa: E402

DEFAULT_CACHE = Path(tempfile.gettempdir()) / "movepred-ingest-bench"
SIZE = 15


# --- memory -------------------------------------------------------------------------------


def _status(field: str) -> int:
    """A /proc/self/status figure (VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


@contextmanager
def stage(results: list, name: str, **extra):
    """Time one stage: CPU (process, all threads), wall, RSS at start and peak during it."""
    resettable = _reset_peak()
    rss0 = _status("VmRSS")
    start, wall = os.times(), time.perf_counter()
    yield
    end = os.times()
    user, system = end.user - start.user, end.system - start.system
    row = {"stage": name, "cpu": user + system, "user": user, "sys": system,
           "wall": time.perf_counter() - wall,
           "rss0": rss0, "peak": _status("VmHWM") if resettable else None}
    row.update(extra)
    results.append(row)


# --- inputs -------------------------------------------------------------------------------


def _play(args: tuple[int, int]) -> tuple[tuple[int, ...], float]:
    from services.games.gomoku.selfplay import play_game

    seed, i = args
    moves, bresult = play_game(np.random.default_rng([seed, i]))
    return tuple(moves), bresult


def selfplay_rif(games: int, seed: int, cache: Path) -> Path:
    """The cached .rif of `games` self-play games (what `gomoku_selfplay.generate(games, seed)`
    plays)."""
    from services.games.gomoku.rules import Rule
    from services.games.gomoku.selfplay import PLAYER, SAMPLE_DATE
    from services.records.rif_writer import write_rif

    path = cache / f"selfplay-{games}-seed{seed}.rif"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    print(f"generating {games} self-play games into {path} (once; cached) ...", flush=True)
    start = time.perf_counter()
    with get_context("spawn").Pool(max(1, os.cpu_count() or 1)) as pool:
        played = pool.map(_play, [(seed, i) for i in range(games)], chunksize=500)
    records = [RifGame(source="selfplay", game_id=str(i + 1), moves=m, rule=Rule.FREESTYLE.value,
                       bresult=b, black=PLAYER, white=PLAYER, info=f"selfplay seed={seed} game={i}")
               for i, (m, b) in enumerate(played)]
    tmp = path.with_name(path.name + ".tmp")
    write_rif(records, tmp, date=SAMPLE_DATE,
              comment=f"Synthetic freestyle Gomoku self-play games ({games} games, seed {seed})")
    os.replace(tmp, path)
    print(f"  {time.perf_counter() - start:.0f} s", flush=True)
    return path


def renjunet_rif(cache: Path) -> Path | None:
    """The real RenjuNet-derived dev games as a .rif, or None when ../shared is absent."""
    from tests.conftest import RENJUNET_TSV, renjunet_games

    if not RENJUNET_TSV.exists():
        return None
    from services.records.rif_writer import write_rif

    path = cache / "renjunet-dev.rif"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        write_rif(renjunet_games(), path, date="2024-01-01")
    return path


def synthetic_pairs(rows: int, seed: int = 0, chunk_rows: int = ROW_GROUP_ROWS) -> pa.Table:
    """`rows` rows in the raw pair layout: boards of 5-60 stones, ~44 % duplicate pairs.

    Hashes are the boards' Zobrist hashes (a function of the board, as in real tables). The
    table comes in chunks of `chunk_rows`, as the flow reads its intermediate files back.
    """
    from services.games.canonical import zobrist_table

    rng = np.random.default_rng(seed)
    cells = SIZE * SIZE
    pool = int(rows * 0.75)
    stones = rng.integers(5, 61, size=pool)
    units = np.array([s for s in range(1, cells) if np.gcd(s, cells) == 1])
    base = rng.integers(0, cells, size=pool)
    step = units[rng.integers(0, len(units), size=pool)]  # stone i at base + i * step: distinct
    pool_hash = np.empty(pool, np.uint64)
    for p0 in range(0, pool, 1 << 20):
        k = stones[p0:p0 + (1 << 20)]
        entry = np.repeat(np.arange(p0, p0 + len(k)), k)
        i = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
        keys = zobrist_table(SIZE)[(base[entry] + i * step[entry]) % cells, i % 2 + 1]
        pool_hash[p0:p0 + len(k)] = np.bitwise_xor.reduceat(keys, np.cumsum(k) - k)
    pool_move = rng.integers(0, cells, size=pool)
    # 70 % of rows uniform over the pool, 30 % from a small set of "opening" boards
    pick = np.where(rng.random(rows) < 0.7, rng.integers(0, pool, size=rows),
                    rng.integers(0, max(1, pool // 150), size=rows))
    move = ((pool_move[pick] + rng.integers(0, 2, size=rows)) % cells).astype(np.int16)
    ids = pa.array([f"g{j}" for j in range(66000)], pa.string())
    sources = pa.array(["a.rif", "b.rif"], pa.string())
    chunks = []
    for r0 in range(0, rows, chunk_rows):
        p = pick[r0:r0 + chunk_rows]
        n = len(p)
        k = stones[p]
        e = np.repeat(np.arange(n), k)
        i = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
        boards = np.zeros((n, cells), np.int8)
        boards[e, (base[p][e] + i * step[p][e]) % cells] = i % 2 + 1
        chunks.append(pa.table({
            "board": pair_tables.binary_column(boards).chunk(0),
            "move": pa.array(move[r0:r0 + n], pa.int16()),
            "board_size": pa.array(np.full(n, SIZE, np.int8)),
            "to_move": pa.array((k % 2 + 1).astype(np.int8)),
            "ply": pa.array(k.astype(np.int16)),
            "count": pa.array(np.ones(n, np.int32)),
            "position_hash": pa.array(pool_hash[p], pa.uint64()),
            "game_id": ids.take(pa.array(rng.integers(0, len(ids), size=n))),
            "source": sources.take(pa.array(rng.integers(0, 2, size=n))),
        }))
    return pa.concat_tables(chunks)


# --- runs (each in a child process) -------------------------------------------------------


def _reference_parse_moves(text: str, size: int = SIZE):
    tokens = text.split()
    if not tokens:
        return (), "empty game"
    return rif._parse_tokens(tokens, size)


def end_to_end(path: str, out: str, reference: bool = False, limit: int | None = None) -> dict:
    """records -> shards, stage by stage; `reference` runs the original implementation."""
    from itertools import islice

    step_times.STEP_TIMES = {}
    stages: list[dict] = []
    original_parse = rif.parse_moves
    if reference:
        rif.parse_moves = _reference_parse_moves
    try:
        with stage(stages, "parse .rif (expat + moves)"):
            records = list(islice(read_rif(path), limit))
    finally:
        rif.parse_moves = original_parse
    name = Path(path).name
    pairs = source_pairs_reference if reference else gomoku_replay.source_pairs
    dedup = deduplicate_reference if reference else build.deduplicate
    with stage(stages, "replay + hash + canonicalise"):
        result = pairs(name, records)
    positions = result.pairs.num_rows
    with stage(stages, "dedup + split"):
        table = dedup([result.pairs])
    result.pairs = None  # as in the flow, the raw pairs are not kept past dedup
    with stage(stages, "write shards (sort, encode, sha256)"):
        files = write_split_shards(table, Path(out))
        write_quarantine(result.quarantine, Path(out))
    return {
        "stages": stages, "steps": step_times.STEP_TIMES, "positions": positions,
        "games": result.ingested, "records": result.read, "quarantined": result.quarantined,
        "unique": table.num_rows, "shards": [(f["path"], f["rows"], f["sha256"]) for f in files],
        "peak_rss": _peak_total(),
    }


def _peak_total() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def writer_parts(path: str, out: str) -> dict:
    """The shard writer's parts (services/dataset/shards.py), re-done one by one with its
    functions and options on the dedup output of `path`."""
    records = list(read_rif(path))
    table = build.deduplicate([gomoku_replay.source_pairs(Path(path).name, records).pairs])
    del records
    stages: list[dict] = []
    fill = getattr(shards, "with_pair_columns", None)
    if fill is not None:
        with stage(stages, "fill default columns (with_pair_columns)"):
            table = fill(table)
    with stage(stages, "split parts in shard order (split, hash, move, board)"):
        parts = [part for _, part in shards.split_parts(table)]  # slices, for dedup's output
    with stage(stages, "slice + cast to PAIR_SCHEMA"):
        pieces = [shards.shard_piece(p, i) for p in parts
                  for i in range(max(1, -(-p.num_rows // ROWS_PER_SHARD)))]
    with stage(stages, "Parquet encode, no compression (for scale)"):
        for piece in pieces:
            pq.write_table(piece, pa.BufferOutputStream(),
                           **{**shards.parquet_options(piece.schema), "compression": "none"})
    with stage(stages, "Parquet encode, LZ4 boards + zstd (the writer's bytes)"):
        blobs = [shards._parquet_buffer(piece) for piece in pieces]
    with stage(stages, "SHA-256 of the files"):
        for blob in blobs:
            hashlib.sha256(blob).hexdigest()
    with stage(stages, "write + fsync"):
        Path(out).mkdir(parents=True, exist_ok=True)
        for i, blob in enumerate(blobs):
            with open(Path(out) / f"part-{i}.parquet", "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
    return {"stages": stages, "bytes": sum(len(b) for b in blobs),
            "raw_bytes": sum(p.nbytes for p in pieces), "rows": table.num_rows}


def dedup_synthetic(rows: int, reference: bool) -> dict:
    stages: list[dict] = []
    with stage(stages, "generate synthetic rows (not part of the figure)"):
        table = synthetic_pairs(rows)
    step_times.STEP_TIMES = {}
    with stage(stages, "reference: Arrow group_by + split" if reference else "dedup + split"):
        out = (deduplicate_reference if reference else build.deduplicate)([table])
    return {"stages": stages, "steps": step_times.STEP_TIMES, "rows": table.num_rows,
            "unique": out.num_rows, "input_bytes": table.nbytes,
            "splits": {s: int(pc.sum(pc.equal(out["split"], s)).as_py()) for s in SPLITS}}


def in_child(fn, *args):
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


# --- report -------------------------------------------------------------------------------


def mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"


def print_stages(stages: list[dict], positions: int | None = None) -> None:
    print(f"  {'stage':<44}{'CPU s':>7}{'user':>7}{'sys':>6}{'wall s':>8}{'share':>6}"
          f"{'RSS at start':>13}{'peak RSS':>10}" + ("  positions/CPU-s" if positions else ""))
    total = sum(s["cpu"] for s in stages)
    for s in stages:
        rate = f"  {positions / s['cpu']:>14,.0f}" if positions and s["cpu"] > 0 else ""
        print(f"  {s['stage']:<44}{s['cpu']:>7.2f}{s['user']:>7.2f}{s['sys']:>6.2f}"
              f"{s['wall']:>8.2f}{s['cpu'] / total if total else 0:>6.0%}{mib(s['rss0']):>13}"
              f"{mib(s['peak']):>10}" + rate)


def print_steps(steps: dict) -> None:
    for name, (user, system, wall) in steps.items():
        print(f"    {name:<42}{user + system:>7.2f}{user:>7.2f}{system:>6.2f}{wall:>8.2f}")


def run_end_to_end(label: str, path: Path, repeat: int, work: Path) -> dict:
    runs = [in_child(end_to_end, str(path), str(work / f"{label}-{i}")) for i in range(repeat)]
    cpu = [sum(s["cpu"] for s in r["stages"]) for r in runs]
    wall = [sum(s["wall"] for s in r["stages"]) for r in runs]
    best = runs[int(np.argmin(cpu))]
    n = best["positions"]
    print(f"\n== end to end, {label}: {path.name} ({path.stat().st_size / 2**20:.0f} MiB), "
          f"{best['records']} records, {best['games']} games ingested, "
          f"{best['quarantined']} quarantined, {n:,} positions, {best['unique']:,} unique pairs")
    print(f"best of {repeat} runs (by CPU):")
    print_stages(best["stages"], n)
    print("  inside source_pairs / deduplicate (CPU s, wall s):")
    print_steps(best["steps"])
    print(f"  total CPU s: best {min(cpu):.2f}, median {statistics.median(cpu):.2f}; "
          f"wall s: best {min(wall):.2f}, median {statistics.median(wall):.2f}")
    print(f"  positions/s per core (positions / CPU s): best {n / min(cpu):,.0f}, "
          f"median {n / statistics.median(cpu):,.0f}; per wall second: best {n / min(wall):,.0f}")
    print(f"  peak RSS of the run (whole child process): "
          f"{mib(min(r['peak_rss'] for r in runs))} best, "
          f"{mib(statistics.median(r['peak_rss'] for r in runs))} median")
    shas = {tuple(s[2] for s in r["shards"]) for r in runs}
    print(f"  shards identical across the {repeat} runs: {'yes' if len(shas) == 1 else 'NO'}")
    return best


def main(argv: list[str] | None = None) -> None:
    if "--memory" in (sys.argv[1:] if argv is None else argv):  # the memory benchmark's own
        from ingest_memory import main as memory_main  # (this folder is the script's path)

        memory_main(argv)
        return
    if "--game" in (sys.argv[1:] if argv is None else argv):  # Go archives: ingest_go.py
        from ingest_go import main as go_main  # (this folder is the script's path)

        go_main(argv)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=66_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference-games", type=int, default=2_000)
    parser.add_argument("--dedup-rows", type=int, default=10_000_000)
    parser.add_argument("--dedup-reference", action="store_true",
                        help="also run the reference dedup on the synthetic rows (slow)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs "
          f"(shared with other work: compare CPU s, repeat), Python {platform.python_version()},"
          f" numpy {np.__version__}, pyarrow {pa.__version__}")
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    rif_path = selfplay_rif(args.games, args.seed, args.cache)
    real = renjunet_rif(args.cache)

    with tempfile.TemporaryDirectory(prefix="movepred-ingest-bench-") as tmp:
        work = Path(tmp)
        run_end_to_end(f"self-play x{args.games}", rif_path, args.repeat, work)
        if real is not None:
            run_end_to_end("RenjuNet dev (real games)", real, args.repeat, work)
        else:
            print("\n(real RenjuNet games not found under ../shared: skipped)")

        k = args.reference_games
        print(f"\n== reference vs current, first {k} games of {rif_path.name}, same run")
        ref = in_child(end_to_end, str(rif_path), str(work / "ref"), True, k)
        cur = in_child(end_to_end, str(rif_path), str(work / "cur"), False, k)
        print("reference (per-move replay, 8 full boards per pair, bytes per row, group_by):")
        print_stages(ref["stages"], ref["positions"])
        print("current:")
        print_stages(cur["stages"], cur["positions"])
        same = [s[2] for s in ref["shards"]] == [s[2] for s in cur["shards"]]
        print(f"  shards byte-identical (SHA-256 of every shard): {'yes' if same else 'NO'}")
        for name in ("parse .rif (expat + moves)", "replay + hash + canonicalise",
                     "dedup + split", "write shards (sort, encode, sha256)"):
            r = next(s for s in ref["stages"] if s["stage"] == name)["cpu"]
            c = next(s for s in cur["stages"] if s["stage"] == name)["cpu"]
            print(f"  {name:<46} {r / c if c else float('inf'):>7.1f}x less CPU")
        rt, ct = sum(s["cpu"] for s in ref["stages"]), sum(s["cpu"] for s in cur["stages"])
        print(f"  end to end: reference {ref['positions'] / rt:,.0f} positions/CPU-s, current "
              f"{cur['positions'] / ct:,.0f}: {rt / ct:.1f}x")

        print(f"\n== shard writer parts ({rif_path.name}; services/dataset/shards.py, re-done "
              "with its options)")
        parts = in_child(writer_parts, str(rif_path), str(work / "writer"))
        print_stages(parts["stages"])
        print(f"  {parts['rows']:,} rows, {mib(parts['raw_bytes'])} in Arrow -> "
              f"{mib(parts['bytes'])} of Parquet")

    if args.dedup_rows:
        print(f"\n== dedup + split of {args.dedup_rows:,} synthetic rows")
        res = in_child(dedup_synthetic, args.dedup_rows, False)
        print_stages(res["stages"])
        print_steps(res["steps"])
        print(f"  {res['rows']:,} rows ({mib(res['input_bytes'])} in Arrow) -> "
              f"{res['unique']:,} unique; splits {res['splits']}")
        if args.dedup_reference:
            ref = in_child(dedup_synthetic, args.dedup_rows, True)
            print_stages(ref["stages"])
            r = ref["stages"][1]["cpu"]
            print(f"  reference / current CPU: {r / res['stages'][1]['cpu']:.1f}x")
    print(f"\nload average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
