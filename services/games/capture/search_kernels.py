"""The Capture Game's rules as the compiled search tree's kernels
(`services.games.search_kernels`).

The same answers as `CaptureState.play` and `CaptureGame.expand`: the first capture wins (+1
to its player), a suicide loses (-1 to its player), a capture available is a proven win
(searched alone), otherwise every empty point but the suicides (all of them when nothing else
is left); the network input is the board (`encode_board`).

A node: `cells` the flat board (int8 [S*S]); `aux` [to_move, the last move's result
(`GOES_ON`, `CAPTURED`, `SUICIDE`)]; `iparams` [size, the neighbour table flattened].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from services.compiled import kernel
from services.games import grid_kernels, search_kernels
from services.games.grid_kernels import grid_params, group_liberties, params_neighbours
from services.games.search_kernels import (
    KIND_OPEN,
    KIND_PROVEN,
    KIND_TERMINAL,
    SearchKernels,
    SearchPosition,
    encode_board,
    source_version,
)

GOES_ON, CAPTURED, SUICIDE = 0, 1, -1  # `services.games.capture.game`'s results
TO_MOVE, RESULT = 0, 1  # aux columns


@kernel
def play(cells: np.ndarray, aux: np.ndarray, move: int, out_cells: np.ndarray,
         out_aux: np.ndarray, iparams: np.ndarray, fparams: np.ndarray) -> None:
    """`CaptureState.play`: the stone stays, the result says whether it captured or was
    suicide."""
    me = aux[TO_MOVE]
    nbrs = params_neighbours(iparams)
    out_cells[:] = cells
    out_cells[move] = me
    out_aux[TO_MOVE] = 3 - me
    libs = group_liberties(out_cells, nbrs)
    result = GOES_ON
    for j in range(4):
        q = nbrs[move, j]
        if q < 0:
            break
        if out_cells[q] == 3 - me and libs[q] == 0:
            result = CAPTURED
            break
    if result == GOES_ON and libs[move] == 0:
        result = SUICIDE
    out_aux[RESULT] = result


@kernel
def classify(cells: np.ndarray, aux: np.ndarray, iparams: np.ndarray, fparams: np.ndarray,
             legal: np.ndarray, candidates: np.ndarray) -> tuple[int, int, float]:
    """`CaptureGame.expand` (see the module docstring)."""
    if aux[RESULT] != GOES_ON:
        return KIND_TERMINAL, 0, 1.0 if aux[RESULT] == CAPTURED else -1.0
    n = cells.shape[0]
    me = aux[TO_MOVE]
    nbrs = params_neighbours(iparams)
    libs = group_liberties(cells, nbrs)
    wins = 0
    quiet = 0
    empty = 0
    suicide = np.zeros(n, np.bool_)
    for p in range(n):
        legal[p] = cells[p] == 0
        if cells[p] != 0:
            continue
        empty += 1
        capture = False
        breathes = False
        for j in range(4):
            q = nbrs[p, j]
            if q < 0:
                break
            v = cells[q]
            if v != 0 and v != me and libs[q] == 1:
                capture = True
            if v == 0 or (v == me and libs[q] > 1):
                breathes = True
        if capture:
            candidates[wins] = p
            wins += 1
        elif not breathes:
            suicide[p] = True
        else:
            quiet += 1
    if wins:
        return KIND_PROVEN, wins, -1.0
    k = 0
    for p in range(n):
        if legal[p] and (quiet == 0 or not suicide[p]):
            candidates[k] = p
            k += 1
    return KIND_OPEN, k, 0.0


KERNELS = SearchKernels("capture", source_version(__file__, grid_kernels.__file__,
                                                  search_kernels.__file__),
                        play, classify, encode_board)


def position(state: Any) -> SearchPosition:
    """A Capture Game position (`CaptureState`) as the compiled tree holds it."""
    size = state.size
    return SearchPosition(
        cells=np.ascontiguousarray(state.board.reshape(-1), np.int8).copy(),
        aux=np.array([state.to_move, state.result], np.int64),
        iparams=grid_params(size),
        fparams=np.zeros(1),
    )
