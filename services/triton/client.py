"""gRPC client for the policy models on Triton (``gomoku_policy``, ``go_policy``, any game's).

`PolicyClient.infer` sends a game's int8 network inputs and returns float32 logits with the
model version that answered. The shapes are the game's (`Game.model_io`, services/games/base.py;
the game is given, or the one whose default model the name is): Gomoku int8 boards [N, 15, 15]
-> logits [N, 225]; Go compact inputs [N, 4, S, S] (`services.games.go.features`) for any
served size S in 9..19 (one fully convolutional network answers every size, the config declares
the spatial dims as -1) -> logits [N, S * S + 1], the last one the pass (19x19: [N, 362]); one
call holds boards of one size.

A model may take another of its game's input encoders (Go's "extended" network,
``go_policy_extended``: int8 [N, 10, S, S], the basic planes and tactical channels): its config
says which (`services.repository.configs.config_encoder`, read from Triton's own copy of the
config once per model, `encoder_of`), and `infer` turns the game's basic inputs it is given
(what `Game.network_input` gives, what requests, searches and smoke tests hold) into that
encoder's input for the whole batch (`Game.encode_inputs`) before sending them; boards already
in the model's input (a version's stored positions) travel as they are (`encoded=True`). The
encoder is never guessed from a tensor's shape. With the logits comes the ``value`` output where the
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

from services.games.base import BASIC_ENCODER, Game, ModelIO
from services.games.registry import default_game, game_for_model, get_game
from services.grpc_options import RECONNECT_OPTIONS
from services.repository.configs import INPUT_NAME, OUTPUT_NAME, VALUE_NAME, config_encoder


def io_of_game(game: str | Game) -> ModelIO:
    """The input/output of a game's model (a `Game`, or its registered name)."""
    return (get_game(game) if isinstance(game, str) else game).model_io()


def io_for(model_name: str) -> ModelIO:
    """The input/output of a model by its name: that of the game whose default model it is (or
    a side model of it, ``<name>__candidate``), else the default game's (the search service's
    `--model` serves the default game under any name; give `PolicyClient` its `game` for
    another game's model under another name)."""
    return (game_for_model(model_name) or default_game()).model_io()


def default_model_name() -> str:
    """The Triton model of the default game."""
    return default_game().default_model


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


def _as_boards(boards: np.ndarray, io: ModelIO) -> np.ndarray:
    arr = np.asarray(boards)
    if arr.ndim != 1 + len(io.board_shape) or not io.accepts(arr.shape[1:]) or arr.shape[0] < 1:
        raise TritonRequestError(f"boards must be {io.describe()}, N >= 1; got {arr.shape}")
    if arr.dtype != np.int8:
        if not np.issubdtype(arr.dtype, np.integer):
            raise TritonRequestError(f"boards must be int8, got {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() > io.max_value):
            raise TritonRequestError(f"{io.game} input cells must be in 0..{io.max_value}")
        arr = arr.astype(np.int8)
    return np.ascontiguousarray(arr)


# attempts at reading a model's config (`PolicyClient.encoder_of`) before UNAVAILABLE
CONFIG_ATTEMPTS = 2


class PolicyClient:
    """Thread-safe client for one model on one Triton server (gRPC)."""

    def __init__(
        self,
        url: str,
        model_name: str | None = None,
        timeout_s: float = 5.0,
        game: str | Game | None = None,
    ) -> None:
        """`game` (a registered game or its name) fixes the model's input/output; None: the
        game whose default model `model_name` is. `model_name` None: the game's default model
        (no game either: the default game's)."""
        self.url = url
        played = get_game(game) if isinstance(game, str) else game
        self.model_name = model_name or (played or default_game()).default_model
        self.timeout_s = float(timeout_s)
        self.io = played.model_io() if played is not None else io_for(self.model_name)
        self._lock = threading.Lock()
        self._client: grpcclient.InferenceServerClient | None = None
        self._closed = False
        # model name -> the input encoder its served config declares (`encoder_of`)
        self._encoders: dict[str, str] = {}

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

    def encoder_of(self, model_name: str | None = None) -> str:
        """The input encoder the served config of `model_name` declares (its ``encoder``
        parameter; "basic" without one), asked of Triton on first use and kept; a load or
        unload through this client, or a request Triton refuses, forgets it (the model may
        come back with another config). TritonError when Triton cannot say."""
        name = model_name or self.model_name
        known = self._encoders.get(name)
        if known is not None:
            return known
        answer = None
        for attempt in range(CONFIG_ATTEMPTS):
            try:
                answer = self._grpc().get_model_config(name, client_timeout=self.timeout_s)
                break
            except InferenceServerException as exc:
                error = _translate(exc, f"config of {name}", self.url)
                # the first call on a new connection also pays its set-up, which a loaded
                # Triton may take longer than one call's timeout for: once more, then fail
                if not isinstance(error, TritonUnavailableError) or \
                        attempt == CONFIG_ATTEMPTS - 1:
                    raise error from exc
        assert answer is not None
        encoder = config_encoder(answer.config)
        try:
            get_game(self.io_of(name).game).check_encoder(encoder)
        except ValueError as exc:
            raise TritonRequestError(f"the config of {name} on Triton at {self.url}: "
                                     f"{exc}") from exc
        self._encoders[name] = encoder
        return encoder

    def encode(self, boards: np.ndarray, model_name: str | None = None) -> np.ndarray:
        """The game's basic inputs `boards` (`Game.network_input` of each position) as the
        input of `model_name` (the client's model by default): computed for the encoder its
        config declares (`encoder_of`), the boards themselves for the basic one."""
        name = model_name or self.model_name
        io = self.io_of(name)
        arr = _as_boards(boards, io)
        encoder = self.encoder_of(name)
        if encoder == BASIC_ENCODER:
            return arr
        return np.ascontiguousarray(get_game(io.game).encode_inputs(arr, encoder),
                                    dtype=np.int8)

    def infer(
        self,
        boards: np.ndarray,
        model_version: int | str | None = None,
        model_name: str | None = None,
        *,
        encoded: bool = False,
    ) -> PolicyResult:
        """Policy logits for int8 boards [N, 15, 15] (0 empty, 1 black, 2 white), or for a Go
        model compact Go inputs [N, 4, S, S], S in 9..19 (logits [N, S * S + 1]; 19x19:
        [N, 362]), and the values where the server sends them (`PolicyResult.values`). All
        boards of one call have one size. The boards are the game's basic inputs, sent in the
        input the model's config declares (`encode`); with `encoded` they are that input
        already (a Go extended model's [N, 10, S, S]) and travel as they are.

        Without `model_version` Triton answers with the highest READY version of the model;
        with it, exactly that version answers (or the request fails if it is not loaded).
        `model_name` overrides the client's model for this call.
        """
        name = model_name or self.model_name
        version = "" if model_version is None else str(model_version)
        io = self.io_of(name)
        if encoded:
            arr = _as_boards(boards, get_game(io.game).model_io(self.encoder_of(name)))
        else:
            arr = self.encode(boards, name)
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
            self._encoders.pop(name, None)  # a refused input: the config may have changed
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
        self._encoders.pop(name, None)  # the config loaded may declare another encoder
        try:
            self._grpc().load_model(name, config=config, files=files, client_timeout=timeout)
        except InferenceServerException as exc:
            raise _translate(exc, f"load {name}", self.url) from exc

    def unload_model(self, name: str | None = None) -> None:
        name = name or self.model_name
        self._encoders.pop(name, None)
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
