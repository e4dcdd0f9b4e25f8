"""The web board: a small FastAPI app between a browser and the search service.

The browser gets a page (static/: plain ES modules and SVG, no build step) and a JSON API;
only this app talks gRPC, with the one `SearchClient` it was made with, so the service's
token and TLS files stay here and never reach the browser. Positions are replayed by the
game's own rules here (`services.web.positions`), so an illegal click is answered without the
service and the board is drawn even when the service is down.

API (every position is a `positions.Board`: game, size, rule, komi, moves):

* ``GET /api/info``: the games (sizes, rules, komi from the registry) and the service target;
* ``POST /api/state``: the board for a position (stones, whose turn, forbidden points,
  captures, result);
* ``GET /api/model?game=``: the serving model's name and version (a Predict on the empty board);
* ``POST /api/predict``: the policy over every point (the heatmap) and the top moves;
* ``POST /api/genmove``: the engine's move (``visits`` or ``time_ms``) and the new board;
* ``GET /api/analyze?board=<json>&visits=&time_ms=&every=``: Server-Sent Events relaying the
  Analyze stream (``report`` events, then ``done``, or ``failure``); closing the connection
  cancels the gRPC call, which stops the search on the server;
* ``POST /api/sgf/save`` and ``POST /api/sgf/load``: SGF text out and in;
* ``GET /api/status``: the analyses running, started and cancelled (what the tests watch).

Failures answer ``{"error": {"code", "message", "field", "hint"}}``: the gRPC status name
(INVALID_ARGUMENT, HTTP 400, for a bad position or body found here too, never FastAPI's 422
echoing the input; RESOURCE_EXHAUSTED, HTTP 413, for a body over MAX_BODY_BYTES), the service's
words, and what to do.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field, ValidationError

from services.games.base import COLOR_NAMES, InvalidRequest
from services.games.registry import default_game, registered_games
from services.search.advice import next_step
from services.search.client import SearchClient
from services.web import positions
from services.web.positions import Board

logger = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
MAX_VISITS = 100_000  # the service's own limits (it answers INVALID_ARGUMENT beyond them)
MAX_TIME_MS = 60_000
# a request body: an SGF of MAX_SGF_CHARS characters in UTF-8 JSON, with room; bodies are read
# whole before validation, so an unbounded one would cost memory before any answer
MAX_BODY_BYTES = 8 << 20
ANALYZE_CANDIDATES = 8
HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class SearchBudget(BaseModel):
    """A search's budget as the page chose it: visits, or milliseconds (0 and 0: the
    service's default of 200 visits)."""

    visits: int = Field(0, ge=0, le=MAX_VISITS)
    time_ms: int = Field(0, ge=0, le=MAX_TIME_MS)


class BodyLimit:
    """ASGI middleware answering 413 to a request whose body is over `limit` bytes: by its
    Content-Length before reading it, or (chunked, no length) as soon as the bytes read pass
    it; a chunked body under the limit is read here and handed on whole. (An exception raised
    from `receive` would not do: FastAPI turns any error while reading a body into a 400.)"""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.limit:
                await self._refuse(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        if b"chunked" not in headers.get(b"transfer-encoding", b"").lower():
            await self.app(scope, receive, send)  # no body
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        whole = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        handed = False

        async def replay() -> dict:
            nonlocal handed
            if handed:
                return await receive()
            handed = True
            return whole

        await self.app(scope, replay, send)

    async def _refuse(self, scope: dict, receive: Any, send: Any) -> None:
        response = JSONResponse(error_body("RESOURCE_EXHAUSTED",
                                           f"request body over {self.limit} bytes"),
                                status_code=413)
        await response(scope, receive, send)


class AnalysisBudget(SearchBudget):
    """An analysis's budget: a search's, and a report every `every` visits (0: the
    service's default)."""

    every: int = Field(0, ge=0, le=MAX_VISITS)


class GenMoveBody(SearchBudget):
    board: Board


class SgfBody(BaseModel):
    text: str = Field(max_length=positions.MAX_SGF_CHARS)
    game: str = ""  # the page's game, preferred when the file's GM fits it


@dataclass
class AnalysisCounts:
    """Analyses relayed by this app: running now, started, cancelled before their end."""

    running: int = 0
    started: int = 0
    cancelled: int = 0


def error_body(code: str, message: str, field: str = "", hint: str = "") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field, "hint": hint}}


