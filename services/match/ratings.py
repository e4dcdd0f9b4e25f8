"""Ratings of versions from a ratings log: Elo against version (and against the CPU-hours of
the self-play loop that made them) as PNGs, and on model cards.

Why: "is version 7 stronger than 5" is a question about the whole history, not one match. The
ratings log (a match folder's ``games.jsonl``, kept apart from the gate's games, which are
played at the gate's budget and stop early) collects every rating match; `rate` fits all its
games at once (`services.match.results.standings`), `plot_ratings` draws Elo against version
number with the 95% intervals, one line per kind of player (model and budget), other players
(GNU Go at a level, a brain) as labelled horizontal lines, and `write_cards` stores each
version's rating in its model card (``ratings`` in ``metadata.json``,
`services.repository.model_card.update_card`).

A self-play loop's run also gets Elo against compute: `loop_cpu_hours` reads the loop's
``loop.json`` (`services.selfplay.loop`) and gives each version the loop made the cumulative
CPU-hours of the loop up to the end of the iteration that made it (every stage: self-play,
ingest, training, gate, rollout; the loop's first version at 0), and `plot_elo_against_cpu`
draws Elo against them. ``python -m services.match.ratings`` draws it for a run.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

from services.match.results import read_log, standings
from services.ratings.bradley_terry import Rating
from services.repository.model_card import update_card
from services.repository.rollout_state import now_text
from services.selfplay.loop import STAGES

CPU_PLOT_FILE = "elo_cpu.png"

log = logging.getLogger(__name__)


def player_info(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the log says about each player (kind, model and version, budget), by label."""
    info: dict[str, dict[str, Any]] = {}
    for e in entries:
        info.update(e.get("players") or {})
    return info


def rate(entries: list[dict[str, Any]], anchor: Hashable | None = None
         ) -> dict[Hashable, Rating]:
    """Every player's Elo over all games of the log (see `standings`)."""
    return standings(entries, anchor)


