"""Turn proto requests into game states and budgets, or say exactly which field is wrong.

Everything here runs before the policy network is called, so a bad request costs no inference
and gets INVALID_ARGUMENT naming the field even while Triton is down.

Defaults and limits (documented in the report and the CLI help):

* `position.game` / `position.game_name`: the game (`services.games.registry`);
  GAME_UNSPECIFIED with no name means GAME_GOMOKU. What a position may hold is its game's
  `position_from_request` (services/games/gomoku/game.py, go_game.py), summarised here:
* `position.rule`: RULE_UNSPECIFIED means RULE_FREESTYLE (Gomoku) or RULE_GO_AREA (Go); a
  Gomoku rule on a Go position, or RULE_GO_AREA on a Gomoku one, is rejected.
* `position.board_size`: 0 means the game's default size, 15 (Gomoku) or 19 (Go). Gomoku is
  15x15 only (the Gomoku model's input is fixed); Go takes 9..19 (one fully convolutional
  network serves every size, see services/games/go/rules.py for the range), any other size is
  rejected naming `board_size`. The positions of one Predict request share one board size (one
  Triton call).
* Go only: `position.komi` (unset: 7.5; finite, at most the board's points in size),
  `position.first_to_move` (unset: COLOR_BLACK), passes in `moves` (`Point.is_pass`); Go moves must
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
  together, each as its game weighs it (`Game.replay_cost`: a renju move counts
  `services.games.gomoku.game.RENJU_MOVE_COST`, black's forbidden-point checks making it about
  three times dearer), at most MAX_REQUEST_MOVES (`replay_cost`, checked before anything is
  replayed). This bounds one valid request's CPU: without it, 256 renju positions of 170 moves
  took about 1 s of a core to validate, 256 Go positions of 600 moves about 0.9 s; within the
  limit the dearest request takes about 0.13 s (benchmarks/request_cost.py; docs/benchmarks.md,
  "Request cost"). Split bigger batches into several requests.

Over a limit (a budget above its maximum, more than MAX_POSITIONS positions, more moves or setup
stones than the board has points, more replay work than MAX_REQUEST_MOVES) is
`RequestTooLarge`, a malformed value `InvalidRequest`: the service answers both INVALID_ARGUMENT
naming the field (a fixed limit is no busy server: the same request never passes, so it is not
the retryable RESOURCE_EXHAUSTED), with BadRequest reason OVER_LIMIT or INVALID. Messages over
the server's max_receive_message_length never reach this module: gRPC itself answers
RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from services.api.movepred.v1 import search_pb2
from services.defaults import MAX_BATCH_BOARDS
from services.games.base import Game, InvalidRequest, Position, RequestTooLarge
from services.games.registry import (
    UnknownGame,
    default_game,
    game_for_proto,
    get_game,
    registered_games,
)
from services.quoting import shown

__all__ = ["InvalidRequest", "RequestTooLarge"]  # defined with the games, raised from here too

State = Position

DEFAULT_TOP_K = 5
DEFAULT_VISITS = 200
MAX_VISITS = 100_000
MAX_TIME_MS = 60_000
DEFAULT_CANDIDATES = 5
DEFAULT_REPORT_EVERY = 100
MAX_POSITIONS = MAX_BATCH_BOARDS  # Predict positions per request: one Triton batch
# Replay work of one request, in moves (set-up stones count as moves). Measured on the 2-core
# machine: a Gomoku move 3.5 us (freestyle, the fast path) to 15 us (replayed one by one), a Go
# move about 18 us, a renju move about 45 us (`Game.replay_cost`); so 16,384 moves cost at most
# ~0.3 s of a core.
MAX_REQUEST_MOVES = 16_384


@dataclass(frozen=True)
class Budget:
    max_visits: int
    max_time_ms: int

    @property
    def visit_cap(self) -> int:
        """The visits the search stops at: `max_visits`, or MAX_VISITS for a search bounded by
        time alone (its tree, and the memory it holds, is bounded like any other)."""
        return self.max_visits or MAX_VISITS


def game_of(position: search_pb2.Position, field: str = "position") -> Game:
    """The registered game `position` names (`game_name`, else `game`; neither: Gomoku)."""
    try:
        by_enum = game_for_proto(position.game) if position.game else None
        if not position.game_name:
            return by_enum or default_game()
        game = get_game(position.game_name)
    except UnknownGame as exc:
        what = "game_name" if position.game_name and not position.game else "game"
        raise InvalidRequest(f"{field}.{what}", str(exc)) from None
    if by_enum is not None and by_enum is not game:
        raise InvalidRequest(f"{field}.game_name", f"{shown(position.game_name)} is not "
                                                   f"{search_pb2.Game.Name(position.game)}")
    return game


def policy_points(game: Game, size: int = 0) -> int:
    """Entries of a policy of `game` on a `size` board (0, or a size that is not served: the
    default size; the pass included where the game has one)."""
    return game.policy_size(size if size in game.sizes else game.default_size)


def position_points(position: search_pb2.Position, field: str = "position") -> int:
    """`policy_points` of the game and board size `position` asks for (validated later)."""
    return policy_points(game_of(position, field), position.board_size)


def position_to_state(position: search_pb2.Position, field: str = "position") -> State:
    """A validated position of `position`'s game (which may be a game that is already over).

    `field` names the position in error messages ("position", "positions[3]").
    """
    return game_of(position, field).position_from_request(position, field)


def require_playable(state: State, field: str = "position") -> None:
    """Raise InvalidRequest naming `field` when the side to move has no legal move."""
    state.game.require_playable(state, field)


def top_k(
    value: int,
    size: int = 0,
    field: str = "top_k",
    default: int = DEFAULT_TOP_K,
    points: int | None = None,
) -> int:
    """`points`: the policy's entries (default: the default game's on a `size` board)."""
    limit = points if points is not None else policy_points(default_game(), size)
    if not 0 <= value <= limit:
        raise InvalidRequest(field, f"must be in 0..{limit}, got {value}")
    return value or default


def max_candidates(value: int, size: int = 0, points: int | None = None) -> int:
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
    stones, as each game counts them (`Game.replay_cost`: a renju move three times).
    Reads only the field lengths."""
    return sum(game_of(p, f"positions[{i}]").replay_cost(p) for i, p in enumerate(positions))


def check_replay_cost(positions: Iterable[search_pb2.Position], field: str) -> None:
    """RequestTooLarge naming `field` when replaying `positions` is more work than one
    request may ask for (before any of it is done)."""
    cost = replay_cost(positions)
    if cost > MAX_REQUEST_MOVES:
        notes = "".join(f"; {note}" for note in _replay_cost_notes())
        raise RequestTooLarge(
            field,
            f"the request replays {cost} moves (moves and set-up stones of all positions"
            f"{notes}), at most {MAX_REQUEST_MOVES} per request: split it into several requests",
        )


def _replay_cost_notes() -> list[str]:
    """How the registered games weigh their moves (`Game.replay_cost_note`), for the message
    of a request over MAX_REQUEST_MOVES."""
    return [note for note in (game.replay_cost_note() for game in registered_games()) if note]


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
                f"{game.title.upper()})",
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


def rollout_lambda(request: search_pb2.GenMoveRequest | search_pb2.AnalyzeRequest) -> float:
    """The request's `rollout_lambda` (0 when unset): the weight of the rollouts' result in
    the leaf values, in [0, 1]."""
    if not request.HasField("rollout_lambda"):
        return 0.0
    value = request.rollout_lambda
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise InvalidRequest("rollout_lambda", f"must be in [0, 1], got {value}")
    return float(value)


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
