"""The Capture Game played on many boards at once: the engine of training and evaluation play.

Direct policy search scores a network by dozens of games against the greedy opponent, and a
training run plays millions of games; one game at a time in Python would take weeks. Here the
B boards of a batch are int8 arrays ``[B, S*S]`` (flat point ``y * S + x``, 0 empty, 1 black,
2 white) and every rule is a numba kernel (compiled once, cached on disk) looping over the
boards, so a ply of the whole batch is one call per kernel and one call of the network.

The rules are those of `services.games.capture.game` (PyBrain's CaptureGame, which the paper
used): every empty point is a legal move; a stone that leaves an opponent group without
liberties captures and wins at once; otherwise a stone whose own group is left without
liberties is suicide and loses at once; nothing is removed from a finished board. Since the
last empty point always captures, every game ends within S*S plies and there are no draws.

What it offers:

* `legal_masks`, `liberties`, `play`: the rules on a batch (`play` reports per board whether
  the move captured, was suicide or neither);
* `greedy_moves`: the paper's greedy opponent (Grüttner et al., section 3.1), for the side to
  move on every board: (1) a capturing move if there is one (it wins); else (2) if one of its
  groups has a single liberty, extend it: play on that liberty; else (3) the move maximising
  p - q, p the liberties of its own weakest group and q those of the opponent's weakest
  group after the move (q = 0 while the opponent has no stone, which leaves the choice to p).
  Its candidate moves in (2) and (3) are the points that are not suicide (the Java player's
  valid moves); several extensions in (2) are ranked by p - q as in (3). Where no such move
  exists the Java player would pass, which the Capture Game forbids, so it plays a random
  empty point (a suicide: it loses), as the paper did. Ties (several captures, equal p - q)
  are broken by one uniform number u in [0, 1) per board and move: the candidates in
  ascending point order, the one at ``floor(u * n)``; `play_games` draws u from the caller's
  seeded `numpy.random.Generator`, so a run is reproducible and one game can be replayed
  alone (`tests/capture_reference.py` does, move by move);
* `random_moves`: a uniformly random empty point (a weakened greedy opponent plays some of
  its moves so);
* `network_moves`: a network's move, the empty point with the highest score (NaN scores
  skipped; equal scores: the lowest point);
* `play_games`: a network against the greedy opponent on `n_games` boards, colours
  alternated (even games: the network is black).

A policy is ``policy(boards, to_move) -> scores``: ``boards`` int8 ``[b, S, S]`` (indexed
``[y, x]``), ``to_move`` int8 ``[b]`` (1 black, 2 white), ``scores`` ``[b, S, S]`` or
``[b, S*S]`` as a numpy array or a torch tensor (read with ``.detach().cpu().numpy()``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from services.compiled import kernel
from services.games import grid_kernels
from services.games.grid_kernels import count_liberties, label_groups

EMPTY, BLACK, WHITE = 0, 1, 2
MIN_SIZE, MAX_SIZE = 2, 19  # the engine's board sizes (the game is served on 5..9)
# `play`'s result per board: the game goes on, the mover captured (won), the mover's stone
# was suicide (lost)
GOES_ON, CAPTURED, SUICIDE = 0, 1, -1
DEFAULT_BATCH = 4096  # boards per batch in `play_games`: big enough to amortise a network call

Policy = Callable[[np.ndarray, np.ndarray], Any]


def neighbour_table(size: int) -> np.ndarray:
    """int32 [S*S, 4]: the orthogonal neighbours of every point, padded with -1 at the end
    (`grid_kernels.neighbour_table`), for the engine's board sizes only."""
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"board size {size} is outside {MIN_SIZE}..{MAX_SIZE}")
    return grid_kernels.neighbour_table(size)


class Scratch(NamedTuple):
    """Work arrays of the kernels for one board size (reused across calls)."""

    label: np.ndarray  # group of the stone at each point, -1 on empty points
    order: np.ndarray  # the stones, group by group
    gstart: np.ndarray  # group g's stones are order[gstart[g]:gstart[g + 1]]
    gcol: np.ndarray  # colour of group g
    glib: np.ndarray  # liberties of group g
    lstart: np.ndarray  # group g's liberties are libs[lstart[g]:lstart[g + 1]]
    libs: np.ndarray
    mark: np.ndarray  # point stamps of the walks (a liberty counted once)
    clock: np.ndarray  # the current stamp, [1]
    tier: np.ndarray  # greedy: the rule a point falls under
    cand: np.ndarray  # greedy: the tied candidates


