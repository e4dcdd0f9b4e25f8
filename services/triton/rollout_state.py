"""The serving record of a model (``<repo>/<model>/rollout.json``) and the rollout lock.

The record keeps the current and previous versions and a history of rollouts, rollbacks and
refusals (`describe_event` words them); it is written atomically and is the truth about what
serves: the launcher (`services.triton.server`) starts Triton pinned to its ``current``.
Rollouts of one model are serialised with an ``flock`` on ``<repo>/<model>/.rollout.lock``.

A stock Triton (deploy/: compose and Kubernetes) cannot read the record, so every write of the
record also writes ``<repo>/<model>/configs/serving.pbtxt``: the model's ``config.pbtxt`` with
its version policy replaced by ``specific [current]`` (`write_pinned_config`). Started with
``--model-config-name=serving``, Triton loads that file instead of ``config.pbtxt`` (which it
falls back to while nothing was rolled out), so a restart serves what the last rollout or
rollback chose, not the newest folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services import atomic_files
from services.triton.publisher import (
    DEFAULT_MODEL_NAME,
    parse_config,
)

STATE_FILE = "rollout.json"
LOCK_FILE = ".rollout.lock"
HISTORY_LIMIT = 100
# `tritonserver --model-config-name=serving` loads <model>/configs/serving.pbtxt when it exists
PINNED_CONFIG_NAME = "serving"


def state_path(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> Path:
    return Path(repository) / model_name / STATE_FILE


def read_state(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> dict[str, Any]:
    """The serving record ``{"current", "previous", "history"}`` (empty values when none)."""
    path = state_path(repository, model_name)
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        state = {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"serving record {path} is unreadable: {exc}") from exc
    return {"model_name": model_name, "current": state.get("current"),
            "previous": state.get("previous"), "history": list(state.get("history", []))}


def write_state(repository: Path, model_name: str, state: dict[str, Any]) -> None:
    """Write the serving record atomically and durably (`services.atomic_files`), keeping the
    last HISTORY_LIMIT events."""
    state = {**state, "history": state["history"][-HISTORY_LIMIT:], "updated_at": now_text()}
    atomic_files.atomic_write_text(json.dumps(state, indent=2) + "\n",
                                   state_path(repository, model_name))
    write_pinned_config(repository, model_name, state.get("current"))


def pinned_config_path(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> Path:
    return Path(repository) / model_name / "configs" / f"{PINNED_CONFIG_NAME}.pbtxt"


def pinned_config_text(config: Path, version: int) -> str:
    """`config` (a ``config.pbtxt``) with its version policy ``specific [version]``; the rest
    as Triton parses it (comments are not kept: the header names the file they are in)."""
    from google.protobuf import text_format

    pinned = parse_config(config)
    pinned.version_policy.Clear()
    pinned.version_policy.specific.versions.append(int(version))
    digest = hashlib.sha256(config.read_bytes()).hexdigest()
    return (f"# {config.name} pinned to v{version}, the serving record's current version "
            f"({STATE_FILE}), for tritonserver --model-config-name={PINNED_CONFIG_NAME}.\n"
            f"# Written by every rollout and rollback: edit {config.name}, not this file "
            "(a change reaches it at the next rollout or `movepred serving --pin`).\n"
            f"# {config.name} sha256 {digest}\n" + text_format.MessageToString(pinned))


def write_pinned_config(repository: Path, model_name: str, version: int | None) -> None:
    """Keep ``configs/serving.pbtxt`` pinned to `version`; without a version (nothing serves)
    or a ``config.pbtxt``, remove it, so Triton falls back to ``config.pbtxt``."""
    path = pinned_config_path(repository, model_name)
    config = Path(repository) / model_name / "config.pbtxt"
    if version is None or not config.is_file():
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(exist_ok=True)
    atomic_files.atomic_write_text(pinned_config_text(config, version), path)


def pinned_config_is_current(repository: Path, model_name: str = DEFAULT_MODEL_NAME) -> bool:
    """Whether ``configs/serving.pbtxt`` is what `write_pinned_config` writes now from the
    record and ``config.pbtxt`` (False after ``config.pbtxt`` changed, or the file was lost)."""
    path = pinned_config_path(repository, model_name)
    config = Path(repository) / model_name / "config.pbtxt"
    current = read_state(repository, model_name)["current"]
    if current is None or not config.is_file():
        return not path.exists()
    try:
        return path.read_text() == pinned_config_text(config, current)
    except (OSError, ValueError):
        return False


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _version_name(version: Any) -> str:
    return "nothing" if version is None else f"v{version}"


def describe_event(event: dict[str, Any]) -> str:
    """One history event of ``rollout.json`` in plain words: "v7 replaced v6", "v8 refused
    (reason), v7 kept serving", "rolled back v8 -> v7"."""
    version, before = event.get("version"), event.get("serving")
    action, outcome = event.get("action"), event.get("outcome")
    if outcome == "serving":
        if action == "rollback":
            text = (f"rolled back {_version_name(before)} -> {_version_name(version)}"
                    if before is not None else
                    f"rolled back to {_version_name(version)} (nothing was serving)")
        elif before is None:
            text = f"{_version_name(version)} serving (nothing served before)"
        else:
            text = f"{_version_name(version)} replaced {_version_name(before)}"
    elif outcome == "refused":
        what = (f"rollback to {_version_name(version)}" if action == "rollback"
                else _version_name(version))
        kept = (f"{_version_name(before)} kept serving" if before is not None
                else "nothing was serving")
        text = f"{what} refused ({event.get('reason', 'no reason recorded')}), {kept}"
        if event.get("quarantined"):
            text += f"; moved to {event['quarantined']}"
    else:
        text = json.dumps(event)
    return f"{event.get('at', '?')}  {text}"


@contextlib.contextmanager
def rollout_lock(repository: Path, model_name: str, timeout_s: float,
                 on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the model's rollout lock (``<repo>/<model>/.rollout.lock``) for the block;
    TimeoutError after `timeout_s` while another rollout of the model holds it (`on_wait`:
    called once when it is not free at once)."""
    model_dir = Path(repository) / model_name
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder {model_dir} does not exist")
    with atomic_files.locked(model_dir / LOCK_FILE, timeout_s,
                             holder=f"another rollout of {model_name}", on_wait=on_wait):
        yield
