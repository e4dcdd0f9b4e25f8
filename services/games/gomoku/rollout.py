"""Gomoku's compiled rollouts (`services.games.rollout`): five in a row ends the game.

From each leaf the two sides take turns until one makes five through its move (the win), the
board fills or the cap is reached (a draw). A side that can make five does (the point where
its four becomes five); else one that faces a four blocks it; else it draws its move from the
rollout policy's softmax over the empty points. Without the first two rules a linear policy
would let most won positions slip (it finds the one winning point among two hundred by
chance); fours are found where they arise, from the lines through each move, so the rule
costs little. A five is five or more in a row for a side whose rule is freestyle, exactly
five for one whose rule says so (standard Gomoku; Black under renju): `GomokuRollouts(rule)`
takes the game's rule, the network input's colours say which side is Black.

Under renju Black never plays a forbidden point (double-three, double-four, overline) in a
rollout either: a rollout that let Black play them would count wins the rules refuse and
make a renju position look better for Black than it is. Each point drawn for Black is
checked by the compiled rules of the search (`renju_compiled.forbidden_point`, on a padded
copy of the board kept up to date move by move); a forbidden one is set aside for that move
and another drawn. A five is never forbidden, and a four Black could only block on a
forbidden point is not blocked: White makes five next.
"""

from __future__ import annotations

import numpy as np

from services.compiled import kernel
from services.games.base import BLACK, WHITE
from services.games.gomoku.renju import PAD
from services.games.gomoku.renju_compiled import NONE, forbidden_point
from services.games.gomoku.rules import Rule
from services.games.gomoku.search_kernels import five_through
from services.games.rollout import (
    Rollouts,
    RolloutWeights,
    _initial_logits,
    _trace_buffers,
    add_stone,
    draw_point,
    seed_state,
)

_DIRECTIONS = ((1, 0), (0, 1), (1, 1), (1, -1))


@kernel
def _add_threats(cells, point, colour, size, exact, threats, count):
    """Append to `threats[:count]` the empty points where `colour` would make five thanks to
    its stone at `point` (on the four lines through it); return the new count."""
    y = point // size
    x = point - y * size
    for i in range(4):
        dx = 1 if i != 1 else 0
        dy = 0 if i == 0 else (1 if i != 3 else -1)
        near = 0  # own stones within four of the move along the line: a four needs three
        for sign in (1, -1):
            for step in range(1, 5):
                cx = x + sign * step * dx
                cy = y + sign * step * dy
                if 0 <= cx < size and 0 <= cy < size and cells[cy * size + cx] == colour:
                    near += 1
        if near < 3:
            continue
        for sign in (1, -1):
            for step in range(1, 5):
                cx = x + sign * step * dx
                cy = y + sign * step * dy
                if not (0 <= cx < size and 0 <= cy < size):
                    break
                q = cy * size + cx
                if cells[q] != 0:
                    continue
                cells[q] = colour
                five = five_through(cells, size, q, colour, exact)
                cells[q] = 0
                if five and count < threats.shape[0]:
                    threats[count] = q
                    count += 1
    return count


@kernel
def _winning_point(cells, colour, size, exact, threats, count):
    """A still empty point of `threats[:count]` where `colour` makes five now, else -1."""
    for j in range(count):
        q = threats[j]
        if cells[q] != 0:
            continue
        cells[q] = colour
        five = five_through(cells, size, q, colour, exact)
        cells[q] = 0
        if five:
            return q
    return -1


@kernel
def _leaf_threats(cells, colour, size, exact, threats):
    """The threats of `colour` already on the leaf's board (from each of its stones)."""
    count = 0
    for p in range(cells.shape[0]):
        if cells[p] == colour:
            count = _add_threats(cells, p, colour, size, exact, threats, count)
    return count


