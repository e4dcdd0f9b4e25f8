"""Weight files: a network of a named configuration, seeded or loaded from a file, and what the
file records about how the weights were made.

A weights file (`read_weights`) is one of

* a flat vector in the order of the network's ``parameters()`` (each flattened row-major: the
  policy search's `get_flat` order): ``.npy`` holding the vector, ``.npz`` holding one array
  or one called ``weights``, or a tensor saved with ``torch.save``;
* a ``.pt`` file holding a state_dict, or a checkpoint ``{"model": state_dict, ...}``: the
  trainer's (`services.trainer.train.save_checkpoint`: ``config`` its recipe, whose ``model``
  names the configuration, ``history`` its evaluations) or the policy search's
  ``best_network.pt`` (flows/capture_train.py: ``config`` the configuration's name,
  ``fitness``, ``board_size``, ``run``).

A ``.pt`` file is read with ``weights_only=True``: one that would run code while it is
unpickled is refused (`pickle.UnpicklingError`), never executed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from services.models.configs import spec


@dataclass(frozen=True)
class WeightsFile:
    """What `read_weights` found in a file."""

    path: Path
    weights: np.ndarray | dict  # a flat vector, or a state_dict
    config: str | None = None  # the configuration the file names, None when it names none
    recipe: dict | None = None  # the trainer's recipe (TrainConfig as a dict)
    metrics: dict | None = None  # the figures recorded with the weights (a model card's)
    metrics_source: str | None = None  # where those figures come from, in words


def _recorded(held: dict) -> tuple[dict | None, dict | None, str | None]:
    """(recipe, metrics, their source) recorded in a checkpoint: the trainer's last evaluation
    (its ``history``), or the policy search's fitness (the Capture Game's networks are
    trained by fitness, not on a dataset: no top-1 applies)."""
    recipe = held.get("config") if isinstance(held.get("config"), dict) else None
    if "fitness" in held:
        figures = {k: held[k] for k in ("fitness", "board_size", "run") if k in held}
        return recipe, {"policy_search": figures}, \
            "the policy search's final fitness (its best_network.pt)"
    history = held.get("history") or []
    last = history[-1] if history and isinstance(history[-1], dict) else {}
    metrics = {k: v for k, v in last.items() if isinstance(v, dict)} or None
    if metrics is None:
        return recipe, None, None
    metrics.update(steps=last.get("step"), epochs=last.get("epoch"))
    return recipe, metrics, "the training run's last evaluation (checkpoint)"


def read_weights(path: Path | str) -> WeightsFile:
    """The weights in `path` and what it records (see the module docstring); ValueError for a
    file that holds no weights."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return WeightsFile(path, np.load(path, allow_pickle=False))
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            names = list(data.keys())
            if "weights" in names:
                return WeightsFile(path, data["weights"])
            if len(names) == 1:
                return WeightsFile(path, data[names[0]])
        raise ValueError(f"{path} holds {names}: one array, or one called 'weights', is the "
                         "flat weight vector")
    held: Any = torch.load(path, map_location="cpu", weights_only=True)
    config = recipe = metrics = source = None
    if isinstance(held, dict) and "model" in held:  # a checkpoint
        named = held.get("config")
        config = named if isinstance(named, str) else (
            named.get("model") if isinstance(named, dict) else None)
        recipe, metrics, source = _recorded(held)
        held = held["model"]
    if isinstance(held, torch.Tensor):  # a flat vector saved with torch.save
        held = held.numpy()
    elif not isinstance(held, dict):
        raise ValueError(f"{path} holds a {type(held).__name__}, not weights")
    return WeightsFile(path, held, config if isinstance(config, str) else None, recipe,
                       metrics, source)


def load_weights(net: nn.Module, weights: WeightsFile | Path | str) -> None:
    """Load a weights file into `net`; ValueError for one that holds no weights of `net`'s
    shape."""
    found = weights if isinstance(weights, WeightsFile) else read_weights(weights)
    if isinstance(found.weights, dict):
        try:
            net.load_state_dict(found.weights)
        except RuntimeError as exc:
            raise ValueError(f"{found.path}: {exc}") from exc
        return
    flat = torch.as_tensor(np.asarray(found.weights, dtype=np.float32).reshape(-1))
    count = sum(p.numel() for p in net.parameters())
    if flat.numel() != count:
        raise ValueError(f"{found.path}: a flat vector of {count} weights, got "
                         f"{flat.numel()}")
    with torch.no_grad():
        nn.utils.vector_to_parameters(flat, net.parameters())


def network(config: str, seed: int = 0, weights: WeightsFile | Path | str | None = None
            ) -> nn.Module:
    """A `config` network in eval mode: random weights drawn from `seed`
    (`ModelSpec.network`), or those of a weights file."""
    net = spec(config).network(seed)
    if weights is not None:
        load_weights(net, weights)
    return net.eval()
