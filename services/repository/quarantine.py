"""Quarantine: a version refused for its own fault leaves the numbered folders Triton loads.

`quarantine` moves ``<repo>/<model>/<version>/`` to ``<repo>/<model>/quarantine/<version>/``
with a ``reason.json``; Triton ignores non-numeric folders, so neither a restart nor a plain
load brings it back, and the publisher never reuses its number.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from services import atomic_files
from services.repository.rollout_state import now_text
from services.repository.versions import QUARANTINE_DIR, locked_model_dir

logger = logging.getLogger(__name__)
QUARANTINE_REASON = "reason.json"


def quarantine(
    repository: Path,
    model_name: str,
    version: int,
    reason: str,
    smoke: Sequence[Any] | None = None,
    action: str = "rollout",
) -> Path:
    """Move ``<repo>/<model>/<version>/`` to ``<repo>/<model>/quarantine/<version>/`` (a
    numbered sibling, ``<version>-2``, when that name is taken) and write ``reason.json``
    there (reason, time, action, the rollout's smoke checks: dataclasses or dicts); return
    the new folder.

    Triton looks at numeric folders only, so the version can no longer be loaded by a restart
    or a plain load, and `services.repository.versions.next_version` counts quarantined
    numbers. The move is one
    ``os.rename`` under the publishers' lock on the model folder."""
    model_dir = Path(repository) / model_name
    source = model_dir / str(version)
    folder = model_dir / QUARANTINE_DIR
    with locked_model_dir(repository, model_name):
        folder.mkdir(exist_ok=True)
        target, n = folder / str(version), 2
        while target.exists():
            target, n = folder / f"{version}-{n}", n + 1
        os.rename(source, target)
        atomic_files.fsync_dir(model_dir)
        atomic_files.fsync_dir(folder)
    record = {"model_name": model_name, "version": version, "action": action,
              "reason": reason, "at": now_text(), "from": str(source),
              "smoke": [_plain(c) for c in smoke or []]}
    atomic_files.atomic_write_text(json.dumps(record, indent=2) + "\n", target / QUARANTINE_REASON)
    logger.warning("%s v%d quarantined in %s: %s", model_name, version, target, reason)
    return target


def _plain(check: Any) -> Any:
    return asdict(check) if is_dataclass(check) and not isinstance(check, type) else check


def quarantine_reason(folder: Path) -> str:
    """The reason recorded in a quarantine folder's ``reason.json`` ("reason unknown" when it
    cannot be read)."""
    try:
        reason = json.loads((Path(folder) / QUARANTINE_REASON).read_text()).get("reason")
    except (OSError, ValueError, AttributeError):
        reason = None
    return str(reason) if reason else "reason unknown"
