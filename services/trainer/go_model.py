"""The served Go policy: TorchScript export of a `go_res_*` network and its publication.

Triton's ``go_policy`` model (model_repository/go_policy/config.pbtxt) takes compact int8 Go
inputs [N, 4, S, S] (`services.games.go.features.compact`, seen from the side to move; S from 9
to 19, one network for every size: it is fully convolutional) and answers float32 logits
[N, S * S + 1]: the points (y * S + x), then the pass. The export check runs at 19x19, and
publishing test-runs the file at 19x19 and 9x9 (`services.repository.model_check.check_shapes`).
A network with a value head (a ``go_res_*_v`` configuration, `services.models.value.PolicyValue`)
is served as well: its export returns ``(logits, value [N])``, which Triton answers as
``value``.

`export_go_torchscript` is the shared export (`services.models.export.export_torchscript`,
also the trainer's) with the Go inputs and shapes: the networks (`services.models.configs`:
``go_res_b2c32``, ``go_res_b6c96``, ...) already name forward's argument ``boards``, which the
stock PyTorch backend binds inputs by (deploy/triton-stock/go_policy), so they are scripted as
they are. The check runs on random Go planes plus real positions (random legal games replayed
with `GoState`, `sample_inputs`), and `publish_go_model` publishes the file as the next version
of ``go_policy``.

CLI::

    python -m services.trainer.go_model --repository model_repository \
        [--config go_res_b2c32] [--seed 0] [--checkpoint runs/go/train/checkpoint.pt]

publishes an untrained (seeded) network, or the weights of a trainer checkpoint, and prints the
version. The version's ``metadata.json`` carries the model card (`services.repository.model_card`):
with ``--dataset DIR`` the network's top-1/top-5 (by stage) on each split of that Go dataset,
measured by the trainer's metrics (`services.trainer.metrics.evaluate_dataset`), else the
checkpoint's last evaluation. It lives with the trainer because it reads the trainer's
checkpoints and measures with the trainer's metrics.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from services.defaults import MODEL_FILE
from services.games.base import BASIC_ENCODER
from services.games.go import features as go_features
from services.games.go.game import GO
from services.games.go.rules import GoState
from services.models.configs import build, spec
from services.models.export import ExportError, export_torchscript
from services.repository.model_card import build_card
from services.repository.publish import publish
from services.trainer.metrics import evaluate_dataset

DEFAULT_CONFIG = "go_res_b2c32"
DEFAULT_GO_MODEL_NAME = GO.default_model
GO_BOARD_SIZE = GO.default_size
GO_N_MOVES = GO.policy_size()


def sample_inputs(n: int, size: int = GO_BOARD_SIZE, seed: int = 0) -> np.ndarray:
    """Compact inputs int8 [n, 4, size, size] of positions from random legal games."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, go_features.COMPACT_CHANNELS, size, size), dtype=np.int8)
    state = GoState(size)
    for i in range(n):
        for _ in range(int(rng.integers(0, 12))):
            legal = np.flatnonzero(state.legal_mask())
            if len(legal) == 0 or state.is_over:
                state = GoState(size)
                continue
            state = state.play(int(rng.choice(legal)))
        out[i] = go_features.compact(state)
    return out


def build_go_model(config: str = DEFAULT_CONFIG, seed: int = 0,
                   checkpoint: Path | None = None) -> nn.Module:
    """A `config` Go network: seeded random weights, or those of a trainer checkpoint."""
    if spec(config).game != GO.name:
        raise ValueError(f"{config!r} is a {spec(config).game} configuration, not a Go one")
    torch.manual_seed(seed)
    model = build(config)
    if checkpoint is not None:
        # a trainer checkpoint holds only tensors and plain values (services/trainer/train.py):
        # weights_only refuses a file that would run code while it is unpickled
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"] if isinstance(state, dict) and "model" in state
                              else state)
    return model.eval()


