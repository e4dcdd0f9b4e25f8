"""The GTP engine (`movepred gtp`): protocol, rules, positions sent to the service, and games.

First part (always runs): GTP framing (ids, comments, errors), board commands and the rules
(occupied, suicide, ko), undo, final_score, the Position sent for non-alternating histories,
SGF output, and an engine whose search service is a closed port (it answers ``?`` and goes on).

Analysis (lz-analyze, kata-analyze), the clock (time_settings, time_left) and cleanup are checked
offline for their arguments and rules, and over a pipe as Lizzie and Sabaki drive them: the
info lines parsed with a regex built from the documented grammar (KataGo's GTP_Extensions.md,
Sabaki's engine-analysis-integration.md), stopped by the next command.

Second part (skipped without a ``tritonserver`` binary): a real Triton serving an untrained
``go_res_b2c32`` as ``go_policy`` and a real search service in-process; the engine driven
in-process (19x19 and 9x9) and as a ``movepred gtp`` subprocess over a pipe, and one short game
against GNU Go on 19x19 and one on 9x9 through benchmarks/go_match.py (skipped when gnugo is not
installed).
"""

from __future__ import annotations

import importlib.util
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services import cli
from services.api.movepred.v1 import search_pb2
from services.games.go.game import parse_vertex, vertex
from services.games.go.rules import BLACK, WHITE, GoState
from services.protocols.go_cleanup import capture_move, dead_chains
from services.protocols.gtp import COMMANDS, GtpEngine, build_position, score_text
from services.protocols.gtp_analysis import (
    AnalysisStream,
    AnalyzeArgsError,
    kata_line,
    parse_analyze_args,
)
from services.protocols.gtp_clock import GtpClock
from services.records.sgf_writer import go_sgf
from services.search import validation
from tests.service_pipe import ServicePipe

ROOT = Path(__file__).resolve().parents[1]


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def engine() -> Iterator[GtpEngine]:
    e = GtpEngine(f"127.0.0.1:{closed_port()}", visits=8, timeout_s=5)
    yield e
    e.close()


def _text(answer: str | None, status: str) -> str:
    """The answer's text, without the status character, the id and the final blank line."""
    assert answer is not None and answer.startswith(status) and answer.endswith("\n\n"), answer
    match = re.match(r"^.(\d*)(.*)$", answer, re.DOTALL)
    assert match is not None
    return match.group(2).strip()


def ok(answer: str | None) -> str:
    return _text(answer, "=")


def fails(answer: str | None) -> str:
    return _text(answer, "?")


# --------------------------------------------------------------------------- protocol


def test_framing_ids_comments_and_admin_commands(engine: GtpEngine) -> None:
    assert engine.handle("") is None and engine.handle("   # just a comment") is None
    assert engine.handle("protocol_version") == "= 2\n\n"
    assert engine.handle("7 name # trailing comment") == "=7 movepred\n\n"
    assert engine.handle("\tname\r\n") == "= movepred\n\n"
    assert ok(engine.handle("version"))
    assert engine.handle("8 known_command genmove") == "=8 true\n\n"
    assert engine.handle("known_command fly") == "= false\n\n"
    assert ok(engine.handle("list_commands")).split("\n") == list(COMMANDS)
    assert engine.handle("9 fly") == "?9 unknown command\n\n"
    assert fails(engine.handle("boardsize 25")) == "unacceptable size"
    assert fails(engine.handle("boardsize x")).startswith("syntax error")
    assert fails(engine.handle("komi abc")).startswith("syntax error")
    assert ok(engine.handle("komi 6.5")) == "" and engine.komi == 6.5
    assert engine.handle("quit") == "=\n\n" and engine.finished


