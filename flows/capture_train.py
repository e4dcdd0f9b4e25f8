"""Prefect flow `capture-train`: the Capture Game policy-search grid of Grüttner et al. (Fig. 3),
{MDRNN, MDLSTM} x {5x5, 7x7} x {PGPE, ES, CMA-ES} x runs, each cell's runs a task spread over
Dask.

Run: python -m flows.capture_train --out runs/capture/grid [--runs 10 --evaluations 12000]
         [--networks mdrnn,mdlstm --sizes 5,7 --optimisers pgpe,es,cmaes --games 40]
         [--workers 2 | --address tcp://scheduler:8786] [--lazy 10:70]
         [--pgpe-steps 0.1:0.05] [--coevolution] [--shaping 0.5[:losses]] [--restarts]
         [--curriculum 0.25] [--scout 1000] [--cmaes-first 2500] [--pgpe-memory 50]
         [--cmaes-popsize 60] [--common-draws] [--abandon 2500:-0.5] [--weight-decay 0.01]
         [--combine] [--init WEIGHTS [--init-sigma 0.5 | --keep-sigma]]
         [--seed 0] [--together 10]
     python -m flows.capture_train --out runs/capture/grid --replot docs/fig.png [--dpi 90]

One task is up to `--together` runs of one cell (`services.policy_search.runs.run_together`:
each run asks and tells until its budget of fitness evaluations is spent, one evaluation = one
candidate's 40 games against the greedy player; the runs go in lock step, all their candidates'
games of a generation played as one batch, and each ends as it would alone). The tasks go
to a local Dask cluster of `--workers` processes (one thread each), or to an existing cluster
at `--address`; `--workers 0` runs them in the flow's own process, one after another. A task
is retried, and every run checkpoints itself under `OUT/runs/` every `--checkpoint-every`
generations: rerunning the same command reads the finished runs back and continues the others
from their last checkpoint, with the result an uninterrupted run would have had. The longest
cells are submitted first, so that the workers finish together.

`--lazy FIRST:LAST` adds, next to every cell, the same cell with lazy evaluation (FIRST games
per fitness at the start growing to LAST at the end, the same games in all; see runs.py).
`--coevolution` adds, next to every cell, the same cell co-evolving (each candidate also plays
the run's mean and best-so-far networks; see runs.py).
`--shaping W[:FORM]` adds, next to every cell, the same cell with length shaping of weight W
(the optimiser is told outcomes with the game's length as a tie-break; FORM both, losses or
fading or until; see runs.py).
`--restarts` adds, next to every CMA-ES cell, the same cell with IPOP restarts (a stagnating
search restarts from a random point with twice the population; see runs.py and cmaes.py).
`--curriculum C` adds, next to every cell, the same cell with an opponent curriculum (the
greedy player's moves random with a probability falling from 1 to 0 over a share C of the
budget; see runs.py).
`--scout N` adds, next to every cell, the same cell with scouting (N random networks drawn
around the start, the best 10 played 10 times more, the optimiser started from the best of
those; all in the budget; see runs.py and scout.py).
`--cmaes-first N` adds, next to every PGPE cell, the same cell run as CMA-ES for its first N
episodes and as PGPE from CMA-ES's mean and widths for the rest (see runs.py and handoff.py).
`--pgpe-steps A:S` adds, next to every PGPE cell, the same cell with PGPE's step sizes alpha_mu
= A and alpha_sigma = S instead of the paper's 0.2 and 0.1.
`--pgpe-memory N` adds, next to every PGPE cell, the same cell with PGPE's steps normalised by
the best fitness of the last N generations instead of the best ever seen (see pgpe.py).
`--cmaes-popsize N` adds, next to every CMA-ES cell, the same cell with a population of N
instead of the library's default (4 + 3 ln d: 15 for the MDLSTM).
`--common-draws` adds, next to every cell, the same cell whose generations play against one
draw of the greedy player's tie-breaks for all their candidates (common random numbers: PGPE's
pair, the ES's and CMA-ES's population; see fitness.py).
`--abandon E:F` adds, next to every cell, the same cell whose runs drop a start that is stuck:
a chain whose candidates average below fitness F after E episodes of its own (with half the
budget still left) is replaced by a fresh optimiser from a new random network (see runs.py).
`--weight-decay C` adds, next to every cell, the same cell whose optimiser is told each
candidate's fitness less C times its mean squared weight (see runs.py).
`--combine` puts the options above together into one extra cell per plain cell instead of one
cell each (those that apply to its optimiser): the best MDLSTM 5x5 recipe in
docs/capture_game.md is `--optimisers cmaes --cmaes-popsize 30 --lazy 10:70 --weight-decay 0.01
--combine --evaluations 9250` (9,250 x 40 games: 12,060 fitness evaluations, the paper's 12,000).

`--init FILE` starts every run from the weights in FILE instead of random ones (a flow's
`best_network.pt`, a flat vector, or a run's checkpoint `OUT/runs/<run>.pkl`, whose optimiser's
mean is the start): the paper's incremental scaling, a network trained on one size retrained on
the next (the networks' weights do not depend on the board size). `--init-sigma S` starts the
optimiser's search widths at S for every weight instead of its own sigma_0 (PGPE's 2.0);
`--keep-sigma` (PGPE, from a run's checkpoint) keeps the widths that run's optimiser ended with
(see runs.py). E.g. 7x7 from a 5x5 run, then 9x9 from the 7x7 one:
    python -m flows.capture_train --out runs/capture/scale7 --networks mdlstm --sizes 7 \
        --optimisers pgpe --evaluations 700 --runs 3 --workers 0 \
        --init runs/capture/full5/best_network.pt --init-sigma 0.5
    python -m flows.capture_train --out runs/capture/scale9 --networks mdlstm --sizes 9 \
        --optimisers pgpe --evaluations 700 --runs 3 --workers 0 \
        --init runs/capture/scale7/best_network.pt --init-sigma 0.5

What it leaves under `--out`:
    runs/<run>.pkl          each run's checkpoint (optimiser, history; the finished result)
    results.json            per run: its spec, final fitness, learning curve, final weights
    curves.png              Fig. 3: the candidates' average fitness per episode (as the paper
                            plots it), mean over runs, a band of one standard deviation and
                            the min/max over runs, and the mean network's fitness (dashed), a
                            panel per cell
    table.md                per cell: final fitness (mean, std over runs), best single run
    generalisation.md       the best 5x5 network of each 5x5 cell, asked on bigger boards
    best_network.pt         the best run's network ({"config", "model" state_dict,
                            "board_size", "fitness"}), loadable with torch.load(weights_only)
and the table, a summary and a progress bar as Prefect artifacts.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
from prefect import Flow, flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.futures import as_completed
from prefect.tasks import exponential_backoff

from flows import announce_prefect_api, configure_logging, on_dask
from services import logs
from services.atomic_files import atomic_path, atomic_write_text
from services.games.capture.game import MAX_SIZE as CAPTURE_MAX_SIZE
from services.games.capture.game import MIN_SIZE as CAPTURE_MIN_SIZE
from services.policy_search.fitness import GAMES
from services.policy_search.runs import (
    NETWORKS,
    OPTIMISERS,
    SHAPING_FORMS,
    RunSpec,
    network_with,
    run_together,
    weights_fitness,
)
from services.settings import bounded

logger = logging.getLogger(__name__)

DEFAULT_OUT = "runs/capture/grid"
DEFAULT_WORKERS = 2
RETRIES = 2
SIZES = (5, 7)
GENERALISE_SIZES = (7, 9)
# the relative cost of a run per episode (measured: MDLSTM 7x7 about 5x MDRNN 5x5; PGPE's
# populations of two batch the fewest games per call): the order tasks are submitted in
_NET_COST = {"mdrnn": 1.0, "mdlstm": 2.5}
_OPT_COST = {"pgpe": 2.5, "es": 1.0, "cmaes": 1.2}


def _cost(spec: RunSpec) -> float:
    return _NET_COST[spec.network] * _OPT_COST[spec.optimiser] * spec.size ** 2


@task(name="search-runs", task_run_name="{label}", retries=RETRIES,
      retry_delay_seconds=exponential_backoff(backoff_factor=1), retry_jitter_factor=0.5)
def search_runs(label: str, specs: list[dict], checkpoints: list[str],
                checkpoint_every: int) -> list[dict]:
    """Runs of one cell to their end in lock step (`runs.run_together`: one batch of games per
    generation for all of them), or read back where finished; returns their summaries."""
    import torch

    torch.set_num_threads(1)  # one core per worker: the workers are the parallelism
    results = run_together([_spec(s) for s in specs], [Path(c) for c in checkpoints],
                           checkpoint_every)
    assert all(r is not None for r in results)  # no stop_after: all finished
    return [r.summary() for r in results]


def batches(specs: list[RunSpec], together: int) -> list[list[RunSpec]]:
    """The runs of each cell in groups of at most `together` (a cell's runs share network and
    board, so they play in lock step), costliest cells first so that the workers end together;
    within a cell the runs keep their order."""
    if together < 1:
        raise ValueError(f"runs played together must be >= 1, got {together}")
    cells: dict[str, list[RunSpec]] = {}
    for spec in specs:
        cells.setdefault(spec.cell, []).append(spec)
    groups = [runs[i:i + together] for runs in cells.values()
              for i in range(0, len(runs), together)]
    return sorted(groups, key=lambda g: _cost(g[0]) * len(g), reverse=True)


def _spec(spec: dict) -> RunSpec:
    """A RunSpec from its dict (a JSON round trip turns its tuples into lists)."""
    tuples = {k: tuple(spec[k]) if spec.get(k) else None
              for k in ("lazy", "pgpe_steps", "abandon")}
    return RunSpec(**{**spec, **tuples})


@task(name="generalise", task_run_name="{name} on {size}x{size}", retries=RETRIES)
def generalise(name: str, network: str, weights: list[float], size: int, games: int,
               seed: int) -> dict:
    """A trained network's fitness on another board size, with no retraining."""
    import torch

    torch.set_num_threads(1)
    return {"name": name, "size": size,
            "fitness": weights_fitness(network, np.asarray(weights), size, games, seed)}


