"""Turn proto requests into game states and budgets, or say exactly which field is wrong.

Everything here runs before the policy network is called, so a bad request costs no inference
and gets INVALID_ARGUMENT naming the field even while Triton is down.

Defaults and limits (documented in the report and the CLI help):

* `position.game`: GAME_UNSPECIFIED means GOMOKU; GO is served too (`GoPosition`).
* `position.rule`: RULE_UNSPECIFIED means FREESTYLE (Gomoku) or GO_AREA (Go); a Gomoku rule
  on a Go position, or GO_AREA on a Gomoku one, is rejected.
* `position.board_size`: 0 means 15 (Gomoku) or 19 (Go). Gomoku is 15x15 only (the Gomoku
  model's input is fixed); Go takes 9..19 (`GO_SIZES`: one fully convolutional network serves
  every size, see services/games/go.py for the range), any other size is rejected naming
  `board_size`. The positions of one Predict request share one board size (one Triton call).
* Go only: `position.komi` (unset: 7.5; finite, at most the board's points in size),
  `position.first_to_move` (unset: BLACK), passes in `moves` (`Point.is_pass`); Go moves must
  be legal: an occupied point, a suicide or an immediate ko recapture names the move. At most
  MAX_GO_MOVES moves (captures and passes let a Go game outgrow its board). Set-up stones
  may not be passes and must leave every group a liberty.
* `top_k`: 0 means 5; otherwise 1..size*size (Go: size*size + 1, the pass included, for the
  requested size).
* `max_visits` / `max_time_ms`: both 0 means DEFAULT_VISITS visits; limits MAX_VISITS and
  MAX_TIME_MS.
* `max_candidates` (GenMove, Analyze): 0 means 5; otherwise 1..size*size.
* `report_every_visits` (Analyze): 0 means DEFAULT_REPORT_EVERY; must be >= 0.
* `positions` (Predict): at most MAX_POSITIONS, all of one game, and not together with
  `position`.

* Replay work per request: the moves and set-up stones of all positions of one request
  together, a renju move counting RENJU_MOVE_COST (black's forbidden-point checks make it about
  three times dearer), at most MAX_REQUEST_MOVES (`replay_cost`, checked before anything is
  replayed). This bounds one valid request's CPU: without it, 256 renju positions of 170 moves
  took about 1 s of a core to validate, 256 Go positions of 600 moves about 0.9 s; within the
  limit the dearest request takes about 0.13 s (benchmarks/request_cost.py; docs/benchmarks.md,
  "Request cost"). Split bigger batches into several requests.

Over a limit (a budget above its maximum, more than MAX_POSITIONS positions, more moves or setup
stones than the board has points, more replay work than MAX_REQUEST_MOVES) is
`RequestTooLarge`, which the service answers with
RESOURCE_EXHAUSTED naming the field; a malformed value is `InvalidRequest` (INVALID_ARGUMENT).
Messages over the server's max_receive_message_length never reach this module: gRPC itself
answers RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from services.api.movepred.v1 import search_pb2
from services.games import go
from services.games.coords import point_name
from services.games.gomoku import (
    BLACK,
    DEFAULT_SIZE,
    EMPTY,
    WHITE,
    GomokuState,
    IllegalMove,
    Rule,
    has_five,
    makes_five,
)
from services.search.go_position import (
    DEFAULT_KOMI,
    GO_MAX_SIZE,
    GO_MIN_SIZE,
    GO_SIZE,
    GO_SIZES,
    GoPosition,
)

State = GomokuState | GoPosition

SERVED_SIZE = DEFAULT_SIZE
DEFAULT_TOP_K = 5
DEFAULT_VISITS = 200
MAX_VISITS = 100_000
MAX_TIME_MS = 60_000
DEFAULT_CANDIDATES = 5
DEFAULT_REPORT_EVERY = 100
MAX_POSITIONS = 256  # Predict positions per request: one Triton batch (max_batch_size 256)
GO_SERVED_SIZE = GO_SIZE  # the default Go size; GO_SIZES are all the served ones
MAX_GO_MOVES = 4 * GO_MAX_SIZE * GO_MAX_SIZE  # whatever the size
# Replay work of one request, in moves (set-up stones count as moves). Measured on the 2-core
# machine: a Gomoku move 3.5 us (freestyle, the fast path) to 15 us (replayed one by one), a Go
# move about 18 us, a renju move about 45 us; so 16,384 moves cost at most ~0.3 s of a core.
MAX_REQUEST_MOVES = 16_384
RENJU_MOVE_COST = 3

_RULES = {
    search_pb2.RULE_UNSPECIFIED: Rule.FREESTYLE,
    search_pb2.FREESTYLE: Rule.FREESTYLE,
    search_pb2.STANDARD: Rule.STANDARD,
    search_pb2.RENJU: Rule.RENJU,
}
_COLOR_NAMES = {BLACK: "black", WHITE: "white"}
_GAMES = {
    search_pb2.GAME_UNSPECIFIED: search_pb2.GOMOKU,
    search_pb2.GOMOKU: search_pb2.GOMOKU,
    search_pb2.GO: search_pb2.GO,
}


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


def game_of(position: search_pb2.Position, field: str = "position") -> int:
    """search_pb2.GOMOKU or search_pb2.GO (GAME_UNSPECIFIED means GOMOKU)."""
    if position.game not in _GAMES:
        raise InvalidRequest(f"{field}.game", f"unknown game {position.game}")
    return _GAMES[position.game]


def policy_points(game: int, size: int = 0) -> int:
    """Entries of a policy of the served model of `game` on a `size` board (0, or a size that
    is not served: the default size; Go: the pass included)."""
    if game == search_pb2.GO:
        s = size if size in GO_SIZES else GO_SERVED_SIZE
        return s * s + 1
    return SERVED_SIZE**2


def position_points(position: search_pb2.Position, field: str = "position") -> int:
    """`policy_points` of the game and board size `position` asks for (validated later)."""
    return policy_points(game_of(position, field), position.board_size)


def _place(board_state: GomokuState, points: Iterable[search_pb2.Point], field: str) -> list[int]:
    """Check that each point is on the board and empty; returns flat indices."""
    size = board_state.size
    taken = set(int(p) for p in board_state.board.reshape(-1).nonzero()[0])
    return _setup_points(points, size, taken, field,
                         lambda index: point_name(index % size, index // size))


def _setup_points(points: Iterable[search_pb2.Point], size: int, taken: set[int], field: str,
                  name: Callable[[int], str]) -> list[int]:
    """Set-up stones of either game: on the board, not a pass, not on a taken point (`taken`
    grows with them); flat indices. `name` spells a point in the game's own notation."""
    out: list[int] = []
    for i, p in enumerate(points):
        where = f"{field}[{i}]"
        if p.is_pass:
            raise InvalidRequest(where, "a pass cannot be a set-up stone")
        if not (0 <= p.x < size and 0 <= p.y < size):
            raise InvalidRequest(where, f"({p.x}, {p.y}) is off the {size}x{size} board")
        index = p.y * size + p.x
        if index in taken:
            raise InvalidRequest(where, f"{name(index)} is occupied")
        taken.add(index)
        out.append(index)
    return out