def test_numbers_are_plain_ascii_decimals(engine: GtpEngine) -> None:
    """Python's int and float read "１９", "1_0" and "nan"; no GUI sends them, so they are syntax
    errors. "²" passes str.isdigit and fails int: it once came back as an internal error."""
    for bad in ("²", "１９", "1_9", "+", "19.0", "99999999999999999999999"):
        refusal = fails(engine.handle(f"boardsize {bad}"))
        assert refusal == "syntax error: boardsize takes one integer", bad
    assert engine.size == 19
    for bad in ("1_0", "６.５", "nan", "inf", "1e999", "6,5", "."):
        assert fails(engine.handle(f"komi {bad}")).startswith("syntax error"), bad
    for good, value in (("-0.5", -0.5), ("7", 7.0), ("+6.5", 6.5), (".5", 0.5), ("6.", 6.0)):
        assert ok(engine.handle(f"komi {good}")) == "" and engine.komi == value
    for args in ("² 1 1", "1e999 1 1", "300 ３０ 1", "300 30 1_0", "300 30 -1", "300 30 1.5"):
        assert fails(engine.handle(f"time_settings {args}")).startswith("syntax error"), args
    refusal = fails(engine.handle("play b D" + "1" * 5000))  # int() refuses 5,000 digits
    assert refusal.startswith("syntax error") and len(refusal) < 200, refusal[:80]
    for args in (["٣"], ["²"], ["interval", "1_0"], ["minmoves", "３"]):
        with pytest.raises(AnalyzeArgsError, match="must be an integer"):
            parse_analyze_args(args)


def test_play_rules_undo_and_score(engine: GtpEngine) -> None:
    assert ok(engine.handle("boardsize 19")) == ""
    for color, v in (("b", "D4"), ("white", "E4"), ("B", "C5"), ("w", "F5"), ("black", "D6"),
                     ("w", "E6"), ("b", "A1"), ("w", "D5"), ("b", "E5")):
        assert ok(engine.handle(f"play {color} {v}")) == "", (color, v)
    assert engine.state.ko == parse_vertex("D5") and engine.state.captures[BLACK] == 1
    assert fails(engine.handle("play w D5")) == "illegal move: D5 (ko)"
    assert fails(engine.handle("play w E5")) == "illegal move: E5 (occupied)"
    assert fails(engine.handle("play w Z9")).startswith("syntax error")
    assert fails(engine.handle("play green D4")).startswith("syntax error")
    assert ok(engine.handle("play w pass")) == ""
    board = ok(engine.handle("showboard"))
    assert "A B C D E F G H J K L M N O P Q R S T" in board and "black to move" in board
    assert len(engine.history) == 10
    assert ok(engine.handle("undo")) == "" and len(engine.history) == 9
    assert engine.state.ko == parse_vertex("D5")  # the position before the pass, ko included
    e = GtpEngine("unused")
    assert fails(e.handle("undo")) == "cannot undo"
    for v in ("A2", "B1"):
        e.handle(f"play b {v}")
    assert fails(e.handle("play w A1")) == "illegal move: A1 (suicide)"
    assert ok(e.handle("final_score")) == "B+353.5"  # 361 points of black area - 7.5
    assert ok(e.handle("clear_board")) == "" and e.history == []
    assert ok(e.handle("final_score")) == "W+7.5"
    assert score_text(0.0) == "0" and score_text(-0.5) == "W+0.5"


def test_boardsize_takes_9_to_19_and_clear_board_keeps_it(engine: GtpEngine) -> None:
    for bad in ("7", "8", "20", "21", "25", "0"):
        assert fails(engine.handle(f"boardsize {bad}")) == "unacceptable size", bad
    assert engine.size == 19  # a refused size changes nothing
    assert ok(engine.handle("play b D4")) == ""
    assert ok(engine.handle("boardsize 9")) == "" and engine.size == 9
    assert engine.history == [] and engine.state.size == 9  # boardsize clears the board
    assert ok(engine.handle("play b J9")) == ""  # J: the ninth column (no I)
    assert fails(engine.handle("play w K9")).startswith("syntax error")  # off the 9x9 board
    assert fails(engine.handle("play w A10")).startswith("syntax error")
    board = ok(engine.handle("showboard"))
    assert "   A B C D E F G H J\n" in board and board.startswith("9 . . . . . . . . x")
    assert ok(engine.handle("final_score")) == "B+73.5"  # 81 points of black area - 7.5
    assert ok(engine.handle("clear_board")) == "" and engine.size == 9
    assert engine.history == [] and engine.state.size == 9
    assert ok(engine.handle("play w E5")) == ""
    position = build_position(engine.history, engine.states, BLACK, engine.komi)
    assert position.board_size == 9 and len(position.moves) == 1
    state = validation.position_to_state(position)  # the service takes it as a 9x9 game
    assert state.size == 9 and state.to_move == BLACK
    assert ok(engine.handle("boardsize 13")) == "" and engine.state.size == 13
    assert ok(engine.handle("boardsize 19")) == "" and engine.state.size == 19


