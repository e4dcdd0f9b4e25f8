"""The numbers behind docs/capture_game.md's check of the paper's claims, from a finished
`capture-train` grid (flows/capture_train.py): per cell, the final fitness of the mean network
(mean, std, best run), the candidates' average fitness over the last `--tail` episodes (the
paper's Fig. 3 quantity at the end of the budget), the first episode at which the runs' mean of
that average reaches `--floor` (the end of the "slow phase" near -1), and, for CMA-ES, the step
size the library ends with (its sigma0 is 1: a sigma near 0 is a search that has stopped, the
premature convergence the paper reports); then the games the grid played and, given the CPU
seconds it took (`--cpu-seconds`, measured outside, e.g. from /proc of the flow's process tree),
games per CPU-second and the CPU time the paper's budget would take at that rate.

    .venv/bin/python scripts/capture_claims.py runs/capture/grid [--cpu-seconds 1850]
        [--paper-evaluations 12000] [--at 500,1000,2000]

`--at`: also the candidates' average per cell around those episodes (the 100 episodes up to
each, mean over runs): where along its curve each optimiser is, e.g. PGPE's slow start and
later take-over against ES's early rise and saturation.

`--saturation GAMES`: also, per cell and split by runs ending at `--good` or above and below,
the final mean networks' weight norm and how saturated they play: the share of the inputs of
their squashing functions, over GAMES games each against the greedy player, that lie in the
flat tails (a sigmoid's input beyond 4 or a tanh's beyond 2 either way: slope below 7% of
the peak), where changing a weight barely changes the output.

Why a script and not the flow: these are read-outs for one document, computed from what the
flow leaves behind (results.json and the runs' checkpoints), and not needed to train.
"""

from __future__ import annotations

import argparse
import json
import pickle
from pathlib import Path

import numpy as np

SIGMOID_TAIL = 4.0  # |x| beyond which a sigmoid's slope is below 7% of its peak (tanh: 2)


def _cells(results: list[dict]) -> dict[str, list[dict]]:
    cells: dict[str, list[dict]] = {}
    for r in results:
        cells.setdefault(r["cell"], []).append(r)
    return cells


def _games(result: dict) -> int:
    """Games one run played: its budget (whole last generation included), the mean network's
    curve points and its final score."""
    spec = result["spec"]
    budget = round(result["episodes"] * spec["games"])
    return budget + len(result["curve_fitness"]) * spec["games"] + spec["final_games"]


def cell_rows(out: Path, tail: float, floor: float) -> list[dict]:
    results = json.loads((out / "results.json").read_text())
    rows = []
    for cell, rs in _cells(results).items():
        final = np.array([r["final_fitness"] for r in rs])
        n = min(len(r["population_fitness"]) for r in rs)
        x = np.asarray(rs[0]["population_episodes"][:n])
        y = np.array([r["population_fitness"][:n] for r in rs]).mean(0)
        last = x >= x[-1] - tail
        reached = np.flatnonzero(y >= floor)
        row = {"cell": cell, "runs": len(rs), "final_mean": final.mean(), "final_std": final.std(),
               "best": final.max(), "tail_candidates": float(y[last].mean()),
               "floor_at": float(x[reached[0]]) if reached.size else None,
               "games": sum(_games(r) for r in rs)}
        if rs[0]["spec"]["optimiser"] == "cmaes":
            sigmas = []
            for r in rs:
                with (out / "runs" / f"{r['name']}.pkl").open("rb") as f:
                    sigmas.append(float(pickle.load(f)["optimiser"].es.sigma))
            row["cma_sigma"] = float(np.mean(sigmas))
        rows.append(row)
    return rows


