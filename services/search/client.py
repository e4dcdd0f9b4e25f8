"""Python client of the search service (used by the `movepred` CLI and by tests).

Moves are given as RenjuNet names ("h8") or (x, y) pairs; names are parsed here, pairs are sent
as they are, so the server's validation has the last word. Every call also takes a ready
`search_pb2.Position` in place of the moves: that is how Go positions are sent (`go_position`
builds one from GTP vertices such as "D4" and "pass"). Calls return the proto responses and
raise `grpc.RpcError` for failures (e.g. INVALID_ARGUMENT, UNAVAILABLE, RESOURCE_EXHAUSTED;
`services.api.errors.field_violations(error)` reads the field an INVALID_ARGUMENT names, and
docs/api.md lists the codes).
`analyze` returns the streaming call: iterate it for the reports, `cancel()` it to stop the
search on the server.

Security: `tls_ca` / `client_cert` / `client_key` (or `tls=True` for the system's CAs) connect
with TLS, mutual with a client certificate; `token` is sent as ``authorization: Bearer``
metadata on every call (`services.search.auth`). The channel reconnects at least every
0.5 s while the server is away (`services.grpc_options`), so a client is back within a second
of a restarted server listening; `wait_for_ready=True` makes calls wait (up to their timeout)
for the connection instead of failing with UNAVAILABLE at once.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.coords import parse_point
from services.games.base import Game
from services.games.go.game import DEFAULT_KOMI, GO_SIZE, parse_vertex
from services.games.gomoku.rules import DEFAULT_SIZE, Rule
from services.games.registry import default_game, get_game
from services.search.auth import ClientAuth, client_auth_from
from services.search.validation import MAX_TIME_MS  # an InferSequence's time limit

MoveLike = str | tuple[int, int]
GoMoveLike = str | tuple[int, int] | None  # "D4", "pass", (x, y), None (a pass)
RuleLike = Rule | str | int

_PROTO_RULES = {
    Rule.FREESTYLE: search_pb2.RULE_FREESTYLE,
    Rule.STANDARD: search_pb2.RULE_STANDARD,
    Rule.RENJU: search_pb2.RULE_RENJU,
}
DEFAULT_PREDICT_TIMEOUT_S = 10.0
GENMOVE_EXTRA_TIMEOUT_S = 10.0  # on top of max_time_ms for network and start-up
DEFAULT_GENMOVE_TIMEOUT_S = 300.0  # visits-only searches


def proto_rule(rule: RuleLike) -> int:
    """Rule.RENJU, "renju" or search_pb2.RULE_RENJU -> search_pb2.RULE_RENJU (ints pass
    unchanged)."""
    if isinstance(rule, int) and not isinstance(rule, Rule):
        return rule
    return _PROTO_RULES[Rule(rule.lower() if isinstance(rule, str) else rule)]


def to_points(moves: Sequence[MoveLike], size: int = DEFAULT_SIZE) -> list[search_pb2.Point]:
    """Names are parsed (CoordinateError for a bad name); (x, y) pairs are sent as given."""
    points = []
    for m in moves:
        x, y = parse_point(m, size) if isinstance(m, str) else (int(m[0]), int(m[1]))
        points.append(search_pb2.Point(x=x, y=y))
    return points


def position(
    moves: Sequence[MoveLike], rule: RuleLike = Rule.FREESTYLE, board_size: int = DEFAULT_SIZE
) -> search_pb2.Position:
    return search_pb2.Position(
        game=search_pb2.GAME_GOMOKU,
        rule=proto_rule(rule),
        board_size=board_size,
        moves=to_points(moves, board_size),
    )


def go_position(
    moves: Sequence[GoMoveLike],
    komi: float = DEFAULT_KOMI,
    board_size: int = GO_SIZE,
    setup_black: Sequence[GoMoveLike] = (),
    setup_white: Sequence[GoMoveLike] = (),
    first_to_move: int = search_pb2.COLOR_BLACK,
) -> search_pb2.Position:
    """A Go position: GTP vertices ("D4", "pass"), (x, y) pairs or None (a pass) in play
    order; `first_to_move` (search_pb2.COLOR_BLACK / WHITE) plays moves[0]. Vertices are parsed here
    (VertexError for a bad one)."""

    def point(m: GoMoveLike) -> search_pb2.Point:
        if m is None:
            return search_pb2.Point(is_pass=True)
        if isinstance(m, str):
            p = parse_vertex(m, board_size)
            if p is None:
                return search_pb2.Point(is_pass=True)
            return search_pb2.Point(x=p % board_size, y=p // board_size)
        return search_pb2.Point(x=int(m[0]), y=int(m[1]))

    return search_pb2.Position(
        game=search_pb2.GAME_GO,
        rule=search_pb2.RULE_GO_AREA,
        board_size=board_size,
        moves=[point(m) for m in moves],
        setup_black=[point(m) for m in setup_black],
        setup_white=[point(m) for m in setup_white],
        first_to_move=first_to_move,
        komi=komi,
    )


def game_position(game: str | Game, moves: Sequence[str], board_size: int = 0
                  ) -> search_pb2.Position:
    """A position of any registered game (a `Game` or its name) from move names in the game's
    notation (`Game.parse_move`: "h8" for Gomoku, "D4" / "pass" for Go); `board_size` 0 is
    the game's default. A bad name raises `CoordinateError`; the server judges legality."""
    g = get_game(game) if isinstance(game, str) else game
    size = board_size or g.default_size
    return search_pb2.Position(game=g.proto_game, game_name=g.name, board_size=size,
                               moves=[g.move_point(g.parse_move(m, size), size) for m in moves])


