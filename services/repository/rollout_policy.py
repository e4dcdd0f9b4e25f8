"""A version's fast rollout policy: stored with the main network, found by what serves it.

Choice: the rollout policy (`services.models.rollout.LinearRolloutPolicy`, trained by the
trainer on the same shards) is not a model of its own. It is one file in its main network's
version folder, ``rollout.npz`` (`services.games.rollout.RolloutWeights`: the raw k x k
weights the compiled rollouts take, its configuration name and test top-1), published in the
same atomic rename as the network (`publish(..., extra_files=rollout_files(weights))`), with
``rollout`` in ``metadata.json`` saying which configuration it is and its top-1
(`rollout_metadata`). So a version and its rollouts come and go together, a rollback brings
back the rollout policy trained with the network, and the search finds it from the model
name and version that answered its evaluator call (`VersionRollouts.weights_for`), never by
guessing. A version without the file has no rollout policy: a search asking for rollouts
(lambda > 0) is refused.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from services.games.rollout import RolloutWeights
from services.repository.versions import version_dir

log = logging.getLogger(__name__)

ROLLOUT_FILE = "rollout.npz"


def rollout_files(weights: RolloutWeights) -> dict[str, bytes]:
    """`publish`'s `extra_files` entry storing `weights` with a version."""
    return {ROLLOUT_FILE: weights.to_bytes()}


def rollout_metadata(weights: RolloutWeights) -> dict[str, Any]:
    """What ``metadata.json`` says of the version's rollout policy (under ``rollout``)."""
    top1 = weights.top1 if weights.top1 == weights.top1 else None  # NaN: not measured
    return {"rollout": {"file": ROLLOUT_FILE, "config": weights.config, "top1": top1,
                        "kernel": weights.size}}


def read_rollout(repository: Path, model_name: str, version: int) -> RolloutWeights | None:
    """The rollout policy stored with a version; None when it has none. ValueError for a
    damaged file."""
    path = version_dir(Path(repository), model_name, version) / ROLLOUT_FILE
    if not path.is_file():
        return None
    try:
        return RolloutWeights.from_bytes(path.read_bytes())
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


class VersionRollouts:
    """The rollout policies of a model repository's versions, read once each (a version
    folder never changes once published)."""

    def __init__(self, repository: Path) -> None:
        self.repository = Path(repository)
        self._known: dict[tuple[str, str], RolloutWeights | None] = {}
        self._lock = threading.Lock()

    def weights_for(self, model_name: str, model_version: str) -> RolloutWeights | None:
        """The rollout policy of `model_name` version `model_version` (as an evaluator names
        them); None when that version has none (or the version is not a number)."""
        key = (str(model_name), str(model_version))
        with self._lock:
            if key in self._known:
                return self._known[key]
        try:
            found = read_rollout(self.repository, key[0], int(key[1]))
        except (ValueError, OSError) as exc:  # not kept: the next call reads again
            log.warning("no rollout policy for %s version %s: %s", *key, exc)
            return None
        with self._lock:
            self._known[key] = found
        return found
