"""The served Capture Game policy: an MDRNN or MDLSTM behind the game's network input, its
TorchScript export and its publication.

Triton's Capture Game model (`CAPTURE.default_model`, model_repository/capture_policy) takes
what the game's positions give (`CaptureGame.network_input`): the int8 board [N, S, S] (0
empty, 1 black, 2 white; S from 5 to 9) and answers float32 logits [N, S * S] (y * S + x, no
pass). The networks (`services.models.mdrnn`) take (own, opponent) planes seen from the side
to move and answer a preference in (0, 1) per point; `CapturePolicy` puts the two together:

* the side to move is black when both colours have as many stones (no stone leaves the board
  in a game that goes on), and the planes are those of the policy search's games
  (`services.policy_search.fitness.planes`), so a trained vector plays here as it was trained;
* the logits are the preferences' log-odds, ``log(p / (1 - p))``, the network's output before
  its sigmoid: the order of the points is the network's, and the search service's softmax
  over them is the sigmoid's own scale rather than a near-uniform softmax of numbers in (0, 1).
  A preference is first clamped to [2^-24, 1 - 2^-24] (float32's last steps below 1), so a
  saturated one gives a finite logit (about +-16.6): only points the network already scores
  as exactly 1.0, or below 6e-8, become ties.

`export_capture_torchscript` scripts it and checks scripted == eager on random boards of every
served size (`CAPTURE.sizes`), with the logits' shape per size; `publish_capture_model`
publishes the file as the next version of the game's model.

Weights (`load_weights`): a flat vector in the order of `get_flat` (``.npy`` holding the vector,
``.npz`` holding one array or one called ``weights``: what the policy search keeps of its best
network), or a state_dict of the network (``.pt``, loaded with ``weights_only``). Without a file
the network's seeded random weights are published (tests, demonstrations).

CLI::

    python -m services.triton.capture_model --repository model_repository \
        [--config capture_mdlstm_k2] [--seed 0] [--weights runs/capture/best.npy]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from services.games.base import BLACK, WHITE
from services.games.capture_game import CAPTURE
from services.models.configs import build, spec
from services.models.export import ExportError, export_torchscript

log = logging.getLogger(__name__)

DEFAULT_CONFIG = CAPTURE.default_config
DEFAULT_MODEL_NAME = CAPTURE.default_model
# float32's largest step below 1: a preference is clamped to [EPS, 1 - EPS] before its log-odds
EPS = 2.0 ** -24


class CapturePolicy(nn.Module):
    """int8 boards [N, S, S] (0 empty, 1 black, 2 white) -> logits [N, S * S]: the sweep
    network's preferences for the side to move, as log-odds (see the module docstring)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        # module attributes: TorchScript reads no module-level numbers
        self.black, self.white, self.eps = BLACK, WHITE, EPS

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        n = boards.shape[0]
        cells = boards.to(torch.int64)
        black = (cells == self.black).reshape(n, -1).sum(1)
        white = (cells == self.white).reshape(n, -1).sum(1)
        mover = torch.where(black == white, torch.full_like(black, self.black),
                            torch.full_like(black, self.white))[:, None, None]
        own = cells == mover
        opponent = (cells != 0) & (cells != mover)
        scores = self.net(torch.stack([own, opponent], dim=1).float())
        p = scores.clamp(self.eps, 1.0 - self.eps)
        return (torch.log(p) - torch.log1p(-p)).reshape(n, -1)


def load_weights(net: nn.Module, path: Path) -> None:
    """Load `path` into the sweep network `net` (see the module docstring for the formats);
    ValueError for a file that holds no weights of `net`'s shape."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        flat = np.load(path, allow_pickle=False)
    elif suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            names = list(data.keys())
            if "weights" in names:
                flat = data["weights"]
            elif len(names) == 1:
                flat = data[names[0]]
            else:
                raise ValueError(f"{path} holds {names}: one array, or one called "
                                 "'weights', is the flat weight vector")
    if suffix in (".npy", ".npz"):
        net.set_flat(torch.as_tensor(np.asarray(flat, dtype=np.float32).reshape(-1)))
        return
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "model" in state:
        state = state["model"]
    if isinstance(state, torch.Tensor):  # a flat vector saved with torch.save
        net.set_flat(state.reshape(-1))
        return
    net.load_state_dict(state)


def build_capture_model(config: str = DEFAULT_CONFIG, seed: int = 0,
                        weights: Path | None = None) -> CapturePolicy:
    """The served module around a `config` network: seeded random weights, or `weights`."""
    if spec(config).game != CAPTURE.name:
        raise ValueError(f"{config!r} is a {spec(config).game} configuration, not a "
                         f"{CAPTURE.title} one")
    net = build(config)
    if weights is None:
        with torch.no_grad():  # the configs build from one fixed seed: `seed` draws anew
            net.set_flat(torch.randn(net.n_weights(), generator=torch.Generator()
                                     .manual_seed(seed)))
    else:
        load_weights(net, weights)
    return CapturePolicy(net).eval()


def export_capture_torchscript(model: nn.Module, path: Path, n_check: int = 32,
                               atol: float = 1e-4, seed: int = 0) -> float:
    """Script `model`, check scripted == eager (and logits [N, S * S]) on `n_check` random
    boards of every served size, save it; return the largest difference. Raises ExportError."""
    diff = 0.0
    for size in CAPTURE.sizes:
        diff = max(diff, export_torchscript(
            model, Path(path), board_size=size, n_check=n_check, atol=atol, seed=seed + size,
            game=CAPTURE.name, n_moves=CAPTURE.policy_size(size)))
    return diff


def publish_capture_model(repository: Path, config: str = DEFAULT_CONFIG, seed: int = 0,
                          weights: Path | None = None,
                          model_name: str = DEFAULT_MODEL_NAME) -> int:
    """Export a Capture Game network (`config` with `weights`, else seeded random weights) and
    publish it as the next version of `model_name`; returns the version."""
    from services.triton.publisher import publish

    model = build_capture_model(config, seed, weights)
    with tempfile.TemporaryDirectory(prefix="capture-export-") as tmp:
        path = Path(tmp) / "model.pt"
        diff = export_capture_torchscript(model, path)
        metadata = {"game": CAPTURE.name, "config": config, "seed": seed,
                    "weights": str(weights) if weights else None,
                    "export_max_abs_diff": diff}
        version = publish(path, Path(repository), model_name, metadata=metadata)
    log.info("published %s v%d (%s, %s)", model_name, version, config,
             weights or f"random weights, seed {seed}")
    return version


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m services.triton.capture_model",
        description=f"Publish a {CAPTURE.title} network as a {DEFAULT_MODEL_NAME} version.")
    p.add_argument("--repository", type=Path, required=True, help="Triton model repository")
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"default {DEFAULT_CONFIG}")
    p.add_argument("--seed", type=int, default=0, help="weights seed (without --weights)")
    p.add_argument("--weights", type=Path, default=None,
                   help="flat weight vector (.npy, .npz) or state_dict (.pt) of the network")
    p.add_argument("--model-name", default=DEFAULT_MODEL_NAME)
    args = p.parse_args(argv)
    try:
        version = publish_capture_model(args.repository, args.config, args.seed, args.weights,
                                        args.model_name)
    except (ValueError, ExportError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"published {args.model_name} v{version} in {args.repository}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
