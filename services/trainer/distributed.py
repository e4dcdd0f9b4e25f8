"""Data-parallel training over several processes, GPUs or machines, launched by `torchrun`.

    torchrun --nproc-per-node 2 -m services.trainer.distributed --dataset artifacts/dataset \\
        --run-dir artifacts/train-ddp --steps 2000
    torchrun --nnodes 2 --node-rank R --master-addr HOST --master-port 29500 \\
        --nproc-per-node 8 -m services.trainer.distributed --dataset /data/dataset ...

Every process trains the same model on its rank's shard of the train split (the streaming
loader shards row groups by rank) and DDP averages the gradients: NCCL between GPUs (one GPU per
process, `LOCAL_RANK`), gloo on CPU. `--batch-size` is the global batch, split evenly over the
ranks, so the recipe (learning rate, steps) means the same at any number of ranks. Metrics are
computed over the whole validation, test and held-out-game splits (each rank evaluates a share,
the counts are summed). Only rank 0 writes: the checkpoint (`RUN_DIR/checkpoint.pt`, every
rank's loader position in it), `metrics.json`, the checked TorchScript `model.pt` and, with
`--repository`, the gated, published next version. A run dir holding a checkpoint resumes from
it (a restarted Job continues; with another number of ranks too, see services/trainer/train.py);
`--fresh` starts over. Without torchrun (no WORLD_SIZE in the environment) it is one process.
With `--track mlflow`, rank 0 alone logs the run to MLflow (services/trainer/tracking.py): its
scalars and parameters, then metrics.json, curves.png and the model card as artefacts.

The dataset and the run dir must be on storage every rank reads (each rank reads its shards
and, to resume, the checkpoint). One torch thread per process unless `--threads` says
otherwise, as for single-process training.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from services import logs, settings
from services.atomic_files import atomic_write_text
from services.dataset.loader import dataset_game
from services.dataset.shards import DatasetError, manifest_sha256
from services.defaults import MODEL_FILE
from services.games.registry import get_game
from services.repository import gate
from services.trainer.publish import (
    MODEL_CARD_FILE,
    check_gate,
    export_and_publish,
    export_checked,
    model_encoder,
    unservable_reason,
    write_run_card,
)
from services.trainer.tracking import Tracker, tracked
from services.trainer.train import (
    CheckpointError,
    GameMismatchError,
    TrainConfig,
    TrainResult,
    rank_batch,
    train,
)

log = logging.getLogger(__name__)
CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.json"
# rank 0's record of what this run dir published: a rerun of a finished run (a Job applied
# again) finds its model published already instead of publishing it once more
PUBLISHED = "published.json"
# every rank trains on its own GPU when the machine has them: the device a torchrun entry takes
# unless told (the single-process trainer's default stays the CPU)
DEFAULT_DEVICE = "auto"


class LaunchError(ValueError):
    """A bad option or environment, found before any step (every rank finds the same)."""


def launch_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; (0, 1, 0) without it."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError as exc:
        raise LaunchError(f"RANK, WORLD_SIZE and LOCAL_RANK must be integers: {exc}") from exc
    if world < 1 or not 0 <= rank < world:
        raise LaunchError(f"need 0 <= RANK < WORLD_SIZE, got RANK {rank}, WORLD_SIZE {world}")
    return rank, world, local


def pick_device(device: str, local_rank: int) -> str:
    """`auto`: this process's GPU (`cuda:LOCAL_RANK`) when there is one, else the CPU; `cuda`
    alone also means the local rank's GPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise LaunchError("--device cuda, but torch sees no GPU (a CPU build of torch, or no "
                              "device visible to this process)")
        if local_rank >= torch.cuda.device_count():
            raise LaunchError(f"LOCAL_RANK {local_rank}, but only {torch.cuda.device_count()} "
                              "GPU(s) visible: give --nproc-per-node at most the GPU count")
        device = f"cuda:{local_rank}"
    return device


def init_process_group(device: str, rank: int, world: int, timeout_s: float) -> str:
    """Join torchrun's process group (env:// rendezvous): NCCL on GPUs, gloo on CPU; return
    the backend."""
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
    return backend


