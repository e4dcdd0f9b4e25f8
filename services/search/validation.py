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
* `max_candidates` (GenMove, Analyze): 0 means 5; otherwise 1..size*size.
* `report_every_visits` (Analyze): 0 means DEFAULT_REPORT_EVERY; must be >= 0.
* `positions` (Predict): at most MAX_POSITIONS, and not together with `position`.

Over a limit (a budget above its maximum, more than MAX_POSITIONS positions, more moves or setup
stones than the board has points) is `RequestTooLarge`, which the service answers with
RESOURCE_EXHAUSTED naming the field; a malformed value is `InvalidRequest` (INVALID_ARGUMENT).
Messages over the server's max_receive_message_length never reach this module: gRPC itself
answers RESOURCE_EXHAUSTED.
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
    IllegalMove,
    Rule,
    makes_five,
)

SERVED_SIZE = DEFAULT_SIZE
DEFAULT_TOP_K = 5
DEFAULT_VISITS = 200
MAX_VISITS = 100_000
MAX_TIME_MS = 60_000
DEFAULT_CANDIDATES = 5
DEFAULT_REPORT_EVERY = 100
MAX_POSITIONS = 256  # Predict positions per request: one Triton batch (max_batch_size 256)

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


class RequestTooLarge(InvalidRequest):
    """A field over the service's limits (answered with RESOURCE_EXHAUSTED)."""


@dataclass(frozen=True)
class Budget:
    max_visits: int
    max_time_ms: int


def _rule(value: int, field: str = "position") -> Rule:
    if value not in _RULES:
        raise InvalidRequest(f"{field}.rule", f"unknown rule {value}")
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


