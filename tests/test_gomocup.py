"""The Gomocup/Piskvork brain: coordinates, parsing, and whole sessions against the real service.

First part (always runs): coordinate conversion, rule and budget mapping, the protocol state
machine on inputs that never reach the service, and a brain subprocess whose search service is
a closed port (ERROR lines, the process keeps answering).

Second part (skipped without a ``tritonserver`` binary): a real Triton serving the tiny policy
of `tests.triton_fixtures`, a real search service in-process, and the brain driven through a
pipe as a manager would (``python -m services.protocols.gomocup``) and in-process.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import grpc
import pytest

from services.coords import index_name, parse_point
from services.games.gomoku.rules import GomokuState, Rule
from services.protocols.gomocup import (
    FAST_VISITS,
    Brain,
    TimeInfo,
    from_index,
    from_service,
    quick_move,
    rule_from_info,
    search_budget,
    to_index,
    to_service,
)
from services.search.client import SearchClient
from tests.service_pipe import ServicePipe
from tests.test_mcts import state_from_ascii
from tests.triton_fixtures import search_service, triton_server  # noqa: F401  (fixtures)

MOVE = re.compile(r"^(\d+),(\d+)$")
ABOUT = re.compile(
    r'^name="movepred", version="[^"]+", author="[^"]+", country="[^"]+"$'
)


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.RpcError:
    """The error a failed call of a search client raises, with its code and details."""
    error = grpc.RpcError(details)
    error.code = lambda: code
    error.details = lambda: details
    return error


def parse_move(reply: str) -> tuple[int, int]:
    m = MOVE.match(reply)
    assert m, f"expected x,y, got {reply!r}"
    x, y = int(m.group(1)), int(m.group(2))
    assert 0 <= x < 15 and 0 <= y < 15, reply
    return x, y


# --------------------------------------------------------------------------- coordinates, rules


def test_coordinates_piskvork_top_left_vs_service_bottom_left() -> None:
    assert to_service(0, 0) == (0, 14)  # Piskvork's top-left corner is a15
    assert to_service(0, 14) == (0, 0)  # its bottom-left corner is a1
    assert to_service(14, 0) == (14, 14)
    assert to_service(3, 12) == (3, 2)
    assert index_name(to_index(0, 0), 15) == "a15"
    assert index_name(to_index(0, 14), 15) == "a1"
    assert index_name(to_index(7, 7), 15) == "h8"  # the centre stays the centre
    assert index_name(to_index(3, 12), 15) == "d3"
    assert index_name(to_index(11, 2), 15) == "l13"
    assert from_index(parse_point("l13", 15)[1] * 15 + 11) == (11, 2)
    for px in range(15):
        for py in range(15):
            assert from_service(*to_service(px, py)) == (px, py)
            assert from_index(to_index(px, py)) == (px, py)
    assert sorted(to_index(px, py) for px in range(15) for py in range(15)) == list(range(225))


@pytest.mark.parametrize(
    ("bits", "rule"),
    [
        (0, Rule.FREESTYLE),
        (1, Rule.STANDARD),  # exactly five
        (2, Rule.FREESTYLE),  # continuous game
        (3, Rule.STANDARD),
        (4, Rule.RENJU),
        (5, Rule.RENJU),
        (8, Rule.FREESTYLE),  # caro: not served
    ],
)
def test_rule_bitmask(bits: int, rule: Rule) -> None:
    assert rule_from_info(bits) is rule


def test_search_budget() -> None:
    b = search_budget(TimeInfo(), 123)
    assert (b.max_visits, b.max_time_ms, b.timeout_s) == (123, 0, None)
    fast = search_budget(TimeInfo(timeout_turn=0))
    assert (fast.max_visits, fast.max_time_ms) == (FAST_VISITS, 0)
    turn = search_budget(TimeInfo(timeout_turn=5000))
    assert turn.max_visits == 0 and turn.max_time_ms == 5000 - 983
    assert turn.timeout_s == 4.7  # the gRPC deadline leaves 300 ms of the turn for the answer
    # a timed match spends at most time_left / 15 on one move
    left = search_budget(TimeInfo(timeout_turn=30000, timeout_match=180000, time_left=15000))
    assert left.max_time_ms == 1000 - 316
    # timeout_match 0 means no match limit: time_left does not count
    free = search_budget(TimeInfo(timeout_turn=2000, timeout_match=0, time_left=100))
    assert free.max_time_ms == 2000 - 483
    assert free.timeout_s == 1.8  # a tenth of a short turn is kept for the answer
    late = search_budget(TimeInfo(timeout_turn=5000), spent_ms=1000)  # the turn began earlier
    assert (late.max_time_ms, late.timeout_s) == (4000 - 816, 3.7)
    tiny = search_budget(TimeInfo(timeout_turn=10))
    assert (tiny.max_time_ms, tiny.timeout_s) == (20, 0.02)  # never below 20 ms
    assert search_budget(TimeInfo(timeout_turn=10**7)).max_time_ms == 60_000  # server limit


# --------------------------------------------------------------------------- protocol, no service


@pytest.fixture
def offline() -> Brain:
    """A brain whose search service does not exist (only commands that never search)."""
    return Brain(f"127.0.0.1:{closed_port()}")


def test_start_sizes_and_commands_before_start(offline: Brain) -> None:
    b = offline
    assert b.handle("BEGIN")[0].startswith("ERROR no board")
    assert b.handle("START 20") == ["ERROR unsupported size 20: movepred plays on 15x15 only"]
    assert b.handle("TURN 1,1")[0].startswith("ERROR no board")
    assert b.handle("START x")[0] == "ERROR bad START parameter"
    assert b.handle("RECTSTART 15,20")[0].startswith("ERROR unsupported size 15x20")
    assert b.handle("RECTSTART 15,15") == ["OK"]
    assert b.handle("start 15\r\n") == ["OK"]  # case-insensitive, CR LF tolerated
    assert b.handle("RESTART") == ["OK"]
    assert b.handle("") == [] and b.handle("   ") == []


def test_start_warms_the_service_with_a_short_search_and_answers_ok_if_it_fails() -> None:
    """START searches the empty board briefly (its answer unused): a cold service pays its
    first batches there, not in the first timed turn; an error there still answers OK."""
    class Recording:
        def __init__(self, fail: bool) -> None:
            self.calls: list[tuple] = []
            self.fail = fail

        def genmove(self, moves, **kwargs):
            self.calls.append((list(moves), kwargs))
            if self.fail:
                raise rpc_error(grpc.StatusCode.UNAVAILABLE, "connection refused")

    for fail in (False, True):
        client = Recording(fail)
        brain = Brain("127.0.0.1:1", client_factory=lambda c=client: c)
        assert brain.handle("START 15") == ["OK"]
        ((moves, kwargs),) = client.calls
        assert moves == [] and 0 < kwargs["max_time_ms"] <= 1000
        assert kwargs["timeout"] <= 5 and kwargs["reuse_tree"] is False
        assert brain.handle("RESTART") == ["OK"] and len(client.calls) == 1


def test_info_is_silent_and_stored(offline: Brain) -> None:
    b = offline
    assert b.handle("START 15") == ["OK"]
    for line in [
        "INFO timeout_turn 1500",
        "INFO timeout_match 180000",
        "INFO time_left 90000",
        "INFO max_memory 83886080",
        "INFO game_type 1",
        "INFO rule 4",
        "INFO evaluate 3,4",
        "INFO folder C:\\some folder\\x",
        "INFO something_new 42",
        "INFO rule",
    ]:
        assert b.handle(line) == [], line
    assert b.time == TimeInfo(timeout_turn=1500, timeout_match=180000, time_left=90000)
    assert b.rule is Rule.RENJU
    assert b.info["folder"] == "C:\\some folder\\x"
    b.handle("INFO rule 1")
    assert b.rule is Rule.STANDARD
    for odd in ("１５００", "1_500", " ", "²", "1e3"):  # what int() reads or chokes on: stored only
        assert b.handle(f"INFO timeout_turn {odd}") == [] and b.handle(f"INFO rule {odd}") == []
    assert b.time.timeout_turn == 1500 and b.rule is Rule.STANDARD


def test_about_unknown_play_takeback(offline: Brain) -> None:
    b = offline
    assert ABOUT.match(b.handle("ABOUT")[0])
    assert b.handle("FOO 1,2")[0].startswith("UNKNOWN")
    assert b.handle("SWAP2BOARD")[0].startswith("UNKNOWN")
    assert b.handle("START 15") == ["OK"]
    assert b.handle("PLAY 7,7") == ["7,7"]  # the manager plays for us
    assert b.moves == [to_index(7, 7)] and b.own_color == 1
    assert b.handle("PLAY 7,7") == ["ERROR 7,7 is occupied"]
    assert b.handle("TURN 15,3")[0].startswith("ERROR bad coordinates 15,3")
    assert b.handle("TURN 3")[0].startswith("ERROR bad coordinates")
    for bad in ("1_0,3", "\u0667,7", "7,\uff17"):  # `int` reads these as 10 and 7
        assert b.handle(f"TURN {bad}")[0].startswith("ERROR bad coordinates"), bad
    assert b.handle("TURN 7,7") == ["ERROR 7,7 is occupied"]
    assert b.moves == [to_index(7, 7)]  # rejected moves are not recorded
    assert b.handle("TAKEBACK 1,1")[0].startswith("ERROR takeback of 1,1")
    assert b.handle("TAKEBACK 7,7") == ["OK"] and b.moves == []
    assert b.handle("END") == [] and b.finished


def test_board_errors(offline: Brain) -> None:
    b = offline
    assert b.handle("START 15") == ["OK"]
    assert b.handle("BOARD") == []
    assert b.handle("7,7,1") == []
    assert b.handle("7,7") == ["ERROR x,y,field or DONE expected after BOARD, got '7,7'"]
    assert b.handle("ABOUT")[0].startswith("name=")  # back out of BOARD mode
    for lines, message in [
        (["7,7,1", "7,7,2"], "ERROR BOARD gives 7,7 twice"),
        (["7,7,1", "8,8,1"], "ERROR BOARD has 2 own and 0 opponent stones"),
        (["7,7,2", "8,8,2"], "ERROR BOARD has 0 own and 2 opponent stones"),
        (["15,0,2"], "ERROR bad coordinates 15,0"),
    ]:
        b.handle("BOARD")
        replies = [r for line in [*lines, "DONE"] for r in b.handle(line)]
        assert replies and replies[0].startswith(message), (lines, replies)
    assert b.handle("BOARD") == [] and b.handle("7,7,4")[0].startswith("ERROR x,y,field")
    assert b.handle("7,7,1")[0].startswith("UNKNOWN")  # BOARD mode ended with the error


# ---------------------------------------------------------------------- a turn the search misses


# Black (ours) to move with an open two on row 7 and one on column 8 meeting at 8,7, white's
# stones in the corners: 8,7 makes two open threes, the best point, forbidden under renju.
CROSSING_TWOS = ["6,7,1", "0,0,2", "7,7,1", "14,0,2", "8,9,1", "0,14,2", "8,8,1", "14,14,2"]
QUICK_MESSAGE = "MESSAGE the search gave no answer within the turn; played a quick local move"


class DeadlineMissed:
    """A search client whose every GenMove misses its deadline, as on a starved machine."""

    def __init__(self) -> None:
        self.calls = 0

    def genmove(self, moves, **kwargs):
        self.calls += 1
        raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    def close(self) -> None:
        pass


def test_a_turn_the_search_misses_is_played_locally_not_answered_with_error() -> None:
    """A manager counts an ERROR answer to a move as a crash: a missed deadline must still
    give a legal, sensible move (and say so in a MESSAGE line)."""
    client = DeadlineMissed()
    brain = Brain("127.0.0.1:1", client_factory=lambda: client)
    assert brain.handle("START 15") == ["OK"]  # its warm-up search misses too: still OK
    brain.handle("INFO timeout_turn 1000")
    assert brain.handle("BEGIN") == [QUICK_MESSAGE, "7,7"]  # the centre of the empty board
    assert brain.moves == [to_index(7, 7)] and brain.own_color == 1
    replies = brain.handle("TURN 8,8")
    assert replies[0] == QUICK_MESSAGE and len(replies) == 2
    assert to_index(*parse_move(replies[1])) not in (to_index(7, 7), to_index(8, 8))
    assert len(brain.moves) == 3 and brain.own_color == 1
    # the opponent's four is blocked without the search
    assert brain.handle("RESTART") == ["OK"]
    replies = [r for line in ["BOARD", *FOUR_AS_WHITE, "DONE"] for r in brain.handle(line)]
    assert replies == [QUICK_MESSAGE, "7,12"] and brain.own_color == 2
    # renju: black's double-three point is never played, though it is freestyle's best
    for rule, forbidden_expected in ((0, True), (4, False)):
        brain.handle(f"INFO rule {rule}")
        replies = [r for line in ["BOARD", *CROSSING_TWOS, "DONE"] for r in brain.handle(line)]
        assert (replies[-1] == "8,7") is forbidden_expected, (rule, replies)
    # continuous game: a winning-line square (field 3) is never answered
    brain.handle("INFO rule 0")
    replies = [r for line in ["BOARD", *CROSSING_TWOS, "8,7,3", "DONE"]
               for r in brain.handle(line)]
    assert replies[0] == QUICK_MESSAGE and replies[-1] != "8,7"
    assert client.calls == 7  # START's warm-up, then one GenMove per move


def test_a_policy_fallback_that_misses_the_turn_is_played_locally_too() -> None:
    """The search's move is a winning-line square and it gave no other candidate: the policy
    is asked within what is left of the turn, and if that misses too, the quick move plays."""
    from types import SimpleNamespace

    class BlockedThenSlow(DeadlineMissed):
        def __init__(self) -> None:
            super().__init__()
            self.predict_timeouts: list[float] = []

        def genmove(self, moves, **kwargs):
            self.calls += 1
            x, y = to_service(7, 7)
            return SimpleNamespace(move=SimpleNamespace(x=x, y=y), candidates=(), name="h8")

        def predict(self, moves, **kwargs):
            self.predict_timeouts.append(kwargs["timeout"])
            return DeadlineMissed.genmove(self, moves)

    client = BlockedThenSlow()
    brain = Brain("127.0.0.1:1", client_factory=lambda: client)
    assert brain.handle("START 15") == ["OK"]
    brain.handle("INFO timeout_turn 1000")
    replies = [r for line in ["BOARD", "7,7,3", "DONE"] for r in brain.handle(line)]
    assert replies[0] == QUICK_MESSAGE and replies[1] != "7,7", replies
    assert len(client.predict_timeouts) == 1 and 0 < client.predict_timeouts[0] < 1.0


def test_quick_move_wins_then_blocks_then_builds() -> None:
    empty = state_from_ascii("\n".join(["." * 15] * 15))
    assert quick_move(empty) == to_index(7, 7)
    # each side has an open four; the side to move completes its own five
    fours = """
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . O O O O . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . X X X X . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . {last}
    """
    black_to_move = state_from_ascii(fours.format(last="."))
    assert quick_move(black_to_move) in (6 * 15 + 3, 6 * 15 + 8)  # row 6 from the bottom
    white_to_move = state_from_ascii(fours.format(last="X"))
    assert quick_move(white_to_move) in (8 * 15 + 3, 8 * 15 + 8)
    # white's four on row 8 only: black blocks it rather than making a four of its three
    black_blocks = state_from_ascii("""
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . O O O O . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . X X X . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        X . . . . . . . . . . . . . .
    """)
    assert quick_move(black_blocks) in (8 * 15 + 3, 8 * 15 + 8)
    # a point to avoid is never chosen; with every empty point avoided there is no move
    assert quick_move(empty, avoid={to_index(7, 7)}) != to_index(7, 7)
    with pytest.raises(ValueError, match="no legal point"):
        quick_move(empty, avoid=set(range(225)))


class Pipe(ServicePipe):
    """The brain as a manager sees it: a subprocess spoken to through stdin/stdout."""

    def __init__(self, target: str, *extra: str) -> None:
        # the manager ends lines with CR LF
        super().__init__("services.protocols.gomocup", "--target", target, *extra,
                         line_end="\r\n")

    def ask(self, *lines: str, timeout: float = 60.0) -> str:
        self.send(*lines)
        return self.line(timeout)

    def ask_move(self, *lines: str, timeout: float = 60.0) -> str:
        """The answer after the MESSAGE lines a manager shows and skips (all within `timeout`)."""
        self.send(*lines)
        while (line := self.line(timeout)).startswith("MESSAGE "):
            pass
        return line


def test_dead_service_gives_error_lines_and_the_brain_keeps_running() -> None:
    pipe = Pipe(f"127.0.0.1:{closed_port()}")
    try:
        assert pipe.ask("START 15") == "OK"
        reply = pipe.ask("BEGIN", timeout=10)  # an answer, not a hang on the dead service
        assert reply.startswith("ERROR search service unavailable"), reply
        assert pipe.ask("TURN 7,7").startswith("ERROR search service unavailable")
        assert pipe.ask("BOARD", "7,7,2", "DONE").startswith("ERROR search service unavailable")
        assert ABOUT.match(pipe.ask("ABOUT"))  # still alive and answering
        assert pipe.ask("RESTART") == "OK"
        pipe.send("END")
        assert pipe.proc.wait(10) == 0
    finally:
        pipe.close()


# Black to move under renju with an open two on row 7 and one on column 8 (Piskvork
# coordinates): 8,7 would make a double three, forbidden; white's stones are far away.
DOUBLE_THREE_BOARD = ["6,7,1", "0,14,2", "7,7,1", "0,12,2", "8,9,1", "0,10,2", "8,8,1", "0,8,2"]


def test_yixin_board_and_forbidden_points_over_a_pipe() -> None:
    """YXBOARD sets a position without a move; YXSHOWFORBID lists black's forbidden points as
    Yixin-Board reads them (no search: the service may be down)."""
    pipe = Pipe(f"127.0.0.1:{closed_port()}")
    try:
        assert pipe.ask("START 15") == "OK"
        assert re.fullmatch(r"MESSAGE movepred \S+", pipe.ask("YXSHOWINFO"))
        assert [pipe.line(), pipe.line()] == ["MESSAGE INFO MAX_THREAD_NUM 1",
                                              "MESSAGE INFO MAX_HASH_SIZE 0"]
        assert pipe.ask("YXHASHCLEAR").startswith("MESSAGE ")
        pipe.send("INFO rule 4", "YXBOARD", *DOUBLE_THREE_BOARD, "DONE")  # no answer to these
        assert pipe.ask("YXSHOWFORBID") == "FORBID 0807."
        pipe.send("INFO rule 0")  # freestyle: nothing is forbidden
        assert pipe.ask("YXSHOWFORBID") == "FORBID ."
        # the records on YXBOARD's own line; white to move: nothing is forbidden for white
        white_to_move = [r[:-1] + ("2" if r.endswith("1") else "1") for r in DOUBLE_THREE_BOARD]
        pipe.send("INFO rule 4", "YXBOARD " + " ".join(white_to_move[:-1]) + " DONE")
        assert pipe.ask("YXSHOWFORBID") == "FORBID ."
        pipe.send("YXBOARD " + " ".join(DOUBLE_THREE_BOARD) + " DONE")
        assert pipe.ask("YXSHOWFORBID") == "FORBID 0807."
        assert pipe.ask("YXNBEST 0").startswith("ERROR YXNBEST takes")
        assert pipe.ask("YXNBEST 2").startswith("ERROR search service unavailable")
        assert pipe.ask("YXBOARD 7,7,5 DONE").startswith("ERROR x,y,field")
        pipe.send("END")
        assert pipe.proc.wait(10) == 0
    finally:
        pipe.close()


# --------------------------------------------------------------------------- with real Triton


# An opponent four on Piskvork row 12 (d3-g3 in RenjuNet names), closed on the left by our
# stone at 2,12 (c3): the only defence is 7,12 (h3). Piskvork lines in move order.
FOUR_AS_WHITE = ["3,12,2", "2,12,1", "4,12,2", "10,0,1", "5,12,2", "12,0,1", "6,12,2"]
FOUR_AS_BLACK = ["2,12,1", "3,12,2", "10,0,1", "4,12,2", "12,0,1", "5,12,2", "14,0,1", "6,12,2"]


# what a loaded shared machine may add to a turn's answer beyond the brain's own reserve
SCHEDULING_SLACK_S = 2.0


@pytest.mark.timeout(240)
def test_session_over_a_pipe(service: str) -> None:
    pipe = Pipe(service)
    try:
        assert pipe.ask("START 20").startswith("ERROR unsupported size")
        assert pipe.ask("START 15") == "OK"
        pipe.send(
            "INFO timeout_turn 2000",
            "INFO timeout_match 0",
            "INFO max_memory 83886080",
            "INFO game_type 1",
            "INFO rule 0",
            "INFO folder /tmp",
        )
        assert ABOUT.match(pipe.ask("ABOUT"))  # the next line answers ABOUT: INFO said nothing
        # BEGIN: we are black on the empty board; the search is timed by INFO timeout_turn
        moves: list[int] = []
        # the answer comes within the turn, as the manager requires; how much of the turn the
        # search gets is search_budget's (test_search_budget), that the search stops at its
        # budget is the search's own test (tests/test_mcts.py, on a fake clock), and that a
        # missed deadline still plays a move is test_a_turn_the_search_misses_...; here the
        # wait allows the turn plus SCHEDULING_SLACK_S, as a loaded CI machine can stall any
        # process for more than the brain's reserve
        first = parse_move(pipe.ask_move("BEGIN", timeout=2.0 + SCHEDULING_SLACK_S))
        moves.append(to_index(*first))
        # a 1 ms turn: the search misses it (or just makes it); either way a move, no ERROR
        pipe.send("INFO timeout_turn 1")
        moves.append(to_index(14, 14))
        ours = parse_move(pipe.ask_move("TURN 14,14", timeout=SCHEDULING_SLACK_S))
        assert to_index(*ours) not in moves, (ours, moves)
        moves.append(to_index(*ours))
        # timeout_turn 0 asks for speed; every answer is legal and on an empty point
        pipe.send("INFO timeout_turn 0")
        for opp in ["0,0", "14,0", "0,14"]:
            if to_index(*parse_move(opp)) in moves:
                continue
            moves.append(to_index(*parse_move(opp)))
            ours = parse_move(pipe.ask(f"TURN {opp}"))
            assert to_index(*ours) not in moves, (ours, moves)
            moves.append(to_index(*ours))
        GomokuState.from_moves(moves)  # a legal game
        assert pipe.ask("XYZZY").startswith("UNKNOWN")
        # a new game given as BOARD: the opponent's four must be blocked
        assert pipe.ask("RESTART") == "OK"
        assert pipe.ask("BOARD", *FOUR_AS_WHITE, "DONE") == "7,12"
        assert pipe.ask("TAKEBACK 7,12") == "OK"
        pipe.send("END")
        assert pipe.proc.wait(10) == 0
    finally:
        pipe.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("records", "color"),
    [
        (FOUR_AS_BLACK, 1),
        (FOUR_AS_WHITE, 2),
        # a freestyle manager may send the stones in any order: ours first, then theirs
        (sorted(FOUR_AS_WHITE, key=lambda r: (r[-1], r)), 2),
        (list(reversed(FOUR_AS_BLACK)), 1),
    ],
    ids=["black", "white", "grouped", "reversed"],
)
def test_board_four_is_blocked(service: str, records: list[str], color: int) -> None:
    brain = Brain(service, visits=64)
    try:
        assert brain.handle("START 15") == ["OK"]
        replies = [r for line in ["BOARD", *records, "DONE"] for r in brain.handle(line)]
        assert replies == ["7,12"]
        assert brain.own_color == color
        names = {index_name(p, 15) for p in brain.moves}
        assert {"d3", "e3", "f3", "g3", "c3", "h3"} <= names  # Piskvork y=12 is row 3
        state = GomokuState.from_moves(brain.moves)  # the interleaved order is a legal game
        assert state.winner == 0 and len(state.moves) == len(records) + 1
    finally:
        brain.close()


@pytest.mark.timeout(240)
def test_renju_rule_and_debug_line(service: str) -> None:
    brain = Brain(service, visits=32, debug=True)
    try:
        assert brain.handle("START 15") == ["OK"]
        assert brain.handle("INFO rule 4") == []
        debug, move = brain.handle("TURN 7,7")
        assert debug.startswith("DEBUG ") and "visits" in debug
        parse_move(move)
        replies = brain.handle("TURN 8,8")
        GomokuState.from_moves(brain.moves, rule=Rule.RENJU)
        assert len(replies) == 2 and brain.own_color == 2
    finally:
        brain.close()


@pytest.mark.timeout(240)
def test_winning_line_squares_are_never_answered(service: str) -> None:
    # the service's own choice on an empty board, then the same board with that square marked 3
    with SearchClient(service) as client:
        r = client.genmove([], max_visits=32)
    px, py = from_service(r.move.x, r.move.y)
    brain = Brain(service, visits=32)
    try:
        brain.handle("START 15")
        brain.handle("INFO rule 2")
        replies = [r for line in ["BOARD", f"{px},{py},3", "DONE"] for r in brain.handle(line)]
        assert len(replies) == 1 and parse_move(replies[0]) != (px, py)
    finally:
        brain.close()


class NoCandidates:
    """The real client, with GenMove's candidate list dropped (as an older server sends it)."""

    def __init__(self, target: str) -> None:
        self.client = SearchClient(target)
        self.predicts = 0

    def genmove(self, *args, **kwargs):
        r = self.client.genmove(*args, **kwargs)
        r.ClearField("candidates")
        return r

    def predict(self, *args, **kwargs):
        self.predicts += 1
        return self.client.predict(*args, **kwargs)

    def close(self) -> None:
        self.client.close()