def curve_at(out: Path, episodes: list[int], window: float = 100.0) -> str:
    """Per cell, the candidates' average fitness (mean over runs) over the `window` episodes
    up to each of `episodes`, as a markdown table."""
    results = json.loads((out / "results.json").read_text())
    lines = ["| cell | " + " | ".join(f"{e}" for e in episodes) + " |",
             "|---|" + "---:|" * len(episodes)]
    for cell, rs in _cells(results).items():
        n = min(len(r["population_fitness"]) for r in rs)
        x = np.asarray(rs[0]["population_episodes"][:n])
        y = np.array([r["population_fitness"][:n] for r in rs]).mean(0)
        values = []
        for e in episodes:
            near = (x > e - window) & (x <= e)
            values.append(f"{y[near].mean():+.3f}" if near.any() else "")
        lines.append(f"| {cell} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def markdown(rows: list[dict], tail: float, floor: float) -> str:
    lines = [f"| cell | runs | final fitness, mean ± std | best run | candidates, last {tail:g} "
             f"episodes | first episode at ≥ {floor:g} | CMA-ES final σ (σ0 = 1) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        at = f"{r['floor_at']:.0f}" if r["floor_at"] is not None else "never"
        sigma = f"{r['cma_sigma']:.3f}" if "cma_sigma" in r else ""
        lines.append(f"| {r['cell']} | {r['runs']} | {r['final_mean']:+.3f} ± "
                     f"{r['final_std']:.3f} | {r['best']:+.3f} | {r['tail_candidates']:+.3f} | "
                     f"{at} | {sigma} |")
    return "\n".join(lines) + "\n"


def saturated_share(network: str, weights: np.ndarray, size: int, games: int) -> float:
    """The share of the squashing functions' inputs in their flat tails while `weights` plays
    `games` games against the greedy player (`runs.weights_fitness`, seeded). The networks'
    tanh is 2 sigmoid(2x) - 1 (`services.models.mdrnn`), so counting the sigmoid's inputs
    beyond SIGMOID_TAIL counts the tanh's beyond half that."""
    import torch

    import services.models.mdrnn as mdrnn
    from services.policy_search.runs import weights_fitness

    counts = [0, 0]
    sigmoid = mdrnn._sigmoid

    def counted(x: torch.Tensor) -> torch.Tensor:
        counts[0] += int((x.abs() > SIGMOID_TAIL).sum())
        counts[1] += x.numel()
        return sigmoid(x)

    mdrnn._sigmoid = counted
    try:
        weights_fitness(network, np.asarray(weights), size, games)
    finally:
        mdrnn._sigmoid = sigmoid
    return counts[0] / max(counts[1], 1)


def saturation(out: Path, games: int, good: float) -> str:
    """Per cell and group of runs (final fitness >= `good`, below): runs, weight norm median
    (range), saturated share median (range)."""
    results = json.loads((out / "results.json").read_text())
    lines = [f"| cell | runs ending | runs | weight norm, median (range) | saturated share over "
             f"{games} games, median (range) |", "|---|---|---:|---:|---:|"]
    for cell, rs in _cells(results).items():
        for label, keep in ((f">= {good:+g}", lambda f: f >= good),
                            (f"< {good:+g}", lambda f: f < good)):
            group = [r for r in rs if keep(r["final_fitness"])]
            if not group:
                continue
            norms = np.array([np.linalg.norm(r["mean"]) for r in group])
            shares = np.array([saturated_share(r["spec"]["network"], np.array(r["mean"]),
                                               r["spec"]["size"], games) for r in group])
            lines.append(f"| {cell} | {label} | {len(group)} | {np.median(norms):.1f} "
                         f"({norms.min():.1f}-{norms.max():.1f}) | {np.median(shares):.3f} "
                         f"({shares.min():.3f}-{shares.max():.3f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grid", type=Path, help="a finished capture-train --out folder")
    parser.add_argument("--tail", type=float, default=100.0,
                        help="episodes at the end averaged for the candidates' column")
    parser.add_argument("--floor", type=float, default=-0.9,
                        help="the candidates' average that ends the slow phase")
    parser.add_argument("--cpu-seconds", type=float, default=None,
                        help="CPU seconds the grid took (its whole process tree)")
    parser.add_argument("--paper-evaluations", type=int, default=12_000,
                        help="the paper's episodes per run, for the full-size estimate")
    parser.add_argument("--at", default="", help="comma-separated episodes for the curve table")
    parser.add_argument("--saturation", type=int, default=0, metavar="GAMES",
                        help="also the final networks' weight norms and saturated share over "
                             "GAMES games each (see above)")
    parser.add_argument("--good", type=float, default=0.5,
                        help="the final fitness that splits the runs for --saturation")
    args = parser.parse_args(argv)
    if not (args.grid / "results.json").exists():
        parser.error(f"no {args.grid / 'results.json'}: the grid has not finished")
    rows = cell_rows(args.grid, args.tail, args.floor)
    print(markdown(rows, args.tail, args.floor))
    if args.at:
        print(curve_at(args.grid, [int(v) for v in args.at.split(",") if v]))
    if args.saturation:
        print(saturation(args.grid, args.saturation, args.good))
    games = sum(r["games"] for r in rows)
    runs = sum(r["runs"] for r in rows)
    results = json.loads((args.grid / "results.json").read_text())
    evaluations = results[0]["spec"]["evaluations"]
    print(f"{runs} runs of {evaluations} episodes: {games:,} games played")
    if args.cpu_seconds:
        rate = games / args.cpu_seconds
        full = args.cpu_seconds * args.paper_evaluations / evaluations
        print(f"{args.cpu_seconds:,.0f} CPU-s: {rate:,.0f} games per CPU-s; the same grid at "
              f"{args.paper_evaluations} episodes a run: about {full:,.0f} CPU-s "
              f"({full / 3600:.1f} CPU-hours, linear in the episodes; games grow longer as "
              f"the networks improve, so this is a lower bound)")


if __name__ == "__main__":
    main()
