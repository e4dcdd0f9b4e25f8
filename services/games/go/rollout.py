"""Go's compiled rollouts (`services.games.rollout`): the rules of `services.games.go.fast`.

From each leaf the sides take turns drawing moves from the rollout policy's softmax over the
empty points; a drawn point that fills one of the mover's own eyes, or that the rules refuse
(suicide, retaking the ko), is set aside and another drawn; a side left with no such move
passes. Two passes in a row, or the move cap (default twice the points), end the rollout, and
the board is scored by area (Tromp-Taylor: stones, and empty regions that reach one colour
only) with the komi: the result is the sign of the mover's margin (0 on a tie).

The moves are played by `fast.play` (groups as circular lists of stones, captures, suicide,
simple ko: the replay's rules, compared with `services.games.go.rules` by the tests). A
capture's stones are found by walking the captured group's circle from each opponent
neighbour of the move left empty (`fast._capture` empties the cells and keeps the circle),
and each leaves the policy's logits around it.

The komi goes to White, and Go's network input is seen from the side to move without saying
which colour that is: the caller gives each leaf's colour (`colours`; a search knows it, it
replays the moves). Boards without colours are refused (ValueError), never scored for a
guessed side: a stone balance cannot tell the colour once captures or passes happened.
"""

from __future__ import annotations

import numpy as np

from services.compiled import kernel
from services.games.base import BLACK, WHITE
from services.games.go.fast import LEGAL, play, start_state
from services.games.go.features import COMPACT_CHANNELS
from services.games.grid_kernels import area_margin, neighbour_table, own_eye
from services.games.rollout import (
    Rollouts,
    RolloutWeights,
    _initial_logits,
    _trace_buffers,
    add_stone,
    draw_point,
    seed_state,
)

KO_PLANE = 3  # of the compact input: the point the side to move may not retake


@kernel
def _rollouts(cells0, kos, komis, nbrs, base, d_own, d_opp, size, k, seed, rollouts, cap, trace,
              final):
    """(float64 [N], moves played): the mean result of `rollouts` games from each leaf
    (uint8 [N, S*S], the mover's cells; `kos[i]` the point the mover may not retake, -1: none;
    `komis[i]` what the mover's margin gives away: the komi for Black, minus it for White)."""
    n, area = cells0.shape
    keys = np.zeros((8, area, 3), np.uint64)
    out = np.zeros(n)
    moves = 0
    excluded = np.zeros(area, np.int64)
    walked = np.zeros(area, np.int64)
    stamp = 0
    seen = np.zeros(area, np.int64)
    stack = np.empty(area, np.int64)
    around = np.empty(4, np.int64)
    for i in range(n):
        logits0, weights0 = _initial_logits(cells0[i], base, d_own, d_opp, size, k)
        total = 0.0
        for r in range(rollouts):
            cells, root, nxt, gsize, libp, mark, seen_g, clock, hashes, scratch, gained, ko = \
                start_state(cells0[i], nbrs, keys)
            if kos[i] >= 0:
                ko[0] = kos[i]
                ko[1] = 1
            logits = logits0.copy()
            weights = weights0.copy()
            state = seed_state(seed, i, r)
            side = 0
            passes = 0
            for _ in range(cap):
                colour = side + 1
                stamp += 1
                while True:
                    p, state = draw_point(weights[side], cells, excluded, stamp, state)
                    if p < 0:
                        break
                    if own_eye(cells, nbrs, p, colour, size):
                        excluded[p] = stamp
                        continue
                    n_around = 0
                    for j in range(4):
                        q = nbrs[p, j]
                        if q < 0:
                            break
                        if cells[q] == 3 - colour:
                            around[n_around] = q
                            n_around += 1
                    why = play(p, colour, cells, root, nxt, gsize, libp, mark, seen_g, clock,
                               nbrs, keys, hashes, ko, scratch, gained)
                    if why != LEGAL:
                        excluded[p] = stamp
                        continue
                    add_stone(logits, weights, p, side, 1.0, d_own, d_opp, size, k)
                    for j in range(n_around):
                        q = around[j]
                        if cells[q] != 0 or walked[q] == stamp:
                            continue
                        s = q
                        while True:  # the captured group's circle, intact after `_capture`
                            walked[s] = stamp
                            add_stone(logits, weights, s, 1 - side, -1.0, d_own, d_opp,
                                      size, k)
                            s = nxt[s]
                            if s == q:
                                break
                    break
                if i == 0 and r == 0 and moves < trace.shape[0]:
                    trace[moves] = p
                moves += 1
                if p < 0:
                    passes += 1
                    ko[0] = -1
                    if passes == 2:
                        break
                else:
                    passes = 0
                side = 1 - side
            margin = area_margin(cells, nbrs, seen, stack) - komis[i]
            if i == 0 and r == 0:
                final[:] = cells
            total += 1.0 if margin > 0 else (-1.0 if margin < 0 else 0.0)
        out[i] = total / rollouts
    return out, moves