def position_to_state(position: search_pb2.Position, field: str = "position") -> State:
    """A validated GomokuState (or GoPosition) for `position` (which may be a game that is
    already over).

    `field` names the position in error messages ("position", "positions[3]").
    """
    if game_of(position, field) == search_pb2.GO:
        return go_position_to_state(position, field)
    if position.rule == search_pb2.GO_AREA:
        raise InvalidRequest(f"{field}.rule", "GO_AREA is a Go rule; this is a Gomoku position")
    if position.HasField("komi"):
        raise InvalidRequest(f"{field}.komi", "only Go positions have a komi")
    if position.first_to_move not in (search_pb2.COLOR_UNSPECIFIED, search_pb2.BLACK):
        raise InvalidRequest(f"{field}.first_to_move", "black moves first in Gomoku")
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

    setup, black, white = _setup_stones(position, size, rule, field)
    if rule is not Rule.RENJU:  # no forbidden points: the moves can be placed without `play`
        fast = _placed_without_five(setup, position.moves, size, rule)
        if fast is not None:
            return fast
    state = GomokuState.from_moves(
        [], size=size, rule=rule, setup_black=tuple(black), setup_white=tuple(white)
    )
    for i, p in enumerate(position.moves):
        where = f"{field}.moves[{i}]"
        if p.is_pass:
            raise InvalidRequest(where, "a pass is a Go move; Gomoku has none")
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


