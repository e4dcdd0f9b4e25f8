"""Where a run starts when it does not start from random weights: given weights, for the
paper's incremental scaling (train on 5x5, take the network up to 7x7, retrain, and so on).

Why this works for the Capture Game's networks: an MDRNN/MDLSTM is one cell swept over the
grid, so its weights do not depend on the board size; a 5x5 network is a 7x7 network as it
stands, and "scaling up" is starting the next size's search from the previous size's weights.

A start file is either

* a weights file (`services.models.weights.read_weights`: the flow's ``best_network.pt``, a
  state_dict, a flat vector as ``.npy``/``.npz``): the start is its weights; or
* a run's checkpoint (``OUT/runs/<run>.pkl`` of `services.policy_search.runs`): the start is
  its optimiser's mean (the network the run deploys), and it also has the optimiser's search
  widths per weight (PGPE's sigma, CMA-ES's sigma * sqrt(diag C)), which a PGPE run may keep
  instead of resetting to its sigma_0 (`RunSpec.keep_sigma`).

A run checkpoint is a pickle, read as `runs.load_state` reads them: only files this code wrote
belong there. The weights are checked against the network: a start of another network's
length is a ValueError naming the file, before any game is played.
"""

from __future__ import annotations

import pickle
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from services.models.configs import build
from services.models.weights import load_weights, read_weights

CHECKPOINT_SUFFIX = ".pkl"


@dataclass(frozen=True)
class Start:
    """A run's start: the flat weights, and the search widths per weight where the file
    holds an optimiser (None for a plain weights file)."""

    path: Path
    weights: np.ndarray
    widths: np.ndarray | None

    @property
    def tag(self) -> str:
        """8 hex digits naming the weights (their CRC-32): a run from other weights is another
        cell, with random streams of its own."""
        return f"{zlib.crc32(np.ascontiguousarray(self.weights, np.float64).tobytes()):08x}"


def _widths(optimiser: object) -> np.ndarray | None:
    """The optimiser's search widths per weight: PGPE's sigma, CMA-ES's stds, the running
    optimiser's for a hand-off or a scouted start; None for one that has none (the ES's
    widths are per individual)."""
    for wrapped in ("current", "inner"):  # `handoff.Handoff`, `scout.Scouted`
        inner = getattr(optimiser, wrapped, None)
        if inner is not None and inner is not optimiser:
            return _widths(inner)
    for name in ("stds", "sigma"):
        value = getattr(optimiser, name, None)
        if isinstance(value, np.ndarray):
            return value.astype(np.float64).copy()
    return None


@lru_cache(maxsize=32)
def read_start(path: str, config: str) -> Start:
    """The start in `path` (see the module docstring) for a network of configuration `config`
    (`services.models.configs`); ValueError when the file holds no weights of that network."""
    file = Path(path)
    net = build(config)
    net_size = net.n_weights()
    if not file.is_file():
        raise ValueError(f"start weights {file}: no such file")
    if file.suffix.lower() == CHECKPOINT_SUFFIX:
        with file.open("rb") as f:
            state = pickle.load(f)
        if not isinstance(state, dict) or "optimiser" not in state:
            raise ValueError(f"{file}: not a policy-search run checkpoint")
        optimiser = state["optimiser"]
        weights = np.asarray(optimiser.mean, dtype=np.float64).reshape(-1)
        widths = _widths(optimiser)
    else:
        found = read_weights(file)
        if found.config is not None and found.config != config:
            raise ValueError(f"{file} holds a {found.config} network, the run a {config}")
        if isinstance(found.weights, dict):
            load_weights(net, found)
            weights = net.get_flat().detach().double().numpy()
        else:
            weights = np.asarray(found.weights, dtype=np.float64).reshape(-1)
        widths = None
    if weights.shape != (net_size,):
        raise ValueError(f"{file}: {weights.size} weights, the network has {net_size}")
    if not np.all(np.isfinite(weights)):
        raise ValueError(f"{file}: weights that are not finite")
    return Start(file, weights, widths)