def export_go_torchscript(model: nn.Module, path: Path, n_check: int = 16,
                          atol: float = 1e-4, seed: int = 0,
                          encoder: str = BASIC_ENCODER) -> float:
    """Script a Go `model` (logits [N, 362], or (logits, value [N]) with a value head),
    verify it on `n_check` random Go inputs and `n_check` real positions, both in the input
    `encoder` (the model's), save it; return the max abs diff over its outputs. Raises
    `ExportError`."""
    boards = sample_inputs(n_check, seed=seed)
    inputs = None  # the basic input: export_torchscript's own random planes
    if encoder != BASIC_ENCODER:
        boards = GO.encode_inputs(boards, encoder)
        inputs = GO.random_inputs(n_check, GO_BOARD_SIZE, seed, encoder=encoder)
    return export_torchscript(model, Path(path), board_size=GO_BOARD_SIZE, n_check=n_check,
                              atol=atol, seed=seed, game=GO.name, boards=boards,
                              n_moves=GO_N_MOVES, inputs=inputs)


def checkpoint_record(checkpoint: Path | None) -> tuple[dict | None, dict | None]:
    """(training recipe, metrics of its last evaluation) stored in a trainer checkpoint
    (`services.trainer.train.save_checkpoint`: ``config`` and ``history``); (None, None)
    without one or for a bare state_dict."""
    if checkpoint is None:
        return None, None
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or "model" not in state:
        return None, None
    history = state.get("history") or []
    last = history[-1] if history else {}
    metrics = {k: v for k, v in last.items() if isinstance(v, dict)} or None
    if metrics is not None:
        metrics.update(steps=last.get("step"), epochs=last.get("epoch"))
    return state.get("config"), metrics


def publish_go_model(
    repository: Path,
    config: str = DEFAULT_CONFIG,
    seed: int = 0,
    checkpoint: Path | None = None,
    model_name: str = DEFAULT_GO_MODEL_NAME,
    model: nn.Module | None = None,
    dataset: Path | None = None,
) -> int:
    """Export a Go network (given, or built per `config`/`seed`/`checkpoint`) and publish it
    as the next version of `model_name` with its model card; returns the version.

    The card's metrics: with `dataset`, the network evaluated on each of its splits now (as
    the trainer measures them); else those of the checkpoint's last evaluation; else none (an
    untrained network, said as such). Its ``source`` is the checkpoint, or the config and seed,
    never the temporary export folder."""
    net = model if model is not None else build_go_model(config, seed, checkpoint)
    encoder = spec(config).encoder
    recipe, metrics = checkpoint_record(checkpoint)
    source_of_metrics = "the training run's last evaluation (checkpoint)" if metrics else None
    if dataset is not None:
        metrics = evaluate_dataset(net.eval(), dataset, encoder=encoder)
        source_of_metrics = f"evaluated at publish time on {Path(dataset).resolve()}"
    if metrics is None:
        source_of_metrics = "none: an untrained network and no --dataset to evaluate it on"
    card = build_card(config_name=config, model=net, dataset_dir=dataset, recipe=recipe,
                      metrics=metrics, metrics_source=source_of_metrics)
    source = (str(Path(checkpoint).resolve()) if checkpoint else
              "given network" if model is not None else f"untrained {config}, seed {seed}")
    with tempfile.TemporaryDirectory(prefix="go-export-") as tmp:
        path = Path(tmp) / MODEL_FILE
        diff = export_go_torchscript(net, path, encoder=encoder)
        metadata = {**card, "game": GO.name, "seed": seed,
                    "checkpoint": str(Path(checkpoint).resolve()) if checkpoint else None,
                    "export_max_abs_diff": diff}
        return publish(path, Path(repository), model_name, metadata=metadata, source=source,
                       game=GO, encoder=encoder)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.trainer.go_model",
                                description="Publish a Go policy network as a go_policy version.")
    p.add_argument("--repository", type=Path, required=True, help="Triton model repository")
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"default {DEFAULT_CONFIG}")
    p.add_argument("--seed", type=int, default=0, help="weights seed (untrained network)")
    p.add_argument("--checkpoint", type=Path, default=None, help="trainer checkpoint to load")
    p.add_argument("--model-name", default=DEFAULT_GO_MODEL_NAME)
    p.add_argument("--dataset", type=Path, default=None,
                   help="Go dataset to evaluate the network on for its model card (top-1, "
                        "top-5, by stage, per split)")
    args = p.parse_args(argv)
    try:
        version = publish_go_model(args.repository, args.config, args.seed, args.checkpoint,
                                   args.model_name, dataset=args.dataset)
    except (ValueError, ExportError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"published {args.model_name} v{version} in {args.repository}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