def _as_position(
    moves: Sequence[MoveLike] | search_pb2.Position, rule: RuleLike
) -> search_pb2.Position:
    if isinstance(moves, search_pb2.Position):
        return moves
    return position(moves, rule)


def _rollout_field(rollout_lambda: float) -> dict[str, float]:
    """The request's `rollout_lambda` field: set when > 0, else left out (the search as it
    was without the option)."""
    return {"rollout_lambda": rollout_lambda} if rollout_lambda else {}


def _search_timeout(timeout: float | None, max_time_ms: int) -> float:
    if timeout is not None:
        return timeout
    if max_time_ms > 0:
        return max_time_ms / 1000.0 + GENMOVE_EXTRA_TIMEOUT_S
    return DEFAULT_GENMOVE_TIMEOUT_S


def infer_sequence_request(
    black: Sequence[MoveLike],
    white: Sequence[MoveLike],
    game: str | Game | None = None,
    rule: RuleLike = 0,
    board_size: int = 0,
    *,
    iterations: int = 0,
    restarts: int = 0,
    seed: int = 0,
    max_time_ms: int = 0,
    neighbour: str = "",
    init: str = "",
    tempering: bool = False,
    polish: bool = False,
) -> search_pb2.InferSequenceRequest:
    """An InferSequenceRequest of the stones (names in the game's notation or (x, y) pairs)."""
    g = default_game() if game is None else get_game(game) if isinstance(game, str) else game
    size = board_size or g.default_size

    def points(stones: Sequence[MoveLike]) -> list[search_pb2.Point]:
        return [g.move_point(g.parse_move(m, size), size) if isinstance(m, str)
                else search_pb2.Point(x=int(m[0]), y=int(m[1])) for m in stones]

    return search_pb2.InferSequenceRequest(
        game=g.proto_game, game_name=g.name, rule=proto_rule(rule), board_size=size,
        black=points(black), white=points(white), iterations=iterations,
        restarts=restarts, seed=seed, max_time_ms=max_time_ms, neighbour=neighbour,
        init=init, tempering=tempering, polish=polish,
    )


