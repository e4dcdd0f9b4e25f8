"""What a game hands the compiled search tree: its rules as numba kernels, and a position as
arrays (`Game.search_kernels`, `Game.search_position`).

Why: the search's tree work per playout (play a move, classify the new node, build its network
input) is the game's; interpreted, with a `Position` object per node, it costs 100-300 µs a
playout. The compiled tree (`services.search.compiled_tree`) keeps every node's position as a
row of arrays and calls these kernels, compiled into its own loops, so a playout stays in
machine code from the root to the leaf.

A node's position is `cells` (int8, one row per node: the board, flat) and `aux` (int64, one
row per node: the few scalars the game needs, e.g. the side to move, the ko point); what is the
same in the whole tree (board size, rule, komi, tables) is `iparams` (int64) and `fparams`
(float64). The kernels, all `numba` njit functions:

* ``play(cells, aux, move, out_cells, out_aux, iparams, fparams)``: the position after
  `move` (a legal candidate of the node) into the out rows;
* ``classify(cells, aux, iparams, fparams, legal, candidates) -> (kind, n, value)``: what
  `Game.expand` says: `KIND_TERMINAL` (the game is over, `value` to the player who moved into
  the node), `KIND_PROVEN` (the side to move wins at once with any of `candidates[:n]`) or
  `KIND_OPEN` (search `candidates[:n]`, ascending); `legal` (bool over the policy) is filled
  for every node that is not terminal;
* ``encode(cells, aux, iparams, fparams, out)``: the network input (`Game.network_input`),
  flat int8.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from services.compiled import kernel

KIND_TERMINAL, KIND_PROVEN, KIND_OPEN = 0, 1, 2


class SearchKernels(NamedTuple):
    """A game's compiled rules for the search tree (see the module docstring).

    `name` tells compiled trees apart (their machine code is cached per game under it);
    `version` changes whenever the kernels' source does, so a cached tree compiled with older
    rules is never loaded."""

    name: str
    version: str
    play: Callable[..., Any]
    classify: Callable[..., Any]
    encode: Callable[..., Any]


class SearchPosition(NamedTuple):
    """A position as the compiled tree holds it: one node's `cells` and `aux` rows, and the
    parameters shared by the whole tree."""

    cells: np.ndarray  # int8 [C]
    aux: np.ndarray  # int64 [A]
    iparams: np.ndarray  # int64
    fparams: np.ndarray  # float64


def source_version(*files: str | None) -> str:
    """A short hash of the kernels' source `files` (modules' `__file__`): a
    `SearchKernels.version`."""
    h = hashlib.sha256()
    for f in files:
        if f is not None:
            h.update(Path(f).read_bytes())
    return h.hexdigest()[:12]


@kernel
def encode_board(cells: np.ndarray, aux: np.ndarray, iparams: np.ndarray, fparams: np.ndarray,
                 out: np.ndarray) -> None:
    """The `encode` of a game whose network input is the board itself (its cells as they are):
    the Capture Game's and Gomoku's."""
    out[:] = cells