def grid_specs(networks: list[str], sizes: list[int], optimisers: list[str], runs: int,
               evaluations: int, games: int, seed: int, lazy: tuple[int, int] | None,
               final_games: int, pgpe_steps: tuple[float, float] | None = None,
               coevolution: bool = False, shaping: float = 0.0,
               shaping_form: str = "both", restarts: bool = False,
               curriculum: float = 0.0, scout: int = 0,
               cmaes_first: int = 0, pgpe_memory: int = 0,
               cmaes_popsize: int = 0, common_draws: bool = False,
               abandon: tuple[int, float] | None = None,
               weight_decay: float = 0.0, combine: bool = False,
               init: str | None = None, init_sigma: float = 0.0,
               keep_sigma: bool = False) -> list[RunSpec]:
    """Every run of the grid: each cell, then its lazy variant where `lazy` is given, its
    co-evolving variant where `coevolution` is set, its length-shaped variant where `shaping`
    is > 0, its opponent-curriculum variant where `curriculum` is > 0, its scouting variant
    where `scout` is > 0, for PGPE its CMA-ES-first variant where `cmaes_first` is > 0 and
    its common-draws variant where `common_draws` is set, its variant that abandons stuck
    starts where `abandon` is given, its weight-decay variant where `weight_decay` is > 0,
    with `combine`, all those variants of a cell merged into one; for PGPE its variants with
    `pgpe_steps` and `pgpe_memory` where given, and for CMA-ES its variants
    with restarts where `restarts` is set and with `cmaes_popsize` where given. Every run
    starts from `init`'s weights where given (with `init_sigma` or `keep_sigma`)."""
    specs = []
    for network in networks:
        for size in sizes:
            for optimiser in optimisers:
                variants: list[dict] = [{}] + ([{"lazy": lazy}] if lazy else [])
                variants += [{"coevolution": True}] if coevolution else []
                variants += ([{"shaping": shaping, "shaping_form": shaping_form}]
                             if shaping else [])
                variants += [{"curriculum": curriculum}] if curriculum else []
                variants += [{"scout": scout}] if scout else []
                variants += [{"common_draws": True}] if common_draws else []
                variants += [{"abandon": tuple(abandon)}] if abandon else []
                variants += [{"weight_decay": weight_decay}] if weight_decay else []
                if cmaes_first and optimiser == "pgpe":
                    variants.append({"cmaes_first": cmaes_first})
                if pgpe_steps and optimiser == "pgpe":
                    variants.append({"pgpe_steps": tuple(pgpe_steps)})
                if pgpe_memory and optimiser == "pgpe":
                    variants.append({"pgpe_memory": pgpe_memory})
                if restarts and optimiser == "cmaes":
                    variants.append({"restarts": True})
                if cmaes_popsize and optimiser == "cmaes":
                    variants.append({"cmaes_popsize": cmaes_popsize})
                if combine and len(variants) > 1:
                    variants = [{}, {k: v for variant in variants for k, v in variant.items()}]
                start = {"init": init, "init_sigma": init_sigma,
                         "keep_sigma": keep_sigma and optimiser == "pgpe"} if init else {}
                specs += [RunSpec(network, size, optimiser, r, seed, evaluations, games,
                                  final_games=final_games, **variant, **start)
                          for variant in variants for r in range(runs)]
    return specs