class SearchClient:
    """Blocking client for one search server; usable as a context manager.

    Each client holds its own connection: gRPC otherwise lets channels to the same address share
    one (its global subchannel pool), and a server running several processes on one port
    (`--processes`) can only spread load by connection."""

    def __init__(
        self,
        target: str,
        *,
        tls: bool = False,
        tls_ca: Path | str | None = None,
        client_cert: Path | str | None = None,
        client_key: Path | str | None = None,
        token: str | None = None,
        tls_server_name: str | None = None,
        wait_for_ready: bool = False,
        auth: ClientAuth | None = None,
    ) -> None:
        """`auth` (from `services.search.auth.client_auth_from`) replaces the separate TLS and
        token arguments."""
        if auth is None:
            auth = ClientAuth(
                tls=bool(tls or tls_ca or client_cert or client_key),
                tls_ca=Path(tls_ca) if tls_ca else None,
                client_cert=Path(client_cert) if client_cert else None,
                client_key=Path(client_key) if client_key else None,
                token=token,
                server_name=tls_server_name,
            )
        self.target = target
        self.auth = auth
        self.wait_for_ready = wait_for_ready
        self._metadata = auth.metadata or None
        self._channel = auth.channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        self._stub = search_pb2_grpc.SearchServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def _call_options(self, timeout: float | None) -> dict:
        return {"timeout": timeout, "metadata": self._metadata,
                "wait_for_ready": self.wait_for_ready or None}

    def health(self, service: str = "", timeout: float | None = 2.0) -> str:
        """The gRPC health status of `service` ("" the process, or "movepred.v1.SearchService"):
        "SERVING", "NOT_SERVING"...; needs no token."""
        response = self._health.Check(health_pb2.HealthCheckRequest(service=service),
                                      timeout=timeout, wait_for_ready=self.wait_for_ready or None)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def predict(
        self,
        moves: Sequence[MoveLike] | search_pb2.Position,
        rule: RuleLike = Rule.FREESTYLE,
        top_k: int = 5,
        timeout: float | None = DEFAULT_PREDICT_TIMEOUT_S,
    ) -> search_pb2.PredictResponse:
        request = search_pb2.PredictRequest(position=_as_position(moves, rule), top_k=top_k)
        return self._stub.Predict(request, **self._call_options(timeout))

    def predict_many(
        self,
        games: Sequence[Sequence[MoveLike] | search_pb2.Position],
        rule: RuleLike = Rule.FREESTYLE,
        top_k: int = 5,
        timeout: float | None = DEFAULT_PREDICT_TIMEOUT_S,
    ) -> search_pb2.PredictResponse:
        """Several positions in one request (one inference call); answers in `results`."""
        request = search_pb2.PredictRequest(
            positions=[_as_position(moves, rule) for moves in games], top_k=top_k
        )
        return self._stub.Predict(request, **self._call_options(timeout))

    def genmove(
        self,
        moves: Sequence[MoveLike] | search_pb2.Position,
        rule: RuleLike = Rule.FREESTYLE,
        max_visits: int = 0,
        max_time_ms: int = 0,
        timeout: float | None = None,
        max_candidates: int = 0,
        reuse_tree: bool = True,
        rollout_lambda: float = 0.0,
        ponder: bool = False,
    ) -> search_pb2.GenMoveResponse:
        """Both budgets 0 lets the server pick its default (200 visits).

        timeout None: max_time_ms plus 10 s when a time budget is given, else 300 s.
        `rollout_lambda` > 0: leaf values mixed with rollouts (sent only then). `ponder`: the
        server keeps searching the opponent's turn until the next request (the response's
        `pondering` says whether it does).
        """
        request = search_pb2.GenMoveRequest(
            position=_as_position(moves, rule),
            max_visits=max_visits,
            max_time_ms=max_time_ms,
            max_candidates=max_candidates,
            disable_tree_reuse=not reuse_tree,
            ponder=ponder,
            **_rollout_field(rollout_lambda),
        )
        return self._stub.GenMove(request,
                                  **self._call_options(_search_timeout(timeout, max_time_ms)))

    def analyze(
        self,
        moves: Sequence[MoveLike] | search_pb2.Position,
        rule: RuleLike = Rule.FREESTYLE,
        max_visits: int = 0,
        max_time_ms: int = 0,
        report_every_visits: int = 0,
        max_candidates: int = 0,
        timeout: float | None = None,
        reuse_tree: bool = True,
        rollout_lambda: float = 0.0,
        ponder: bool = False,
    ) -> Iterator[search_pb2.AnalyzeResponse]:
        """The stream of reports (the last one has final=True); the returned call is also a
        `grpc.Call`: `cancel()` stops the search. Timeout, `rollout_lambda` and `ponder` (here:
        on the analysed position) as for `genmove`."""
        request = search_pb2.AnalyzeRequest(
            position=_as_position(moves, rule),
            max_visits=max_visits,
            max_time_ms=max_time_ms,
            report_every_visits=report_every_visits,
            max_candidates=max_candidates,
            disable_tree_reuse=not reuse_tree,
            ponder=ponder,
            **_rollout_field(rollout_lambda),
        )
        return self._stub.Analyze(request,
                                  **self._call_options(_search_timeout(timeout, max_time_ms)))

    def infer_sequence(
        self,
        black: Sequence[MoveLike],
        white: Sequence[MoveLike],
        game: str | Game | None = None,
        rule: RuleLike = 0,
        board_size: int = 0,
        iterations: int = 0,
        restarts: int = 0,
        seed: int = 0,
        max_time_ms: int = 0,
        neighbour: str = "",
        init: str = "",
        timeout: float | None = None,
        tempering: bool = False,
        polish: bool = False,
    ) -> search_pb2.InferSequenceResponse:
        """The most likely order of the stones: names in the game's notation ("h8", "D4") or
        (x, y) pairs; 0 / "" leave a parameter to the server (the paper's recipe, its time
        limit); game None: the default game. timeout None: max_time_ms (0: the server's limit)
        plus 10 s. `tempering` / `polish`: the optimiser's options beyond the paper (see
        `InferSequenceRequest`)."""
        request = infer_sequence_request(
            black, white, game, rule, board_size, iterations=iterations, restarts=restarts,
            seed=seed, max_time_ms=max_time_ms, neighbour=neighbour, init=init,
            tempering=tempering, polish=polish)
        wait = _search_timeout(timeout, max_time_ms or MAX_TIME_MS)
        return self._stub.InferSequence(request, **self._call_options(wait))

    def start_infer_sequence(
        self,
        black: Sequence[MoveLike],
        white: Sequence[MoveLike],
        game: str | Game | None = None,
        rule: RuleLike = 0,
        board_size: int = 0,
        timeout: float | None = 10.0,
        **options: Any,
    ) -> search_pb2.InferSequenceOperation:
        """`infer_sequence` as a background operation on the server (budgets past the unary
        call's 60 s: the paper's recipe): the operation, RUNNING, with its id for
        `get_infer_sequence` / `cancel_infer_sequence` / `wait_infer_sequence`. `options`: the
        keyword parameters of `infer_sequence` (iterations, restarts, seed, max_time_ms,
        neighbour, init, tempering, polish); max_time_ms 0 is the operation's limit (1 hour)."""
        request = infer_sequence_request(black, white, game, rule, board_size, **options)
        return self._stub.StartInferSequence(
            search_pb2.StartInferSequenceRequest(request=request),
            **self._call_options(timeout)).operation

    def get_infer_sequence(self, operation_id: str, timeout: float | None = 10.0
                           ) -> search_pb2.InferSequenceOperation:
        """An operation's progress, and its `result` once its state is DONE."""
        return self._stub.GetInferSequence(
            search_pb2.GetInferSequenceRequest(operation_id=operation_id),
            **self._call_options(timeout)).operation

    def cancel_infer_sequence(self, operation_id: str, timeout: float | None = 30.0
                              ) -> search_pb2.InferSequenceOperation:
        """Stop an operation (the server waits for its next step); its state after."""
        return self._stub.CancelInferSequence(
            search_pb2.CancelInferSequenceRequest(operation_id=operation_id),
            **self._call_options(timeout)).operation

    def wait_infer_sequence(
        self,
        operation_id: str,
        poll_s: float = 1.0,
        timeout: float | None = None,
        on_progress: Callable[[search_pb2.InferSequenceOperation], None] | None = None,
    ) -> search_pb2.InferSequenceOperation:
        """Poll the operation every `poll_s` until it is no longer RUNNING (TimeoutError after
        `timeout` seconds, the operation left running); `on_progress` sees every poll."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            operation = self.get_infer_sequence(operation_id)
            if on_progress is not None:
                on_progress(operation)
            if operation.state != search_pb2.OPERATION_STATE_RUNNING:
                return operation
            if end is not None and time.monotonic() + poll_s > end:
                raise TimeoutError(f"operation {operation_id} still running after {timeout} s")
            time.sleep(poll_s)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> SearchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def search_client_factory(args: argparse.Namespace,
                          target: str | None = None) -> Callable[[], SearchClient]:
    """Makes `SearchClient`s for `target` (default `args.target`) with the security and
    wait-for-ready options of `services.search.auth.add_client_arguments`. The options are read
    now, so a missing token file or variable is an `AuthConfigError` at start-up, not at the
    first move."""
    client_auth = client_auth_from(args)
    if client_auth.tls:  # unreadable PEM files: fail now too
        client_auth.credentials()
    address = target or args.target
    wait = bool(getattr(args, "wait_for_ready", False))
    return lambda: SearchClient(address, auth=client_auth, wait_for_ready=wait)
