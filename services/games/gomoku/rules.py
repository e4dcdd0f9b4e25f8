"""Gomoku rules on a square board (15x15 by default).

Cells hold EMPTY / BLACK / WHITE as int8. Black moves first. `Rule.FREESTYLE` wins with five
or more in a row, `Rule.STANDARD` with exactly five. `Rule.RENJU` scores an overline as no win
for black (five or more wins for white) and forbids black the points where it would make an
overline, a double-four or a double-three (`services.games.gomoku.renju`), unless the move
makes exactly five.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from services.coords import index_name
from services.games.ascii_board import board_from_ascii  # noqa: F401 (re-exported)
from services.games.base import Game
from services.games.gomoku import renju
from services.games.registry import get_game

EMPTY, BLACK, WHITE = 0, 1, 2
DEFAULT_SIZE = 15
MIN_SIZE, MAX_SIZE = 5, 19
DIRECTIONS = ((1, 0), (0, 1), (1, 1), (1, -1))


@functools.cache
def five_windows(size: int) -> np.ndarray:
    """Flat indices of every 5-in-a-row window on a size x size board, shape [n, 5]: the
    vectorised checks (a five on the board, four stones and a gap) gather cells through it."""
    rows = []
    for dx, dy in DIRECTIONS:
        for y in range(size):
            for x in range(size):
                if 0 <= x + 4 * dx < size and 0 <= y + 4 * dy < size:
                    rows.append([(y + k * dy) * size + x + k * dx for k in range(5)])
    return np.array(rows, dtype=np.intp)


# Cell codes whose sum over a 5-cell window says what the window holds: five stones of one
# colour (5 black, 30 white), or four of one colour and an empty cell (4 black, 24 white); no
# other mix of five cells sums to these.
WINDOW_CODES = np.array([0, 1, 6], dtype=np.int16)  # EMPTY, BLACK, WHITE
FIVE_SUM = {BLACK: 5, WHITE: 30}
FOUR_SUM = {BLACK: 4, WHITE: 24}


@functools.cache
def _five_windows_by_cell(size: int) -> np.ndarray:
    """`five_windows(size)` transposed, [5, n] contiguous: summing over its first axis is
    vectorised across windows (about 2.5x faster than over the last axis of [n, 5])."""
    return np.ascontiguousarray(five_windows(size).T)


def window_sums(board: np.ndarray) -> np.ndarray:
    """`WINDOW_CODES` summed over each window of `five_windows` of a square int8 board."""
    return WINDOW_CODES[board.reshape(-1)][_five_windows_by_cell(board.shape[-1])].sum(axis=0)


def has_five(board: np.ndarray) -> bool:
    """Whether either colour has five (or more) in a row anywhere on `board`."""
    sums = window_sums(board)
    return bool(((sums == FIVE_SUM[BLACK]) | (sums == FIVE_SUM[WHITE])).any())


class Rule(StrEnum):
    FREESTYLE = "freestyle"
    STANDARD = "standard"
    RENJU = "renju"


# Gomoku rules, under which black has no forbidden points, by their names in a RenjuNet
# record (lower case, letters and digits only): names holding one of _GOMOKU_WORDS, and the
# opening rules of Gomoku named without it. Every other rule of a RenjuNet export (RIF,
# Yamaguchi, Taraguchi, Soosorv, Sakata, Tarannikov, ...) is a renju opening rule: renju
# rules from move 1.
_GOMOKU_WORDS = ("gomoku", "freestyle", "caro")
_GOMOKU_OPENINGS = frozenset({"pro", "longpro", "swap", "swap2", "chineseswap", "standard"})


@functools.cache
def game_rule(name: str) -> Rule:
    """The rules a game of a .rif file is replayed under, from its rule's name (`RifGame.rule`
    of services.records.rif, which keeps the name as the file has it).

    A Gomoku rule (freestyle, Gomoku, Swap2, Pro, ...) is `Rule.FREESTYLE`, or
    `Rule.STANDARD` when its name says standard (exactly five wins); anything else, a rule
    missing or named by a bare id included, is `Rule.RENJU`: a .rif file is a RenjuNet export,
    a renju database, and reading a Gomoku game as renju can only end it early at a forbidden
    point, while reading a renju game as Gomoku would teach its forbidden moves.
    """
    key = "".join(c for c in name.lower() if c.isalnum())
    if "renju" in key or not (key in _GOMOKU_OPENINGS
                              or any(word in key for word in _GOMOKU_WORDS)):
        return Rule.RENJU
    return Rule.STANDARD if "standard" in key else Rule.FREESTYLE


class IllegalMove(ValueError):
    """A move that the rules do not allow; the message says why."""


# A renju game replayed into training pairs ends before a forbidden black move (the player lost
# by it; records keep it): the game's note in the quarantine table starts with this, and the
# ingest counts such games under CUT_NOTE.
FORBIDDEN_CUT = "cut at a forbidden move: "
CUT_NOTE = "cut_at_forbidden"


class ForbiddenMove(IllegalMove):
    """A black move on a renju forbidden point. Apart from other illegal moves because a
    record may hold one (a player who lost by it): the game is valid up to that move."""

    def __init__(self, point: int, size: int, reason: str) -> None:
        self.point = point
        self.reason = reason  # renju.OVERLINE, DOUBLE_FOUR or DOUBLE_THREE
        super().__init__(f"move {index_name(point, size)} is forbidden for black ({reason})")


GAME_NAME = "gomoku"  # the name services.games.gomoku.game registers these rules' Game under


@functools.cache
def _gomoku_game() -> Game:
    """The registered Gomoku `Game`. Looked up, not imported: the Game (services.games
    .gomoku_game) is built on these rules, and the registry imports it on first lookup."""
    return get_game(GAME_NAME)


def opponent(color: int) -> int:
    return WHITE if color == BLACK else BLACK


def line_length(board: np.ndarray, x: int, y: int, color: int, dx: int, dy: int) -> int:
    """Length of the run of `color` through (x, y) along (dx, dy), counting (x, y) itself."""
    cells = np.asarray(board, dtype=np.int8).tobytes()  # row-major; an item is a plain int
    return _run_length(cells, board.shape[0], x, y, color, dx, dy)


def _run_length(cells: bytes, size: int, x: int, y: int, color: int, dx: int, dy: int) -> int:
    """`line_length` on the board's bytes (taken once for the four directions of a move)."""
    n = 1
    for sign in (1, -1):
        cx, cy = x + sign * dx, y + sign * dy
        while 0 <= cx < size and 0 <= cy < size and cells[cy * size + cx] == color:
            n += 1
            cx += sign * dx
            cy += sign * dy
    return n


