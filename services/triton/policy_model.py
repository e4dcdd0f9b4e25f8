"""Triton python-backend model for the policy networks (Gomoku and Go).

`services.repository.publish.publish` copies this file as ``model.py`` into every published
version folder, next to ``model.pt`` (TorchScript: int8 boards [N, 15, 15] -> float32 logits
[N, 225] for ``gomoku_policy``; compact Go inputs int8 [N, 4, S, S] -> float32 logits
[N, S * S + 1] for ``go_policy``, any board size S). The shapes come from the model's config
(``dims`` of the one input and of the ``logits`` output), so one file serves every game. It
runs inside Triton's python stub, so it must import nothing from ``services``: what it needs to
know of the game is declared to it, never guessed from a tensor's shape.

Variable sizes: an input dim of -1 in the config is free (``go_policy`` declares [4, -1, -1]:
one fully convolutional network answers 9x9, 13x13 and 19x19 boards alike; which sizes are
*served* is the clients' and the search service's business). A board must match the fixed
dims. The logits per board are the config's ``logits`` dims when fixed; when -1 they follow the
board: H * W points, plus one (the pass, last) when the model's game has a pass. Whether it has
one is declared: the config's ``pass_move`` parameter (``parameters { key: "pass_move" value:
{ string_value: "true" } }``), else the ``pass_move`` the publisher records in the version's
``metadata.json`` from the model's game; a config whose logits follow the board and a version
that declare neither are refused at load.

Value head: a network with one (``services.models.value.PolicyValue``) returns the tuple
``(logits, value)``, value float32 [N] in [-1, 1] for the side to move of each board. When the
config declares a ``value`` output (float32, dims [1]: [N, 1] per request) it is always sent:
the network's value, or NaN for every board of a policy-only network ("no value head"), so one
config serves both kinds of model. A config without a ``value`` output (an older repository's
copy) gets the logits alone, as before.

Non-finite outputs are refused here, never sent: a request whose boards got a NaN or infinite
logit, or (from a network that has a value head) a NaN or infinite value, is answered with an
error naming the model and version ("... non-finite outputs ..."; the search service counts
those in ``movepred_nonfinite_outputs_total``). A broken model (diverged weights, a bad export)
thus fails its requests instead of serving garbage that a softmax would make look like a
policy. The NaN values sent for a policy-only network are not the network's: they say "no
value head" and stay.

All requests of one ``execute`` call (Triton's dynamic batcher groups them) that share a board
shape go through a single forward pass: the boards are concatenated, moved to the GPU when there
is one, and the outputs are split back per request. Requests of different shapes in one call
(e.g. 9x9 and 19x19 Go boards) make one forward pass per distinct shape; a failure answers the
requests of that shape only.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

# The names below are services.repository.configs' tensor names and services.defaults' file
# names: this file runs inside Triton's python stub and imports nothing of the project, so it
# keeps its own copy of them.
INPUT_NAME = "boards"
OUTPUT_NAME = "logits"
VALUE_NAME = "value"
MODEL_FILE = "model.pt"
METADATA_FILE = "metadata.json"
PASS_PARAMETER = "pass_move"  # config parameter / metadata key: a pass logit follows the points
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _dims(config: dict, key: str, name: str | None = None) -> tuple[int, ...]:
    """`dims` of the config's input or output called `name` (None: the first one); Triton's
    JSON may give them as strings. The shapes are the game's and live in its config only
    (Triton passes the complete config: the server runs with --disable-auto-complete-config),
    so a config without them is refused (ValueError) rather than guessed."""
    try:
        entries = config[key]
        entry = entries[0] if name is None else next(
            (e for e in entries if e.get("name") == name), entries[0])
        return tuple(int(d) for d in entry["dims"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"the model config declares no {key} dims"
                         + (f" for {name!r}" if name else "") + f" ({exc!r})") from exc


def _output_names(config: dict) -> set[str]:
    try:
        return {str(o["name"]) for o in config.get("output", [])}
    except (KeyError, TypeError):
        return set()


def _pass_move(config: dict, version_dir: str) -> bool | None:
    """Whether a board's logits end with a pass logit: the config's ``pass_move`` parameter,
    else the ``pass_move`` the publisher recorded in the version's ``metadata.json`` (from the
    model's game); None when neither says. ValueError for a parameter that is not a boolean."""
    try:
        text = config["parameters"][PASS_PARAMETER]["string_value"]
    except (KeyError, TypeError):
        text = None
    if text is not None:
        value = str(text).strip().lower()
        if value in _TRUE or value in _FALSE:
            return value in _TRUE
        raise ValueError(f"config parameter {PASS_PARAMETER} is {text!r}, expected true or false")
    try:
        with open(os.path.join(version_dir, METADATA_FILE)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    recorded = meta.get(PASS_PARAMETER) if isinstance(meta, dict) else None
    return recorded if isinstance(recorded, bool) else None


def _cpu_only(version_dir: str) -> bool:
    """Whether the version's ``metadata.json`` says its network is int8 (``precision``): torch's
    quantized kernels run on the CPU only, so such a version stays there on a GPU machine."""
    try:
        with open(os.path.join(version_dir, METADATA_FILE)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("precision") == "int8"


def _log_info(message: str) -> None:
    logger = getattr(pb_utils, "Logger", None)
    if logger is not None:
        logger.log_info(message)
    else:  # very old stubs
        print(message, flush=True)


def _select_device(args: dict) -> torch.device:
    if not torch.cuda.is_available():
        return torch.device("cpu")
    # KIND_GPU instances get a device id from Triton; KIND_CPU instances still use the GPU
    # when torch can see one (the default device of this stub process).
    if args.get("model_instance_kind") == "GPU":
        return torch.device("cuda", int(args.get("model_instance_device_id", 0)))
    return torch.device("cuda", torch.cuda.current_device())


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.model_name = args.get("model_name", "?")
        self.model_version = args["model_version"]
        self.device = (torch.device("cpu") if _cpu_only(version_dir)
                       else _select_device(args))
        config = json.loads(args.get("model_config", "{}"))
        self.board_shape = _dims(config, "input")
        self.n_moves = _dims(config, "output", OUTPUT_NAME)[-1]
        self.pass_move = _pass_move(config, version_dir)
        if self.n_moves == -1 and self.pass_move is None:
            raise ValueError(
                f"{self.model_name} v{self.model_version}: the config's logits follow the board "
                f"(dims [-1]) but neither its {PASS_PARAMETER!r} parameter nor the version's "
                f"{METADATA_FILE} says whether a pass logit follows the points")
        self.model = torch.jit.load(os.path.join(version_dir, MODEL_FILE),
                                    map_location=self.device)
        self.model.eval()
        self.send_value = VALUE_NAME in _output_names(config)  # the config declares it
        _log_info(
            f"{self.model_name} v{self.model_version}: TorchScript policy on {self.device}, "
            f"boards {list(self.board_shape)} -> "
            f"{self.n_moves if self.n_moves != -1 else 'per-size'} logits"
            f"{' + value' if self.send_value else ''} "
            f"(torch {torch.__version__}, numpy {np.__version__}, "
            f"max_batch_size {config.get('max_batch_size')}, "
            f"instance {args.get('model_instance_name')})"
        )

    def _accepts(self, shape: tuple[int, ...]) -> bool:
        """One board's shape matches the config's dims (-1: any size >= 1)."""
        return len(shape) == len(self.board_shape) and all(
            (want == -1 and got >= 1) or got == want
            for got, want in zip(shape, self.board_shape, strict=True))

    def _moves_for(self, shape: tuple[int, ...]) -> int:
        """Logits per board of `shape`: the config's fixed width, else the board's points,
        plus the pass when the model's game has one (`pass_move`, declared)."""
        if self.n_moves != -1:
            return self.n_moves
        return int(shape[-1]) * int(shape[-2]) + int(bool(self.pass_move))

    def _forward(self, boards: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(logits float32 [N, n_moves], value float32 [N] or None without a value head)."""
        n = boards.shape[0]
        n_moves = self._moves_for(tuple(boards.shape[1:]))
        with torch.inference_mode():
            x = torch.from_numpy(boards).to(self.device, non_blocking=True)
            out = self.model(x)
            value = None
            if isinstance(out, (tuple, list)):
                if len(out) != 2:
                    raise RuntimeError(f"model returned {len(out)} outputs, expected logits "
                                       "or (logits, value)")
                y, value = out
            else:
                y = out
            if y.dim() != 2 or y.shape[0] != n or y.shape[1] != n_moves:
                expected = (n, n_moves)
                raise RuntimeError(f"model returned shape {tuple(y.shape)} for boards "
                                   f"{tuple(boards.shape)}, expected {expected}")
            if value is not None:
                if tuple(value.shape) not in ((n,), (n, 1)):
                    raise RuntimeError(f"model returned value shape {tuple(value.shape)}, "
                                       f"expected ({n},)")
                value = value.reshape(n).to(device="cpu", dtype=torch.float32).numpy()
            return y.to(device="cpu", dtype=torch.float32).numpy(), value

    @staticmethod
    def _nonfinite_rows(logits: np.ndarray, value: np.ndarray | None) -> np.ndarray:
        """bool [N]: boards with a NaN/Inf logit, or a NaN/Inf value from a value head."""
        bad = ~np.isfinite(logits).all(axis=1)
        if value is not None:
            bad |= ~np.isfinite(value)
        return bad

    def _nonfinite_response(self, logits: np.ndarray, value: np.ndarray | None):
        """The error answer of one request (its rows) whose outputs are not all finite."""
        n = len(logits)
        what = []
        bad_logits = int((~np.isfinite(logits).all(axis=1)).sum())
        if bad_logits:
            what.append(f"NaN/Inf logits for {bad_logits} of {n} boards")
        if value is not None:
            bad_values = int((~np.isfinite(value)).sum())
            if bad_values:
                what.append(f"a NaN/Inf value for {bad_values} of {n} boards")
        return pb_utils.InferenceResponse(
            output_tensors=[],
            error=pb_utils.TritonError(
                f"model {self.model_name} version {self.model_version} returned non-finite "
                f"outputs ({'; '.join(what)}): the model is broken, roll it back"
            ),
        )

    def execute(self, requests: list) -> list:
        responses: list = [None] * len(requests)
        arrays: dict[int, np.ndarray] = {}
        groups: dict[tuple[int, ...], list[int]] = {}  # board shape -> requests, in order
        for i, request in enumerate(requests):
            tensor = pb_utils.get_input_tensor_by_name(request, INPUT_NAME)
            boards = None if tensor is None else tensor.as_numpy()
            if boards is None or not self._accepts(tuple(boards.shape[1:])):
                shape = None if boards is None else boards.shape
                dims = ", ".join("?" if d == -1 else str(d) for d in self.board_shape)
                responses[i] = pb_utils.InferenceResponse(
                    output_tensors=[],
                    error=pb_utils.TritonError(
                        f"input '{INPUT_NAME}' must be int8 [N, {dims}], got {shape}"
                    ),
                )
                continue
            arrays[i] = np.ascontiguousarray(boards, dtype=np.int8)
            groups.setdefault(tuple(boards.shape[1:]), []).append(i)

        for owners in groups.values():  # one forward pass per distinct board shape
            parts = [arrays[i] for i in owners]
            try:
                batch = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
                logits, value = self._forward(batch)
                has_value_head = value is not None
                if self.send_value and value is None:  # policy-only: NaN = "no value head"
                    value = np.full(len(batch), np.nan, dtype=np.float32)
            except Exception as exc:  # answer every request instead of crashing the stub
                for i in owners:
                    responses[i] = pb_utils.InferenceResponse(
                        output_tensors=[],
                        error=pb_utils.TritonError(f"policy forward failed: {exc}"),
                    )
                continue
            bad = self._nonfinite_rows(logits, value if has_value_head else None)
            start = 0
            for i, boards in zip(owners, parts, strict=True):
                stop = start + boards.shape[0]
                if bad[start:stop].any():
                    responses[i] = self._nonfinite_response(
                        logits[start:stop], value[start:stop] if has_value_head else None)
                    start = stop
                    continue
                out = np.ascontiguousarray(logits[start:stop])
                tensors = [pb_utils.Tensor(OUTPUT_NAME, out)]
                if self.send_value:
                    rows = np.ascontiguousarray(value[start:stop].reshape(-1, 1))
                    tensors.append(pb_utils.Tensor(VALUE_NAME, rows))
                responses[i] = pb_utils.InferenceResponse(output_tensors=tensors)
                start = stop
        return responses

    def finalize(self) -> None:
        _log_info(f"{self.model_name} v{self.model_version}: unloaded")
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
