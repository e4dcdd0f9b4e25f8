"""The match runner: players meet on an opening suite, each opening twice with colours swapped.

Why this shape: one position measures one game, and the first mover's edge would decide a
match where one side always starts. So the games are the openings of
`services.selfplay.openings.opening_suite` (distinct under the symmetries; or a saved balanced
suite, `MatchConfig.suite`), each
played by every two players twice, each taking black once (`schedule`). A game ends by the
rules (`Game.terminal_value`: worth to the last mover), by a resignation (the engine answers
None) or an illegal move (the mover loses), by a position without a legal move, or after
`max_moves` moves (a draw; default twice the policy size).

On disk, under the match folder:

    games.jsonl         one JSON line per finished game (`services.match.results`), appended
                        last: the log is what was played
    records/<id><sfx>   every game as a record file of the game's format (SGF, RIF), written
                        atomically before its line; its comments name the players and result

Kill-safety (as `services.selfplay.worker`): a game is finished when its line is in the log; a
rerun with the same players and suite skips the finished games (same players, opening and
colours), so a run killed at any moment loses no finished game and counts none twice (a record
without its line is written again). One run at a time holds ``.match.lock`` in the folder.

Several games at once: `jobs` worker processes (spawned, torch at one thread each), each with
its own engines, opened on first use; the parent writes the log. `stop(entries)` is asked
after every game (the SPRT of the gate): once it says stop, no game starts (those in flight
finish and are logged).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import multiprocessing
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import util as mp_util
from pathlib import Path
from typing import Any

import numpy as np

from services.atomic_files import atomic_write_text, locked
from services.games.base import BLACK, COLOR_NAMES, WHITE, Game, Position
from services.games.registry import get_game
from services.match.engines import Engine
from services.match.results import (
    LOG_FILE,
    append_entry,
    entry_key,
    finished_keys,
    read_log,
)
from services.match.specs import Player, open_engine
from services.repository.rollout_state import now_text
from services.selfplay.openings import opening_suite, play_opening
from services.selfplay.records import record_suffix

log = logging.getLogger(__name__)

RECORDS_DIR = "records"
LOCK_FILE = ".match.lock"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class MatchConfig:
    """The suite and the limits: `pairs` openings (each game twice per two players), of
    `plies` stones within `radius` lines of the centre, from `seed`, or the first `pairs` of a
    given `suite` (a saved balanced one: `services.selfplay.openings.load_suite`); `size`: the
    board (None: the game's default); `max_moves`: moves of a game before it is a draw (0:
    twice the policy size); `jobs`: games at once (processes)."""

    pairs: int = 50
    size: int | None = None
    plies: tuple[int, int] = (2, 4)
    radius: int = 3
    seed: int = 0
    max_moves: int = 0
    jobs: int = 1
    suite: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if self.pairs < 1 or self.jobs < 1 or self.max_moves < 0:
            raise ValueError(f"need pairs >= 1, jobs >= 1, max_moves >= 0; got {self.pairs}, "
                             f"{self.jobs}, {self.max_moves}")
        if self.suite and self.pairs > len(self.suite):
            raise ValueError(f"{self.pairs} openings wanted, the suite holds {len(self.suite)}")


@dataclass(frozen=True)
class Pairing:
    """One scheduled game: opening `index` with `black` and `white` (player labels)."""

    index: int
    opening: tuple[int, ...]
    black: str
    white: str

    @property
    def key(self) -> tuple[str, str, tuple[int, ...]]:
        return (self.black, self.white, self.opening)


def openings(game: Game, config: MatchConfig) -> list[tuple[int, ...]]:
    """The suite: `config.pairs` openings (all the empty board when `plies` is (0, 0))."""
    if config.suite:
        return [tuple(o) for o in config.suite[: config.pairs]]
    if config.plies[1] == 0:
        return [()] * config.pairs
    return opening_suite(game, config.pairs, size=config.size, plies=config.plies,
                         radius=config.radius, seed=config.seed)


def schedule(labels: Sequence[str], suite: Sequence[tuple[int, ...]]) -> list[Pairing]:
    """Every two players on every opening, twice: the first named player black, then white."""
    if len(set(labels)) != len(labels):
        raise ValueError(f"two players have the same name: {list(labels)} (give name=...)")
    if len(labels) < 2:
        raise ValueError("a match needs at least two players")
    plan = []
    for i, opening in enumerate(suite):
        for a, b in itertools.combinations(labels, 2):
            plan += [Pairing(i, tuple(opening), a, b), Pairing(i, tuple(opening), b, a)]
    return plan


@dataclass
class Outcome:
    """A finished game: `winner` a colour (0: a draw), why it ended, the moves (opening
    included) and each side's seconds."""

    winner: int
    end: str
    moves: tuple[int, ...]
    seconds: dict[int, float] = field(default_factory=dict)