def test_positions_sent_to_the_service() -> None:
    def run(moves: list[tuple[int, str]], color: int) -> search_pb2.Position:
        e = GtpEngine("unused")
        for c, v in moves:
            assert ok(e.handle(f"play {'b' if c == BLACK else 'w'} {v}")) == ""
        position = build_position(e.history, e.states, color, e.komi)
        state = validation.position_to_state(position)  # the service accepts it...
        assert state.board.tolist() == e.state.board.tolist()  # ...as the same board
        assert state.to_move == color
        return position

    plain = run([(BLACK, "D4"), (WHITE, "Q16")], BLACK)
    assert len(plain.moves) == 2 and not plain.setup_black and plain.komi == 7.5
    # black plays twice (free handicap): the board so far becomes set-up, white to move
    handicap = run([(BLACK, "D4"), (BLACK, "Q16"), (WHITE, "Q4")], BLACK)
    assert len(handicap.setup_black) == 1 and [m.x for m in handicap.moves] == [15, 15]
    assert handicap.first_to_move == search_pb2.COLOR_BLACK
    white_first = run([(BLACK, "D4"), (BLACK, "Q16")], WHITE)
    assert len(white_first.setup_black) == 1 and len(white_first.moves) == 1
    # genmove for the side that just played: everything becomes set-up
    again = run([(BLACK, "D4"), (WHITE, "Q16")], WHITE)
    assert not again.moves and again.first_to_move == search_pb2.COLOR_WHITE
    assert len(again.setup_black) == len(again.setup_white) == 1
    # play resumed after two passes: only what followed the passes is sent as moves
    resumed = run([(BLACK, "D4"), (WHITE, "pass"), (BLACK, "pass"), (WHITE, "Q16")], BLACK)
    assert len(resumed.moves) == 2 and resumed.moves[0].is_pass


def test_sgf_record() -> None:
    text = go_sgf([(BLACK, parse_vertex("D4")), (WHITE, None), (BLACK, parse_vertex("Q16"))],
                  komi=6.5, black="movepred", white="GNU Go", result="W+12.5",
                  comments=["first", None, "a ] bracket"])
    assert text.startswith("(;GM[1]FF[4]") and text.endswith(")\n")
    assert "SZ[19]KM[6.5]" in text and "PB[movepred]PW[GNU Go]RE[W+12.5]" in text
    assert ";B[dp]C[first]\n;W[];B[pd]C[a \\] bracket])" in text  # a comment ends its line


def test_dead_service_answers_errors_and_the_engine_goes_on(engine: GtpEngine) -> None:
    answer = fails(engine.handle("genmove b"))
    assert answer.startswith("search service unavailable") or answer.startswith("search failed")
    assert engine.history == []  # nothing was played
    assert ok(engine.handle("play b D4")) == ""


# ------------------------------------------------------------------- analysis, clock, cleanup


def test_analyze_arguments_as_katago_documents_them() -> None:
    a = parse_analyze_args(["10"])
    assert (a.color, a.interval_cs, a.min_moves, a.max_moves) == (None, 10, 0, 0)
    a = parse_analyze_args(["B", "50"])
    assert (a.color, a.interval_cs) == ("b", 50)
    a = parse_analyze_args(["white", "interval", "20", "ownership", "true", "minmoves", "3",
                            "maxmoves", "8", "avoid", "b", "D4,Q16", "1", "pvVisits", "true"])
    assert (a.color, a.interval_cs, a.min_moves, a.max_moves) == ("white", 20, 3, 8)
    assert a.ignored == ("ownership", "avoid", "pvvisits") and a.candidates == 8
    assert parse_analyze_args([]).interval_cs == 100  # Leela Zero's default
    for bad in (["interval"], ["x1"], ["interval", "-5"], ["avoid", "b", "D4"]):
        with pytest.raises(AnalyzeArgsError):
            parse_analyze_args(bad)