def rpc_error_body(exc: grpc.RpcError) -> tuple[int, dict[str, Any]]:
    """(HTTP status, error body) of a failed call: its gRPC status, the service's words and
    the advice every front-end gives (`services.search.advice.next_step`)."""
    code = exc.code() if hasattr(exc, "code") else None
    details = " ".join(str(exc.details() if hasattr(exc, "details") else exc).split())
    field = details.split(":", 1)[0] if code == grpc.StatusCode.INVALID_ARGUMENT else ""
    hint = next_step(code, details)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        hint = ("start the web board with the service's token: --token-file FILE or "
                "$MOVEPRED_TOKEN")
    name = code.name if code is not None else "UNKNOWN"
    return HTTP_STATUS.get(code, 502), error_body(name, details, field, hint)


def invalid_body(exc: InvalidRequest) -> dict[str, Any]:
    return error_body("INVALID_ARGUMENT", str(exc), exc.field)


def model_json(response: Any) -> dict[str, str]:
    return {"name": response.model_name, "version": response.model_version}


def create_app(client: SearchClient, *, target: str = "") -> FastAPI:
    """The web board's app over `client` (which it closes at shutdown); `target` is only
    shown on the page."""
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for game in registered_games():  # compiled rules ready before the first board
            game.warm_up()
        yield
        client.close()

    app = FastAPI(title="movepred web board", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.add_middleware(BodyLimit)
    counts = AnalysisCounts()
    lock = threading.Lock()

    @app.exception_handler(InvalidRequest)
    async def _invalid(request: Request, exc: InvalidRequest) -> JSONResponse:
        return JSONResponse(invalid_body(exc), status_code=400)

    @app.exception_handler(grpc.RpcError)
    async def _rpc(request: Request, exc: grpc.RpcError) -> JSONResponse:
        status, body = rpc_error_body(exc)
        return JSONResponse(body, status_code=status)

    @app.exception_handler(ValidationError)
    async def _validation(request: Request, exc: ValidationError) -> JSONResponse:
        return JSONResponse(error_body("INVALID_ARGUMENT", str(exc)), status_code=400)

    @app.exception_handler(RequestValidationError)
    async def _request_validation(request: Request,
                                  exc: RequestValidationError) -> JSONResponse:
        """A body or query the API's models refuse: 400 INVALID_ARGUMENT naming the first
        field, like every other refusal here (FastAPI's own 422 echoes the whole input)."""
        problems = [(".".join(str(p) for p in e.get("loc", ()) if p not in ("body", "query")),
                     e.get("msg", "")) for e in exc.errors()]
        message = "; ".join(f"{where}: {msg}" if where else msg for where, msg in problems[:5])
        field = problems[0][0] if problems else ""
        return JSONResponse(error_body("INVALID_ARGUMENT", message, field), status_code=400)

    @app.get("/")
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        auth = client.auth
        return {"games": positions.games_json(), "default_game": default_game().name,
                "target": target or client.target,
                "tls": auth.tls, "token": bool(auth.token)}

    @app.post("/api/state")
    def state(board: Board) -> dict[str, Any]:
        game, _, current = positions.replay(board)
        return positions.state_json(game, board, current)

    @app.get("/api/model")
    def model(game: str) -> dict[str, Any]:
        _, position = positions.request_position(Board(game=game))
        return {"model": model_json(client.predict(position, top_k=1))}

    @app.post("/api/predict")
    def predict(board: Board) -> dict[str, Any]:
        game, position, current = positions.replay(board)
        size = current.size
        r = client.predict(position, top_k=10)
        policy = [float(p) for p in r.policy]
        return {
            "model": model_json(r), "to_move": COLOR_NAMES.get(r.to_move, ""),
            "policy": policy[: size * size],
            "pass": policy[size * size] if len(policy) > size * size else None,
            "top": [{**positions.point_json(game, m.point, size), "p": m.probability}
                    for m in r.top_moves],
            "value": r.value if r.HasField("value") else None,
        }

    @app.post("/api/genmove")
    def genmove(body: GenMoveBody) -> dict[str, Any]:
        game, position, current = positions.replay(body.board)
        game.require_playable(current, "board")
        size = current.size
        r = client.genmove(position, max_visits=body.visits, max_time_ms=body.time_ms,
                           max_candidates=5)
        move = positions.point_json(game, r.move, size)
        board = body.board.model_copy(update={"moves": [*body.board.moves, move["name"]]})
        game, _, after = positions.replay(board)
        return {
            "model": model_json(r), "move": move, "color": COLOR_NAMES.get(r.color, ""),
            "visits": r.visits, "total_visits": r.total_visits, "value": r.value,
            "prior": r.prior, "pv": list(r.principal_variation_names),
            "candidates": positions.candidates_json(game, r.candidates, size),
            "state": positions.state_json(game, board, after),
        }

    @app.get("/api/analyze")
    async def analyze(board: str, visits: int = 0, time_ms: int = 0,
                      every: int = 0) -> StreamingResponse:
        return ClosingStream(_analysis(board, visits, time_ms, every),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store"})

    async def _analysis(board_text: str, visits: int, time_ms: int,
                        every: int) -> AsyncIterator[str]:
        """The SSE stream of one analysis: every report relayed as it comes, then `done`;
        a failure (a bad position, the service's error) as one `failure` event. However the
        stream ends (the browser closing it included), a call still running is cancelled."""
        try:
            budget = AnalysisBudget(visits=visits, time_ms=time_ms, every=every)
            board = Board.model_validate(json.loads(board_text))
            game, position, current = positions.replay(board)
            game.require_playable(current, "board")
        except (ValueError, ValidationError, RecursionError) as exc:  # RecursionError: "[[[..."
            body = (invalid_body(exc) if isinstance(exc, InvalidRequest)
                    else error_body("INVALID_ARGUMENT", str(exc), "board"))
            yield _event("failure", body)
            return
        size = current.size
        call = client.analyze(position, max_visits=budget.visits, max_time_ms=budget.time_ms,
                              report_every_visits=budget.every,
                              max_candidates=ANALYZE_CANDIDATES)
        reports = iter(call)
        with lock:
            counts.running += 1
            counts.started += 1
        try:
            while True:
                try:
                    r = await asyncio.to_thread(next, reports, None)
                except grpc.RpcError as exc:
                    yield _event("failure", rpc_error_body(exc)[1])
                    return
                if r is None:
                    yield _event("done", {})
                    return
                yield _event("report", {
                    "model": model_json(r), "total_visits": r.total_visits,
                    "reused_visits": r.reused_visits, "value": r.value,
                    "to_move": COLOR_NAMES.get(r.to_move, ""), "final": r.final,
                    "elapsed_ms": r.elapsed_ms,
                    "candidates": positions.candidates_json(game, r.candidates, size),
                })
        finally:
            if not call.done():
                call.cancel()  # stops the search on the server
                with lock:
                    counts.cancelled += 1
                logger.info("analysis cancelled: the page closed its stream")
            with lock:
                counts.running -= 1

    @app.post("/api/sgf/save")
    def sgf_save(board: Board) -> dict[str, Any]:
        game, _, current = positions.replay(board)
        return {"text": positions.save_sgf(game, current, board),
                "filename": f"{game.name}-{len(current.moves)}-moves.sgf"}

    @app.post("/api/sgf/load")
    def sgf_load(body: SgfBody) -> dict[str, Any]:
        board = positions.load_sgf(body.text, body.game)
        game, _, current = positions.replay(board)
        return {"board": board.model_dump(), "state": positions.state_json(game, board, current)}

    @app.get("/api/status")
    def status() -> dict[str, int]:
        with lock:
            return {"analyses_running": counts.running, "analyses_started": counts.started,
                    "analyses_cancelled": counts.cancelled}

    return app


class ClosingStream(StreamingResponse):
    """A streaming response that closes its generator however the response ends: a browser
    that goes away shows only as a failed send, which leaves the generator suspended (and
    its gRPC call running) until it is garbage-collected; closing it runs its `finally`."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


def _event(name: str, data: dict[str, Any]) -> str:
    """One Server-Sent Event."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"
