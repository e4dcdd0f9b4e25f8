"""Supervised training of a policy network on the shards.

The paper's recipe is the default: Adam (0.9, 0.999, eps 1e-8), constant learning rate 0.003, batch
32, cross-entropy on the played move. A `_v` configuration (services/models/value.py) also learns
the game's result from the mover's side: `value_weight` times the squared error of its value
against +1 won / -1 lost / 0 drawn, over the rows whose result the records give. Training batches
come from the streaming loader (services/dataset/loader.py: row-group shuffle, shuffle buffer,
random board symmetries, compact int8 boards expanded on the device). The game comes from the
dataset's shards: a Gomoku split trains a Gomoku configuration (policy over s*s points), a Go split
a `go_` configuration (compact [4, s, s] planes in, s*s + 1 logits out, the last one pass); a
configuration of the other game is refused before any step. A run is a sequence of epochs; it stops
at the step, time or epoch budget, or early when the validation loss has not improved for
`patience` epochs. After every epoch (and at a budget stop) loss, top-1 and top-5 are measured on a
fixed sample of train rows, on validation and on test; only validation decides early stopping (and,
in the flow, the publish gate): test is reported, never tuned on. Everything a run depends on is
derived from (seed, epoch, step), and a checkpoint holds model, optimiser, scheduler, the loader's
position, RNG state and history, so a killed run resumes to the same result. On a GPU the forward
pass runs in bf16 autocast with channels-last memory; on CPU in fp32.

Self-play training (docs/selfplay.md): with `value_per_game` k > 0 the loader keeps each train
row's result with probability min(1, k / its game's rows), so each game gives about k value
targets an epoch rather than one per position (a value head trained on every position of a game
learns the game); with `expert_dataset` and `expert_share`, that share of every batch comes from
an expert dataset's train split (its own stream, cycled, resumed from the checkpoint), and the
expert dataset's held-out games are measured at every evaluation as `expert_game_test`, next to
the dataset's own `game_test` (the value figures `value_mse` and `value_sign` on both).

Input encoders: a configuration built for another of its game's inputs than the stored one
(`ModelSpec.encoder`, e.g. Go's "extended": the basic planes and tactical channels) gets every
training batch, evaluated split and export check in that input, computed on the CPU from the
stored basic one (`Game.encode_inputs`) before the batch moves to the device; a basic
configuration's batches go to the device as the loader made them, with no conversion call.

Distributed data-parallel: called in every process of an initialised `torch.distributed` process
group (torchrun: `services/trainer/distributed.py`), `train` trains one model over all of them.
`batch_size` stays the global batch: each rank takes `batch_size / world_size` rows from its
shard of the train split (the loader shards row groups by rank), DDP averages the gradients, so
a step is the single-process step on a batch of the same size. Every rank stops its epoch after
the steps the rank with the fewest batches can take; stop decisions (steps, time, early stopping)
agree on every rank. Validation, test and the train sample are evaluated one share per rank and
the counts summed, so the metrics are those of the whole split. Only rank 0 logs progress at INFO
and writes the checkpoint, which holds every rank's loader position: a run resumes exactly with
the same number of ranks; with another number (1 included; a single-process checkpoint in a
distributed run too) weights, optimiser, step and epoch carry over and an epoch left half done
starts over with the new sharding. Without a process group nothing of this applies.
"""

from __future__ import annotations

import logging
import math
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from services.atomic_files import atomic_path
from services.dataset.loader import ShardLoader, ShardStream
from services.dataset.row_groups import plan_split
from services.dataset.shards import GAME_SPLIT, manifest_sha256, read_manifest, read_split
from services.games.base import BASIC_ENCODER, Game
from services.games.registry import get_game, registered_games
from services.models.configs import CONFIGS, build, spec
from services.models.value import split_outputs, value_target
from services.models.weights import load_weights
from services.settings import check_settings, setting
from services.trainer.metrics import evaluate, rank_share
from services.trainer.tracking import TRACKERS, Tracker, split_scalars, tracked

log = logging.getLogger(__name__)

# Step budget of a run that names neither a step limit nor a time budget (`max_steps` None).
DEFAULT_MAX_STEPS = 2000
# torch intra-op threads of a training process unless told otherwise. With torch's default (one
# per core) the OpenMP threads spin-wait for each other, and a step waits for its slowest thread:
# on a 2-core machine where another process held one core, 2 threads trained at 207 samples/s,
# 1 thread at 4,315. One thread is never much slower for the small networks trained on CPU here;
# give more (`num_threads`, `--threads`) on a machine of idle cores or for the large networks.
DEFAULT_THREADS = 1
# seconds between two progress lines in the log (and at each epoch's evaluation)
PROGRESS_EVERY_S = 30.0
# the metrics' name of the expert dataset's held-out games (`TrainConfig.expert_dataset`)
EXPERT_GAME_SPLIT = "expert_game_test"
# what every evaluation may measure, in this order
EVALUATED_SPLITS = ("train", "validation", "test", GAME_SPLIT, EXPERT_GAME_SPLIT)


