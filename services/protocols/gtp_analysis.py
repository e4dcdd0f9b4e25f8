"""Live analysis over GTP: ``lz-analyze``, ``kata-analyze`` and Sabaki's ``analyze``, in the
formats the GUIs that read them (Sabaki, Lizzie) parse.

Formats followed (read for this module):

* KataGo, docs/GTP_Extensions.md (github.com/lightvector/KataGo): ``lz-analyze [player]
  [interval] KEYVALUEPAIR...`` and ``kata-analyze`` with the same arguments; ``interval
  CENTISECONDS`` may also be given as a key; ``minmoves N`` / ``maxmoves N`` bound the moves
  reported; the other keys (``ownership``, ``ownershipStdev``, ``movesOwnership``, ``pvVisits``,
  ``avoid``, ``allow``, ``rootInfo``...) are accepted and ignored here (no ownership head, no
  move restrictions in the search service). The response is ``=`` and then, every interval, ONE
  line holding every candidate, each starting with ``info``; any line received on stdin ends
  it with the usual empty line, and that line is then processed as the next command.
* lz-analyze fields: ``info move E4 visits 1178 winrate 4802 prior 2211 lcb 4781 order 0 pv E4
  E3 ...``: winrate, prior and lcb are integers in 1/10000 (Leela Zero's output, as KataGo
  documents it).
* kata-analyze fields: ``info move E4 visits 487 utility -0.04 winrate 0.48 prior 0.22 lcb 0.477
  utilityLcb -0.05 order 0 pv E4 E3 ...``: floats; KataGo tells consumers to be robust to field
  order and to fields missing or added.
* Lizzie (github.com/featurecat/lizzie, analysis/MoveData.java: fromInfo, fromInfoKatago)
  splits a line at `` info `` and reads each candidate's key/value pairs up to ``pv``; a key
  that is not sent (scoreMean here) stays 0.
* ``lz-genmove_analyze`` / ``kata-genmove_analyze`` / ``genmove_analyze`` (KataGo's doc and
  Sabaki's): the same lines while the move is searched (the genmove's budget: visits or the
  clock's time), then ``play <vertex>`` and the empty line; input does not stop it. The move
  is the final report's best candidate (the most visited), and it is played.
* Sabaki, docs/guides/engine-analysis-integration.md (github.com/SabakiHQ/Sabaki): ``analyze
  <color> <interval>``, ``info <keyvalue>... pv <vertex>...`` repeated on one line; a winrate
  with a ``.`` is read as a float in [0, 1]; ``move``, ``visits`` and ``winrate`` are required,
  ``scoreLead`` optional. ``analyze`` answers as ``kata-analyze`` does (floats always written
  with a decimal point, as KataGo's ``analyze`` does for Sabaki).

What the numbers are here: every value is for the side to move (the colour given, else the
colour whose turn it is), as KataGo reports by default. ``winrate`` = (1 + Q) / 2 with Q the
search's mean value of the move in [-1, 1]; ``utility`` = Q (there is no score term: the Go
network has no score head, so scoreMean / scoreLead / scoreStdev are not sent rather than
invented); ``prior`` the policy prior; ``lcb`` a lower confidence bound on the winrate that
needs no variance (the service reports none): Hoeffding's at 95 %, winrate - sqrt(ln(20) /
(2 visits)), floored at 0 (0 for an unvisited move); ``utilityLcb`` = 2 lcb - 1; ``order`` the
rank by visits (0 the best); ``pv`` the principal variation as GTP vertices. Moves without
visits are left out unless ``minmoves`` asks for more than were visited.

The search behind it is the search service's Analyze (one call lasts up to the service's time
limit, 60 s; the next call takes over its tree, so the analysis goes on up to the service's
visit limit, 100,000); after that the last line stays the answer's last until the controller
sends a line (KataGo's documented behaviour: the command never ends by itself).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from services.api.movepred.v1 import search_pb2
from services.numerals import ascii_int

log = logging.getLogger(__name__)
DEFAULT_INTERVAL_CS = 100  # Leela Zero's and KataGo's default when no interval is given
DEFAULT_MOVES = 10  # candidates reported unless maxmoves / minmoves say otherwise
MAX_MOVES = 50
REPORT_EVERY_VISITS = 8  # the service's reports: the lines show the latest at each interval
LCB_LOG_TERM = math.log(20.0)  # Hoeffding at 95 %: ln(1 / 0.05)
_COLORS = ("b", "black", "w", "white")


class AnalyzeArgsError(ValueError):
    """Arguments an analysis command cannot take; the message becomes the ``?`` answer."""


@dataclass(frozen=True)
class AnalyzeArgs:
    """What an analysis command asked for: `color` None means the side to move."""

    color: str | None = None
    interval_cs: int = DEFAULT_INTERVAL_CS
    min_moves: int = 0
    max_moves: int = 0
    ignored: tuple[str, ...] = field(default=())

    @property
    def interval_s(self) -> float:
        return max(self.interval_cs, 1) / 100.0

    @property
    def candidates(self) -> int:
        """How many candidates to ask the service for."""
        want = self.max_moves or max(DEFAULT_MOVES, self.min_moves)
        return max(1, min(MAX_MOVES, want))


def _int(text: str, what: str) -> int:
    value = ascii_int(text)
    if value is None:
        raise AnalyzeArgsError(f"syntax error: {what} must be an integer, got {text!r}")
    if value < 0:
        raise AnalyzeArgsError(f"syntax error: {what} must be >= 0, got {value}")
    return value


def parse_analyze_args(args: Sequence[str]) -> AnalyzeArgs:
    """``[colour] [interval] key value ...`` as KataGo documents for lz- and kata-analyze."""
    words = list(args)
    color = None
    interval = DEFAULT_INTERVAL_CS
    if words and words[0].lower() in _COLORS:
        color = words.pop(0).lower()
    if words and words[0].lstrip("-").isdigit():
        interval = _int(words.pop(0), "interval")
    min_moves = max_moves = 0
    ignored: list[str] = []
    while words:
        key = words.pop(0)
        lower = key.lower()
        if lower in ("avoid", "allow"):  # PLAYER VERTEX,VERTEX,... UNTILDEPTH
            if len(words) < 3:
                raise AnalyzeArgsError(f"syntax error: {key} takes a player, vertices and a depth")
            del words[:3]
            ignored.append(lower)
            continue
        if not words:
            raise AnalyzeArgsError(f"syntax error: {key} has no value")
        value = words.pop(0)
        if lower == "interval":
            interval = _int(value, "interval")
        elif lower == "minmoves":
            min_moves = _int(value, "minmoves")
        elif lower == "maxmoves":
            max_moves = _int(value, "maxmoves")
        else:  # ownership true, pvVisits true, and keys of later versions: accepted, ignored
            ignored.append(lower)
    return AnalyzeArgs(color=color, interval_cs=interval, min_moves=min_moves,
                       max_moves=max_moves, ignored=tuple(ignored))


@dataclass(frozen=True)
class MoveStats:
    """One candidate as the GUIs see it (winrate and lcb in [0, 1], for the side to move)."""

    move: str
    visits: int
    winrate: float
    prior: float
    lcb: float
    utility: float
    pv: tuple[str, ...]


def move_stats(candidate: Any) -> MoveStats:
    """A service MoveCandidate -> the numbers the formats carry (see the module docstring)."""
    visits = int(candidate.visits)
    q = float(candidate.value) if visits > 0 else 0.0
    winrate = min(1.0, max(0.0, (1.0 + q) / 2.0))
    lcb = max(0.0, winrate - math.sqrt(LCB_LOG_TERM / (2.0 * visits))) if visits > 0 else 0.0
    pv = tuple(candidate.principal_variation_names) or (candidate.name,)
    return MoveStats(move=candidate.name, visits=visits, winrate=winrate,
                     prior=float(candidate.prior), lcb=lcb, utility=q, pv=pv)


def select(report: search_pb2.AnalyzeResponse, args: AnalyzeArgs) -> list[MoveStats]:
    """The candidates to print: the visited ones (most visited first, as the service sends
    them), topped up with unvisited ones to `min_moves`, cut to `max_moves`."""
    stats = [move_stats(c) for c in report.candidates]
    visited = [s for s in stats if s.visits > 0]
    chosen = visited + [s for s in stats if s.visits == 0][: max(0, args.min_moves - len(visited))]
    if not chosen and stats:  # nothing searched yet: the policy's best, so the line is not empty
        chosen = stats[:1]
    return chosen[: args.max_moves] if args.max_moves else chosen


def lz_line(stats: Sequence[MoveStats]) -> str:
    """Leela Zero's format: integers in 1/10000."""
    return " ".join(
        f"info move {s.move} visits {s.visits} winrate {round(s.winrate * 10000)} "
        f"prior {round(s.prior * 10000)} lcb {round(s.lcb * 10000)} order {i} "
        f"pv {' '.join(s.pv)}"
        for i, s in enumerate(stats))


