"""A stone set validated into a move-order problem, and the rules every prefix must obey.

Black moves first and the colours alternate, so an order is black's stones on the even plies
and white's on the odd ones; black has as many stones as white or one more. Every prefix of an
order must be a position the game's rules reach by playing those moves (`Position.play`
refuses suicide in Go and black's forbidden points under renju), with no stone ever removed
(the final board holds every stone, so no move can have captured) and the game not over before
the last stone (a finished Gomoku position ends with the stone that made its five). The rules
are asked of the game (`services.games.base`); nothing here knows which game it plays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from services.api.movepred.v1 import search_pb2
from services.games.base import BLACK, COLOR_NAMES, WHITE, Game, InvalidRequest, Position


class InvalidStones(InvalidRequest):
    """A stone set no game can have reached by alternate moves from the empty board (wrong
    counts, a point off the board or given twice, no legal order); str() is
    "<field>: <message>", as every invalid request field (answered with INVALID_ARGUMENT)."""


class NoLegalOrder(InvalidStones):
    """No order of the stones was found whose every prefix is legal without a capture."""


def stones_from_board(board: np.ndarray) -> tuple[list[int], list[int]]:
    """The flat points (`y * size + x`) of the black and of the white stones of an int8
    board [size, size] (1 black, 2 white), ascending."""
    flat = np.asarray(board).reshape(-1)
    return np.flatnonzero(flat == BLACK).tolist(), np.flatnonzero(flat == WHITE).tolist()


@dataclass(frozen=True)
class Problem:
    """The stones to order, and the empty position (game, size, rule) they are played on."""

    game: Game
    start: Position
    black: tuple[int, ...]  # ascending flat points
    white: tuple[int, ...]

    @property
    def size(self) -> int:
        return self.start.size

    @cached_property
    def n(self) -> int:
        """Stones, i.e. moves of an order (asked at every move played: kept)."""
        return len(self.black) + len(self.white)

    def color_at(self, ply: int) -> int:
        """The colour that plays move `ply` (0-based): black on even plies."""
        return BLACK if ply % 2 == 0 else WHITE

    def name(self, point: int) -> str:
        """A point in the game's notation."""
        return self.game.move_name(point, self.size)

    def play(self, state: Position, move: int) -> Position | None:
        """`state` after `move` when that keeps the order legal, else None: the rules allow the
        move, it removes no stone, and the game is not over unless this is the last stone."""
        try:
            after = state.play(move)
        except ValueError:  # the games' IllegalMove (suicide, forbidden point, game over)
            return None
        ply = len(after.moves)
        if np.count_nonzero(after.board) != ply:  # a capture
            return None
        if ply < self.n and after.is_over:
            return None
        return after

    def replay(self, order: Sequence[int], start: Position | None = None,
               first: int = 0) -> list[Position] | None:
        """The states after each move of `order[first:]`, played from `start` (the state after
        `order[:first]`; default: the empty position with `first` 0); None as soon as one move
        breaks the rules of `play` (or is the wrong colour's stone)."""
        state = self.start if start is None else start
        states: list[Position] = []
        black, white = set(self.black), set(self.white)
        for ply in range(first, len(order)):
            move = order[ply]
            if move not in (black if ply % 2 == 0 else white):
                return None
            nxt = self.play(state, move)
            if nxt is None:
                return None
            states.append(nxt)
            state = nxt
        return states

    def is_order(self, order: Sequence[int]) -> bool:
        """Whether `order` uses every stone once, black's on the even plies, white's on the
        odd ones (its legality is `replay`'s question)."""
        return (sorted(order[0::2]) == list(self.black)
                and sorted(order[1::2]) == list(self.white))


def problem_from_stones(game: Game, black: Sequence[int], white: Sequence[int],
                        size: int = 0, rule: int = search_pb2.RULE_UNSPECIFIED) -> Problem:
    """A validated `Problem`: the stones as flat points (`y * size + x`) on a `size` board
    (0: the game's default) under the API `rule` (unset: the game's default).

    Raises InvalidStones naming the counts or the point that is wrong, and the game's own
    InvalidRequest for a size or rule it does not serve. Whether a legal order exists at all
    (Go: a group without liberties has none) is found by the greedy order (`NoLegalOrder`)."""
    start = game.position_from_request(search_pb2.Position(board_size=size, rule=rule),
                                       "position")
    s = start.size
    seen: dict[int, str] = {}
    for field, stones in (("black", black), ("white", white)):
        for i, p in enumerate(stones):
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
                raise InvalidStones(f"{field}[{i}]", f"a point is a flat index, got {p!r}")
            if not 0 <= int(p) < s * s:
                raise InvalidStones(f"{field}[{i}]", f"point {int(p)} is off the {s}x{s} board "
                                    f"(0..{s * s - 1})")
            name = game.move_name(int(p), s)
            if int(p) in seen:
                raise InvalidStones(f"{field}[{i}]", f"{name} is given twice ({seen[int(p)]} "
                                    f"and {field}[{i}])")
            seen[int(p)] = f"{field}[{i}]"
    nb, nw = len(black), len(white)
    if nb + nw == 0:
        raise InvalidStones("black", "no stones to order")
    if nb not in (nw, nw + 1):
        raise InvalidStones(
            "black", f"{COLOR_NAMES[BLACK]} has {nb} stones and {COLOR_NAMES[WHITE]} {nw}: "
            f"black moves first and the colours alternate, so black needs {nw} or {nw + 1}")
    return Problem(game, start, tuple(sorted(int(p) for p in black)),
                   tuple(sorted(int(p) for p in white)))
