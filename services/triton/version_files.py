"""The files of one published version, checked before anything loads them.

`check_version_files` reads ``<repo>/<model>/<version>/`` (``model.py`` and ``model.pt`` must be
there; ``model.pt`` must be an intact zip archive, every member's CRC checked, and match the
``sha256`` its ``metadata.json`` records) and returns its bytes, so what is tested is what is
loaded. `stored_positions` reads the real positions stored with the version
(``smoke_positions.npz``) and what its metadata says about them.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from services.triton.publisher import (
    QUARANTINE_DIR,
    SMOKE_POSITIONS_FILE,
    dims_accept,
    list_versions,
    quarantined_versions,
    read_smoke_positions,
)
from services.triton.quarantine import QUARANTINE_REASON, quarantine_reason

REQUIRED_FILES = ("model.pt", "model.py")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_version_files(
    repository: Path, model_name: str, version: int
) -> tuple[dict[str, bytes], list[str]]:
    """Read and check a version folder; return ({file name: bytes}, notes).

    Raises ValueError naming the folder or file when the version cannot be served.
    """
    folder = Path(repository) / model_name / str(version)
    if version <= 0 or not folder.is_dir():
        published = list_versions(repository, model_name)
        if version in quarantined_versions(repository, model_name):
            where = Path(repository) / model_name / QUARANTINE_DIR / str(version)
            raise ValueError(f"version {version} is quarantined: {quarantine_reason(where)} "
                             f"(see {where / QUARANTINE_REASON}; published: "
                             f"{published or 'none'})")
        raise ValueError(f"version {version} is not published: {folder} does not exist "
                         f"(published: {published or 'none'})")
    missing = [n for n in REQUIRED_FILES if not (folder / n).is_file()]
    if missing:
        raise ValueError(f"version {version}: {', '.join(str(folder / n) for n in missing)} "
                         "missing")
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
    model_pt = folder / "model.pt"
    data = files["model.pt"]
    if not data:
        raise ValueError(f"version {version}: {model_pt} is empty")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as exc:
        # zlib.error: a flipped byte inside a deflated member
        raise ValueError(f"version {version}: {model_pt} is not a TorchScript archive "
                         f"(truncated or corrupt: {exc})") from exc
    if bad is not None:
        raise ValueError(f"version {version}: {model_pt} is corrupt (member {bad!r} fails its "
                         "CRC check)")
    notes: list[str] = []
    meta_path = folder / "metadata.json"
    if "metadata.json" in files:
        try:
            meta = json.loads(files["metadata.json"])
        except ValueError as exc:
            raise ValueError(f"version {version}: {meta_path} is not JSON: {exc}") from exc
        expected = meta.get("sha256") if isinstance(meta, dict) else None
        if expected and expected != sha256_bytes(data):
            raise ValueError(
                f"version {version}: {model_pt} does not match the sha256 recorded in "
                f"{meta_path} ({sha256_bytes(data)[:12]}... != {str(expected)[:12]}...): the file "
                "changed or is corrupt since it was published"
            )
        if not expected:
            notes.append(f"{meta_path} records no sha256")
    else:
        notes.append(f"v{version} has no metadata.json (not made by the publisher)")
    return files, notes


@dataclass(frozen=True)
class StoredPositions:
    """The real positions stored with a version (``smoke_positions.npz``) and what its
    metadata says about them."""

    boards: np.ndarray  # as the network takes them (Gomoku int8 [N, 15, 15], Go [N, 4, S, S])
    moves: np.ndarray  # int64 [N]: the move played
    top1: float | None = None  # the version's own top-1 on these rows, measured at publish time
    validation_top1: float | None = None  # its top-1 on the whole validation split


def version_metadata(files: dict[str, bytes]) -> dict[str, Any]:
    try:
        meta = json.loads(files["metadata.json"]) if "metadata.json" in files else {}
    except ValueError:
        return {}  # check_version_files refused it already
    return meta if isinstance(meta, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None


def stored_positions(files: dict[str, bytes], config: Any, version: int
                     ) -> StoredPositions | None:
    """The version's stored positions (None when it has none); ValueError when the file is
    there but unusable (unreadable, boards the config does not take, moves out of range)."""
    if SMOKE_POSITIONS_FILE not in files:
        return None
    try:
        boards, moves = read_smoke_positions(files[SMOKE_POSITIONS_FILE])
    except ValueError as exc:
        raise ValueError(f"version {version}: {exc}") from exc
    dims = tuple(int(d) for d in config.input[0].dims)
    if not dims_accept(dims, boards.shape[1:]):
        raise ValueError(f"version {version}: {SMOKE_POSITIONS_FILE} holds boards "
                         f"{list(boards.shape[1:])}, the model takes {list(dims)}")
    points = int(np.prod(boards.shape[-2:])) + (1 if boards.ndim == 4 else 0)
    if int(moves.max()) >= points:
        raise ValueError(f"version {version}: {SMOKE_POSITIONS_FILE} holds move "
                         f"{int(moves.max())}, boards have {points} moves")
    meta = version_metadata(files)
    recorded = meta.get("smoke_positions")
    top1 = _number(recorded.get("top1")) if isinstance(recorded, dict) else None
    metrics = meta.get("metrics")
    validation = metrics.get("validation") if isinstance(metrics, dict) else None
    validation_top1 = _number(validation.get("top1")) if isinstance(validation, dict) else None
    return StoredPositions(boards, moves, top1, validation_top1)
