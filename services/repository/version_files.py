"""The files of one published version, checked before anything loads them.

`check_version_files` reads ``<repo>/<model>/<version>/`` (the network, ``model.pt``, and the
backend, ``model.py``, must be there; ``model.pt`` must be an intact zip archive, every member's
CRC checked, and match the ``sha256`` its ``metadata.json`` records) and returns its bytes, so
what is tested is what is loaded. `version_metadata` and `read_version_metadata` read the
version's ``metadata.json``; `require_served_input` refuses a version whose network takes
another input than the one its model's config declares (what the services send it).
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from pathlib import Path
from typing import Any

from services.defaults import BACKEND_FILE, METADATA_FILE, MODEL_FILE
from services.games.base import BASIC_ENCODER
from services.repository.quarantine import QUARANTINE_REASON, quarantine_reason
from services.repository.versions import (
    QUARANTINE_DIR,
    list_versions,
    quarantined_versions,
    version_dir,
)

REQUIRED_FILES = (MODEL_FILE, BACKEND_FILE)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_version_files(
    repository: Path, model_name: str, version: int
) -> tuple[dict[str, bytes], list[str]]:
    """Read and check a version folder; return ({file name: bytes}, notes).

    Raises ValueError naming the folder or file when the version cannot be served.
    """
    folder = version_dir(repository, model_name, version)
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
    model_pt = folder / MODEL_FILE
    data = files[MODEL_FILE]
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
    meta_path = folder / METADATA_FILE
    if METADATA_FILE in files:
        try:
            meta = json.loads(files[METADATA_FILE])
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
        notes.append(f"v{version} has no {METADATA_FILE} (not made by the publisher)")
    return files, notes


def version_metadata(files: dict[str, bytes]) -> dict[str, Any]:
    """The version's ``metadata.json`` as a dict ({} when it has none or it is not an object)."""
    try:
        meta = json.loads(files[METADATA_FILE]) if METADATA_FILE in files else {}
    except ValueError:
        return {}  # check_version_files refused it already
    return meta if isinstance(meta, dict) else {}


def read_version_metadata(repository: Path, model_name: str, version: int | None
                          ) -> dict[str, Any]:
    """A published version's ``metadata.json`` read from its folder ({} when there is none,
    it is not JSON or not an object, or `version` is None)."""
    if version is None:
        return {}
    path = version_dir(repository, model_name, version) / METADATA_FILE
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def version_encoder(files: dict[str, bytes]) -> str:
    """The input encoder the version's ``metadata.json`` records; "basic" when it records none
    (it was published before encoders were recorded, and took the basic input)."""
    encoder = version_metadata(files).get("encoder")
    return encoder if isinstance(encoder, str) and encoder else BASIC_ENCODER


def require_served_input(files: dict[str, bytes], version: int, model_encoder: str) -> None:
    """ValueError when the version's network takes another input encoder than
    `model_encoder`, the one its model's config declares
    (`services.repository.configs.config_encoder`): the search service, the Triton client and
    the smoke test send every version of a model the input its config names, so a network of
    another encoder (Go's "extended" network under ``go_policy``) would get the wrong input.
    It belongs under the model of its encoder (`Game.model_name`)."""
    encoder = version_encoder(files)
    if encoder != model_encoder:
        raise ValueError(f"version {version} takes the {encoder!r} input encoder (its "
                         f"{METADATA_FILE}), its model's config.pbtxt declares the "
                         f"{model_encoder!r} encoder: serving would send it the wrong input "
                         "(publish it under the model of its encoder)")
