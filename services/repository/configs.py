"""A model's ``config.pbtxt``: where it is, parsed, and the shapes it declares.

Every model folder of the repository needs a complete ``config.pbtxt`` (the launcher runs
Triton with ``--disable-auto-complete-config``); the tracked ``model_repository/`` holds the
template of each game's model, copied into a repository that lacks one (`ensure_model_config`).
The tensor names (`INPUT_NAME`, `OUTPUT_NAME`, `VALUE_NAME`) are the ones every served config
declares and the client sends and reads; `config_encoder` reads the input encoder a config
declares (what every version of the model takes).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from services.atomic_files import atomic_path
from services.games.base import BASIC_ENCODER
from services.games.registry import default_game, model_of
from services.games.triton_config import ENCODER_PARAMETER, config_text
from services.repository.versions import DEFAULT_MODEL_NAME

CONFIG_FILE = "config.pbtxt"
CONFIG_TEMPLATES = Path(__file__).resolve().parents[2] / "model_repository"
INPUT_NAME = "boards"  # int8 network inputs, one board (or planes of it) per row
OUTPUT_NAME = "logits"  # float32 logits per board
VALUE_NAME = "value"  # float32 [1] per board: the value head's, NaN without one


def ensure_model_config(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> Path:
    """``<repo>/<model>/config.pbtxt``: when missing, copied from the tracked
    ``model_repository``, else generated from the model's game and input encoder, which its
    name gives (`Game.model_name`, `services.games.triton_config`), so a game added later, or
    a network of another input encoder (``go_policy_extended``), needs no committed config."""
    config = Path(repository) / model_name / CONFIG_FILE
    if config.is_file():
        return config
    template = CONFIG_TEMPLATES / model_name / CONFIG_FILE
    found = model_of(model_name)
    if not template.is_file() and found is None:
        raise FileNotFoundError(f"{config} missing, there is no template at {template} and no "
                                f"registered game serves a model named {model_name!r}")
    config.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(config) as tmp:
        if template.is_file():
            shutil.copyfile(template, tmp)
        else:
            Path(tmp).write_text(config_text(*found), encoding="utf-8")
    return config


def config_file(repository: Path, model_name: str) -> Path | None:
    """The config.pbtxt that serves `model_name`: the repository's, else the tracked template;
    None when there is neither."""
    for config in (Path(repository) / model_name / CONFIG_FILE,
                   CONFIG_TEMPLATES / model_name / CONFIG_FILE):
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


def config_encoder(config: Any) -> str:
    """The input encoder a parsed ``ModelConfig`` declares (its `ENCODER_PARAMETER`
    parameter; a config from the repository or Triton's answer to a config request), "basic"
    when it declares none (a config made before encoders were declared)."""
    parameter = config.parameters.get(ENCODER_PARAMETER)
    value = parameter.string_value.strip() if parameter is not None else ""
    return value or BASIC_ENCODER


def config_io(config: Path) -> tuple[tuple[int, ...], int] | None:
    """(input dims of one board, logits per board) parsed from a config.pbtxt (see
    `model_io`); None when the file cannot be read or parsed as a ModelConfig."""
    try:
        parsed = parse_config(config)
        logits = next((o for o in parsed.output if o.name == OUTPUT_NAME), parsed.output[0])
        return tuple(int(d) for d in parsed.input[0].dims), int(logits.dims[-1])
    except (ValueError, IndexError):
        return None


def model_io(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> tuple[tuple[int, ...], int]:
    """(input dims of one board, logits per board) from the model's config.pbtxt (the
    repository's, else the tracked template; by the name when there is neither: the game whose
    model it is, else the default game's). The logits are the output called ``logits`` (else
    the first one; ``value``, when declared, is one float per board whatever the model).
    Variable dims stay -1 (``go_policy``: ((4, -1, -1), -1));
    `services.repository.model_check.check_shapes` turns them into concrete test shapes."""
    config = config_file(repository, model_name)
    found = config_io(config) if config is not None else None
    if found is not None:
        return found
    game, encoder = model_of(model_name) or (default_game(), BASIC_ENCODER)
    io = game.model_io(encoder)
    return io.board_shape, io.n_moves


def model_encoder(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> str:
    """The input encoder of `model_name`'s config (the repository's, else the tracked
    template: `config_encoder`); by the name when there is neither (the config
    `ensure_model_config` would generate: `Game.model_name`), else "basic"."""
    config = config_file(repository, model_name)
    if config is not None:
        return config_encoder(parse_config(config))
    found = model_of(model_name)
    return found[1] if found is not None else BASIC_ENCODER


def dims_accept(dims: tuple[int, ...] | list[int], board_shape: tuple[int, ...] | list[int]
                ) -> bool:
    """Whether a config's input `dims` (-1: any size) take boards of `board_shape`."""
    return len(dims) == len(board_shape) and all(
        d == -1 or int(d) == int(s) for d, s in zip(dims, board_shape, strict=True))
