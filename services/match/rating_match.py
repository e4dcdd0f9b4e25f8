"""A rating match: play the missing games, then rate everyone in the ratings log.

Why one function: ``movepred match`` and the Prefect flow ``match`` do the same four things in
the same order, and the order matters: the games first (`services.match.runner`, resumable),
then the Elo of every player over ALL games of the folder's log (not only this run's: the log
is the ratings log), the PNG of Elo against version, and the model cards of the rated versions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.games.base import Game
from services.match.ratings import plot_ratings, rate, write_cards
from services.match.results import LOG_FILE, read_log, standings_table
from services.match.runner import MatchConfig, MatchReport, run_match
from services.match.specs import Player
from services.ratings.bradley_terry import Rating

log = logging.getLogger(__name__)

PLOT_FILE = "elo.png"


@dataclass
class RatingMatchResult:
    report: MatchReport
    ratings: dict[Hashable, Rating]
    anchor: str
    table: str  # markdown
    plot: Path | None
    cards: list[str]  # labels whose versions' model cards got their rating
    log_games: int  # games in the ratings log (all matches)

    def summary(self) -> dict[str, Any]:
        return {"played": self.report.played, "skipped": self.report.skipped,
                "log_games": self.log_games, "anchor": self.anchor,
                "log": str(self.report.log_path), "plot": str(self.plot) if self.plot else None,
                "cards": self.cards,
                "ratings": {str(k): {"elo": round(r.elo, 1), "low": round(r.low, 1),
                                     "high": round(r.high, 1), "games": r.games}
                            for k, r in self.ratings.items()}}


def rating_match(game: Game, players: Sequence[Player], out_dir: Path, config: MatchConfig,
                 *, repository: Path, anchor: str | None = None, cards: bool = True,
                 on_game: Callable[[dict[str, Any]], None] | None = None
                 ) -> RatingMatchResult:
    """Play, rate over the whole log (`anchor` at 0; default the first player), plot to
    ``<out_dir>/elo.png``, write the versions' ratings into their model cards (`cards`)."""
    out_dir = Path(out_dir)
    report = run_match(game, players, out_dir, config, on_game=on_game)
    entries = read_log(out_dir / LOG_FILE)
    anchor = anchor or players[0].label
    ratings = rate(entries, anchor) if entries else {}
    table = standings_table(ratings, entries, anchor) if ratings else "no games yet"
    plot = plot_ratings(ratings, entries, out_dir / PLOT_FILE,
                        title=f"{game.title}: Elo against version ({len(entries)} games)"
                        ) if ratings else None
    written = (write_cards(repository, ratings, entries, out_dir / LOG_FILE, anchor)
               if cards and ratings else [])
    return RatingMatchResult(report, ratings, anchor, table, plot, written, len(entries))


__all__ = ["PLOT_FILE", "RatingMatchResult", "rating_match"]