def _scratch(size: int) -> Scratch:
    n = size * size
    return Scratch(np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n + 1, np.int32),
                   np.empty(n, np.int8), np.empty(n, np.int32), np.empty(n + 1, np.int32),
                   np.empty(4 * n, np.int32), np.zeros(n, np.int64), np.zeros(1, np.int64),
                   np.empty(n, np.int8), np.empty(n, np.int32))


# ---- kernels ------------------------------------------------------------------------------
@kernel
def _play(cells, rows, colours, moves, nbrs, queue, mark, clock, result):
    """Play moves[i] for colours[i] on board rows[i]; result[i]: GOES_ON, CAPTURED, SUICIDE,
    or 2 when the point is taken or off the board (nothing is played then)."""
    n = cells.shape[1]
    none = np.empty(0, np.int32)
    for i in range(rows.shape[0]):
        b = rows[i]
        m = moves[i]
        if m < 0 or m >= n or cells[b, m] != 0:
            result[i] = 2
            continue
        c = colours[i]
        cells[b, m] = c
        captured = False
        for j in range(4):
            q = nbrs[m, j]
            if q < 0:
                break
            if cells[b, q] == 3 - c and count_liberties(cells[b], nbrs, q, 1, mark, clock, queue,
                                                        none) == 0:
                captured = True
                break
        if captured:
            result[i] = 1
        elif count_liberties(cells[b], nbrs, m, 1, mark, clock, queue, none) == 0:
            result[i] = -1
        else:
            result[i] = 0


@kernel
def _analyse(cells, nbrs, label, order, gstart, gcol, glib, lstart, libs, mark, clock):
    """Split one board into groups (`grid_kernels.label_groups`: labels, stones, liberties
    listed) with each group's colour and number of liberties. Returns the number of groups."""
    ng = label_groups(cells, nbrs, label, order, gstart, lstart, libs, mark, clock)
    for g in range(ng):
        gcol[g] = cells[order[gstart[g]]]
        glib[g] = lstart[g + 1] - lstart[g]
    return ng


@kernel
def _liberties(cells, nbrs, label, order, gstart, gcol, glib, lstart, libs, mark, clock, out):
    """out[b, p]: the liberties of the group of the stone at p (0 on empty points)."""
    for b in range(cells.shape[0]):
        _analyse(cells[b], nbrs, label, order, gstart, gcol, glib, lstart, libs, mark, clock)
        for p in range(cells.shape[1]):
            out[b, p] = glib[label[p]] if label[p] >= 0 else 0


@kernel
def _adjacent(p, cells, nbrs, label, adj):
    """The distinct groups next to point p into adj[0:k]; returns (k, has an empty
    neighbour)."""
    k = 0
    empty = False
    for j in range(4):
        q = nbrs[p, j]
        if q < 0:
            break
        if cells[q] == 0:
            empty = True
            continue
        g = label[q]
        seen = False
        for i in range(k):
            if adj[i] == g:
                seen = True
        if not seen:
            adj[k] = g
            k += 1
    return k, empty


@kernel
def _p_minus_q(p, me, cells, nbrs, label, gcol, glib, lstart, libs, ng, adj, k, mark, clock):
    """p - q after `me` plays at p (a move that neither captures nor is suicide)."""
    clock[0] += 1
    tick = clock[0]
    mark[p] = tick
    merged = 0
    for j in range(4):
        q = nbrs[p, j]
        if q < 0:
            break
        if cells[q] == 0 and mark[q] != tick:
            mark[q] = tick
            merged += 1
    for i in range(k):
        g = adj[i]
        if gcol[g] != me:
            continue
        for t in range(lstart[g], lstart[g + 1]):
            lib = libs[t]
            if mark[lib] != tick:
                mark[lib] = tick
                merged += 1
    own = merged
    other = 1 << 30
    for g in range(ng):
        touched = False
        for i in range(k):
            if adj[i] == g:
                touched = True
        if gcol[g] == me:
            if not touched and glib[g] < own:
                own = glib[g]
        else:
            value = glib[g] - 1 if touched else glib[g]
            if value < other:
                other = value
    if other == 1 << 30:
        other = 0
    return own - other


