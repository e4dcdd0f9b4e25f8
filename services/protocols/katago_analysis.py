"""KataGo's JSON analysis engine protocol (`movepred analysis-engine`) over the search service.

    movepred analysis-engine --target 127.0.0.1:50051 [--visits 500] [--threads 2]

Tools written for KataGo's analysis engine (KaTrain-style GUIs, game-review scripts) write one
JSON query a line on stdin and read JSON lines from stdout. The format followed is KataGo's
docs/Analysis_Engine.md (github.com/lightvector/KataGo) and, where that page is silent, the
engine's source it describes (cpp/command/analysis.cpp, search/searchresults.cpp: key order,
8-digit floats, `terminate` answering queued turns with ``noResults``). What is supported, what
is answered differently and why, and an example session: docs/analysis_engine.md.

This module answers; `services.protocols.katago_query` checks a query and turns each turn to
analyse into a `search_pb2.Position`. The thread that reads stdin only parses and queues, so a
``terminate`` reaches a running search at once. Worker threads (``--threads``, KataGo's
numAnalysisThreads) take the turns by priority (then first come) and ask the service's Analyze
for each, a new call taking over the cached tree when one call ends at the service's time
limit before `maxVisits`; `includePolicy` adds one Predict call. The service reports every
twentieth of the visits (at most every 200 with `reportDuringSearchEvery`, which has reports
to send then), so a terminated turn answers what was searched up to then (or ``noResults``).

What the numbers are: the service's values are for the side to move, in [-1, 1]; a move's
winrate is (1 + Q) / 2, its utility Q, lcb Hoeffding's 95 % bound on the winrate (as
`movepred gtp`'s kata-analyze), utilityLcb 2 lcb - 1; they are turned to the side
``--report-winrates-as`` names (black by default, as in KataGo's example config) the way
KataGo turns them. The networks have no score or ownership head: scoreLead, scoreMean,
scoreStdev, scoreSelfplay and ownership are not sent rather than invented.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import math
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import grpc
import numpy as np

from services.api.movepred.v1 import search_pb2
from services.defaults import SEARCH_TARGET
from services.games.base import BLACK, WHITE, Position
from services.games.registry import registered_games
from services.protocols.frontend import SearchClientOwner
from services.protocols.gtp_analysis import LCB_LOG_TERM
from services.protocols.katago_query import (
    DEFAULT_VISITS,
    KATAGO_RULES_GAME,
    PERSPECTIVES,
    TURN_NUMBERS_ERROR,
    Query,
    QueryError,
    TurnJob,
    dump_line,
    integer_list,
    location_name,
    parse_query,
)
from services.records.sgf_writer import app_version
from services.search import auth
from services.search.client import search_client_factory
from services.search.validation import MAX_TIME_MS, MAX_VISITS
from services.settings import bounded

log = logging.getLogger(__name__)

DEFAULT_THREADS = 2
OUTPUT_DIGITS = 8  # KataGo rounds every float it writes to 8 significant digits
REPORTS_PER_SEARCH = 20  # the service reports this often, so a terminated turn has results
MIN_REPORT_EVERY = 8
MAX_REPORT_EVERY_DURING = 200  # with reportDuringSearchEvery: a report at least this often
CALL_MARGIN_S = 30.0  # an Analyze call's deadline past the service's time limit
PREDICT_TIMEOUT_S = 30.0
COLOR_LETTERS = {BLACK: "B", WHITE: "W"}
ACTIONS = ("query_version", "query_models", "clear_cache", "terminate", "terminate_all")


# ---- responses -----------------------------------------------------------------------------
def _round(x: float) -> float:
    return float(f"{x:.{OUTPUT_DIGITS}g}") + 0.0  # + 0.0: no "-0.0" in the output


def _flip(query: Query, to_move: int) -> bool:
    """Whether values for the side to move are reported from the other side's view."""
    return query.perspective is not None and query.perspective != to_move


