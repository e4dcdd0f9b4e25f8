"""The fast rollout policy's move prediction after a short training: top-1 on test / game_test.

    .venv/bin/python benchmarks/rollout_top1.py [--dataset DIR | --tsv FILE] [--steps 1500]
        [--batch 128] [--seed 0] [--threads 1] [--configs rollout_k5] [--save rollout.npz]

Why: the rollouts (services/games/rollout.py) play the moves of a one-layer network
(services/models/rollout.py, `rollout_kK` / `go_rollout_kK`); how often it finds the played
move says how much better than random its rollouts are. The configurations are trained by the
project's trainer (`services.trainer.train.train`) on the given dataset (`--dataset`: any
game's shards; the configurations must be of its game), or, without one, on the
RenjuNet-derived Gomoku games of ../shared/data (built into a temporary folder by
`scripts/paper_table.build_dataset`: the project's reader, replay, dedup and split). The table
is `benchmarks/go_encoders_top1.py`'s (its loader and encoding columns are not measured here:
0). `--save` writes the last configuration's trained weights as a version's ``rollout.npz``
(with its test top-1): what `publish(..., rollout=...)` stores and `benchmarks/rollouts.py
--weights` plays.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.go_encoders_top1 import table  # noqa: E402
from benchmarks.go_replay import machine  # noqa: E402
from scripts.paper_table import TSV, build_dataset  # noqa: E402
from services.dataset.shards import GAME_SPLIT, read_manifest  # noqa: E402
from services.models.rollout import rollout_weights  # noqa: E402
from services.trainer.train import TrainConfig, train  # noqa: E402


def run(dataset: Path, name: str, args: argparse.Namespace) -> dict:
    """Train `name` with the budget; its table row (`--save`: its weights written)."""
    config = TrainConfig(model=name, batch_size=args.batch, max_steps=args.steps,
                         seed=args.seed, num_threads=args.threads)
    wall, cpu = time.perf_counter(), time.process_time()
    result = train(dataset, config, progress=True)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    m = result.metrics
    held = m.get(GAME_SPLIT) or {"top1": float("nan"), "top5": float("nan"), "n": 0}
    if args.save is not None:
        args.save.write_bytes(rollout_weights(result.model, name, m["test"]["top1"]).to_bytes())
        print(f"rollout policy {name} written to {args.save}")
    return {"config": name, "encoder": "basic", "steps": m["steps"], "train_s": m["seconds"],
            "run_wall_s": wall, "run_cpu_s": cpu, "game_top1": held["top1"],
            "game_top5": held["top5"], "game_n": held["n"], "test_top1": m["test"]["top1"],
            "test_top5": m["test"]["top5"], "test_n": m["test"]["n"],
            "val_top1": m["validation"]["top1"], "loader_s": 0.0, "encoding_s": 0.0,
            "encoding_us": 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=None,
                        help="a dataset to train on (default: the RenjuNet-derived games)")
    parser.add_argument("--tsv", type=Path, default=TSV, help="RenjuNet-derived games")
    parser.add_argument("--steps", type=int, default=1500, help="training steps of each run")
    parser.add_argument("--batch", type=int, default=128, help="rows a step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--configs", default="rollout_k5",
                        help="model configurations, comma-separated")
    parser.add_argument("--save", type=Path, default=None,
                        help="write the last configuration's weights here (rollout.npz)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("services.trainer").setLevel(logging.INFO)
    print(machine())
    temporary = None
    dataset = args.dataset
    if dataset is None:
        if not args.tsv.is_file():
            print(f"games not found: {args.tsv}", file=sys.stderr)
            return 2
        temporary = Path(tempfile.mkdtemp(prefix="rollout-top1-"))
        dataset = temporary
        print(f"built {build_dataset(dataset, args.tsv)} in {dataset}")
    try:
        manifest = read_manifest(dataset)
        print(f"dataset {dataset}: {manifest.get('game', 'gomoku')}, splits {manifest['splits']}")
        print(f"budget: {args.steps} steps of {args.batch} rows, seed {args.seed}, "
              f"{args.threads} torch thread(s)")
        rows = [run(dataset, name, args) for name in args.configs.split(",")]
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    print(table(rows))
    print(f"rows evaluated: game_test {rows[0]['game_n']}, test {rows[0]['test_n']}")
    print(machine())
    return 0


if __name__ == "__main__":
    sys.exit(main())
