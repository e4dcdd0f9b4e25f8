"""A finished self-play game on disk: one JSON file with its targets and lineage, and its record.

Layout under a self-play folder:

    games/<game_id>.json       the game (`SelfPlayGame`: moves, the full searches' visit counts,
                               root values, result, how it ended, model and version, seed,
                               opening, resignation), written last: its presence means done
    records/<game_id><suffix>  the game as a record file of the game's own format (one the
                               game's ingest reads where it writes one: Gomoku RIF, Go SGF),
                               for people, viewers and the ingest

Both are written atomically (`services.atomic_files`), the record first: a process killed at
any point leaves either a finished game (both files) or none counted (no JSON; a record file
without its JSON is overwritten when the game is played again). A game id names its worker
and index, so a restarted worker sees which of its games are done.
"""

from __future__ import annotations

import json
from pathlib import Path

from services.atomic_files import atomic_write_text
from services.games.base import Game
from services.selfplay.game_record import MoveRecord, SelfPlayGame

GAMES_DIR = "games"
RECORDS_DIR = "records"
FORMAT_VERSION = 1


def record_suffix(game: Game) -> str:
    """The record format self-play writes: one the game both writes and ingests, if any."""
    readable = [s for s in game.written_formats if s in game.record_formats]
    if readable:
        return readable[0]
    if not game.written_formats:
        raise ValueError(f"{game.title} writes no record format")
    return game.written_formats[0]


def game_path(out_dir: Path, game_id: str) -> Path:
    return Path(out_dir) / GAMES_DIR / f"{game_id}.json"


def finished_ids(out_dir: Path) -> set[str]:
    """Ids of the games finished under `out_dir` (those with their JSON file)."""
    folder = Path(out_dir) / GAMES_DIR
    return {p.stem for p in folder.glob("*.json")} if folder.is_dir() else set()


def to_json(record: SelfPlayGame, game_id: str) -> dict:
    return {
        "format": FORMAT_VERSION, "game_id": game_id, "game": record.game, "size": record.size,
        "seed": record.seed, "opening": list(record.opening), "no_resign": record.no_resign,
        "winner": record.winner, "end": record.end,
        "would_resign": list(record.would_resign) if record.would_resign else None,
        "model_name": record.model_name, "model_version": record.model_version,
        "moves": [{"move": m.move, "full": m.full, "visits": m.visits, "value": m.value,
                   "target": [list(t) for t in m.target]} for m in record.moves],
    }


def from_json(data: dict) -> SelfPlayGame:
    """The game of a JSON file's contents; ValueError naming what is wrong."""
    try:
        if data["format"] != FORMAT_VERSION:
            raise ValueError(f"format {data['format']!r}, expected {FORMAT_VERSION}")
        record = SelfPlayGame(str(data["game"]), int(data["size"]), int(data["seed"]),
                              tuple(int(m) for m in data["opening"]), bool(data["no_resign"]))
        record.winner, record.end = int(data["winner"]), str(data["end"])
        if data["would_resign"] is not None:
            ply, colour = data["would_resign"]
            record.would_resign = (int(ply), int(colour))
        record.model_name = str(data["model_name"])
        record.model_version = str(data["model_version"])
        record.moves = [MoveRecord(int(m["move"]), bool(m["full"]), int(m["visits"]),
                                   float(m["value"]),
                                   tuple((int(a), int(b)) for a, b in m["target"]))
                        for m in data["moves"]]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a self-play game: {type(exc).__name__} {exc}") from exc
    return record


def write_game(out_dir: Path, game_id: str, record: SelfPlayGame, game: Game) -> Path:
    """Write the record file, then the JSON that marks the game finished; returns the JSON."""
    out_dir = Path(out_dir)
    suffix = record_suffix(game)
    comments = [f"{'full' if m.full else 'fast'} {m.visits} visits, value {m.value:+.3f}"
                for m in record.moves]
    summary = (f"self-play {game_id}: {record.model_name} v{record.model_version}, seed "
               f"{record.seed}, {record.end}, winner {record.winner}")
    text = game.record_text(suffix, record.all_moves, record.size,
                            comments=[""] * len(record.opening) + comments, summary=summary)
    record_file = out_dir / RECORDS_DIR / f"{game_id}{suffix}"
    record_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(text, record_file)
    path = game_path(out_dir, game_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(json.dumps(to_json(record, game_id), separators=(",", ":")), path)
    return path


def read_game(path: Path) -> SelfPlayGame:
    return from_json(json.loads(Path(path).read_text(encoding="utf-8")))


__all__ = ["GAMES_DIR", "RECORDS_DIR", "finished_ids", "from_json", "game_path", "read_game",
           "record_suffix", "to_json", "write_game"]
