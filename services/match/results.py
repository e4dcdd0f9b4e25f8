"""The games log of a match folder (``games.jsonl``) and the standings it gives.

Why a JSON-lines log: a game is one line appended after its record is written, with one
``write`` and an fsync, so a killed run leaves whole lines and at worst the start of one; a
reader skips a line that is not JSON (with a warning) and the next append starts on a new
line. A log may hold several matches (version 2 against 1, 3 against 2, 3 against GNU Go): the
ratings are fitted over every game in it at once (`standings`, Bradley-Terry through
`services.ratings.bradley_terry`), so every player is on one scale. A game appears once: a line
whose players, opening and colours (`entry_key`) an earlier line has is not counted again.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

from services.ratings.bradley_terry import Game, Rating, fit

log = logging.getLogger(__name__)

LOG_FILE = "games.jsonl"


def entry_key(entry: dict[str, Any]) -> tuple[str, str, tuple[int, ...]]:
    """What makes a game the same game: its players by colour and its opening."""
    return (str(entry["black"]), str(entry["white"]), tuple(int(m) for m in entry["opening"]))


def finished_keys(entries: Iterable[dict[str, Any]]) -> set[tuple[str, str, tuple[int, ...]]]:
    return {entry_key(e) for e in entries}


def read_log(path: Path) -> list[dict[str, Any]]:
    """The games of a log, in order, each once ([] when there is no log)."""
    path = Path(path)
    if not path.exists():
        return []
    entries, seen = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            key = entry_key(entry)
            float(entry["score"])
        except (ValueError, KeyError, TypeError):
            log.warning("%s line %d is not a finished game (a run killed while writing it?); "
                        "skipped", path, number)
            continue
        if key in seen:
            log.warning("%s line %d repeats a game; counted once", path, number)
            continue
        seen.add(key)
        entries.append(entry)
    return entries


def append_entry(path: Path, entry: dict[str, Any]) -> None:
    """Append one game as one line, durably (on a new line if a killed run left a partial
    one)."""
    data = (json.dumps(entry, separators=(",", ":")) + "\n").encode("utf-8")
    path = Path(path)
    with path.open("ab+") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                data = b"\n" + data
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def games(entries: Iterable[dict[str, Any]]) -> list[Game]:
    """The log's games as Bradley-Terry games (black's score against white)."""
    return [Game(e["black"], e["white"], float(e["score"])) for e in entries]


def standings(entries: list[dict[str, Any]], anchor: Hashable | None = None
              ) -> dict[Hashable, Rating]:
    """Elo of every player of `entries` with its 95% interval, `anchor` at 0 (default: the
    first player of the first game). {} without a game."""
    if not entries:
        return {}
    if anchor is None:
        anchor = entries[0]["black"]
    players = {e["black"] for e in entries} | {e["white"] for e in entries}
    if anchor not in players:
        raise ValueError(f"anchor {anchor!r} played no game of the log (players: "
                         f"{', '.join(sorted(players))})")
    return fit(games(entries), anchor)


def record(entries: list[dict[str, Any]], player: str) -> tuple[int, int, int]:
    """`player`'s wins, draws and losses in `entries`."""
    wins = draws = losses = 0
    for e in entries:
        if player not in (e["black"], e["white"]):
            continue
        score = float(e["score"]) if e["black"] == player else 1.0 - float(e["score"])
        if score == 0.5:
            draws += 1
        elif score > 0.5:
            wins += 1
        else:
            losses += 1
    return wins, draws, losses


def standings_table(ratings: dict[Hashable, Rating], entries: list[dict[str, Any]],
                    anchor: Hashable) -> str:
    """A markdown table of the standings, strongest first."""
    lines = ["| player | Elo | 95% interval | games | W-D-L | score |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in sorted(ratings.values(), key=lambda r: -r.elo):
        w, d, l_ = record(entries, str(r.player))
        mark = " (anchor)" if r.player == anchor else ""
        lines.append(f"| {r.player}{mark} | {r.elo:+.0f} | [{r.low:+.0f}, {r.high:+.0f}] | "
                     f"{r.games} | {w}-{d}-{l_} | {r.score:.3f} |")
    return "\n".join(lines)


__all__ = ["LOG_FILE", "append_entry", "entry_key", "finished_keys", "games", "read_log",
           "record", "standings", "standings_table"]
