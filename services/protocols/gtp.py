"""A GTP (Go Text Protocol, version 2) engine whose moves come from the movepred search service.

    python -m services.protocols.gtp --target 127.0.0.1:50051 [--visits 200]
    movepred gtp --target 127.0.0.1:50051 --visits 200
    movepred gtp --target search.example:50051 --tls-ca ca.pem --token-file token

The TLS and token options are those of every client (`services.search.auth`).

The controller writes commands to stdin, one a line; every answer is ``= result`` or
``? error`` followed by an empty line, with the command's id when it had one
(https://www.lysator.liu.se/~gunnar/gtp/gtp2-spec-draft2/gtp2-spec.html). Supported:

    protocol_version, name, version, known_command, list_commands, quit
    boardsize N             N in 9..19 (the sizes the service serves Go on: one network for
                            every size, see services/games/go/rules.py); any other size is
                            ``? unacceptable size``. It clears the board; the default is 19
    clear_board, komi K     clear_board keeps the size
    play COLOR VERTEX       COLOR b/black/w/white, VERTEX e.g. D4 or pass; an illegal move
                            (occupied, suicide, ko retake) is ``? illegal move: ...``
    genmove COLOR           a GenMove request to the service; answers the vertex (or pass)
                            and plays it
    undo                    takes the last move back (``? cannot undo`` at the start)
    showboard               the board as text (X black, O white, the last move in lower case)
    final_score             area score of the current position with komi: B+3.5, W+0.5 or 0;
                            stones are all counted alive (no dead-stone removal), so score
                            finished games (or ask an engine that removes dead stones)
    time_settings M B S     main time, byo-yomi time and stones (seconds; GTP's Canadian
                            byo-yomi); genmove then searches for a time budget derived from
                            them and time_left (`services.protocols.gtp_clock`) instead of
                            --visits; time_settings 0 1 0 (no time limit) goes back to visits
    time_left COLOR T S     the time (and byo-yomi stones) COLOR has left
    ponder on|off           genmove asks the service to ponder: it keeps searching the
                            opponent's turn until the next command reaches it, and the next
                            genmove continues that tree (default: --ponder, else off)
    kgs-genmove_cleanup C   genmove that never passes while opponent stones it judges dead
                            remain (`services.protocols.go_cleanup`): KGS's clean-up phase
    lz-analyze, kata-analyze, analyze [COLOR] [INTERVAL] [KEY VALUE...]
                            live analysis for Lizzie and Sabaki: ``=`` and then one ``info
                            move ... visits ... winrate ... prior ... pv ...`` line every
                            INTERVAL centiseconds until the next input line, which ends the
                            answer (empty line) and is then processed as a command; formats
                            and their sources in `services.protocols.gtp_analysis`
    lz-genmove_analyze, kata-genmove_analyze, genmove_analyze COLOR [INTERVAL] [KEY VALUE...]
                            the same lines while COLOR's move is searched with genmove's
                            budget, then ``play VERTEX`` (played); input waits for its end

The engine keeps the game as a list of (colour, vertex) and replays it with the rules engine
(`services.games.go.rules.GoState`: captures, suicide illegal, simple ko), so illegal moves are
refused locally. The service needs the moves in alternating order from the first mover: when a
controller makes one colour play twice (e.g. free handicap placement, or a ``genmove`` for the
side that just played), the position is sent as the board at the last break of alternation
(set-up stones, `first_to_move`) followed by the alternating moves since; so is a game resumed
after two passes. Ko state at such a break is not carried over (the service sees set-up
stones).

Failures never end the engine: an unreachable service answers
``? search service unavailable (...)``, other service errors ``? search failed: ...``.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TextIO

import grpc

from services.api.movepred.v1 import search_pb2
from services.defaults import SEARCH_TARGET
from services.games.go.game import (
    DEFAULT_KOMI,
    GO_SIZE,
    GO_SIZES,
    VertexError,
    parse_vertex,
    vertex,
)
from services.games.go.rules import BLACK, WHITE, GoState, IllegalMove, opponent
from services.numerals import ascii_decimal, ascii_int
from services.protocols.frontend import SearchClientOwner
from services.protocols.go_cleanup import capture_move
from services.protocols.gtp_analysis import (
    FORMATS,
    GENMOVE_FORMATS,
    REPORT_EVERY_VISITS,
    AnalysisStream,
    AnalyzeArgsError,
    parse_analyze_args,
    run_stream,
    run_to_end,
)
from services.protocols.gtp_clock import ClockError, GtpClock
from services.records.sgf_writer import app_version
from services.search import auth
from services.search.client import search_client_factory
from services.search.validation import MAX_TIME_MS, MAX_VISITS
from services.settings import DEADLINE_S, bounded

NAME = "movepred"
DEFAULT_VISITS = 200
PROTOCOL_VERSION = "2"
COMMANDS = (
    "protocol_version",
    "name",
    "version",
    "known_command",
    "list_commands",
    "quit",
    "boardsize",
    "clear_board",
    "komi",
    "play",
    "genmove",
    "undo",
    "showboard",
    "final_score",
    "time_settings",
    "time_left",
    "ponder",
    "kgs-genmove_cleanup",
    "lz-analyze",
    "kata-analyze",
    "analyze",
    "lz-genmove_analyze",
    "kata-genmove_analyze",
    "genmove_analyze",
)
FIRST_REPORT_WAIT_S = 10.0  # an analysis that fails at once answers "?" instead of "="
_COLORS = {"b": BLACK, "black": BLACK, "w": WHITE, "white": WHITE}

Move = tuple[int, int | None]  # (colour, point or None for a pass)


class GtpError(Exception):
    """A command that fails; the message becomes the `?` answer."""


def parse_color(text: str) -> int:
    color = _COLORS.get(text.strip().lower())
    if color is None:
        raise GtpError(f"syntax error: not a colour: {text!r}")
    return color


def color_name(color: int) -> str:
    return "black" if color == BLACK else "white"


def score_text(score: float) -> str:
    """Black's area score minus komi -> "B+3.5", "W+0.5" or "0"."""
    if score > 0:
        return f"B+{score:g}"
    if score < 0:
        return f"W+{-score:g}"
    return "0"


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _preprocess(line: str) -> str:
    """GTP's input rules: drop control characters but tab, tabs to spaces, cut comments."""
    line = "".join(c for c in line if c == "\t" or (ord(c) >= 32 and ord(c) != 127))
    line = line.replace("\t", " ")
    return line.split("#", 1)[0].strip()


