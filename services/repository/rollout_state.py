"""The serving record of a model (``<repo>/<model>/rollout.json``) and the rollout lock.

The record keeps the current and previous versions and a history of rollouts, rollbacks and
refusals (`describe_event` words them); it is written atomically and is the truth about what
serves: the launcher (`services.triton.launcher`) starts Triton pinned to its ``current``, and
the trainer's gate measures a new model against it (`reference_version`).
Rollouts of one model are serialised with an ``flock`` on ``<repo>/<model>/.rollout.lock``.

A stock Triton (deploy/: compose and Kubernetes) cannot read the record. Where one serves the
repository, its deployment names the config it starts Triton with (``--model-config-name=NAME``)
in ``MOVEPRED_PINNED_CONFIG=NAME`` for the jobs that roll versions out; then every write of the
record also writes ``<repo>/<model>/configs/NAME.pbtxt``: the model's ``config.pbtxt`` with its
version policy replaced by ``specific [current]`` (`write_pinned_config`). Triton loads that file
instead of ``config.pbtxt`` (which it falls back to until the first rollout), so a restart
serves what the last rollout or rollback chose, not the newest folder. Without the variable
nothing is pinned: the project's launcher pins each load itself, and a pin written from its
python-backend config would break a stock Triton sharing the folder. A pin that cannot be
written (an unreadable config, a read-only folder) is logged and never fails the rollout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services import atomic_files
from services.defaults import MODEL_FILE
from services.repository.configs import CONFIG_FILE, parse_config
from services.repository.versions import DEFAULT_MODEL_NAME, latest_version, version_dir

STATE_FILE = "rollout.json"
LOCK_FILE = ".rollout.lock"
HISTORY_LIMIT = 100
# the --model-config-name of the stock Triton serving the repository, where one does
PINNED_CONFIG_ENV = "MOVEPRED_PINNED_CONFIG"
logger = logging.getLogger(__name__)


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
    keep_pinned(repository, model_name, state.get("current"))


def pinned_config_name() -> str | None:
    """The config name a stock Triton serving this repository loads (``MOVEPRED_PINNED_CONFIG``,
    its ``--model-config-name``), None where no stock Triton does."""
    return os.environ.get(PINNED_CONFIG_ENV) or None


def pinned_config_path(repository: Path, model_name: str, name: str) -> Path:
    return Path(repository) / model_name / "configs" / f"{name}.pbtxt"


def pinned_config_text(config: Path, version: int, name: str) -> str:
    """`config` (a ``config.pbtxt``) with its version policy ``specific [version]``; the rest
    as Triton parses it (comments are not kept: the header names the file they are in)."""
    from google.protobuf import text_format

    pinned = parse_config(config)
    pinned.version_policy.Clear()
    pinned.version_policy.specific.versions.append(int(version))
    digest = hashlib.sha256(config.read_bytes()).hexdigest()
    return (f"# {config.name} pinned to v{version}, the serving record's current version "
            f"({STATE_FILE}), for tritonserver --model-config-name={name}.\n"
            f"# Written by every rollout and rollback: edit {config.name}, not this file "
            "(a change reaches it at the next rollout or `movepred serving --pin`).\n"
            f"# {config.name} sha256 {digest}\n" + text_format.MessageToString(pinned))


def write_pinned_config(repository: Path, model_name: str, version: int | None,
                        name: str) -> None:
    """Pin ``configs/<name>.pbtxt`` to `version`. Without a version (nothing serves) the last
    pin stays: a restart then brings back what served last, not the newest folder (which may
    be the version just refused). ValueError or OSError when it cannot be written."""
    if version is None:
        return
    config = Path(repository) / model_name / CONFIG_FILE
    path = pinned_config_path(repository, model_name, name)
    path.parent.mkdir(exist_ok=True)
    atomic_files.atomic_write_text(pinned_config_text(config, version, name), path)


def keep_pinned(repository: Path, model_name: str, version: int | None) -> None:
    """`write_pinned_config` with the deployment's name, a failure logged (the record stays the
    truth; `movepred serving` reports a stale pin)."""
    name = pinned_config_name()
    if name is None:
        return
    try:
        write_pinned_config(repository, model_name, version, name)
    except (OSError, ValueError) as exc:
        logger.warning("could not pin %s's configs/%s.pbtxt to v%s (a restarted stock Triton "
                       "may serve another version): %s", model_name, name, version, exc)


def pinned_config_is_current(repository: Path, model_name: str, name: str) -> bool:
    """Whether ``configs/<name>.pbtxt`` is ``config.pbtxt`` pinned to the recorded version
    (False after ``config.pbtxt`` changed, or the file was lost; True while nothing is
    recorded)."""
    path = pinned_config_path(repository, model_name, name)
    config = Path(repository) / model_name / CONFIG_FILE
    current = read_state(repository, model_name)["current"]
    if current is None:
        return True
    try:
        return path.read_text() == pinned_config_text(config, current, name)
    except (OSError, ValueError):
        return False


def reference_version(repository: Path, model_name: str) -> int | None:
    """The version a new model must not be worse than: the one the record says serves (a
    rolled-back newer version is no yardstick) while its network is there, else the newest
    published one; None when nothing is published."""
    try:
        current = read_state(repository, model_name)["current"]
    except ValueError:
        current = None
    if current is not None and (version_dir(repository, model_name, current) / MODEL_FILE
                                ).is_file():
        return int(current)
    return latest_version(repository, model_name)


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
