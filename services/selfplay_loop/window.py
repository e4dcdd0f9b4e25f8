"""The replay window: how many of the newest self-play rows an iteration trains on.

Why a window that grows sub-linearly (KataGo's rule, its ``shuffle.py``): the oldest games were
played by much weaker networks and their targets mislead the newest; a fixed window forgets
too fast early, when every row is precious, and the whole history never forgets. KataGo keeps

    window(N) = MIN + EXPAND * (N^EXP - MIN^EXP) / (EXP * MIN^(EXP - 1))

rows of the N rows made so far (all of them while N <= MIN), with EXPAND 0.4 and EXP 0.65: the
window grows as N^0.65 with slope EXPAND at N = MIN. KataGo's MIN is 250,000 rows; ours
defaults to 10,000 (`DEFAULT_MIN_ROWS`), a few iterations of a small loop, so the first
iterations train on everything and the window tapers once the loop has made some data.

The window is taken in whole iterations, newest first, until it holds at least window(N) rows
(`window_iterations`): an iteration's self-play folder is one ingest source, never split.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_MIN_ROWS = 10_000
DEFAULT_EXPAND = 0.4  # KataGo's expand_window_per_row
DEFAULT_EXPONENT = 0.65  # KataGo's taper_window_exponent


def window_rows(total: int, min_rows: int = DEFAULT_MIN_ROWS, expand: float = DEFAULT_EXPAND,
                exponent: float = DEFAULT_EXPONENT) -> int:
    """Rows of the newest data to train on when `total` rows were made (at most `total`)."""
    if total < 0 or min_rows < 1 or expand < 0 or not 0 < exponent <= 1:
        raise ValueError(f"bad window: {total=} {min_rows=} {expand=} {exponent=}")
    if total <= min_rows:
        return total
    grown = min_rows + expand * (total ** exponent - min_rows ** exponent) / (
        exponent * min_rows ** (exponent - 1))
    return min(total, int(grown))


def window_iterations(rows: Sequence[int], min_rows: int = DEFAULT_MIN_ROWS,
                      expand: float = DEFAULT_EXPAND,
                      exponent: float = DEFAULT_EXPONENT) -> tuple[int, int]:
    """(first iteration, window rows) for iterations 0..len(rows)-1 that made `rows[i]` rows:
    the newest iterations whose rows reach window(sum(rows)), the newest always included."""
    want = window_rows(sum(rows), min_rows, expand, exponent)
    held, first = 0, len(rows)
    while first > 0 and (held < want or first == len(rows)):
        first -= 1
        held += rows[first]
    return first, want


__all__ = ["DEFAULT_EXPAND", "DEFAULT_EXPONENT", "DEFAULT_MIN_ROWS", "window_iterations",
           "window_rows"]