def position_to_state(position: search_pb2.Position, field: str = "position") -> GomokuState:
    """A validated GomokuState for `position` (which may be a game that is already over).

    `field` names the position in error messages ("position", "positions[3]").
    """
    game = position.game
    if game == search_pb2.GO:
        raise InvalidRequest(f"{field}.game", "GO is not served yet")
    if game not in (search_pb2.GAME_UNSPECIFIED, search_pb2.GOMOKU):
        raise InvalidRequest(f"{field}.game", f"unknown game {game}")
    rule = _rule(position.rule, field)
    size = position.board_size or SERVED_SIZE
    if size != SERVED_SIZE:
        raise InvalidRequest(
            f"{field}.board_size",
            f"the served model plays on {SERVED_SIZE}x{SERVED_SIZE} only, got {size}",
        )
    points = size * size
    for name in ("moves", "setup_black", "setup_white"):
        n = len(getattr(position, name))
        if n > points:
            raise RequestTooLarge(
                f"{field}.{name}", f"at most {points} points on a {size}x{size} board, got {n}"
            )

    empty = GomokuState(size=size, rule=rule)
    black = _place(empty, position.setup_black, f"{field}.setup_black")
    probe = GomokuState(size=size, rule=rule)
    probe.board.flat[black] = BLACK
    white = _place(probe, position.setup_white, f"{field}.setup_white")
    probe.board.flat[white] = WHITE
    for color, stones, name in ((BLACK, black, "setup_black"), (WHITE, white, "setup_white")):
        for p in stones:
            if makes_five(probe.board, p % size, p // size, color, rule):
                raise InvalidRequest(f"{field}.{name}", "the setup stones already make five")

    state = GomokuState.from_moves(
        [], size=size, rule=rule, setup_black=tuple(black), setup_white=tuple(white)
    )
    for i, p in enumerate(position.moves):
        where = f"{field}.moves[{i}]"
        if not (0 <= p.x < size and 0 <= p.y < size):
            raise InvalidRequest(where, f"({p.x}, {p.y}) is off the {size}x{size} board")
        if state.winner != EMPTY:
            raise InvalidRequest(
                where, f"the game ended at moves[{i - 1}] ({_COLOR_NAMES[state.winner]} made five)"
            )
        if state.board[p.y, p.x] != EMPTY:
            raise InvalidRequest(where, f"{point_name(p.x, p.y)} is occupied")
        try:
            state = state.play(p.y * size + p.x)
        except IllegalMove as exc:  # e.g. a renju forbidden point for black
            raise InvalidRequest(where, str(exc)) from exc
    return state


def require_playable(state: GomokuState, field: str = "position") -> None:
    """Raise InvalidRequest naming `field` when the side to move has no legal move."""
    if state.winner != EMPTY:
        raise InvalidRequest(field, f"the game is over ({_COLOR_NAMES[state.winner]} made five)")
    if not (state.board == EMPTY).any():
        raise InvalidRequest(field, "the game is over (the board is full)")
    if not state.legal_mask().any():
        raise InvalidRequest(field, f"{_COLOR_NAMES[state.to_move]} has no legal move")


def top_k(
    value: int, size: int = SERVED_SIZE, field: str = "top_k", default: int = DEFAULT_TOP_K
) -> int:
    if not 0 <= value <= size * size:
        raise InvalidRequest(field, f"must be in 0..{size * size}, got {value}")
    return value or default


def max_candidates(value: int, size: int = SERVED_SIZE) -> int:
    return top_k(value, size, "max_candidates", DEFAULT_CANDIDATES)


def budget(max_visits: int, max_time_ms: int) -> Budget:
    if max_visits < 0:
        raise InvalidRequest("max_visits", f"must be >= 0, got {max_visits}")
    if max_visits > MAX_VISITS:
        raise RequestTooLarge("max_visits", f"must be at most {MAX_VISITS}, got {max_visits}")
    if max_time_ms < 0:
        raise InvalidRequest("max_time_ms", f"must be >= 0, got {max_time_ms}")
    if max_time_ms > MAX_TIME_MS:
        raise RequestTooLarge("max_time_ms", f"must be at most {MAX_TIME_MS}, got {max_time_ms}")
    if max_visits == 0 and max_time_ms == 0:
        return Budget(DEFAULT_VISITS, 0)
    return Budget(max_visits, max_time_ms)


def predict_request(request: search_pb2.PredictRequest) -> tuple[GomokuState, int]:
    """(state, top_k) for a single-position Predict request; the game must not be over."""
    k = top_k(request.top_k)
    state = position_to_state(request.position)
    require_playable(state)
    return state, k


def predict_batch(request: search_pb2.PredictRequest) -> tuple[list[GomokuState], int, bool]:
    """(states, top_k, batched) for any Predict request: `position` (batched False) or up to
    MAX_POSITIONS `positions` (batched True); no game may be over."""
    k = top_k(request.top_k)
    if not request.positions:
        state, k = predict_request(request)
        return [state], k, False
    if request.HasField("position"):
        raise InvalidRequest("position", "give either position or positions, not both")
    if len(request.positions) > MAX_POSITIONS:
        raise RequestTooLarge(
            "positions", f"at most {MAX_POSITIONS} per request, got {len(request.positions)}"
        )
    states = []
    for i, p in enumerate(request.positions):
        state = position_to_state(p, f"positions[{i}]")
        require_playable(state, f"positions[{i}]")
        states.append(state)
    return states, k, True


def genmove_request(request: search_pb2.GenMoveRequest) -> tuple[GomokuState, Budget]:
    """(state, budget) for a GenMove request; the game must not be over."""
    b = budget(request.max_visits, request.max_time_ms)
    max_candidates(request.max_candidates)
    state = position_to_state(request.position)
    require_playable(state)
    return state, b


@dataclass(frozen=True)
class Analysis:
    state: GomokuState
    budget: Budget
    report_every: int
    candidates: int


def analyze_request(request: search_pb2.AnalyzeRequest) -> Analysis:
    """What an Analyze request asks for; the game must not be over."""
    b = budget(request.max_visits, request.max_time_ms)
    k = max_candidates(request.max_candidates)
    if request.report_every_visits < 0:
        raise InvalidRequest(
            "report_every_visits", f"must be >= 0, got {request.report_every_visits}"
        )
    every = request.report_every_visits or DEFAULT_REPORT_EVERY
    state = position_to_state(request.position)
    require_playable(state)
    return Analysis(state, b, every, k)
