"""The model card of a published version: which data, code and recipe made it, and how good it is.

Every game's one publish path (`services.trainer.publish`: its command, the train flow and the
distributed trainer) builds the card with `build_card` and passes it to
`services.repository.publish.publish`, which stores it in the version's ``metadata.json`` next
to what it adds itself (version, sha256, ``published_at``: the created time, ``value_head``).
The card's fields (`CARD_FIELDS`):

* ``model_config``: the network configuration (``services.models.configs``: name, game, value
  head, parameter count);
* ``dataset``: the dataset it was trained or evaluated on: path, game, sha256 of its
  ``manifest.json`` (the manifest lists every shard with its checksum, so its hash names the
  data) and rows per split; None when no dataset was involved (an untrained network);
* ``code``: the git commit of this checkout (``dirty`` when it has uncommitted changes), or
  ``$MOVEPRED_GIT_COMMIT`` where there is no checkout (the container image sets it at build);
* ``config``: the training recipe (``TrainConfig`` as a dict), None for an untrained network;
* ``metrics``: per split (train, validation, test, held-out games) top-1, top-5, loss, rows,
  top-1 by game stage where measured, and the value head's MSE and sign accuracy; a
  ``metrics_source`` says where they come from (the training run, an evaluation at publish).
  The card takes them as numbers: the trainer measures them (`services.trainer.metrics`);
* ``gate``: the publish gate's decision (passed, reason, the candidate's and the serving
  version's top-1), or ``{"passed": None, "reason": ...}`` when the publisher runs no gate.

Fields added after publication (`update_card`, by `services.match`): ``ratings``, the version's
Elo in a ratings log ({player label: elo, interval, games, anchor, log}; a version searched at
two budgets is two players), and ``match_gate``, the gate's match against the serving version
(the SPRT's verdict and games); the expert top-1 stays in ``gate`` and ``metrics``.

`render` turns a version's metadata into the lines ``movepred serving`` prints.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from services import atomic_files
from services.defaults import METADATA_FILE
from services.repository.versions import locked_model_dir, version_dir

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
COMMIT_ENV = "MOVEPRED_GIT_COMMIT"
CARD_FIELDS = ("model_config", "dataset", "code", "config", "metrics", "gate")


def _splits() -> tuple[str, ...]:
    """The dataset's splits, the held-out games' last (services.dataset.shards.SPLITS)."""
    from services.dataset.shards import SPLITS

    return tuple(SPLITS)


def code_version(root: Path = REPO_ROOT) -> dict[str, Any]:
    """{"commit", "dirty"} of the checkout at `root`; from $MOVEPRED_GIT_COMMIT without one."""
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True
                                ).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=no"], capture_output=True, text=True,
                                timeout=10, check=True).stdout
        return {"commit": commit, "dirty": bool(status.strip()), "source": "git"}
    except (OSError, subprocess.SubprocessError):
        commit = os.environ.get(COMMIT_ENV) or None
        return {"commit": commit, "dirty": None,
                "source": f"${COMMIT_ENV}" if commit else "unknown (no git checkout)"}


def dataset_card(dataset_dir: Path | str | None) -> dict[str, Any] | None:
    """Path, game, manifest sha256 and rows per split of a dataset folder (None: no dataset)."""
    if dataset_dir is None:
        return None
    from services.dataset.shards import MANIFEST

    path = Path(dataset_dir) / MANIFEST
    data = path.read_bytes()
    manifest = json.loads(data)
    rows: dict[str, int] = {}
    for entry in manifest.get("files", []):
        rows[entry["split"]] = rows.get(entry["split"], 0) + int(entry.get("rows", 0))
    return {"path": str(Path(dataset_dir).resolve()), "game": manifest.get("game"),
            "manifest_sha256": hashlib.sha256(data).hexdigest(), "rows": rows,
            "total_rows": sum(rows.values())}


def model_config_card(config: str, model: Any | None = None) -> dict[str, Any]:
    """Name, game, value head and parameter count of a network configuration (`model`: the
    network itself when at hand, else one is built to count)."""
    from services.models.configs import build, spec

    found = spec(config)
    net = model if model is not None else build(config)
    return {"name": config, "game": found.game, "value_head": found.value,
            "parameters": int(sum(p.numel() for p in net.parameters()))}


def _plain(value: Any) -> Any:
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else value


def build_card(*, config_name: str, model: Any | None = None,
               dataset_dir: Path | str | None = None, recipe: Any = None,
               metrics: dict | None = None, metrics_source: str | None = None,
               gate: Any = None) -> dict[str, Any]:
    """The card's fields (`CARD_FIELDS`, plus ``metrics_source``) for `publish`'s metadata."""
    gate_out = _plain(gate) if gate is not None else {
        "passed": None, "reason": "no gate: published by hand, not by the train flow"}
    return {"model_config": model_config_card(config_name, model),
            "dataset": dataset_card(dataset_dir), "code": code_version(),
            "config": _plain(recipe), "metrics": metrics,
            "metrics_source": metrics_source, "gate": gate_out}


def update_card(repository: Path, model_name: str, version: int,
                fields: dict[str, Any]) -> Path:
    """Merge `fields` into a published version's ``metadata.json`` (a field that is a dict
    on both sides is merged key by key, anything else replaced), atomically under the
    publishers' lock, so a quarantine or a publication never sees half a file and two writers
    never lose each other's fields. FileNotFoundError when the version is not published."""
    folder = version_dir(repository, model_name, version)
    path = folder / METADATA_FILE
    json.dumps(fields)  # fail before touching the file
    with locked_model_dir(repository, model_name):
        if not folder.is_dir():
            raise FileNotFoundError(f"{model_name} v{version} is not published ({folder})")
        try:
            meta = json.loads(path.read_text())
        except FileNotFoundError:
            meta = {}
        if not isinstance(meta, dict):
            raise ValueError(f"{path} is not a JSON object")
        for key, value in fields.items():
            old = meta.get(key)
            meta[key] = {**old, **value} if isinstance(old, dict) and isinstance(value, dict) \
                else value
        atomic_files.atomic_write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", path)
    return path