def test_clock_budget_from_time_settings_and_time_left() -> None:
    clock = GtpClock()
    assert clock.search_ms(BLACK, 361) is None  # no time settings: search by visits
    clock.settings(["600", "30", "5"])  # 10 min, then 5 stones in 30 s
    assert clock.budget_s(BLACK, 361) == pytest.approx(600 / 90)  # a quarter of the empty points
    assert clock.budget_s(BLACK, 20) == pytest.approx(60.0)  # at least 10 moves to come
    clock.time_left(WHITE, ["12", "3"])  # white in byo-yomi: 3 stones in 12 s
    assert clock.budget_s(WHITE, 300) == pytest.approx(4.0)
    assert clock.search_ms(WHITE, 300) == int(4000 * 0.9 - 200)
    clock.time_left(BLACK, ["0", "0"])  # main time over: a byo-yomi move's share
    assert clock.budget_s(BLACK, 300) == pytest.approx(6.0)
    clock.settings(["60", "0", "0"])  # absolute time, counted down by the engine itself
    clock.spent(BLACK, 30.0)
    assert clock.budget_s(BLACK, 361) == pytest.approx(30 / 90)
    clock.settings(["0", "1", "0"])  # GTP: byo-yomi time without stones means no time limit
    assert clock.search_ms(BLACK, 361) is None


def test_time_commands_and_their_errors(engine: GtpEngine) -> None:
    assert ok(engine.handle("time_settings 300 20 10")) == ""
    assert ok(engine.handle("time_left black 500 0")) == ""
    visits, time_ms, timeout = engine.search_budget(BLACK)  # 500 s over 90 moves
    assert visits == 0 and time_ms == int(500 / 90 * 1000 * 0.9 - 200) and timeout == 5
    assert engine.search_budget(WHITE)[1] == int(300 / 90 * 1000 * 0.9 - 200)  # main time
    assert ok(engine.handle("time_left white 1 0")) == ""  # 1 s of main time: byo-yomi's share
    assert engine.search_budget(WHITE)[1] == int(2000 * 0.9 - 200)
    assert fails(engine.handle("time_settings 1 2")).startswith("syntax error")
    assert fails(engine.handle("time_left green 1 0")).startswith("syntax error")
    assert fails(engine.handle("time_left b x 0")).startswith("syntax error")
    for name in ("time_settings", "time_left", "kgs-genmove_cleanup", "lz-analyze",
                 "kata-analyze", "analyze", "lz-genmove_analyze", "kata-genmove_analyze",
                 "genmove_analyze"):
        assert ok(engine.handle(f"known_command {name}")) == "true", name


DEAD_WHITE_STONE = """\
. . . X . . . . .
. . . X . . . . .
. . . X . . O . .
X X X X . . . . .
. . . . . . . . .
O O O O O O O O O
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
"""


def test_cleanup_judges_dead_stones_and_captures_them() -> None:
    state = GoState.from_ascii(DEAD_WHITE_STONE)
    dead = dead_chains(state, WHITE)
    g7 = parse_vertex("G7", 9)
    assert [stones for stones, _ in dead] == [{g7}]  # the long wall has room for two eyes
    assert dead_chains(state, BLACK) == []  # black's corner: 9 points, room for two eyes
    move = capture_move(state, BLACK)
    assert move in {parse_vertex(v, 9) for v in ("G8", "F7", "H7", "G6")}
    # filling the liberties one by one ends with the capture, then nothing is left to take
    for _ in range(4):
        move = capture_move(state, BLACK)
        if move is None:
            break
        state = state.play(move, BLACK).play(None, WHITE)
    assert state.cells[g7] == 0 and capture_move(state, BLACK) is None


def test_analysis_with_the_service_down_answers_an_error(engine: GtpEngine) -> None:
    answer = fails(engine.handle("lz-analyze 10"))
    assert answer.startswith("search service unavailable"), answer
    assert ok(engine.handle("name")) == "movepred"  # and the engine goes on


def test_cli_registers_gtp() -> None:
    parser, commands = cli.build_parser()
    assert "gtp" in commands
    args = parser.parse_args(["gtp", "--target", "h:1", "--visits", "32"])
    assert (args.target, args.visits, args.time_ms) == ("h:1", 32, 0)


