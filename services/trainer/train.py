"""Supervised training of a policy network on the shards, with top-1/top-5 evaluation.

The paper's recipe is the default: Adam (0.9, 0.999, eps 1e-8), learning rate 0.003, batch 32,
cross-entropy on the played move. The budget is a step count and/or a wall-clock limit so the
same code serves a 30-second demo and a real run.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from services.dataset.shards import read_split
from services.models.configs import build
from services.trainer.augment import random_symmetry


@dataclass
class TrainConfig:
    model: str = "shao_f32_n2"
    batch_size: int = 32
    learning_rate: float = 0.003
    max_steps: int = 2000
    max_seconds: float = 0.0  # 0: no time limit
    seed: int = 0
    device: str = "cpu"
    augment: bool = True
    eval_batch: int = 2048


@dataclass
class TrainResult:
    model: nn.Module
    config: TrainConfig
    metrics: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {"config": asdict(self.config), "metrics": self.metrics}


@torch.no_grad()
def evaluate(model: nn.Module, boards: np.ndarray, moves: np.ndarray, device: str,
             batch: int = 2048) -> dict:
    """Loss and top-1/top-5 accuracy, with occupied points masked out of the prediction."""
    model.eval()
    n = len(moves)
    loss_sum, top1, top5 = 0.0, 0, 0
    for i in range(0, n, batch):
        b = torch.from_numpy(boards[i:i + batch]).to(device)
        m = torch.from_numpy(moves[i:i + batch]).to(device)
        logits = model(b).float()
        loss_sum += nn.functional.cross_entropy(logits, m, reduction="sum").item()
        masked = logits.masked_fill(b.reshape(len(b), -1) != 0, float("-inf"))
        best = masked.topk(5, dim=1).indices
        top1 += (best[:, 0] == m).sum().item()
        top5 += (best == m[:, None]).any(dim=1).sum().item()
    model.train()
    return {"loss": loss_sum / n, "top1": top1 / n, "top5": top5 / n, "n": n}


def train(dataset_dir: Path, config: TrainConfig, progress: bool = True) -> TrainResult:
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    boards, moves, _ = read_split(dataset_dir, "train")
    model = build(config.model).to(config.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate,
                                 betas=(0.9, 0.999), eps=1e-8)
    start = time.perf_counter()
    steps, samples = 0, 0
    bar = tqdm(total=config.max_steps, desc=f"train {config.model}", disable=not progress,
               unit="step", mininterval=1.0)
    running = None
    while steps < config.max_steps:
        if config.max_seconds and time.perf_counter() - start > config.max_seconds:
            break
        idx = rng.integers(0, len(moves), size=config.batch_size)
        b, m = boards[idx], moves[idx]
        if config.augment:
            b, m = random_symmetry(b, m, rng)
        logits = model(torch.from_numpy(b).to(config.device))
        loss = nn.functional.cross_entropy(logits, torch.from_numpy(m).long().to(config.device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        steps += 1
        samples += len(m)
        running = loss.item() if running is None else 0.98 * running + 0.02 * loss.item()
        bar.update(1)
        if steps % 50 == 0:
            bar.set_postfix(loss=f"{running:.3f}")
    bar.close()
    elapsed = time.perf_counter() - start
    metrics: dict = {"steps": steps, "samples": samples, "seconds": round(elapsed, 2),
                     "samples_per_s": round(samples / max(elapsed, 1e-9), 1),
                     "train_rows": len(moves), "train_loss_ema": running}
    for split in ("validation", "test"):
        b, m, _ = read_split(dataset_dir, split)
        metrics[split] = evaluate(model, b, m, config.device, config.eval_batch)
    model.eval()
    return TrainResult(model=model, config=config, metrics=metrics)
