"""Publish a TorchScript policy network as the next version of a model, atomically.

A version is staged in ``<repo>/<model>/.tmp-<uuid>/`` (``model.pt``, ``model.py`` = a copy of
the python backend `BACKEND_SOURCE`, ``metadata.json``), fsynced, then renamed to
``<repo>/<model>/<version>/`` in one ``os.rename``: Triton ignores non-numeric folders, so a
version folder never appears half written. Version numbers are `versions.next_version`
(above every published and quarantined one). Concurrent publishers are serialised with the
publishers' lock on the model folder (and a rename onto an existing version is retried, never
merged). `extra_files` (e.g. the train flow's ``smoke_positions.npz``: real positions the
rollout's smoke test asks the version about) are staged, fsynced and renamed with the rest.
Serving changes only through `services.triton.rollout.rollout`.

The model's game is given (`game`), or the one its metadata names, or the one whose model the
name is (`game_for_model`). Before publishing, the network is test-run on CPU
(`services.repository.model_check.validate_model_file`) on the input shape of the model's
``config.pbtxt`` (the one in the repository, else the tracked template) at its game's sizes,
and on the stored positions when there are some. ``metadata.json`` records ``value_head``
(true/false) as found by that run, the ``game``, whether its policy ends with a pass
(``pass_move``: the python backend reads it when the config's logits follow the board) and the
input ``encoder`` the network takes (one of its game's `Game.encoder_names`; ``basic``, the
game's input as shards and requests hold it, unless said otherwise), so that what serves it
can tell which input to send.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.atomic_files import fsync_dir, fsync_file, locked
from services.checksums import sha256_file
from services.defaults import BACKEND_FILE, METADATA_FILE, MODEL_FILE
from services.games.base import BASIC_ENCODER, Game
from services.games.registry import UnknownGame, game_for_model, get_game
from services.games.rollout import RolloutWeights
from services.repository.configs import (
    dims_accept,
    ensure_model_config,
    model_encoder,
    model_io,
)
from services.repository.model_check import check_sizes_for, validate_model_file
from services.repository.rollout_policy import rollout_files, rollout_metadata
from services.repository.smoke_positions import SMOKE_POSITIONS_FILE, read_smoke_positions
from services.repository.versions import DEFAULT_MODEL_NAME, next_version

# Triton's python backend, copied into every version as ``model.py`` (it runs inside Triton's
# python stub and is not imported by the project)
BACKEND_SOURCE = Path(__file__).resolve().parents[1] / "triton" / "policy_model.py"
RESERVED_FILES = (MODEL_FILE, BACKEND_FILE, METADATA_FILE)


def model_game(model_name: str, game: Game | str | None = None,
               metadata: dict[str, Any] | None = None) -> Game | None:
    """The game of a model being published: `game` (a `Game` or its registered name), else
    the registered game its metadata names (``game``), else the game whose model `model_name`
    is; None when none says."""
    if isinstance(game, Game):
        return game
    named = game if game is not None else (metadata or {}).get("game")
    if isinstance(named, str):
        try:
            return get_game(named)
        except UnknownGame:
            if game is not None:
                raise
    return game_for_model(model_name)


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


def _check_encoder(game: Game, encoder: str, repository: Path, model_name: str) -> None:
    """ValueError when `game` has no input `encoder`, when the model's config declares another
    encoder (`model_encoder`: every version of a model is sent the input its config names), or
    when the config cannot take that input at any size the game serves (a network of another
    encoder than the config's would only fail its first request)."""
    game.check_encoder(encoder)
    declared = model_encoder(repository, model_name)
    if declared != encoder:
        raise ValueError(f"the config of {model_name!r} declares the {declared!r} input "
                         f"encoder, this {game.title} network takes the {encoder!r} input: "
                         f"publish it under {game.model_name(encoder)!r}, the model of its "
                         "encoder")
    if encoder == BASIC_ENCODER:
        return  # the config's own game input: the test run checks the dims
    dims = model_io(repository, model_name)[0]
    if not any(dims_accept(dims, game.encoder_input_shape(encoder, size))
               for size in game.sizes):
        raise ValueError(f"the config of {model_name!r} takes input dims {list(dims)}, a "
                         f"{game.title} network on the {encoder!r} input takes "
                         f"{game.model_io(encoder).describe()}: publish it under a model "
                         "whose config takes that input")


def publish(
    model_file: Path,
    repository: Path,
    model_name: str = DEFAULT_MODEL_NAME,
    metadata: dict | None = None,
    *,
    validate: bool = True,
    extra_files: dict[str, Path | bytes] | None = None,
    source: str | None = None,
    game: Game | str | None = None,
    encoder: str | None = None,
    rollout: RolloutWeights | None = None,
) -> int:
    """Publish `model_file` (TorchScript) as the next version of `model_name`; return it.

    The model folder needs a ``config.pbtxt`` (copied from the tracked ``model_repository`` when
    missing). `metadata` (JSON-serialisable) is stored in ``metadata.json`` with the version,
    the model's sha256, the publish time, its game and (when validated) ``value_head``. With
    `validate`, the model is test-run on CPU first (`validate_model_file`, on the stored
    positions too when `extra_files` holds ``smoke_positions.npz``). `extra_files` ({file
    name: path or bytes}) are written into the version folder with the model, in the same
    atomic rename. `source` (recorded as ``source``) says what the model was made from; by
    default the model file's path, which a caller exporting into a temporary folder must
    replace (the path would name nothing once the folder is gone). `game`: the model's game
    (`model_game` finds it when not given). `encoder`: the input the network takes (default:
    the one `metadata` names, else ``basic``), recorded as ``encoder``; the test run feeds it
    that input, and a config whose input dims cannot take it is refused (ValueError). The
    model card (`services.repository.model_card`) comes in `metadata`. `rollout`: the fast
    rollout policy trained with the network, stored beside it (``rollout.npz`` and ``rollout``
    in ``metadata.json``: `services.repository.rollout_policy`).
    """
    model_file = Path(model_file)
    if not model_file.is_file():
        raise FileNotFoundError(f"model file {model_file} does not exist")
    repository = Path(repository)
    extras = _read_extra_files(extra_files or {})
    info: dict[str, Any] = dict(metadata or {})
    if rollout is not None:
        extras.update(rollout_files(rollout))
        info.update(rollout_metadata(rollout))
    played = model_game(model_name, game, info)
    info["encoder"] = encoder or info.get("encoder") or BASIC_ENCODER
    if played is not None:
        info.setdefault("game", played.name)
        info["pass_move"] = played.has_pass
        _check_encoder(played, info["encoder"], repository, model_name)
    if validate:
        if played is None:
            raise ValueError(f"cannot tell the game of {model_name!r} (no game serves it by "
                             "default and its metadata names none): give publish its game")
        positions = (read_smoke_positions(extras[SMOKE_POSITIONS_FILE])[0]
                     if SMOKE_POSITIONS_FILE in extras else None)
        info["value_head"] = validate_model_file(model_file, played,
                                                 *model_io(repository, model_name),
                                                 positions=positions,
                                                 sizes=check_sizes_for(played),
                                                 encoder=info["encoder"])
    ensure_model_config(repository, model_name)
    model_dir = repository / model_name
    json.dumps(info)  # fail before touching the repository

    staging = model_dir / f".tmp-{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        shutil.copyfile(model_file, staging / MODEL_FILE)
        shutil.copyfile(BACKEND_SOURCE, staging / BACKEND_FILE)
        for name, data in extras.items():
            (staging / name).write_bytes(data)
        sha = sha256_file(staging / MODEL_FILE)
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
                meta_path = staging / METADATA_FILE
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