class GoRollouts(Rollouts):
    """Rollouts of Go by area scoring with a komi (for the colour of each board's side to
    move: `colours` is required)."""

    needs_colours = True

    def leaf_cells(self, boards: np.ndarray) -> np.ndarray:
        b = np.asarray(boards)
        return np.ascontiguousarray(b[:, 0].reshape(len(b), -1), np.uint8)

    def first_game(self, board: np.ndarray, weights: RolloutWeights, *, seed: int = 0,
                   move_cap: int = 0, komi: float = 0.0, colour: int = BLACK
                   ) -> tuple[list[int | None], np.ndarray, float]:
        """(its moves, None a pass; the final cells as the mover sees them; the result) of
        the first rollout `run` plays from `board`: what the tests hold against the rules."""
        trace: list[np.ndarray] = []
        z, moves = self.run(np.asarray(board)[None], weights, seed=seed, move_cap=move_cap,
                            komi=komi, colours=np.array([colour]), trace=trace)
        return ([None if m < 0 else int(m) for m in trace[0][:moves]], trace[1],
                float(z[0]))

    def run(self, boards: np.ndarray, weights: RolloutWeights, *, seed: int = 0,
            rollouts: int = 1, move_cap: int = 0, komi: float = 0.0,
            colours: np.ndarray | None = None, trace: list[np.ndarray] | None = None
            ) -> tuple[np.ndarray, int]:
        boards = np.asarray(boards)
        n = len(boards)
        if n == 0:
            return np.zeros(0), 0
        if boards.ndim != 4 or boards.shape[1] != COMPACT_CHANNELS:  # layout: Go's own input
            raise ValueError(f"Go rollouts take compact inputs [N, 4, S, S], got {boards.shape}")
        size = int(boards.shape[-1])
        base, d_own, d_opp = weights.tables(size)
        ko_plane = boards[:, KO_PLANE].reshape(n, -1)
        kos = np.where(ko_plane.any(axis=1), ko_plane.argmax(axis=1), -1).astype(np.int64)
        movers = _movers(colours, n)
        komis = np.where(movers == WHITE, -komi, komi).astype(np.float64)
        cap = move_cap or 2 * size * size
        return _rollouts(self.leaf_cells(boards), kos, komis, neighbour_table(size), base,
                         d_own, d_opp, size, weights.size, int(seed), max(1, int(rollouts)),
                         int(cap), *_trace_buffers(trace, size))


def _movers(colours: np.ndarray | None, n: int) -> np.ndarray:
    """`colours` checked as the side to move of `n` boards: BLACK or WHITE each."""
    if colours is None:
        raise ValueError("Go rollouts score with the komi and need each board's side to move "
                         "(colours=): a search passes its leaves' colours")
    movers = np.asarray(colours).reshape(-1)
    if movers.shape != (n,) or not np.isin(movers, (BLACK, WHITE)).all():
        raise ValueError(f"colours must be BLACK ({BLACK}) or WHITE ({WHITE}) for each of the "
                         f"{n} boards, got {np.asarray(colours).tolist()}")
    return movers
