"""Capture Game grid speed: a cell's runs played in lock step (`runs.run_together`, one batch of
games per generation for all of them) against the same runs one after another (`runs.run`), in
one process, one core, in the same run; and a check that both end with the same results.

    .venv/bin/python benchmarks/capture_grid.py [--network mdlstm] [--size 5]
        [--optimiser pgpe] [--runs 10] [--evaluations 300] [--repeat 1]

Printed per side: CPU seconds (`time.process_time`), games per CPU-second (every game the runs
played: their budget, the mean networks' curve points and final games) and the ratio
one-after-another / together. Exit status 1 if any run's result differs between the two.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.policy_search.runs import (  # noqa: E402
    NETWORKS,
    OPTIMISERS,
    RunResult,
    RunSpec,
    run,
    run_together,
)


def games_played(result: RunResult) -> int:
    """Every game the run played: its candidates', its mean's curve points, its final games."""
    h, spec = result.history, result.spec
    budget = sum(len(f) * g for f, g in zip(h.fitness, h.generation_games, strict=True))
    return budget + len(h.curve_fitness) * spec.games + spec.final_games


def same(a: RunResult, b: RunResult) -> bool:
    ha, hb = a.history, b.history
    return (ha.generation_episodes == hb.generation_episodes
            and ha.curve_fitness == hb.curve_fitness
            and all(np.array_equal(x, y) for x, y in zip(ha.fitness, hb.fitness, strict=True))
            and np.array_equal(a.mean, b.mean) and a.final_fitness == b.final_fitness)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--network", choices=tuple(NETWORKS), default="mdlstm")
    parser.add_argument("--size", type=int, default=5)
    parser.add_argument("--optimiser", choices=OPTIMISERS, default="pgpe")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--evaluations", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=1, help="alternate the two sides N times")
    args = parser.parse_args()
    torch.set_num_threads(1)
    specs = [RunSpec(args.network, args.size, args.optimiser, run=r,
                     evaluations=args.evaluations) for r in range(args.runs)]
    print(f"{args.runs} runs of {args.network} {args.size}x{args.size} {args.optimiser}, "
          f"{args.evaluations} episodes each; {platform.node()}, one thread, "
          f"load {os.getloadavg()[0]:.1f}")
    # warm-up: numba kernels compiled or loaded from their cache, torch's first calls
    with tempfile.TemporaryDirectory() as tmp:
        run(RunSpec(args.network, args.size, args.optimiser, run=99, evaluations=4, games=2,
                    final_games=2), Path(tmp) / "warm.pkl")
    times: dict[str, list[float]] = {"alone": [], "together": []}
    results: dict[str, list[RunResult]] = {}
    for _ in range(args.repeat):
        for side in ("alone", "together"):
            with tempfile.TemporaryDirectory() as tmp:
                paths = [Path(tmp) / f"{s.name}.pkl" for s in specs]
                start = time.process_time()
                if side == "alone":
                    out = [run(s, p) for s, p in zip(specs, paths, strict=True)]
                else:
                    out = run_together(specs, paths)
                times[side].append(time.process_time() - start)
                results[side] = [r for r in out if r is not None]
    games = sum(games_played(r) for r in results["together"])
    for side in ("alone", "together"):
        best = min(times[side])
        print(f"{side:>9}: {best:8.2f} CPU-s (best of {args.repeat}), "
              f"{games / best:9,.0f} games per CPU-s")
    print(f"together is {min(times['alone']) / min(times['together']):.2f}x one after another "
          f"({games:,} games)")
    identical = all(same(a, b) for a, b in zip(results["alone"], results["together"],
                                               strict=True))
    print("results identical: " + ("yes" if identical else "NO"))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