def write_outputs(result: TrainResult, dataset_dir: Path, run_dir: Path) -> dict:
    """Rank 0's files: metrics.json (with the training-loss curve), curves.png and the
    TorchScript export checked against the eager model on random inputs and real validation
    positions."""
    from services.trainer.plots import plot_curves

    diff = export_checked(result, run_dir / MODEL_FILE, dataset_dir)
    summary = {**result.summary(), "export_max_abs_diff": diff, "history": result.history,
               "curve": result.curve}
    (run_dir / METRICS).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    plot_curves(result.history, run_dir / "curves.png", result.curve)
    return summary


def publish_version(result: TrainResult, dataset_dir: Path, repository: str,
                    model_name: str | None, tolerance: float,
                    run_dir: Path | None = None) -> dict:
    """The train flow's gate and publication (no rollout: `movepred rollout` does that), run
    by rank 0 outside a Prefect flow. With `run_dir`, a model this run dir published already
    (the same step, dataset, repository and name: `PUBLISHED`) is not published again."""
    name = model_name or get_game(result.metrics["game"]).default_model
    what = {"step": result.metrics["steps"], "dataset_manifest_sha256":
            manifest_sha256(dataset_dir), "repository": str(Path(repository).resolve()),
            "model_name": name}
    record = _published(run_dir) if run_dir else None
    if record is not None and {k: record.get(k) for k in what} == what:
        log.info("%s v%s is this run's model (step %d), published already; not again", name,
                 record.get("version"), what["step"])
        return {"published": False, "model_name": name, "version": record.get("version"),
                "gate": "published already by this run", "already": True}
    decision = check_gate(result.metrics, Path(repository), name, dataset_dir,
                          tolerance=tolerance)
    if not decision.passed:
        return {"published": False, "model_name": name, "gate": decision.reason}
    why_not = unservable_reason(repository, name, str(dataset_dir),
                                encoder=model_encoder(result))
    if why_not:
        return {"published": False, "model_name": name, "gate": decision.reason,
                "reason": why_not}
    version = export_and_publish(result, repository, name, str(dataset_dir), decision,
                                 str(run_dir) if run_dir else None)
    if run_dir:
        atomic_write_text(json.dumps({**what, "version": version}, indent=2) + "\n",
                          run_dir / PUBLISHED)
    return {"published": True, "model_name": name, "version": version, "gate": decision.reason}


def track_outputs(tracker: Tracker, result: TrainResult, dataset_dir: Path, run_dir: Path,
                  repository: str | None, published: dict | None) -> None:
    """Rank 0's files in its tracking run: metrics.json, curves.png and the model card (the
    published version's, else the trained network's with the gate's reason:
    `write_run_card`)."""
    if not tracker.enabled:
        return
    published = published or {}
    write_run_card(result, dataset_dir, run_dir / MODEL_CARD_FILE, repository=repository,
                   model_name=published.get("model_name"), version=published.get("version"),
                   decision={"passed": published.get("published"),
                             "reason": published["gate"]} if published else None)
    for name in (METRICS, "curves.png", MODEL_CARD_FILE):
        if (run_dir / name).exists():
            tracker.log_artifact(run_dir / name)