def _float(x: float) -> str:
    """A float always written with a decimal point (Sabaki tells integers and floats apart)."""
    text = f"{x:.6g}"
    return text if any(c in text for c in ".en") else text + ".0"


def kata_line(stats: Sequence[MoveStats]) -> str:
    """KataGo's format: floats, winrate and prior in [0, 1]."""
    return " ".join(
        f"info move {s.move} visits {s.visits} utility {_float(s.utility)} "
        f"winrate {_float(s.winrate)} prior {_float(s.prior)} lcb {_float(s.lcb)} "
        f"utilityLcb {_float(2.0 * s.lcb - 1.0)} order {i} pv {' '.join(s.pv)}"
        for i, s in enumerate(stats))


FORMATS: dict[str, Callable[[Sequence[MoveStats]], str]] = {
    "lz-analyze": lz_line,
    "kata-analyze": kata_line,
    "analyze": kata_line,
}
# the same lines while a move is searched, then ``play <vertex>`` (KataGo's and Sabaki's
# genmove_analyze; not stopped by input)
GENMOVE_FORMATS: dict[str, Callable[[Sequence[MoveStats]], str]] = {
    "lz-genmove_analyze": lz_line,
    "kata-genmove_analyze": kata_line,
    "genmove_analyze": kata_line,
}


