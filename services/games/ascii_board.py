"""ASCII boards for test fixtures and debugging, shared by Gomoku and Go (as in minigo's tests).

Rows are written top first, so the text looks like the board; row 0 of the array is the
bottom (y from the bottom, the repository's convention).
"""

from __future__ import annotations

import numpy as np

EMPTY, BLACK, WHITE = 0, 1, 2
_CELLS = {".": EMPTY, "+": EMPTY, "X": BLACK, "O": WHITE}


def board_from_ascii(text: str) -> np.ndarray:
    """'X' black, 'O' white, '.' or '+' empty; cells may be space-separated; blank lines
    are skipped. Returns int8 [size, size] indexed [y, x] with y from the bottom."""
    rows = [r.split() if " " in r.strip() else list(r.strip())
            for r in text.strip().splitlines() if r.strip()]
    size = len(rows)
    board = np.zeros((size, size), dtype=np.int8)
    for i, row in enumerate(rows):
        if len(row) != size:
            raise ValueError(f"row {i} has {len(row)} cells, expected {size}")
        for x, c in enumerate(row):
            board[size - 1 - i, x] = _CELLS[c.upper()]
    return board