def _save(fig: Any, path: Path) -> Path:
    """`fig` written to `path` as a PNG (its folder made) and closed; the path. Called by the
    plots after they imported matplotlib with the Agg backend."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_ratings(ratings: dict[Hashable, Rating], entries: list[dict[str, Any]], path: Path,
                 title: str = "Elo against version") -> Path:
    """A PNG of Elo (95% interval bars) against version number (see the module docstring)."""
    import matplotlib  # here: `movepred` starts without it

    matplotlib.use("Agg")  # headless: files only
    import matplotlib.pyplot as plt

    info = player_info(entries)
    series: dict[str, list[tuple[int, Rating]]] = {}
    others: list[Rating] = []
    for label, rating in ratings.items():
        meta = info.get(str(label), {})
        if meta.get("version") is None:
            others.append(rating)
            continue
        budget = (f"{meta.get('visits')} visits" if meta.get("visits")
                  else f"{meta.get('time_ms')} ms" if meta.get("time_ms") else "raw policy")
        group = f"{meta.get('model_name')} ({budget})"
        series.setdefault(group, []).append((int(meta["version"]), rating))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for group, points in sorted(series.items()):
        points.sort(key=lambda p: p[0])
        xs = [p[0] for p in points]
        ys = [p[1].elo for p in points]
        errors = [[p[1].elo - p[1].low for p in points], [p[1].high - p[1].elo for p in points]]
        ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=group)
    for i, rating in enumerate(sorted(others, key=lambda r: r.elo)):
        line = ax.axhline(rating.elo, ls="--", lw=1, color=f"C{(len(series) + i) % 10}")
        ax.annotate(f"{rating.player} {rating.elo:+.0f}", (0.01, rating.elo),
                    xycoords=("axes fraction", "data"), va="bottom", fontsize=8,
                    color=line.get_color())
    ax.set(xlabel="version", ylabel="Elo (95% interval)", title=title)
    if series:
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def loop_cpu_hours(loop: Mapping[str, Any],
                   cpu: Mapping[int, Mapping[str, float]] | None = None) -> dict[int, float]:
    """{version: cumulative CPU-hours of the loop when it was made}: the loop's first serving
    version at 0, each candidate at the sum of every stage's ``cpu_seconds`` of the finished
    iterations up to and including its own (its gate and rollout too). `cpu`: CPU seconds by
    iteration and stage measured outside the loop, for a run recorded before its stages
    counted their CPU; it wins over the record. A stage with neither is an error naming it."""
    cpu = cpu or {}
    hours: dict[int, float] = {}
    total = 0.0
    for record in loop.get("history", []):
        iteration = int(record["iteration"])
        if not hours:
            hours[int(record["selfplay"]["serving_version"])] = 0.0
        for stage in STAGES:
            seconds = cpu.get(iteration, {}).get(stage, record[stage].get("cpu_seconds"))
            if seconds is None:
                raise ValueError(f"iteration {iteration} {stage}: no CPU time in the loop's "
                                 "record (a run from before the loop counted it) and none "
                                 "given")
            total += float(seconds)
        hours[int(record["train"]["candidate_version"])] = total / 3600
    return hours


def plot_elo_against_cpu(ratings: dict[Hashable, Rating], entries: list[dict[str, Any]],
                         cpu_hours: Mapping[int, float], path: Path,
                         estimated: frozenset[int] = frozenset(),
                         title: str = "Elo against the loop's CPU-hours") -> Path:
    """A PNG of each rated version's Elo (95% interval bars) against the loop's cumulative
    CPU-hours when it was made (`loop_cpu_hours`), one line per kind of player (model and
    budget), each point labelled with its version; versions in `estimated` (made in an
    iteration whose CPU was estimated, not measured) drawn hollow. Versions the loop did not
    make are left out."""
    import matplotlib  # here: `movepred` starts without it

    matplotlib.use("Agg")  # headless: files only
    import matplotlib.pyplot as plt

    info = player_info(entries)
    series: dict[str, list[tuple[float, int, Rating]]] = {}
    for label, rating in ratings.items():
        meta = info.get(str(label), {})
        version = meta.get("version")
        if version is None or int(version) not in cpu_hours:
            continue
        budget = (f"{meta.get('visits')} visits" if meta.get("visits")
                  else f"{meta.get('time_ms')} ms" if meta.get("time_ms") else "raw policy")
        group = f"{meta.get('model_name')} ({budget})"
        series.setdefault(group, []).append((cpu_hours[int(version)], int(version), rating))
    if not series:
        raise ValueError("no rated version is one the loop made")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (group, points) in enumerate(sorted(series.items())):
        points.sort(key=lambda p: (p[0], p[1]))
        colour = f"C{i % 10}"
        xs = [p[0] for p in points]
        ax.plot(xs, [p[2].elo for p in points], color=colour, lw=1, alpha=0.6)
        for x, version, r in points:
            hollow = version in estimated
            ax.errorbar([x], [r.elo], yerr=[[r.elo - r.low], [r.high - r.elo]], marker="o",
                        capsize=3, color=colour, mfc="white" if hollow else colour)
            ax.annotate(f"v{version}", (x, r.elo), textcoords="offset points", xytext=(4, 4),
                        fontsize=8, color=colour)
        ax.plot([], [], marker="o", color=colour, label=group)
    if estimated:
        ax.plot([], [], marker="o", ls="", color="grey", mfc="white",
                label="hollow: its iteration's CPU estimated (later points add it too)")
    ax.set(xlabel="cumulative CPU-hours of the loop (self-play, ingest, training, gate)",
           ylabel="Elo (95% interval)", title=title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def write_cards(repository: Path, ratings: dict[Hashable, Rating],
                entries: list[dict[str, Any]], log_path: Path, anchor: Hashable) -> list[str]:
    """Store each rated version's Elo in its model card (``ratings``, by player label; the
    anchor's too); returns the labels written. A version no longer published (quarantined) or
    evaluated from another repository is skipped with a log line."""
    info = player_info(entries)
    written = []
    for label, rating in ratings.items():
        meta = info.get(str(label), {})
        if meta.get("version") is None or not meta.get("model_name"):
            continue
        value = {"elo": round(rating.elo, 1), "low": round(rating.low, 1),
                 "high": round(rating.high, 1), "games": rating.games,
                 "score": round(rating.score, 4), "anchor": str(anchor),
                 "log": str(Path(log_path).resolve()), "at": now_text()}
        try:
            update_card(repository, meta["model_name"], int(meta["version"]),
                        {"ratings": {str(label): value}})
        except (FileNotFoundError, ValueError) as exc:
            log.warning("rating of %s not written to its model card: %s", label, exc)
            continue
        written.append(str(label))
    return written


def read_cpu_file(path: Path) -> tuple[dict[int, dict[str, float]], frozenset[int]]:
    """A file of CPU seconds measured outside a loop: ``{"iterations": {"N": {stage:
    seconds}}, "estimated": [N, ...]}`` (the iterations whose figures are estimates)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    cpu = {int(i): {str(k): float(v) for k, v in stages.items()}
           for i, stages in data["iterations"].items()}
    return cpu, frozenset(int(i) for i in data.get("estimated", []))


