"""`SearchClient`: a blocking client of the movepred search service, and position builders.

Moves are names in the game's notation ("h8" for Gomoku, "Q16" / "pass" for Go) or (x, y)
pairs; names are parsed here (`CoordinateError` for a bad one), pairs are sent as they are, so
the server's validation has the last word. Every call also takes a ready
`search_pb2.Position`. Calls return the generated response messages and raise `grpc.RpcError`
for failures (INVALID_ARGUMENT, UNAVAILABLE, RESOURCE_EXHAUSTED, UNAUTHENTICATED...).

Rules, games and colours are given by name ("renju", "go", "white"), looked up in the generated
enums, so a caller need not know how the proto spells their values.

Security, as the platform's own clients: `tls_ca` (or `tls=True` for the system's roots)
connects with TLS, `client_cert` / `client_key` add a client certificate (mutual TLS), and
`token` / `token_file` send ``authorization: Bearer <token>`` on every call. The channel
reconnects at least every 0.5 s while the server is away, so a client is back within a second
of a restarted server; `wait_for_ready` makes calls wait (up to their timeout) for the
connection instead of failing with UNAVAILABLE at once, and `retries` retries a call the
server or the connection answered UNAVAILABLE (gRPC's retry policy, with backoff).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from movepred_client.coords import CoordinateError, parse_gtp_vertex, parse_point
from movepred_client.v1 import search_pb2, search_pb2_grpc

MoveLike = str | tuple[int, int]  # "h8" or (x, y)
GoMoveLike = str | tuple[int, int] | None  # "D4", "pass", (x, y), None (a pass)

GOMOKU_SIZE = 15
GO_SIZE = 19
DEFAULT_KOMI = 7.5
DEFAULT_PREDICT_TIMEOUT_S = 10.0
SEARCH_EXTRA_TIMEOUT_S = 10.0  # on top of max_time_ms, for the network and start-up
DEFAULT_SEARCH_TIMEOUT_S = 300.0  # searches limited by visits only
INFER_SEQUENCE_LIMIT_MS = 60_000  # the server's longest InferSequence
MAX_RETRIES = 4  # gRPC caps a retry policy at 5 attempts
SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name
AUTH_METADATA_KEY = "authorization"

# gRPC's default reconnect backoff grows to 120 s; these keep a client within a second of a
# restarted server (the platform's services/grpc_options.py)
RECONNECT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.dns_min_time_between_resolutions_ms", 500),
)


class ClientConfigError(ValueError):
    """An option of the client that cannot be used (an empty token file, a bad retry count,
    an unreadable PEM file, a name no enum value has)."""


# ---- enums by name -------------------------------------------------------------------------
def _prefix(enum: Any) -> str:
    """The prefix proto style gives an enum's values: Rule -> "RULE_"."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum.DESCRIPTOR.name).upper() + "_"


def enum_value(enum: Any, name: str | int) -> int:
    """The value of the generated `enum` (search_pb2.Rule, .Game, .Color) named `name`, in any
    case and with or without the enum's prefix: "renju" and "RULE_RENJU" are the same rule.
    Ints pass unchanged; ClientConfigError names the values there are."""
    if isinstance(name, int):
        return name
    wanted = name.strip().upper()
    prefix = _prefix(enum)
    for value in enum.DESCRIPTOR.values:
        if value.number != 0 and wanted in (value.name, prefix + value.name,
                                            value.name.removeprefix(prefix)):
            return value.number
    known = ", ".join(v.name.removeprefix(prefix).lower()
                      for v in enum.DESCRIPTOR.values if v.number != 0)
    raise ClientConfigError(f"no {enum.DESCRIPTOR.name} named {name!r} (known: {known})")


# ---- positions -----------------------------------------------------------------------------
def gomoku_point(move: MoveLike, size: int = GOMOKU_SIZE) -> search_pb2.Point:
    """"h8" or (x, y) -> Point."""
    x, y = parse_point(move, size) if isinstance(move, str) else (int(move[0]), int(move[1]))
    return search_pb2.Point(x=x, y=y)


