"""Numbers as game records (SGF) and the text protocols (GTP, Gomocup) write them: ASCII
digits only.

Python's `int` and `float` read more than any GUI or tournament manager sends: other scripts'
digits ("１９", "٣"), digit separators ("1_0"), "nan", "inf" and surrounding blanks; and
`str.isdigit` is true for "²", which `int` then refuses. A front-end reading those would answer
an argument nobody wrote, or fail with an internal error instead of a syntax error (and
`int(float("inf"))` raises OverflowError, not ValueError). These readers take only the plain
forms and return None for anything else, so each caller says what is wrong in its own words.
"""

from __future__ import annotations

import math
import re

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_DIGITS = 18  # longer numbers are no count, size or time any protocol sends


def ascii_int(text: str) -> int | None:
    """`text` as an integer written in ASCII digits with an optional sign, else None."""
    if len(text) > MAX_DIGITS + 1 or not _INTEGER.fullmatch(text):
        return None
    return int(text)


def ascii_decimal(text: str) -> float | None:
    """`text` as a finite decimal number written in ASCII ("6.5", "-0.5", "300", "1e3"), else
    None."""
    if len(text) > 2 * MAX_DIGITS or not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None  # "1e999" overflows to inf