@flow(name="capture-train")
def capture_train(out_dir: str = DEFAULT_OUT, networks: list[str] | None = None,
                  sizes: list[int] | None = None, optimisers: list[str] | None = None,
                  runs: int = 10, evaluations: int = 12_000, games: int = GAMES, seed: int = 0,
                  lazy: tuple[int, int] | None = None, checkpoint_every: int = 10,
                  final_games: int = 400,
                  generalise_sizes: list[int] | None = None,
                  pgpe_steps: tuple[float, float] | None = None, together: int = 10,
                  coevolution: bool = False, shaping: float = 0.0,
                  shaping_form: str = "both", restarts: bool = False,
                  curriculum: float = 0.0, scout: int = 0, cmaes_first: int = 0,
                  pgpe_memory: int = 0, cmaes_popsize: int = 0,
                  common_draws: bool = False,
                  abandon: tuple[int, float] | None = None,
                  weight_decay: float = 0.0, combine: bool = False,
                  init: str | None = None, init_sigma: float = 0.0,
                  keep_sigma: bool = False) -> dict:
    """Run the grid (see the module docstring) into `out_dir`; return the per-cell table."""
    log = get_run_logger()
    out = Path(out_dir).resolve()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    specs = grid_specs(networks or list(NETWORKS), sizes or list(SIZES),
                       optimisers or list(OPTIMISERS), runs, evaluations, games, seed,
                       lazy, final_games, pgpe_steps, coevolution, shaping, shaping_form,
                       restarts, curriculum, scout, cmaes_first, pgpe_memory,
                       cmaes_popsize, common_draws, abandon, weight_decay, combine,
                       init, init_sigma, keep_sigma)
    progress = create_progress_artifact(progress=0.0, key="capture-train-progress",
                                        description=f"runs finished of {len(specs)}")
    futures = [search_runs.submit(
        f"{group[0].cell}-runs{group[0].run}-{group[-1].run}", [_spec_dict(s) for s in group],
        [str(out / "runs" / f"{s.name}.pkl") for s in group], checkpoint_every)
        for group in batches(specs, together)]
    results: list[dict] = []
    for future in as_completed(futures):
        for summary in future.result():
            results.append(summary)
            log.info("%s: final fitness %.3f (%d of %d runs)", summary["name"],
                     summary["final_fitness"], len(results), len(specs))
        update_progress_artifact(progress, 100.0 * len(results) / len(specs))
    order = {s.name: i for i, s in enumerate(sorted(specs, key=_grid_order))}
    results.sort(key=lambda r: order[r["name"]])
    atomic_write_text(json.dumps(results, indent=1), out / "results.json")

    table = cell_table(results)
    best = max(results, key=lambda r: r["final_fitness"])
    save_network(best, out / "best_network.pt")
    sizes_out = generalise_sizes if generalise_sizes is not None else list(GENERALISE_SIZES)
    gen = _generalise(table, results, sizes_out, final_games, seed)
    plot_curves(results, out / "curves.png")
    atomic_write_text(table_markdown(table), out / "table.md")
    atomic_write_text(generalisation_markdown(gen), out / "generalisation.md")
    create_table_artifact(key="capture-train-table", table=table,
                          description="Final fitness of the mean network per cell (mean and "
                                      "standard deviation over runs, best single run)")
    create_markdown_artifact(key="capture-train-summary", markdown="\n\n".join([
        f"# Capture Game policy search\n\n{len(specs)} runs of {evaluations} episodes "
        f"({games} games each) into `{out}`; best run `{best['name']}` "
        f"({best['final_fitness']:.3f}), saved as `best_network.pt`.",
        table_markdown(table), generalisation_markdown(gen)]))
    return {"cells": table, "generalisation": gen, "best": best["name"], "runs": len(results)}


