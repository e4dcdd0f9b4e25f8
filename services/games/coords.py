"""RenjuNet-style coordinate names: column letter from the left, row number from the bottom.

Point index convention used everywhere: index = y * size + x, with x the column (0 = 'a')
and y the row from the bottom (0 = '1'). Board arrays are indexed board[y, x].
"""

from __future__ import annotations

LETTERS = "abcdefghijklmnopqrs"  # RenjuNet uses a-o on 15x15; Go's 19x19 fits too


class CoordinateError(ValueError):
    """A coordinate name that does not denote a point on the board."""


def point_name(x: int, y: int) -> str:
    return f"{LETTERS[x]}{y + 1}"


def index_name(index: int, size: int) -> str:
    return point_name(index % size, index // size)


def parse_point(name: str, size: int) -> tuple[int, int]:
    """Parse 'h8' into (x, y); raises CoordinateError for anything off the board."""
    token = name.strip().lower()
    if len(token) < 2 or token[0] not in LETTERS[:size] or not token[1:].isdigit():
        raise CoordinateError(f"unknown coordinate {name!r} on a {size}x{size} board")
    row = int(token[1:])
    if not 1 <= row <= size:
        raise CoordinateError(f"unknown coordinate {name!r} on a {size}x{size} board")
    return LETTERS.index(token[0]), row - 1
