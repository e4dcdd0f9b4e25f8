"""The fast rollout policy's move prediction after a short training: top-1 on test / game_test.

    .venv/bin/python benchmarks/rollout_top1.py [--dataset DIR | --tsv FILE] [--steps 1500]
        [--batch 128] [--seed 0] [--threads 1] [--configs rollout_k5]

Why: the rollouts (services/games/rollout.py) play the moves of a one-layer network
(services/models/rollout.py, `rollout_kK` / `go_rollout_kK`); how often it finds the played
move says how much better than random its rollouts are. The configurations are trained by the
project's trainer (`services.trainer.train.train`) on the given dataset (`--dataset`: any
game's shards; the configurations must be of its game), or, without one, on the
RenjuNet-derived Gomoku games of ../shared/data (built into a temporary folder by
`scripts/paper_table.build_dataset`: the project's reader, replay, dedup and split). The table
is `benchmarks/go_encoders_top1.py`'s (the same run and columns).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.go_encoders_top1 import run, table  # noqa: E402
from benchmarks.go_replay import machine  # noqa: E402
from scripts.paper_table import TSV, build_dataset  # noqa: E402
from services.dataset.shards import read_manifest  # noqa: E402


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