def _spec_dict(spec: RunSpec) -> dict:
    from dataclasses import asdict

    return asdict(spec)


def _grid_order(spec: RunSpec) -> tuple:
    return (list(NETWORKS).index(spec.network), spec.size, OPTIMISERS.index(spec.optimiser),
            spec.restarts, spec.lazy or (), spec.pgpe_steps or (), spec.pgpe_memory,
            spec.cmaes_popsize, spec.common_draws, spec.abandon or (), spec.weight_decay,
            spec.run)


def cell_table(results: list[dict]) -> list[dict]:
    """Per cell, in grid order: runs, final fitness mean and std, the best run and its
    fitness, episodes run."""
    cells: dict[str, list[dict]] = {}
    for r in results:
        cells.setdefault(r["cell"], []).append(r)
    rows = []
    for cell, rs in cells.items():
        f = np.array([r["final_fitness"] for r in rs])
        best = rs[int(np.argmax(f))]
        rows.append({"cell": cell, "network": rs[0]["spec"]["network"],
                     "size": rs[0]["spec"]["size"], "optimiser": rs[0]["spec"]["optimiser"],
                     "runs": len(rs), "final_mean": round(float(f.mean()), 4),
                     "final_std": round(float(f.std()), 4), "best": round(float(f.max()), 4),
                     "best_run": best["name"], "episodes": round(float(best["episodes"]))})
    return rows