class AnalysisStream:
    """A running analysis: a thread reads the service's stream and keeps the latest report;
    `line()` formats it. `stop()` cancels the call and waits for the thread.

    `start()` makes an Analyze call. One call ends at the service's time limit; the analysis
    then goes on with the next call, which takes over the cached tree (the service's tree
    reuse), until a call adds no visits (the visit limit reached) or the stream is stopped."""

    def __init__(self, start: Callable[[], Any], args: AnalyzeArgs,
                 formatter: Callable[[Sequence[MoveStats]], str], header: str,
                 continued: bool = True, move_color: int = 0) -> None:
        self._start = start
        self._continued = continued  # False: one call (a genmove's search), no next
        self.move_color = move_color  # genmove_analyze: the colour whose move is searched
        self.started_at = time.monotonic()
        self.call = start()
        self.args = args
        self.header = header  # "=" or "=ID", written before the first info line
        self._format = formatter
        self._latest: search_pb2.AnalyzeResponse | None = None
        self._printed: search_pb2.AnalyzeResponse | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.error: Exception | None = None
        self.calls = 1
        self.started = threading.Event()  # the first report came, or the call ended
        self.finished = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="gtp-analyze", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            visits = -1
            while True:
                for report in self.call:
                    with self._lock:
                        self._latest = report
                    self.started.set()
                latest = self._latest
                if (not self._continued or self._stopping.is_set() or latest is None
                        or latest.total_visits <= visits):
                    break
                visits = latest.total_visits
                with self._lock:  # the next call, unless stop() came first
                    if self._stopping.is_set():
                        break
                    self.call = self._start()
                    self.calls += 1
        except Exception as exc:  # a cancelled call ends here too
            self.error = exc
            code = exc.code() if isinstance(exc, grpc.RpcError) and hasattr(exc, "code") else None
            if code != grpc.StatusCode.CANCELLED:  # stdout belongs to the protocol
                log.warning("analysis stopped: %s", exc)
        finally:
            self.finished.set()
            self.started.set()

    @property
    def has_report(self) -> bool:
        with self._lock:
            return self._latest is not None

    def line(self) -> str | None:
        """The latest report as one line, or None when nothing new came since the last one."""
        with self._lock:
            report = self._latest
            if report is None or report is self._printed:
                return None
            self._printed = report
        stats = select(report, self.args)
        return self._format(stats) if stats else None

    @property
    def latest(self) -> search_pb2.AnalyzeResponse | None:
        with self._lock:
            return self._latest

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            call = self.call
        if not self.finished.is_set():
            call.cancel()
        self._thread.join(timeout=10)


def run_stream(stream: AnalysisStream, lines: queue.Queue[str | None],
               write: Callable[[str], None]) -> str | None:
    """Write the response of `stream` until a line arrives on `lines`: the header, one info line
    per interval (when the search has something new), then the empty line that ends a GTP
    response. Returns the line that stopped it (None: the input ended), for the caller to
    process as the next command."""
    write(f"{stream.header}\n")
    try:
        while True:
            try:
                incoming = lines.get(timeout=stream.args.interval_s)
            except queue.Empty:
                text = stream.line()
                if text:
                    write(text + "\n")
                continue
            return incoming
    finally:
        stream.stop()
        write("\n")


def run_to_end(stream: AnalysisStream, write: Callable[[str], None],
               finish: Callable[[search_pb2.AnalyzeResponse | None], str]) -> None:
    """A genmove_analyze response: the header, an info line per interval while the search
    runs (input lines wait in the queue: this response is not stopped by them), the last
    report's line, then ``play <vertex>`` from `finish(last report)` and the empty line."""
    write(f"{stream.header}\n")
    try:
        while not stream.finished.wait(stream.args.interval_s):
            text = stream.line()
            if text:
                write(text + "\n")
        text = stream.line()
        if text:
            write(text + "\n")
        write(f"play {finish(stream.latest)}\n")
    finally:
        stream.stop()
        write("\n")
