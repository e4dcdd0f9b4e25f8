"""Every coordinate system of the platform, in one place.

A point is the flat index ``y * size + x`` everywhere: x the column from the left (0 = 'a'),
y the row from the *bottom* (0 = row 1); board arrays are indexed ``board[y, x]``. A pass, in
games that have one, is the index ``size * size`` (the policy's last entry). The notations:

==================  ============  ====================================================
system              example       conversion
==================  ============  ====================================================
flat index          112           ``y * size + x`` (15x15: h8 is 7 * 15 + 7)
(x, y)              (7, 7)        ``divmod(index, size)`` gives (y, x)
RenjuNet name       "h8"          letters a.. from the left, row number from the bottom
                                  (`point_name`, `index_name`, `parse_point`)
GTP vertex          "Q16", "pass" letters A..Z without I, row from the bottom
                                  (`gtp_name`, `gtp_vertex`, `parse_gtp_vertex`)
SGF letters         "pd"          column and row letters a.., the row from the *top*
                                  (`sgf_name`, `sgf_point`); "" (or "tt" on 19x19 in old
                                  records) is a pass
==================  ============  ====================================================

So on 19x19 the same point is index 72, (x, y) = (15, 3), RenjuNet "p4", GTP "Q4", SGF "pp".

A bottom utility (it imports only `services.quoting`): the record codecs (services.records)
and the games (services.games) both name points, and the codecs may import no game.
"""

from __future__ import annotations

from services.quoting import shown

LETTERS = "abcdefghijklmnopqrs"  # RenjuNet uses a-o on 15x15; Go's 19x19 fits too
GTP_LETTERS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"  # no I, as in GTP; 25 letters covers 25x25
SGF_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class CoordinateError(ValueError):
    """A coordinate name that does not denote a point on the board."""


class VertexError(CoordinateError):
    """A GTP vertex that does not denote a point (or a pass) on the board."""


# ---- RenjuNet names ------------------------------------------------------------------------
def point_name(x: int, y: int) -> str:
    return f"{LETTERS[x]}{y + 1}"


def index_name(index: int, size: int) -> str:
    return point_name(index % size, index // size)


def _ascii_token(text: str) -> str | None:
    """`text` stripped, or None when it holds anything but ASCII. Checked before any case
    mapping: `str.isdigit` and `int` also read other scripts' digits ('h\uff18', a fullwidth
    8) and case mapping turns other letters into ASCII ones (the Kelvin sign lowers to 'k',
    the long s uppers to 'S'), which would make names no other program reads stand for
    points."""
    token = text.strip()
    return token if token.isascii() else None


def _column_and_row(token: str, letters: str, size: int) -> tuple[int, int] | None:
    """(x, y) of a column letter from `letters[:size]` followed by a row number 1..size in an
    ASCII `token`, or None."""
    if not 2 <= len(token) <= 3 or token[0] not in letters[:size] or not token[1:].isdigit():
        return None  # a row is one or two digits (int() of 5,000 raises a bare ValueError)
    row = int(token[1:])
    return (letters.index(token[0]), row - 1) if 1 <= row <= size else None


def parse_point(name: str, size: int) -> tuple[int, int]:
    """Parse 'h8' into (x, y); raises CoordinateError for anything off the board."""
    token = _ascii_token(name)
    point = None if token is None else _column_and_row(token.lower(), LETTERS, size)
    if point is None:
        raise CoordinateError(f"unknown coordinate {shown(name)} on a {size}x{size} board")
    return point


# ---- GTP vertices --------------------------------------------------------------------------
def gtp_name(point: int | None, size: int) -> str:
    """GTP vertex of a flat point: column letter (no I) and row number from the bottom;
    None is "pass"."""
    if point is None:
        return "pass"
    y, x = divmod(point, size)
    return f"{GTP_LETTERS[x]}{y + 1}"


def gtp_vertex(move: int | None, size: int) -> str:
    """Like `gtp_name`, with the pass also as the policy index ``size * size``."""
    return gtp_name(None if move == size * size else move, size)


def parse_gtp_vertex(text: str, size: int) -> int | None:
    """GTP vertex ("D4", "q16", "pass") -> flat point y * size + x, or None for a pass;
    VertexError for anything else."""
    token = _ascii_token(text)
    if token is None:
        raise VertexError(f"not a vertex on a {size}x{size} board: {shown(text)}")
    token = token.upper()
    if token == "PASS":
        return None
    point = _column_and_row(token, GTP_LETTERS, size)
    if point is None:
        raise VertexError(f"not a vertex on a {size}x{size} board: {shown(text)}")
    x, y = point
    return y * size + x


# ---- SGF letters ---------------------------------------------------------------------------
def sgf_point(col: int, row_from_top: int, size: int) -> int:
    """Flat index of the SGF point (col, row counted from the top)."""
    return (size - 1 - row_from_top) * size + col


def sgf_name(point: int | None, size: int) -> str:
    """The two SGF letters of a point ('' for a pass)."""
    if point is None:
        return ""
    y, x = divmod(point, size)
    return SGF_LETTERS[x] + SGF_LETTERS[size - 1 - y]
