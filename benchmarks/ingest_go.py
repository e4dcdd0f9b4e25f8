"""Go ingest speed: positions per CPU-second end to end, stage by stage, against sgfmill.

    .venv/bin/python benchmarks/ingest.py --game go [ARCHIVE ...] [--repeat 3] [--no-flow]
                                                    [--profile]

(or this file directly, same options). Input: Go archives (default: the real
../shared/data/kgs/kgs-games-dev.tar.gz and ../shared/data/go-other/go-games-other-dev.tar.gz).

Figures, each run in a fresh child process (CPU = user + system of the process and its
threads, DuckDB's included; best and median of --repeat):
  * records -> canonical pairs in memory (`services.dataset.sources.read_source_pairs`:
    read, replay, features, canonicalise), the part that the baseline below compares with;
  * end to end without Prefect: the ingest flow's own steps called directly, stage by stage:
    read + replay (captures, ko) + features + canonicalise + the Parquet intermediate
    (`read_source.fn`, per archive), then dedup + split + shards (`build_shards`, DuckDB),
    quarantine and manifest; positions (raw pairs) per CPU-second of the whole;
  * the same inside the Prefect flow (`python -m flows.ingest`, the child's CPU), and
    Prefect's fixed cost per run apart: the flow on one small .sgf (a few hundred positions),
    run as many times as the archives' flow (it swings by seconds with the load; the
    smallest is subtracted, and no figure is printed when the rest is within that noise);
  * the baseline in the same run: sgfmill parse (`Sgf_game.from_bytes`, main line) + sgfmill
    board replay (`Board.play`, captures) of the same archives' members, positions per
    CPU-second, and the ratio end to end / baseline (the baseline writes nothing);
  * the one-time cost of the compiled kernels (numba: replay, canonical images, packing):
    the pipeline on one small .sgf in a fresh child with an empty kernel cache (everything
    compiled) and again with that cache filled (loaded from disk, as every later process
    does); the end-to-end figures above load them from the cache;
  * --profile: where the read stage's time goes (cProfile, top functions by own time).
The machine this runs on is shared: CPU time is the steadier figure; compare medians.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DEFAULT_ARCHIVES = (SHARED / "kgs" / "kgs-games-dev.tar.gz",
                    SHARED / "go-other" / "go-games-other-dev.tar.gz")
SMALL_SGF = SHARED / "kgs" / "loose"


def _cpu() -> tuple[float, float]:
    t = os.times()
    return t.user, t.system


def pipeline(sources: list[str], out: str, profile: bool = False) -> dict:
    """The ingest flow's steps without the Prefect engine, timed stage by stage."""
    sys.path.insert(0, str(ROOT))
    import pyarrow.parquet as pq

    from flows.ingest import PIPELINE_VERSION, default_work_dir, fingerprint, read_source
    from services.dataset.dedup import BuildSettings, build_shards
    from services.dataset.shards import commit_manifest, write_quarantine

    stages: list[tuple[str, float, float, float]] = []
    work = default_work_dir(out)
    summaries = []
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    for s in sources:
        p = Path(s)
        u, y, w = *_cpu(), time.perf_counter()
        if profiler:
            profiler.enable()
        summaries.append(read_source.fn(str(p), p.name, fingerprint(p), str(work),
                                        PIPELINE_VERSION))
        if profiler:
            profiler.disable()
        u2, y2 = _cpu()
        stages.append((f"read {p.name} (parse, replay, features, canonicalise, "
                       "intermediate)", u2 - u, y2 - y, time.perf_counter() - w))
    u, y, w = *_cpu(), time.perf_counter()
    files, splits, *_ = build_shards([Path(s["pairs_path"]) for s in summaries], Path(out),
                                     "go", BuildSettings(temp_dir=work))
    u2, y2 = _cpu()
    stages.append(("dedup + split + shards (DuckDB)", u2 - u, y2 - y, time.perf_counter() - w))
    u, y, w = *_cpu(), time.perf_counter()
    quarantine = [row for s in summaries for row in pq.read_table(s["quarantine_path"]).to_pylist()]
    entry = write_quarantine(quarantine, Path(out))
    commit_manifest({"files": files, "quarantine": entry, "splits": splits}, Path(out))
    u2, y2 = _cpu()
    stages.append(("quarantine + manifest", u2 - u, y2 - y, time.perf_counter() - w))
    top = ""
    if profiler:
        import io
        import pstats

        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(18)
        top = buf.getvalue()
    return {"stages": stages, "positions": sum(s["pairs"] for s in summaries),
            "rows": sum(splits.values()), "games": sum(s["ingested"] for s in summaries),
            "quarantined": sum(s["quarantined"] for s in summaries), "profile": top}


