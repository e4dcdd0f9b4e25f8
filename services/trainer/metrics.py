"""Evaluation: loss, top-1/top-5 accuracy, and top-1 by game stage (Shao et al.'s Fig. 7).

Occupied points are masked out before ranking, so a prediction is always a legal move (Go: a
pass, the last logit, is never masked; ko and suicide are not masked either). Gomoku stages
are 10-move buckets of the ply (0-9, 10-19, ...) with every ply past 100 in one bucket; Go
games run to 200-300 moves, so Go uses 50-move buckets with every ply past 300 in one
(`STAGES`). A model with a value head is also scored on the rows whose game result is known:
`value_mse` (against +1 won / -1 lost / 0 drawn for the mover) and `value_sign` (how often its
sign names the winner of decisive games).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from services.models.value import split_outputs, value_target

STAGE_WIDTH = 10
LAST_STAGE = 100  # plies >= 100 share one bucket
# (bucket width, first ply of the last open-ended bucket) per game
STAGES: dict[str, tuple[int, int]] = {"gomoku": (STAGE_WIDTH, LAST_STAGE), "go": (50, 300)}


def stage_labels(width: int = STAGE_WIDTH, last: int = LAST_STAGE) -> list[str]:
    return [f"{s}-{s + width - 1}" for s in range(0, last, width)] + [f"{last}+"]


def stage_of(plies: np.ndarray, width: int = STAGE_WIDTH, last: int = LAST_STAGE) -> np.ndarray:
    return np.minimum(plies // width, last // width)


def occupied_mask(inputs: torch.Tensor, n_logits: int) -> torch.Tensor:
    """True on occupied points: Gomoku cells [N, S, S] or Go compact [N, C, S, S] (channel 0
    holds the stones); a trailing pass logit is never masked."""
    stones = inputs[:, 0] if inputs.dim() == 4 else inputs
    mask = stones.reshape(len(inputs), -1) != 0
    extra = n_logits - mask.shape[1]
    return torch.nn.functional.pad(mask, (0, extra), value=False) if extra else mask


@torch.no_grad()
def evaluate(model: nn.Module, boards: np.ndarray, moves: np.ndarray, device: str,
             plies: np.ndarray | None = None, batch: int = 2048,
             stages: tuple[int, int] = (STAGE_WIDTH, LAST_STAGE),
             results: np.ndarray | None = None) -> dict:
    """Metrics of `model` (int8 boards -> logits, or (logits, value)) on one split; `stages` =
    (bucket width, last bucket's first ply) of the by-stage top-1 (see `STAGES`); `results`
    (the movers' results, NaN unknown) score a value head."""
    was_training = model.training
    model.eval()
    n = len(moves)
    loss_sum = 0.0
    hit1 = np.zeros(n, dtype=bool)
    hit5 = np.zeros(n, dtype=bool)
    values = np.full(n, np.nan, np.float32)
    finite = True
    for i in range(0, n, batch):
        b = torch.from_numpy(boards[i:i + batch]).to(device)
        m = torch.from_numpy(moves[i:i + batch]).to(device)
        logits, value = split_outputs(model(b))
        logits = logits.float()
        finite &= bool(torch.isfinite(logits).all())
        if value is not None:
            finite &= bool(torch.isfinite(value).all())
            values[i:i + batch] = value.float().cpu().numpy()
        loss_sum += nn.functional.cross_entropy(logits, m, reduction="sum").item()
        masked = logits.masked_fill(occupied_mask(b, logits.shape[1]), float("-inf"))
        best = masked.topk(5, dim=1).indices
        hit1[i:i + batch] = (best[:, 0] == m).cpu().numpy()
        hit5[i:i + batch] = (best == m[:, None]).any(dim=1).cpu().numpy()
    model.train(was_training)
    out = {"loss": loss_sum / max(n, 1), "top1": float(hit1.mean()) if n else 0.0,
           "top5": float(hit5.mean()) if n else 0.0, "n": int(n), "finite": finite}
    if results is not None and not np.isnan(values).all():
        out.update(value_metrics(values, results))
    if plies is not None and n:
        stage = stage_of(plies, *stages)
        labels = stage_labels(*stages)
        out["top1_by_stage"] = {
            labels[s]: {"top1": float(hit1[stage == s].mean()), "n": int((stage == s).sum())}
            for s in range(len(labels)) if (stage == s).any()
        }
    return out


def value_metrics(values: np.ndarray, results: np.ndarray) -> dict:
    """Value-head scores on the rows with a known result (see the module doc)."""
    known = ~np.isnan(results)
    target = value_target(results[known])
    v = values[known]
    decisive = target != 0
    return {"value_n": int(known.sum()),
            "value_mse": float(np.mean((v - target) ** 2)) if known.any() else float("nan"),
            "value_sign": float(np.mean(np.sign(v[decisive]) == target[decisive]))
            if decisive.any() else float("nan")}
