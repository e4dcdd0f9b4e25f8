"""Gomoku's rules as the compiled search tree's kernels (`services.games.search_kernels`).

The same answers as `GomokuState.play` and `GomokuGame.expand` (freestyle, standard, renju):
a five made is terminal (+1 to its maker), no legal point left is a draw, a side that can make
five searches only its winning points (a proven win), a side facing a four only its legal
blocks, otherwise every legal point; under renju black's legal points leave out its forbidden
ones (`renju_compiled`). tests/test_compiled_search.py plays both on the same positions.

A node: `cells` the flat board (int8 [S*S]); `aux` [to_move, winner]; `iparams` [size, rule]
(`RULE_CODES`).
"""

from __future__ import annotations

import numpy as np

from services.compiled import kernel
from services.games import search_kernels
from services.games.gomoku import renju, renju_compiled
from services.games.gomoku.rules import BLACK, EMPTY, WHITE, GomokuState, Rule
from services.games.search_kernels import (
    KIND_OPEN,
    KIND_PROVEN,
    KIND_TERMINAL,
    SearchKernels,
    SearchPosition,
    encode_board,
    source_version,
)

FREESTYLE, STANDARD, RENJU = 0, 1, 2
RULE_CODES = {Rule.FREESTYLE: FREESTYLE, Rule.STANDARD: STANDARD, Rule.RENJU: RENJU}
TO_MOVE, WINNER = 0, 1  # aux columns


@kernel
def _run(board: np.ndarray, size: int, x: int, y: int, color: int, dx: int, dy: int) -> int:
    """Length of the run of `color` through (x, y) along (dx, dy), (x, y) itself counted."""
    n = 1
    for sign in (1, -1):
        cx = x + sign * dx
        cy = y + sign * dy
        while 0 <= cx < size and 0 <= cy < size and board[cy * size + cx] == color:
            n += 1
            cx += sign * dx
            cy += sign * dy
    return n


@kernel
def five_through(board: np.ndarray, size: int, p: int, color: int, exact: bool) -> bool:
    """Whether a stone of `color` at p (placed or hypothetical) stands in a line of five:
    exactly five when `exact`, else five or more (the search's rules and the rollouts'
    alike)."""
    y, x = divmod(p, size)
    for d in range(4):
        dx = 0 if d == 1 else 1
        dy = 0 if d == 0 else (-1 if d == 3 else 1)
        n = _run(board, size, x, y, color, dx, dy)
        if n == 5 or (n > 5 and not exact):
            return True
    return False


@kernel
def makes_five(board: np.ndarray, size: int, p: int, color: int, rule: int) -> bool:
    """`rules.makes_five`: a stone of `color` at p (placed or hypothetical) wins."""
    return five_through(board, size, p, color,
                        rule == STANDARD or (rule == RENJU and color == BLACK))


@kernel
def _touches(board: np.ndarray, size: int, p: int, color: int) -> bool:
    """Whether a stone of `color` is next to p (8 neighbours): no five through p otherwise."""
    y, x = divmod(p, size)
    for yy in range(max(y - 1, 0), min(y + 2, size)):
        for xx in range(max(x - 1, 0), min(x + 2, size)):
            if board[yy * size + xx] == color:
                return True
    return False


@kernel
def play(cells: np.ndarray, aux: np.ndarray, move: int, out_cells: np.ndarray,
         out_aux: np.ndarray, iparams: np.ndarray, fparams: np.ndarray) -> None:
    """`GomokuState.play` of a legal move."""
    size = iparams[0]
    color = aux[TO_MOVE]
    out_cells[:] = cells
    out_cells[move] = color
    out_aux[TO_MOVE] = WHITE if color == BLACK else BLACK
    out_aux[WINNER] = color if makes_five(out_cells, size, move, color, iparams[1]) else EMPTY


@kernel
def classify(cells: np.ndarray, aux: np.ndarray, iparams: np.ndarray, fparams: np.ndarray,
             legal: np.ndarray, candidates: np.ndarray) -> tuple[int, int, float]:
    """`GomokuGame.expand` (see the module docstring)."""
    if aux[WINNER] != EMPTY:
        return KIND_TERMINAL, 0, 1.0
    size, rule = iparams[0], iparams[1]
    n = size * size
    me = aux[TO_MOVE]
    other = WHITE if me == BLACK else BLACK
    n_legal = 0
    for p in range(n):
        legal[p] = cells[p] == EMPTY
    if rule == RENJU and me == BLACK:
        reasons = np.empty(n, np.int8)
        if renju_compiled.forbidden_reasons(cells, size, reasons):
            for p in range(n):
                if reasons[p] != renju_compiled.NONE:
                    legal[p] = False
    for p in range(n):
        if legal[p]:
            n_legal += 1
    if n_legal == 0:
        return KIND_TERMINAL, 0, 0.0
    wins = 0
    for p in range(n):
        if legal[p] and _touches(cells, size, p, me) and makes_five(cells, size, p, me, rule):
            candidates[wins] = p
            wins += 1
    if wins:
        return KIND_PROVEN, wins, -1.0
    blocks = 0
    for p in range(n):
        if (legal[p] and _touches(cells, size, p, other)
                and makes_five(cells, size, p, other, rule)):
            candidates[blocks] = p
            blocks += 1
    if blocks:
        return KIND_OPEN, blocks, 0.0
    k = 0
    for p in range(n):
        if legal[p]:
            candidates[k] = p
            k += 1
    return KIND_OPEN, k, 0.0


KERNELS = SearchKernels("gomoku", source_version(__file__, renju.__file__,
                                                 renju_compiled.__file__,
                                                 search_kernels.__file__),
                        play, classify, encode_board)


def position(state: GomokuState) -> SearchPosition:
    """A Gomoku position as the compiled tree holds it."""
    return SearchPosition(
        cells=state.board.reshape(-1).astype(np.int8),
        aux=np.array([state.to_move, state.winner], np.int64),
        iparams=np.array([state.size, RULE_CODES[Rule(state.rule)]], np.int64),
        fparams=np.zeros(1),
    )
