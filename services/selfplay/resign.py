"""Calibrated resignation: the resign threshold the played-out games say is safe.

Why calibrate: a fixed threshold is only as good as the value head that reads it. In a Go 9x9
run at the fixed -0.9, 10 of the 33 played-out games in which a side would have resigned were
won or drawn by that side (a 30% false-positive rate), and every such resignation teaches the
value head a wrong result. minigo and Leela Zero set the threshold each generation from the
games played out regardless (`SelfPlaySettings.no_resign_share`) so that the share of wrong
resignations stays near a target (5%); this module does that from the recorded games.

Everything here is a pure function of game dicts, the JSON form of a self-play game
(`services.selfplay.records.to_json`): each move's ``value`` is the mover's root value, the
``opening`` stones come first (black first), so searched move i is made by the side of ply
``len(opening) + i``. Because the played-out games record every value whatever threshold they
were played with, the resignation any threshold would have made can be replayed from them:
at threshold t a side resigns at its move when its last `after` root values were all below
-t, i.e. when -max(those values) > t (`SelfPlaySettings.resign_after`, as `play_game` does).

The rule (`calibrate`), over the played-out games given, with `after` and a `target` share:

1. The candidates are the floor (`RESIGN_FLOOR`, or the previous threshold when that is
   looser) and every threshold at which one of these games' would-be resignations changes,
   below 1. At each, `checked` counts the games in which a side would have resigned and
   `wrong` those the would-be resigner did not lose (a draw is no loss).
2. **calibrated**: the least strict candidate (the smallest t) with at least `min_checked`
   would-be resignations (default ceil(1 / target): the fewest at which a single wrong one is
   within the target) and wrong / checked <= target.
3. Else **stricter**: when the previous threshold's own share among these games exceeds the
   target, halfway from it to 1 (0.9 -> 0.95 -> 0.975: each step halves the margin of a
   certain loss) -- too few resignations to certify a threshold, enough to show this one
   resigns too readily.
4. Else **kept**: the previous threshold (too few would-be resignations to say anything).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from services.games.base import BLACK, WHITE

RESIGN_FLOOR = 0.5  # the loosest threshold calibration goes to: resign at a 25% win chance
RULES = ("calibrated", "stricter", "kept")


def _other(colour: int) -> int:
    return WHITE if colour == BLACK else BLACK


def mover_of_ply(ply: int) -> int:
    """The side that makes move `ply` (0 the first stone): black first, then in turn."""
    return BLACK if ply % 2 == 0 else WHITE


@dataclass(frozen=True)
class _Game:
    """One played-out game as a step function of the threshold: `levels[k]` the threshold
    below which resignation `k` happens (increasing), `wrong[k]` whether it was wrong."""

    levels: tuple[float, ...]
    wrong: tuple[bool, ...]

    def at(self, threshold: float) -> bool | None:
        """None: no resignation at `threshold`; else whether the first one was wrong."""
        k = bisect.bisect_right(self.levels, threshold)
        return None if k == len(self.levels) else self.wrong[k]


def _as_steps(game: dict, after: int) -> _Game:
    """The game's would-be resignations over every threshold: at move i its mover's last
    `after` values have the level -max(them); the first move whose level exceeds t is the
    resignation at t, so only the running records of the level matter."""
    try:
        start, winner = len(game["opening"]), int(game["winner"])
        values = [float(m["value"]) for m in game["moves"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a self-play game dict: {type(exc).__name__} {exc}") from exc
    recent: dict[int, deque[float]] = {BLACK: deque(maxlen=after), WHITE: deque(maxlen=after)}
    levels: list[float] = []
    wrong: list[bool] = []
    for i, value in enumerate(values):
        mover = mover_of_ply(start + i)
        recent[mover].append(value)
        if len(recent[mover]) < after:
            continue
        level = -max(recent[mover])
        if not levels or level > levels[-1]:
            levels.append(level)
            wrong.append(winner != _other(mover))
    return _Game(tuple(levels), tuple(wrong))


def would_resign(game: dict, threshold: float, after: int) -> tuple[int, int] | None:
    """(ply, colour) of the first resignation `game` would make at `threshold` (resign below
    -threshold for `after` of one's moves), as `play_game` records it; None if none."""
    recent: dict[int, int] = {BLACK: 0, WHITE: 0}
    start = len(game["opening"])
    for i, move in enumerate(game["moves"]):
        mover = mover_of_ply(start + i)
        recent[mover] = recent[mover] + 1 if float(move["value"]) < -threshold else 0
        if recent[mover] >= after:
            return start + i, mover
    return None


@dataclass(frozen=True)
class ResignCheck:
    """The played-out games at one threshold: would-be resignations and wrong ones."""

    threshold: float
    checked: int
    wrong: int

    @property
    def rate(self) -> float | None:
        return self.wrong / self.checked if self.checked else None


def _check(steps: Sequence[_Game], threshold: float) -> ResignCheck:
    outcomes = [g.at(threshold) for g in steps]
    return ResignCheck(threshold, sum(o is not None for o in outcomes),
                       sum(o is True for o in outcomes))


def played_out(games: Iterable[dict]) -> list[dict]:
    """The games played out regardless of resignation (the only ones that can check one)."""
    return [g for g in games if g.get("no_resign")]


def resign_check(games: Iterable[dict], threshold: float, after: int) -> ResignCheck:
    """Would-be resignations and wrong ones among the played-out `games` at `threshold`."""
    return _check([_as_steps(g, after) for g in played_out(games)], threshold)


@dataclass(frozen=True)
class Calibration:
    """A calibrated threshold and how it was chosen (`rule`: one of `RULES`); `checked`,
    `wrong` the played-out games' figures at `threshold`, `previous_*` at `previous`."""

    threshold: float
    rule: str
    target: float
    min_checked: int
    games: int  # played-out games the figures come from
    checked: int
    wrong: int
    previous: float
    previous_checked: int
    previous_wrong: int

    def to_dict(self) -> dict:
        return asdict(self)


def min_checked_for(target: float) -> int:
    """The fewest would-be resignations an estimate needs: one wrong one within `target`."""
    return math.ceil(1 / target - 1e-9)


def calibrate(games: Iterable[dict], *, target: float, after: int, previous: float,
              min_checked: int | None = None, floor: float = RESIGN_FLOOR) -> Calibration:
    """The resign threshold for the next games from `games` (the newest iterations' game
    dicts; only the played-out ones count), by the module's rule: the least strict one whose
    share of wrong would-be resignations is at most `target` over at least `min_checked` of
    them (default `min_checked_for(target)`), else stricter than `previous` when `previous`
    was wrong too often, else `previous`."""
    if not 0 < target < 1:
        raise ValueError(f"the resign false-positive target must be in (0, 1), got {target}")
    if not 0 < previous <= 1 or after < 1:
        raise ValueError(f"need 0 < previous <= 1 and after >= 1, got {previous}, {after}")
    need = min_checked_for(target) if min_checked is None else min_checked
    if need < 1:
        raise ValueError(f"min_checked must be >= 1, got {need}")
    steps = [_as_steps(g, after) for g in played_out(games)]
    low = min(floor, previous)
    candidates = sorted({low, *(x for g in steps for x in g.levels if low < x < 1)})
    before = _check(steps, previous)

    def result(check: ResignCheck, rule: str) -> Calibration:
        return Calibration(check.threshold, rule, target, need, len(steps), check.checked,
                           check.wrong, previous, before.checked, before.wrong)

    for threshold in candidates:
        check = _check(steps, threshold)
        if check.checked >= need and check.wrong / check.checked <= target:
            return result(check, "calibrated")
    if before.checked and before.wrong / before.checked > target:
        return result(_check(steps, (1 + previous) / 2), "stricter")
    return result(before, "kept")


__all__ = ["RESIGN_FLOOR", "RULES", "Calibration", "ResignCheck", "calibrate",
           "min_checked_for", "mover_of_ply", "played_out", "resign_check", "would_resign"]
