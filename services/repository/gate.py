"""The publish gate's rule: a model reaches the repository only if it is sound and not worse.

Sound: finite outputs on every evaluated split (`refuse_unsound`). Not worse: its validation
top-1 is at least the top-1 of the version that serves (the rollout record's ``current``;
without a record, the newest published version: `services.repository.rollout_state.
reference_version`), measured on the same validation split, minus a tolerance (`decide`). A
refused model leaves the repository as it was, and the decision says why. Measuring the serving
version is the trainer's part (`services.trainer.publish.check_gate`); this module is numbers
only, so the rollout's smoke test uses it without torch or the dataset code.

The smoke test applies the same rule on the few hundred positions stored with a version
(`top1_floor`, `paired_floor`): there a top-1 is measured on a sample, so the floor also allows
for the sample's noise (two standard errors), or a good model would be refused by chance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_TOLERANCE = 0.01  # top-1 a new version may lose against the serving one
CHECKED_SPLITS = ("validation", "test")  # splits whose outputs must be finite


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    reason: str
    candidate_top1: float
    serving_version: int | None = None
    serving_top1: float | None = None


def refuse_unsound(metrics: dict) -> GateDecision | None:
    """The refusal of a model whose outputs were not finite on a checked split (its
    `metrics`: the trainer's, per split), else None."""
    candidate = metrics["validation"]["top1"]
    for split in CHECKED_SPLITS:
        if not metrics[split].get("finite", True):
            return GateDecision(False, f"NaN or Inf in the model's outputs on {split}", candidate)
    return None


def decide(candidate_top1: float, serving_version: int | None, serving_top1: float | None,
           tolerance: float = DEFAULT_TOLERANCE) -> GateDecision:
    """Pass a sound model whose validation top-1 is not below the serving version's minus
    `tolerance` (any model passes while nothing is published: `serving_version` None)."""
    if serving_version is None or serving_top1 is None:
        return GateDecision(True, "no version published yet", candidate_top1)
    if candidate_top1 < serving_top1 - tolerance:
        return GateDecision(
            False, f"validation top-1 {candidate_top1:.4f} is below version {serving_version}'s "
                   f"{serving_top1:.4f} minus tolerance {tolerance}", candidate_top1,
            serving_version, serving_top1)
    return GateDecision(True, f"validation top-1 {candidate_top1:.4f} vs version "
                              f"{serving_version}'s {serving_top1:.4f} (tolerance {tolerance})",
                        candidate_top1, serving_version, serving_top1)


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
