"""Training throughput end to end: samples/s of the trainer's own step fed by the streaming loader
from real shards, against the same step on synthetic batches already on the device (the baseline,
measured in the same run). Goal: the real pipeline reaches >= 0.9 of the synthetic rate
(docs/benchmarks.md, "GPU figures").

    python benchmarks/gpu_train.py [--device cuda] [--model shao_f128_n4] [--batch-size 1024]
        [--seconds 15] [--workers 0,2,4] [--dataset DIR | --tsv renjunet-derived-games-dev.tsv]

The real shards are the RenjuNet-derived games built by scripts/paper_table.py (reader, replay,
symmetry dedup, hash split; `--tsv` names the games file) unless `--dataset` names a built
dataset. The step is `services.trainer.train.make_step` (bf16 autocast and channels-last on a GPU,
fp32 on CPU, gradient clipping, Adam), so both sides time exactly what `train` runs.

Sources, each timed for `--seconds` after a warm-up of `--warmup` steps:
- `synthetic`: random int8 boards and moves made on the device once (a pool of 16 batches
  cycled), so no host work per step beyond launching it.
- `trainer (workers=K)`: `train`'s own batch source (`batch_source`: the stream in this process,
  or a `ShardLoader` with K worker processes; pinned batches on a GPU), augmentation on, each
  batch copied to the device with `non_blocking=True`; for a model of another input encoder
  than the stored one (Go's `_x` configurations), converted to it first, as `train` does
  (`batch_encoder`: host work counted in the loader's share).
Figures: samples/s (steps x batch over the wall time, the device synchronised at both ends), the
ratio to synthetic, and the loader's share: the part of the wall time the training loop spent
waiting for its next batch (host time in `next()`; on a GPU the device may still be busy then,
so it is an upper bound on the device's idle share). Epochs roll over without a pause (the
loader's workers are persistent), so a small split is streamed many times over.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from paper_table import TSV, build_dataset  # noqa: E402

from services.dataset.loader import ShardStream  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.models.configs import spec  # noqa: E402
from services.trainer.train import (  # noqa: E402
    TrainConfig,
    batch_encoder,
    batch_source,
    make_model,
    make_step,
    to_device,
)


@dataclass
class Rate:
    source: str
    steps: int
    samples_per_s: float
    loader_share: float


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_steps(step, batches, device: str, warmup: int, seconds: float, batch_size: int,
               source: str) -> Rate:
    """Run `warmup` untimed steps, then steps for `seconds`; `batches` yields device tensors."""
    it = iter(batches)
    for _ in range(warmup):
        step(*next(it))
    sync(device)
    waited = 0.0
    steps = 0
    start = time.perf_counter()
    while True:
        t = time.perf_counter()
        args = next(it)
        waited += time.perf_counter() - t
        step(*args)
        steps += 1
        if steps % 8 == 0 and time.perf_counter() - start >= seconds:
            break
    sync(device)
    wall = time.perf_counter() - start
    return Rate(source, steps, steps * batch_size / wall, waited / wall)


def synthetic_batches(config: TrainConfig, board_shape: tuple[int, ...], n_moves: int):
    g = torch.Generator(device=config.device).manual_seed(0)
    pool = [(torch.randint(0, 3, (config.batch_size, *board_shape), generator=g,
                           device=config.device, dtype=torch.int8),
             torch.randint(0, n_moves, (config.batch_size,), generator=g, device=config.device),
             None) for _ in range(16)]
    while True:
        yield from pool


def real_batches(stream: ShardStream, config: TrainConfig):
    """The trainer's batch source, epoch after epoch, copied to the device as `train` does."""
    source = batch_source(stream, config)
    encode = batch_encoder(get_game(stream.game), spec(config.model).encoder)
    while True:
        for batch in source:
            yield to_device(batch, config.device, encode)


def measure(dataset: Path, config: TrainConfig, workers: list[int], warmup: int,
            seconds: float) -> list[Rate]:
    stream = ShardStream(dataset, "train", batch_size=config.batch_size,
                         shuffle_buffer=config.shuffle_buffer, seed=config.seed, augment=True)
    model, optimizer, scheduler = make_model(config)
    step = make_step(model, optimizer, scheduler, config)
    board_shape = get_game(stream.game).encoder_input_shape(spec(config.model).encoder,
                                                            stream.board_size)
    rates = [time_steps(step, synthetic_batches(config, board_shape, stream.n_moves),
                        config.device, warmup, seconds, config.batch_size, "synthetic")]
    print(json.dumps(rates[-1].__dict__), flush=True)
    for k in workers:
        cfg = TrainConfig(**{**config.__dict__, "loader_workers": k})
        stream = ShardStream(dataset, "train", batch_size=cfg.batch_size,
                             shuffle_buffer=cfg.shuffle_buffer, seed=cfg.seed, augment=True)
        rates.append(time_steps(step, real_batches(stream, cfg), cfg.device, warmup, seconds,
                                cfg.batch_size, f"trainer (workers={k})"))
        print(json.dumps(rates[-1].__dict__), flush=True)
    return rates


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="shao_f128_n4")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--workers", default="0,2,4")
    parser.add_argument("--shuffle-buffer", type=int, default=65536)
    parser.add_argument("--dataset", type=Path, help="a built dataset (default: build one)")
    parser.add_argument("--tsv", type=Path, default=TSV)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    config = TrainConfig(model=args.model, batch_size=args.batch_size, device=args.device,
                         shuffle_buffer=args.shuffle_buffer)
    workers = [int(w) for w in args.workers.split(",") if w != ""]
    with tempfile.TemporaryDirectory() as tmp:
        dataset = args.dataset
        if dataset is None:
            dataset = Path(tmp)
            print(json.dumps(build_dataset(dataset, args.tsv)), flush=True)
        rates = measure(dataset, config, workers, args.warmup, args.seconds)
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "none"
    print(f"\nmachine: {platform.node()} ({os.cpu_count()} CPUs), device {args.device} ({gpu}), "
          f"torch {torch.__version__}; model {args.model}, batch {args.batch_size}")
    base = rates[0].samples_per_s
    print(f"{'source':<22} {'steps':>7} {'samples/s':>12} {'x synthetic':>12} {'loader share':>13}")
    for r in rates:
        print(f"{r.source:<22} {r.steps:>7} {r.samples_per_s:>12,.0f} "
              f"{r.samples_per_s / base:>12.3f} {100 * r.loader_share:>12.1f}%")
    if args.json:
        args.json.write_text(json.dumps({"device": args.device, "gpu": gpu,
                                         "torch": torch.__version__, "model": args.model,
                                         "batch_size": args.batch_size,
                                         "rates": [r.__dict__ for r in rates]}, indent=1))


if __name__ == "__main__":
    main()