@dataclass
class TrainConfig:
    """Every setting of a training run: the one source of the trainer's flags (`flows.train`,
    `flows.schedules` as ``--train-*``, `services.trainer.distributed`), of the train flow's
    and its deployments' parameters and of their defaults (`services.settings`)."""

    model: str | None = setting(
        None, "model config (services/models/configs.py; default by the dataset's game: "
              f"{', '.join(f'{g.name} {g.default_config}' for g in registered_games())})",
        choices=lambda: sorted(CONFIGS))
    batch_size: int = setting(
        32, "rows a step (in a distributed run the global batch, split evenly over the ranks)",
        minimum=1)
    learning_rate: float = setting(0.003, "Adam's learning rate", minimum=0)
    lr_schedule: str = setting("constant", "learning-rate schedule; cosine: to 0 at the step "
                                           "limit (needs one)", choices=("constant", "cosine"))
    # a negative clip would flip every gradient (torch scales by max_norm / norm)
    grad_clip: float = setting(1.0, "max gradient norm (0: no clipping)", minimum=0)
    value_weight: float = setting(1.0, "weight of a value head's loss (`_v` configurations)",
                                  minimum=0)
    # None: DEFAULT_MAX_STEPS, or no step limit when max_seconds gives a time budget (a time
    # budget is not cut short by a step count nobody asked for)
    max_steps: int | None = setting(
        None, f"step limit (default {DEFAULT_MAX_STEPS}; with a time budget and no step "
              "limit the time budget alone stops the run; 0: no step limit)", flag="steps",
        minimum=0)
    max_epochs: int = setting(1000, "epoch limit", flag="epochs", minimum=1)
    max_seconds: float = setting(0.0, "time budget of the training loop (0: no time limit)",
                                 flag="seconds", minimum=0)
    patience: int = setting(0, "epochs without validation-loss improvement before stopping "
                               "(0: never)", minimum=0)
    seed: int = setting(0, "seed of everything the run draws (weights, shuffles, symmetries)",
                        minimum=0, maximum=2**63 - 1)
    device: str = setting("cpu", "torch device: cpu, cuda, cuda:N (torchrun's entry also "
                                 "takes auto: the local rank's GPU if any, else the CPU)")
    augment: bool = setting(True, "random board symmetries on the train batches")
    eval_batch: int = setting(2048, "rows per forward pass when measuring the splits",
                              minimum=1)
    train_eval_rows: int = setting(4096, "train metrics on a fixed sample of this many rows",
                                   minimum=1)
    checkpoint_every: int = setting(0, "steps between mid-epoch checkpoints (0: only at epoch "
                                       "ends)", minimum=0)
    curve_every: int = setting(10, "steps between points of the training-loss curve (each the "
                                   "mean mini-batch loss since the last; 0: no curve)",
                               minimum=0)
    shuffle_buffer: int = setting(65536, "rows held by the streaming loader's shuffle buffer",
                                  minimum=0)
    num_threads: int = setting(
        DEFAULT_THREADS, f"torch intra-op threads (default {DEFAULT_THREADS}: one thread per "
                         "core collapses when another process holds a core; more on idle cores "
                         "or large networks; 0: leave the process's setting)", flag="threads",
        minimum=0, maximum=1024)
    # on a GPU the batches are pinned, so their copy to the device overlaps the step
    loader_workers: int = setting(0, "DataLoader worker processes feeding the step (0: batches "
                                     "are made in this process)", minimum=0, maximum=256)
    # a self-play loop trains each candidate from the serving network, not from random weights
    init_weights: str | None = setting(
        None, "weights file the model starts from when no checkpoint exists (any format "
              "services.models.weights reads: a trainer checkpoint, a state_dict, a flat "
              "vector; default: random weights drawn from the seed)")
    # A value head whose ReLU units all died gives one value everywhere and never learns
    # again (no gradient passes a dead unit): started from such weights, the run keeps the
    # trunk and policy and draws the head anew from the seed
    fresh_value_head: bool = setting(
        False, "with --init-weights: keep the trunk and policy, draw the value head anew from "
               "the seed (a head that went dead, `value_std` near 0, never learns again)")
    # Every position of a game shares its result: trained on all of them, a value head learns
    # to recognise games rather than judge positions (AlphaGo's value network overfit so, and
    # it and the BAKAGO report train on one position per game). k > 0 keeps each train row's
    # result with probability min(1, k / its game's rows) each epoch (the loader's value
    # sampling), so every game gives about k value targets an epoch. Default 0 (every row):
    # an expert dataset merges a position's occurrences into one row (its game id is only the
    # smallest of its games, so rows per game are not game lengths) and the published
    # supervised recipes trained on every row; the self-play loop, one row per search and few
    # games, sets 1 (`LoopSettings.value_per_game`).
    value_per_game: float = setting(
        0.0, "value targets per game and epoch: each row keeps its result with probability "
             "min(1, k / its game's rows), so long games do not teach the value head their "
             "own result (0: every row)", minimum=0)
    # an optional share of expert positions (an ingested records dataset of the same game and
    # size) mixed into every batch: self-play alone can drift into lines of its own, expert
    # rows keep the policy on human-like play; their game_test split is evaluated every epoch
    expert_dataset: str | None = setting(
        None, "dataset folder of expert positions (the ingest flow's shards): mixed into each "
              "batch at --expert-share, its game_test split evaluated every epoch")
    expert_share: float = setting(
        0.0, "share of each batch drawn from --expert-dataset's train split (0: none)",
        minimum=0, maximum=0.95)
    # experiment tracking (services/trainer/tracking.py): where the run is seen, not how it trains
    track: str = setting("none", "experiment tracking of the run's scalars, parameters and "
                                 "artefacts (mlflow: an MLflow store; none: off, nothing written)",
                         choices=TRACKERS)
    tracking_uri: str | None = setting(
        None, "MLflow store with --track mlflow: a folder (a local SQLite store there), or a "
              "URI (sqlite:///..., http://host:5000); default artifacts/mlruns")

    def __post_init__(self) -> None:
        # the command line refuses these with a usage error; a config built any other way (a
        # Prefect parameter, a deployment, code) is refused here, before anything is read
        check_settings(self)

    def step_limit(self) -> int:
        """The steps this run may take; 0: no step limit (see `max_steps`)."""
        if self.max_steps is None:
            return 0 if self.max_seconds > 0 else DEFAULT_MAX_STEPS
        if self.max_steps < 0:
            raise ValueError(f"max_steps must be >= 0 (0: no limit), got {self.max_steps}")
        return self.max_steps

    def for_game(self, game: str) -> TrainConfig:
        """This configuration with its model named: the game's default config when
        none is."""
        return self if self.model else replace(self, model=get_game(game).default_config)