def makes_five(board: np.ndarray, x: int, y: int, color: int, rule: Rule) -> bool:
    """Whether a stone of `color` at (x, y) (placed or hypothetical) completes a winning line."""
    exact = rule is Rule.STANDARD or (rule is Rule.RENJU and color == BLACK)
    cells = np.asarray(board, dtype=np.int8).tobytes()
    size = board.shape[0]
    for dx, dy in DIRECTIONS:
        n = _run_length(cells, size, x, y, color, dx, dy)
        if n == 5 or (n > 5 and not exact):
            return True
    return False


@dataclass
class GomokuState:
    """A Gomoku position with its history; `play` returns a new state."""

    size: int = DEFAULT_SIZE
    rule: Rule = Rule.FREESTYLE
    board: np.ndarray = field(default=None)  # type: ignore[assignment]
    moves: tuple[int, ...] = ()
    winner: int = EMPTY  # BLACK or WHITE once somebody has made five

    def __post_init__(self) -> None:
        if not MIN_SIZE <= self.size <= MAX_SIZE:
            raise ValueError(
                f"board_size must be between {MIN_SIZE} and {MAX_SIZE}, got {self.size}")
        if self.board is None:
            self.board = np.zeros((self.size, self.size), dtype=np.int8)

    @classmethod
    def from_moves(
        cls,
        moves: list[int] | tuple[int, ...],
        size: int = DEFAULT_SIZE,
        rule: Rule = Rule.FREESTYLE,
        setup_black: tuple[int, ...] = (),
        setup_white: tuple[int, ...] = (),
    ) -> GomokuState:
        state = cls(size=size, rule=rule)
        for color, stones in ((BLACK, setup_black), (WHITE, setup_white)):
            for p in stones:
                state._check_on_board_and_empty(p, "setup stone")
                state.board[divmod(p, size)] = color
        for p in moves:
            state = state.play(p)
        return state

    @property
    def game(self) -> Game:
        """The `Game` these rules belong to (what the search and the services ask)."""
        return _gomoku_game()

    @property
    def to_move(self) -> int:
        return BLACK if len(self.moves) % 2 == 0 else WHITE

    @property
    def is_over(self) -> bool:
        return self.winner != EMPTY or bool(self.board.all())  # five, or no empty point

    def _check_on_board_and_empty(self, point: int, what: str) -> None:
        if not 0 <= point < self.size * self.size:
            raise IllegalMove(f"{what} {point} is off the {self.size}x{self.size} board")
        if self.board.flat[point] != EMPTY:
            raise IllegalMove(f"{what} {index_name(point, self.size)} is on an occupied point")

    def play(self, point: int) -> GomokuState:
        if self.winner != EMPTY:
            raise IllegalMove(f"move {index_name(point, self.size)} after the game ended")
        self._check_on_board_and_empty(point, "move")
        color = self.to_move
        y, x = divmod(point, self.size)
        if self.rule is Rule.RENJU and color == BLACK:
            reason = renju.is_forbidden(self.board, x, y)
            if reason is not None:
                raise ForbiddenMove(point, self.size, reason)
        board = self.board.copy()
        board[y, x] = color
        won = makes_five(board, x, y, color, self.rule)
        return GomokuState(
            size=self.size,
            rule=self.rule,
            board=board,
            moves=(*self.moves, point),
            winner=color if won else EMPTY,
        )

    def legal_mask(self) -> np.ndarray:
        """Boolean mask over the flat board of the points the side to move may play."""
        if self.winner != EMPTY:
            return np.zeros(self.size * self.size, dtype=bool)
        mask = self.board.reshape(-1) == EMPTY
        if self.rule is Rule.RENJU and self.to_move == BLACK:
            mask &= ~renju.forbidden_mask(self.board)
        return mask

    def winning_points(self, color: int) -> list[int]:
        """Empty points where `color` would complete a winning line at once.

        Under renju a black point counts only if it makes exactly five (in some line); such a
        point is always legal, as five takes precedence over forbidden shapes, and overline or
        other forbidden points never make exactly five, so `makes_five` alone decides.
        """
        out = []
        board = self.board
        for p in np.flatnonzero(board.reshape(-1) == EMPTY):
            y, x = divmod(int(p), self.size)
            board[y, x] = color
            if makes_five(board, x, y, color, self.rule):
                out.append(int(p))
            board[y, x] = EMPTY
        return out

    def ascii(self) -> str:
        """The board as text, top row first, with RenjuNet coordinates (`Game.board_text`)."""
        return self.game.board_text(self)
