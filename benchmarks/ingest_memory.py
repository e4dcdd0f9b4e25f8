"""Ingest memory benchmark: peak RSS and per-position cost of a Go ingest as the corpus grows.

    .venv/bin/python benchmarks/ingest.py --memory [--sizes 1000000,10000000] [--mode pipeline]

(or this file directly, same options). Inputs:
  * a KGS-like Go corpus per size, generated here (real games are too few): 19x19 games of
    200-250 moves (uniform), random legal play with captures and ko after an opening drawn
    from a small book of corner moves (so openings recur across games, as in real
    collections), KGS headers (ranks, komi, rules, results), some games ending in two passes;
    one `.sgf` member per game in a `.tar.gz`, seeded and deterministic (cached under --cache);
  * the real Go archives of ../shared (KGS dev + go-other dev), ingested together.

Each ingest runs in a fresh child process, alone: `--mode pipeline` (default) runs the
ingest flow's own steps without the Prefect engine (`read_source.fn` per source: read,
replay, canonicalise, intermediate; then `build_shards`: dedup + split + shards out of
core, quarantine, manifest); `--mode flow` runs `python -m flows.ingest` (Prefect included).
Figures per run: peak RSS (the child's high-water mark from getrusage, and the peak of the
sum over the child's process tree sampled every 0.1 s with psutil: DuckDB's threads are
in-process), CPU seconds of the child tree (user + system) and wall seconds, positions
(raw pairs) and CPU microseconds per position; then the ratio of the per-position cost of
each size to the smallest one. Goals: peak RSS <= 2 GB at 10M positions, cost ratio <= 1.3.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import random
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "movepred-ingest-memory-bench"
REAL_GO = (ROOT.parent / "shared" / "data" / "kgs" / "kgs-games-dev.tar.gz",
           ROOT.parent / "shared" / "data" / "go-other" / "go-games-other-dev.tar.gz")
SIZE = 19
# opening book: the corner points real games start on (4-4, 3-4, 3-3, 4-5), as (col, row)
_CORNER = ((3, 3), (2, 3), (3, 2), (2, 2), (3, 4), (4, 3))
_RANKS = [f"{k}k" for k in range(15, 0, -1)] + [f"{d}d" for d in range(1, 10)]


# --- corpus ---------------------------------------------------------------------------------


def _neighbours() -> list[tuple[int, ...]]:
    out = []
    for p in range(SIZE * SIZE):
        x, y = p % SIZE, p // SIZE
        out.append(tuple(q for q, ok in ((p - 1, x > 0), (p + 1, x < SIZE - 1),
                                         (p - SIZE, y > 0), (p + SIZE, y < SIZE - 1)) if ok))
    return out


_NB = _neighbours()


def _group(board: list[int], p: int) -> tuple[list[int], bool]:
    """The stones of p's group and whether it has a liberty."""
    color = board[p]
    stones, seen, free = [p], {p}, False
    i = 0
    while i < len(stones):
        for q in _NB[stones[i]]:
            v = board[q]
            if v == 0:
                free = True
            elif v == color and q not in seen:
                seen.add(q)
                stones.append(q)
        i += 1
    return stones, free


def _play(board: list[int], p: int, color: int, ko: int | None) -> int | bool | None:
    """Play p for color in place when legal (returns the new ko point or None); False when
    the move is illegal (occupied, ko, suicide): the board is then unchanged."""
    if board[p] or p == ko:
        return False
    board[p] = color
    enemy = 3 - color
    captured: list[int] = []
    for q in _NB[p]:
        if board[q] == enemy:
            stones, free = _group(board, q)
            if not free:
                captured.extend(stones)
                for s in stones:
                    board[s] = 0
    _, free = _group(board, p)
    if not free:  # suicide (nothing captured, or it would have a liberty)
        board[p] = 0
        return False
    if len(captured) == 1 and all(board[q] == enemy for q in _NB[p] if q != captured[0]):
        return captured[0]  # one stone taken by a stone left in atari there: ko
    return None


