"""The publish gate: a model reaches the repository only if it is sound and not worse.

Sound: finite outputs on every evaluated split. Not worse: its validation top-1 is at least the
top-1 of the version that serves (the rollout record's ``current``; without a record, the newest
published version), evaluated here on the same validation split from that version's own
TorchScript file, minus a tolerance. A refused model leaves the repository as it was, and the
decision says why.

The rollout's smoke test applies the same rule on the few hundred positions stored with a
version (`top1_floor`, `paired_floor`): there a top-1 is measured on a sample, so the floor also
allows for the sample's noise (two standard errors), or a good model would be refused by chance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.triton.publisher import latest_version

DEFAULT_TOLERANCE = 0.01  # top-1 a new version may lose against the serving one


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    reason: str
    candidate_top1: float
    serving_version: int | None = None
    serving_top1: float | None = None


def top1_floor(reference: float, tolerance: float = DEFAULT_TOLERANCE,
               sample_rows: int | None = None) -> float:
    """The lowest acceptable top-1 of a model whose expected top-1 is `reference`.

    With `sample_rows` None the top-1 is measured on the rows `reference` was measured on (the
    same model on the same positions: only device numerics may differ): `reference` minus
    `tolerance`. With `sample_rows` = n it is measured on a sample of n rows of the split
    `reference` was measured on, so two standard errors of a proportion are allowed too."""
    margin = 0.0
    if sample_rows:
        p = min(max(reference, 0.0), 1.0)
        margin = 2.0 * math.sqrt(p * (1.0 - p) / sample_rows)
    return reference - tolerance - margin


def paired_floor(serving_hits: np.ndarray, candidate_hits: np.ndarray,
                 tolerance: float = DEFAULT_TOLERANCE) -> float:
    """The lowest acceptable top-1 of a candidate against the serving version on the same
    positions (`*_hits`: bool per row, top move right): the serving version's top-1 minus
    `tolerance` and two standard errors of the paired difference (the rows where exactly one
    of them is right decide it, as in McNemar's test)."""
    serving_hits = np.asarray(serving_hits, dtype=bool)
    candidate_hits = np.asarray(candidate_hits, dtype=bool)
    n = max(len(serving_hits), 1)
    discordant = int((serving_hits != candidate_hits).sum())
    return float(serving_hits.mean()) - tolerance - 2.0 * math.sqrt(discordant) / n


def reference_version(repository: Path, model_name: str) -> int | None:
    """The version a new model must not be worse than: the one the rollout record says serves
    (a rolled-back newer version is no yardstick), else the newest published one."""
    from services.triton.rollout_state import read_state  # lazy: it imports the publisher

    try:
        current = read_state(repository, model_name)["current"]
    except ValueError:
        current = None
    if current is not None and (Path(repository) / model_name / str(current) / "model.pt"
                                ).is_file():
        return int(current)
    return latest_version(repository, model_name)


def check(metrics: dict, repository: Path, model_name: str, dataset_dir: Path,
          tolerance: float = DEFAULT_TOLERANCE, device: str = "cpu") -> GateDecision:
    candidate = metrics["validation"]["top1"]
    for split in ("validation", "test"):
        if not metrics[split].get("finite", True):
            return GateDecision(False, f"NaN or Inf in the model's outputs on {split}", candidate)
    import torch  # lazy: the rollout uses the floors above without torch or the dataset code

    from services.dataset.shards import read_split
    from services.trainer.metrics import evaluate

    version = reference_version(repository, model_name)
    if version is None:
        return GateDecision(True, "no version published yet", candidate)
    model_file = Path(repository) / model_name / str(version) / "model.pt"
    serving = torch.jit.load(str(model_file), map_location=device)
    boards, moves, _ = read_split(dataset_dir, "validation")
    serving_top1 = evaluate(serving, boards, moves, device)["top1"]
    if candidate < serving_top1 - tolerance:
        return GateDecision(
            False, f"validation top-1 {candidate:.4f} is below version {version}'s "
                   f"{serving_top1:.4f} minus tolerance {tolerance}", candidate, version,
            serving_top1)
    return GateDecision(True, f"validation top-1 {candidate:.4f} vs version {version}'s "
                              f"{serving_top1:.4f} (tolerance {tolerance})", candidate, version,
                        serving_top1)