def move_info(candidate: search_pb2.MoveCandidate, order: int, query: Query,
              to_move: int) -> dict[str, Any]:
    """One `moveInfos` entry. winrate (1 + Q) / 2 with Q the candidate's mean value,
    utility Q, lcb Hoeffding's 95 % bound on the winrate (as `movepred gtp`'s kata-analyze),
    utilityLcb 2 lcb - 1; all turned to the reported side as KataGo turns them."""
    size = query.size
    visits = int(candidate.visits)
    q = float(candidate.value) if visits > 0 else 0.0
    winrate = min(1.0, max(0.0, (1.0 + q) / 2.0))
    lcb = winrate - math.sqrt(LCB_LOG_TERM / (2.0 * visits)) if visits > 0 else 0.0
    utility_lcb = 2.0 * lcb - 1.0
    if _flip(query, to_move):
        winrate, lcb, q, utility_lcb = 1.0 - winrate, 1.0 - lcb, -q, -utility_lcb
    move = _point_move(candidate.move, size)
    pv = [_point_move(p, size) for p in candidate.principal_variation] or [move]
    return {
        "move": location_name(move, size),
        "visits": visits,
        "edgeVisits": visits,
        "winrate": _round(winrate),
        "utility": _round(q),
        "lcb": _round(lcb),
        "utilityLcb": _round(utility_lcb),
        "prior": _round(float(candidate.prior)),
        "order": order,
        "pv": [location_name(m, size) for m in pv[: query.pv_len + 1]],
    }


def _point_move(point: search_pb2.Point, size: int) -> int:
    return size * size if point.is_pass else point.y * size + point.x


def position_hashes(state: Position) -> tuple[str, str]:
    """(thisHash, symHash): the stones and the side to move, hashed (128 bits, hex as KataGo
    writes them); symHash the least over the board's 8 symmetries. Unlike KataGo's, they do
    not hold the simple-ko ban."""
    board = np.asarray(state.board, dtype=np.int8)
    images = []
    for k in range(4):
        rotated = np.rot90(board, k)
        images += [rotated, rotated.T]

    def digest(image: np.ndarray) -> str:
        data = bytes([state.size, state.to_move]) + np.ascontiguousarray(image).tobytes()
        return hashlib.blake2b(data, digest_size=16).hexdigest().upper()

    return digest(board), min(digest(image) for image in images)