@pytest.mark.timeout(240)
def test_winning_line_fallback_asks_the_policy(service: str) -> None:
    with SearchClient(service) as client:
        r = client.genmove([], max_visits=16)
    blocked = from_service(r.move.x, r.move.y)
    fake = NoCandidates(service)
    brain = Brain(service, visits=16, client_factory=lambda: fake)
    try:
        brain.handle("START 15")
        lines = ["BOARD", "{},{},3".format(*blocked), "DONE"]
        replies = [r for line in lines for r in brain.handle(line)]
        assert len(replies) == 1 and parse_move(replies[0]) != blocked
        assert fake.predicts == 1
    finally:
        brain.close()


def test_sgf_dir_keeps_every_game(tmp_path: Path) -> None:
    from sgfmill import sgf

    brain = Brain(f"127.0.0.1:{closed_port()}", sgf_dir=tmp_path / "games")
    assert brain.handle("START 15") == ["OK"]
    assert brain.handle("RESTART") == ["OK"]  # nothing played: nothing written
    assert brain.handle("PLAY 7,7") == ["7,7"]
    assert brain.handle("RESTART") == ["OK"]
    assert brain.handle("TURN 0,0")[0].startswith("ERROR search service unavailable")
    assert brain.handle("PLAY 1,0") == ["1,0"]  # we are white in this one
    assert brain.handle("END") == []
    first, second = sorted((tmp_path / "games").glob("*.sgf"), key=lambda p: p.name[-5])
    game = sgf.Sgf_game.from_bytes(first.read_bytes())
    assert game.get_root().get("PB") == "movepred" and game.get_root().get("PW") == "opponent"
    assert [n.get_move() for n in game.get_main_sequence()[1:]] == [("b", (7, 7))]
    game = sgf.Sgf_game.from_bytes(second.read_bytes())
    assert game.get_root().get("PW") == "movepred" and game.get_root().get("PB") == "opponent"
    moves = [n.get_move() for n in game.get_main_sequence()[1:]]
    assert moves == [("b", (14, 0)), ("w", (14, 1))]  # Piskvork row 0 is the top row (14)


