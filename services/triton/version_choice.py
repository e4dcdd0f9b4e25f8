"""Which version of each model the launcher serves at start, decided here, not by Triton.

The server starts in explicit mode with no model; each model (by default every folder with a
``config.pbtxt``, `discover_models`) is then loaded with its config pinned to one version
(`pinned_config_json`: ``version_policy: specific``), tried in the order of
`version_candidates`: the rollout record's ``current``, else its ``previous``, else the newest
published version, never one the record refused last. A version whose files fail
`services.repository.version_files.check_version_files` (truncated or corrupt ``model.pt``,
sha256 mismatch), or whose network takes another input encoder than its model's config
declares, is skipped
(`SkippedVersion`) and the next candidate tried, so one bad folder never stops the server.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.repository.configs import CONFIG_FILE, config_encoder, parse_config
from services.repository.rollout_state import read_state
from services.repository.version_files import check_version_files, require_served_input
from services.repository.versions import list_versions

log = logging.getLogger(__name__)
# What to run when a model has nothing to serve.
NEXT_STEP = ("run `make ingest && make train` (or publish with services.repository.publish and "
             "`movepred rollout`)")


@dataclass(frozen=True)
class SkippedVersion:
    """A model version the launcher did not serve, or a model it served nothing of.

    `version` is None when the model had no version to try at all (nothing published)."""

    model: str
    version: int | None
    reason: str
    folder: Path | None = None

    def __str__(self) -> str:
        if self.version is None:
            return f"{self.model}: {self.reason}"
        return f"{self.model} v{self.version} ({self.folder}): {self.reason}"


def discover_models(repository: Path) -> tuple[str, ...]:
    """Every model folder of `repository` that has a ``config.pbtxt``, sorted by name."""
    repository = Path(repository)
    if not repository.is_dir():
        return ()
    return tuple(sorted(
        p.name for p in repository.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / CONFIG_FILE).is_file()
    ))


def _refused_versions(history: list[dict[str, Any]]) -> set[int]:
    """Versions whose last outcome in the rollout history is a refusal (never to be served
    as a fallback; a version refused once and rolled out since is not one)."""
    refused: set[int] = set()
    for entry in history:
        if not isinstance(entry, dict):
            continue
        with contextlib.suppress(TypeError, ValueError):
            version = int(entry.get("version"))
            if entry.get("outcome") == "refused":
                refused.add(version)
            elif entry.get("outcome") == "serving":
                refused.discard(version)
    return refused


def version_candidates(repository: Path, model: str) -> list[tuple[int, str]]:
    """The versions of `model` to try, best first, each with why it is a candidate.

    With a rollout record (``rollout.json``): its ``current``, then its ``previous``, then the
    other published versions newest first; never a version the record's history refused last
    (with or without a current). Without a record: the published versions newest first.
    Serving follows what rollout decided, so a version published later but never rolled out
    (or rolled back) does not serve after a restart. An unreadable record is reported and
    treated as none.
    """
    newest_first = sorted(list_versions(repository, model), reverse=True)
    try:
        state = read_state(repository, model)
    except ValueError as exc:
        log.warning("%s: %s; serving the newest good version instead", model, exc)
        state = {"current": None, "previous": None, "history": []}
    ordered: dict[int, str] = {}
    for key in ("current", "previous"):
        version = state.get(key)
        if isinstance(version, int) and version not in ordered:
            ordered[version] = f"the rollout record's {key}"
    recorded = bool(ordered)
    # with or without a recorded current: a refused version never serves after a restart
    refused = _refused_versions(state.get("history") or [])
    fallback = ("a published version, the recorded ones failing" if recorded
                else "the newest published version whose files check out")
    for version in newest_first:
        if version not in ordered and version not in refused:
            ordered[version] = fallback
    return list(ordered.items())


def pinned_config_json(config_path: Path, version: int) -> str:
    """The on-disk ``config.pbtxt`` as JSON with ``version_policy: {specific: [version]}``:
    the config override of a repository-API load that serves exactly `version`."""
    from google.protobuf import json_format

    config = parse_config(config_path)
    config.version_policy.Clear()
    config.version_policy.specific.versions.append(int(version))
    return json_format.MessageToJson(config, preserving_proto_field_name=True)


def check_files(repository: Path, model: str, version: int) -> None:
    """Raise ValueError with the reason when a version folder cannot be served (its files, or
    a network of another input encoder than the model's config declares:
    `require_served_input`)."""
    files, _ = check_version_files(repository, model, version)
    config = Path(repository) / model / CONFIG_FILE
    require_served_input(files, version, config_encoder(parse_config(config)))
