"""A Gomocup / Piskvork protocol brain whose moves come from the movepred search service.

    python -m services.protocols.gomocup --target 127.0.0.1:50051 [--visits 400] [--debug]
    python -m services.protocols.gomocup --target HOST:50051 --tls-ca ca.pem --token-file token

The TLS and token options are those of every client (`services.search.auth`).

The manager writes commands to stdin, one a line; the brain answers on stdout, one flushed line
per answer (protocol: https://plastovicka.github.io/protocl2en.htm). Supported:

    START 15 / RECTSTART 15,15   OK; any other size: ERROR unsupported size ...
    RESTART                      OK (empty board)
    BEGIN                        our move on the current (empty) board: we are black
    TURN x,y                     the opponent's move, then ours
    BOARD / x,y,field ... / DONE a whole position (field 1 ours, 2 the opponent's, 3 a
                                 continuous-game winning-line square), then our move
    PLAY x,y                     the manager plays x,y for us; echoed back
    TAKEBACK x,y                 undo the last move (it must be x,y): OK
    INFO key value               stored, never answered (timeout_turn, timeout_match,
                                 time_left, max_memory, game_type, rule, evaluate, folder;
                                 rollout_lambda L, a movepred extension: the search's leaf
                                 values mixed with rollouts, L in [0, 1], else ERROR;
                                 ponder 1/0, a movepred extension like --ponder)
    ABOUT                        name="movepred", version=..., author=..., country=...
    END                          exit without an answer
    anything else                UNKNOWN ...

Yixin-Board's analysis extensions (as Rapfi, the open-source brain Yixin-Board drives, answers
them: github.com/dhbloo/rapfi, Rapfi/command/gomocup.cpp and search/searchoutput.cpp):

    YXBOARD / x,y,field ... / DONE   set the position as BOARD does, without a move; the
                                 records may also follow YXBOARD on its line
    YXNBEST n                    search the position and report the n best moves: one
                                 ``MESSAGE (i) x,y visits V winrate W prior P | x,y x,y ...``
                                 line per candidate (most visited first; winrate and prior in
                                 percent, for the side to move; the principal variation after
                                 the bar), then the best move ``x,y``, which is played as after
                                 TURN (as Rapfi does; Yixin-Board sends YXBOARD before each)
    YXSHOWFORBID                 ``FORBID xxyy...xxyy.``: black's forbidden points under renju
                                 (INFO rule 4) when black is to move, each as two-digit x and y
                                 (Piskvork coordinates), ``FORBID .`` when there are none
    YXSHOWINFO                   ``MESSAGE movepred <version>`` and the limits Yixin-Board's
                                 settings take, ``MESSAGE INFO MAX_THREAD_NUM 1`` and
                                 ``MESSAGE INFO MAX_HASH_SIZE 0`` (threads and memory are the
                                 search service's, not the brain's; their INFO keys are stored
                                 and ignored)
    YXHASHCLEAR                  ``MESSAGE ...``: the brain keeps no hash table to clear

Coordinates: Piskvork's x is the column from the left and y the row from the TOP, both from 0;
the service's Point has y from the BOTTOM, so (x, y) <-> (x, 14 - y) on 15x15 (`to_service`,
`from_service`; the mapping is its own inverse). Only 15x15 is served.

Colour: the brain never learns it directly. Black moves first, so the side to move follows from
the stones: after BEGIN we are black; in BOARD equal stone counts mean we are black and one
opponent stone more means white; anything else is answered with ERROR. The service needs the
moves in order: BOARD records are taken in the order sent (Piskvork sends them in move order,
and must for renju) and interleaved black, white, black, ... by colour, which keeps that order
and still yields a legal game when a freestyle manager sends them in another order.

Rule (INFO rule, a bitmask): 4 renju -> RENJU, else 1 exactly five -> STANDARD, else FREESTYLE;
2 (continuous game) changes nothing but the meaning of field 3, and 8 (caro) is not served and
is searched as FREESTYLE. Winning-line squares (field 3) cannot be sent to the service: they
are kept out of our answers (the best candidate of the search that is not one of them).

Budget: INFO timeout_turn (ms) and, for a timed match, time_left / 15 bound the time of one
move; the search gets that minus a reserve of 150 ms + 1/6 (at most 1 s) for the round trip and
the last batch of evaluations, and the gRPC deadline is the turn minus 10 % (at most 300 ms),
the time a loaded machine needs to play the quick move below and write it out.
timeout_turn 0 ("as fast as possible") searches 32 visits; with no time information at all it
searches --visits (default 400).

A turn the search misses (its deadline passed: a loaded machine, a cold model) is still played:
the brain answers ``MESSAGE the search gave no answer within the turn; ...`` and a quick local
move (`quick_move`: our five, else block theirs, else the point in the most and fullest
five-windows), found in milliseconds without another call, so a slow turn never loses the game
by an ERROR (managers count an ERROR answer to a move as a crash).

Other failures never end the brain either: a service that cannot be reached answers
`ERROR search service unavailable (...)` (a dead service is reported, not hidden behind local
moves), other service errors `ERROR search failed: ...`, and bad input `ERROR ...`.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import grpc
import numpy as np

from services.coords import index_name
from services.defaults import SEARCH_TARGET
from services.games.gomoku import renju
from services.games.gomoku.rules import (
    BLACK,
    DEFAULT_SIZE,
    WHITE,
    GomokuState,
    Rule,
    five_windows,
    opponent,
)
from services.numerals import ascii_decimal, ascii_int
from services.protocols.frontend import SearchClientOwner, serve_lines
from services.records.sgf_writer import app_version, write_sgf
from services.search import auth
from services.search.validation import MAX_VISITS
from services.settings import bounded

logger = logging.getLogger(__name__)

SIZE = DEFAULT_SIZE
NAME = "movepred"
AUTHOR = "movepred developers"
COUNTRY = "unknown"
DEFAULT_VISITS = 400
FAST_VISITS = 32  # INFO timeout_turn 0: play as fast as possible
# INFO key (a movepred extension) for the search's rollout_lambda, like --rollout-lambda
ROLLOUT_LAMBDA_KEY = "rollout_lambda"
# INFO key (a movepred extension) turning pondering on (1) or off (0), like --ponder: after
# our move the search service searches the opponent's turn (as Rapfi ponders) until our next
# command reaches it, and the next TURN continues that tree
PONDER_KEY = "ponder"
MIN_SEARCH_MS = 20
MAX_SEARCH_MS = 60_000  # the search service's limit
MAX_RESERVE_MS = 1_000
ANSWER_RESERVE_MS = 300  # the most of a turn kept for the answer after the gRPC deadline
# START's short search of the empty board: a cold search service pays its first leaf batches
# (Triton's first calls of a model's shapes) there, not in the first timed turn
WARM_UP_MS = 300
WARM_UP_TIMEOUT_S = 2.0
MOVES_LEFT_ESTIMATE = 15  # a timed match spends at most time_left / 15 on one move
MAX_NBEST = 20  # YXNBEST n: at most this many candidates

# INFO rule bits read here; the protocol's others (2 continuous game, 8 Caro) play freestyle
RULE_EXACT_FIVE, RULE_RENJU = 1, 4
OWN, OPPONENT, WINNING_LINE = 1, 2, 3


# ---- coordinates, rules, budgets --------------------------------------------------------------
def to_service(px: int, py: int, size: int = SIZE) -> tuple[int, int]:
    """Piskvork (x, y from the top) -> service Point (x, y from the bottom)."""
    return px, size - 1 - py


def from_service(x: int, y: int, size: int = SIZE) -> tuple[int, int]:
    """Service Point (x, y from the bottom) -> Piskvork (x, y from the top)."""
    return x, size - 1 - y


def to_index(px: int, py: int, size: int = SIZE) -> int:
    """Piskvork (x, y) -> repository point y * size + x (y from the bottom)."""
    x, y = to_service(px, py, size)
    return y * size + x


def from_index(point: int, size: int = SIZE) -> tuple[int, int]:
    """Repository point -> Piskvork (x, y)."""
    y, x = divmod(point, size)
    return from_service(x, y, size)


def rule_from_info(bits: int) -> Rule:
    if bits & RULE_RENJU:
        return Rule.RENJU
    if bits & RULE_EXACT_FIVE:
        return Rule.STANDARD
    return Rule.FREESTYLE


@dataclass
class TimeInfo:
    """What INFO said about time, in milliseconds (None: not sent)."""

    timeout_turn: int | None = None
    timeout_match: int | None = None
    time_left: int | None = None


@dataclass(frozen=True)
class Budget:
    max_visits: int
    max_time_ms: int
    timeout_s: float | None  # gRPC deadline; None lets the client pick


def search_budget(
    info: TimeInfo, default_visits: int = DEFAULT_VISITS, spent_ms: int = 0
) -> Budget:
    """The budget of one move; `spent_ms` of the turn have passed since the command came."""
    limits = []
    if info.timeout_turn is not None and info.timeout_turn > 0:
        limits.append(info.timeout_turn)
    timed_match = info.timeout_match is None or info.timeout_match > 0  # 0: no match limit
    if info.time_left is not None and timed_match:
        limits.append(max(0, info.time_left) // MOVES_LEFT_ESTIMATE)
    if not limits:
        visits = FAST_VISITS if info.timeout_turn == 0 else default_visits
        return Budget(max_visits=visits, max_time_ms=0, timeout_s=None)
    turn_ms = max(0, min(limits) - spent_ms)
    # the search overruns its time by up to one batch of evaluations (tens of ms on a CPU)
    reserve = min(MAX_RESERVE_MS, 150 + turn_ms // 6)
    search_ms = max(MIN_SEARCH_MS, min(MAX_SEARCH_MS, turn_ms - reserve))
    # what is left after the deadline plays the quick move and writes it: a 2-core machine under
    # load took over 100 ms for that, so a tenth of the turn, up to 300 ms
    answer_ms = min(ANSWER_RESERVE_MS, turn_ms // 10)
    deadline_ms = max(search_ms, min(turn_ms - answer_ms, search_ms + 10_000))
    return Budget(max_visits=0, max_time_ms=search_ms, timeout_s=deadline_ms / 1000)


# quick_move's weight of a five-window holding n stones of one colour and none of the other
# (n = 0..4), for each of its empty points: fuller windows dominate emptier ones
QUICK_WINDOW_WEIGHTS = np.array([1, 8, 64, 512, 4096], dtype=np.int64)
QUICK_ATTACK_BONUS = 2  # our own windows count double: of two equal shapes, extend ours


def quick_move(state: GomokuState, avoid: Collection[int] = ()) -> int:
    """A legal move for the side to move, found locally in milliseconds, for a turn whose
    search missed its deadline: our five if there is one, else block the opponent's, else the
    empty point in the most and fullest five-windows free of the other colour (ours counted
    double), the nearest to the centre among equals; never a point of `avoid` (winning-line
    squares) nor, under renju, a forbidden one. Raises ValueError when no point is left."""
    size = state.size
    allowed = state.legal_mask()  # empty points, renju's forbidden ones left out
    allowed[list(avoid)] = False
    if not allowed.any():
        raise ValueError("no legal point left")
    me = state.to_move
    them = opponent(me)
    for color in (me, them):  # our five, else their five blocked
        for point in state.winning_points(color):
            if allowed[point]:
                return point
    windows = five_windows(size)
    cells = state.board.reshape(-1)[windows]
    ours, theirs = (cells == me).sum(axis=1), (cells == them).sum(axis=1)
    attack = QUICK_ATTACK_BONUS * QUICK_WINDOW_WEIGHTS[np.minimum(ours, 4)]
    defence = QUICK_WINDOW_WEIGHTS[np.minimum(theirs, 4)]
    weight = np.where(theirs == 0, attack, 0) + np.where(ours == 0, defence, 0)
    score = np.zeros(size * size, dtype=np.float64)
    np.add.at(score, windows.reshape(-1), np.repeat(weight, 5))
    ys, xs = np.divmod(np.arange(size * size), size)
    centre = (size - 1) / 2
    score -= 1e-3 * np.hypot(xs - centre, ys - centre)  # ties: the nearest to the centre
    score[~allowed] = -np.inf
    return int(np.argmax(score))


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _parse_ints(text: str, count: int) -> list[int] | None:
    """`count` comma-separated integers in ASCII digits (blanks around each allowed), or None."""
    parts = text.split(",")
    values = [v for v in (ascii_int(p.strip()) for p in parts) if v is not None]
    return values if len(values) == len(parts) == count else None


class ProtocolError(Exception):
    """Bad input from the manager; the message becomes an `ERROR` line."""


# ---- the brain ---------------------------------------------------------------------------------
class Brain(SearchClientOwner):
    """The protocol state machine: `handle(line)` returns the lines to answer (maybe none).

    `client_factory()` makes the search client on first use (a `SearchClient` for `target`).
    """

    def __init__(
        self,
        target: str = SEARCH_TARGET,
        *,
        visits: int = DEFAULT_VISITS,
        debug: bool = False,
        sgf_dir: Path | None = None,
        client_factory: Any = None,
        rollout_lambda: float = 0.0,
        ponder: bool = False,
    ) -> None:
        super().__init__(target, client_factory)
        self.visits = visits
        self.rollout_lambda = rollout_lambda  # leaf values mixed with rollouts (0: none)
        self.ponder = ponder  # the service searches during the opponent's turn
        self.debug = debug
        self.sgf_dir = sgf_dir
        self.size: int | None = None
        self.moves: list[int] = []  # repository points, in play order, black first
        self.blocked: set[int] = set()  # continuous game: winning-line squares
        self.own_color: int | None = None
        self.rule_bits = 0
        self.time = TimeInfo()
        self.info: dict[str, str] = {}
        self.finished = False
        self._board: list[tuple[int, int, int]] | None = None  # BOARD records until DONE
        self._board_moves = True  # BOARD answers a move at DONE, YXBOARD does not
        self._received = time.monotonic()  # when the command being answered came in
        self._games_written = 0

    @property
    def rule(self) -> Rule:
        return rule_from_info(self.rule_bits)

    # -- dispatch --
    def handle(self, line: str) -> list[str]:
        """Answer one input line; never raises."""
        if self._board is None:  # the turn's clock starts with the command (BOARD: its first line)
            self._received = time.monotonic()
        try:
            return self._handle(line.strip())
        except ProtocolError as exc:
            return [f"ERROR {_one_line(exc)}"]
        except Exception as exc:  # the brain must outlive anything
            return [f"ERROR internal error: {type(exc).__name__}: {_one_line(exc)}"]

    def _handle(self, line: str) -> list[str]:
        if self._board is not None:
            return self._board_line(line)
        if not line:
            return []
        word, _, param = line.partition(" ")
        command = word.upper()
        param = param.strip()
        handler = getattr(self, f"_cmd_{command.lower()}", None)
        if handler is None or not command.isalpha():
            return [f"UNKNOWN command {word[:40]}"]
        return handler(param)

    def _require_start(self) -> int:
        if self.size is None:
            raise ProtocolError("no board: send START 15 first")
        return self.size

    # -- commands --
    def _cmd_start(self, param: str) -> list[str]:
        values = _parse_ints(param, 1)
        if values is None:
            raise ProtocolError("bad START parameter")
        return self._start(values[0], values[0])

    def _cmd_rectstart(self, param: str) -> list[str]:
        values = _parse_ints(param, 2)
        if values is None:
            raise ProtocolError("bad RECTSTART parameters")
        return self._start(*values)

    def _start(self, width: int, height: int) -> list[str]:
        self._save_game()
        if (width, height) != (SIZE, SIZE):
            self.size = None
            shape = str(width) if width == height else f"{width}x{height}"
            raise ProtocolError(f"unsupported size {shape}: {NAME} plays on {SIZE}x{SIZE} only")
        self.size = SIZE
        self._reset()
        self._warm_up()
        return ["OK"]

    def _warm_up(self) -> None:
        """A short search of the empty board at START, its answer unused and an error only
        logged (START answers OK either way): it connects the channel and warms a cold search
        service, whose first leaf batches would otherwise eat the first timed turn."""
        try:
            self._client_or_new().genmove([], rule=self.rule, max_time_ms=WARM_UP_MS,
                                          timeout=WARM_UP_TIMEOUT_S, reuse_tree=False)
        except grpc.RpcError as exc:
            logger.info("warm-up search at START failed (%s): %s", _code(exc),
                        _one_line(exc.details() if hasattr(exc, "details") else exc))

    def _cmd_restart(self, param: str) -> list[str]:
        self._require_start()
        self._save_game()
        self._reset()
        return ["OK"]

    def _cmd_begin(self, param: str) -> list[str]:
        self._require_start()
        return self._genmove()

    def _cmd_turn(self, param: str) -> list[str]:
        point = self._point(param)
        self._check_empty(point)
        self.moves.append(point)
        return self._genmove()

    def _cmd_play(self, param: str) -> list[str]:
        point = self._point(param)
        self._check_empty(point)
        self.own_color = BLACK if len(self.moves) % 2 == 0 else WHITE
        self.moves.append(point)
        return ["{},{}".format(*from_index(point, SIZE))]

    def _cmd_takeback(self, param: str) -> list[str]:
        point = self._point(param)
        if not self.moves or self.moves[-1] != point:
            raise ProtocolError(f"takeback of {param}: only the last move can be taken back")
        self.moves.pop()
        return ["OK"]

    def _cmd_board(self, param: str) -> list[str]:
        self._require_start()
        self._board = []
        self._board_moves = True
        return []

    def _cmd_yxboard(self, param: str) -> list[str]:
        self._require_start()
        self._board = []
        self._board_moves = False
        return self._board_line(param) if param else []

    def _cmd_yxnbest(self, param: str) -> list[str]:
        self._require_start()
        values = _parse_ints(param, 1)
        if values is None or values[0] < 1:
            raise ProtocolError(f"YXNBEST takes a number of moves >= 1, got {param[:40]!r}")
        return self._genmove(nbest=min(values[0], MAX_NBEST))

    def _cmd_yxshowforbid(self, param: str) -> list[str]:
        size = self._require_start()
        points: list[int] = []
        if self.rule is Rule.RENJU and len(self.moves) % 2 == 0:  # black to move
            state = GomokuState.from_moves([], size=size, rule=self.rule,
                                           setup_black=tuple(self.moves[0::2]),
                                           setup_white=tuple(self.moves[1::2]))
            points = sorted(renju.forbidden_points(state.board))
        cells = "".join("{:02d}{:02d}".format(*from_index(p, size)) for p in points)
        return [f"FORBID {cells}."]

    def _cmd_yxshowinfo(self, param: str) -> list[str]:
        return [f"MESSAGE {NAME} {app_version()}", "MESSAGE INFO MAX_THREAD_NUM 1",
                "MESSAGE INFO MAX_HASH_SIZE 0"]

    def _cmd_yxhashclear(self, param: str) -> list[str]:
        return ["MESSAGE nothing to clear: the brain keeps no hash table"]

    def _cmd_info(self, param: str) -> list[str]:
        key, _, value = param.partition(" ")
        key, value = key.lower(), value.strip()
        self.info[key] = value
        if key == ROLLOUT_LAMBDA_KEY:
            lam = ascii_decimal(value)
            if lam is None or not 0 <= lam <= 1:
                return [f"ERROR INFO {ROLLOUT_LAMBDA_KEY} takes a number in [0, 1], got "
                        f"{value!r}"]
            self.rollout_lambda = lam
            return []
        if key == PONDER_KEY:
            if value not in ("0", "1"):
                return [f"ERROR INFO {PONDER_KEY} takes 1 or 0, got {value!r}"]
            self.ponder = value == "1"
            return []
        number = ascii_int(value)
        if number is None:
            return []  # folder, evaluate and unknown keys are only stored
        if key == "timeout_turn":
            self.time.timeout_turn = number
        elif key == "timeout_match":
            self.time.timeout_match = number
        elif key == "time_left":
            self.time.time_left = number
        elif key == "rule":
            self.rule_bits = number
        return []

    def _cmd_about(self, param: str) -> list[str]:
        return [
            f'name="{NAME}", version="{app_version()}", author="{AUTHOR}", country="{COUNTRY}"'
        ]

    def _cmd_end(self, param: str) -> list[str]:
        self._save_game()
        self.finished = True
        self.close()
        return []

    # -- BOARD --
    def _board_line(self, line: str) -> list[str]:
        """BOARD records: one a line (YXBOARD: several on a line allowed), DONE at the end."""
        assert self._board is not None
        for word in line.split():
            if word.upper() == "DONE":
                records, self._board = self._board, None
                return self._set_board(records)
            values = _parse_ints(word, 3)
            if values is None or values[2] not in (OWN, OPPONENT, WINNING_LINE):
                self._board = None
                raise ProtocolError(f"x,y,field or DONE expected after BOARD, got {word[:40]!r}")
            self._board.append((values[0], values[1], values[2]))
        return []

    def _set_board(self, records: list[tuple[int, int, int]]) -> list[str]:
        own: list[int] = []
        opponent: list[int] = []
        blocked: set[int] = set()
        seen: set[int] = set()
        for px, py, who in records:
            point = self._point_xy(px, py)
            if point in seen:
                raise ProtocolError(f"BOARD gives {px},{py} twice")
            seen.add(point)
            if who == OWN:
                own.append(point)
            elif who == OPPONENT:
                opponent.append(point)
            else:
                blocked.add(point)
        if len(opponent) == len(own):
            black, white = own, opponent
        elif len(opponent) == len(own) + 1:
            black, white = opponent, own
        else:
            raise ProtocolError(
                f"BOARD has {len(own)} own and {len(opponent)} opponent stones: not a position "
                "with us to move (ours must equal theirs, or be one fewer)"
            )
        moves: list[int] = []
        for i, b in enumerate(black):
            moves.append(b)
            if i < len(white):
                moves.append(white[i])
        self.moves = moves
        self.blocked = blocked
        return self._genmove() if self._board_moves else []

    # -- helpers --
    def _point(self, param: str) -> int:
        self._require_start()
        values = _parse_ints(param, 2)
        if values is None:
            raise ProtocolError(f"bad coordinates {param[:40]!r}")
        return self._point_xy(*values)

    def _point_xy(self, px: int, py: int) -> int:
        size = self._require_start()
        if not (0 <= px < size and 0 <= py < size):
            raise ProtocolError(f"bad coordinates {px},{py}: off the {size}x{size} board")
        return to_index(px, py, size)

    def _check_empty(self, point: int) -> None:
        if point in self.moves or point in self.blocked:
            px, py = from_index(point, SIZE)
            raise ProtocolError(f"{px},{py} is occupied")

    def _reset(self) -> None:
        self.moves = []
        self.blocked = set()
        self.own_color = None
        self._board = None

    def _genmove(self, nbest: int = 0) -> list[str]:
        """Search and play our move; `nbest` > 0 (YXNBEST) first reports that many
        candidates as MESSAGE lines."""
        size = self._require_start()
        if len(self.moves) + len(self.blocked) >= size * size:
            raise ProtocolError("the board is full")
        spent_ms = int((time.monotonic() - self._received) * 1000)
        budget = search_budget(self.time, self.visits, spent_ms)
        history = [(p % size, p // size) for p in self.moves]
        started = time.monotonic()
        try:
            r = self._client_or_new().genmove(
                history,
                rule=self.rule,
                max_visits=budget.max_visits,
                max_time_ms=budget.max_time_ms,
                timeout=budget.timeout_s,
                rollout_lambda=self.rollout_lambda,
                ponder=self.ponder,
                **({"max_candidates": min(size * size, nbest + len(self.blocked))}
                   if nbest else {}),
            )
            point = r.move.y * size + r.move.x
            if point in self.blocked:  # the policy's best instead, within what is left
                left = (None if budget.timeout_s is None
                        else max(0.01, budget.timeout_s - (time.monotonic() - started)))
                point = self._unblocked_choice(r, history, left)
        except grpc.RpcError as exc:
            if _code(exc) == grpc.StatusCode.DEADLINE_EXCEEDED:
                return self._play_quick_move(budget)
            return [self._rpc_error(exc)]
        if not 0 <= point < size * size or point in self.moves:
            raise ProtocolError(f"the search service answered an illegal move {r.name!r}")
        self.own_color = BLACK if len(self.moves) % 2 == 0 else WHITE
        self.moves.append(point)
        px, py = from_index(point, size)
        out = self._nbest_lines(r, nbest) if nbest else []
        if self.debug:
            out.append(
                f"DEBUG {index_name(point, size)} visits {r.visits}/{r.total_visits} "
                f"value {r.value:+.3f} pv {' '.join(r.principal_variation_names)}"
            )
        out.append(f"{px},{py}")
        return out

    def _play_quick_move(self, budget: Budget) -> list[str]:
        """The turn's search missed its deadline: play `quick_move` instead of an ERROR."""
        size = SIZE
        try:
            state = GomokuState.from_moves(self.moves, size=size, rule=self.rule)
            point = quick_move(state, self.blocked)
        except ValueError as exc:
            raise ProtocolError(f"no move to play: {exc}") from exc
        logger.warning("the search gave no answer within %.2f s (%s); quick local move %s",
                       budget.timeout_s or 0.0, self.target, index_name(point, size))
        self.own_color = state.to_move
        self.moves.append(point)
        px, py = from_index(point, size)
        return ["MESSAGE the search gave no answer within the turn; played a quick local move",
                f"{px},{py}"]

    def _nbest_lines(self, r: Any, nbest: int) -> list[str]:
        """YXNBEST's MESSAGE lines: the search's candidates off the winning-line squares."""
        size = SIZE
        lines = []
        for c in r.candidates:
            if c.move.y * size + c.move.x in self.blocked:
                continue
            x, y = from_service(c.move.x, c.move.y, size)
            pv = " ".join("{},{}".format(*from_service(m.x, m.y, size))
                          for m in c.principal_variation)
            winrate = 50.0 * (1.0 + c.value)
            lines.append(f"MESSAGE ({len(lines) + 1}) {x},{y} visits {c.visits} "
                         f"winrate {winrate:.1f} prior {100.0 * c.prior:.1f} | {pv}")
            if len(lines) == nbest:
                break
        return lines

    def _unblocked_choice(self, r: Any, history: list[tuple[int, int]],
                          timeout_s: float | None) -> int:
        """The most visited candidate off the winning-line squares, else the policy's best
        (asked within `timeout_s`, the client's default when None)."""
        size = SIZE
        taken = self.blocked | set(self.moves)
        for c in getattr(r, "candidates", ()):
            p = c.move.y * size + c.move.x
            if p not in taken:
                return p
        k = min(size * size, len(taken) + 5)
        policy = self._client_or_new().predict(
            history, rule=self.rule, top_k=k,
            **({"timeout": timeout_s} if timeout_s is not None else {}))
        for m in policy.top_moves:
            p = m.point.y * size + m.point.x
            if p not in taken and m.probability > 0:
                return p
        raise ProtocolError("no legal point outside the winning-line squares")

    def _rpc_error(self, exc: Any) -> str:
        code = _code(exc)
        details = _one_line(exc.details() if hasattr(exc, "details") else exc)
        if code == grpc.StatusCode.UNAVAILABLE and not details.startswith("Triton"):
            return f"ERROR search service unavailable ({self.target}: {details[:200]})"
        name = code.name if code is not None else "RPC failed"
        return f"ERROR search failed: {name}: {details[:300]}"

    def _save_game(self) -> None:
        """With --sgf-dir, write the game so far (if any) as SGF; a failure only goes to stderr."""
        if self.sgf_dir is None or not self.moves:
            return
        from services.protocols.sgf_export import result_of

        try:
            state = GomokuState.from_moves(self.moves, rule=self.rule)
            result = result_of(state)
        except ValueError:
            result = None
        names = {BLACK: "opponent", WHITE: "opponent"}
        if self.own_color is not None:
            names[self.own_color] = NAME
        self._games_written += 1
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.sgf_dir / f"gomocup-{stamp}-{self._games_written}.sgf"
        try:
            write_sgf(
                path,
                self.moves,
                rule=self.rule,
                black=names[BLACK],
                white=names[WHITE],
                result=result,
                event="Gomocup protocol game",
            )
        except OSError as exc:  # stdout belongs to the protocol
            print(f"movepred: could not write {path}: {exc}", file=sys.stderr)


