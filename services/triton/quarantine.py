"""Quarantine: a version refused for its own fault leaves the numbered folders Triton loads.

`quarantine` moves ``<repo>/<model>/<version>/`` to ``<repo>/<model>/quarantine/<version>/``
with a ``reason.json``; Triton ignores non-numeric folders, so neither a restart nor a plain
load brings it back, and the publisher never reuses its number.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from services import atomic_files
from services.triton.publisher import (
    QUARANTINE_DIR,
    locked_model_dir,
)
from services.triton.rollout_state import now_text

if TYPE_CHECKING:
    from services.triton.smoke import SmokeCheck

logger = logging.getLogger(__name__)
QUARANTINE_REASON = "reason.json"


def quarantine(
    repository: Path,
    model_name: str,
    version: int,
    reason: str,
    smoke: list[SmokeCheck] | None = None,
    action: str = "rollout",
) -> Path:
    """Move ``<repo>/<model>/<version>/`` to ``<repo>/<model>/quarantine/<version>/`` (a
    numbered sibling, ``<version>-2``, when that name is taken) and write ``reason.json``
    there (reason, time, action, smoke checks); return the new folder.

    Triton looks at numeric folders only, so the version can no longer be loaded by a restart
    or a plain load, and `publisher.next_version` counts quarantined numbers. The move is one
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
              "smoke": [asdict(c) for c in smoke or []]}
    atomic_files.atomic_write_text(json.dumps(record, indent=2) + "\n", target / QUARANTINE_REASON)
    logger.warning("%s v%d quarantined in %s: %s", model_name, version, target, reason)
    return target


def quarantine_reason(folder: Path) -> str:
    """The reason recorded in a quarantine folder's ``reason.json`` ("reason unknown" when it
    cannot be read)."""
    try:
        reason = json.loads((Path(folder) / QUARANTINE_REASON).read_text()).get("reason")
    except (OSError, ValueError, AttributeError):
        reason = None
    return str(reason) if reason else "reason unknown"