# --------------------------------------------------------------------------- with real Triton


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.triton_fixtures import go_service_target

    yield from go_service_target(tmp_path_factory.mktemp("gtp-triton"), with_gomoku=False)


@pytest.mark.timeout(300)
def test_genmove_in_process(service: str) -> None:
    e = GtpEngine(service, visits=16)
    try:
        assert ok(e.handle("clear_board")) == "" and ok(e.handle("komi 7.5")) == ""
        first = ok(e.handle("1 genmove b"))
        assert parse_vertex(first) is not None or first == "pass"
        assert e.last_genmove is not None and e.last_genmove.total_visits == 16
        assert ok(e.handle("play w Q16")) == ""
        second = ok(e.handle("genmove black"))
        third = ok(e.handle("genmove black"))  # black twice: sent with set-up stones
        assert [c for c, _ in e.history] == [BLACK, WHITE, BLACK, BLACK]
        played = [e.history[i][1] for i in (0, 2, 3)]
        assert [parse_vertex(v) for v in (first, second, third)] == played
        board = ok(e.handle("showboard"))
        assert board.count("X") + board.count("x") >= 1
    finally:
        e.close()


@pytest.mark.timeout(300)
def test_genmove_on_9x9(service: str) -> None:
    e = GtpEngine(service, visits=16)
    try:
        assert ok(e.handle("boardsize 9")) == "" and ok(e.handle("clear_board")) == ""
        first = ok(e.handle("genmove b"))
        point = parse_vertex(first, 9)
        assert point is None or 0 <= point < 81
        assert e.last_genmove is not None and e.last_genmove.total_visits == 16
        assert ok(e.handle("play w E5" if first != "E5" else "play w D4")) == ""
        second = ok(e.handle("genmove b"))
        assert [c for c, _ in e.history] == [BLACK, WHITE, BLACK]
        assert e.history[2][1] == parse_vertex(second, 9)
        assert fails(e.handle("boardsize 25")) == "unacceptable size"
        assert e.size == 9 and len(e.history) == 3  # the refused size left the game alone
    finally:
        e.close()


