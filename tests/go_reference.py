"""Interpreted Go references that compiled code must match exactly: the pairs of the compiled
replay (services/games/go/fast.py, via `services.games.go.replay.game_pairs`), byte for byte:
`replay` keeping every `GoState`, then the compact planes per position (their liberties by the
compiled scan, which the tests check against `liberties_reference`); and the per-point
liberties, legal mask and compact planes of the compiled scans (services/games/go/scan.py): a
flood fill per group, a loop over the points, numpy planes."""

from __future__ import annotations

import numpy as np

from services.games.go.features import COMPACT_CHANNELS, MAX_LIBERTIES, RECENT_MOVES
from services.games.go.replay import GoPairs, pairs_of
from services.games.go.rules import EMPTY, GameRecord, GoState, neighbours, replay


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
        inputs[i] = compact_reference(rep.states[i], to_move=color)
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


def compact_reference(state: GoState, to_move: int | None = None,
                      liberties: np.ndarray | None = None) -> np.ndarray:
    """`go_features.compact` in numpy: int8 [4, S, S] stones (1 own, 2 opponent), liberties
    capped, move ages (1 the last move; a pass takes an age; a point keeps its youngest), ko.
    `liberties` [S, S] default to `GoState.liberties` (checked against `liberties_reference`
    on their own), so the replay reference keeps its speed."""
    s = state.size
    board = np.frombuffer(state.cells, dtype=np.int8).reshape(s, s)
    out = np.zeros((COMPACT_CHANNELS, s, s), dtype=np.int8)
    own = board == (to_move or state.to_move)
    out[0][own] = 1
    out[0][(board != EMPTY) & ~own] = 2
    libs = state.liberties() if liberties is None else liberties
    out[1] = np.minimum(libs, MAX_LIBERTIES)
    recent = state.last_moves[-RECENT_MOVES:]
    for age, move in enumerate(reversed(recent), start=1):
        if move is not None and out[2].flat[move] == 0:
            out[2].flat[move] = age
    if state.ko is not None:
        out[3].flat[state.ko] = 1
    return out
