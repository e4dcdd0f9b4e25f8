"""Ratings of versions from a ratings log: Elo against version as a PNG, and on model cards.

Why: "is version 7 stronger than 5" is a question about the whole history, not one match. The
ratings log (a match folder's ``games.jsonl``, kept apart from the gate's games, which are
played at the gate's budget and stop early) collects every rating match; `rate` fits all its
games at once (`services.match.results.standings`), `plot_ratings` draws Elo against version
number with the 95% intervals, one line per kind of player (model and budget), other players
(GNU Go at a level, a brain) as labelled horizontal lines, and `write_cards` stores each
version's rating in its model card (``ratings`` in ``metadata.json``,
`services.repository.model_card.update_card`).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from services.match.results import standings
from services.ratings.bradley_terry import Rating
from services.repository.model_card import update_card
from services.repository.rollout_state import now_text

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
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


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


__all__ = ["player_info", "plot_ratings", "rate", "write_cards"]
