"""Publish TorchScript policy models as new Triton model versions.

A version is staged in ``<repo>/<model>/.tmp-<uuid>/`` (``model.pt``, ``model.py`` = a copy of
`policy_model.py`, ``metadata.json``), fsynced, then renamed to ``<repo>/<model>/<version>/`` in
one ``os.rename``: Triton ignores non-numeric folders, so a version folder never appears half
written. Version numbers are ``max(existing, quarantined) + 1``: a version the rollout refused
and moved to ``<repo>/<model>/quarantine/<version>/`` (`QUARANTINE_DIR`) keeps its number, so a
log line or a record naming "v8" never means two different models. Concurrent publishers are
serialised with an ``flock`` on the model folder (and a rename onto an existing version is
retried, never merged). `extra_files` (e.g. the train flow's ``smoke_positions.npz``: real
positions the rollout's smoke test asks the version about) are staged, fsynced and renamed with
the rest. Serving changes only through `services.triton.rollout.rollout`.

The test run before publishing feeds the input shape of the model's ``config.pbtxt`` (the one in
the repository, else the tracked template): int8 [2, 15, 15] -> [2, 225] for ``gomoku_policy``;
for ``go_policy``, whose spatial dims are -1 (any board size), int8 [2, 4, 19, 19] -> [2, 362]
and int8 [2, 4, 9, 9] -> [2, 82] (`CHECK_SIZES`: the largest and the smallest served size; a
free logits width is the board's points, plus the pass for Go; a model of a registered game is
run at its game's largest, smallest and default served size instead, `check_sizes_for`: the
Capture Game's ``capture_policy`` [-1, -1] at 9x9 and 5x5); a network with a value head
answers the tuple (logits, value [2]) and both shapes are checked. Besides zeros the model runs
on real boards: the rollout's known smoke positions of its game and, when given, the stored
positions; NaN or Inf in the logits, or in the value of a network with a value head, refuses the
model (a network that answers NaN would otherwise reach Triton and serve a uniform policy).
``metadata.json`` records ``value_head`` (true/false) as found by that run.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from services.atomic_files import atomic_path, fsync_dir, fsync_file, locked
from services.checksums import sha256_file
from services.games.registry import default_game, game_for_model

POLICY_MODEL_PY = Path(__file__).with_name("policy_model.py")
CONFIG_TEMPLATES = Path(__file__).resolve().parents[2] / "model_repository"
DEFAULT_MODEL_NAME = default_game().default_model
DEFAULT_BOARD_SHAPE = default_game().input_shape()
CHECK_SIZES = (19, 9)  # a free (-1) spatial dim is test-run at these sizes
_VERSION_RE = re.compile(r"[0-9]+")
QUARANTINE_DIR = "quarantine"  # refused versions: <repo>/<model>/quarantine/<version>[-n]/
_QUARANTINED_RE = re.compile(r"([0-9]+)(-[0-9]+)?")
SMOKE_POSITIONS_FILE = "smoke_positions.npz"  # boards (network input) and moves, by row
RESERVED_FILES = ("model.pt", "model.py", "metadata.json")


def list_versions(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> list[int]:
    """Published (numeric, > 0) version folders of a model, ascending."""
    model_dir = Path(repository) / model_name
    if not model_dir.is_dir():
        return []
    versions = [
        int(p.name) for p in model_dir.iterdir() if _VERSION_RE.fullmatch(p.name) and p.is_dir()
    ]
    return sorted(v for v in versions if v > 0)


def quarantined_versions(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> list[int]:
    """Versions moved to ``<repo>/<model>/quarantine/`` by a refused rollout, ascending (a
    number quarantined twice, e.g. a hand-made folder reusing it, is listed once)."""
    folder = Path(repository) / model_name / QUARANTINE_DIR
    if not folder.is_dir():
        return []
    found = {int(m.group(1)) for p in folder.iterdir()
             if p.is_dir() and (m := _QUARANTINED_RE.fullmatch(p.name))}
    return sorted(found)


def latest_version(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> int | None:
    versions = list_versions(repository, model_name)
    return versions[-1] if versions else None


def ensure_model_config(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> Path:
    """``<repo>/<model>/config.pbtxt``, copied from the tracked ``model_repository`` if missing."""
    config = Path(repository) / model_name / "config.pbtxt"
    if config.is_file():
        return config
    template = CONFIG_TEMPLATES / model_name / "config.pbtxt"
    if not template.is_file():
        raise FileNotFoundError(f"{config} missing and there is no template at {template}")
    config.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(config) as tmp:
        shutil.copyfile(template, tmp)
    return config


def model_io(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> tuple[tuple[int, ...], int]:
    """(input dims of one board, logits per board) from the model's config.pbtxt (the
    repository's, else the tracked template; by the name when there is neither). The logits
    are the output called ``logits`` (else the first one; ``value``, when declared, is one
    float per board whatever the model). Variable dims stay -1 (``go_policy``:
    ((4, -1, -1), -1)); `check_shapes` turns them into concrete test shapes."""
    from services.triton.client import io_for

    config = config_file(repository, model_name)
    found = config_io(config) if config is not None else None
    if found is not None:
        return found
    io = io_for(model_name)
    return io.board_shape, io.n_moves


def config_file(repository: Path, model_name: str) -> Path | None:
    """The config.pbtxt that serves `model_name`: the repository's, else the tracked template;
    None when there is neither."""
    for config in (Path(repository) / model_name / "config.pbtxt",
                   CONFIG_TEMPLATES / model_name / "config.pbtxt"):
        if config.is_file():
            return config
    return None


def parse_config(config: Path) -> Any:
    """A config.pbtxt as a ``ModelConfig`` protobuf (tritonclient's); ValueError naming the
    file when it cannot be read or parsed."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    try:
        return text_format.Parse(config.read_text(), model_config_pb2.ModelConfig())
    except (OSError, text_format.ParseError) as exc:
        raise ValueError(f"cannot read the model config {config}: {exc}") from exc


def config_io(config: Path) -> tuple[tuple[int, ...], int] | None:
    """(input dims of one board, logits per board) parsed from a config.pbtxt (see
    `model_io`); None when the file cannot be read or parsed as a ModelConfig."""
    from services.triton.client import OUTPUT_NAME

    try:
        parsed = parse_config(config)
        logits = next((o for o in parsed.output if o.name == OUTPUT_NAME), parsed.output[0])
        return tuple(int(d) for d in parsed.input[0].dims), int(logits.dims[-1])
    except (ValueError, IndexError):
        return None


def dims_accept(dims: tuple[int, ...] | list[int], board_shape: tuple[int, ...] | list[int]
                ) -> bool:
    """Whether a config's input `dims` (-1: any size) take boards of `board_shape`."""
    return len(dims) == len(board_shape) and all(
        d == -1 or int(d) == int(s) for d, s in zip(dims, board_shape, strict=True))


def check_shapes(
    board_shape: tuple[int, ...], n_moves: int, sizes: tuple[int, ...] = CHECK_SIZES
) -> list[tuple[tuple[int, ...], int]]:
    """The concrete (board shape, logits per board) pairs to test-run a model on: the shape
    itself when every dim is fixed; else each free (-1) dim set to each of `sizes`. A free
    logits width is the board's points (the last two dims), plus one for the pass when the
    board has planes ([C, H, W]: Go), as `policy_model.py` checks it."""
    board_shape = tuple(int(d) for d in board_shape)
    if -1 not in board_shape:
        shapes = [board_shape]
    else:
        shapes = [tuple(s if d == -1 else d for d in board_shape) for s in sizes]
    out = []
    for shape in shapes:
        width = n_moves
        if width == -1:
            width = shape[-1] * shape[-2] + (1 if len(shape) >= 3 else 0)
        out.append((shape, int(width)))
    return out


def check_sizes_for(model_name: str) -> tuple[int, ...]:
    """The sizes a free (-1) spatial dim of `model_name` is test-run at: the largest, the
    smallest and the default size its game serves (`game_for_model`), else `CHECK_SIZES`."""
    game = game_for_model(model_name)
    if game is None:
        return CHECK_SIZES
    return tuple(dict.fromkeys((game.sizes[-1], game.sizes[0], game.default_size)))


def write_smoke_positions(path: Path, boards: np.ndarray, moves: np.ndarray) -> None:
    """Store `boards` (as the network input takes them: int8 [N, 15, 15], Go [N, 4, S, S]) and
    the `moves` played there (int64 [N]) as ``smoke_positions.npz``."""
    boards = np.ascontiguousarray(boards, dtype=np.int8)
    moves = np.asarray(moves, dtype=np.int64)
    if boards.ndim < 3 or len(boards) != len(moves) or not len(moves):
        raise ValueError(f"smoke positions need int8 boards [N, ...] and N moves, got boards "
                         f"{boards.shape} and moves {moves.shape}")
    with open(path, "wb") as f:
        np.savez(f, boards=boards, moves=moves)


def read_smoke_positions(source: Path | bytes) -> tuple[np.ndarray, np.ndarray]:
    """(boards int8, moves int64) of a ``smoke_positions.npz`` (a path or its bytes);
    ValueError saying what is wrong with it."""
    import io

    try:
        with np.load(io.BytesIO(source) if isinstance(source, bytes) else source,
                     allow_pickle=False) as data:
            boards, moves = data["boards"], data["moves"]
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise ValueError(f"{SMOKE_POSITIONS_FILE} is unreadable: {exc}") from exc
    if boards.dtype != np.int8 or boards.ndim < 3 or moves.shape != (len(boards),) or not len(
            boards):
        raise ValueError(f"{SMOKE_POSITIONS_FILE} holds boards {boards.dtype} {boards.shape} and "
                         f"moves {moves.shape}, expected int8 [N, ...] and [N]")
    if moves.min() < 0:
        raise ValueError(f"{SMOKE_POSITIONS_FILE} holds negative moves")
    return boards, moves.astype(np.int64)


def _real_boards(board_shape: tuple[int, ...]) -> tuple[list[str], np.ndarray] | None:
    """(names, boards) of the rollout's known smoke positions for boards of `board_shape`
    of the game whose default input `board_shape` is (`smoke.smoke_positions`), else None."""
    from services.triton import smoke  # lazy: smoke imports this module

    game = smoke.game_of_input(board_shape)
    if game is None:
        return None
    known = smoke.smoke_positions(game)
    return list(known), np.stack([b for b, _ in known.values()])


def validate_model_file(
    model_file: Path,
    board_shape: tuple[int, ...] = DEFAULT_BOARD_SHAPE,
    n_moves: int = default_game().policy_size(),
    positions: np.ndarray | None = None,
    sizes: tuple[int, ...] = CHECK_SIZES,
) -> bool:
    """Load the TorchScript file on CPU and check int8 [2, *board_shape] -> float32
    [2, n_moves] (default: the Gomoku policy, [2,15,15] -> [2,225]), or, for a network with a
    value head, the tuple (logits float32 [2, n_moves], value float32 [2]). Dims of -1 (a
    config's variable sizes) are checked at each of `sizes` (`check_shapes`: Go
    [4,-1,-1] -> -1 runs [2,4,19,19] -> [2,362] and [2,4,9,9] -> [2,82]).

    Then the model runs on real boards of each checked shape (the rollout's known smoke
    positions of its game) and on `positions` (boards as the network takes them, e.g. the
    train flow's stored validation positions): non-finite logits, or non-finite values from a
    network with a value head, refuse it (ValueError naming the boards). Returns whether the
    model has a value head."""
    import torch  # lazy: listing versions must not need torch

    try:
        model = torch.jit.load(str(model_file), map_location="cpu").eval()
    except Exception as exc:
        raise ValueError(f"{model_file} is not a usable TorchScript policy: {exc}") from exc
    runs: list[tuple[str, list[str] | None, np.ndarray, int]] = []
    for shape, width in check_shapes(tuple(board_shape), n_moves, sizes):
        shape_text = ",".join(str(d) for d in (2, *shape))
        runs.append((f"int8 [{shape_text}]", None, np.zeros((2, *shape), np.int8), width))
        real = _real_boards(shape)
        if real is not None:
            runs.append(("the known smoke positions", real[0], real[1], width))
    if positions is not None:
        positions = np.asarray(positions)
        shape = tuple(int(d) for d in positions.shape[1:])
        if positions.dtype != np.int8 or not dims_accept(tuple(board_shape), shape):
            raise ValueError(f"stored positions are {positions.dtype} {list(shape)} per board; "
                             f"{model_file} takes int8 {list(board_shape)}")
        runs.append((f"the {len(positions)} stored positions", None, positions,
                     check_shapes(shape, n_moves)[0][1]))
    heads = {_check_outputs(model, model_file, what, names, boards, width)
             for what, names, boards, width in runs}
    if len(heads) != 1:
        raise ValueError(f"{model_file}: answers a value on some boards only")
    return heads.pop()


def _check_outputs(model: Any, model_file: Path, what: str, names: list[str] | None,
                   boards: np.ndarray, n_moves: int) -> bool:
    """One test run of `validate_model_file` on `boards` (`what` names them in errors, `names`
    each board when known); returns whether the answer carries a value."""
    import torch

    n = len(boards)
    try:
        with torch.inference_mode():
            out = model(torch.from_numpy(np.ascontiguousarray(boards)))
    except Exception as exc:
        raise ValueError(f"{model_file} is not a usable TorchScript policy on {what}: "
                         f"{exc}") from exc
    value = None
    if isinstance(out, (tuple, list)):
        if len(out) != 2 or not all(isinstance(t, torch.Tensor) for t in out):
            kinds = ", ".join(type(t).__name__ for t in out)
            raise ValueError(f"{model_file}: {what} gave ({kinds}), expected "
                             "logits or (logits, value) tensors")
        y, value = out
    else:
        y = out
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != (n, n_moves):
        shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ValueError(f"{model_file}: {what} gave {shape}, expected ({n}, {n_moves})")
    if y.dtype != torch.float32:
        raise ValueError(f"{model_file}: logits are {y.dtype}, expected torch.float32")
    if value is not None:
        if tuple(value.shape) != (n,):
            raise ValueError(f"{model_file}: {what} gave value of shape "
                             f"{tuple(value.shape)}, expected ({n},): one value per board")
        if value.dtype != torch.float32:
            raise ValueError(f"{model_file}: value is {value.dtype}, expected torch.float32")
    for output, tensor in (("logits", y), ("value", value)):
        if tensor is None:
            continue
        bad = ~torch.isfinite(tensor.reshape(n, -1)).all(dim=1)
        if bool(bad.any()):
            rows = torch.nonzero(bad).flatten().tolist()
            which = ", ".join(names[i] for i in rows[:5]) if names else (
                "rows " + ", ".join(str(i) for i in rows[:5]))
            more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
            raise ValueError(f"{model_file}: NaN or Inf {output} on {what} ({which}{more}): "
                             "a model must answer finite numbers")
    return value is not None


def next_version(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> int:
    """The number the next published version gets: above every published and every
    quarantined one (numeric folders are listed first, so a version moving to quarantine
    meanwhile is seen in one place or the other)."""
    taken = list_versions(repository, model_name)
    taken += quarantined_versions(repository, model_name)
    return max(taken, default=0) + 1


def _read_extra_files(extra_files: dict[str, Path | bytes]) -> dict[str, bytes]:
    """The bytes of `publish`'s extra files; ValueError for a name that is not a plain file
    name or that would replace the model's own files."""
    out: dict[str, bytes] = {}
    for name, source in extra_files.items():
        if (not name or name != Path(name).name or name.startswith(".")
                or name in RESERVED_FILES):
            raise ValueError(f"extra file name {name!r}: must be a plain file name other than "
                             f"{', '.join(RESERVED_FILES)}")
        out[name] = source if isinstance(source, bytes) else Path(source).read_bytes()
    return out


@contextlib.contextmanager
def locked_model_dir(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> Iterator[None]:
    """The publishers' lock on the model folder: held while version folders are added or
    moved (publish, quarantine)."""
    with locked(Path(repository) / model_name):
        yield


def publish(
    model_file: Path,
    repository: Path,
    model_name: str = DEFAULT_MODEL_NAME,
    metadata: dict | None = None,
    *,
    validate: bool = True,
    extra_files: dict[str, Path | bytes] | None = None,
    source: str | None = None,
) -> int:
    """Publish `model_file` (TorchScript) as the next version of `model_name`; return it.

    The model folder needs a ``config.pbtxt`` (copied from the tracked ``model_repository`` when
    missing). `metadata` (JSON-serialisable) is stored in ``metadata.json`` with the version,
    the model's sha256, the publish time and (when validated) ``value_head``. With `validate`,
    the model is test-run on CPU first (`validate_model_file`, on the stored positions too when
    `extra_files` holds ``smoke_positions.npz``). `extra_files` ({file name: path or bytes})
    are written into the version folder with the model, in the same atomic rename.
    `source` (recorded as ``source``) says what the model was made from; by default the model
    file's path, which a caller exporting into a temporary folder must replace (the path would
    name nothing once the folder is gone). The model card (`services.triton.model_card`) comes
    in `metadata`.
    """
    model_file = Path(model_file)
    if not model_file.is_file():
        raise FileNotFoundError(f"model file {model_file} does not exist")
    repository = Path(repository)
    extras = _read_extra_files(extra_files or {})
    info: dict[str, Any] = dict(metadata or {})
    if validate:
        positions = (read_smoke_positions(extras[SMOKE_POSITIONS_FILE])[0]
                     if SMOKE_POSITIONS_FILE in extras else None)
        info["value_head"] = validate_model_file(model_file, *model_io(repository, model_name),
                                                 positions=positions,
                                                 sizes=check_sizes_for(model_name))
    ensure_model_config(repository, model_name)
    model_dir = repository / model_name
    json.dumps(info)  # fail before touching the repository

    staging = model_dir / f".tmp-{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        shutil.copyfile(model_file, staging / "model.pt")
        shutil.copyfile(POLICY_MODEL_PY, staging / "model.py")
        for name, data in extras.items():
            (staging / name).write_bytes(data)
        sha = sha256_file(staging / "model.pt")
        with locked(model_dir):
            for _ in range(100):
                version = next_version(repository, model_name)
                record = {
                    **info,
                    "model_name": model_name,
                    "version": version,
                    "sha256": sha,
                    "source": source if source is not None else str(model_file.resolve()),
                    "published_at": datetime.now(UTC).isoformat(timespec="seconds"),
                }
                meta_path = staging / "metadata.json"
                meta_path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
                for name in (*RESERVED_FILES, *extras):
                    fsync_file(staging / name)
                fsync_dir(staging)
                target = model_dir / str(version)
                if target.exists():  # made by someone not taking the lock
                    time.sleep(0.01)
                    continue
                try:
                    os.rename(staging, target)
                except OSError as exc:
                    if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                        continue
                    raise
                fsync_dir(model_dir)
                return version
        raise RuntimeError(f"could not allocate a version folder in {model_dir}")
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