def analysis_response(job: TurnJob, report: search_pb2.AnalyzeResponse, *,
                      during: bool, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """KataGo's analysis response for one turn from a service report."""
    query, state = job.query, job.state
    to_move = state.to_move
    visited = [c for c in report.candidates if c.visits > 0]
    root_q = float(report.value)
    winrate = min(1.0, max(0.0, (1.0 + root_q) / 2.0))
    if _flip(query, to_move):
        winrate, root_q = 1.0 - winrate, -root_q
    this_hash, sym_hash = position_hashes(state)
    root: dict[str, Any] = {
        "currentPlayer": COLOR_LETTERS[to_move],
        "visits": int(report.total_visits),
        "winrate": _round(winrate),
        "utility": _round(root_q),
        "thisHash": this_hash,
        "symHash": sym_hash,
    }
    out: dict[str, Any] = {
        "id": query.id,
        "turnNumber": job.turn,
        "isDuringSearch": during,
        "moveInfos": [move_info(c, i, query, to_move) for i, c in enumerate(visited)],
        "rootInfo": root,
    }
    if policy is not None:
        out["policy"] = policy["policy"]
        if "rawWinrate" in policy:
            root["rawWinrate"] = policy["rawWinrate"]
    return out


def policy_array(job: TurnJob, reply: search_pb2.PredictResponse) -> dict[str, Any]:
    """KataGo's `policy`: boardYSize * boardXSize values row by row from the top-left (A19 on
    19x19) and the pass last, -1 for an illegal move (a game without a pass: always -1); and
    `rawWinrate` from the network's value, when the model has a value head."""
    size, state = job.query.size, job.state
    legal = np.asarray(state.legal_mask(), dtype=bool)
    probs = list(reply.policy)
    values = []
    for y in range(size - 1, -1, -1):
        for x in range(size):
            p = y * size + x
            values.append(_round(probs[p]) if legal[p] else -1)
    has_pass = len(legal) > size * size
    values.append(_round(probs[size * size]) if has_pass and legal[size * size] else -1)
    out: dict[str, Any] = {"policy": values}
    if reply.HasField("value"):
        winrate = (1.0 + float(reply.value)) / 2.0
        out["rawWinrate"] = _round(1.0 - winrate if _flip(job.query, state.to_move) else winrate)
    return out


def no_results(job: TurnJob) -> dict[str, Any]:
    """A turn terminated before anything was searched (KataGo's exact reply)."""
    return {"id": job.query.id, "turnNumber": job.turn, "isDuringSearch": False,
            "noResults": True}


def _git_hash() -> str:
    """The checkout's commit, or KataGo's "<omitted>" outside a git checkout."""
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5, cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return "<omitted>"
    text = result.stdout.strip()
    return text if result.returncode == 0 and text else "<omitted>"


def _code(exc: BaseException) -> grpc.StatusCode | None:
    """The status of a failed call (a `grpc.RpcError` that is also its `grpc.Call`)."""
    code = getattr(exc, "code", None)
    return code() if callable(code) else None


def _rpc_error(exc: BaseException, target: str) -> str:
    code = _code(exc)
    details = " ".join(str(exc.details() if hasattr(exc, "details") else exc).split())
    if code == grpc.StatusCode.UNAVAILABLE and not details.startswith("Triton"):
        return f"search service unavailable ({target}: {details[:200]})"
    return f"search failed: {code.name if code is not None else type(exc).__name__}: " \
           f"{details[:300]}"


# ---- the engine ----------------------------------------------------------------------------
class AnalysisEngine(SearchClientOwner):
    """Reads queries with `handle(line)` (the stdin thread), answers on `out` from worker
    threads. `finish()` at the end of the input waits for the queued turns (KataGo's
    behaviour) or, with `wait=False`, terminates them."""

    def __init__(self, target: str = SEARCH_TARGET, *, out: TextIO,
                 client_factory: Callable[[], Any] | None = None,
                 visits: int = DEFAULT_VISITS, threads: int = DEFAULT_THREADS,
                 perspective: int | None = BLACK) -> None:
        super().__init__(target, client_factory)
        self.out = out
        self.visits = visits
        self.perspective = perspective
        self.finished = False
        self._out_lock = threading.Lock()
        self._lock = threading.Lock()  # jobs' status and calls, the open list, the client
        self._idle = threading.Condition(self._lock)
        self._open: list[TurnJob] = []
        self._actions: list[threading.Thread] = []
        self._queue: queue.PriorityQueue[tuple[int, int, TurnJob | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._workers = [threading.Thread(target=self._work, name=f"analysis-{i}", daemon=True)
                         for i in range(threads)]
        for worker in self._workers:
            worker.start()

    # -- output --
    def emit(self, obj: dict[str, Any]) -> None:
        with self._out_lock:
            self.out.write(dump_line(obj) + "\n")
            self.out.flush()

    def error(self, message: str, qid: str | None = None, field_name: str | None = None) -> None:
        self.emit({"error": message} if qid is None
                  else {"id": qid, "field": field_name, "error": message})

    # -- input --
    def handle(self, line: str) -> None:
        """One input line: an action answered at once, or a query checked and queued."""
        line = line.strip()
        if not line:
            return

        def refuse(token: str) -> Any:
            raise ValueError(f"invalid JSON value {token}")

        try:
            query = json.loads(line, parse_constant=refuse)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            self.error(f"{exc} - could not parse input line as json request: {line}")
            return
        if not isinstance(query, dict):
            self.error("Request line was valid json but was not an object, ignoring: "
                       f"{dump_line(query)}")
            return
        if not isinstance(query.get("id"), str):
            self.error('Request must have a string "id" field')
            return
        if isinstance(query.get("action"), str):
            self._action(query)
            return
        try:
            parsed = parse_query(query, default_visits=self.visits, perspective=self.perspective)
        except QueryError as exc:
            self.error(exc.message, query["id"], exc.field)
            return
        except Exception as exc:  # the engine outlives any query
            log.exception("query %s", query["id"])
            self.error(f"internal error: {type(exc).__name__}: {exc}")
            return
        for name, message in parsed.warnings:
            self.emit({"id": query["id"], "field": name, "warning": message})
        with self._lock:
            self._open += parsed.jobs
            # the highest priority first: a worker may take one before the rest are queued
            for job in sorted(parsed.jobs, key=lambda j: -j.priority):
                self._queue.put((-job.priority, next(self._order), job))

    def _action(self, query: dict) -> None:
        action = query["action"]
        if action == "query_version":
            self.emit({**query, "version": app_version(), "git_hash": _git_hash()})
        elif action == "clear_cache":  # the service keeps its trees (see the module doc)
            self.emit(query)
        elif action == "query_models":
            asked = threading.Thread(target=self._query_models, args=(query,), daemon=True)
            self._actions.append(asked)  # answered before the end (`finish`)
            asked.start()
        elif action in ("terminate", "terminate_all"):
            target = query.get("terminateId")
            if action == "terminate" and not isinstance(target, str):
                self.error('Requests for a terminate action must have a string "terminateId" '
                           "field", query["id"], "terminateId")
                return
            turns = None
            if "turnNumbers" in query:
                turns = integer_list(query["turnNumbers"])
                if turns is None:
                    self.error(TURN_NUMBERS_ERROR, query["id"], "turnNumbers")
                    return
            self.terminate(target if action == "terminate" else None, turns)
            self.emit(query)
        else:
            self.error("'action' field must be " + " or ".join(f"'{a}'" for a in ACTIONS))

    def _query_models(self, query: dict) -> None:
        """The served model of each game KataGo's queries reach (one Predict on an empty board
        of the game: the service names the version it answered with)."""
        models = []
        failure = None
        for game in {KATAGO_RULES_GAME, *(g for g in registered_games()
                                                    if g.rule_names)}:
            position = search_pb2.Position(game=game.proto_game, game_name=game.name,
                                           board_size=game.default_size)
            try:
                reply = self._search_client().predict(position, top_k=1, timeout=PREDICT_TIMEOUT_S)
            except grpc.RpcError as exc:  # a game the service does not serve
                failure = exc
                continue
            models.append({"name": reply.model_name, "internalName": reply.model_name,
                           "version": reply.model_version, "game": game.name,
                           "usesHumanSLProfile": False})
        if not models and failure is not None:
            self.error(_rpc_error(failure, self.target), query["id"], "action")
            return
        self.emit({**query, "models": sorted(models, key=lambda m: m["game"])})

    def terminate(self, qid: str | None, turns: Sequence[int] | None) -> None:
        """Stop the open turns of query `qid` (None: every query), of `turns` only if given: a
        queued turn is answered ``noResults`` now, a running one is cancelled and answers
        what its search reported."""
        wanted = None if turns is None else set(turns)
        with self._lock:
            for job in list(self._open):
                if ((qid is not None and job.query.id != qid)
                        or (wanted is not None and job.turn not in wanted)
                        or job.status in ("terminated", "done")):
                    continue
                previous, job.status = job.status, "terminated"
                if previous == "queued":
                    self._open.remove(job)
                    self.emit(no_results(job))
                    self._idle.notify_all()
                elif job.call is not None:
                    job.call.cancel()

    # -- the workers --
    def _search_client(self) -> Any:
        with self._lock:
            return self._client_or_new()

    def _work(self) -> None:
        while True:
            _, _, job = self._queue.get()
            if job is None:
                return
            with self._lock:
                if job.status != "queued":
                    continue
                job.status = "running"
            try:
                self._run(job)
            except Exception as exc:  # a worker outlives any turn
                log.exception("turn %d of %s", job.turn, job.query.id)
                self._failed(job, f"internal error: {type(exc).__name__}: {exc}")
            finally:
                with self._lock:
                    if job in self._open:
                        self._open.remove(job)
                    job.status = "done"
                    self._idle.notify_all()

    def _failed(self, job: TurnJob, message: str) -> None:
        """A turn the service could not search: KataGo's error line with the query's id, and
        the turn's number and the final-reply marker, so a tool counting turns is not left
        waiting."""
        self.emit({"id": job.query.id, "turnNumber": job.turn, "isDuringSearch": False,
                   "error": message})

    def _run(self, job: TurnJob) -> None:
        query = job.query
        client = self._search_client()
        latest: search_pb2.AnalyzeResponse | None = None
        policy = None
        started = time.monotonic()
        next_report = (started + query.first_report_s if query.first_report_s is not None
                       else math.inf)
        points = query.size * query.size
        every = query.max_visits // REPORTS_PER_SEARCH
        if query.report_every_s is not None:  # reports for the tool to show while it runs
            every = min(every, MAX_REPORT_EVERY_DURING)
        every = max(MIN_REPORT_EVERY, every)
        try:
            if query.include_policy:
                reply = client.predict(job.position, top_k=1, timeout=PREDICT_TIMEOUT_S)
                policy = policy_array(job, reply)
            visits_before = -1
            while True:
                with self._lock:
                    if job.status == "terminated":
                        break
                    job.call = client.analyze(
                        job.position, max_visits=query.max_visits, max_time_ms=MAX_TIME_MS,
                        report_every_visits=every,
                        max_candidates=max(1, min(points, query.max_visits)),
                        timeout=MAX_TIME_MS / 1000 + CALL_MARGIN_S)
                for report in job.call:
                    latest = report
                    now = time.monotonic()
                    if not report.final and now >= next_report:
                        self.emit(analysis_response(job, report, during=True, policy=policy))
                        next_report = now + (query.report_every_s or math.inf)
                if (latest is None or latest.total_visits >= query.max_visits
                        or latest.total_visits <= visits_before):
                    break
                visits_before = latest.total_visits  # the service's time limit: go on
        except grpc.RpcError as exc:
            cancelled = _code(exc) == grpc.StatusCode.CANCELLED
            if not (cancelled and job.status == "terminated"):
                self._failed(job, _rpc_error(exc, self.target))
                return
        if latest is None:
            self.emit(no_results(job))
        else:
            self.emit(analysis_response(job, latest, during=False, policy=policy))

    def finish(self, wait: bool = True) -> None:
        """The input ended: wait for every open turn (or terminate them), then stop."""
        if self.finished:
            return
        if not wait:
            self.terminate(None, None)
        with self._lock:
            self._idle.wait_for(lambda: not self._open)
        for action in self._actions:
            action.join(timeout=PREDICT_TIMEOUT_S * 3)
        for _ in self._workers:
            self._queue.put((sys.maxsize, next(self._order), None))
        for worker in self._workers:
            worker.join(timeout=10)
        self.finished = True
        self.close()


def serve(engine: AnalysisEngine, stdin: TextIO, *, wait: bool = True) -> int:
    """Read queries until the end of the input (this thread only reads and queues), then
    finish the open turns as KataGo does."""
    try:
        for line in iter(stdin.readline, ""):
            engine.handle(line)
    finally:
        engine.finish(wait=wait)
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=SEARCH_TARGET, help="search service host:port")
    p.add_argument("--visits", type=bounded(int, 1, MAX_VISITS), default=DEFAULT_VISITS,
                   help=f"maxVisits of a query that gives none (default {DEFAULT_VISITS})")
    p.add_argument("--threads", type=bounded(int, 1, 64), default=DEFAULT_THREADS,
                   help="turns searched at a time (KataGo's numAnalysisThreads; default "
                        f"{DEFAULT_THREADS})")
    p.add_argument("--report-winrates-as", choices=("black", "white", "sidetomove"),
                   default="black",
                   help="whose view winrates and utilities are given from (KataGo's "
                        "reportAnalysisWinratesAs; default black, as its example config)")
    p.add_argument("--quit-without-waiting", action="store_true",
                   help="at the end of the input, terminate the open queries instead of "
                        "finishing them")
    auth.add_client_arguments(p)


def cmd_analysis_engine(args: argparse.Namespace) -> int:
    try:
        factory = search_client_factory(args)
    except auth.AuthConfigError as exc:  # stdout belongs to the protocol
        print(f"movepred analysis-engine: error: {exc}", file=sys.stderr)
        return 2
    if hasattr(sys.stdin, "reconfigure"):  # a line that is not UTF-8 is an error line, not
        sys.stdin.reconfigure(errors="replace")  # the end of the engine
    engine = AnalysisEngine(args.target, out=sys.stdout, client_factory=factory,
                            visits=args.visits, threads=args.threads,
                            perspective=PERSPECTIVES[args.report_winrates_as])
    return serve(engine, sys.stdin, wait=not args.quit_without_waiting)


def add_analysis_engine_command(subparsers: argparse._SubParsersAction) -> dict:
    """Register `analysis-engine`: KataGo's JSON analysis protocol on stdin/stdout."""
    p = subparsers.add_parser(
        "analysis-engine",
        help="KataGo's JSON analysis engine protocol (stdin/stdout) over the search service",
        epilog="Fields supported and how they differ from KataGo's: docs/analysis_engine.md.",
    )
    add_arguments(p)
    return {"analysis-engine": cmd_analysis_engine}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.protocols.katago_analysis",
                                description="KataGo's JSON analysis protocol over the movepred "
                                            "search service.")
    add_arguments(p)
    return cmd_analysis_engine(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
