"""Train a network with a value head on the real RenjuNet-derived games and report both heads.

Same data, split and recipe as `scripts/paper_table.py` (Shao et al.'s Table III: F = 128,
batch 32, Adam 0.003), with a `_v` configuration: the policy's top-1 next to the plain
network's row of docs/paper_table.md, and the value head's error and sign accuracy on the rows
whose game result is known, overall and for positions from ply 20 on (early positions of expert
games say little about who wins), against the constant guess "the colour that won more games".
Validation only decides when to stop; test is reported.
Prints one JSON line per configuration.

    .venv/bin/python scripts/value_head.py [--models shao_f128_n2_v] [--epochs 2]
        [--seconds 900] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from paper_table import TSV, build_dataset  # noqa: E402

from services.dataset.shards import read_split  # noqa: E402
from services.trainer.metrics import evaluate  # noqa: E402
from services.trainer.train import TrainConfig, train  # noqa: E402

LATE_PLY = 20


def constant_sign(boards: np.ndarray, results: np.ndarray) -> float:
    """The baseline of `value_sign`: always naming the colour that won more decisive games."""
    flat = boards.reshape(len(boards), -1)
    black_to_move = (flat == 1).sum(axis=1) == (flat == 2).sum(axis=1)
    decisive = (results == 0) | (results == 1)
    black_won = np.where(black_to_move, results, 1 - results)[decisive] == 1
    return round(float(max(black_won.mean(), 1 - black_won.mean())), 4)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="shao_f128_n2_v")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=900)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if not TSV.exists():
        raise SystemExit(f"real RenjuNet-derived games not found at {TSV}")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        data = build_dataset(Path(tmp))
        print(json.dumps(data), flush=True)
        boards, moves, plies, results = read_split(Path(tmp), "test", results=True)
        late = plies >= LATE_PLY
        for model in args.models.split(","):
            config = TrainConfig(model=model, batch_size=32, learning_rate=0.003,
                                 max_steps=10**9, max_epochs=args.epochs, patience=1,
                                 max_seconds=args.seconds, train_eval_rows=4096)
            start = time.perf_counter()
            r = train(Path(tmp), config, progress=False)
            m = r.metrics
            late_m = evaluate(r.model, boards[late], moves[late], "cpu",
                              results=results[late], game=m["game"])
            keep = ("top1", "top5", "loss", "value_n", "value_mse", "value_sign")
            print(json.dumps({
                "model": model, "epochs": m["epochs"], "steps": m["steps"],
                "stopped": m["stopped"], "seconds": round(time.perf_counter() - start),
                **{split: {k: round(m[split][k], 4) for k in keep if k in m[split]}
                   for split in ("train", "validation", "test")},
                f"test_ply_{LATE_PLY}+": {k: round(late_m[k], 4) for k in keep if k in late_m},
                "test_constant_sign": constant_sign(boards, results),
            }), flush=True)


if __name__ == "__main__":
    main()