def _other(colour: int) -> int:
    return WHITE if colour == BLACK else BLACK


def play_game(game: Game, black: Engine, white: Engine, opening: Sequence[int],
              size: int | None = None, max_moves: int = 0) -> Outcome:
    """One game from `opening` (see the module docstring for how it ends)."""
    state: Position = play_opening(game, tuple(opening), size)
    cap = max_moves or 2 * game.policy_size(state.size)
    engines = {BLACK: black, WHITE: white}
    seconds = {BLACK: 0.0, WHITE: 0.0}
    while True:
        if state.is_over:  # an opening that ends the game (never chosen by the suite)
            return Outcome(0, "over before play", tuple(state.moves), seconds)
        legal = np.asarray(state.legal_mask(), dtype=bool).reshape(-1)
        if not legal.any():
            return Outcome(0, "no legal move", tuple(state.moves), seconds)
        if len(state.moves) >= cap:
            return Outcome(0, f"move cap {cap}", tuple(state.moves), seconds)
        mover = state.to_move
        started = time.perf_counter()
        move = engines[mover].genmove(state)
        seconds[mover] += time.perf_counter() - started
        if move is None:
            return Outcome(_other(mover), "resignation", tuple(state.moves), seconds)
        if not 0 <= move < legal.size or not legal[move]:
            name = game.move_name(move, state.size) if 0 <= move < legal.size else str(move)
            log.warning("%s played the illegal move %s", engines[mover].name, name)
            return Outcome(_other(mover), f"illegal move {name} by {COLOR_NAMES[mover]}",
                           tuple(state.moves), seconds)
        state = state.play(move)
        if state.is_over:
            value = game.terminal_value(state)
            winner = mover if value > 0 else _other(mover) if value < 0 else 0
            return Outcome(winner, game.result_text(state) or "the rules",
                           tuple(state.moves), seconds)


# ------------------------------------------------------------------------ the worker side
_WORKER: dict[str, Any] = {}


def _init_worker(game_name: str, players: dict[str, Player], seed: int) -> None:
    import torch

    torch.set_num_threads(1)
    _WORKER.update(game=get_game(game_name), players=players, engines={}, seed=seed)
    mp_util.Finalize(None, _close_engines, exitpriority=10)


def _close_engines() -> None:
    for engine in _WORKER.get("engines", {}).values():
        try:
            engine.close()
        except Exception:
            log.exception("closing %s", engine.name)
    _WORKER.get("engines", {}).clear()


def _engine(label: str) -> Engine:
    engines = _WORKER["engines"]
    if label not in engines:
        engines[label] = open_engine(_WORKER["players"][label], _WORKER["game"],
                                     seed=_WORKER["seed"])
    return engines[label]


def _play(pairing: Pairing, size: int | None, max_moves: int) -> tuple[Pairing, Outcome]:
    outcome = play_game(_WORKER["game"], _engine(pairing.black), _engine(pairing.white),
                        pairing.opening, size, max_moves)
    return pairing, outcome


# ------------------------------------------------------------------------ the parent side
def _slug(text: str, limit: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:limit] or "player"


def game_id(pairing: Pairing) -> str:
    """A file name for the game: its opening, its players, a digest of the three."""
    digest = hashlib.sha1(repr(pairing.key).encode()).hexdigest()[:8]
    return f"{pairing.index:04d}-{_slug(pairing.black)}-vs-{_slug(pairing.white)}-{digest}"


def write_record(game: Game, out_dir: Path, pairing: Pairing, outcome: Outcome,
                 size: int) -> Path:
    """The game as a record file of its format (a list of moves for a game without one)."""
    result = COLOR_NAMES.get(outcome.winner, "nobody")
    summary = (f"match game {pairing.index}: black {pairing.black}, white {pairing.white}; "
               f"{'draw' if not outcome.winner else result + ' wins'} ({outcome.end})")
    try:
        suffix = record_suffix(game)
        text = game.record_text(suffix, outcome.moves, size, summary=summary)
    except ValueError:  # a game that writes no record format
        suffix = ".txt"
        text = summary + "\n" + " ".join(game.move_name(m, size) for m in outcome.moves) + "\n"
    path = Path(out_dir) / RECORDS_DIR / f"{game_id(pairing)}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(text, path)
    return path