@kernel
def _greedy(cells, rows, colours, uniforms, nbrs, label, order, gstart, gcol, glib, lstart,
            libs, mark, clock, tier, cand, out):
    """The greedy opponent's move for colours[i] on board rows[i] (see the module
    docstring); tier 3 capture, 2 extension of a group in atari, 1 any other non-suicide
    move, 0 suicide."""
    n = cells.shape[1]
    adj = np.empty(4, np.int32)
    for i in range(rows.shape[0]):
        board = cells[rows[i]]
        me = colours[i]
        ng = _analyse(board, nbrs, label, order, gstart, gcol, glib, lstart, libs, mark, clock)
        top = -1
        for p in range(n):
            tier[p] = -1
            if board[p] != 0:
                continue
            k, empty = _adjacent(p, board, nbrs, label, adj)
            capture = False
            extends = False
            safe = empty
            for a in range(k):
                g = adj[a]
                if gcol[g] != me:
                    if glib[g] == 1:
                        capture = True
                elif glib[g] == 1:
                    extends = True
                else:
                    safe = True
            if capture:
                tier[p] = 3
            elif not safe:
                tier[p] = 0
            elif extends:
                tier[p] = 2
            else:
                tier[p] = 1
            if tier[p] > top:
                top = tier[p]
        count = 0
        if top == 1 or top == 2:
            best = -(1 << 30)
            for p in range(n):
                if tier[p] != top:
                    continue
                k, empty = _adjacent(p, board, nbrs, label, adj)
                s = _p_minus_q(p, me, board, nbrs, label, gcol, glib, lstart, libs, ng, adj, k,
                               mark, clock)
                if s > best:
                    best = s
                    count = 0
                if s == best:
                    cand[count] = p
                    count += 1
        else:
            for p in range(n):
                if tier[p] == top:
                    cand[count] = p
                    count += 1
        if count == 0:
            out[i] = -1  # a full board: cannot happen in a game that goes on
            continue
        pick = int(uniforms[i] * count)
        out[i] = cand[min(pick, count - 1)]


@kernel
def _best_empty(cells, rows, scores, out):
    """The empty point with the highest score on board rows[i] (scores row i); NaN skipped,
    ties to the lowest point, -1 on a full board."""
    n = cells.shape[1]
    for i in range(rows.shape[0]):
        b = rows[i]
        arg = -1
        first = -1
        best = 0.0
        for p in range(n):
            if cells[b, p] != 0:
                continue
            if first < 0:
                first = p
            s = scores[i, p]
            if s != s:
                continue
            if arg < 0 or s > best:
                best = s
                arg = p
        out[i] = arg if arg >= 0 else first


# ---- the batch API ------------------------------------------------------------------------
def board_size(cells: np.ndarray) -> int:
    """The side S of boards given as [B, S, S] or [B, S*S]."""
    if cells.ndim == 3:  # layout: [B, S, S] boards or flat [B, S * S] rows
        return int(cells.shape[-1])
    side = math.isqrt(int(cells.shape[-1]))
    if side * side != cells.shape[-1]:
        raise ValueError(f"{cells.shape[-1]} points are not a square board")
    return side


def _flat(boards: np.ndarray) -> np.ndarray:
    """[B, S*S] int8 view (or copy) of [B, S, S] or [B, S*S] boards."""
    arr = np.ascontiguousarray(boards, dtype=np.int8)
    return arr.reshape(arr.shape[0], -1)


def _rows(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)


def _colours(to_move: int | np.ndarray, n: int) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(np.asarray(to_move, dtype=np.int8), (n,)))


def empty_boards(n: int, size: int) -> np.ndarray:
    """`n` empty boards, int8 [n, S*S] (the layout every function here takes)."""
    neighbour_table(size)  # checks the size
    return np.zeros((n, size * size), np.int8)


def legal_masks(boards: np.ndarray) -> np.ndarray:
    """Boolean masks of the legal moves, shaped like `boards`: every empty point (suicide is a
    legal, losing move). A finished game has none; the caller knows which games are over."""
    return np.asarray(boards) == EMPTY