def build_position(
    history: Sequence[Move], states: Sequence[GoState], color: int, komi: float
) -> search_pb2.Position:
    """The service Position for `color` to move after `history` (`states[k]`: the position
    before `history[k]`, `states[len(history)]` the current one): the board at the last break
    of alternation (or of two passes in a row) as set-up, then the alternating moves since."""
    start = len(history)
    want = opponent(color)
    for j in range(len(history) - 1, -1, -1):
        c, point = history[j]
        if c != want:
            break
        if point is None and j + 1 < len(history) and history[j + 1][1] is None:
            break  # two passes in a row: the game was over there, send what followed
        start = j
        want = opponent(want)
    base = states[start]
    size = base.size
    first = history[start][0] if start < len(history) else color

    def pt(p: int | None) -> search_pb2.Point:
        if p is None:
            return search_pb2.Point(is_pass=True)
        return search_pb2.Point(x=p % size, y=p // size)

    cells = base.cells
    return search_pb2.Position(
        game=search_pb2.GAME_GO,
        rule=search_pb2.RULE_GO_AREA,
        board_size=size,
        komi=komi,
        first_to_move=search_pb2.COLOR_BLACK if first == BLACK else search_pb2.COLOR_WHITE,
        setup_black=[pt(p) for p in range(size * size) if cells[p] == BLACK],
        setup_white=[pt(p) for p in range(size * size) if cells[p] == WHITE],
        moves=[pt(p) for _, p in history[start:]],
    )


class GtpEngine(SearchClientOwner):
    """The GTP state machine: `handle(line)` returns the whole answer (None for an empty or
    comment line). `client_factory()` makes the search client on first use."""

    def __init__(
        self,
        target: str = SEARCH_TARGET,
        *,
        visits: int = DEFAULT_VISITS,
        time_ms: int = 0,
        timeout_s: float | None = None,
        client_factory: Callable[[], Any] | None = None,
        rollout_lambda: float = 0.0,
        ponder: bool = False,
    ) -> None:
        super().__init__(target, client_factory)
        self.visits = visits
        self.rollout_lambda = rollout_lambda  # leaf values mixed with rollouts (0: none)
        self.ponder = ponder  # genmove asks the service to search on the opponent's time
        self.time_ms = time_ms
        self.timeout_s = timeout_s
        self.size = GO_SIZE
        self.komi = DEFAULT_KOMI
        self.history: list[Move] = []
        self.states: list[GoState] = [GoState(self.size)]
        self.finished = False
        self.last_genmove: search_pb2.GenMoveResponse | None = None
        self.clock = GtpClock()

    @property
    def state(self) -> GoState:
        return self.states[-1]

    # -- dispatch --
    def handle(self, line: str) -> str | AnalysisStream | None:
        """Answer one input line; never raises. An analysis command answers a running
        `AnalysisStream` (see `serve` and `gtp_analysis.run_stream` for its response)."""
        text = _preprocess(line)
        if not text:
            return None
        words = text.split()
        ident = ""
        if words[0].isdigit():
            ident = words.pop(0)
            if not words:
                return f"?{ident} syntax error: no command\n\n"
        command, args = words[0].lower(), words[1:]
        try:
            if command not in COMMANDS:
                raise GtpError("unknown command")
            if command in FORMATS or command in GENMOVE_FORMATS:
                return self._analyze(command, args, ident)
            result = getattr(self, f"cmd_{command.replace('-', '_')}")(args)
        except GtpError as exc:
            return f"?{ident} {_one_line(exc)}\n\n"
        except Exception as exc:  # the engine must outlive anything
            return f"?{ident} internal error: {type(exc).__name__}: {_one_line(exc)}\n\n"
        return f"={ident} {result}\n\n" if result else f"={ident}\n\n"

    # -- commands --
    def cmd_protocol_version(self, args: list[str]) -> str:
        return PROTOCOL_VERSION

    def cmd_name(self, args: list[str]) -> str:
        return NAME

    def cmd_version(self, args: list[str]) -> str:
        return app_version()

    def cmd_known_command(self, args: list[str]) -> str:
        if len(args) != 1:
            raise GtpError("syntax error: known_command takes one command name")
        return "true" if args[0].lower() in COMMANDS else "false"

    def cmd_list_commands(self, args: list[str]) -> str:
        return "\n".join(COMMANDS)

    def cmd_quit(self, args: list[str]) -> str:
        self.finished = True
        self.close()
        return ""

    def cmd_boardsize(self, args: list[str]) -> str:
        size = ascii_int(args[0]) if len(args) == 1 else None
        if size is None:
            raise GtpError("syntax error: boardsize takes one integer")
        if size not in GO_SIZES:
            raise GtpError("unacceptable size")
        self.size = size
        self._clear()
        return ""

    def cmd_clear_board(self, args: list[str]) -> str:
        self._clear()
        return ""

    def cmd_komi(self, args: list[str]) -> str:
        komi = ascii_decimal(args[0]) if len(args) == 1 else None
        if komi is None or abs(komi) > self.size * self.size:
            raise GtpError("syntax error: komi takes one number")
        self.komi = komi
        return ""

    def cmd_play(self, args: list[str]) -> str:
        if len(args) != 2:
            raise GtpError("syntax error: play takes a colour and a vertex")
        color = parse_color(args[0])
        try:
            point = parse_vertex(args[1], self.size)
        except VertexError as exc:
            raise GtpError(f"syntax error: {exc}") from exc
        self._play(color, point)
        return ""

    def cmd_genmove(self, args: list[str]) -> str:
        if len(args) != 1:
            raise GtpError("syntax error: genmove takes a colour")
        return self._genmove(parse_color(args[0]), cleanup=False)

    def cmd_kgs_genmove_cleanup(self, args: list[str]) -> str:
        if len(args) != 1:
            raise GtpError("syntax error: kgs-genmove_cleanup takes a colour")
        return self._genmove(parse_color(args[0]), cleanup=True)

    def cmd_time_settings(self, args: list[str]) -> str:
        try:
            self.clock.settings(args)
        except ClockError as exc:
            raise GtpError(str(exc)) from exc
        return ""

    def cmd_time_left(self, args: list[str]) -> str:
        if not args:
            raise GtpError("syntax error: time_left takes a colour, a time and stones")
        try:
            self.clock.time_left(parse_color(args[0]), args[1:])
        except ClockError as exc:
            raise GtpError(str(exc)) from exc
        return ""

    def cmd_ponder(self, args: list[str]) -> str:
        if len(args) != 1 or args[0].lower() not in ("on", "off"):
            raise GtpError("syntax error: ponder takes on or off")
        self.ponder = args[0].lower() == "on"
        return ""

    def cmd_undo(self, args: list[str]) -> str:
        if not self.history:
            raise GtpError("cannot undo")
        self.history.pop()
        self.states.pop()
        return ""

    def cmd_showboard(self, args: list[str]) -> str:
        s = self.state
        to_move = color_name(s.to_move)
        return (f"\n{s.ascii()}\nmove {len(self.history)}, komi {self.komi:g}, {to_move} to "
                f"move, captures B {s.captures[BLACK]} W {s.captures[WHITE]}")

    def cmd_final_score(self, args: list[str]) -> str:
        return score_text(self.state.score(self.komi))

    # -- helpers --
    def search_budget(self, color: int) -> tuple[int, int, float | None]:
        """(max_visits, max_time_ms, timeout) of `color`'s next genmove: the clock's time
        budget when time_settings set a limit, else the engine's visits / time."""
        empty = self.state.cells.count(0)
        ms = self.clock.search_ms(color, empty)
        if ms is None:
            return self.visits, self.time_ms, self.timeout_s
        return 0, ms, self.timeout_s if self.timeout_s is not None else ms / 1000 + 10

    def _genmove(self, color: int, *, cleanup: bool) -> str:
        position = build_position(self.history, self.states, color, self.komi)
        visits, time_ms, timeout = self.search_budget(color)
        started = time.monotonic()
        try:
            reply = self._client_or_new().genmove(
                position, max_visits=visits, max_time_ms=time_ms, timeout=timeout,
                rollout_lambda=self.rollout_lambda, ponder=self.ponder,
            )
        except grpc.RpcError as exc:
            raise GtpError(self._rpc_error(exc)) from exc
        finally:
            self.clock.spent(color, time.monotonic() - started)
        point = None if reply.move.is_pass else reply.move.y * self.size + reply.move.x
        if cleanup and point is None:
            point = capture_move(self.state, color)
        self._play(color, point)
        self.last_genmove = reply
        return vertex(point, self.size)

    def _analyze(self, command: str, args: list[str], ident: str) -> AnalysisStream:
        """An analysis (until the next input line) or, for a genmove_analyze, the search of a
        move with the genmove's budget (`genmove_move` then plays its result)."""
        try:
            request = parse_analyze_args(args)
        except AnalyzeArgsError as exc:
            raise GtpError(str(exc)) from exc
        color = parse_color(request.color) if request.color else self.state.to_move
        position = build_position(self.history, self.states, color, self.komi)
        client = self._client_or_new()
        genmove = command in GENMOVE_FORMATS
        visits, time_ms, timeout = (self.search_budget(color) if genmove
                                    else (MAX_VISITS, MAX_TIME_MS, None))

        def start() -> Any:
            return client.analyze(
                position, max_visits=visits, max_time_ms=time_ms, timeout=timeout,
                report_every_visits=REPORT_EVERY_VISITS, max_candidates=request.candidates,
                rollout_lambda=self.rollout_lambda,
            )

        formatter = GENMOVE_FORMATS[command] if genmove else FORMATS[command]
        stream = AnalysisStream(start, request, formatter, f"={ident}", continued=not genmove,
                                move_color=color if genmove else 0)
        stream.started.wait(FIRST_REPORT_WAIT_S)
        if stream.error is not None and not stream.has_report:
            stream.stop()
            raise GtpError(self._rpc_error(stream.error))
        return stream

    def genmove_move(self, stream: AnalysisStream,
                     report: search_pb2.AnalyzeResponse | None) -> str:
        """The end of a genmove_analyze: play the final report's best candidate (a pass when
        the search reported none) and answer its vertex."""
        color = stream.move_color
        self.clock.spent(color, time.monotonic() - stream.started_at)
        best = report.candidates[0] if report is not None and report.candidates else None
        point = (None if best is None or best.move.is_pass
                 else best.move.y * self.size + best.move.x)
        try:
            self._play(color, point)
        except GtpError:  # the position changed under the search: not expected; pass
            self._play(color, None)
            point = None
        return vertex(point, self.size)

    def _clear(self) -> None:
        self.history = []
        self.states = [GoState(self.size)]

    def _play(self, color: int, point: int | None) -> None:
        state = self.state
        if state.is_over:  # play goes on after two passes (e.g. to settle dead stones)
            state = state.resume()
        try:
            new = state.play(point, color)
        except IllegalMove as exc:
            raise GtpError(f"illegal move: {vertex(point, self.size)} ({exc.reason})") from exc
        self.history.append((color, point))
        self.states.append(new)

    def _rpc_error(self, exc: Any) -> str:
        code = exc.code() if hasattr(exc, "code") else None
        details = _one_line(exc.details() if hasattr(exc, "details") else exc)
        if code == grpc.StatusCode.UNAVAILABLE and not details.startswith("Triton"):
            return f"search service unavailable ({self.target}: {details[:200]})"
        name = code.name if code is not None else "RPC failed"
        return f"search failed: {name}: {details[:300]}"


def serve(engine: GtpEngine, stdin: TextIO, stdout: TextIO) -> int:
    """Answer commands until `quit` or the end of input; every answer is flushed at once.

    A thread reads stdin into a queue, so that a running analysis can be stopped by whatever
    line comes next (that line is then answered as a command)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in iter(stdin.readline, ""):
            lines.put(line)
        lines.put(None)

    def write(text: str) -> None:
        stdout.write(text)
        stdout.flush()

    threading.Thread(target=read, name="gtp-stdin", daemon=True).start()
    carried: list[str | None] = []  # the line that ended an analysis, answered next
    try:
        while not engine.finished:
            line = carried.pop() if carried else lines.get()
            if line is None:
                break
            answer = engine.handle(line)
            if isinstance(answer, AnalysisStream) and answer.move_color:
                run_to_end(answer, write, partial(engine.genmove_move, answer))
            elif isinstance(answer, AnalysisStream):
                carried.append(run_stream(answer, lines, write))
            elif answer:
                write(answer)
    finally:
        engine.close()
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=SEARCH_TARGET, help="search service host:port")
    # the service's limits: beyond them every genmove would fail, not the start
    p.add_argument("--visits", type=bounded(int, 0, MAX_VISITS), default=DEFAULT_VISITS,
                   help=f"visits per genmove (default {DEFAULT_VISITS}; 0: limited by time)")
    p.add_argument("--time-ms", type=bounded(int, 0, MAX_TIME_MS), default=0,
                   help="time per genmove (0: by visits)")
    p.add_argument("--timeout", type=DEADLINE_S, default=None,
                   help="seconds per GenMove call (default: time budget + 10 s, or 300 s)")
    p.add_argument("--rollout-lambda", type=bounded(float, 0, 1), default=0.0,
                   help="leaf values (1 - L) v + L z: v the value network's, z a fast "
                        "rollout's (default 0: the value network alone)")
    p.add_argument("--ponder", action="store_true",
                   help="the service searches on the opponent's time after each genmove "
                        "(GTP: ponder on|off)")
    auth.add_client_arguments(p)


def engine_from(args: argparse.Namespace) -> GtpEngine:
    """The engine the options of `add_arguments` describe (AuthConfigError for unusable
    security options)."""
    return GtpEngine(args.target, visits=args.visits, time_ms=args.time_ms,
                     timeout_s=args.timeout, client_factory=search_client_factory(args),
                     rollout_lambda=args.rollout_lambda, ponder=args.ponder)


def cmd_gtp(args: argparse.Namespace) -> int:
    try:
        engine = engine_from(args)
    except auth.AuthConfigError as exc:  # stdout belongs to the protocol
        print(f"movepred gtp: error: {exc}", file=sys.stderr)
        return 2
    return serve(engine, sys.stdin, sys.stdout)


def add_gtp_command(subparsers: argparse._SubParsersAction) -> dict:
    """Register `gtp`: a GTP engine on stdin/stdout backed by the search service."""
    g = subparsers.add_parser(
        "gtp",
        help="play Go over GTP (stdin/stdout) with moves from the search service",
        epilog="Board sizes 9..19 (boardsize N; default 19); final_score counts every stone "
               "as alive.",
    )
    add_arguments(g)
    return {"gtp": cmd_gtp}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m services.protocols.gtp",
        description="GTP engine backed by the movepred search service.",
    )
    add_arguments(p)
    args = p.parse_args(argv)
    return cmd_gtp(args)


if __name__ == "__main__":
    sys.exit(main())