def main(argv: list[str] | None = None) -> int:
    """Elo against the loop's CPU-hours for a run: its ratings log and its ``loop.json``."""
    parser = argparse.ArgumentParser(
        prog="python -m services.match.ratings",
        description="Draw Elo (a ratings log, fitted whole) against the cumulative CPU-hours "
                    "of the self-play loop that made each version (its loop.json).")
    parser.add_argument("--log", type=Path, required=True,
                        help="the ratings log (a match folder's games.jsonl)")
    parser.add_argument("--loop", type=Path, required=True,
                        help="the loop's run folder or its loop.json")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"the PNG (default: {CPU_PLOT_FILE} next to the log)")
    parser.add_argument("--anchor", default=None,
                        help="the player rated 0 (default: the first game's black)")
    parser.add_argument("--cpu", type=Path, default=None,
                        help="CPU seconds by iteration and stage measured outside the loop "
                             "(JSON, see read_cpu_file), for a run recorded before the loop "
                             "counted them")
    parser.add_argument("--title", default="Elo against the loop's CPU-hours")
    args = parser.parse_args(argv)
    record = args.loop / "loop.json" if args.loop.is_dir() else args.loop
    try:
        loop = json.loads(record.read_text(encoding="utf-8"))
        cpu, estimated = read_cpu_file(args.cpu) if args.cpu else ({}, frozenset())
        entries = read_log(args.log)
        ratings = rate(entries, args.anchor)
        hours = loop_cpu_hours(loop, cpu)
        made = {int(h["iteration"]): int(h["train"]["candidate_version"])
                for h in loop.get("history", [])}
        estimated = frozenset(v for i, v in made.items() if i in estimated)
        out = plot_elo_against_cpu(ratings, entries, hours, args.out or args.log.with_name(
            CPU_PLOT_FILE), estimated=estimated, title=args.title)
    except (OSError, ValueError, KeyError) as exc:
        parser.exit(2, f"error: {exc}\n")
    info = player_info(entries)
    rated = {int(info[str(label)]["version"]): rating for label, rating in ratings.items()
             if info.get(str(label), {}).get("version") is not None}
    for version, rating in sorted(rated.items()):
        if version in hours:
            print(f"v{version}: {hours[version]:.3f} CPU-hours, Elo {rating.elo:+.0f} "
                  f"[{rating.low:+.0f}, {rating.high:+.0f}]"
                  + (" (its iteration's CPU estimated)" if version in estimated else ""))
    print(f"-> {out}")
    return 0


__all__ = ["CPU_PLOT_FILE", "loop_cpu_hours", "main", "player_info", "plot_elo_against_cpu",
           "plot_ratings", "rate", "read_cpu_file", "write_cards"]


if __name__ == "__main__":
    raise SystemExit(main())