@pytest.mark.timeout(300)
def test_gtp_subprocess_over_a_pipe(service: str) -> None:
    commands = ["protocol_version", "boardsize 19", "clear_board", "play b D4", "10 genmove w",
                "final_score", "quit"]
    proc = subprocess.run(
        [sys.executable, "-m", "services.cli", "gtp", "--target", service, "--visits", "8"],
        input="\n".join(commands) + "\n", capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    answers = proc.stdout.split("\n\n")
    assert answers[-1] == ""
    answers = answers[:-1]
    assert answers[0] == "= 2" and answers[1] == "=" and answers[2] == "="
    assert answers[3] == "=" and answers[4].startswith("=10 ")
    move = answers[4][4:]
    assert move == "pass" or (parse_vertex(move) is not None and move != "D4")
    assert answers[5].startswith("= ") and answers[6] == "="


# GTP vertex, pass included; the grammar of one candidate in each format (fields in the order
# the engines print them; KataGo allows others, which the GUIs skip)
VERTEX = r"(?:[A-HJ-T](?:1[0-9]|[1-9])|pass)"
LZ_INFO = re.compile(
    rf"info move (?P<move>{VERTEX}) visits (?P<visits>\d+) winrate (?P<winrate>\d+) "
    rf"prior (?P<prior>\d+) lcb (?P<lcb>-?\d+) order (?P<order>\d+) "
    rf"pv (?P<pv>{VERTEX}(?: {VERTEX})*)")
FLOAT = r"-?\d+\.\d+(?:e-?\d+)?"
KATA_INFO = re.compile(
    rf"info move (?P<move>{VERTEX}) visits (?P<visits>\d+) utility (?P<utility>{FLOAT}) "
    rf"winrate (?P<winrate>{FLOAT}) prior (?P<prior>{FLOAT}) lcb (?P<lcb>{FLOAT}) "
    rf"utilityLcb (?P<ulcb>{FLOAT}) order (?P<order>\d+) pv (?P<pv>{VERTEX}(?: {VERTEX})*)")


def parse_info_line(line: str, grammar: re.Pattern[str]) -> list[dict[str, str]]:
    """Every candidate of one line; the line must be nothing but candidates."""
    parts = re.split(r" (?=info move )", line)
    matches = [grammar.fullmatch(part) for part in parts]
    assert all(matches), line
    return [m.groupdict() for m in matches if m]


class GtpPipe(ServicePipe):
    """`movepred gtp` as a GUI runs it: a subprocess spoken to through pipes."""

    def __init__(self, target: str, *extra: str) -> None:
        super().__init__("services.cli", "gtp", "--target", target, *extra)

    def answer(self, command: str) -> str:
        """One whole response (through its empty line), its lines joined."""
        self.send(command)
        lines = []
        while (line := self.line()) != "":
            lines.append(line)
        return "\n".join(lines)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("command, grammar", [
    ("lz-analyze 10", LZ_INFO),
    ("kata-analyze b interval 10 ownership true maxmoves 4", KATA_INFO),
])
def test_analysis_streams_until_the_next_command(service: str, command: str,
                                                 grammar: re.Pattern[str]) -> None:
    pipe = GtpPipe(service, "--visits", "8")
    try:
        assert pipe.answer("boardsize 19") == "="
        assert pipe.answer("play b D4") == "=" and pipe.answer("play w Q16") == "="
        pipe.send(f"7 {command}")
        assert pipe.line() == "=7"  # the response starts at once
        infos = []
        started = time.monotonic()
        while len(infos) < 3:
            infos.append(parse_info_line(pipe.line(timeout=30), grammar))
        elapsed = time.monotonic() - started
        pipe.send("name")  # any command ends the analysis...
        rest = []
        while (line := pipe.line()) != "":  # ...after at most the line in flight
            rest.append(line)
        assert len(rest) <= 1
        assert pipe.line() == "= movepred" and pipe.line() == ""  # ...and is then answered
        assert elapsed < 20  # lines come every interval (0.1 s) while the search runs
        visits = [sum(int(c["visits"]) for c in line) for line in infos]
        assert visits == sorted(visits) and visits[-1] > 0
        for line in infos:
            assert [int(c["order"]) for c in line] == list(range(len(line)))
            assert all(c["pv"].split()[0] == c["move"] for c in line)
            assert not {c["move"] for c in line} & {"D4", "Q16"}  # occupied points
            if grammar is KATA_INFO:
                assert len(line) <= 4  # maxmoves
                assert all(0.0 <= float(c["winrate"]) <= 1.0 for c in line)
                assert all(float(c["lcb"]) <= float(c["winrate"]) for c in line)
            else:
                assert all(0 <= int(c["winrate"]) <= 10000 for c in line)
                assert all(0 <= int(c["prior"]) <= 10000 for c in line)
        assert pipe.answer("play b C3") == "="  # the game goes on after the analysis
        pipe.send("quit")
        assert pipe.line() == "=" and pipe.proc.wait(30) == 0
    finally:
        pipe.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("command, grammar", [
    ("lz-genmove_analyze b 5", LZ_INFO),
    ("kata-genmove_analyze b interval 5", KATA_INFO),
])
def test_genmove_analyze_streams_then_plays(service: str, command: str,
                                            grammar: re.Pattern[str]) -> None:
    pipe = GtpPipe(service, "--visits", "48")
    try:
        assert pipe.answer("boardsize 9") == "="
        pipe.send(f"3 {command}")
        pipe.send("name")  # not an interruption: answered after the move
        assert pipe.line() == "=3"
        lines = []
        while (line := pipe.line()) != "":
            lines.append(line)
        *infos, last = lines
        assert infos, lines  # the search reported while it ran (at least its last report)
        for line in infos:
            parse_info_line(line, grammar)
        played = re.fullmatch(rf"play ({VERTEX})", last)
        assert played, last
        best = parse_info_line(infos[-1], grammar)[0]
        assert played.group(1) == best["move"]  # the final report's best candidate
        assert sum(int(c["visits"]) for c in parse_info_line(infos[-1], grammar)) <= 48
        assert pipe.line() == "= movepred" and pipe.line() == ""
        if played.group(1) != "pass":  # the move was played on the engine's board
            assert pipe.answer(f"play w {played.group(1)}") == "? illegal move: " \
                f"{played.group(1)} (occupied)"
    finally:
        pipe.close()


@pytest.mark.timeout(120)
def test_analysis_goes_on_past_one_call_with_the_tree(service: str) -> None:
    """One Analyze call ends at its time limit (the service's 60 s; 0.2 s here): the stream
    starts the next, which takes over the cached tree, so the visits keep growing."""
    from services.search.client import SearchClient, go_position

    with SearchClient(service) as client:
        position = go_position(["D4"], board_size=9)

        def start():  # a streaming gRPC call
            return client.analyze(position, max_visits=validation.MAX_VISITS, max_time_ms=200,
                                  report_every_visits=8, max_candidates=5)

        stream = AnalysisStream(start, parse_analyze_args([]), kata_line, "=")
        deadline = time.monotonic() + 60
        while stream.calls < 3 and time.monotonic() < deadline and not stream.finished.is_set():
            time.sleep(0.05)
        time.sleep(0.3)
        stream.stop()
    assert stream.error is None or "CANCELLED" in str(stream.error)
    assert stream.calls >= 3
    latest = stream._latest
    assert latest is not None and latest.reused_visits > 0  # the tree of the call before
    assert latest.total_visits > latest.reused_visits


@pytest.mark.timeout(300)
def test_genmove_searches_the_clock_budget_and_cleanup_never_passes(service: str) -> None:
    e = GtpEngine(service, visits=4)
    try:
        assert ok(e.handle("boardsize 9")) == ""
        assert ok(e.handle("time_settings 0 4 1")) == ""  # 4 s a move: the search gets 3.4 s
        first = ok(e.handle("genmove b"))
        assert parse_vertex(first, 9) is not None or first == "pass"
        assert e.last_genmove is not None and e.last_genmove.total_visits > 4  # not --visits
        assert ok(e.handle("time_settings 0 1 0")) == ""  # no time limit: back to visits
        assert ok(e.handle("clear_board")) == ""
        rows = DEAD_WHITE_STONE.splitlines()
        for y, row in enumerate(reversed(rows)):  # set the position up, alternating with passes
            for x, glyph in enumerate(row.split()):
                if glyph != ".":
                    color = "b" if glyph == "X" else "w"
                    assert ok(e.handle(f"play {color} {vertex(y * 9 + x, 9)}")) == ""
        for _ in range(6):
            move = ok(e.handle("kgs-genmove_cleanup b"))
            assert move != "pass" or not dead_chains(e.state, WHITE)
            if not dead_chains(e.state, WHITE):
                break
            ok(e.handle("play w pass"))
    finally:
        e.close()


def _go_match():
    spec = importlib.util.spec_from_file_location("go_match", ROOT / "benchmarks" / "go_match.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["go_match"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(600)
@pytest.mark.parametrize("size", [19, 9])
def test_one_short_game_against_gnugo(service: str, tmp_path: Path, size: int) -> None:
    go_match = _go_match()
    gnugo = go_match.find_gnugo()
    if gnugo is None:
        pytest.skip("gnugo is not installed (apt-get install -y gnugo)")
    ours = go_match.EnginePlayer(GtpEngine(service, visits=8, timeout_s=120))
    opponent = go_match.GtpProcess([gnugo, "--mode", "gtp", "--level", "1", "--chinese-rules"])
    try:
        result = go_match.play_game(ours, opponent, WHITE, komi=7.5, max_moves=12, size=size)
    finally:
        ours.close()
        opponent.close()
    assert result.moves == 12 or result.end in ("two passes", "resignation")
    assert result.our_color == "white" and result.gnugo_score[:2] in ("B+", "W+", "0")
    assert result.size == size
    state = GoState(size)
    for color, point in result.history:  # a legal game, colours alternating from black
        state = state.play(point, color)
    assert [c for c, _ in result.history[:2]] == [BLACK, WHITE]
    path = go_match.write_sgf(result, tmp_path, 7.5, 1)
    text = path.read_text()
    assert "PW[movepred]" in text and "PB[GNU Go (level 1)]" in text and f"SZ[{size}]" in text
    assert text.count(";B[") + text.count(";W[") == result.moves
    assert "visits, prior" in text  # our moves carry their search statistics