def liberties(boards: np.ndarray) -> np.ndarray:
    """int32, shaped like `boards`: the liberties of the group of each stone, 0 on empty
    points."""
    flat = _flat(boards)
    size = board_size(flat)
    out = np.empty(flat.shape, np.int32)
    w = _scratch(size)
    _liberties(flat, neighbour_table(size), w.label, w.order, w.gstart, w.gcol, w.glib,
               w.lstart, w.libs, w.mark, w.clock, out)
    return out.reshape(np.shape(boards))


def play(boards: np.ndarray, to_move: int | np.ndarray, moves: np.ndarray,
         rows: np.ndarray | None = None) -> np.ndarray:
    """Play `moves` (flat points) for `to_move` on `boards` (int8 [B, S*S], changed in place;
    `rows`: only those boards, `moves` and `to_move` then one per row). Returns int8 per move:
    GOES_ON, CAPTURED (the mover won) or SUICIDE (the mover lost). ValueError on a taken or
    off-board point (the board is left as it was)."""
    if boards.dtype != np.int8 or boards.ndim != 2 or not boards.flags.c_contiguous:
        raise ValueError("play takes int8 [B, S*S] C-contiguous boards (see empty_boards)")
    size = board_size(boards)
    rows = _rows(boards.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    moves = np.ascontiguousarray(moves, dtype=np.int64)
    result = np.empty(rows.shape[0], np.int8)
    w = _scratch(size)
    _play(boards, rows, _colours(to_move, rows.shape[0]), moves, neighbour_table(size),
          w.order, w.mark, w.clock, result)
    bad = np.flatnonzero(result == 2)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"move {int(moves[i])} on board {int(rows[i])} is taken or off the "
                         "board")
    return result