def _published(run_dir: Path) -> dict | None:
    """What `run_dir` published last (None: nothing, or an unreadable record)."""
    try:
        record = json.loads((run_dir / PUBLISHED).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m services.trainer.distributed` (under torchrun)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="dataset folder (every rank reads it)")
    parser.add_argument("--run-dir", required=True,
                        help="checkpoint, metrics.json, model.pt, published.json (written by "
                             "rank 0)")
    parser.add_argument("--fresh", action="store_true",
                        help="ignore (delete) a checkpoint and published.json in the run dir "
                             "instead of resuming")
    parser.add_argument("--timeout", type=settings.bounded(float, 1, 7 * 86_400), default=1800.0,
                        help="seconds a rank waits in a collective before the run fails")
    parser.add_argument("--repository", default=None,
                        help="publish the gated model as the next version here (rank 0)")
    parser.add_argument("--model-name", default=None,
                        help="model name to publish as (default by game: gomoku_policy, "
                             "go_policy)")
    parser.add_argument("--gate-tolerance", type=settings.bounded(float, 0, 1),
                        default=gate.DEFAULT_TOLERANCE,
                        help="top-1 the new version may lose against the serving one "
                             f"(default {gate.DEFAULT_TOLERANCE})")
    settings.add_arguments(parser, TrainConfig, defaults={"device": DEFAULT_DEVICE},
                           title="training settings (TrainConfig; --batch-size is the global "
                                 "batch, a multiple of the ranks)")
    logs.add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> dict | None:
    """Train as this process's rank; rank 0 returns its summary, the others None."""
    rank, world, local = launch_env()
    device = pick_device(args.device, local)
    dataset = Path(args.dataset)
    if not (dataset / "manifest.json").is_file():
        raise LaunchError(f"no dataset at {dataset} (no manifest.json): run the ingest flow "
                          f"first (`python -m flows.ingest SOURCES --out {dataset}`)")
    rank_batch(args.batch_size, world)  # refused before the rendezvous
    game, _ = dataset_game(dataset, "train")
    config = settings.from_args(TrainConfig, args, device=device).for_game(game)
    run_dir = Path(args.run_dir)
    checkpoint = run_dir / CHECKPOINT
    # rank 0's tracking run (the others' calls do nothing), opened before the rendezvous: a
    # store that cannot be opened stops the launch before any rank waits
    with tracked(None, config.track, config.tracking_uri, game=game,
                 run_name=f"{config.model} {run_dir.name}", rank=rank) as tracker:
        backend = init_process_group(device, rank, world, args.timeout) if world > 1 else None
        try:
            if rank == 0:
                run_dir.mkdir(parents=True, exist_ok=True)
                if args.fresh:
                    checkpoint.unlink(missing_ok=True)
                    (run_dir / PUBLISHED).unlink(missing_ok=True)
            if backend:
                dist.barrier()  # the run dir is ready (a stale checkpoint gone) for every rank
                if rank == 0:
                    log.info("%d ranks (%s), %s on rank 0", world, backend, device)
            result = train(dataset, config, checkpoint=checkpoint, tracker=tracker)
            summary = None
            if rank == 0:
                summary = write_outputs(result, dataset, run_dir)
                if args.repository:
                    summary["publish"] = publish_version(result, dataset, args.repository,
                                                         args.model_name, args.gate_tolerance,
                                                         run_dir)
                track_outputs(tracker, result, dataset, run_dir, args.repository,
                              summary.get("publish"))
                summary["tracking"] = tracker.where()
            if backend:
                dist.barrier()  # rank 0's files are written when the launcher sees all ranks end
            return summary
        finally:
            if backend:
                dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Run one rank; a bad option, dataset or checkpoint is one line on stderr and exit 2."""
    args = build_parser().parse_args(argv)
    logs.configure_from(args)
    # the policy head's 1x1 convolution weight [1, C, 1, 1] gets its gradient with other strides
    # on its size-1 dimensions than DDP's bucket: the same memory order, one small copy a step
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    try:
        summary = run(args)
    except (LaunchError, DatasetError, CheckpointError, GameMismatchError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if summary is not None:
        m = summary["metrics"]
        keys = ("top1", "top5", "loss", "n")
        print(json.dumps({"run": {k: m[k] for k in ("steps", "epochs", "stopped", "seconds",
                                                    "samples_per_s", "train_rows") if k in m},
                          "world_size": m.get("world_size", 1),
                          "metrics": {s: {k: m[s][k] for k in keys}
                                      for s in ("validation", "test", "game_test") if m.get(s)},
                          "publish": summary.get("publish")}, indent=2))
        print(f"metrics.json, model.pt and the checkpoint in {args.run_dir}")
        if summary.get("tracking"):
            print("tracking run {run_id} in {tracking_uri}".format(**summary["tracking"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
