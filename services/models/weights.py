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
  ``fitness``, ``board_size``, ``run``);
* a per-size file: one network per board size, ``{"config": name, "sizes": {"5": entry, "7":
  entry, ...}}``, each entry a ``best_network.pt``'s content (``{"model": state_dict,
  "fitness", "board_size", "run"}``) or a bare state_dict (`write_per_size` assembles one from
  several ``best_network.pt`` files). `network` builds it as one `PerSize` module, which plays
  each board with the network trained for its size: a network retrained size by size plays
  only its last size (the Capture Game's incremental scaling, docs/capture_game.md).

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

from services.atomic_files import atomic_path
from services.games.registry import get_game
from services.models.configs import spec
from services.models.per_size import PerSize


@dataclass(frozen=True)
class WeightsFile:
    """What `read_weights` found in a file."""

    path: Path
    weights: np.ndarray | dict  # a flat vector, or a state_dict
    config: str | None = None  # the configuration the file names, None when it names none
    recipe: dict | None = None  # the trainer's recipe (TrainConfig as a dict)
    metrics: dict | None = None  # the figures recorded with the weights (a model card's)
    metrics_source: str | None = None  # where those figures come from, in words
    # a per-size file: each size's weights (`weights` is then empty); None: one network
    sizes: dict[int, dict] | None = None


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
    if isinstance(held, dict) and "sizes" in held:
        return _per_size(path, held)
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


def _per_size(path: Path, held: dict) -> WeightsFile:
    """A per-size file's networks, the configuration it names and each size's recorded
    fitness; ValueError for an entry that is not one size's weights."""
    sizes: dict[int, dict] = {}
    metrics: dict[str, dict] = {}
    entries = held["sizes"]
    if not isinstance(entries, dict) or not entries:
        raise ValueError(f"{path}: 'sizes' holds no networks (one state_dict per board size)")
    for key, entry in entries.items():
        try:
            size = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"{path}: size {key!r} is not a board size") from None
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: size {size} holds a {type(entry).__name__}, not weights")
        if "model" in entry:
            recorded = entry.get("board_size")
            if recorded is not None and int(recorded) != size:
                raise ValueError(f"{path}: the network filed as size {size} was trained on "
                                 f"{recorded}x{recorded}")
            figures = {k: entry[k] for k in ("fitness", "board_size", "run") if k in entry}
            if figures:
                metrics[f"policy_search_{size}x{size}"] = figures
            entry = entry["model"]
        sizes[size] = entry
    config = held.get("config")
    return WeightsFile(path, {}, config if isinstance(config, str) else None, None,
                       metrics or None,
                       "each size's policy search final fitness (its best_network.pt)"
                       if metrics else None, dict(sorted(sizes.items())))


def write_per_size(files: dict[int, Path | str], out: Path | str) -> Path:
    """Write the per-size file `out` of `files` (board size -> a ``best_network.pt`` or
    another single-network weights file that `read_weights` reads as a state_dict), each kept
    with what it records; ValueError when they name different configurations, one holds a
    flat vector or a per-size file, or a network was trained on another size than its key."""
    configs, entries = set(), {}
    for size, file in sorted(files.items()):
        held: Any = torch.load(Path(file), map_location="cpu", weights_only=True)
        if isinstance(held, dict) and "sizes" in held:
            raise ValueError(f"{file} is a per-size file already; give one network per size")
        if isinstance(held, dict) and "model" in held:
            if isinstance(held.get("config"), str):
                configs.add(held["config"])
            entry = {k: v for k, v in held.items() if k != "config"}
        elif isinstance(held, dict):
            entry = {"model": held}
        else:
            raise ValueError(f"{file}: a state_dict or a best_network.pt per size, got a "
                             f"{type(held).__name__}")
        recorded = entry.get("board_size")
        if recorded is not None and int(recorded) != int(size):
            raise ValueError(f"{file} was trained on {recorded}x{recorded}, given for "
                             f"{size}x{size}")
        entries[str(int(size))] = entry
    if len(configs) > 1:
        raise ValueError(f"the networks are of different configurations: {sorted(configs)}")
    held_out: dict[str, Any] = {"sizes": entries}
    if configs:
        held_out["config"] = configs.pop()
    out = Path(out)
    with atomic_path(out) as tmp:
        torch.save(held_out, tmp)
    return out


def load_weights(net: nn.Module, weights: WeightsFile | Path | str) -> None:
    """Load a weights file into `net`; ValueError for one that holds no weights of `net`'s
    shape."""
    found = weights if isinstance(weights, WeightsFile) else read_weights(weights)
    if found.sizes is not None:
        raise ValueError(f"{found.path} holds one network per board size "
                         f"({', '.join(map(str, found.sizes))}), not one network")
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
    (`ModelSpec.network`), or those of a weights file; a per-size file gives a `PerSize` of
    one such network per size (ValueError for a size its game does not serve)."""
    if weights is not None and not isinstance(weights, WeightsFile):
        weights = read_weights(weights)
    if weights is not None and weights.sizes is not None:
        found = spec(config)
        game = get_game(found.game)
        nets = {}
        served = game.sizes
        for size, state in weights.sizes.items():
            if size not in served:
                raise ValueError(f"{weights.path}: a {size}x{size} network; {game.title} is "
                                 f"served on sizes {', '.join(map(str, served))}")
            net = found.network(seed)
            load_weights(net, WeightsFile(weights.path, state))
            nets[size] = net
        return PerSize(nets).eval()
    net = spec(config).network(seed)
    if weights is not None:
        load_weights(net, weights)
    return net.eval()