@dataclass
class TrainResult:
    model: nn.Module
    config: TrainConfig
    metrics: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    # {"step", "loss"} every `curve_every` steps: the mean mini-batch loss since the last point
    curve: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        return {"config": asdict(self.config), "metrics": self.metrics}


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: damaged, or of another configuration or dataset."""


START_OVER = "delete it to start over (services.trainer.distributed: --fresh)"


def _scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig):
    if config.lr_schedule == "constant":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    if config.lr_schedule == "cosine":
        total = config.step_limit()
        if total == 0:
            raise ValueError("the cosine schedule decays to 0 at the step limit: give max_steps "
                             "(--steps) with it")
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, total) / total)))
    raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {config.lr_schedule!r}")


def save_checkpoint(path: Path, model, optimizer, scheduler, config: TrainConfig, state: dict,
                    history: list[dict]) -> None:
    """Write the checkpoint atomically and durably (a unique temporary name, fsynced, then
    renamed): a crash leaves the previous checkpoint, never an empty or torn one."""
    with atomic_path(path) as tmp:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "config": asdict(config),
                    "state": state, "history": history, "torch_rng": torch.get_rng_state()}, tmp)


# what torch.load and the restores raise on a file that is not a whole checkpoint of ours: cut
# short (EOFError, RuntimeError from the zip reader), other bytes, missing keys, wrong types
# (an OSError is the file system's, not the file's: reported without "start over")
_DAMAGED = (EOFError, RuntimeError, ValueError, KeyError, TypeError, AttributeError, IndexError)


def load_checkpoint(path: Path, model, optimizer, scheduler, config: TrainConfig):
    """Restore a checkpoint written by `save_checkpoint`. It holds only tensors and plain
    Python values (numbers, strings, lists, dicts), so it is read with ``weights_only=True``:
    a file that would need to run code to unpickle is refused, not executed. A damaged one is
    a CheckpointError saying so, never a traceback from deep inside torch."""
    try:
        ckpt = torch.load(path, map_location=config.device, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"{path}: not a plain trainer checkpoint (refused to unpickle "
                              f"anything but tensors and plain values): {exc}") from exc
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint ({exc})") from exc
    except _DAMAGED as exc:
        raise _damaged(path, exc) from exc
    try:
        saved_model = ckpt["config"]["model"]
    except _DAMAGED as exc:
        raise CheckpointError(f"{path}: not a trainer checkpoint (no config); {START_OVER}") \
            from exc
    if saved_model != config.model:
        raise CheckpointError(f"{path}: checkpoint is for model config "
                              f"{saved_model!r}, this run trains {config.model!r}")
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as exc:
        raise CheckpointError(f"{path}: weights do not fit {config.model!r}: {exc}") from exc
    except _DAMAGED as exc:
        raise CheckpointError(f"{path}: damaged checkpoint (no weights); {START_OVER}") from exc
    try:
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        torch.set_rng_state(ckpt["torch_rng"])
        state, history = dict(ckpt["state"]), list(ckpt["history"])
    except _DAMAGED as exc:
        raise _damaged(path, exc) from exc
    return state, history


def _damaged(path: Path, exc: BaseException) -> CheckpointError:
    return CheckpointError(f"{path}: damaged checkpoint ({type(exc).__name__}: "
                           f"{str(exc)[:200]}); {START_OVER}")


def value_loss(value: torch.Tensor, results: torch.Tensor) -> torch.Tensor:
    """Mean squared error of `value` against the mover's result (1 won -> +1, 0 lost -> -1,
    0.5 -> 0) over the rows whose result is known (NaN: unknown, no gradient); 0 if none is.
    Masked arithmetic rather than indexing: no host sync on a GPU."""
    known = ~torch.isnan(results)
    error = torch.where(known, value - value_target(results), torch.zeros_like(value))
    return (error * error).sum() / known.sum().clamp(min=1)


def policy_loss(logits: torch.Tensor, moves: torch.Tensor,
                targets: torch.Tensor | None = None) -> torch.Tensor:
    """Cross-entropy of the policy: on the played move without `targets`; with them (float
    [B, n_moves], each row a distribution or all zero: the loader's `targets`) the soft
    cross-entropy -sum(target * log softmax) averaged over the rows with a target, so a
    self-play row learns its search's visit distribution, a records' row (one-hot) its
    played move, and a fast-search row (zeros) nothing; 0 when no row has one. Masked
    arithmetic rather than indexing: no host sync on a GPU."""
    if targets is None:
        return nn.functional.cross_entropy(logits, moves)
    per_row = -(targets * torch.log_softmax(logits, dim=1)).sum(dim=1)
    weighted = (targets.sum(dim=1) > 0).to(per_row.dtype)
    return (per_row * weighted).sum() / weighted.sum().clamp(min=1)


Step = Callable[..., torch.Tensor]


def make_model(config: TrainConfig) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    """The configuration's fresh network on its device (channels-last on a GPU), the paper's Adam
    and the learning-rate schedule."""
    model = build(config.model).to(config.device)
    if config.device.startswith("cuda"):
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate,
                                 betas=(0.9, 0.999), eps=1e-8)
    return model, optimizer, _scheduler(optimizer, config)


def make_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
              config: TrainConfig) -> Step:
    """One optimisation step on a batch already on the device: bf16 autocast on a GPU (fp32 on
    CPU), policy cross-entropy (`policy_loss`: soft on policy targets when the batch has them)
    plus the weighted value loss when the model has a value head, gradient clipping. Returns
    the loss without reading it (no host sync). Shared by `train` and benchmarks/gpu_train.py,
    so the benchmark times the trainer's own step."""
    cuda = config.device.startswith("cuda")

    def step(boards: torch.Tensor, moves: torch.Tensor,
             results: torch.Tensor | None = None,
             targets: torch.Tensor | None = None) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            logits, value = split_outputs(model(boards))
        loss = policy_loss(logits.float(), moves, targets)
        if value is not None and results is not None:
            loss = loss + config.value_weight * value_loss(value.float(), results)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        scheduler.step()
        return loss

    return step


Encode = Callable[[torch.Tensor], torch.Tensor]


def batch_encoder(game: Game, encoder: str) -> Encode | None:
    """How a loader batch's boards (int8 [B, *game.input_shape], on the CPU) become the input
    of a model taking `encoder`: None for the basic encoder (the boards are that input: no
    call, no copy); else `Game.encode_inputs` on the batch's numpy view, pinned again when the
    batch was (so its copy to a GPU still overlaps the step). ValueError for an encoder the
    game does not have."""
    if encoder == BASIC_ENCODER:
        return None
    game.check_encoder(encoder)

    def encode(boards: torch.Tensor) -> torch.Tensor:
        out = torch.from_numpy(game.encode_inputs(boards.numpy(), encoder))
        return out.pin_memory() if boards.is_pinned() else out

    return encode


def to_device(batch: dict, device: str, encode: Encode | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(boards, moves, results or None) of a loader batch on `device`, copied asynchronously
    (the loader pins its batches when a GPU is present); with `encode` (`batch_encoder`), the
    boards are turned into the model's input first, on the CPU."""
    results = batch.get("results")
    boards = batch["boards"] if encode is None else encode(batch["boards"])
    return (boards.to(device, non_blocking=True),
            batch["moves"].to(device, non_blocking=True),
            None if results is None else results.to(device, non_blocking=True))


def mixed_batch(batch: dict, extra: dict) -> dict:
    """One batch of `batch`'s rows followed by `extra`'s (the expert share): every tensor both
    hold, concatenated on the CPU; `expert_rows` says how many rows came from `extra`."""
    out = {name: torch.cat([batch[name], extra[name]])
           for name in ("boards", "moves", "results", "targets") if name in batch}
    out["expert_rows"] = len(extra["moves"])
    return out


def batch_split(config: TrainConfig, world: int) -> tuple[int, int]:
    """(rows a step from the train split, rows from the expert dataset) for each rank:
    `expert_share` of the rank's batch, rounded, and at least one row of each."""
    rows = rank_batch(config.batch_size, world)
    if not config.expert_share:
        return rows, 0
    expert = round(config.expert_share * rows)
    if not 0 < expert < rows:
        raise ValueError(f"expert_share {config.expert_share} of a batch of {rows} rows (per "
                         f"rank) is {expert} rows: give a larger batch or another share")
    return rows - expert, expert


def batch_source(stream: ShardStream, config: TrainConfig) -> ShardStream | ShardLoader:
    """What the training loop iterates: the stream itself on CPU with no workers, else a
    `ShardLoader` (pinned batches on a GPU, `loader_workers` processes). Both resume from
    their `state_dict`."""
    cuda = config.device.startswith("cuda")
    if config.loader_workers == 0 and not cuda:
        return stream
    extra: dict[str, Any] = {}
    if config.loader_workers > 0:
        extra = {"persistent_workers": True, "prefetch_factor": 4}
    return ShardLoader(stream, num_workers=config.loader_workers, pin_memory=cuda, **extra)


class GameMismatchError(ValueError):
    """The model configuration is for another game than the dataset."""


def process_group() -> tuple[int, int]:
    """(rank, world size) of the initialised `torch.distributed` process group, (0, 1) without
    one: what decides whether `train` runs data-parallel."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_batch(batch_size: int, world_size: int) -> int:
    """Rows each rank takes per step for a global batch of `batch_size`."""
    if batch_size % world_size:
        raise ValueError(f"batch_size {batch_size} (the global batch) must be a multiple of the "
                         f"{world_size} ranks")
    return batch_size // world_size


def _agree(flag: bool, device: str) -> bool:
    """True on every rank when it is true on any (a time budget seen by one rank stops all)."""
    t = torch.tensor([int(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _restore_loader(state: dict, rank: int, world: int, stream: ShardStream) -> dict | None:
    """The loader state this rank resumes from, or None after positioning `stream` at the
    checkpoint's epoch (saved by another number of ranks: their positions do not apply here)."""
    saved = state.get("loader")
    if not saved:
        return None
    saved_world = int(state.get("world_size", 1))
    if saved_world == world:
        return state["rank_loaders"][rank] if world > 1 else saved
    if any(saved["batches"]):
        log.warning("checkpoint written by %d rank(s) in the middle of epoch %d, this run has "
                    "%d: the epoch starts over with this run's sharding (rows seen before the "
                    "checkpoint are seen again)", saved_world, saved["epoch"], world)
    stream.set_epoch(int(saved["epoch"]))
    return None


@dataclass
class _HeldOut:
    """This rank's share of every evaluated split, as (boards, moves, plies[, results]):
    `train` is a fixed sample of the train split, read by row id (the train split, 1.4 KB a
    row for 19x19 Go, need not fit in memory); `game_test` (whole held-out games, openings
    included: the figure a player meets) is None for datasets without held-out games."""

    train: tuple
    validation: tuple
    test: tuple
    game_test: tuple | None
    expert_game_test: tuple | None = None  # the expert dataset's held-out games


def _open_stream(dataset_dir: Path, config: TrainConfig, rank: int,
                 world: int) -> ShardStream:
    """This rank's stream over the train split (`check_run` has matched the model to it); with
    an expert share, its batches are the rest of the batch."""
    stream = ShardStream(dataset_dir, "train", batch_size=batch_split(config, world)[0],
                         shuffle_buffer=config.shuffle_buffer, seed=config.seed,
                         augment=config.augment, results=spec(config.model).value, rank=rank,
                         world_size=world, value_per_game=config.value_per_game)
    return stream


def _open_expert_stream(config: TrainConfig, stream: ShardStream, rank: int,
                        world: int) -> ShardStream | None:
    """This rank's stream over the expert dataset's train split, `batch_split`'s expert rows a
    batch, targets as the train stream has them (one-hot on the played move), or None without
    an expert share. Read in this process (no loader workers): a share of each batch."""
    rows = batch_split(config, world)[1]
    if not rows:
        return None
    return ShardStream(config.expert_dataset, "train", batch_size=rows,
                       shuffle_buffer=config.shuffle_buffer, seed=config.seed + 1,
                       augment=config.augment, results=spec(config.model).value, rank=rank,
                       world_size=world, targets=stream.targets,
                       value_per_game=config.value_per_game)


def _read_held_out(dataset_dir: Path, stream: ShardStream, config: TrainConfig, rank: int,
                   world: int) -> _HeldOut:
    """The rows every evaluation measures, this rank's share of each split (all: one rank)."""
    has_value = spec(config.model).value

    def share(rows: tuple) -> tuple:
        part = rank_share(len(rows[1]), rank, world)
        return tuple(column[part] for column in rows)

    val = share(read_split(dataset_dir, "validation", results=has_value))
    test = share(read_split(dataset_dir, "test", results=has_value))
    game_test = (share(read_split(dataset_dir, GAME_SPLIT, results=has_value))
                 if read_manifest(dataset_dir)["splits"].get(GAME_SPLIT) else None)
    expert = config.expert_dataset
    expert_test = (share(read_split(Path(expert), GAME_SPLIT, results=has_value))
                   if expert and read_manifest(Path(expert))["splits"].get(GAME_SPLIT)
                   else None)
    # ids sorted so that each row group is read once
    sample = np.sort(np.random.default_rng([config.seed, 1 << 20]).permutation(stream.rows)[
        :config.train_eval_rows])
    train_rows = stream.read_rows(sample[rank_share(len(sample), rank, world)],
                                  results=has_value)
    return _HeldOut(train_rows, val, test, game_test, expert_test)


class _Run:
    """One training run's moving parts and the jobs `train` does with them: resume, one epoch
    of steps with its budgets, evaluation, the end-of-epoch bookkeeping (early stopping, epoch
    budget), checkpoints and the final metrics."""

    def __init__(self, dataset_dir: Path, config: TrainConfig, stream: ShardStream,
                 held_out: _HeldOut, checkpoint: Path | None, progress: bool, rank: int,
                 world: int, tracker: Tracker | None = None) -> None:
        self.dataset_dir, self.config, self.stream = dataset_dir, config, stream
        self.tracker = tracker or Tracker()  # rank 0's tracking run, or calls doing nothing
        self.held_out, self.checkpoint, self.rank, self.world = held_out, checkpoint, rank, world
        self.limit = config.step_limit()
        self.has_value = spec(config.model).value
        self.stages = get_game(stream.game).stages
        # the input the model takes, made from the basic boards on the CPU (None: basic)
        self.encoder = spec(config.model).encoder
        self.encode = batch_encoder(get_game(stream.game), self.encoder)
        self.model, self.optimizer, self.scheduler = make_model(config)
        # DDP averages the gradients over the ranks during backward (and starts every rank from
        # rank 0's weights); evaluation and checkpoints use the bare model, whose state_dict
        # keys are the same at any number of ranks
        stepped: nn.Module = self.model
        if world > 1:
            cuda = config.device.startswith("cuda")
            stepped = DistributedDataParallel(
                self.model, device_ids=[torch.device(config.device).index] if cuda else None)
        self.step = make_step(stepped, self.optimizer, self.scheduler, config)
        # which version of the dataset the run trains on: a checkpoint resumes only on it
        self.state: dict = {"epoch": 0, "step": 0, "best_val_loss": float("inf"),
                            "bad_epochs": 0, "stopped": "", "loader": None, "curve": [],
                            "dataset_manifest_sha256": manifest_sha256(dataset_dir)}
        # the losses since the last curve point, summed on the device (no host sync a step)
        self._curve_sum: torch.Tensor | None = None
        self._curve_steps = 0
        self.history: list[dict] = []
        self.report = log.info if progress and rank == 0 else log.debug
        self.batches: ShardStream | ShardLoader = stream
        # the expert share of every batch (None: none), an endless cycle of its epochs
        self.expert = _open_expert_stream(config, stream, rank, world)
        self._expert_batches: Iterator[dict] | None = None
        if self.expert is not None:
            self.state["expert_manifest_sha256"] = manifest_sha256(Path(config.expert_dataset))
        self.done = 0  # batches of the epoch in progress already taken (by each rank)
        self.seen = 0  # rows this rank stepped on in this process
        self.start = self.last_report = time.perf_counter()
        self._curve_clock = (self.start, 0)  # (time, rows seen) at the last curve point

    def resume(self) -> None:
        """Continue from the checkpoint when there is one, and open the batch source at the
        loader position it holds; a fresh run starts from `init_weights` when given (a
        checkpoint wins: a resumed run has moved on from those weights)."""
        loader_state = None
        if self.checkpoint is not None and self.checkpoint.exists():
            dataset = self.state["dataset_manifest_sha256"]
            self.state, self.history = load_checkpoint(self.checkpoint, self.model,
                                                       self.optimizer, self.scheduler,
                                                       self.config)
            trained_on = self.state.setdefault("dataset_manifest_sha256", dataset)
            if trained_on != dataset:  # a re-ingest committed since: other rows, other ids
                raise CheckpointError(
                    f"{self.checkpoint}: began on another version of {self.dataset_dir} "
                    f"(manifest sha256 {str(trained_on)[:12]}, now {dataset[:12]}); "
                    f"{START_OVER}")
            self.state["stopped"] = ""  # a budget that stopped the last run may have been raised
            self.state.setdefault("curve", [])  # a checkpoint of a version without the curve
            partial, steps = self.state.get("curve_partial", [0.0, 0])
            if steps:
                self._curve_sum = torch.tensor(partial, dtype=torch.float32,
                                               device=self.config.device)
                self._curve_steps = steps
            loader_state = _restore_loader(self.state, self.rank, self.world, self.stream)
            self._restore_expert()
        elif self.config.init_weights:  # a fresh run starts from the given weights
            load_weights(self.model, self.config.init_weights)
            self.report("model initialised from %s", self.config.init_weights)
            if self.config.fresh_value_head:
                redraw_value_head(self.model, self.config.seed)
                self.report("value head drawn anew from seed %d", self.config.seed)
        self.batches = batch_source(self.stream, self.config)
        if loader_state:
            self.batches.load_state_dict(loader_state)
        self.done = sum(loader_state["batches"]) if loader_state else 0

    def _restore_expert(self) -> None:
        """Put the expert stream where the checkpoint left it (same dataset and number of
        ranks; otherwise it starts its pass over, which only reorders expert rows)."""
        if self.expert is None:
            return
        expert = self.config.expert_dataset
        now = manifest_sha256(Path(expert))
        saved = self.state.setdefault("expert_manifest_sha256", now)
        if saved != now:
            raise CheckpointError(f"{self.checkpoint}: began on another version of {expert} "
                                  f"(manifest sha256 {str(saved)[:12]}, now {now[:12]}); "
                                  f"{START_OVER}")
        positions = self.state.get("expert_loaders") or []
        if len(positions) == self.world:
            self.expert.load_state_dict(positions[self.rank])

    def next_expert(self) -> dict:
        """The next expert batch; a finished pass starts the next epoch's."""
        assert self.expert is not None
        for _ in range(2):
            if self._expert_batches is None:
                self._expert_batches = iter(self.expert)
            batch = next(self._expert_batches, None)
            if batch is not None:
                return batch
            self._expert_batches = None
        raise ValueError(f"{self.config.expert_dataset}: its train split gives no batch of "
                         f"{self.expert.batch_size} rows")

    def stop_if_spent(self) -> None:
        """A resumed run whose budgets are already spent (its step, epoch or patience limit
        reached) takes no step: a finished run rerun trained one more epoch each time."""
        state, config = self.state, self.config
        if self.limit and state["step"] >= self.limit:
            state["stopped"] = "max_steps"
        elif state["epoch"] >= config.max_epochs:
            state["stopped"] = "max_epochs"
        elif config.patience and state["bad_epochs"] >= config.patience:
            state["stopped"] = "early_stop"

    def log_start(self) -> None:
        """Start the clocks and log what the run is about to do."""
        config, stream, limit = self.config, self.stream, self.limit
        self.start = self.last_report = time.perf_counter()
        self.report("training %s on %s: %d train rows, batch %d, %s, %s, %d torch thread(s), "
                    "%s%s%s", config.model, self.dataset_dir, stream.rows, config.batch_size,
                    f"up to {limit} steps" if limit else "no step limit",
                    f"up to {config.max_seconds:g} s" if config.max_seconds else
                    "no time limit", torch.get_num_threads(), config.device,
                    f", {self.world} ranks ({dist.get_backend()}) of {stream.batch_size} rows "
                    "a step" if self.world > 1 else "",
                    f", resumed at step {self.state['step']}" if self.state["step"] else "")
        self._curve_clock = (self.start, self.seen)
        self.tracker.log_params({
            **asdict(config), "dataset_dir": str(Path(self.dataset_dir).resolve()),
            "dataset_manifest_sha256": self.state["dataset_manifest_sha256"],
            "game": stream.game, "train_rows": stream.rows, "world_size": self.world})

    def evaluate_splits(self) -> dict:
        """Loss, top-1, top-5 (and the value's figures) of every held-out split, over all
        ranks."""
        config, held = self.config, self.held_out

        def run(rows: tuple, plies: bool = True) -> dict:
            return evaluate(self.model, rows[0], rows[1], config.device,
                            rows[2] if plies else None, batch=config.eval_batch,
                            stages=self.stages, results=rows[-1] if self.has_value else None,
                            reduce=self.world > 1, game=self.stream.game,
                            encoder=self.encoder)
        out = {"train": run(held.train, plies=False), "validation": run(held.validation),
               "test": run(held.test)}
        if held.game_test is not None:
            out[GAME_SPLIT] = run(held.game_test)
        if held.expert_game_test is not None:
            out[EXPERT_GAME_SPLIT] = run(held.expert_game_test)
        return out

    def save(self) -> None:
        """Write the checkpoint (rank 0, with every rank's loader position); no-op without
        one."""
        if self.checkpoint is None:
            return
        state = self.state
        # the losses since the last curve point, so a resumed run draws the same curve
        state["curve_partial"] = [0.0 if self._curve_sum is None else float(self._curve_sum),
                                  self._curve_steps]
        if self.expert is not None:  # every rank's expert position
            expert = self.expert.state_dict()
            if self.world == 1:
                state["expert_loaders"] = [expert]
            else:
                gathered: list = [None] * self.world
                dist.all_gather_object(gathered, expert)
                state["expert_loaders"] = gathered
        if self.world == 1:
            state["loader"] = self.batches.state_dict()
            state.pop("rank_loaders", None)  # of a distributed run this one resumed
            state.pop("world_size", None)
            save_checkpoint(self.checkpoint, self.model, self.optimizer, self.scheduler,
                            self.config, state, self.history)
            return
        positions: list = [None] * self.world
        dist.all_gather_object(positions, self.batches.state_dict())
        if self.rank == 0:
            state["loader"], state["rank_loaders"], state["world_size"] = (
                positions[0], positions, self.world)
            save_checkpoint(self.checkpoint, self.model, self.optimizer, self.scheduler,
                            self.config, state, self.history)
        dist.barrier()  # the file is complete before any rank goes on (or exits)

    def _epoch_cap(self, epoch: int) -> int:
        """Batches every rank steps on in `epoch` (0: one rank, the whole pass). Distributed:
        ranks hold different row groups; all stop after the batches every rank has (the
        loader's num_batches for each rank), so none waits in a collective for good."""
        if self.world == 1:
            return 0
        stream = self.stream
        cap = min(stream.num_batches(self.config.loader_workers, epoch=epoch, rank=r)
                  for r in range(self.world))
        if not cap:
            raise ValueError(f"{self.dataset_dir}: a rank gets no full batch of "
                             f"{stream.batch_size} rows in epoch {epoch} ({stream.rows} train "
                             f"rows over {self.world} ranks): give a smaller batch or fewer "
                             "ranks")
        return cap

    def _over_budget(self) -> str:
        """The step or time budget this step used up ("" while none is): checked after a step,
        before the next batch is drawn, so a resumed run continues exactly where this one
        stopped."""
        if self.limit and self.state["step"] >= self.limit:
            return "max_steps"
        if self.config.max_seconds:
            over = time.perf_counter() - self.start > self.config.max_seconds
            if over if self.world == 1 else _agree(over, self.config.device):
                return "max_seconds"
        return ""

    def _progress(self, loss: torch.Tensor) -> None:
        """A progress line every `PROGRESS_EVERY_S` seconds (looked at every 50 steps)."""
        state = self.state
        if state["step"] % 50 or time.perf_counter() - self.last_report < PROGRESS_EVERY_S:
            return
        self.last_report = time.perf_counter()
        elapsed = self.last_report - self.start
        self.report("step %d%s, epoch %d: loss %.3f, %.0f samples/s", state["step"],
                    f"/{self.limit}" if self.limit else "", state["epoch"], loss.item(),
                    self.seen * self.world / max(elapsed, 1e-9))

    def _curve_point(self, loss: torch.Tensor) -> None:
        """Add the step's loss to the running sum; every `curve_every` steps append the mean
        since the last point to the curve (one host sync per point, none per step)."""
        every = self.config.curve_every
        if not every:
            return
        loss = loss.detach()
        self._curve_sum = loss if self._curve_sum is None else self._curve_sum + loss
        self._curve_steps += 1
        if self.state["step"] % every == 0:
            self.state["curve"].append({"step": self.state["step"],
                                        "loss": float(self._curve_sum) / self._curve_steps})
            self._curve_sum, self._curve_steps = None, 0
            self._track_point()

    def _track_point(self) -> None:
        """The tracker's scalars of a curve point: its loss, the samples/s of all ranks since
        the last point, the learning rate of the next step."""
        if not self.tracker.enabled:
            return
        now, (then, seen) = time.perf_counter(), self._curve_clock
        self._curve_clock = (now, self.seen)
        self.tracker.log_scalars(self.state["step"], {
            "batch/loss": self.state["curve"][-1]["loss"],
            "batch/samples_per_s": (self.seen - seen) * self.world / max(now - then, 1e-9),
            "batch/learning_rate": self.optimizer.param_groups[0]["lr"]})

    def run_epoch(self) -> bool:
        """Step through one epoch, or its rest; True when it ended (not stopped by a budget)."""
        config, state = self.config, self.state
        epoch_now = self.batches.epoch
        cap = self._epoch_cap(epoch_now)
        finished = True
        for batch in self.batches if not cap or self.done < cap else ():
            if self.expert is not None:
                batch = mixed_batch(batch, self.next_expert())
            b_t, m_t, r_t = to_device(batch, config.device, self.encode)
            targets = batch.get("targets")  # self-play shards: the soft policy targets
            loss = self.step(b_t, m_t, r_t, None if targets is None else
                             targets.to(config.device, non_blocking=True))
            state["step"] += 1
            self.done += 1
            self.seen += len(m_t)
            self._progress(loss)
            self._curve_point(loss)
            if config.checkpoint_every and state["step"] % config.checkpoint_every == 0:
                self.save()
            state["stopped"] = self._over_budget()
            if state["stopped"]:
                finished = False
                break
            if cap and self.done >= cap:
                break
        if cap and finished:  # leave the rest of this rank's pass unread
            self.batches.end_epoch(epoch_now)
        if finished:
            self.done = 0
        return finished

    def close_epoch(self, finished: bool) -> None:
        """Evaluate, record, decide early stopping and the epoch budget (on a finished epoch
        only), checkpoint."""
        state = self.state
        metrics = {"epoch": state["epoch"], "step": state["step"], "complete": finished,
                   **self.evaluate_splits()}
        self.history.append(metrics)
        self.tracker.log_scalars(state["step"], {"epoch": state["epoch"],
                                                 **split_scalars(metrics)})
        self.report("epoch %d%s at step %d: validation loss %.3f, top-1 %.3f; train top-1 %.3f%s",
                    state["epoch"], "" if finished else " (partial)", state["step"],
                    metrics["validation"]["loss"], metrics["validation"]["top1"],
                    metrics["train"]["top1"], value_line(metrics))
        if (dead := dead_value_head(metrics)) is not None:
            log.warning("the value head says nearly one value everywhere (spread %.3f on %s, "
                        "below %.2f): it has not learned yet or its units died; train on from "
                        "these weights with --fresh-value-head at a lower learning rate",
                        dead[1], dead[0], DEAD_VALUE_STD)
        self.last_report = time.perf_counter()
        if finished:
            val_loss = metrics["validation"]["loss"]
            if val_loss < state["best_val_loss"] - 1e-6:
                state["best_val_loss"], state["bad_epochs"] = val_loss, 0
            else:
                state["bad_epochs"] += 1
            state["epoch"] += 1
            if self.config.patience and state["bad_epochs"] >= self.config.patience:
                state["stopped"] = "early_stop"
            elif state["epoch"] >= self.config.max_epochs:
                state["stopped"] = "max_epochs"
        self.save()

    def result(self) -> TrainResult:
        """Close the batch source; the trained model (eval mode, contiguous) and the metrics of
        the last evaluation at the final step (evaluated now when there is none, e.g. on a
        resume of a run killed between its last step and its evaluation)."""
        if isinstance(self.batches, ShardLoader):
            self.batches.close()
        state, stream, world = self.state, self.stream, self.world
        elapsed = time.perf_counter() - self.start
        last = self.history[-1] if self.history else None
        if last is not None and last["step"] == state["step"] and "test" in last:
            final = {split: last[split] for split in EVALUATED_SPLITS if split in last}
        else:
            final = self.evaluate_splits()
            self.tracker.log_scalars(state["step"], split_scalars(final))
        # samples of all ranks: each took the same steps of the same per-rank batch
        metrics: dict = {
            "game": stream.game, "n_moves": stream.n_moves,
            "steps": state["step"], "epochs": state["epoch"], "stopped": state["stopped"],
            "seconds": round(elapsed, 2),
            "samples_per_s": round(self.seen * world / max(elapsed, 1e-9), 1),
            "train_rows": stream.rows, **({"world_size": world} if world > 1 else {}), **final,
        }
        self.report("stopped by %s after %d steps, %d epochs, %.1f s (%.0f samples/s)",
                    state["stopped"], state["step"], state["epoch"], elapsed,
                    metrics["samples_per_s"])
        self.model.eval()
        return TrainResult(model=self.model.to(memory_format=torch.contiguous_format),
                           config=self.config, metrics=metrics, history=self.history,
                           curve=list(state["curve"]))


def redraw_value_head(model: nn.Module, seed: int) -> None:
    """Draw `model`'s value head (`PolicyValue.value_head`) anew from `seed`, the rest kept
    (ValueError for a model without one)."""
    head = getattr(getattr(model, "module", model), "value_head", None)
    if head is None:
        raise ValueError("the model has no value head to draw anew")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for layer in head.modules():
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()


# the spread of a value head's outputs on held-out games below which it says one thing
# everywhere: a trained head spreads 0.2 or more, a dead one or an untrained one 0.01-0.02
DEAD_VALUE_STD = 0.05


def dead_value_head(metrics: dict) -> tuple[str, float] | None:
    """(split, spread) when the value head's outputs spread less than `DEAD_VALUE_STD` on the
    first held-out split that scores it (games held out whole first), else None."""
    for split in (GAME_SPLIT, EXPERT_GAME_SPLIT, "validation"):
        std = (metrics.get(split) or {}).get("value_std")
        if std is not None and math.isfinite(std):
            return (split, std) if std < DEAD_VALUE_STD else None
    return None


def value_line(metrics: dict) -> str:
    """The value head's figures on the held-out games for an epoch's log line ("" without a
    value head): MSE and the share of decisive games whose winner its sign names."""
    parts = [f"{split} value MSE {m['value_mse']:.3f}, sign {m['value_sign']:.3f}"
             for split in (GAME_SPLIT, EXPERT_GAME_SPLIT)
             if "value_mse" in (m := metrics.get(split) or {})]
    return "; " + "; ".join(parts) if parts else ""


def check_run(dataset_dir: str | Path, config: TrainConfig) -> TrainConfig:
    """`config` with its model named (the dataset's game's default when none is), once what can be
    known before training is right: a step limit for the cosine schedule, a model for the
    dataset's game taking one of its input encoders, validation and test splits of the train
    split's game and size, a train split of at least one batch. Reads the shards' metadata
    only, so a command line can refuse a run in one line before anything starts. Raises
    ValueError (`GameMismatchError` for a model of another game)."""
    if config.lr_schedule == "cosine" and not config.step_limit():
        raise ValueError("the cosine schedule decays to 0 at the step limit: give max_steps "
                         "(--steps) with it")
    plan = plan_split(Path(dataset_dir), "train")
    config = config.for_game(plan.game)
    model = spec(config.model)
    if config.fresh_value_head and not (config.init_weights and model.value):
        raise ValueError("fresh_value_head (--fresh-value-head) draws a loaded network's value "
                         "head anew: give --init-weights and a configuration with a value head "
                         "(a _v one)")
    if model.game != plan.game:
        game = get_game(plan.game)
        raise GameMismatchError(
            f"{dataset_dir} holds {plan.game} positions, model config {config.model!r} is for "
            f"{model.game}; pick a {game.title} configuration, e.g. {game.default_config} "
            "(services/models/configs.py)")
    try:
        get_game(plan.game).check_encoder(model.encoder)
    except ValueError as exc:
        raise ValueError(f"model config {config.model!r} takes an input its game does not "
                         f"have: {exc}") from exc
    # every evaluation measures validation and test: they must exist and be the train split's
    # game and size (else a traceback, or a shape error, after an epoch of training)
    for split in ("validation", "test"):
        held = plan_split(Path(dataset_dir), split)
        if (held.game, held.board_size) != (plan.game, plan.board_size):
            raise ValueError(f"{dataset_dir}: split {split!r} holds {held.game} "
                             f"{held.board_size}x{held.board_size} rows, the train split "
                             f"{plan.game} {plan.board_size}x{plan.board_size}")
    _check_expert(plan, config)
    # the loader drops a last partial batch: fewer rows than a batch would train no step
    # and still run every epoch's evaluation, then publish the untrained network
    if plan.rows < config.batch_size:
        raise ValueError(f"{dataset_dir}: {plan.rows} train rows give no batch of "
                         f"{config.batch_size}: give a smaller batch size (--batch-size)")
    return config


def _check_expert(plan: Any, config: TrainConfig) -> None:
    """The expert dataset, when one is named or a share asked for: its train split (with a
    share) and its game_test split (when it has one) hold the train split's game and size, and
    the share leaves rows of both kinds in a batch."""
    expert = config.expert_dataset
    if config.expert_share and not expert:
        raise ValueError("expert_share needs an expert dataset (expert_dataset, "
                         "--expert-dataset)")
    if not expert:
        return
    batch_split(config, 1)
    splits = read_manifest(Path(expert))["splits"]
    wanted = (["train"] if config.expert_share else []) + (
        [GAME_SPLIT] if splits.get(GAME_SPLIT) else [])
    for split in wanted:
        held = plan_split(Path(expert), split)
        if (held.game, held.board_size) != (plan.game, plan.board_size):
            raise ValueError(f"{expert}: its {split} split holds {held.game} "
                             f"{held.board_size}x{held.board_size} rows, the train split "
                             f"{plan.game} {plan.board_size}x{plan.board_size}")


def train(dataset_dir: Path, config: TrainConfig, progress: bool = True,
          checkpoint: Path | None = None, tracker: Tracker | None = None) -> TrainResult:
    """Train per `config`; with `checkpoint`, resume from it if present and keep it updated.
    A config naming no model trains the dataset's game's default (`Game.default_config`); the
    result's config names it.

    With `progress`, the run logs (INFO, logger ``services.trainer.train``) its budgets and
    threads, a line every `PROGRESS_EVERY_S` seconds, one per evaluation and how it stopped:
    the train flow forwards these lines to the Prefect run's log.

    Tracking (services/trainer/tracking.py): the run's scalars and parameters go to `tracker`
    when given (its owner finishes it and adds the artefacts), else, with `config.track` on,
    to a run opened here and finished at the end (only rank 0 logs)."""
    torch.manual_seed(config.seed)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    rank, world = process_group()
    config = check_run(dataset_dir, config)
    stream = _open_stream(dataset_dir, config, rank, world)
    held_out = _read_held_out(dataset_dir, stream, config, rank, world)
    with tracked(tracker, config.track, config.tracking_uri, game=stream.game,
                 run_name=config.model, rank=rank) as tracker:
        run = _Run(dataset_dir, config, stream, held_out, checkpoint, progress, rank, world,
                   tracker)
        run.resume()
        run.log_start()
        run.model.train()
        run.stop_if_spent()
        while not run.state["stopped"]:
            run.close_epoch(run.run_epoch())
        return run.result()
