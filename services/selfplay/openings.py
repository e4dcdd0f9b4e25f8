"""Opening suites: a few stones near the centre, distinct under the board's symmetries, and
balanced suites, whose openings a judge finds even.

Why: self-play from the empty board with the same network repeats itself (the noise and the
temperature vary it only so much), and a match from one position measures one game. An
opening suite starts games from many different positions; a match plays each one twice with
the colours swapped, so neither side profits from a lopsided one. But a lopsided opening
still costs the match its information: when black wins from it whoever plays black, its two
games score 1-1 whatever the players' strength, which pulls every rating towards 0 (freestyle
Gomoku from 2-4 random stones: black wins about three games in four). A balanced suite
(`balanced_suite`) keeps only the openings a judge (a searched network: `search_judge`) rates
within `band` of even, as Gomocup's tournament openings are chosen by engines; it is built
once and saved (`save_suite`, `load_suite`, ``movepred openings``) so that a match, the gate
and self-play can share it.

The stones are played by the rules (`Game.start(size).play`), so renju's forbidden points are
never an opening move for black, and an opening that ends the game is never chosen. `plies` 0
gives the single empty opening (Go self-play, whose balance is the komi).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from services.atomic_files import atomic_write_text
from services.evaluator import PolicyEvaluator
from services.games.base import BLACK, Game, Position
from services.games.symmetry import N_SYMMETRIES, transform_board
from services.search import mcts

log = logging.getLogger(__name__)

SUITE_FORMAT = "movepred-opening-suite/1"
Judge = Callable[[Position], float]
"""Black's expected result of a position, in [-1, 1] (1: black wins)."""


def canonical_key(state: Position) -> bytes:
    """The position's smallest board image under the 8 symmetries (with the side to move)."""
    images = (np.ascontiguousarray(transform_board(state.board, k)).tobytes()
              for k in range(N_SYMMETRIES))
    return bytes([state.to_move]) + min(images)


def opening_suite(game: Game, count: int, *, size: int | None = None, plies: tuple[int, int] =
                  (2, 4), radius: int = 3, seed: int = 0, max_tries: int = 100_000
                  ) -> list[tuple[int, ...]]:
    """`count` openings of `plies[0]`..`plies[1]` moves (alternating from the first mover) on
    points within `radius` lines of the centre, pairwise distinct under the symmetries, each
    legal and leaving the game open; the same arguments give the same list. ValueError when
    the box cannot hold that many distinct openings: `max_tries` draws in all, or as many
    draws in a row as `count` (at least 1,000) without a new opening."""
    _check(count, plies, radius)
    if plies[1] == 0:
        return [()] if count == 1 else _too_many(count, "the empty board is one opening")
    suite: list[tuple[int, ...]] = []
    for opening in distinct_openings(game, size=size, plies=plies, radius=radius, seed=seed,
                                     max_tries=max_tries, patience=max(1000, count)):
        suite.append(opening)
        if len(suite) == count:
            return suite
    return _too_many(count, f"only {len(suite)} distinct openings found within radius {radius}")


def _check(count: int, plies: tuple[int, int], radius: int) -> None:
    lo, hi = plies
    if count < 1 or not 0 <= lo <= hi or radius < 0:
        raise ValueError(f"bad opening suite: {count=} {plies=} {radius=}")


def distinct_openings(game: Game, *, size: int | None = None, plies: tuple[int, int] = (2, 4),
                      radius: int = 3, seed: int = 0, max_tries: int = 100_000,
                      patience: int = 1000) -> Iterator[tuple[int, ...]]:
    """Random openings (see `opening_suite`), each new under the symmetries, in the order the
    seed draws them; ends after `max_tries` draws, or `patience` draws in a row with no new
    one. `opening_suite(count=k)` is the first k of them."""
    lo, hi = plies
    start = game.start(size)
    n = start.size
    centre = n // 2
    box = np.array([(centre + dy) * n + centre + dx
                    for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1)
                    if 0 <= centre + dy < n and 0 <= centre + dx < n])
    rng = np.random.default_rng(seed)
    seen: set[bytes] = set()
    stale = 0
    for _ in range(max_tries):
        if stale >= patience:
            return
        stale += 1
        state = start
        moves: list[int] = []
        for _ in range(int(rng.integers(lo, hi + 1))):
            points = np.asarray(state.legal_mask()).reshape(-1)[: n * n]
            legal = np.flatnonzero(points[box]) if not state.is_over else np.empty(0, np.int64)
            if len(legal) == 0:
                break
            move = int(box[rng.choice(legal)])
            state = state.play(move)
            moves.append(move)
        if state.is_over or len(moves) < lo:
            continue
        key = canonical_key(state)
        if key not in seen:
            seen.add(key)
            stale = 0
            yield tuple(moves)


def play_opening(game: Game, opening: tuple[int, ...], size: int | None = None) -> Position:
    """The position after `opening`'s moves from the empty board."""
    state = game.start(size)
    for move in opening:
        state = state.play(move)
    return state


