"""Go move prediction on the basic and the extended input with the same training budget: top-1.

    .venv/bin/python benchmarks/go_encoders_top1.py [--dataset DIR | --out DIR] [--steps 1500]
        [--batch 128] [--seed 0] [--threads 1] [--configs go_res_b2c32,go_res_b2c32_x]
        [ARCHIVE ...]

Why: the extended input (services/games/go/encoders.py: the 4 basic planes and the tactical
channels of services/games/go/tactics.py) costs CPU on every batch; this says what it buys in
move prediction against the basic input when both networks get the same budget.

Data: with --dataset, that Go dataset; else the archives (default: the 19x19 games of
../shared/data/kgs/kgs-games-dev.tar.gz and ../shared/data/go-other/go-games-other-dev.tar.gz)
are ingested with the ingest flow (`flows.ingest.ingest`, a Prefect run) into --out (default:
a temporary folder, removed at the end).

Each configuration is trained through `services.trainer.train.train` with the same settings
(steps, batch, seed, torch threads, learning rate, shuffle buffer; the trainer's defaults
otherwise), so they see the same rows in the same order with the same symmetries; the encoder
is the configuration's (`ModelSpec.encoder`) and the trainer converts each batch to it. The
table: the configuration and its encoder; steps; the training run's wall and CPU seconds (this
process, every thread; the run's final evaluation of the train sample, validation, test and
held-out games included); top-1 and top-5 on `game_test` (games held out whole, openings
included) and on `test` (positions of the training games' distribution, held out); then, timed
apart before the run with the same settings, the CPU seconds the loader takes to make the
run's batches and the CPU seconds of converting them to the configuration's input (0 for the
basic one, which is never converted) with that cost per position. The machine is shared: CPU
seconds are the steadier figures.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.go_replay import machine  # noqa: E402
from services.dataset.loader import ShardStream  # noqa: E402
from services.dataset.shards import GAME_SPLIT, read_manifest  # noqa: E402
from services.games.base import BASIC_ENCODER  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.models.configs import spec  # noqa: E402
from services.trainer.train import TrainConfig, train  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
DEFAULT_ARCHIVES = (SHARED / "kgs" / "kgs-games-dev.tar.gz",
                    SHARED / "go-other" / "go-games-other-dev.tar.gz")
DEFAULT_CONFIGS = ("go_res_b2c32", "go_res_b2c32_x")
SIZE = 19


def ingest(archives: list[Path], out: Path) -> Path:
    """The archives' 19x19 games ingested into `out` by the ingest flow."""
    from flows.ingest import ingest as ingest_flow

    ingest_flow(sources=[str(p) for p in archives], out_dir=str(out), board_size=SIZE)
    return out


def input_seconds(dataset: Path, config: TrainConfig, steps: int) -> tuple[float, float, int]:
    """(loader CPU s, conversion CPU s, positions) of the run's first `steps` batches: the
    loader with the run's settings, then the configuration's conversion of each batch."""
    model = spec(config.model)
    stream = ShardStream(dataset, "train", batch_size=config.batch_size,
                         shuffle_buffer=config.shuffle_buffer, seed=config.seed,
                         augment=config.augment, results=model.value)
    game = get_game(stream.game)
    loader = encoding = 0.0
    positions = 0
    epochs = itertools.chain.from_iterable(itertools.repeat(stream))  # a pass is an epoch
    for _ in range(steps):
        start = time.process_time()
        batch = next(epochs)
        loader += time.process_time() - start
        boards = batch["boards"].numpy()
        positions += len(boards)
        if model.encoder != BASIC_ENCODER:
            start = time.process_time()
            game.encode_inputs(boards, model.encoder)
            encoding += time.process_time() - start
    return loader, encoding, positions


def run(dataset: Path, name: str, args: argparse.Namespace) -> dict:
    """Time the inputs, train `name` with the shared budget, and return its table row."""
    config = TrainConfig(model=name, batch_size=args.batch, max_steps=args.steps,
                         seed=args.seed, num_threads=args.threads)
    loader, encoding, positions = input_seconds(dataset, config, args.steps)
    wall, cpu = time.perf_counter(), time.process_time()
    result = train(dataset, config, progress=True)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    m = result.metrics
    held = m.get(GAME_SPLIT) or {"top1": float("nan"), "top5": float("nan"), "n": 0}
    return {"config": name, "encoder": spec(name).encoder, "steps": m["steps"],
            "train_s": m["seconds"], "run_wall_s": wall, "run_cpu_s": cpu,
            "game_top1": held["top1"], "game_top5": held["top5"], "game_n": held["n"],
            "test_top1": m["test"]["top1"], "test_top5": m["test"]["top5"],
            "test_n": m["test"]["n"], "val_top1": m["validation"]["top1"],
            "loader_s": loader, "encoding_s": encoding,
            "encoding_us": 1e6 * encoding / max(positions, 1)}


def table(rows: list[dict]) -> str:
    head = ("| config | encoder | steps | train s (wall) | run CPU s | game_test top-1 | "
            "game_test top-5 | test top-1 | test top-5 | loader CPU s | encoding CPU s "
            "(µs a position) |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['encoder']} | {r['steps']} | {r['train_s']:.1f} | "
            f"{r['run_cpu_s']:.1f} | {r['game_top1']:.4f} | {r['game_top5']:.4f} | "
            f"{r['test_top1']:.4f} | {r['test_top5']:.4f} | {r['loader_s']:.1f} | "
            f"{r['encoding_s']:.1f} ({r['encoding_us']:.1f}) |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archives", nargs="*", type=Path, default=list(DEFAULT_ARCHIVES))
    parser.add_argument("--dataset", type=Path, default=None,
                        help="a Go dataset to train on (skips the ingest)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to ingest the archives (kept; default a temporary folder)")
    parser.add_argument("--steps", type=int, default=1500, help="training steps of each run")
    parser.add_argument("--batch", type=int, default=128, help="rows a step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help="model configurations compared, comma-separated")
    args = parser.parse_args()
    # the trainer's progress lines (the ingest flow's own run log is Prefect's)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("services.trainer").setLevel(logging.INFO)
    print(machine())
    temporary = None
    dataset = args.dataset
    if dataset is None:
        missing = [str(p) for p in args.archives if not p.is_file()]
        if missing:
            print(f"archives not found: {missing}", file=sys.stderr)
            return 2
        if args.out is None:
            temporary = Path(tempfile.mkdtemp(prefix="go-encoders-"))
        start = time.perf_counter()
        dataset = ingest(args.archives, args.out or temporary / "dataset")
        print(f"ingested {', '.join(p.name for p in args.archives)} into {dataset} in "
              f"{time.perf_counter() - start:.0f} s")
    try:
        manifest = read_manifest(dataset)
        print(f"dataset {dataset}: {manifest['game']}, splits {manifest['splits']}")
        print(f"budget: {args.steps} steps of {args.batch} rows, seed {args.seed}, "
              f"{args.threads} torch thread(s)")
        rows = [run(dataset, name, args) for name in args.configs.split(",")]
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    print(table(rows))
    print(f"rows evaluated: game_test {rows[0]['game_n']}, test {rows[0]['test_n']}; "
          "validation top-1: " + ", ".join(f"{r['config']} {r['val_top1']:.4f}" for r in rows))
    print(machine())
    return 0


if __name__ == "__main__":
    sys.exit(main())