@kernel
def _padded_black(cells, black, size):
    """The renju rules' padded board (`renju_compiled.padded`: BLACK 1, WHITE 2, a margin of
    WHITE) of the mover's `cells` where Black's stones are the cells `black` (1 or 2)."""
    w = size + 2 * PAD
    out = np.full(w * w, WHITE, np.int8)
    for p in range(size * size):
        c = cells[p]
        out[(p // size + PAD) * w + p % size + PAD] = 0 if c == 0 else (
            BLACK if c == black else WHITE)
    return out


@kernel
def _allowed(padded, side, forbid, p, size, line):
    """Whether `side` may play the empty point `p`: always, unless it is the side `forbid`
    (Black under renju) and `p` is one of its forbidden points."""
    if side != forbid:
        return True
    w = size + 2 * PAD
    return forbidden_point(padded, w, (p // size + PAD) * w + p % size + PAD, line) == NONE


@kernel
def _rollouts(cells0, exact, forbid, base, d_own, d_opp, size, k, seed, rollouts, cap, trace,
              final):
    """(float64 [N], moves played): the mean result of `rollouts` games from each leaf
    (uint8 [N, S*S], the mover's cells); `exact[i, side]`: side (0 mover, 1 opponent) needs
    exactly five; `forbid[i]`: the side kept off renju's forbidden points (Black), -1 none."""
    n, area = cells0.shape
    out = np.zeros(n)
    moves = 0
    excluded = np.zeros(area, np.int64)
    stamp = 0  # excluded[q] == stamp: q set aside for the move being drawn
    line = np.empty(11, np.int8)
    w = size + 2 * PAD
    for i in range(n):
        renju = forbid[i] >= 0
        padded0 = _padded_black(cells0[i], forbid[i] + 1, size) if renju else \
            np.zeros(1, np.int8)
        logits0, weights0 = _initial_logits(cells0[i], base, d_own, d_opp, size, k)
        threats0 = np.empty((2, 4 * area), np.int64)
        counts0 = np.zeros(2, np.int64)
        for side in range(2):
            counts0[side] = _leaf_threats(cells0[i], side + 1, size, exact[i, side],
                                          threats0[side])
        total = 0.0
        for r in range(rollouts):
            cells = cells0[i].copy()
            logits = logits0.copy()
            weights = weights0.copy()
            threats = threats0.copy()
            counts = counts0.copy()
            padded = padded0.copy()
            state = seed_state(seed, i, r)
            side = 0
            result = 0.0
            for _ in range(cap):
                p = _winning_point(cells, side + 1, size, exact[i, side], threats[side],
                                   counts[side])
                if p < 0:  # block the opponent's five
                    p = _winning_point(cells, 2 - side, size, exact[i, 1 - side],
                                       threats[1 - side], counts[1 - side])
                    if p >= 0 and renju and not _allowed(padded, side, forbid[i], p, size,
                                                         line):
                        p = -1  # a forbidden block: Black cannot stop the five
                if p < 0:
                    stamp += 1
                    while True:
                        p, state = draw_point(weights[side], cells, excluded, stamp, state)
                        if p < 0 or not renju or _allowed(padded, side, forbid[i], p, size,
                                                          line):
                            break
                        excluded[p] = stamp
                if p < 0:
                    break  # no point left to play: a draw
                cells[p] = side + 1
                if renju:
                    padded[(p // size + PAD) * w + p % size + PAD] = \
                        BLACK if side == forbid[i] else WHITE
                if i == 0 and r == 0 and moves < trace.shape[0]:
                    trace[moves] = p
                moves += 1
                add_stone(logits, weights, p, side, 1.0, d_own, d_opp, size, k)
                if five_through(cells, size, p, side + 1, exact[i, side]):
                    result = 1.0 if side == 0 else -1.0
                    break
                counts[side] = _add_threats(cells, p, side + 1, size, exact[i, side],
                                            threats[side], counts[side])
                side = 1 - side
            total += result
            if i == 0 and r == 0:
                final[:] = cells
        out[i] = total / rollouts
    return out, moves


class GomokuRollouts(Rollouts):
    """Rollouts of Gomoku under `rule` (freestyle by default)."""

    def __init__(self, rule: Rule = Rule.FREESTYLE) -> None:
        self.rule = rule

    def leaf_cells(self, boards: np.ndarray) -> np.ndarray:
        """The board as the side to move sees it: Black moves when both have as many stones."""
        b = np.asarray(boards).reshape(len(boards), -1)
        white_moves = (b == BLACK).sum(axis=1) > (b == WHITE).sum(axis=1)
        swapped = np.where(b == 0, 0, 3 - b)
        return np.ascontiguousarray(np.where(white_moves[:, None], swapped, b), np.uint8)

    def first_game(self, board: np.ndarray, weights: RolloutWeights, *, seed: int = 0,
                   move_cap: int = 0) -> tuple[list[int], np.ndarray, float]:
        """(its moves, the final cells as the mover sees them, the result) of the first
        rollout `run` plays from `board`: what the tests hold against the rules."""
        trace: list[np.ndarray] = []
        z, moves = self.run(np.asarray(board)[None], weights, seed=seed, move_cap=move_cap,
                            trace=trace)
        return [int(m) for m in trace[0][:moves]], trace[1], float(z[0])

    def _forbid(self, boards: np.ndarray) -> np.ndarray:
        """int64 [N]: the side kept off the forbidden points, 0 the mover, 1 the opponent
        (Black under renju), -1 none (the other rules)."""
        b = np.asarray(boards).reshape(len(boards), -1)
        if self.rule is not Rule.RENJU:
            return np.full(len(b), -1, np.int64)
        black_moves = (b == BLACK).sum(axis=1) <= (b == WHITE).sum(axis=1)
        return np.where(black_moves, 0, 1).astype(np.int64)

    def _exact(self, boards: np.ndarray) -> np.ndarray:
        """bool [N, 2]: whether the mover / the opponent needs exactly five."""
        b = np.asarray(boards).reshape(len(boards), -1)
        black_moves = (b == BLACK).sum(axis=1) <= (b == WHITE).sum(axis=1)
        if self.rule is Rule.STANDARD:
            return np.ones((len(b), 2), bool)
        if self.rule is Rule.RENJU:  # black: exactly five
            return np.stack([black_moves, ~black_moves], axis=1)
        return np.zeros((len(b), 2), bool)

    def run(self, boards: np.ndarray, weights: RolloutWeights, *, seed: int = 0,
            rollouts: int = 1, move_cap: int = 0, komi: float = 0.0,
            colours: np.ndarray | None = None, trace: list[np.ndarray] | None = None
            ) -> tuple[np.ndarray, int]:
        boards = np.asarray(boards)
        if len(boards) == 0:
            return np.zeros(0), 0
        size = int(boards.shape[-1])
        base, d_own, d_opp = weights.tables(size)
        cap = move_cap or size * size
        return _rollouts(self.leaf_cells(boards), self._exact(boards), self._forbid(boards),
                         base, d_own, d_opp, size, weights.size, int(seed),
                         max(1, int(rollouts)), int(cap), *_trace_buffers(trace, size))
