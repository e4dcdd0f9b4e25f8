"""The version folders of a model: which are published, which are quarantined, the newest and
the number the next one gets.

A version is a numeric folder ``<repo>/<model>/<version>/`` (Triton ignores every other name, so
a folder staged under another name and renamed never appears half written). A version the
rollout refused moves to ``<repo>/<model>/quarantine/<version>/`` (`QUARANTINE_DIR`) and keeps
its number: `next_version` is above both, so a log line or a record naming "v8" never means two
different models. Folders are added or moved under the publishers' lock (`locked_model_dir`,
an ``flock`` on the model folder).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from services.atomic_files import locked
from services.games.registry import default_game

DEFAULT_MODEL_NAME = default_game().default_model
QUARANTINE_DIR = "quarantine"  # refused versions: <repo>/<model>/quarantine/<version>[-n]/
_VERSION_RE = re.compile(r"[0-9]+")
_QUARANTINED_RE = re.compile(r"([0-9]+)(-[0-9]+)?")


def version_dir(repository: Path, model_name: str, version: int) -> Path:
    """``<repo>/<model>/<version>/``."""
    return Path(repository) / model_name / str(version)


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


def next_version(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> int:
    """The number the next published version gets: above every published and every
    quarantined one (numeric folders are listed first, so a version moving to quarantine
    meanwhile is seen in one place or the other)."""
    taken = list_versions(repository, model_name)
    taken += quarantined_versions(repository, model_name)
    return max(taken, default=0) + 1


@contextlib.contextmanager
def locked_model_dir(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> Iterator[None]:
    """The publishers' lock on the model folder: held while version folders are added or
    moved (publish, quarantine)."""
    with locked(Path(repository) / model_name):
        yield
