"""The GTP clock: ``time_settings`` and ``time_left`` turned into the time budget of a genmove.

GTP 2 (https://www.lysator.liu.se/~gunnar/gtp/gtp2-spec-draft2/gtp2-spec.html, 4.2 and 6.3.4):
``time_settings main_time byo_yomi_time byo_yomi_stones`` in seconds (Canadian byo-yomi:
byo_yomi_stones moves in byo_yomi_time); byo_yomi_time 0 means absolute time (no byo-yomi),
byo_yomi_time > 0 with byo_yomi_stones 0 means no time limit. ``time_left COLOR time stones``:
the time left for COLOR, stones 0 while in main time, else the stones left to play in the
current byo-yomi period.

The budget of one move, in this order:
* no time_settings, or no time limit: None (the engine searches its visit budget);
* in byo-yomi (time_left with stones > 0, or main time 0): the period's time over its stones;
* in main time: the time left over the moves still to come, estimated as a quarter of the empty
  points but at least MIN_MOVES_LEFT; with byo-yomi to follow, never less than a byo-yomi move's
  share (the period's time over its stones), as that time is there anyway.
Without time_left the clock counts down the main time itself, by the wall time each genmove
took. The search gets the budget minus a reserve (RESERVE_FRACTION of it plus RESERVE_MS) for
the round trip and the search's last batch overrunning, within the service's limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.numerals import ascii_decimal, ascii_int

MIN_MOVES_LEFT = 10
RESERVE_FRACTION = 0.1
RESERVE_MS = 200
MIN_SEARCH_MS = 50
MAX_SEARCH_MS = 60_000  # the search service's limit


class ClockError(ValueError):
    """Arguments a time command cannot take."""


def _number(text: str, what: str) -> float:
    value = ascii_decimal(text)
    if value is None:
        raise ClockError(f"syntax error: {what} must be a number, got {text!r}")
    if value < 0:
        raise ClockError(f"syntax error: {what} must be >= 0, got {text}")
    return value


def _count(text: str, what: str) -> int:
    value = ascii_int(text)
    if value is None or value < 0:
        raise ClockError(f"syntax error: {what} must be an integer >= 0, got {text!r}")
    return value


@dataclass
class GtpClock:
    """The time settings and what is left of them per colour (1 black, 2 white)."""

    main_s: float | None = None  # None: no time_settings yet
    byo_s: float = 0.0
    byo_stones: int = 0
    left: dict[int, tuple[float, int]] = field(default_factory=dict)  # colour: (s, stones)

    @property
    def limited(self) -> bool:
        return self.main_s is not None and not (self.byo_s > 0 and self.byo_stones == 0)

    def settings(self, args: list[str]) -> None:
        if len(args) != 3:
            raise ClockError("syntax error: time_settings takes main_time byo_yomi_time "
                             "byo_yomi_stones")
        main = _number(args[0], "main_time")
        byo = _number(args[1], "byo_yomi_time")
        stones = _count(args[2], "byo_yomi_stones")
        self.main_s, self.byo_s, self.byo_stones = main, byo, stones
        self.left = {}

    def time_left(self, color: int, args: list[str]) -> None:
        if len(args) != 2:
            raise ClockError("syntax error: time_left takes a colour, a time and stones")
        self.left[color] = (_number(args[0], "time"), _count(args[1], "stones"))

    def spent(self, color: int, seconds: float) -> None:
        """A genmove of `color` took `seconds`: count them off main time it tracks itself."""
        if not self.limited:
            return
        time_s, stones = self.left.get(color, (self.main_s or 0.0, 0))
        if stones == 0 and time_s > 0:
            self.left[color] = (max(0.0, time_s - seconds), 0)

    def budget_s(self, color: int, empty_points: int) -> float | None:
        """Seconds to spend on `color`'s next move (None: no time limit)."""
        if not self.limited:
            return None
        time_s, stones = self.left.get(color, (self.main_s or 0.0, 0))
        byo_share = self.byo_s / self.byo_stones if self.byo_stones else 0.0
        if stones > 0:  # in a byo-yomi period
            return time_s / stones
        if time_s <= 0:  # main time over: the next period starts
            return byo_share
        moves_left = max(MIN_MOVES_LEFT, empty_points // 4)
        return max(time_s / moves_left, byo_share)

    def search_ms(self, color: int, empty_points: int) -> int | None:
        """The GenMove request's max_time_ms (None: no time limit, search by visits)."""
        budget = self.budget_s(color, empty_points)
        if budget is None:
            return None
        ms = budget * 1000 * (1 - RESERVE_FRACTION) - RESERVE_MS
        return int(max(MIN_SEARCH_MS, min(MAX_SEARCH_MS, ms)))
