"""Evaluation: loss, top-1/top-5 accuracy, and top-1 by game stage (Shao et al.'s Fig. 7).

Occupied points are masked out before ranking, so a prediction is always a legal move (Go: a
pass, the last logit, is never masked; ko and suicide are not masked either). Stages are each
game's buckets of the ply (`Game.stages`): Gomoku 10-move buckets (0-9, 10-19,
...) with every ply past 100 in one bucket; Go games run to 200-300 moves, so Go uses 50-move
buckets with every ply past 300 in one. A model with a value head is also scored on the rows
whose game result is known: `value_mse` (against +1 won / -1 lost / 0 drawn for the mover) and
`value_sign` (how often its sign names the winner of decisive games), and `value_std` (the spread
of its values: a head whose units died says one value everywhere, which MSE near 1 alone does
not tell from a head that has not learned yet).

The boards measured are the stored basic inputs (a split as `read_split` gives it); a model
built for another of its game's input encoders (`ModelSpec.encoder`) is measured on that
encoder's input, made from them a batch at a time (`Game.encode_inputs`), so a split is held
in memory once, compact.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from services.games.base import BASIC_ENCODER, Game
from services.games.registry import get_game
from services.models.value import split_outputs, value_target

STAGE_WIDTH = 10
LAST_STAGE = 100  # plies >= 100 share one bucket; each game has its own (`Game.stages`)


def stage_labels(width: int = STAGE_WIDTH, last: int = LAST_STAGE) -> list[str]:
    return [f"{s}-{s + width - 1}" for s in range(0, last, width)] + [f"{last}+"]


def stage_of(plies: np.ndarray, width: int = STAGE_WIDTH, last: int = LAST_STAGE) -> np.ndarray:
    return np.minimum(plies // width, last // width)


def occupied_mask(inputs: torch.Tensor, n_logits: int, game: Game) -> torch.Tensor:
    """True on occupied points of `game`'s network inputs (Gomoku cells [N, S, S], Go compact
    [N, C, S, S]: `Game.stone_cells` reads the stones); a trailing pass logit is never
    masked."""
    stones = game.stone_cells(inputs)
    mask = stones.reshape(len(inputs), -1) != 0
    extra = n_logits - mask.shape[1]
    return torch.nn.functional.pad(mask, (0, extra), value=False) if extra else mask


def rank_share(n: int, rank: int, world_size: int) -> slice:
    """The contiguous rows of `n` that rank `rank` of `world_size` evaluates (every row goes to
    exactly one rank; shares differ by at most one row)."""
    return slice(n * rank // world_size, n * (rank + 1) // world_size)


@torch.no_grad()
def evaluate(model: nn.Module, boards: np.ndarray, moves: np.ndarray, device: str,
             plies: np.ndarray | None = None, batch: int = 2048,
             stages: tuple[int, int] = (STAGE_WIDTH, LAST_STAGE),
             results: np.ndarray | None = None, reduce: bool = False, *,
             game: Game | str, encoder: str = BASIC_ENCODER) -> dict:
    """Metrics of `model` (int8 boards -> logits, or (logits, value)) on one split of `game`'s
    positions (a `Game` or its name: its inputs say where the stones are); `stages` =
    (bucket width, last bucket's first ply) of the by-stage top-1 (see `Game.stages`); `results`
    (the movers' results, NaN unknown) score a value head. `encoder`: the input `model` takes
    (`ModelSpec.encoder`); the basic `boards` are turned into it a batch at a time ("basic":
    they are its input as they are).

    `reduce`: the rows given are this rank's share of the split (`rank_share`) and every rank
    of the initialised process group calls this together: the additive counts (loss sum, hits,
    rows per stage, value errors) are summed over the ranks before any ratio is taken, so each
    rank gets the metrics of the whole split, equal to one process evaluating all of it."""
    played = get_game(game) if isinstance(game, str) else game
    played.check_encoder(encoder)
    sums = _sums(model, boards, moves, device, plies, batch, stages, results, played, encoder)
    if reduce and torch.distributed.is_initialized():
        packed = torch.tensor(sums, dtype=torch.float64, device=device)
        torch.distributed.all_reduce(packed)
        sums = packed.cpu().tolist()
    return _metrics(sums, stages, plies is not None)


# positions of the additive counts in the vector `_sums` returns (the stage counts follow)
(_LOSS, _N, _HIT1, _HIT5, _NONFINITE, _HAS_VALUE, _KNOWN, _SQERR, _DECISIVE, _SIGN, _VSUM,
 _VSQ) = range(12)
_FIXED = 12


def _sums(model: nn.Module, boards: np.ndarray, moves: np.ndarray, device: str,
          plies: np.ndarray | None, batch: int, stages: tuple[int, int],
          results: np.ndarray | None, game: Game, encoder: str) -> list[float]:
    """The additive counts of one share of a split (see `evaluate`): loss sum, rows, top-1 and
    top-5 hits, non-finite batches, whether the model gave values, the value head's known rows,
    squared-error sum, decisive rows and right signs, the sum and squared sum of its values
    (their spread), then rows and top-1 hits per stage."""
    was_training = model.training
    model.eval()
    n = len(moves)
    loss_sum = 0.0
    hit1 = np.zeros(n, dtype=bool)
    hit5 = np.zeros(n, dtype=bool)
    values = np.full(n, np.nan, np.float32)
    finite = True
    for i in range(0, n, batch):
        chunk = boards[i:i + batch]
        if encoder != BASIC_ENCODER:
            chunk = game.encode_inputs(chunk, encoder)
        b = torch.from_numpy(chunk).to(device)
        m = torch.from_numpy(moves[i:i + batch]).to(device)
        logits, value = split_outputs(model(b))
        logits = logits.float()
        finite &= bool(torch.isfinite(logits).all())
        if value is not None:
            finite &= bool(torch.isfinite(value).all())
            values[i:i + batch] = value.float().cpu().numpy()
        loss_sum += nn.functional.cross_entropy(logits, m, reduction="sum").item()
        masked = logits.masked_fill(occupied_mask(b, logits.shape[1], game), float("-inf"))
        best = masked.topk(5, dim=1).indices
        hit1[i:i + batch] = (best[:, 0] == m).cpu().numpy()
        hit5[i:i + batch] = (best == m[:, None]).any(dim=1).cpu().numpy()
    model.train(was_training)
    sums = [0.0] * _FIXED
    sums[_LOSS], sums[_N] = loss_sum, float(n)
    sums[_HIT1], sums[_HIT5] = float(hit1.sum()), float(hit5.sum())
    sums[_NONFINITE] = 0.0 if finite else 1.0
    if results is not None and not np.isnan(values).all():
        known = ~np.isnan(results)
        target = value_target(results[known]).astype(np.float64)
        v = values[known].astype(np.float64)
        decisive = target != 0
        sums[_HAS_VALUE], sums[_KNOWN] = 1.0, float(known.sum())
        sums[_SQERR] = float(np.sum((v - target) ** 2))
        sums[_DECISIVE] = float(decisive.sum())
        sums[_SIGN] = float(np.sum(np.sign(v[decisive]) == target[decisive]))
        sums[_VSUM], sums[_VSQ] = float(v.sum()), float(np.sum(v * v))
    n_stages = len(stage_labels(*stages))
    per_stage = np.zeros((2, n_stages))
    if plies is not None and n:
        stage = stage_of(plies, *stages)
        per_stage[0] = np.bincount(stage, minlength=n_stages)[:n_stages]
        per_stage[1] = np.bincount(stage, weights=hit1, minlength=n_stages)[:n_stages]
    return sums + per_stage.ravel().tolist()


def _metrics(sums: list[float], stages: tuple[int, int], by_stage: bool) -> dict:
    """The metrics dict of (possibly summed) counts from `_sums`."""
    n = int(sums[_N])
    out = {"loss": sums[_LOSS] / max(n, 1), "top1": sums[_HIT1] / n if n else 0.0,
           "top5": sums[_HIT5] / n if n else 0.0, "n": n, "finite": sums[_NONFINITE] == 0}
    if sums[_HAS_VALUE]:
        known, decisive = int(sums[_KNOWN]), sums[_DECISIVE]
        out.update({"value_n": known,
                    "value_mse": sums[_SQERR] / known if known else float("nan"),
                    "value_sign": sums[_SIGN] / decisive if decisive else float("nan"),
                    # how far the values spread: near 0, the head says one thing everywhere
                    "value_std": (math.sqrt(max(sums[_VSQ] / known - (sums[_VSUM] / known) ** 2,
                                                0.0)) if known else float("nan"))})
    if by_stage and n:
        labels = stage_labels(*stages)
        counts = np.asarray(sums[_FIXED:]).reshape(2, len(labels))
        out["top1_by_stage"] = {
            labels[s]: {"top1": float(counts[1, s] / counts[0, s]), "n": int(counts[0, s])}
            for s in range(len(labels)) if counts[0, s]
        }
    return out


def evaluate_dataset(model: nn.Module, dataset_dir: Path | str, device: str = "cpu",
                     splits: tuple[str, ...] | None = None,
                     encoder: str = BASIC_ENCODER) -> dict[str, Any]:
    """`evaluate` (top-1, top-5, loss, top-1 by stage, the value head's figures) of `model` on
    every split of a dataset that has rows (`splits`: these only), by the stages of the
    dataset's game, on the input `encoder` (the model's `ModelSpec.encoder`): the metrics a
    model card records for a network evaluated at publish time
    (`services.repository.model_card`)."""
    from services.dataset.shards import SPLITS, read_manifest, read_split

    manifest = read_manifest(Path(dataset_dir))
    rows: dict[str, int] = {}
    for entry in manifest.get("files", []):
        rows[entry["split"]] = rows.get(entry["split"], 0) + int(entry.get("rows", 0))
    out: dict[str, Any] = {}
    with torch.inference_mode():
        for split in splits or SPLITS:
            if not rows.get(split):
                continue
            boards, moves, plies, results = read_split(Path(dataset_dir), split, results=True)
            out[split] = evaluate(model, boards, moves, device, plies=plies,
                                  stages=get_game(manifest.get("game")).stages, results=results,
                                  game=manifest.get("game"), encoder=encoder)
    return out