def search_judge(evaluator: PolicyEvaluator, visits: int) -> Judge:
    """A judge that searches each position `visits` visits (a fresh tree, no noise, so the
    same network gives the same verdicts) and reads the root's mean value from black's side:
    the search's exact tactics and its visits make it a steadier judge than the value head's
    one look."""
    if visits < 1:
        raise ValueError(f"a search judge needs visits >= 1, got {visits}")

    def judge(state: Position) -> float:
        value = mcts.search(state, evaluator, max_visits=visits).value
        return float(value if state.to_move == BLACK else -value)

    return judge


@dataclass(frozen=True)
class OpeningSuite:
    """A saved suite: the openings of `game` on `size` and, for a balanced one, each opening's
    judged value (black's side) and how it was judged (`judge`, `band`)."""

    game: str
    size: int
    openings: tuple[tuple[int, ...], ...]
    values: tuple[float, ...] = ()
    judge: str = ""
    band: float = 1.0
    candidates: int = 0  # openings judged to find these

    def to_dict(self) -> dict[str, Any]:
        return {"format": SUITE_FORMAT, "game": self.game, "size": self.size,
                "judge": self.judge, "band": self.band, "candidates": self.candidates,
                "openings": [{"moves": list(o), **({"value": round(v, 4)} if self.values
                                                   else {})}
                             for o, v in zip(self.openings, self.values or
                                             [0.0] * len(self.openings), strict=True)]}


def balanced_suite(game: Game, count: int, judge: Judge, *, band: float = 0.2,
                   size: int | None = None, plies: tuple[int, int] = (2, 4), radius: int = 3,
                   seed: int = 0, max_candidates: int = 10_000, judge_name: str = "",
                   on_candidate: Callable[[int, int], None] | None = None) -> OpeningSuite:
    """The first `count` of `distinct_openings` whose judged value (black's side) lies within
    `band` of 0, judging at most `max_candidates` of them; ValueError when fewer are found
    (a wider band, more plies or a larger radius find more). `on_candidate(judged, kept)`
    after each judgement, for progress."""
    _check(count, plies, radius)
    if not 0 < band <= 1 or plies[1] == 0:
        raise ValueError(f"a balanced suite needs 0 < band <= 1 and stones, got {band=} "
                         f"{plies=}")
    kept: list[tuple[int, ...]] = []
    values: list[float] = []
    judged = 0
    for opening in distinct_openings(game, size=size, plies=plies, radius=radius, seed=seed,
                                     max_tries=max(100_000, 10 * max_candidates)):
        if judged == max_candidates:
            break
        judged += 1
        value = float(judge(play_opening(game, opening, size)))
        if abs(value) <= band:
            kept.append(opening)
            values.append(value)
        if on_candidate is not None:
            on_candidate(judged, len(kept))
        if len(kept) == count:
            return OpeningSuite(game.name, game.start(size).size, tuple(kept), tuple(values),
                                judge_name, band, judged)
    raise ValueError(f"only {len(kept)} of {judged} judged openings are within {band} of even; "
                     f"{count} wanted (widen --band, or allow more stones or a larger radius)")


def save_suite(suite: OpeningSuite, path: Path) -> None:
    """Write `suite` as JSON, atomically."""
    atomic_write_text(json.dumps(suite.to_dict(), indent=1) + "\n", Path(path))


def load_suite(path: Path, game: Game, size: int | None = None) -> OpeningSuite:
    """The suite saved at `path`, checked: its format, that it is `game`'s on `size` (None: the
    game's default) and that every opening is legal and leaves the game open."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the opening suite {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != SUITE_FORMAT:
        raise ValueError(f"{path} is not an opening suite (format {SUITE_FORMAT})")
    board = game.start(size).size
    if data.get("game") != game.name or data.get("size") != board:
        raise ValueError(f"{path} holds {data.get('game')} {data.get('size')} openings, not "
                         f"{game.name} {board}")
    entries = data.get("openings")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path} holds no openings")
    openings, values = [], []
    for i, entry in enumerate(entries):
        try:
            moves = tuple(int(m) for m in entry["moves"])
            if play_opening(game, moves, size).is_over:
                raise ValueError("it ends the game")
        except Exception as exc:  # any defect of one entry is the file's error
            raise ValueError(f"{path}: opening {i} is not playable: {exc}") from exc
        openings.append(moves)
        values.append(float(entry.get("value", 0.0)))
    has_values = all("value" in e for e in entries)
    return OpeningSuite(game.name, board, tuple(openings), tuple(values) if has_values else (),
                        str(data.get("judge", "")), float(data.get("band", 1.0)),
                        int(data.get("candidates", 0)))


def _too_many(count: int, why: str) -> list[tuple[int, ...]]:
    raise ValueError(f"cannot make {count} openings: {why}")


__all__ = ["Judge", "OpeningSuite", "balanced_suite", "canonical_key", "distinct_openings",
           "load_suite", "opening_suite", "play_opening", "save_suite", "search_judge"]