def table_markdown(table: list[dict]) -> str:
    lines = ["| cell | runs | episodes | final fitness, mean ± std | best run |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['cell']} | {r['runs']} | {r['episodes']} | {r['final_mean']:+.3f} ± "
              f"{r['final_std']:.3f} | {r['best']:+.3f} |" for r in table]
    return "\n".join(lines) + "\n"


def generalisation_markdown(gen: list[dict]) -> str:
    if not gen:
        return ""
    sizes = sorted({s for g in gen for s in g["fitness"]})
    lines = ["| network (best run) | " + " | ".join(f"{s}x{s}" for s in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    lines += [f"| {g['name']} | " + " | ".join(f"{g['fitness'][s]:+.3f}" for s in sizes)
              + " |" for g in gen]
    return "\n".join(lines) + "\n"


def _generalise(table: list[dict], results: list[dict], sizes: list[int], games: int,
                seed: int) -> list[dict]:
    """The best run of every cell trained on the smallest board, played on `sizes` too."""
    by_name = {r["name"]: r for r in results}
    if not table or not sizes:
        return []
    smallest = min(r["size"] for r in table)
    best = [by_name[row["best_run"]] for row in table if row["size"] == smallest]
    futures = [(r, s, generalise.submit(r["name"], r["spec"]["network"], r["mean"], s, games,
                                        seed)) for r in best for s in sizes]
    out: dict[str, dict] = {}
    for r, s, future in futures:
        entry = out.setdefault(r["name"], {"name": r["name"],
                                           "fitness": {smallest: r["final_fitness"]}})
        entry["fitness"][s] = future.result()["fitness"]
    return list(out.values())


def save_network(result: dict, path: Path) -> None:
    """The run's final mean network as a state_dict checkpoint (tensors and plain values
    only, so `torch.load(..., weights_only=True)` reads it)."""
    import torch

    spec = result["spec"]
    net = network_with(spec["network"], np.asarray(result["mean"]))
    with atomic_path(path) as tmp:
        torch.save({"config": NETWORKS[spec["network"]], "model": net.state_dict(),
                    "board_size": spec["size"], "fitness": result["final_fitness"],
                    "run": result["name"]}, tmp)


def plot_curves(results: list[dict], path: Path, dpi: int = 110) -> None:
    """Fig. 3: per cell, the average fitness of the evaluated candidates per `curve_step`
    episodes (the paper's "average fitness of a generation"): the mean over runs, one standard
    deviation either side, the min and max over runs; and, dashed, the mean over runs of the
    optimiser's mean network's fitness (interpolated onto a common grid of episodes). `dpi`
    lower for the docs' copy, re-plotted from results.json (`python -m flows.capture_train
    --replot`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells: dict[str, list[dict]] = {}
    for r in results:
        cells.setdefault(r["cell"], []).append(r)
    rows = sorted({(r["spec"]["network"], r["spec"]["size"]) for r in results},
                  key=lambda k: (list(NETWORKS).index(k[0]), k[1]))
    columns = sorted({r["cell"].split("-", 2)[2] for r in results},
                     key=lambda c: (OPTIMISERS.index(c.split("-")[0]), c))
    fig, axes = plt.subplots(len(rows), len(columns), figsize=(3.2 * len(columns),
                             2.4 * len(rows)), sharex=True, sharey=True, squeeze=False)
    for i, (network, size) in enumerate(rows):
        for j, column in enumerate(columns):
            ax = axes[i][j]
            rs = cells.get(f"{network}-{size}x{size}-{column}", [])
            ax.set_title(f"{network.upper()} {size}x{size} {column.upper()}", fontsize=9)
            ax.axhline(0, color="0.8", lw=0.6)
            ax.grid(alpha=0.3)
            if not rs:
                continue
            n = min(len(r["population_episodes"]) for r in rs)
            x = np.asarray(rs[0]["population_episodes"][:n])
            y = np.array([r["population_fitness"][:n] for r in rs])
            m, s = y.mean(0), y.std(0)
            ax.fill_between(x, m - s, m + s, color="C0", alpha=0.25, lw=0)
            ax.plot(x, y.min(0), color="C0", lw=0.6, ls=":")
            ax.plot(x, y.max(0), color="C0", lw=0.6, ls=":")
            ax.plot(x, m, color="C0", lw=1.2, label="candidates (paper)")
            end = min(r["curve_episodes"][-1] for r in rs)
            xm = np.linspace(rs[0]["curve_episodes"][0], end, 100)
            ym = np.array([np.interp(xm, r["curve_episodes"], r["curve_fitness"]) for r in rs])
            ax.plot(xm, ym.mean(0), color="C3", lw=1.0, ls="--", label="mean network")
            ax.set_ylim(-1.05, 1.05)
            if i == 0 and j == 0:
                ax.legend(fontsize=7, loc="upper left")
            if i == len(rows) - 1:
                ax.set_xlabel("episodes (fitness evaluations)")
            if j == 0:
                ax.set_ylabel("fitness")
    n_runs = sorted({len(v) for v in cells.values()})
    fig.suptitle(f"Capture Game: fitness of the evaluated candidates over "
                 f"{'/'.join(map(str, n_runs))} runs\n(mean, ±1 std, min/max) and of the mean "
                 f"network (dashed)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    plt.close(fig)


def capture_train_on(address: str | None = None, workers: int = 0) -> Flow:
    """The flow on a Dask cluster: an existing one at `address`, or a local one of `workers`
    processes (one thread each) started for the run; with neither, the flow's own process."""
    return on_dask(capture_train, address, workers)


def _csv(kind: type, choices: tuple | None = None):
    def parse(text: str) -> list:
        values = [kind(v) for v in text.split(",") if v]
        bad = [v for v in values if choices is not None and v not in choices]
        if not values or bad:
            raise argparse.ArgumentTypeError(
                f"comma-separated values{f' of {choices}' if choices else ''}: {text!r}")
        return values
    return parse


# board sizes the Capture Game is played on: a size outside failed only when its cell (or the
# generalisation after the whole grid) came to be played
BOARD_SIZES = tuple(range(CAPTURE_MIN_SIZE, CAPTURE_MAX_SIZE + 1))


def _steps(text: str) -> tuple[float, float]:
    try:
        alpha_mu, alpha_sigma = (float(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"ALPHA_MU:ALPHA_SIGMA, e.g. 0.1:0.05: {text!r}") from None
    if not (alpha_mu > 0 and alpha_sigma > 0):
        raise argparse.ArgumentTypeError(f"step sizes must be > 0: {text!r}")
    return alpha_mu, alpha_sigma


def _shaping(text: str) -> tuple[float, str]:
    weight, _, form = text.partition(":")
    form = form or "both"
    try:
        w = float(weight)
    except ValueError:
        raise argparse.ArgumentTypeError(f"W[:FORM], e.g. 0.5:losses: {text!r}") from None
    if not 0 <= w < 1 or form not in SHAPING_FORMS:
        raise argparse.ArgumentTypeError(f"W in [0, 1), FORM one of {', '.join(SHAPING_FORMS)}: "
                                         f"{text!r}")
    return w, form


def _share(text: str) -> float:
    try:
        share = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a share of the budget, e.g. 0.25: {text!r}") from None
    if not 0 < share <= 1:
        raise argparse.ArgumentTypeError(f"a share in (0, 1]: {text!r}")
    return share


def _abandon(text: str) -> tuple[int, float]:
    try:
        episodes, fitness = text.split(":")
        return int(episodes), float(fitness)
    except ValueError:
        raise argparse.ArgumentTypeError(f"EPISODES:FITNESS, e.g. 2500:-0.5: {text!r}") from None


def _lazy(text: str) -> tuple[int, int]:
    try:
        first, last = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"FIRST:LAST games, e.g. 10:70: {text!r}") from None
    if first < 1 or last < 1:
        raise argparse.ArgumentTypeError(f"games must be >= 1: {text!r}")
    return first, last


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m flows.capture_train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT_OUT, help="folder for runs and results")
    parser.add_argument("--networks", type=_csv(str, tuple(NETWORKS)),
                        default=list(NETWORKS), help="comma-separated: mdrnn,mdlstm")
    parser.add_argument("--sizes", type=_csv(int, BOARD_SIZES), default=list(SIZES),
                        help="board sizes trained on, comma-separated (default 5,7)")
    parser.add_argument("--optimisers", type=_csv(str, OPTIMISERS), default=list(OPTIMISERS),
                        help="comma-separated: pgpe,es,cmaes")
    parser.add_argument("--runs", type=bounded(int, 1, 10_000), default=10,
                        help="independent runs per cell")
    parser.add_argument("--evaluations", type=bounded(int, 1, 10**9), default=12_000,
                        help="episodes (fitness evaluations) per run")
    parser.add_argument("--games", type=bounded(int, 1, 10**6), default=GAMES,
                        help="games per fitness evaluation")
    parser.add_argument("--final-games", type=bounded(int, 1, 10**7), default=400,
                        help="games that score a run's final network")
    parser.add_argument("--lazy", type=_lazy, default=None, metavar="FIRST:LAST",
                        help="also run every cell with lazy evaluation, FIRST growing to LAST "
                             "games per fitness (same games in all)")
    parser.add_argument("--pgpe-steps", type=_steps, default=None,
                        metavar="ALPHA_MU:ALPHA_SIGMA",
                        help="also run every PGPE cell with these step sizes (the paper's: "
                             "0.2:0.1)")
    parser.add_argument("--coevolution", action="store_true",
                        help="also run every cell co-evolving: each candidate also plays the "
                             "run's mean and best-so-far network (see runs.py)")
    parser.add_argument("--shaping", type=_shaping, default=(0.0, "both"),
                        metavar="W[:FORM]",
                        help="also run every cell with length shaping of weight W in [0, 1): "
                             "the optimiser is told outcomes with the game's length as a "
                             f"tie-break; FORM one of {', '.join(SHAPING_FORMS)} (see runs.py)")
    parser.add_argument("--curriculum", type=_share, default=0.0, metavar="C",
                        help="also run every cell against an opponent that grows greedy: its "
                             "moves random with a probability falling from 1 to 0 over a share "
                             "C in (0, 1] of the budget (see runs.py)")
    parser.add_argument("--scout", type=bounded(int, 0, 10**6), default=0, metavar="N",
                        help="also run every cell with scouting: N random networks drawn "
                             "around the start first, the optimiser started from the best "
                             "(see runs.py)")
    parser.add_argument("--cmaes-first", type=bounded(int, 0, 10**9), default=0, metavar="N",
                        help="also run every PGPE cell as CMA-ES for its first N episodes, "
                             "then PGPE from CMA-ES's mean and widths (see runs.py)")
    parser.add_argument("--pgpe-memory", type=bounded(int, 0, 10**6), default=0, metavar="N",
                        help="also run every PGPE cell with its steps normalised by the best "
                             "fitness of the last N generations, not the best ever (pgpe.py)")
    parser.add_argument("--common-draws", action="store_true",
                        help="also run every cell with each generation's candidates playing "
                             "the same opponent draws (common random numbers; see fitness.py)")
    parser.add_argument("--cmaes-popsize", type=bounded(int, 0, 10**6), default=0, metavar="N",
                        help="also run every CMA-ES cell with a population of N (default: "
                             "the library's 4 + 3 ln d)")
    parser.add_argument("--abandon", type=_abandon, default=None, metavar="EPISODES:FITNESS",
                        help="also run every cell dropping a start whose candidates average "
                             "below FITNESS after EPISODES episodes of its own, for a fresh "
                             "random start (see runs.py)")
    parser.add_argument("--weight-decay", type=bounded(float, 0), default=0.0, metavar="C",
                        help="also run every cell telling the optimiser each candidate's "
                             "fitness less C x its mean squared weight (see runs.py)")
    parser.add_argument("--combine", action="store_true",
                        help="put the variant options together into one extra cell per cell "
                             "instead of one cell each")
    parser.add_argument("--init", default=None, metavar="FILE",
                        help="start every run from these weights (best_network.pt, a flat "
                             "vector, or a run's checkpoint .pkl: its mean) instead of random "
                             "ones: incremental scaling (see runs.py)")
    parser.add_argument("--init-sigma", type=bounded(float, 0), default=0.0, metavar="S",
                        help="with --init: the optimiser's starting width for every weight "
                             "(default: its own, PGPE's 2.0)")
    parser.add_argument("--keep-sigma", action="store_true",
                        help="with --init of a run's checkpoint: PGPE starts with the widths "
                             "that run's optimiser ended with")
    parser.add_argument("--restarts", action="store_true",
                        help="also run every CMA-ES cell with IPOP restarts (see cmaes.py)")
    parser.add_argument("--generalise", type=_csv(int, BOARD_SIZES), default=list(GENERALISE_SIZES),
                        help="board sizes the best small-board networks are also asked on")
    parser.add_argument("--together", type=bounded(int, 1, 10_000), default=10,
                        help="runs of a cell played in lock step in one task (one batch of "
                             "games per generation; 1: every run its own task)")
    parser.add_argument("--checkpoint-every", type=bounded(int, 1, 10**6), default=10,
                        help="generations between a run's checkpoints")
    parser.add_argument("--workers", type=bounded(int, 0, 1024), default=DEFAULT_WORKERS,
                        help="local Dask worker processes (0: run in the flow's process)")
    parser.add_argument("--address", default=None,
                        help="an existing Dask scheduler (tcp://host:8786) instead")
    parser.add_argument("--seed", type=bounded(int, 0, 2**63 - 1), default=0,
                        help="the grid's seed")
    parser.add_argument("--replot", type=Path, default=None, metavar="PNG",
                        help="run nothing: plot --out's results.json as Fig. 3 into PNG")
    parser.add_argument("--dpi", type=bounded(int, 10, 1200), default=90,
                        help="the --replot figure's dpi")
    logs.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.replot is not None:
        results_json = Path(args.out) / "results.json"
        if not results_json.exists():
            parser.error(f"--replot: no {results_json} (a finished grid writes it)")
        plot_curves(json.loads(results_json.read_text()), args.replot, dpi=args.dpi)
        print(f"{args.replot}: Fig. 3 of {results_json}")
        return {"replot": str(args.replot)}
    # options RunSpec checks (episode counts against the budget, sizes), with the optimiser
    # each one is for
    for option, optimiser in (("scout", "pgpe"), ("cmaes_first", "pgpe"),
                              ("pgpe_memory", "pgpe"), ("cmaes_popsize", "cmaes"),
                              ("abandon", "pgpe"), ("weight_decay", "pgpe")):
        if getattr(args, option):
            try:
                RunSpec("mdrnn", 5, optimiser, evaluations=args.evaluations,
                        **{option: getattr(args, option)})
            except ValueError as error:
                parser.error(f"--{option.replace('_', '-')}: {error}")
    if args.init is not None:  # kept as given: the path is part of each run's spec, which a
        # rerun of the same command must match to read its runs back
        if args.init_sigma and args.keep_sigma:
            parser.error("--init-sigma and --keep-sigma: one or the other")
        for network in args.networks:
            try:
                RunSpec(network, args.sizes[0], "pgpe" if args.keep_sigma else "es",
                        init=args.init, init_sigma=args.init_sigma, keep_sigma=args.keep_sigma)
            except ValueError as error:
                parser.error(f"--init: {error}")
    elif args.init_sigma or args.keep_sigma:
        parser.error("--init-sigma and --keep-sigma go with --init")
    configure_logging(args)
    # `python -m flows.capture_train` runs this file as __main__: take the flow from the
    # importable module so that Dask workers unpickle its tasks by reference
    from flows.capture_train import capture_train_on as importable

    flow_ = importable(address=args.address, workers=args.workers)
    announce_prefect_api()
    result = flow_(out_dir=args.out, networks=args.networks, sizes=args.sizes,
                   optimisers=args.optimisers, runs=args.runs, evaluations=args.evaluations,
                   games=args.games, seed=args.seed, lazy=args.lazy,
                   checkpoint_every=args.checkpoint_every, final_games=args.final_games,
                   generalise_sizes=args.generalise, pgpe_steps=args.pgpe_steps,
                   together=args.together, coevolution=args.coevolution,
                   shaping=args.shaping[0], shaping_form=args.shaping[1],
                   restarts=args.restarts, curriculum=args.curriculum, scout=args.scout,
                   cmaes_first=args.cmaes_first, pgpe_memory=args.pgpe_memory,
                   cmaes_popsize=args.cmaes_popsize, common_draws=args.common_draws,
                   abandon=args.abandon, weight_decay=args.weight_decay,
                   combine=args.combine, init=args.init, init_sigma=args.init_sigma,
                   keep_sigma=args.keep_sigma)
    print(table_markdown(result["cells"]))
    print(generalisation_markdown(result["generalisation"]))
    print(f"best run: {result['best']} -> {Path(args.out) / 'best_network.pt'}")
    return result


if __name__ == "__main__":
    main()
