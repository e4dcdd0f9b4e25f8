"""TorchScript export with a check that the scripted model matches the eager one.

The served file must compute what was trained: a mismatch, NaN or Inf refuses the export, so a
broken model never reaches the repository.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


class ExportError(RuntimeError):
    """The scripted model does not reproduce the eager model."""


def export_torchscript(model: nn.Module, path: Path, board_size: int = 15, n_check: int = 64,
                       atol: float = 1e-4, seed: int = 0) -> float:
    """Script `model` (int8 boards -> logits), verify it, save it; return the max abs diff."""
    model = model.to("cpu").eval()
    scripted = torch.jit.script(model)
    gen = torch.Generator().manual_seed(seed)
    boards = torch.randint(0, 3, (n_check, board_size, board_size), generator=gen,
                           dtype=torch.int64).to(torch.int8)
    with torch.no_grad():
        eager = model(boards)
        script_out = scripted(boards)
    if not torch.isfinite(script_out).all():
        raise ExportError("scripted model produced NaN or Inf on random boards")
    diff = (eager - script_out).abs().max().item()
    if diff > atol:
        raise ExportError(f"scripted model differs from eager by {diff:.3g} (> {atol})")
    path.parent.mkdir(parents=True, exist_ok=True)
    scripted.save(str(path))
    reloaded = torch.jit.load(str(path))
    with torch.no_grad():
        if not torch.equal(reloaded(boards), script_out):
            raise ExportError(f"{path}: reloaded TorchScript file gives different outputs")
    return diff