def _setup_stones(
    position: search_pb2.Position, size: int, rule: Rule, field: str
) -> tuple[np.ndarray, list[int], list[int]]:
    """The board of the set-up stones, validated (on the board, on empty points, no five),
    and their flat indices (black, white)."""
    if not position.setup_black and not position.setup_white:  # the usual request
        return np.zeros((size, size), np.int8), [], []
    probe = GomokuState(size=size, rule=rule)
    black = _place(probe, position.setup_black, f"{field}.setup_black")
    probe.board.flat[black] = BLACK
    white = _place(probe, position.setup_white, f"{field}.setup_white")
    probe.board.flat[white] = WHITE
    for color, stones, name in ((BLACK, black, "setup_black"), (WHITE, white, "setup_white")):
        for p in stones:
            if makes_five(probe.board, p % size, p // size, color, rule):
                raise InvalidRequest(f"{field}.{name}", "the setup stones already make five")
    return probe.board, black, white


def _placed_without_five(
    setup: np.ndarray, moves: Iterable[search_pb2.Point], size: int, rule: Rule
) -> GomokuState | None:
    """The state after `moves` on the `setup` board, built without replaying them one by one,
    when that gives exactly what `GomokuState.play` would (no forbidden points, i.e. not renju):
    every move is on the board and empty, and the final board has no five in a row of one
    colour, so no move can have made five (stones are never removed) and nobody has won.
    None when that does not hold: the caller replays the moves, which names the failing move."""
    board = setup.copy()
    flat = board.reshape(-1)
    played: list[int] = []
    color = BLACK
    for p in moves:
        if p.is_pass or not (0 <= p.x < size and 0 <= p.y < size):
            return None
        index = p.y * size + p.x
        if flat[index] != EMPTY:
            return None
        flat[index] = color
        played.append(index)
        color = WHITE if color == BLACK else BLACK
    if has_five(board):
        return None
    return GomokuState(size=size, rule=rule, board=board, moves=tuple(played), winner=EMPTY)


def go_position_to_state(position: search_pb2.Position, field: str = "position") -> GoPosition:
    """A validated GoPosition for a Go `position` (which may be a game that is already over)."""
    if position.rule not in (search_pb2.RULE_UNSPECIFIED, search_pb2.GO_AREA):
        if position.rule not in _RULES:
            raise InvalidRequest(f"{field}.rule", f"unknown rule {position.rule}")
        name = search_pb2.Rule.Name(position.rule)
        raise InvalidRequest(
            f"{field}.rule", f"{name} is a Gomoku rule; Go is played under GO_AREA (or unset)"
        )
    size = position.board_size or GO_SERVED_SIZE
    if size not in GO_SIZES:
        raise InvalidRequest(
            f"{field}.board_size",
            f"Go is served on sizes {GO_MIN_SIZE}..{GO_MAX_SIZE} ({GO_MIN_SIZE}x{GO_MIN_SIZE} "
            f"to {GO_MAX_SIZE}x{GO_MAX_SIZE}), got {size}",
        )
    points = size * size
    komi = position.komi if position.HasField("komi") else DEFAULT_KOMI
    if not math.isfinite(komi) or abs(komi) > points:
        raise InvalidRequest(f"{field}.komi", f"must be finite and within +-{points}, got {komi}")
    first = position.first_to_move
    if first not in (search_pb2.COLOR_UNSPECIFIED, search_pb2.BLACK, search_pb2.WHITE):
        raise InvalidRequest(f"{field}.first_to_move", f"unknown color {first}")
    first_color = WHITE if first == search_pb2.WHITE else BLACK
    for name in ("setup_black", "setup_white"):
        n = len(getattr(position, name))
        if n > points:
            raise RequestTooLarge(
                f"{field}.{name}", f"at most {points} points on a {size}x{size} board, got {n}"
            )
    if len(position.moves) > MAX_GO_MOVES:
        raise RequestTooLarge(
            f"{field}.moves", f"at most {MAX_GO_MOVES} Go moves, got {len(position.moves)}"
        )
    taken: set[int] = set()
    def name(index: int) -> str:
        return go.point_name(index, size)

    black = _setup_points(position.setup_black, size, taken, f"{field}.setup_black", name)
    white = _setup_points(position.setup_white, size, taken, f"{field}.setup_white", name)
    state = go.GoState(size, first_color)
    if black or white:
        state = state.add_stones(black, white, to_move=first_color)
        libs = state.liberties().reshape(-1)
        for color, stones, name in ((BLACK, black, "setup_black"), (WHITE, white, "setup_white")):
            dead = [p for p in stones if libs[p] == 0]
            if dead:
                raise InvalidRequest(
                    f"{field}.{name}",
                    f"the {_COLOR_NAMES[color]} set-up stone at "
                    f"{go.point_name(dead[0], size)} has no liberty",
                )
    pos = GoPosition(state, komi)
    for i, p in enumerate(position.moves):
        where = f"{field}.moves[{i}]"
        if pos.is_over:
            raise InvalidRequest(
                where, f"the game ended at moves[{i - 1}] (two consecutive passes)"
            )
        if p.is_pass:
            move = pos.pass_move
        elif not (0 <= p.x < size and 0 <= p.y < size):
            raise InvalidRequest(where, f"({p.x}, {p.y}) is off the {size}x{size} board")
        else:
            move = p.y * size + p.x
        try:
            pos = pos.play(move)
        except go.IllegalMove as exc:
            raise InvalidRequest(where, _go_illegal(exc, pos)) from exc
    return pos


def _go_illegal(exc: go.IllegalMove, pos: GoPosition) -> str:
    name = go.point_name(exc.point, pos.size) if exc.point is not None else "pass"
    color = _COLOR_NAMES[pos.to_move]
    if exc.reason == go.OCCUPIED:
        return f"{name} is occupied"
    if exc.reason == go.KO:
        return (f"{name} retakes the ko at once: {color} must play elsewhere first "
                "(simple ko)")
    if exc.reason == go.SUICIDE:
        return f"{name} is suicide for {color} (it would leave its own group without liberties)"
    return f"{name} is illegal ({exc})"


def require_playable(state: State, field: str = "position") -> None:
    """Raise InvalidRequest naming `field` when the side to move has no legal move."""
    if isinstance(state, GoPosition):
        if state.is_over:
            raise InvalidRequest(field, "the game is over (two consecutive passes)")
        return  # a pass is always legal
    if state.winner != EMPTY:
        raise InvalidRequest(field, f"the game is over ({_COLOR_NAMES[state.winner]} made five)")
    if not state.legal_mask().any():
        if not (state.board == EMPTY).any():
            raise InvalidRequest(field, "the game is over (the board is full)")
        raise InvalidRequest(field, f"{_COLOR_NAMES[state.to_move]} has no legal move")


def top_k(
    value: int,
    size: int = SERVED_SIZE,
    field: str = "top_k",
    default: int = DEFAULT_TOP_K,
    points: int | None = None,
) -> int:
    """`points`: the policy's entries (default size * size; Go adds the pass)."""
    limit = points if points is not None else size * size
    if not 0 <= value <= limit:
        raise InvalidRequest(field, f"must be in 0..{limit}, got {value}")
    return value or default


def max_candidates(value: int, size: int = SERVED_SIZE, points: int | None = None) -> int:
    return top_k(value, size, "max_candidates", DEFAULT_CANDIDATES, points)


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


def replay_cost(positions: Iterable[search_pb2.Position]) -> int:
    """The replay work of `positions`, in moves (see MAX_REQUEST_MOVES): moves plus set-up
    stones, renju ones counted RENJU_MOVE_COST times. Reads only the field lengths."""
    total = 0
    for p in positions:
        n = len(p.moves) + len(p.setup_black) + len(p.setup_white)
        renju = p.rule == search_pb2.RENJU and p.game != search_pb2.GO
        total += n * (RENJU_MOVE_COST if renju else 1)
    return total


def check_replay_cost(positions: Iterable[search_pb2.Position], field: str) -> None:
    """RequestTooLarge naming `field` when replaying `positions` is more work than one
    request may ask for (before any of it is done)."""
    cost = replay_cost(positions)
    if cost > MAX_REQUEST_MOVES:
        raise RequestTooLarge(
            field,
            f"the request replays {cost} moves (moves and set-up stones of all positions; a "
            f"renju move counts {RENJU_MOVE_COST}), at most {MAX_REQUEST_MOVES} per request: "
            "split it into several requests",
        )


def predict_request(request: search_pb2.PredictRequest) -> tuple[State, int]:
    """(state, top_k) for a single-position Predict request; the game must not be over."""
    k = top_k(request.top_k, points=position_points(request.position))
    check_replay_cost([request.position], "position")
    state = position_to_state(request.position)
    require_playable(state)
    return state, k


def predict_batch(request: search_pb2.PredictRequest) -> tuple[list[State], int, bool]:
    """(states, top_k, batched) for any Predict request: `position` (batched False) or up to
    MAX_POSITIONS `positions` of one game (batched True); no game may be over."""
    if not request.positions:
        state, k = predict_request(request)
        return [state], k, False
    if request.HasField("position"):
        raise InvalidRequest("position", "give either position or positions, not both")
    if len(request.positions) > MAX_POSITIONS:
        raise RequestTooLarge(
            "positions", f"at most {MAX_POSITIONS} per request, got {len(request.positions)}"
        )
    check_replay_cost(request.positions, "positions")
    game = game_of(request.positions[0], "positions[0]")
    k = top_k(request.top_k, points=position_points(request.positions[0], "positions[0]"))
    states = []
    for i, p in enumerate(request.positions):
        if game_of(p, f"positions[{i}]") != game:
            raise InvalidRequest(
                f"positions[{i}].game",
                "all positions of one request must be of one game (positions[0] is "
                f"{search_pb2.Game.Name(game)})",
            )
        state = position_to_state(p, f"positions[{i}]")
        require_playable(state, f"positions[{i}]")
        if states and state.size != states[0].size:  # one Triton call takes one board size
            raise InvalidRequest(
                f"positions[{i}].board_size",
                "all positions of one request must be on one board size (positions[0] is "
                f"{states[0].size}x{states[0].size}, this one {state.size}x{state.size})",
            )
        states.append(state)
    return states, k, True


def genmove_request(request: search_pb2.GenMoveRequest) -> tuple[State, Budget]:
    """(state, budget) for a GenMove request; the game must not be over."""
    b = budget(request.max_visits, request.max_time_ms)
    max_candidates(request.max_candidates, points=position_points(request.position))
    check_replay_cost([request.position], "position")
    state = position_to_state(request.position)
    require_playable(state)
    return state, b


@dataclass(frozen=True)
class Analysis:
    state: State
    budget: Budget
    report_every: int
    candidates: int


def analyze_request(request: search_pb2.AnalyzeRequest) -> Analysis:
    """What an Analyze request asks for; the game must not be over."""
    b = budget(request.max_visits, request.max_time_ms)
    k = max_candidates(request.max_candidates, points=position_points(request.position))
    if request.report_every_visits < 0:
        raise InvalidRequest(
            "report_every_visits", f"must be >= 0, got {request.report_every_visits}"
        )
    every = request.report_every_visits or DEFAULT_REPORT_EVERY
    check_replay_cost([request.position], "position")
    state = position_to_state(request.position)
    require_playable(state)
    return Analysis(state, b, every, k)