def _pipeline_cpu(sources: list[str], out: str) -> float:
    """CPU seconds of `pipeline` in this process, imports included."""
    u, y = _cpu()
    pipeline(sources, out)
    u2, y2 = _cpu()
    return u2 - u + y2 - y


def kernel_costs(sgf: Path, tmp: str) -> tuple[float, float]:
    """(CPU s of the pipeline on `sgf` in a fresh child compiling the numba kernels into an
    empty cache, the same with that cache filled)."""
    cache = Path(tmp) / "numba-cache"
    before = os.environ.get("NUMBA_CACHE_DIR")
    os.environ["NUMBA_CACHE_DIR"] = str(cache)  # the spawned children inherit it
    try:
        cold = in_child(_pipeline_cpu, [str(sgf)], f"{tmp}/cold")
        warm = in_child(_pipeline_cpu, [str(sgf)], f"{tmp}/warm")
    finally:
        if before is None:
            del os.environ["NUMBA_CACHE_DIR"]
        else:
            os.environ["NUMBA_CACHE_DIR"] = before
    return cold, warm


def pairs_only(sources: list[str]) -> dict:
    """Records -> canonical pair tables in memory (`read_source_pairs`: read, replay,
    features, canonicalise), no intermediate, no dedup: the part the sgfmill baseline
    compares with."""
    sys.path.insert(0, str(ROOT))
    from services.dataset.sources import read_source_pairs
    from services.games.go.game import GO

    u, y = _cpu()
    positions = 0
    for s in sources:
        positions += read_source_pairs(GO, s, board_size=19).pairs.num_rows
    u2, y2 = _cpu()
    return {"positions": positions, "user": u2 - u, "sys": y2 - y}


def sgfmill_baseline(sources: list[str]) -> dict:
    """sgfmill parse + sgfmill board replay of every member: positions per CPU-second."""
    from sgfmill import sgf, sgf_moves

    start = time.process_time()
    positions = games = failed = 0
    for s in sources:
        with tarfile.open(s) as archive:
            for member in archive:
                if not member.isfile():
                    continue
                data = archive.extractfile(member).read()
                try:
                    game = sgf.Sgf_game.from_bytes(data)
                    board, plays = sgf_moves.get_setup_and_moves(game)
                except Exception:  # sgfmill raises ValueError and others on bad files
                    failed += 1
                    continue
                games += 1
                for colour, move in plays:
                    if move is not None:
                        try:
                            board.play(move[0], move[1], colour)
                        except ValueError:  # occupied point: the game ends there
                            break
                    positions += 1
    return {"positions": positions, "games": games, "failed": failed,
            "cpu": time.process_time() - start}