def _entry(game: Game, out_dir: Path, pairing: Pairing, outcome: Outcome, size: int,
           players: dict[str, Player], record: Path, tag: dict[str, Any] | None
           ) -> dict[str, Any]:
    score = 0.5 if not outcome.winner else float(outcome.winner == BLACK)
    entry = {
        "format": FORMAT_VERSION, "id": game_id(pairing), "game": game.name, "size": size,
        "opening_index": pairing.index, "opening": list(pairing.opening),
        "black": pairing.black, "white": pairing.white,
        "winner": COLOR_NAMES.get(outcome.winner, ""), "score": score, "end": outcome.end,
        "plies": len(outcome.moves) - len(pairing.opening), "moves": list(outcome.moves),
        "seconds": {COLOR_NAMES[c]: round(s, 3) for c, s in outcome.seconds.items()},
        "record": str(record.relative_to(out_dir)), "at": now_text(),
        "players": {label: players[label].describe() for label in (pairing.black,
                                                                    pairing.white)},
    }
    if tag:
        entry["tag"] = tag
    return entry


@dataclass
class MatchReport:
    """What a run did: the log's entries for this match's players (earlier runs included),
    how many games it played and skipped, and whether `stop` ended it."""

    entries: list[dict[str, Any]]
    played: int = 0
    skipped: int = 0
    stopped: bool = False
    seconds: float = 0.0
    log_path: Path | None = None


def run_match(game: Game, players: Sequence[Player], out_dir: Path, config: MatchConfig, *,
              on_game: Callable[[dict[str, Any]], None] | None = None,
              stop: Callable[[list[dict[str, Any]]], bool] | None = None,
              tag: dict[str, Any] | None = None) -> MatchReport:
    """Play the games of the schedule that the log does not hold yet (see the module
    docstring); `on_game(entry)` after each game is logged; `tag` is stored in each entry."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    by_label = {p.label: p for p in players}
    suite = openings(game, config)
    plan = schedule([p.label for p in players], suite)
    size = game.start(config.size).size
    log_path = out_dir / LOG_FILE
    started = time.perf_counter()
    with locked(out_dir / LOCK_FILE, timeout_s=0, holder=f"another match on {out_dir}"):
        for leftover in (out_dir / RECORDS_DIR).glob(".*.tmp"):
            leftover.unlink(missing_ok=True)  # a killed run's half-written record
        labels = set(by_label)
        entries = [e for e in read_log(log_path)
                   if e.get("black") in labels and e.get("white") in labels]
        done = finished_keys(entries)
        todo = [p for p in plan if p.key not in done]
        report = MatchReport(entries, skipped=len(plan) - len(todo), log_path=log_path)
        if todo and (stop is None or not stop(entries)):
            _run(game, by_label, out_dir, config, size, todo, report, on_game, stop, tag)
        elif todo:
            report.stopped = True
    report.seconds = time.perf_counter() - started
    return report


def _run(game: Game, players: dict[str, Player], out_dir: Path, config: MatchConfig,
         size: int, todo: list[Pairing], report: MatchReport,
         on_game: Callable[[dict[str, Any]], None] | None,
         stop: Callable[[list[dict[str, Any]]], bool] | None,
         tag: dict[str, Any] | None) -> None:
    log_path = out_dir / LOG_FILE

    def finish(pairing: Pairing, outcome: Outcome) -> bool:
        """Write the game; True when the match should go on."""
        record = write_record(game, out_dir, pairing, outcome, size)
        entry = _entry(game, out_dir, pairing, outcome, size, players, record, tag)
        if entry_key(entry) in finished_keys(report.entries):
            return True  # never counted twice
        append_entry(log_path, entry)
        report.entries.append(entry)
        report.played += 1
        if on_game is not None:
            on_game(entry)
        if stop is not None and stop(report.entries):
            report.stopped = True
            return False
        return True

    if config.jobs == 1:
        _WORKER.update(game=game, players=players, engines={}, seed=config.seed)
        try:
            for pairing in todo:
                if not finish(*_play(pairing, config.size, config.max_moves)):
                    break
        finally:
            _close_engines()
        return
    context = multiprocessing.get_context("spawn")  # no fork after torch started threads
    with ProcessPoolExecutor(config.jobs, mp_context=context, initializer=_init_worker,
                             initargs=(game.name, players, config.seed)) as pool:
        queue = list(todo)
        pending: set[Future] = set()
        going = True
        while going and (queue or pending):
            while going and queue and len(pending) < config.jobs:
                pending.add(pool.submit(_play, queue.pop(0), config.size, config.max_moves))
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                going = finish(*future.result()) and going
        for future in pending:  # games in flight when the match stopped still count
            finish(*future.result())


__all__ = ["FORMAT_VERSION", "LOCK_FILE", "RECORDS_DIR", "MatchConfig", "MatchReport",
           "Outcome", "Pairing", "game_id", "openings", "play_game", "run_match", "schedule",
           "write_record"]
