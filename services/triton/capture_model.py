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

Weights (`read_weights`): a flat vector in the order of `get_flat` (``.npy`` holding the vector,
``.npz`` holding one array or one called ``weights``), or a ``.pt`` file loaded with
``weights_only``: a state_dict, or a checkpoint ``{"config", "model": state_dict, ...}`` such as
the policy search's ``best_network.pt`` (flows/capture_train.py), whose config is then the
network built. Without a file the network's seeded random weights are published (tests,
demonstrations).

CLI::

    python -m services.triton.capture_model --repository model_repository \
        [--weights runs/capture/grid/best_network.pt | --config capture_mdrnn_k2 --seed 0]
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

from services.defaults import MODEL_FILE
from services.games.base import BLACK, WHITE
from services.games.capture.game import CAPTURE
from services.models.configs import build, spec
from services.models.export import ExportError, export_torchscript
from services.repository.model_card import build_card
from services.repository.publish import publish

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


def read_weights(path: Path) -> tuple[str | None, np.ndarray | dict]:
    """(the network config the file names, None when it names none; its flat weight vector or
    state_dict); see the module docstring for the formats."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return None, np.load(path, allow_pickle=False)
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            names = list(data.keys())
            if "weights" in names:
                return None, data["weights"]
            if len(names) == 1:
                return None, data[names[0]]
        raise ValueError(f"{path} holds {names}: one array, or one called 'weights', is the "
                         "flat weight vector")
    held = torch.load(path, map_location="cpu", weights_only=True)
    config = None
    if isinstance(held, dict) and "model" in held:  # a checkpoint: {"config", "model", ...}
        config = held.get("config") if isinstance(held.get("config"), str) else None
        held = held["model"]
    if isinstance(held, torch.Tensor):  # a flat vector saved with torch.save
        return config, held.numpy()
    if not isinstance(held, dict):
        raise ValueError(f"{path} holds a {type(held).__name__}, not weights")
    return config, held


def load_weights(net: nn.Module, path: Path) -> None:
    """Load `path` into the sweep network `net`; ValueError for a file that holds no weights
    of `net`'s shape."""
    _, held = read_weights(path)
    if isinstance(held, dict):
        try:
            net.load_state_dict(held)
        except RuntimeError as exc:
            raise ValueError(f"{path}: {exc}") from exc
        return
    net.set_flat(torch.as_tensor(np.asarray(held, dtype=np.float32).reshape(-1)))


def resolve_config(config: str | None, weights: Path | None) -> str:
    """The network config to build: `config`, else the one the weights file names, else
    `DEFAULT_CONFIG`; ValueError when both name one and they differ, or it is not a Capture
    Game configuration."""
    named = read_weights(weights)[0] if weights is not None else None
    if config and named and config != named:
        raise ValueError(f"{weights} holds a {named} network, not {config}")
    config = config or named or DEFAULT_CONFIG
    if spec(config).game != CAPTURE.name:
        raise ValueError(f"{config!r} is a {spec(config).game} configuration, not a "
                         f"{CAPTURE.title} one")
    return config


def build_capture_model(config: str | None = None, seed: int = 0,
                        weights: Path | None = None) -> CapturePolicy:
    """The served module around a `config` network (`resolve_config`): seeded random
    weights, or `weights`."""
    net = build(resolve_config(config, weights))
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


def policy_search_record(weights: Path | None) -> dict | None:
    """The policy search's figures stored with a ``best_network.pt`` (flows/capture_train.py:
    fitness, board size, run), as the card's metrics; None for other weight files. The
    Capture Game's networks are trained by fitness, not on a dataset: no top-1 applies."""
    if weights is None or Path(weights).suffix != ".pt":
        return None
    held = torch.load(weights, map_location="cpu", weights_only=True)
    if not isinstance(held, dict) or "fitness" not in held:
        return None
    return {"policy_search": {k: held[k] for k in ("fitness", "board_size", "run") if k in held}}


def publish_capture_model(repository: Path, config: str | None = None, seed: int = 0,
                          weights: Path | None = None,
                          model_name: str = DEFAULT_MODEL_NAME) -> int:
    """Export a Capture Game network (`config` with `weights`, else seeded random weights;
    `resolve_config`) and publish it as the next version of `model_name`; returns it."""
    config = resolve_config(config, weights)
    model = build_capture_model(config, seed, weights)
    metrics = policy_search_record(weights)
    card = build_card(
        config_name=config, model=model.net, metrics=metrics,
        metrics_source=("the policy search's final fitness (its best_network.pt)" if metrics
                        else "none: random weights, or a weights file without its fitness"))
    source = str(Path(weights).resolve()) if weights else f"random {config} weights, seed {seed}"
    with tempfile.TemporaryDirectory(prefix="capture-export-") as tmp:
        path = Path(tmp) / MODEL_FILE
        diff = export_capture_torchscript(model, path)
        metadata = {**card, "game": CAPTURE.name, "seed": seed,
                    "weights": str(Path(weights).resolve()) if weights else None,
                    "export_max_abs_diff": diff}
        version = publish(path, Path(repository), model_name, metadata=metadata, source=source,
                          game=CAPTURE)
    log.info("published %s v%d (%s, %s)", model_name, version, config,
             weights or f"random weights, seed {seed}")
    return version


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m services.triton.capture_model",
        description=f"Publish a {CAPTURE.title} network as a {DEFAULT_MODEL_NAME} version.")
    p.add_argument("--repository", type=Path, required=True, help="Triton model repository")
    p.add_argument("--config", default=None,
                   help=f"network config (default: the one the weights file names, else "
                        f"{DEFAULT_CONFIG})")
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