def flow_run(sources: list[str], out: str) -> dict:
    """`python -m flows.ingest` in a child process, waited for."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "flows.ingest", *sources, "--out", out, "--no-progress"]
    wall = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate()  # waits for (and reaps) the child: its CPU is counted
    wall = time.perf_counter() - wall
    if proc.returncode:
        raise RuntimeError(f"flow failed ({proc.returncode}): {err[-2000:]}")
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    return {"positions": manifest["raw_pairs"], "rows": manifest["rows"], "wall": wall}


def _flow_cpu(sources: list[str], out: str) -> dict:
    """flow_run in a child process of its own, so RUSAGE_CHILDREN is that run's alone."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = flow_run(sources, out)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def in_child(fn, *args):
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archives", nargs="*", type=Path, default=list(DEFAULT_ARCHIVES))
    parser.add_argument("--game", default="go", choices=["go"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-flow", action="store_true", help="skip the Prefect flow runs")
    parser.add_argument("--profile", action="store_true",
                        help="profile the read stage (cProfile) in one extra run")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.archives if not p.is_file()]
    if missing:
        sys.exit(f"archives not found: {missing} (this benchmark needs ../shared/data or "
                 "Go archives given as arguments)")
    sources = [str(p.resolve()) for p in args.archives]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs "
          f"(shared: compare CPU s), Python {platform.python_version()}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"archives: {', '.join(p.name for p in args.archives)}")

    with tempfile.TemporaryDirectory(prefix="movepred-ingest-go-") as tmp:
        runs = [in_child(pipeline, sources, f"{tmp}/ds{i}") for i in range(args.repeat)]
        cpus = [sum(u + s for _, u, s, _ in r["stages"]) for r in runs]
        best = runs[cpus.index(min(cpus))]
        n = best["positions"]
        print(f"\n== end to end without Prefect: {best['games']:,} games ingested, "
              f"{best['quarantined']} quarantined, {n:,} positions, {best['rows']:,} rows "
              f"after dedup; best of {args.repeat} by CPU")
        print(f"  {'stage':<78}{'CPU s':>7}{'user':>7}{'sys':>6}{'wall s':>8}")
        for name, u, s, w in best["stages"]:
            print(f"  {name:<78}{u + s:>7.2f}{u:>7.2f}{s:>6.2f}{w:>8.2f}")
        e2e = n / min(cpus)
        print(f"  total CPU s: best {min(cpus):.2f}, median {statistics.median(cpus):.2f}; "
              f"positions per CPU-second: best {e2e:,.0f}, median "
              f"{n / statistics.median(cpus):,.0f}")

        part = min((in_child(pairs_only, sources) for _ in range(args.repeat)),
                   key=lambda r: r["user"] + r["sys"])
        part_cpu = part["user"] + part["sys"]
        print(f"\n== records -> canonical pairs in memory (read, replay, features, canonicalise;"
              f" no intermediate, no dedup): {part['positions']:,} positions, {part_cpu:.2f} "
              f"CPU s (user {part['user']:.2f}, sys {part['sys']:.2f}): "
              f"{part['positions'] / part_cpu:,.0f} positions/CPU-s")

        base = in_child(sgfmill_baseline, sources)
        rate = base["positions"] / base["cpu"]
        print(f"\n== baseline, same run: sgfmill parse + board replay: {base['games']:,} "
              f"games ({base['failed']} unreadable), {base['positions']:,} positions, "
              f"{base['cpu']:.2f} CPU s: {rate:,.0f} positions/CPU-s")
        print(f"  end to end (everything, shards written) / baseline (parse + replay only): "
              f"{e2e / rate:.2f}x; records -> canonical pairs / baseline: "
              f"{part['positions'] / part_cpu / rate:.2f}x")

        small = sorted(SMALL_SGF.glob("*.sgf"))[:1]
        if small:
            cold, warm = kernel_costs(small[0], tmp)
            print(f"\n== compiled kernels: the pipeline on {small[0].name} in a fresh process, "
                  f"imports included: {cold:.2f} CPU s with an empty kernel cache (compiled), "
                  f"{warm:.2f} with the cache filled: one-time compile cost {cold - warm:.2f} "
                  "CPU s")

        if not args.no_flow:
            runs = max(1, args.repeat - 1)
            # the fixed cost swings by seconds with the machine's load: measured as often as
            # the archives' flow, and the smallest taken (the conservative difference)
            fixed = sorted((in_child(_flow_cpu, [str(p) for p in small], f"{tmp}/small{i}")
                            for i in range(runs)), key=lambda r: r["cpu"]) if small else []
            flows = [in_child(_flow_cpu, sources, f"{tmp}/flow{i}") for i in range(runs)]
            f = min(flows, key=lambda r: r["cpu"])
            print(f"\n== the Prefect flow (python -m flows.ingest, child CPU): "
                  f"{f['positions']:,} positions, {f['cpu']:.2f} CPU s, {f['wall']:.1f} wall s: "
                  f"{f['positions'] / f['cpu']:,.0f} positions/CPU-s")
            if fixed:
                low, high = fixed[0]["cpu"], fixed[-1]["cpu"]
                rest = f["cpu"] - low
                print(f"  Prefect's fixed cost per run: the flow on {small[0].name} "
                      f"({fixed[0]['positions']} positions): {low:.2f} CPU s (best of {runs}; "
                      f"largest {high:.2f}); the archives' flow less that: {rest:.2f} CPU s"
                      + (f", {f['positions'] / rest:,.0f} positions/CPU-s" if rest > 0.5 else
                         " (within the fixed cost's noise: no figure)"))

        if args.profile:
            prof = in_child(pipeline, sources, f"{tmp}/prof", True)
            print("\n== profile of the read stage (cProfile, own time; slows the run down)")
            print(prof["profile"])
    goal = 150_000
    print(f"goal >= {goal:,} positions/CPU-s end to end: "
          f"{'reached' if e2e >= goal else 'not reached'} ({e2e:,.0f})")


if __name__ == "__main__":
    main()