# ------------------------------------------------------------------------- printing
def _pct(value: Any) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, (int, float)) else "-"


def _num(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def _stage_start(label: str) -> int:
    """The first ply of a stage label ("0-9", "100+"), for ordering (JSON keys are sorted)."""
    digits = label.split("-")[0].rstrip("+")
    return int(digits) if digits.isdigit() else 1 << 30


def render(meta: dict[str, Any]) -> list[str]:
    """The card of one version's metadata as text lines (fields it lacks say so)."""
    lines = [f"model card: {meta.get('model_name', '?')} v{meta.get('version', '?')}, "
             f"created {meta.get('published_at', 'unknown')}, sha256 "
             f"{str(meta.get('sha256', '?'))[:12]}"]
    model = meta.get("model_config") or {}
    if model:
        lines.append(f"  model config: {model.get('name')} ({model.get('game')}, "
                     f"{model.get('parameters', '?'):,} parameters, value head "
                     f"{'yes' if model.get('value_head') else 'no'})")
    else:
        lines.append(f"  model config: {(meta.get('config') or {}).get('model', 'not recorded')}")
    data = meta.get("dataset")
    if data:
        counts = data.get("rows", {})
        order = [s for s in _splits() if s in counts] + sorted(set(counts) - set(_splits()))
        rows = ", ".join(f"{s} {counts[s]:,}" for s in order)
        lines.append(f"  dataset: {data.get('path')} ({data.get('game')}), manifest sha256 "
                     f"{str(data.get('manifest_sha256'))[:12]}, rows: {rows}")
    else:
        lines.append("  dataset: none recorded")
    code = meta.get("code") or {}
    lines.append(f"  code: commit {code.get('commit') or 'not recorded'}"
                 + (" (uncommitted changes)" if code.get("dirty") else ""))
    recipe = meta.get("config")
    if isinstance(recipe, dict):
        keys = ("model", "batch_size", "learning_rate", "lr_schedule", "max_steps",
                "max_epochs", "max_seconds", "seed", "augment", "value_weight")
        shown = ", ".join(f"{k} {recipe[k]}" for k in keys if recipe.get(k) not in (None, ""))
        lines.append(f"  recipe (TrainConfig): {shown}")
    else:
        lines.append("  recipe: none (not trained by this project's trainer)")
    metrics = meta.get("metrics")
    source = meta.get("metrics_source")
    splits = [s for s in _splits()
              if isinstance(metrics, dict) and isinstance(metrics.get(s), dict)]
    others = [k for k, v in (metrics or {}).items() if isinstance(v, dict) and k not in splits]
    if splits or others:
        lines.append("  metrics" + (f" ({source})" if source else "") + ":")
        for split in splits:
            m = metrics[split]
            value = (f", value MSE {_num(m.get('value_mse'))}, sign {_pct(m.get('value_sign'))}"
                     if "value_mse" in m else "")
            lines.append(f"    {split:<11} top-1 {_pct(m.get('top1'))}  top-5 "
                         f"{_pct(m.get('top5'))}  loss {_num(m.get('loss'))}  rows "
                         f"{m.get('n', '-')}{value}")
            stages = m.get("top1_by_stage") or {}
            if stages:
                lines.append("      top-1 by stage (plies): " + ", ".join(
                    f"{stage} {_pct(stages[stage].get('top1'))}"
                    for stage in sorted(stages, key=_stage_start)))
        for key in others:
            lines.append(f"    {key}: " + ", ".join(f"{k} {v}" for k, v in metrics[key].items()))
    else:
        lines.append("  metrics: none recorded" + (f" ({source})" if source else ""))
    gate = meta.get("gate") or {}
    passed = {True: "passed", False: "refused", None: "not run"}.get(gate.get("passed"), "?")
    lines.append(f"  gate: {passed}" + (f": {gate['reason']}" if gate.get("reason") else ""))
    match = meta.get("match_gate")
    if isinstance(match, dict):
        lines.append(f"  match gate: {match.get('verdict', '?')}: {match.get('reason', '')}")
    ratings = meta.get("ratings")
    if isinstance(ratings, dict) and ratings:
        lines.append("  ratings:")
        for label, r in sorted(ratings.items()):
            if isinstance(r, dict):
                lines.append(f"    {label}: {_num(r.get('elo'), 0)} Elo [{_num(r.get('low'), 0)}"
                             f", {_num(r.get('high'), 0)}], {r.get('games', '?')} games, "
                             f"anchor {r.get('anchor', '?')} ({r.get('log', '?')})")
    return lines
