"""The served Go policy: TorchScript export of a `go_res_*` network and its publication.

Triton's ``go_policy`` model (model_repository/go_policy/config.pbtxt) takes compact int8 Go
inputs [N, 4, 19, 19] (`services.games.go_features.compact`, seen from the side to move) and
answers float32 logits [N, 362]: the 361 points (y * 19 + x), then the pass. A network with a
value head (a ``go_res_*_v`` configuration) is served as well: its export returns
``(logits, value [N])`` (`ServedGoPolicyValue`) and Triton answers the value as ``value``.

`ServedGoPolicy` wraps a Go network (`services.models.configs`: ``go_res_b2c32``,
``go_res_b6c96``, ...) so that forward's argument is named ``boards``, like the Gomoku export:
the stock PyTorch backend binds inputs by that name (deploy/triton-stock/go_policy). The
export checks that the scripted file reproduces the eager model on real positions (random
legal games replayed with `GoState`), and `publish_go_model` publishes it as the next version
of ``go_policy`` (the trainer's `export_torchscript` feeds Gomoku-shaped boards, so it cannot
export a Go network).

CLI::

    python -m services.triton.go_model --repository model_repository \
        [--config go_res_b2c32] [--seed 0] [--checkpoint runs/go/train/checkpoint.pt]

publishes an untrained (seeded) network, or the weights of a trainer checkpoint, and prints the
version.
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

from services.games import go_features
from services.games.go import GoState
from services.models.configs import build, spec
from services.triton.client import DEFAULT_GO_MODEL_NAME, GO_BOARD_SIZE, GO_N_MOVES

DEFAULT_CONFIG = "go_res_b2c32"


class ExportError(RuntimeError):
    """The scripted Go model does not reproduce the eager one (or is not a Go policy)."""


class ServedGoPolicy(nn.Module):
    """Compact Go inputs int8 [N, 4, 19, 19] ("boards") -> logits [N, 362] (last: pass)."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        return self.policy(boards)


class ServedGoPolicyValue(nn.Module):
    """As `ServedGoPolicy` for a network with a value head: -> (logits [N, 362], value [N])."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(boards)


def _outputs(out: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple) else [out]


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
    if spec(config).game != "go":
        raise ValueError(f"{config!r} is a {spec(config).game} configuration, not a Go one")
    torch.manual_seed(seed)
    model = build(config)
    if checkpoint is not None:
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"] if isinstance(state, dict) and "model" in state
                              else state)
    return model.eval()


def export_go_torchscript(model: nn.Module, path: Path, n_check: int = 16,
                          atol: float = 1e-4, seed: int = 0) -> float:
    """Script `model` behind `ServedGoPolicy` (`ServedGoPolicyValue` for a network with a
    value head), verify it, save it; return the max abs diff over its outputs."""
    model = model.to("cpu").eval()
    boards = torch.from_numpy(sample_inputs(n_check, seed=seed))
    with torch.no_grad():
        has_value = isinstance(model(boards[:1]), tuple)
    served = (ServedGoPolicyValue(model) if has_value else ServedGoPolicy(model)).eval()
    scripted = torch.jit.script(served)
    with torch.no_grad():
        eager = _outputs(served(boards))
        script_out = _outputs(scripted(boards))
    logits = script_out[0]
    if tuple(logits.shape) != (n_check, GO_N_MOVES):
        raise ExportError(f"Go policy gave {tuple(logits.shape)}, expected "
                          f"({n_check}, {GO_N_MOVES})")
    if has_value and tuple(script_out[1].shape) != (n_check,):
        raise ExportError(f"Go value head gave {tuple(script_out[1].shape)}, expected "
                          f"({n_check},)")
    if not all(torch.isfinite(t).all() for t in script_out):
        raise ExportError("scripted Go model produced NaN or Inf")
    diff = max(float((e - o).abs().max().item()) for e, o in zip(eager, script_out, strict=True))
    if diff > atol:
        raise ExportError(f"scripted Go model differs from eager by {diff:.3g} (> {atol})")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    scripted.save(str(path))
    with torch.no_grad():
        again = _outputs(torch.jit.load(str(path))(boards))
    if not all(torch.equal(a, b) for a, b in zip(again, script_out, strict=True)):
        raise ExportError(f"{path}: reloaded TorchScript file gives different outputs")
    return diff


def publish_go_model(
    repository: Path,
    config: str = DEFAULT_CONFIG,
    seed: int = 0,
    checkpoint: Path | None = None,
    model_name: str = DEFAULT_GO_MODEL_NAME,
    model: nn.Module | None = None,
) -> int:
    """Export a Go network (given, or built per `config`/`seed`/`checkpoint`) and publish it
    as the next version of `model_name`; returns the version."""
    from services.triton.publisher import publish

    net = model if model is not None else build_go_model(config, seed, checkpoint)
    with tempfile.TemporaryDirectory(prefix="go-export-") as tmp:
        path = Path(tmp) / "model.pt"
        diff = export_go_torchscript(net, path)
        metadata = {"game": "go", "config": config, "seed": seed,
                    "checkpoint": str(checkpoint) if checkpoint else None,
                    "export_max_abs_diff": diff}
        return publish(path, Path(repository), model_name, metadata=metadata)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.triton.go_model",
                                description="Publish a Go policy network as a go_policy version.")
    p.add_argument("--repository", type=Path, required=True, help="Triton model repository")
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"default {DEFAULT_CONFIG}")
    p.add_argument("--seed", type=int, default=0, help="weights seed (untrained network)")
    p.add_argument("--checkpoint", type=Path, default=None, help="trainer checkpoint to load")
    p.add_argument("--model-name", default=DEFAULT_GO_MODEL_NAME)
    args = p.parse_args(argv)
    try:
        version = publish_go_model(args.repository, args.config, args.seed, args.checkpoint,
                                   args.model_name)
    except (ValueError, ExportError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"published {args.model_name} v{version} in {args.repository}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