def _opening(rng: random.Random) -> list[int]:
    """Two to six moves from the book, in random corners (recurring openings)."""
    moves = []
    corners = [(0, 0), (1, 0), (0, 1), (1, 1)]
    rng.shuffle(corners)
    for k in range(rng.randint(2, 6)):
        fx, fy = corners[k % 4]
        x, y = _CORNER[min(int(rng.expovariate(1.2)), len(_CORNER) - 1)]
        if k >= 4:  # approaches: one point off the first stones
            x, y = x + 2, y
        x, y = (SIZE - 1 - x if fx else x), (SIZE - 1 - y if fy else y)
        moves.append(y * SIZE + x)
    return moves


def game_sgf(rng: random.Random) -> tuple[str, int]:
    """One KGS-like game as SGF text and its number of positions (moves, passes included)."""
    board = [0] * (SIZE * SIZE)
    ko: int | None = None
    length = rng.randint(200, 250)
    moves: list[int | None] = []
    book = _opening(rng)
    color = 1
    while len(moves) < length:
        played = False
        if len(moves) < len(book):
            result = _play(board, book[len(moves)], color, ko)
            if result is not False:
                ko, played = result, True
                moves.append(book[len(moves)])
        if not played:
            for _ in range(40):
                p = rng.randrange(SIZE * SIZE)
                result = _play(board, p, color, ko)
                if result is not False:
                    ko, played = result, True
                    moves.append(p)
                    break
        if not played:
            moves.append(None)
            ko = None
        color = 3 - color
    if rng.random() < 0.3:
        moves += [None, None]
    letters = "abcdefghijklmnopqrs"
    body = []
    for i, p in enumerate(moves):
        where = "" if p is None else letters[p % SIZE] + letters[SIZE - 1 - p // SIZE]
        body.append(f";{'BW'[i % 2]}[{where}]")
    b, w = rng.choice(_RANKS), rng.choice(_RANKS)
    result = rng.choice(["B+R", "W+R", f"B+{rng.randint(1, 40)}.5", f"W+{rng.randint(1, 40)}.5",
                         "W+T"])
    head = (f"(;GM[1]FF[4]CA[UTF-8]AP[CGoban:3]ST[2]RU[Japanese]SZ[19]KM[6.50]TM[600]"
            f"PW[white{rng.randrange(10**6)}]PB[black{rng.randrange(10**6)}]WR[{w}]BR[{b}]"
            f"DT[2011-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}]PC[The KGS Go Server]"
            f"RE[{result}]")
    return head + "".join(body) + ")\n", len(moves)


def corpus(positions: int, seed: int, cache: Path) -> tuple[Path, int, int]:
    """(archive, games, positions): the cached KGS-like archive of at least `positions`."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"kgs-like-{positions}-seed{seed}.tar.gz"
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file():
        m = json.loads(meta.read_text())
        return path, m["games"], m["positions"]
    rng = random.Random(seed)
    games = total = 0
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    start = time.perf_counter()
    with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
        while total < positions:
            text, n = game_sgf(rng)
            data = text.encode()
            info = tarfile.TarInfo(f"kgs-like/{games // 1000:04d}/game-{games:07d}.sgf")
            info.size, info.mtime = len(data), 1_300_000_000
            tar.addfile(info, io.BytesIO(data))
            games += 1
            total += n
            if games % 5000 == 0:
                print(f"  generated {games} games, {total:,} positions "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
    os.replace(tmp, path)
    meta.write_text(json.dumps({"games": games, "positions": total}))
    return path, games, total


# --- one ingest in a child ------------------------------------------------------------------


def child_pipeline(sources: list[str], out: str) -> None:
    """The ingest flow's steps without the Prefect engine (run in a fresh process)."""
    sys.path.insert(0, str(ROOT))
    import pyarrow.parquet as pq

    from flows.ingest import PIPELINE_VERSION, default_work_dir, fingerprint, read_source
    from services.dataset.dedup import BuildSettings, build_shards
    from services.dataset.shards import commit_manifest, write_quarantine

    work = default_work_dir(out)
    summaries = []
    for s in sources:
        p = Path(s)
        summaries.append(read_source.fn(str(p), p.name, fingerprint(p), str(work),
                                        PIPELINE_VERSION))
    files, splits, *_ = build_shards([Path(s["pairs_path"]) for s in summaries], Path(out),
                                     "go", BuildSettings(temp_dir=work))
    quarantine = [row for s in summaries
                  for row in pq.read_table(s["quarantine_path"]).to_pylist()]
    entry = write_quarantine(quarantine, Path(out))
    commit_manifest({"files": files, "quarantine": entry, "splits": splits}, Path(out))
    print(json.dumps({"positions": sum(s["pairs"] for s in summaries),
                      "rows": sum(splits.values()), "splits": splits}))


def measure(sources: list[Path], out: Path, mode: str) -> dict:
    """Run one ingest in a child process; its peak RSS, CPU and wall time."""
    import psutil

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if mode == "flow":
        cmd = [sys.executable, "-m", "flows.ingest", *map(str, sources), "--out", str(out),
               "--no-progress"]
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(out),
               *map(str, sources)]
    wall = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    peak = {"tree": 0}
    done = threading.Event()

    def sample() -> None:
        try:
            root = psutil.Process(proc.pid)
        except psutil.Error:
            return
        while not done.is_set():
            total = 0
            try:
                for p in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        total += p.memory_info().rss
            except psutil.Error:
                pass
            peak["tree"] = max(peak["tree"], total)
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout = proc.stdout.read()
    # this child's own rusage (its reaped descendants included), not every child's so far
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    wall = time.perf_counter() - wall
    if proc.returncode:
        raise RuntimeError(f"ingest child failed ({proc.returncode}): {' '.join(cmd)}")
    cpu = usage.ru_utime + usage.ru_stime
    line = [x for x in stdout.splitlines() if x.strip()][-1]
    info = json.loads(line) if mode == "pipeline" else {}
    if mode == "flow":
        manifest = json.loads((out / "manifest.json").read_text())
        info = {"positions": manifest["raw_pairs"], "rows": manifest["rows"],
                "splits": manifest["splits"]}
    return {**info, "cpu": cpu, "wall": wall, "maxrss": usage.ru_maxrss * 1024,
            "tree_peak": peak["tree"]}


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def report(label: str, r: dict) -> None:
    per = r["cpu"] / max(r["positions"], 1) * 1e6
    print(f"  {label:<34} {r['positions']:>11,} positions  {r['rows']:>11,} rows  "
          f"peak RSS {gib(r['maxrss'])} (tree {gib(r['tree_peak'])})  CPU {r['cpu']:,.0f} s  "
          f"wall {r['wall']:,.0f} s  {per:.1f} us/position  "
          f"({r['positions'] / max(r['cpu'], 1e-9):,.0f} positions/CPU-s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000",
                        help="positions of each generated corpus, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=("pipeline", "flow"), default="pipeline")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--no-real", action="store_true", help="skip the ../shared archives")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_pipeline(args.child[1:], args.child[0])
        return
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; mode {args.mode}",
          flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="movepred-ingest-memory-") as tmp:
        if not args.no_real and all(p.is_file() for p in REAL_GO):
            r = measure(list(REAL_GO), Path(tmp) / "real", args.mode)
            report("real ../shared Go (kgs + go-other)", r)
        for size in (int(s) for s in args.sizes.split(",")):
            path, games, _ = corpus(size, args.seed, args.cache)
            r = measure([path], Path(tmp) / f"gen-{size}", args.mode)
            results[size] = r
            report(f"KGS-like {games:,} games", r)
    if len(results) > 1:
        base = min(results)
        cost = {s: r["cpu"] / r["positions"] for s, r in results.items()}
        for s in sorted(results):
            print(f"  per-position CPU cost at {s:,} / at {base:,}: {cost[s] / cost[base]:.2f}x"
                  f"; peak RSS {gib(results[s]['maxrss'])}")
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
