"""Interpreted Go references that compiled code must match exactly: the pairs of the compiled
replay (services/games/go_fast.py, via `services.dataset.go_pairs.game_pairs`), byte for byte:
`replay` keeping every `GoState`, then `compact` (a full-board liberty count) per position; and
the per-point liberties and legal mask of the compiled scans (services/games/go_scan.py): a
flood fill per group, a loop over the points."""

from __future__ import annotations

import numpy as np

from services.dataset.go_pairs import GoPairs, pairs_of
from services.games.go import EMPTY, GameRecord, GoState, neighbours, replay
from services.games.go_features import COMPACT_CHANNELS, compact


def game_pairs_reference(game: GameRecord) -> GoPairs:
    """`game_pairs` computed position by position from `replay` + `compact` (no stones
    hashes: `canonicalize` hashes the boards)."""
    rep = replay(game, keep_states=True)
    n = rep.played
    s = game.size
    inputs = np.zeros((n, COMPACT_CHANNELS, s, s), dtype=np.int8)
    moves = np.empty(n, dtype=np.int16)
    to_move = np.empty(n, dtype=np.int8)
    for i in range(n):
        color, point = game.moves[i]
        inputs[i] = compact(rep.states[i], to_move=color)
        moves[i] = s * s if point is None else point
        to_move[i] = color
    return pairs_of(game, inputs, moves, to_move, rep.error)


def liberties_reference(state: GoState) -> list[int]:
    """Per point, the number of liberties of its group (0 on empty points): one flood fill per
    group, in Python."""
    size, cells, nbrs = state.size, state.cells, neighbours(state.size)
    libs = [0] * (size * size)
    for start in range(size * size):
        if cells[start] == EMPTY or libs[start]:
            continue
        group, empties, stack = {start}, set(), [start]
        while stack:
            for q in nbrs[stack.pop()]:
                if cells[q] == EMPTY:
                    empties.add(q)
                elif cells[q] == cells[start] and q not in group:
                    group.add(q)
                    stack.append(q)
        for p in group:
            libs[p] = len(empties)
    return libs


def legal_mask_reference(state: GoState, colour: int) -> list[bool]:
    """Per point, whether `colour` may play there: nowhere once the game is over, else an
    empty point, not the ko point it may not retake, touching an empty point, an own group
    with another liberty or an opponent group in atari."""
    size, cells, nbrs = state.size, state.cells, neighbours(state.size)
    if state.is_over:
        return [False] * (size * size)
    libs = liberties_reference(state)
    banned = state.ko if colour == state._ko_color else None
    mask = []
    for p in range(size * size):
        mask.append(cells[p] == EMPTY and p != banned and any(
            cells[q] == EMPTY or (cells[q] == colour) == (libs[q] > 1) for q in nbrs[p]))
    return mask
