"""Go's rules as the compiled search tree's kernels (`services.games.search_kernels`).

The same answers as `GoSearchState.play` and `GoGame.expand`: captures, suicide never a
candidate (the legal mask is `scan.legal_points`), simple ko, the pass (always a candidate, the
policy's last entry), own single-point eyes left out of the candidates, and two consecutive
passes terminal, worth the area score's verdict with komi to the player who passed last. The
network input is `scan.compact_planes`, as `go_features.compact` builds it.

A node: `cells` the flat board (int8 [S*S]); `aux` [to_move, ko point (-1: none), the colour
that may not take it, consecutive passes, the last 4 moves oldest first (-1: a pass or none)];
`iparams` [size, the neighbour table flattened]; `fparams` [komi].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from services.compiled import kernel
from services.games import grid_kernels
from services.games.go import scan
from services.games.go.features import MAX_LIBERTIES, RECENT_MOVES
from services.games.go.scan import compact_planes, legal_points
from services.games.grid_kernels import (
    area_margin,
    count_liberties,
    grid_params,
    own_eye,
    params_neighbours,
    remove_group,
)
from services.games.search_kernels import (
    KIND_OPEN,
    KIND_TERMINAL,
    SearchKernels,
    SearchPosition,
    source_version,
)

TO_MOVE, KO, KO_COLOR, PASSES, RECENT = 0, 1, 2, 3, 4  # aux columns (RECENT: 4 of them)
AUX = RECENT + RECENT_MOVES


@kernel
def play(cells: np.ndarray, aux: np.ndarray, move: int, out_cells: np.ndarray,
         out_aux: np.ndarray, iparams: np.ndarray, fparams: np.ndarray) -> None:
    """`GoState.play` of a legal move (`size * size`: the pass)."""
    n = cells.shape[0]
    me = aux[TO_MOVE]
    opp = 3 - me
    out_cells[:] = cells
    out_aux[:] = aux
    out_aux[TO_MOVE] = opp
    for k in range(RECENT, AUX - 1):
        out_aux[k] = aux[k + 1]
    out_aux[AUX - 1] = -1 if move == n else move
    out_aux[KO] = -1
    out_aux[KO_COLOR] = 0
    if move == n:
        out_aux[PASSES] = aux[PASSES] + 1
        return
    out_aux[PASSES] = 0
    nbrs = params_neighbours(iparams)
    out_cells[move] = me
    stack = np.empty(n, np.int64)
    mark = np.zeros(n, np.int64)
    clock = np.zeros(1, np.int64)
    found = np.empty(0, np.int64)
    captured = 0
    last = -1  # a lone stone captured (what a ko needs): the neighbour it stood on
    for j in range(4):
        q = nbrs[move, j]
        if q < 0:
            break
        if out_cells[q] == opp and count_liberties(out_cells, nbrs, q, 1, mark, clock, stack,
                                                   found) == 0:
            captured += remove_group(out_cells, nbrs, q, stack)
            last = q
    if captured == 1:
        own = 0
        empties = 0
        for j in range(4):
            q = nbrs[move, j]
            if q < 0:
                break
            if out_cells[q] == me:
                own += 1
            elif out_cells[q] == 0:
                empties += 1
        if own == 0 and empties == 1:
            out_aux[KO] = last
            out_aux[KO_COLOR] = opp


@kernel
def area_score(cells: np.ndarray, nbrs: np.ndarray, komi: float) -> float:
    """`GoState.score`: Black's area minus White's (stones and the empty regions bordered by
    one colour only) minus komi."""
    n = cells.shape[0]
    return area_margin(cells, nbrs, np.zeros(n, np.int64), np.empty(n, np.int64)) - komi


@kernel
def classify(cells: np.ndarray, aux: np.ndarray, iparams: np.ndarray, fparams: np.ndarray,
             legal: np.ndarray, candidates: np.ndarray) -> tuple[int, int, float]:
    """`GoGame.expand` (see the module docstring)."""
    size = iparams[0]
    n = size * size
    nbrs = params_neighbours(iparams)
    me = aux[TO_MOVE]
    if aux[PASSES] >= 2:
        score = area_score(cells, nbrs, fparams[0])
        winner = 1 if score > 0 else (2 if score < 0 else 0)
        value = 0.0 if winner == 0 else (1.0 if winner != me else -1.0)
        return KIND_TERMINAL, 0, value
    ko = aux[KO] if aux[KO_COLOR] == me else -1
    mask = legal_points(cells, nbrs, me, ko)
    k = 0
    for p in range(n):
        legal[p] = mask[p]
        if not mask[p]:
            continue
        if not own_eye(cells, nbrs, p, me, size):
            candidates[k] = p
            k += 1
    legal[n] = True
    candidates[k] = n
    return KIND_OPEN, k + 1, 0.0


@kernel
def encode(cells: np.ndarray, aux: np.ndarray, iparams: np.ndarray, fparams: np.ndarray,
           out: np.ndarray) -> None:
    """The compact [4, S, S] planes seen from the side to move, flat."""
    planes = compact_planes(cells, params_neighbours(iparams), aux[TO_MOVE], aux[RECENT:AUX],
                            aux[KO], MAX_LIBERTIES)
    out[:] = planes.reshape(-1)


KERNELS = SearchKernels("go", source_version(__file__, scan.__file__, grid_kernels.__file__), play,
                        classify, encode)


def position(state: Any) -> SearchPosition:
    """A Go position (`GoSearchState`) as the compiled tree holds it."""
    s = state.state
    recent = [-1 if m is None else m for m in s.last_moves[-RECENT_MOVES:]]
    recent = [-1] * (RECENT_MOVES - len(recent)) + recent
    aux = [s.to_move, -1 if s.ko is None else s.ko, s._ko_color, s.passes, *recent]
    return SearchPosition(
        cells=np.frombuffer(s.cells, np.int8).copy(),
        aux=np.array(aux, np.int64),
        iparams=grid_params(s.size),
        fparams=np.array([state.komi], np.float64),
    )