def greedy_moves(boards: np.ndarray, to_move: int | np.ndarray, uniforms: np.ndarray,
                 rows: np.ndarray | None = None) -> np.ndarray:
    """The greedy opponent's move (flat point, int64) for `to_move` on each board (or on
    `rows` only), ties broken by `uniforms` (one in [0, 1) per board or row; see the module
    docstring). Boards are games that go on (at least one empty point)."""
    flat = _flat(boards)
    size = board_size(flat)
    rows = _rows(flat.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    out = np.empty(rows.shape[0], np.int64)
    w = _scratch(size)
    _greedy(flat, rows, _colours(to_move, rows.shape[0]),
            np.ascontiguousarray(uniforms, dtype=np.float64), neighbour_table(size), w.label,
            w.order, w.gstart, w.gcol, w.glib, w.lstart, w.libs, w.mark, w.clock, w.tier,
            w.cand, out)
    return out


def random_moves(boards: np.ndarray, uniforms: np.ndarray,
                 rows: np.ndarray | None = None) -> np.ndarray:
    """A uniformly random empty point (flat, int64) on each board (or on `rows`): the one at
    ``floor(u * n)`` of its n empty points in ascending order, u from `uniforms` (one in
    [0, 1) per board or row). A random point may be suicide (it loses at once), as any move
    may. Boards are games that go on (at least one empty point)."""
    flat = _flat(boards)
    rows = _rows(flat.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    empty = flat[rows] == EMPTY
    counts = empty.sum(axis=1)
    if (counts == 0).any():
        raise ValueError("a board with no empty point has no move")
    k = np.minimum((np.asarray(uniforms, dtype=np.float64) * counts).astype(np.int64),
                   counts - 1)
    return np.argmax(np.cumsum(empty, axis=1) > k[:, None], axis=1).astype(np.int64)


def network_moves(boards: np.ndarray, scores: Any, rows: np.ndarray | None = None) -> np.ndarray:
    """The network's move on each board (or on `rows`, `scores` then one row each): the empty
    point with the highest score (NaN skipped, ties to the lowest point)."""
    flat = _flat(boards)
    rows = _rows(flat.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    if hasattr(scores, "detach"):  # a torch tensor
        scores = scores.detach().cpu().numpy()
    values = np.ascontiguousarray(scores, dtype=np.float32).reshape(rows.shape[0], -1)
    if values.shape[1] != flat.shape[1]:
        raise ValueError(f"{values.shape[1]} scores per board for {flat.shape[1]} points")
    out = np.empty(rows.shape[0], np.int64)
    _best_empty(flat, rows, values, out)
    return out


class Results(NamedTuple):
    """`play_games`' outcome, from the network's side.

    `outcomes` int8 [n_games]: +1 the network won, -1 it lost, 0 a draw. A draw would be a
    game still undecided once S*S plies are played; it cannot happen (the last empty point
    always captures), so `draws` is 0, counted only so that a caller never has to assume it.
    `plies` int16 [n_games]: the moves the game lasted. `network_colour` int8 [n_games].
    """

    wins: int
    losses: int
    draws: int
    outcomes: np.ndarray
    plies: np.ndarray
    network_colour: np.ndarray

    @property
    def fitness(self) -> float:
        """Mean outcome in [-1, 1] (-1: never wins, +1: always wins), the paper's scale."""
        return float(self.outcomes.mean()) if len(self.outcomes) else 0.0


def network_colours(n_games: int, network_first: bool = True) -> np.ndarray:
    """The network's colour per game: alternating, black in the even games (white when not
    `network_first`)."""
    first, second = (BLACK, WHITE) if network_first else (WHITE, BLACK)
    return np.where(np.arange(n_games) % 2 == 0, first, second).astype(np.int8)


def tie_uniforms(rng: np.random.Generator, size: int, n_games: int) -> np.ndarray:
    """float64 [S*S, n_games]: the greedy opponent's tie-break number for each ply of each
    game, drawn at once so that a game's play depends on its own column only."""
    return rng.random((size * size, n_games))


def play_games(policy: Policy, n_games: int, size: int, rng: np.random.Generator, *,
               batch_size: int = DEFAULT_BATCH, network_first: bool = True) -> Results:
    """`n_games` games of `policy` against the greedy opponent on `size` boards, `batch_size`
    at a time, colours alternated (`network_colours`). Each batch draws its tie-break numbers
    with `tie_uniforms(rng, size, batch)`, in batch order."""
    n_points = size * size
    nbrs = neighbour_table(size)
    colour_of = network_colours(n_games, network_first)
    outcomes = np.zeros(n_games, np.int8)
    plies = np.zeros(n_games, np.int16)
    w = _scratch(size)
    for start in range(0, n_games, batch_size):
        n = min(batch_size, n_games - start)
        net = colour_of[start:start + n]
        uniforms = tie_uniforms(rng, size, n)
        cells = np.zeros((n, n_points), np.int8)
        active = np.ones(n, bool)
        result = np.empty(n, np.int8)
        none = np.empty(0, np.int64)
        colour = BLACK
        for ply in range(n_points):
            live = np.flatnonzero(active)
            if live.size == 0:
                break
            mine = net[live] == colour
            net_rows, greedy_rows = live[mine], live[~mine]
            net_moves = greedy = none
            if net_rows.size:
                to_move = np.full(net_rows.size, colour, np.int8)
                scores = policy(cells[net_rows].reshape(-1, size, size), to_move)
                net_moves = network_moves(cells, scores, net_rows)
            if greedy_rows.size:
                greedy = np.empty(greedy_rows.size, np.int64)
                _greedy(cells, greedy_rows, np.full(greedy_rows.size, colour, np.int8),
                        np.ascontiguousarray(uniforms[ply, greedy_rows]), nbrs, w.label,
                        w.order, w.gstart, w.gcol, w.glib, w.lstart, w.libs, w.mark, w.clock,
                        w.tier, w.cand, greedy)
            ordered = np.concatenate([net_rows, greedy_rows])
            chosen = np.concatenate([net_moves, greedy])
            _play(cells, ordered, np.full(ordered.size, colour, np.int8), chosen, nbrs, w.order,
                  w.mark, w.clock, result)
            res = result[:ordered.size]
            ended = res != GOES_ON
            if (res == 2).any():
                raise RuntimeError("a chosen move was on a taken point")
            done = ordered[ended]
            mover_won = res[ended] == CAPTURED
            outcomes[start + done] = np.where(mover_won == (net[done] == colour), 1, -1)
            plies[start + done] = ply + 1
            active[done] = False
            colour = WHITE if colour == BLACK else BLACK
    wins = int((outcomes == 1).sum())
    losses = int((outcomes == -1).sum())
    return Results(wins, losses, n_games - wins - losses, outcomes, plies, colour_of)
