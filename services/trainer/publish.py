"""What the trainer needs to publish a trained network: the gate measured against the serving
version, the checked TorchScript export and the publication with its stored positions and
model card.

The train flow (flows/train.py, which runs `export_and_publish` as a Prefect task) and rank 0
of `services.trainer.distributed` publish through here, so both gate, export and publish the
same way. A model is published only if `check_gate` passes it (`services.repository.gate`: sound,
and its validation top-1 not below the serving version's, measured here on the same split from
that version's own TorchScript file, minus a tolerance) and the repository can serve it
(`unservable_reason`: a ``config.pbtxt`` whose input dims take the dataset's boards in the
model's input).

Every model is handed its own input: the trained one its configuration's encoder
(`ModelSpec.encoder`) in the export check, the stored positions and their top-1; the serving
version the encoder its ``metadata.json`` records (``basic`` when it records none) in the gate.
The published version records its encoder (``encoder`` in ``metadata.json``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from services.dataset.loader import dataset_game
from services.dataset.shards import read_split
from services.defaults import MODEL_FILE
from services.games.base import BASIC_ENCODER
from services.games.registry import game_for_model, get_game
from services.games.triton_config import io_dims
from services.models.configs import spec
from services.models.export import export_torchscript
from services.repository import gate
from services.repository.configs import config_file, config_io, dims_accept
from services.repository.model_card import build_card
from services.repository.model_check import load_model
from services.repository.publish import publish
from services.repository.rollout_state import reference_version
from services.repository.smoke_positions import SMOKE_POSITIONS_FILE, write_smoke_positions
from services.repository.version_files import read_version_metadata
from services.repository.versions import version_dir
from services.trainer.metrics import evaluate
from services.trainer.train import TrainResult

SMOKE_ROWS = 256  # validation positions stored with a version for the rollout's smoke test
CHECK_ROWS = 64  # real validation positions the export check runs on, next to random ones
CHECK_RANDOM = 64  # random inputs the export check runs on (`export_torchscript`'s n_check)


def model_encoder(result: TrainResult) -> str:
    """The input encoder the trained model takes (its configuration's)."""
    return spec(result.config.model).encoder


def version_encoder(repository: Path, model_name: str, version: int) -> str:
    """The input encoder a published version takes: the one its ``metadata.json`` records,
    else the basic one (versions published before encoders were recorded took that)."""
    recorded = read_version_metadata(repository, model_name, version).get("encoder")
    return recorded if isinstance(recorded, str) and recorded else BASIC_ENCODER


def check_gate(metrics: dict, repository: Path, model_name: str, dataset_dir: Path,
               tolerance: float = gate.DEFAULT_TOLERANCE, device: str = "cpu"
               ) -> gate.GateDecision:
    """The publish gate on a trained model's `metrics`: refused when its outputs were not
    finite; else its validation top-1 against the serving version's (`reference_version`),
    measured here on the dataset's validation split from that version's ``model.pt``, in the
    input that version takes (`version_encoder`)."""
    refused = gate.refuse_unsound(metrics)
    if refused is not None:
        return refused
    candidate = metrics["validation"]["top1"]
    version = reference_version(repository, model_name)
    if version is None:
        return gate.decide(candidate, None, None, tolerance)
    serving = load_model(version_dir(repository, model_name, version) / MODEL_FILE, device)
    boards, moves, _ = read_split(dataset_dir, "validation")
    serving_top1 = evaluate(serving, boards, moves, device, game=metrics["game"],
                            encoder=version_encoder(repository, model_name, version))["top1"]
    return gate.decide(candidate, version, serving_top1, tolerance)


def unservable_reason(repository: str, model_name: str, dataset_dir: str,
                      encoder: str = BASIC_ENCODER) -> str | None:
    """Why a model of this dataset taking `encoder` cannot be published as `model_name`, or
    None if it can: there must be a config.pbtxt (the repository's, else the tracked template,
    else the one the model's game generates, which publishing writes) whose input dims take
    the dataset's boards in that input ([s, s] Gomoku cells, [4, s, s] Go planes, [10, s, s]
    Go's extended input; a -1 dim, as in the tracked go_policy config, takes any size)."""
    game, size = dataset_game(dataset_dir, "train")
    shape = list(get_game(game).encoder_input_shape(encoder, size))
    config = config_file(Path(repository), model_name)
    if config is None:  # publishing writes the config its game generates, if it has one
        served = game_for_model(model_name)
        if served is None:
            return (f"no Triton config.pbtxt for {model_name!r} in {repository} or the tracked "
                    "templates, and no registered game serves that model")
        where, dims = f"the config {served.title} generates", list(io_dims(served)[0])
    else:
        io = config_io(config)
        where, dims = str(config), (list(io[0]) if io is not None else None)
    if dims is None or not dims_accept(dims, shape):  # -1: any size
        boards = ("boards" if encoder == BASIC_ENCODER
                  else f"boards in the model's {encoder!r} input")
        return f"{where} takes input dims {dims}, this {game} dataset's {boards} are {shape}"
    return None


def export_checked(result: TrainResult, model_file: Path, dataset_dir: str | Path) -> float:
    """TorchScript export checked against the eager model on random inputs of the dataset's
    game and on `CHECK_ROWS` real validation positions, both in the model's input
    (`model_encoder`); return the max abs difference."""
    game, size = dataset_game(dataset_dir, "validation")
    boards = read_split(Path(dataset_dir), "validation")[0][:CHECK_ROWS]
    encoder = model_encoder(result)
    if encoder == BASIC_ENCODER:
        return export_torchscript(result.model, model_file, board_size=size, game=game,
                                  boards=boards)
    played = get_game(game)
    return export_torchscript(result.model, model_file, board_size=size, game=game,
                              boards=played.encode_inputs(boards, encoder),
                              inputs=played.random_inputs(CHECK_RANDOM, size, encoder=encoder))


def smoke_rows(dataset_dir: str | Path, rows: int = SMOKE_ROWS,
               encoder: str = BASIC_ENCODER) -> tuple[np.ndarray, np.ndarray] | None:
    """Up to `rows` validation positions, evenly spaced over the split (every game stage), as
    the network takes them (in `encoder`'s input, the model's), and the moves played: (boards
    int8, moves int64); None when the split is empty (the version then has no stored
    positions, and the rollout says so)."""
    boards, moves, _ = read_split(Path(dataset_dir), "validation")
    if not len(moves):
        return None
    pick = np.unique(np.linspace(0, len(moves) - 1, min(rows, len(moves))).astype(np.int64))
    boards = boards[pick]
    if encoder != BASIC_ENCODER:
        game, _ = dataset_game(dataset_dir, "validation")
        boards = get_game(game).encode_inputs(boards, encoder)
    return boards, moves[pick].astype(np.int64)


def export_and_publish(result: TrainResult, repository: str, model_name: str,
                       dataset_dir: str, decision: gate.GateDecision | None = None,
                       run_dir: str | None = None) -> int:
    """Export, verify against the eager model, then publish atomically as the next version,
    with real validation positions (``smoke_positions.npz``) and the model's top-1 on them,
    for the rollout's smoke test, and the model card (`services.repository.model_card`: dataset
    manifest hash and rows, code commit, recipe, metrics, the gate's `decision`) and the input
    encoder the model takes."""
    encoder = model_encoder(result)
    card = build_card(config_name=result.config.model, model=result.model,
                      dataset_dir=dataset_dir, recipe=result.config, metrics=result.metrics,
                      metrics_source="the training run's final evaluation", gate=decision)
    with tempfile.TemporaryDirectory() as tmp:
        model_file = Path(tmp) / MODEL_FILE
        diff = export_checked(result, model_file, dataset_dir)
        metadata = {**result.summary(), **card, "export_max_abs_diff": diff}
        extra_files: dict[str, Path | bytes] = {}
        rows = smoke_rows(dataset_dir, encoder=encoder)
        if rows is not None:
            boards, moves = rows
            positions = Path(tmp) / SMOKE_POSITIONS_FILE
            write_smoke_positions(positions, boards, moves)
            exported = load_model(model_file)
            # serving must reproduce it; `boards` are the model's input already (no encoding)
            top1 = evaluate(exported, boards, moves, "cpu", game=result.metrics["game"])["top1"]
            metadata["smoke_positions"] = {"file": SMOKE_POSITIONS_FILE, "rows": len(moves),
                                           "top1": top1}
            extra_files[SMOKE_POSITIONS_FILE] = positions
        source = f"train run {Path(run_dir).resolve()}" if run_dir else "trainer"
        return publish(model_file, Path(repository), model_name, metadata=metadata,
                       extra_files=extra_files, source=source,
                       game=get_game(result.metrics["game"]), encoder=encoder)