NBEST = re.compile(r"^MESSAGE \((\d+)\) (\d+),(\d+) visits (\d+) winrate (\d+\.\d) "
                   r"prior (\d+\.\d) \| (\d+,\d+(?: \d+,\d+)*)$")


@pytest.mark.timeout(240)
def test_yxnbest_reports_the_best_moves_then_plays_the_first(service: str) -> None:
    pipe = Pipe(service)
    try:
        assert pipe.ask("START 15") == "OK"
        pipe.send("INFO timeout_turn 0", "YXBOARD", "7,7,2", "DONE")  # we are white
        pipe.send("YXNBEST 3")
        lines = [pipe.line(60) for _ in range(4)]
        found = [NBEST.match(line) for line in lines[:3]]
        assert all(found), lines
        assert [int(m.group(1)) for m in found if m] == [1, 2, 3]
        points = [(int(m.group(2)), int(m.group(3))) for m in found if m]
        assert len(set(points)) == 3 and (7, 7) not in points  # three empty points
        visits = [int(m.group(4)) for m in found if m]
        assert visits == sorted(visits, reverse=True) and visits[0] > 0
        for m in found:
            assert m is not None and m.group(7).split()[0] == f"{m.group(2)},{m.group(3)}"
            assert 0.0 <= float(m.group(5)) <= 100.0 and 0.0 <= float(m.group(6)) <= 100.0
        assert parse_move(lines[3]) == points[0]  # the answer: the best move, played
        assert pipe.ask(f"TURN {points[0][0]},{points[0][1]}").startswith("ERROR")  # occupied
    finally:
        pipe.close()
