"""The publish gate: a model reaches the repository only if it is sound and not worse.

Sound: finite outputs on every evaluated split. Not worse: its validation top-1 is at least the
top-1 of the version now published (evaluated here, on the same validation split, from that
version's own TorchScript file) minus a tolerance. A refused model leaves the repository as it
was, and the decision says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from services.dataset.shards import read_split
from services.trainer.metrics import evaluate
from services.triton.publisher import latest_version


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    reason: str
    candidate_top1: float
    serving_version: int | None = None
    serving_top1: float | None = None


def check(metrics: dict, repository: Path, model_name: str, dataset_dir: Path,
          tolerance: float = 0.01, device: str = "cpu") -> GateDecision:
    candidate = metrics["validation"]["top1"]
    for split in ("validation", "test"):
        if not metrics[split].get("finite", True):
            return GateDecision(False, f"NaN or Inf in the model's outputs on {split}", candidate)
    version = latest_version(repository, model_name)
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