def _code(exc: Any) -> grpc.StatusCode | None:
    return exc.code() if hasattr(exc, "code") else None


def serve(brain: Brain, stdin: TextIO, stdout: TextIO) -> int:
    """Read commands until END or end of input; every answer line is flushed at once."""
    return serve_lines(brain, stdin, stdout,
                       lambda line: (reply + "\n" for reply in brain.handle(line)))


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m services.protocols.gomocup",
        description="Gomocup/Piskvork protocol brain backed by the movepred search service.",
    )
    p.add_argument("--target", default=SEARCH_TARGET, help="search service host:port")
    p.add_argument(
        "--visits",
        type=bounded(int, 0, MAX_VISITS),  # the service's limit: beyond it every move fails
        default=DEFAULT_VISITS,
        help=f"visits per move when INFO gives no time limit (default {DEFAULT_VISITS})",
    )
    p.add_argument("--debug", action="store_true", help="send a DEBUG line before each move")
    p.add_argument("--sgf-dir", type=Path, default=None, help="write every game here as SGF")
    p.add_argument("--rollout-lambda", type=bounded(float, 0, 1), default=0.0,
                   help="leaf values (1 - L) v + L z: v the value network's, z a fast "
                        f"rollout's (default 0; INFO {ROLLOUT_LAMBDA_KEY} sets it too)")
    p.add_argument("--ponder", action="store_true",
                   help="the search service searches during the opponent's turn, the next "
                        f"TURN continuing that tree (INFO {PONDER_KEY} 1/0 sets it too)")
    auth.add_client_arguments(p)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None,
         stdout: TextIO | None = None) -> int:
    """Run the brain on `stdin`/`stdout` (the process's by default)."""
    from services.search.client import search_client_factory

    args = _parse_args(argv)
    try:
        factory = search_client_factory(args)
    except auth.AuthConfigError as exc:  # stdout belongs to the protocol
        print(f"movepred gomocup: error: {exc}", file=sys.stderr)
        return 2
    brain = Brain(args.target, visits=args.visits, debug=args.debug, sgf_dir=args.sgf_dir,
                  client_factory=factory, rollout_lambda=args.rollout_lambda,
                  ponder=args.ponder)
    return serve(brain, stdin or sys.stdin, stdout or sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
