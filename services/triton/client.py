"""gRPC client for the policy models on Triton: ``gomoku_policy`` and ``go_policy``.

`PolicyClient.infer` sends int8 boards [N, 15, 15] and returns float32 logits [N, 225] with the
model version that answered; for a Go model (`game="go"`, or a model name starting with "go")
it sends compact int8 Go inputs [N, 4, S, S] (`services.games.go_features`) for any served
size S in 9..19 (`services.games.go.SERVED_MIN_SIZE` / `SERVED_MAX_SIZE`: one fully
convolutional network answers every size, the config declares the spatial dims as -1) and
returns logits [N, S * S + 1], the last one the pass (19x19: [N, 362]); one call holds boards
of one size. Gomoku stays 15x15. With the logits comes the ``value`` output where the
model's config declares one (`PolicyResult.values`, float32 [N] for the side to move, NaN for a
network without a value head); no output is named in the request, so Triton sends every output
the config declares and a config with ``logits`` alone (deploy/triton-stock) works unchanged
(`values` None). Errors are split in two: `TritonUnavailableError` when
Triton cannot be reached or cannot serve (connection refused, server/model not ready or
unknown, deadline exceeded), `TritonRequestError` when Triton answered and rejected or failed
the request.

One `tritonclient.grpc.InferenceServerClient` (one gRPC channel) is shared by all threads: its
unary calls are thread-safe (only the streaming API is not, and it is not used here).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from services.games.go import SERVED_MAX_SIZE, SERVED_MIN_SIZE
from services.grpc_options import RECONNECT_OPTIONS

DEFAULT_MODEL_NAME = "gomoku_policy"
DEFAULT_GO_MODEL_NAME = "go_policy"
INPUT_NAME = "boards"
OUTPUT_NAME = "logits"
VALUE_NAME = "value"
BOARD_SIZE = 15
N_MOVES = BOARD_SIZE * BOARD_SIZE
GO_BOARD_SIZE = 19  # the default Go size (and the largest served)
GO_CHANNELS = 4
GO_N_MOVES = GO_BOARD_SIZE * GO_BOARD_SIZE + 1  # the points, then the pass
GO_BOARD_SIZES = tuple(range(SERVED_MIN_SIZE, SERVED_MAX_SIZE + 1))  # 9..19


@dataclass(frozen=True)
class ModelIO:
    """What one board of a model's input and one row of its output look like.

    `board_shape` / `n_moves` are those of the default size; `sizes` lists every board size
    the model takes (the last two dims of a board, square), and a board of size S has S * S
    logits, plus one (the pass, last) when `pass_move`."""

    game: str  # "gomoku" or "go"
    board_shape: tuple[int, ...]  # one input board at the default size (no batch dimension)
    n_moves: int  # logits per board at the default size
    max_value: int  # largest cell value of the input
    sizes: tuple[int, ...] = ()  # accepted board sizes; () means the default one only
    pass_move: bool = False  # one logit more than the points: the pass

    @property
    def board_sizes(self) -> tuple[int, ...]:
        return self.sizes or (self.board_shape[-1],)

    def accepts(self, board_shape: tuple[int, ...]) -> bool:
        """Whether one board of shape `board_shape` (no batch dimension) is a valid input."""
        shape = tuple(int(d) for d in board_shape)
        return (len(shape) == len(self.board_shape)
                and shape[:-2] == self.board_shape[:-2]
                and shape[-1] == shape[-2] and shape[-1] in self.board_sizes)

    def n_moves_for(self, board_shape: tuple[int, ...]) -> int:
        """Logits per board of shape `board_shape`: the points (and the pass)."""
        return int(board_shape[-1]) * int(board_shape[-2]) + int(self.pass_move)

    def describe(self) -> str:
        sizes = self.board_sizes
        if len(sizes) == 1:
            return "int8 [N, " + ", ".join(str(d) for d in self.board_shape) + "]"
        lead = "".join(f"{d}, " for d in self.board_shape[:-2])
        return f"int8 [N, {lead}S, S] with S in {sizes[0]}..{sizes[-1]}"


MODEL_IO = {
    "gomoku": ModelIO("gomoku", (BOARD_SIZE, BOARD_SIZE), N_MOVES, 2),
    # compact Go planes: relative stones 0..2, liberties 0..4, move age 0..4, ko 0..1; any
    # served size (the config's spatial dims are -1), logits S * S + 1
    "go": ModelIO("go", (GO_CHANNELS, GO_BOARD_SIZE, GO_BOARD_SIZE), GO_N_MOVES, 4,
                  sizes=GO_BOARD_SIZES, pass_move=True),
}


def io_for(model_name: str) -> ModelIO:
    """The input/output of a model by its name: Go for names starting with "go" (but not
    "gomoku"), else Gomoku."""
    name = model_name.lower()
    return MODEL_IO["go" if name.startswith("go") and not name.startswith("gomoku") else "gomoku"]

# tritonclient's default channel options (its `channel_args` replace them all), plus the
# platform's reconnect settings (services.grpc_options, the same as the search client's): after a
# Triton restart the channel reconnects within a second instead of gRPC's default (exponential,
# up to 120 s).
_CHANNEL_ARGS = [
    ("grpc.max_send_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
    ("grpc.max_receive_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
    ("grpc.keepalive_time_ms", 2**31 - 1),
    ("grpc.keepalive_timeout_ms", 20000),
    ("grpc.keepalive_permit_without_calls", False),
    ("grpc.http2.max_pings_without_data", 2),
    *RECONNECT_OPTIONS,
]

# gRPC status codes meaning "Triton cannot serve right now" rather than "bad request".
_UNAVAILABLE_CODES = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "NOT_FOUND", "RESOURCE_EXHAUSTED", "ABORTED"}
)


class TritonError(RuntimeError):
    """Base class of the errors raised by `PolicyClient`."""

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


class TritonUnavailableError(TritonError):
    """Triton is unreachable, not ready, does not know the model, or the deadline passed."""


class TritonRequestError(TritonError):
    """Triton (or client-side validation) rejected the request, or the model failed on it."""


@dataclass(frozen=True)
class PolicyResult:
    logits: np.ndarray  # float32 [N, 225] (Go: [N, S * S + 1], 19x19: [N, 362]), unmasked
    model_name: str
    model_version: str
    # float32 [N]: expected result in [-1, 1] for the side to move of each board; NaN where the
    # network has no value head; None when the server sent no value output at all
    values: np.ndarray | None = None


def _status_name(exc: InferenceServerException) -> str:
    status = exc.status() or ""
    return status.rsplit(".", 1)[-1].upper()  # "StatusCode.UNAVAILABLE" -> "UNAVAILABLE"


def _translate(exc: InferenceServerException, what: str, url: str) -> TritonError:
    status = _status_name(exc)
    message = f"{what} on Triton at {url} failed [{status or 'no status'}]: {exc.message()}"
    if status in _UNAVAILABLE_CODES or not status:
        return TritonUnavailableError(message, status)
    if "model" in (exc.message() or "").lower() and "not ready" in (exc.message() or "").lower():
        return TritonUnavailableError(message, status)
    return TritonRequestError(message, status)


def _as_boards(boards: np.ndarray, io: ModelIO = MODEL_IO["gomoku"]) -> np.ndarray:
    arr = np.asarray(boards)
    if arr.ndim != 1 + len(io.board_shape) or not io.accepts(arr.shape[1:]) or arr.shape[0] < 1:
        raise TritonRequestError(f"boards must be {io.describe()}, N >= 1; got {arr.shape}")
    if arr.dtype != np.int8:
        if not np.issubdtype(arr.dtype, np.integer):
            raise TritonRequestError(f"boards must be int8, got {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() > io.max_value):
            if io.game == "gomoku":
                raise TritonRequestError("board cells must be 0 (empty), 1 (black) or 2 (white)")
            raise TritonRequestError(f"compact Go cells must be in 0..{io.max_value}")
        arr = arr.astype(np.int8)
    return np.ascontiguousarray(arr)


class PolicyClient:
    """Thread-safe client for one model on one Triton server (gRPC)."""

    def __init__(
        self,
        url: str,
        model_name: str = DEFAULT_MODEL_NAME,
        timeout_s: float = 5.0,
        game: str | None = None,
    ) -> None:
        """`game` ("gomoku" or "go") fixes the model's input/output; None: from the name."""
        self.url = url
        self.model_name = model_name
        self.timeout_s = float(timeout_s)
        if game is not None and game not in MODEL_IO:
            raise ValueError(f"game must be one of {sorted(MODEL_IO)}, got {game!r}")
        self.io = MODEL_IO[game] if game is not None else io_for(model_name)
        self._lock = threading.Lock()
        self._client: grpcclient.InferenceServerClient | None = None
        self._closed = False

    def _grpc(self) -> grpcclient.InferenceServerClient:
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._closed:
                raise TritonUnavailableError(f"PolicyClient for {self.url} is closed")
            if self._client is None:
                try:
                    self._client = grpcclient.InferenceServerClient(
                        url=self.url, channel_args=_CHANNEL_ARGS
                    )
                except InferenceServerException as exc:
                    raise _translate(exc, "connect", self.url) from exc
            return self._client

    def io_of(self, model_name: str) -> ModelIO:
        """The input/output of `model_name`: the client's own for its model (and that model's
        ``<name>__candidate`` etc.), else by the name."""
        if model_name == self.model_name or model_name.startswith(self.model_name + "__"):
            return self.io
        return io_for(model_name)

    def infer(
        self,
        boards: np.ndarray,
        model_version: int | str | None = None,
        model_name: str | None = None,
    ) -> PolicyResult:
        """Policy logits for int8 boards [N, 15, 15] (0 empty, 1 black, 2 white), or for a Go
        model compact Go inputs [N, 4, S, S], S in 9..19 (logits [N, S * S + 1]; 19x19:
        [N, 362]), and the values where the server sends them (`PolicyResult.values`). All
        boards of one call have one size.

        Without `model_version` Triton answers with the highest READY version of the model;
        with it, exactly that version answers (or the request fails if it is not loaded).
        `model_name` overrides the client's model for this call.
        """
        name = model_name or self.model_name
        version = "" if model_version is None else str(model_version)
        io = self.io_of(name)
        arr = _as_boards(boards, io)
        inp = grpcclient.InferInput(INPUT_NAME, list(arr.shape), "INT8")
        inp.set_data_from_numpy(arr)
        what = f"infer {name}" + (f" v{version}" if version else "")
        try:
            # outputs=None: every output of the model's config (logits, and value where the
            # config declares it; naming "value" would fail on a logits-only config)
            result = self._grpc().infer(
                name, [inp], model_version=version, outputs=None, client_timeout=self.timeout_s
            )
        except InferenceServerException as exc:
            raise _translate(exc, what, self.url) from exc
        n = arr.shape[0]
        n_moves = io.n_moves_for(arr.shape[1:])
        logits = result.as_numpy(OUTPUT_NAME)
        if logits is None or logits.shape != (n, n_moves):
            shape = None if logits is None else logits.shape
            raise TritonRequestError(
                f"{name} answered logits {shape}, expected ({n}, {n_moves})"
            )
        values = result.as_numpy(VALUE_NAME)
        if values is not None:
            if values.shape not in ((n, 1), (n,)):
                raise TritonRequestError(
                    f"{name} answered value {values.shape}, expected ({n}, 1)"
                )
            values = np.asarray(values, dtype=np.float32).reshape(n)
        response = result.get_response()
        return PolicyResult(
            logits=np.asarray(logits, dtype=np.float32),
            model_name=response.model_name or name,
            model_version=response.model_version,
            values=values,
        )

    def load_model(
        self,
        name: str | None = None,
        timeout_s: float | None = None,
        config: str | None = None,
        files: dict[str, bytes] | None = None,
    ) -> None:
        """Load or reload a model (repository API, explicit mode): the newest version(s) per
        the config's version_policy come up, then older versions are unloaded.

        `config` (model config as JSON) replaces the repository's ``config.pbtxt`` for this
        load; `files` (``{"file:<version>/<name>": bytes}``, needs `config`) loads the model
        from those bytes instead of the repository. A failed load leaves the versions that
        were serving before it serving."""
        name = name or self.model_name
        timeout = timeout_s if timeout_s is not None else max(self.timeout_s, 120.0)
        if files and config is None:
            raise TritonRequestError(f"load {name}: files need a config")
        try:
            self._grpc().load_model(name, config=config, files=files, client_timeout=timeout)
        except InferenceServerException as exc:
            raise _translate(exc, f"load {name}", self.url) from exc

    def unload_model(self, name: str | None = None) -> None:
        name = name or self.model_name
        try:
            self._grpc().unload_model(name, client_timeout=max(self.timeout_s, 60.0))
        except InferenceServerException as exc:
            raise _translate(exc, f"unload {name}", self.url) from exc

    def is_ready(self) -> bool:
        """Server ready and the model ready (never raises)."""
        try:
            client = self._grpc()
            return bool(
                client.is_server_ready(client_timeout=self.timeout_s)
                and client.is_model_ready(self.model_name, client_timeout=self.timeout_s)
            )
        except (InferenceServerException, TritonError):
            return False

    def ready_versions(self, name: str | None = None) -> list[str]:
        """Versions of the model currently READY on the server (repository index).

        Models loaded from `load_model` files (not from the repository) are not listed there;
        ask `is_version_ready` about them."""
        name = name or self.model_name
        try:
            index = self._grpc().get_model_repository_index(client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise _translate(exc, "repository index", self.url) from exc
        return sorted(
            (m.version for m in index.models if m.name == name and m.state == "READY"),
            key=lambda v: int(v) if v.isdigit() else -1,
        )

    def model_readiness(self, timeout_s: float | None = None) -> tuple[bool, str]:
        """(ready, why not) for the client's model, never raising: what a health check needs.

        Ready: some version of the model is READY (one short call, `timeout_s`, default the
        client's timeout). Otherwise the reason says whether Triton is unreachable, has no
        such model in its repository, or holds it unloaded or failed (with Triton's reason)."""
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        try:
            client = self._grpc()
            if client.is_model_ready(self.model_name, client_timeout=timeout):
                return True, ""
            index = client.get_model_repository_index(client_timeout=timeout)
        except InferenceServerException as exc:
            return False, f"Triton at {self.url} is unreachable [{_status_name(exc)}]"
        except TritonError as exc:
            return False, str(exc)
        entries = [m for m in index.models if m.name == self.model_name]
        if not entries:
            return False, (f"Triton at {self.url} has no model {self.model_name!r} in its "
                           "repository")
        states = "; ".join(
            f"v{m.version or '?'} {m.state or 'UNLOADED'}" + (f" ({m.reason})" if m.reason else "")
            for m in entries)
        return False, f"model {self.model_name!r} on Triton at {self.url} is not ready: {states}"

    def is_version_ready(self, version: int | str, name: str | None = None) -> bool:
        """That version of the model is loaded and ready (never raises)."""
        try:
            return bool(
                self._grpc().is_model_ready(
                    name or self.model_name, str(version), client_timeout=self.timeout_s
                )
            )
        except (InferenceServerException, TritonError):
            return False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
