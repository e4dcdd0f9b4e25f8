"""Board coordinates of the movepred API, as the service names points.

A point is (x, y): x the column from the left (0 = 'a'), y the row from the *bottom*
(0 = row 1); a flat index is ``y * size + x``, and a Go pass is the index ``size * size``
(a Go policy's last entry). The names:

==================  ============  ====================================================
system              example       functions
==================  ============  ====================================================
RenjuNet name       "h8"          letters a.. from the left, row number from the bottom
(Gomoku)                          (`point_name`, `index_name`, `parse_point`)
GTP vertex (Go)     "Q16", "pass" letters A..Z without I, row from the bottom
                                  (`gtp_name`, `gtp_vertex`, `parse_gtp_vertex`)
==================  ============  ====================================================

So on 19x19 the point (x, y) = (15, 3) is index 72, "p4" and GTP "Q4"; on 15x15 "h8" is the
centre, (7, 7). These are the platform's own rules (its ``services/coords.py``), kept here so
the client needs nothing of the platform; the test suite compares the two name by name.
"""

from __future__ import annotations

LETTERS = "abcdefghijklmnopqrs"  # RenjuNet uses a-o on 15x15; Go's 19x19 fits too
GTP_LETTERS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"  # no I, as in GTP; 25 letters covers 25x25
SHOWN_CHARS = 24  # the most of a caller's text an error message quotes


class CoordinateError(ValueError):
    """A coordinate name that does not denote a point on the board."""


class VertexError(CoordinateError):
    """A GTP vertex that does not denote a point (or a pass) on the board."""


def _shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` quoted for an error message, cut short: a caller's megabyte of text would
    otherwise be echoed whole."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} chars)"


# ---- RenjuNet names ------------------------------------------------------------------------
def point_name(x: int, y: int) -> str:
    """(7, 7) -> "h8"."""
    return f"{LETTERS[x]}{y + 1}"


def index_name(index: int, size: int) -> str:
    """Flat index -> RenjuNet name (112 -> "h8" on 15x15)."""
    return point_name(index % size, index // size)


def _ascii_token(text: str) -> str | None:
    """`text` stripped, or None when it holds anything but ASCII: `int` reads other scripts'
    digits and case mapping turns some other letters into ASCII ones (the Kelvin sign lowers
    to 'k'), which would make names no other program reads stand for points."""
    token = text.strip()
    return token if token.isascii() else None


def _column_and_row(token: str, letters: str, size: int) -> tuple[int, int] | None:
    """(x, y) of a column letter from `letters[:size]` followed by a row number 1..size in an
    ASCII `token`, or None."""
    if not 2 <= len(token) <= 3 or token[0] not in letters[:size] or not token[1:].isdigit():
        return None
    row = int(token[1:])
    return (letters.index(token[0]), row - 1) if 1 <= row <= size else None


def parse_point(name: str, size: int = 15) -> tuple[int, int]:
    """"h8" -> (x, y) = (7, 7); CoordinateError for anything off the board."""
    token = _ascii_token(name)
    point = None if token is None else _column_and_row(token.lower(), LETTERS, size)
    if point is None:
        raise CoordinateError(f"unknown coordinate {_shown(name)} on a {size}x{size} board")
    return point


# ---- GTP vertices --------------------------------------------------------------------------
def gtp_name(point: int | None, size: int) -> str:
    """GTP vertex of a flat point: column letter (no I) and row number from the bottom;
    None is "pass"."""
    if point is None:
        return "pass"
    y, x = divmod(point, size)
    return f"{GTP_LETTERS[x]}{y + 1}"


def gtp_vertex(move: int | None, size: int = 19) -> str:
    """Like `gtp_name`, with the pass also as the policy index ``size * size``."""
    return gtp_name(None if move == size * size else move, size)


def parse_gtp_vertex(text: str, size: int = 19) -> int | None:
    """GTP vertex ("D4", "q16", "pass") -> flat point y * size + x, or None for a pass;
    VertexError for anything else."""
    token = _ascii_token(text)
    if token is None:
        raise VertexError(f"not a vertex on a {size}x{size} board: {_shown(text)}")
    token = token.upper()
    if token == "PASS":
        return None
    point = _column_and_row(token, GTP_LETTERS, size)
    if point is None:
        raise VertexError(f"not a vertex on a {size}x{size} board: {_shown(text)}")
    x, y = point
    return y * size + x
