"""Turn proto requests into game states and budgets, or say exactly which field is wrong.

Everything here runs before the policy network is called, so a bad request costs no inference
and gets INVALID_ARGUMENT naming the field even while Triton is down.

Defaults and limits (documented in the report and the CLI help):

* `position.game`: GAME_UNSPECIFIED means GOMOKU; GO is rejected (not served yet).
* `position.rule`: RULE_UNSPECIFIED means FREESTYLE.
* `position.board_size`: 0 means 15; anything else but 15 is rejected (the model is 15x15).
* `top_k`: 0 means 5; otherwise 1..size*size.
* `max_visits` / `max_time_ms`: both 0 means DEFAULT_VISITS visits; limits MAX_VISITS and
  MAX_TIME_MS.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from services.api.movepred.v1 import search_pb2
from services.games.coords import point_name
from services.games.gomoku import (
    BLACK,
    DEFAULT_SIZE,
    EMPTY,
    WHITE,
    GomokuState,
    Rule,
    makes_five,
)

SERVED_SIZE = DEFAULT_SIZE
DEFAULT_TOP_K = 5
DEFAULT_VISITS = 200
MAX_VISITS = 100_000
MAX_TIME_MS = 60_000

_RULES = {
    search_pb2.RULE_UNSPECIFIED: Rule.FREESTYLE,
    search_pb2.FREESTYLE: Rule.FREESTYLE,
    search_pb2.STANDARD: Rule.STANDARD,
    search_pb2.RENJU: Rule.RENJU,
}
_COLOR_NAMES = {BLACK: "black", WHITE: "white"}


class InvalidRequest(ValueError):
    """A request field the service cannot accept; str() is "<field>: <message>"."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Budget:
    max_visits: int
    max_time_ms: int


def _rule(value: int) -> Rule:
    if value not in _RULES:
        raise InvalidRequest("position.rule", f"unknown rule {value}")
    return _RULES[value]


def _place(board_state: GomokuState, points: Iterable[search_pb2.Point], field: str) -> list[int]:
    """Check that each point is on the board and empty; returns flat indices."""
    size = board_state.size
    out: list[int] = []
    taken = set(int(p) for p in board_state.board.reshape(-1).nonzero()[0])
    for i, p in enumerate(points):
        where = f"{field}[{i}]"
        if not (0 <= p.x < size and 0 <= p.y < size):
            raise InvalidRequest(where, f"({p.x}, {p.y}) is off the {size}x{size} board")
        index = p.y * size + p.x
        if index in taken:
            raise InvalidRequest(where, f"{point_name(p.x, p.y)} is occupied")
        taken.add(index)
        out.append(index)
    return out


def position_to_state(position: search_pb2.Position) -> GomokuState:
    """A validated GomokuState for `position` (which may be a game that is already over)."""
    game = position.game
    if game == search_pb2.GO:
        raise InvalidRequest("position.game", "GO is not served yet")
    if game not in (search_pb2.GAME_UNSPECIFIED, search_pb2.GOMOKU):
        raise InvalidRequest("position.game", f"unknown game {game}")
    rule = _rule(position.rule)
    size = position.board_size or SERVED_SIZE
    if size != SERVED_SIZE:
        raise InvalidRequest(
            "position.board_size",
            f"the served model plays on {SERVED_SIZE}x{SERVED_SIZE} only, got {size}",
        )

    empty = GomokuState(size=size, rule=rule)
    black = _place(empty, position.setup_black, "position.setup_black")
    probe = GomokuState(size=size, rule=rule)
    probe.board.flat[black] = BLACK
    white = _place(probe, position.setup_white, "position.setup_white")
    probe.board.flat[white] = WHITE
    for color, stones, field in ((BLACK, black, "setup_black"), (WHITE, white, "setup_white")):
        for p in stones:
            if makes_five(probe.board, p % size, p // size, color, rule):
                raise InvalidRequest(f"position.{field}", "the setup stones already make five")

    state = GomokuState.from_moves(
        [], size=size, rule=rule, setup_black=tuple(black), setup_white=tuple(white)
    )
    for i, p in enumerate(position.moves):
        where = f"position.moves[{i}]"
        if not (0 <= p.x < size and 0 <= p.y < size):
            raise InvalidRequest(where, f"({p.x}, {p.y}) is off the {size}x{size} board")
        if state.winner != EMPTY:
            raise InvalidRequest(
                where, f"the game ended at moves[{i - 1}] ({_COLOR_NAMES[state.winner]} made five)"
            )
        if state.board[p.y, p.x] != EMPTY:
            raise InvalidRequest(where, f"{point_name(p.x, p.y)} is occupied")
        state = state.play(p.y * size + p.x)
    return state


def require_playable(state: GomokuState) -> None:
    """Raise InvalidRequest naming `position` when the side to move has no legal move."""
    if state.winner != EMPTY:
        raise InvalidRequest(
            "position", f"the game is over ({_COLOR_NAMES[state.winner]} made five)"
        )
    if not (state.board == EMPTY).any():
        raise InvalidRequest("position", "the game is over (the board is full)")


def top_k(value: int, size: int = SERVED_SIZE) -> int:
    if not 0 <= value <= size * size:
        raise InvalidRequest("top_k", f"must be in 0..{size * size}, got {value}")
    return value or DEFAULT_TOP_K


def budget(max_visits: int, max_time_ms: int) -> Budget:
    if max_visits < 0:
        raise InvalidRequest("max_visits", f"must be >= 0, got {max_visits}")
    if max_visits > MAX_VISITS:
        raise InvalidRequest("max_visits", f"must be at most {MAX_VISITS}, got {max_visits}")
    if max_time_ms < 0:
        raise InvalidRequest("max_time_ms", f"must be >= 0, got {max_time_ms}")
    if max_time_ms > MAX_TIME_MS:
        raise InvalidRequest("max_time_ms", f"must be at most {MAX_TIME_MS}, got {max_time_ms}")
    if max_visits == 0 and max_time_ms == 0:
        return Budget(DEFAULT_VISITS, 0)
    return Budget(max_visits, max_time_ms)


def predict_request(request: search_pb2.PredictRequest) -> tuple[GomokuState, int]:
    """(state, top_k) for a Predict request; the game must not be over."""
    k = top_k(request.top_k)
    state = position_to_state(request.position)
    require_playable(state)
    return state, k


def genmove_request(request: search_pb2.GenMoveRequest) -> tuple[GomokuState, Budget]:
    """(state, budget) for a GenMove request; the game must not be over."""
    b = budget(request.max_visits, request.max_time_ms)
    state = position_to_state(request.position)
    require_playable(state)
    return state, b