def go_point(move: GoMoveLike, size: int = GO_SIZE) -> search_pb2.Point:
    """"Q16", "pass", (x, y) or None (a pass) -> Point."""
    if move is None:
        return search_pb2.Point(is_pass=True)
    if isinstance(move, str):
        flat = parse_gtp_vertex(move, size)
        if flat is None:
            return search_pb2.Point(is_pass=True)
        return search_pb2.Point(x=flat % size, y=flat // size)
    return search_pb2.Point(x=int(move[0]), y=int(move[1]))


def gomoku_position(moves: Sequence[MoveLike], rule: str | int = "freestyle",
                    board_size: int = GOMOKU_SIZE) -> search_pb2.Position:
    """A Gomoku position from its moves in order, black first; `rule` "freestyle",
    "standard" or "renju" (or a search_pb2.Rule value)."""
    return search_pb2.Position(
        game=enum_value(search_pb2.Game, "gomoku"), rule=enum_value(search_pb2.Rule, rule),
        board_size=board_size, moves=[gomoku_point(m, board_size) for m in moves])


def go_position(moves: Sequence[GoMoveLike], board_size: int = GO_SIZE,
                komi: float = DEFAULT_KOMI, setup_black: Sequence[GoMoveLike] = (),
                setup_white: Sequence[GoMoveLike] = (),
                first_to_move: str | int = "black") -> search_pb2.Position:
    """A Go position (area scoring, the only Go rule served): its moves in order,
    `first_to_move` ("black" / "white") playing moves[0], after optional setup stones."""
    return search_pb2.Position(
        game=enum_value(search_pb2.Game, "go"), rule=enum_value(search_pb2.Rule, "go_area"),
        board_size=board_size, moves=[go_point(m, board_size) for m in moves],
        setup_black=[go_point(m, board_size) for m in setup_black],
        setup_white=[go_point(m, board_size) for m in setup_white],
        first_to_move=enum_value(search_pb2.Color, first_to_move), komi=komi)


def _as_position(moves: Sequence[MoveLike] | search_pb2.Position,
                 rule: str | int) -> search_pb2.Position:
    return moves if isinstance(moves, search_pb2.Position) else gomoku_position(moves, rule)


def _rollout_field(rollout_lambda: float) -> dict[str, float]:
    """The request's optional `rollout_lambda`: set when > 0, else left unset (a search with
    the value network alone, as a server without rollouts expects)."""
    return {"rollout_lambda": rollout_lambda} if rollout_lambda else {}


def _search_timeout(timeout: float | None, max_time_ms: int) -> float:
    if timeout is not None:
        return timeout
    if max_time_ms > 0:
        return max_time_ms / 1000.0 + SEARCH_EXTRA_TIMEOUT_S
    return DEFAULT_SEARCH_TIMEOUT_S


# ---- security ------------------------------------------------------------------------------
def read_token_file(path: Path | str) -> str:
    """The token in `path`: its first line, stripped; ClientConfigError for a missing or
    empty file (the platform's token files are written this way)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ClientConfigError(f"cannot read token file {path}: {exc.strerror or exc}") from exc
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise ClientConfigError(f"token file {path} is empty")
    return token


def _pem(path: Path | str | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ClientConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if b"-----BEGIN" not in data:
        raise ClientConfigError(f"{what} {path} is not PEM")
    return data


def _retry_options(retries: int) -> list[tuple[str, Any]]:
    """Channel options for gRPC's retry policy: `retries` more attempts of a call that was
    answered UNAVAILABLE (the server was unreachable or refused to take it), with backoff."""
    if not 0 <= retries <= MAX_RETRIES:
        raise ClientConfigError(f"retries must be 0..{MAX_RETRIES}, not {retries}")
    if retries == 0:
        return []
    policy = {"maxAttempts": retries + 1, "initialBackoff": "0.1s", "maxBackoff": "1s",
              "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
    config = {"methodConfig": [{"name": [{"service": SERVICE_NAME}], "retryPolicy": policy}]}
    return [("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(config))]


# ---- the client ----------------------------------------------------------------------------
class SearchClient:
    """Blocking client for one search server; usable as a context manager.

    Each client holds its own connection (a local subchannel pool): a server running several
    processes on one port spreads load by connection."""

    def __init__(
        self,
        target: str,
        *,
        tls: bool = False,
        tls_ca: Path | str | None = None,
        client_cert: Path | str | None = None,
        client_key: Path | str | None = None,
        tls_server_name: str | None = None,
        token: str | None = None,
        token_file: Path | str | None = None,
        wait_for_ready: bool = False,
        retries: int = 0,
    ) -> None:
        """`target` "host:port"; `tls_server_name`: the name the server's certificate must
        carry when it is not the target's host; `token_file` is read now (its first line)."""
        if token is not None and token_file is not None:
            raise ClientConfigError("give token or token_file, not both")
        if (client_cert is None) != (client_key is None):
            raise ClientConfigError("client_cert and client_key go together")
        self.target = target
        self.wait_for_ready = wait_for_ready
        token = read_token_file(token_file) if token_file is not None else token
        self._metadata = ((AUTH_METADATA_KEY, f"Bearer {token}"),) if token else None
        options: list[tuple[str, Any]] = [*RECONNECT_OPTIONS,
                                          ("grpc.use_local_subchannel_pool", 1),
                                          *_retry_options(retries)]
        if tls or tls_ca or client_cert:
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_pem(tls_ca, "TLS CA"),
                private_key=_pem(client_key, "client key"),
                certificate_chain=_pem(client_cert, "client certificate"))
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = search_pb2_grpc.SearchServiceStub(self._channel)

    def _call_options(self, timeout: float | None) -> dict[str, Any]:
        return {"timeout": timeout, "metadata": self._metadata,
                "wait_for_ready": self.wait_for_ready or None}

    def predict(self, moves: Sequence[MoveLike] | search_pb2.Position,
                rule: str | int = "freestyle", top_k: int = 5,
                timeout: float | None = DEFAULT_PREDICT_TIMEOUT_S) -> search_pb2.PredictResponse:
        """The policy of one position (Gomoku moves, or any `search_pb2.Position`)."""
        request = search_pb2.PredictRequest(position=_as_position(moves, rule), top_k=top_k)
        return self._stub.Predict(request, **self._call_options(timeout))

    def predict_many(self, positions: Sequence[Sequence[MoveLike] | search_pb2.Position],
                     rule: str | int = "freestyle", top_k: int = 5,
                     timeout: float | None = DEFAULT_PREDICT_TIMEOUT_S
                     ) -> search_pb2.PredictResponse:
        """Several positions of one game in one request (one inference call); the answers
        are in `results`, in request order."""
        request = search_pb2.PredictRequest(
            positions=[_as_position(p, rule) for p in positions], top_k=top_k)
        return self._stub.Predict(request, **self._call_options(timeout))

    def genmove(self, moves: Sequence[MoveLike] | search_pb2.Position,
                rule: str | int = "freestyle", max_visits: int = 0, max_time_ms: int = 0,
                timeout: float | None = None, max_candidates: int = 0,
                reuse_tree: bool = True, ponder: bool = False,
                rollout_lambda: float = 0.0) -> search_pb2.GenMoveResponse:
        """A move chosen by tree search; both budgets 0 lets the server pick (200 visits).
        timeout None: max_time_ms plus 10 s with a time budget, else 300 s. `ponder`: the
        server searches on during the opponent's turn; `rollout_lambda` > 0: leaf values mixed
        with rollouts (sent only then)."""
        request = search_pb2.GenMoveRequest(
            position=_as_position(moves, rule), max_visits=max_visits, max_time_ms=max_time_ms,
            max_candidates=max_candidates, disable_tree_reuse=not reuse_tree, ponder=ponder,
            **_rollout_field(rollout_lambda))
        return self._stub.GenMove(request,
                                  **self._call_options(_search_timeout(timeout, max_time_ms)))

    def analyze(self, moves: Sequence[MoveLike] | search_pb2.Position,
                rule: str | int = "freestyle", max_visits: int = 0, max_time_ms: int = 0,
                report_every_visits: int = 0, max_candidates: int = 0,
                timeout: float | None = None, reuse_tree: bool = True, ponder: bool = False,
                rollout_lambda: float = 0.0) -> Iterator[search_pb2.AnalyzeResponse]:
        """The stream of a search's reports (the last has final=True); the returned call is
        also a `grpc.Call`: `cancel()` stops the search. Budgets, timeout, `ponder` (here: on
        the analysed position) and `rollout_lambda` as `genmove`."""
        request = search_pb2.AnalyzeRequest(
            position=_as_position(moves, rule), max_visits=max_visits, max_time_ms=max_time_ms,
            report_every_visits=report_every_visits, max_candidates=max_candidates,
            disable_tree_reuse=not reuse_tree, ponder=ponder, **_rollout_field(rollout_lambda))
        return self._stub.Analyze(request,
                                  **self._call_options(_search_timeout(timeout, max_time_ms)))

    def infer_sequence(self, black: Sequence[GoMoveLike], white: Sequence[GoMoveLike],
                       game: str = "gomoku", rule: str | int = 0, board_size: int = 0,
                       seed: int = 0, max_time_ms: int = 0, timeout: float | None = None,
                       **options: Any) -> search_pb2.InferSequenceResponse:
        """The most likely order of a position's stones: names in the game's notation or
        (x, y) pairs; `game` "gomoku" or "go" (board_size 0: 15 or 19), or another game the
        server knows by name, whose stones are then (x, y) pairs. `options`: the other
        InferSequenceRequest fields (iterations, restarts, neighbour, init, tempering,
        polish). timeout None: max_time_ms (0: the server's limit) plus 10 s."""
        request = self._infer_request(black, white, game, rule, board_size, seed, max_time_ms,
                                      **options)
        wait = _search_timeout(timeout, max_time_ms or INFER_SEQUENCE_LIMIT_MS)
        return self._stub.InferSequence(request, **self._call_options(wait))

    def start_infer_sequence(self, black: Sequence[GoMoveLike], white: Sequence[GoMoveLike],
                             game: str = "gomoku", rule: str | int = 0, board_size: int = 0,
                             seed: int = 0, max_time_ms: int = 0, timeout: float | None = 10.0,
                             **options: Any) -> search_pb2.InferSequenceOperation:
        """`infer_sequence` as a background operation on the server, for budgets past the
        unary call's 60 s (the paper's recipe; max_time_ms 0: the operation's limit, 1 hour):
        the operation with its id, for `get_infer_sequence` and `cancel_infer_sequence`."""
        request = self._infer_request(black, white, game, rule, board_size, seed, max_time_ms,
                                      **options)
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
        """Stop an operation; its state after (CANCELLED, or how it had already ended)."""
        return self._stub.CancelInferSequence(
            search_pb2.CancelInferSequenceRequest(operation_id=operation_id),
            **self._call_options(timeout)).operation

    def _infer_request(self, black: Sequence[GoMoveLike], white: Sequence[GoMoveLike],
                       game: str, rule: str | int, board_size: int, seed: int,
                       max_time_ms: int, **options: Any) -> search_pb2.InferSequenceRequest:
        name = game.strip().lower()
        size = board_size or {"gomoku": GOMOKU_SIZE, "go": GO_SIZE}.get(name, 0)

        def point(stone: GoMoveLike) -> search_pb2.Point:
            if not isinstance(stone, str):
                if stone is None:
                    raise CoordinateError("a stone cannot be a pass")
                return search_pb2.Point(x=int(stone[0]), y=int(stone[1]))
            if name == "gomoku":
                return gomoku_point(stone, size)
            if name == "go":
                p = go_point(stone, size)
                if p.is_pass:
                    raise CoordinateError("a stone cannot be a pass")
                return p
            raise CoordinateError(f"stones of {game!r} are given as (x, y) pairs")

        known = {v.name.removeprefix(_prefix(search_pb2.Game)).lower()
                 for v in search_pb2.Game.DESCRIPTOR.values if v.number}
        return search_pb2.InferSequenceRequest(
            game=enum_value(search_pb2.Game, name) if name in known else 0, game_name=name,
            rule=enum_value(search_pb2.Rule, rule), board_size=size,
            black=[point(s) for s in black], white=[point(s) for s in white], seed=seed,
            max_time_ms=max_time_ms, **options)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> SearchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
