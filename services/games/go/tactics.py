"""Tactical Go features (AlphaGo's and the BAKAGO report's "what would this move do" planes),
computed from the compact network input alone.

Why: the basic input (`services.games.go.features`: stones seen from the mover, liberties, move
ages, ko) says what the board *is*; a small network has to learn from it, over several layers,
what a move there would *do*: capture, put itself in atari, win or lose a ladder. AlphaGo's 48
planes and the BAKAGO report's 39 hand these over as inputs; a ladder in particular is a
board-wide read that a few 3x3 convolutions cannot follow. Everything here is a function of the
stones seen from the mover (plane 0) and the ko point (plane 3), so the channels can be added
to any compact input (shards already written, a served request) without the game's history.

`tactical_planes(compact)`: int8 [N, 4, S, S] (compact planes, `go_features`) -> int8
[N, TACTICAL_CHANNELS, S, S], for every point, the move of the side to move (the mover, stones
1 in plane 0; the opponent's are 2) there:

    0  CAPTURE_SIZE     opponent stones the move captures, capped at 7
    1  SELF_ATARI_SIZE  stones of the mover's group holding the new stone when that group is
                        left with exactly one liberty (the new stone included), capped at 7;
                        0 when it keeps two or more
    2  LIBERTIES_AFTER  liberties of that group after the move (captures removed), capped at 7
    3  LADDER_CAPTURE   1 where the move puts an adjacent opponent group (of two liberties) in
                        atari and the ladder that follows captures it
    4  LADDER_ESCAPE    1 where one of the mover's groups in atari extends and gets out: it
                        has three or more liberties, or two and no chase of ataris catches it
    5  SENSIBLE         1 on legal points that do not fill one of the mover's own single-point
                        eyes (AlphaGo's sensibleness; the eye is the one the search skips,
                        `go_game.own_eyes`: every orthogonal neighbour an own stone or the
                        edge, at most one opponent stone on the diagonals and none on the edge)

Every channel is 0 on illegal points: occupied, suicide (no liberty after captures) and the ko
point (plane 3). Planes are indexed [y, x] and points flat `y * S + x`, as everywhere in
`services.games`; the channels transform with the board under the 8 symmetries.

Ladders are read by the standard chase: the prey (a group in atari, to move) extends at its
liberty or captures an adjacent chasing group in atari (either may save it); with three
liberties it is out, with one it is caught, with two the hunter ataris it from one of the two
liberties (both are tried, the one that leaves the prey's extension the fewer empty neighbours
first), and so on; the hunter only ataris, it never saves its own stones in atari (the read is
a chase of ataris, nothing else). Simple ko holds in the read as `services.games.go.rules` plays it
(without it a capture and its retake would loop); the ko point of plane 3 bars the mover's
first move. A read places at most `MAX_LADDER_PLAYS` stones (both sides, the branches tried
included; a ladder from one corner of a 19x19 board to the other takes about 70); one that
runs out proves nothing, so it sets neither ladder channel.
"""

from __future__ import annotations

import numpy as np

from services.compiled import kernel
from services.games.grid_kernels import (
    count_liberties,
    label_groups,
    neighbour_table,
    own_eye,
    remove_group,
)

CAPTURE_SIZE, SELF_ATARI_SIZE, LIBERTIES_AFTER, LADDER_CAPTURE, LADDER_ESCAPE, SENSIBLE = range(6)
TACTICAL_CHANNELS = 6
MAX_COUNT = 7  # the cap of the three counts
# stones one ladder read may place, its branches included: every read of the 14.8k positions of
# the KGS dev archive's 19x19 games ends within 300 (`benchmarks/go_tactics.py` checks this)
MAX_LADDER_PLAYS = 1000
CAPTURED, ESCAPED, UNKNOWN = 0, 1, 2  # a ladder read's verdicts (on the prey)
SUICIDE = -2  # what `_play` answers for a move without a liberty


def tactical_planes(compact: np.ndarray, max_plays: int = MAX_LADDER_PLAYS) -> np.ndarray:
    """int8 [N, 4, S, S] compact planes -> int8 [N, TACTICAL_CHANNELS, S, S] (the module
    docstring's channels); only planes 0 (stones) and 3 (ko) are read. `max_plays`: the
    stones one ladder read may place."""
    compact = np.asarray(compact)
    n, _, size, width = compact.shape
    if size != width:
        raise ValueError(f"Go planes must be square, got {size}x{width}")
    stones = np.ascontiguousarray(compact[:, 0].reshape(n, size * size), dtype=np.uint8)
    ko = np.ascontiguousarray(compact[:, 3].reshape(n, size * size), dtype=np.int8)
    out = _batch(stones, ko, neighbour_table(size), size, max_plays)
    return out.reshape(n, TACTICAL_CHANNELS, size, size)


# ---- moves on a scratch position (uint8 cells, 0 empty, 1 and 2 the colours) ----------------
# The walks are `services.games.grid_kernels`'; their `mark` / `clock` / `stack` are shared by
# every walk of a position, none of which is interrupted by another.
@kernel
def _play(cells, nbrs, p, colour, mark, clock, stack, found):
    """Play `colour` on the empty point `p` in place, captures included: SUICIDE, and the board
    unchanged, for a move without a liberty; else the point the opponent may not retake at
    once (`services.games.go.rules`'s simple ko: one stone captured by a lone stone left with one
    liberty), -1 for none."""
    cells[p] = colour
    other = 3 - colour
    captured = 0
    ko = -1
    alone = True
    for j in range(4):
        q = nbrs[p, j]
        if q < 0:
            break
        if cells[q] == colour:
            alone = False
        elif cells[q] == other and count_liberties(cells, nbrs, q, 1, mark, clock, stack,
                                                    found) == 0:
            captured += remove_group(cells, nbrs, q, stack)
            ko = q
    if captured == 0:
        if count_liberties(cells, nbrs, p, 1, mark, clock, stack, found) == 0:
            cells[p] = 0
            return SUICIDE
        return -1
    if captured == 1 and alone and count_liberties(cells, nbrs, p, 2, mark, clock, stack,
                                                    found) == 1:
        return ko
    return -1


@kernel
def _empty_neighbours(cells, nbrs, p):
    count = 0
    for j in range(4):
        q = nbrs[p, j]
        if q < 0:
            break
        if cells[q] == 0:
            count += 1
    return count


@kernel
def _prey_tries(cells, nbrs, prey, tries, at, mark, clock, stack, stones, one):
    """Write the prey's tries (in atari, to move) to `tries[at:]`: the liberty of each adjacent
    hunter group in atari (capturing it), then its own liberty (extending); return how many."""
    colour = cells[prey]
    clock[0] += 1
    tick = clock[0]
    stack[0] = prey
    mark[prey] = tick
    top = 1
    size = 0
    liberty = -1
    while top > 0:
        top -= 1
        p = stack[top]
        stones[size] = p
        size += 1
        for j in range(4):
            q = nbrs[p, j]
            if q < 0:
                break
            if cells[q] == colour and mark[q] != tick:
                mark[q] = tick
                stack[top] = q
                top += 1
            elif cells[q] == 0:
                liberty = q
    count = 0
    for i in range(size):
        p = stones[i]
        for j in range(4):
            q = nbrs[p, j]
            if q < 0:
                break
            if cells[q] == 3 - colour and count_liberties(cells, nbrs, q, 2, mark, clock,
                                                           stack, one) == 1:
                seen = False
                for k in range(count):
                    if tries[at + k] == one[0]:
                        seen = True
                if not seen:
                    tries[at + count] = one[0]
                    count += 1
    if liberty >= 0:
        seen = False
        for k in range(count):
            if tries[at + k] == liberty:
                seen = True
        if not seen:
            tries[at + count] = liberty
            count += 1
    return count


@kernel
def _hunter_tries(cells, nbrs, prey, tries, at, mark, clock, stack, two):
    """Write the hunter's ataris on the prey (two liberties) to `tries[at:]`, the one that
    leaves the prey's extension the fewer empty neighbours first; return how many (0 unless
    the prey has exactly two liberties)."""
    if count_liberties(cells, nbrs, prey, 3, mark, clock, stack, two) != 2:
        return 0
    a, b = two[0], two[1]
    if _empty_neighbours(cells, nbrs, a) < _empty_neighbours(cells, nbrs, b):
        a, b = b, a  # an atari at a leaves the prey b
    tries[at] = a
    tries[at + 1] = b
    return 2


@kernel
def _read(cells, nbrs, prey, prey_to_move, ko, max_plays, work):
    """The ladder on the group holding `prey`: CAPTURED, ESCAPED or UNKNOWN (more than
    `max_plays` stones needed). `prey_to_move`: the prey is in atari and moves (it escapes if
    one of its tries does); else it has two liberties and the hunter ataris (it is captured if
    one of the ataris catches it). `ko`: the point the side to move may not retake (-1: none).
    A depth-first search with its frames in `work` (numba cannot cache a recursive kernel)."""
    (boards, tries, kind, first, count, next_try, verdict, kos, mark, clock, stack, stones,
     scratch) = work[:13]
    colour = cells[prey]
    boards[0, :] = cells
    kind[0] = 1 if prey_to_move else 0
    first[0] = 0
    kos[0] = ko
    if prey_to_move:
        count[0] = _prey_tries(cells, nbrs, prey, tries, 0, mark, clock, stack, stones, scratch)
        verdict[0] = CAPTURED
    else:
        count[0] = _hunter_tries(cells, nbrs, prey, tries, 0, mark, clock, stack, scratch)
        verdict[0] = ESCAPED
    next_try[0] = 0
    budget = max_plays
    depth = 0
    result = -1  # the verdict of the frame just closed, for its parent
    while True:
        if result >= 0:
            # a prey frame escapes if one try does; a hunter frame captures if one atari does
            decisive = ESCAPED if kind[depth] == 1 else CAPTURED
            if result == decisive:
                depth -= 1
                if depth < 0:
                    return result
                continue
            if result == UNKNOWN:
                verdict[depth] = UNKNOWN
            result = -1
        if next_try[depth] >= count[depth] or budget <= 0:
            result = verdict[depth] if next_try[depth] >= count[depth] else UNKNOWN
            depth -= 1
            if depth < 0:
                return result
            continue
        move = tries[first[depth] + next_try[depth]]
        next_try[depth] += 1
        if move == kos[depth]:
            continue
        budget -= 1
        child = boards[depth + 1]
        child[:] = boards[depth]
        prey_moves = kind[depth] == 1
        made = _play(child, nbrs, move, colour if prey_moves else 3 - colour, mark, clock,
                     stack, scratch)
        if made == SUICIDE:
            continue
        at = first[depth] + count[depth]
        if prey_moves:
            libs = count_liberties(child, nbrs, prey, 3, mark, clock, stack, scratch)
            if libs >= 3:
                result = ESCAPED
                depth -= 1
                if depth < 0:
                    return result
                continue
            if libs <= 1:
                continue  # still in atari: this try loses the prey
            n = _hunter_tries(child, nbrs, prey, tries, at, mark, clock, stack, scratch)
            kind[depth + 1] = 0
            verdict[depth + 1] = ESCAPED
        else:
            n = _prey_tries(child, nbrs, prey, tries, at, mark, clock, stack, stones, scratch)
            kind[depth + 1] = 1
            verdict[depth + 1] = CAPTURED
        depth += 1
        first[depth] = at
        count[depth] = n
        next_try[depth] = 0
        kos[depth] = made


# ---- one position -----------------------------------------------------------------------------
@kernel
def _position(cells, ko, nbrs, size, max_plays, work, out):
    """Fill `out` int8 [TACTICAL_CHANNELS, S*S] for one position (cells: 1 the mover's);
    `work`: the ladder reader's arrays (`_work`)."""
    n = cells.shape[0]
    mark, clock, stack, scratch = work[8], work[9], work[10], work[12]
    label, members, gstart, libstart, libs, legal = work[13:]
    groups = label_groups(cells, nbrs, label, members, gstart, libstart, libs, mark, clock)
    tick = clock[0]
    own = np.empty(4, np.int64)
    taken = np.empty(4, np.int64)
    legal[:] = False
    for p in range(n):
        if cells[p] != 0 or ko[p] != 0:
            continue
        tick += 1
        mark[p] = tick
        n_own = 0
        n_taken = 0
        group_size = 1
        captured = 0
        liberties = 0
        for j in range(4):
            q = nbrs[p, j]
            if q < 0:
                break
            v = cells[q]
            if v == 0:
                if mark[q] != tick:
                    mark[q] = tick
                    liberties += 1
                continue
            g = label[q]
            if v == 1:
                seen = False
                for k in range(n_own):
                    if own[k] == g:
                        seen = True
                if seen:
                    continue
                own[n_own] = g
                n_own += 1
                group_size += gstart[g + 1] - gstart[g]
            elif libstart[g + 1] - libstart[g] == 1:  # an opponent group in atari: captured
                seen = False
                for k in range(n_taken):
                    if taken[k] == g:
                        seen = True
                if seen:
                    continue
                taken[n_taken] = g
                n_taken += 1
                captured += gstart[g + 1] - gstart[g]
        # the liberties of the groups the stone joins, counted up to the cap (all that the
        # channels need: a large group's liberties are not walked for every point it touches)
        for o in range(n_own):
            g = own[o]
            for k in range(libstart[g], libstart[g + 1]):
                if liberties >= MAX_COUNT:
                    break
                q2 = libs[k]
                if mark[q2] != tick:
                    mark[q2] = tick
                    liberties += 1
        # captured stones next to the new group become its liberties
        for t in range(n_taken):
            g = taken[t]
            for k in range(gstart[g], gstart[g + 1]):
                if liberties >= MAX_COUNT:
                    break
                s = members[k]
                for j in range(4):
                    q = nbrs[s, j]
                    if q < 0:
                        break
                    touches = q == p
                    if not touches and cells[q] == 1:
                        for o in range(n_own):
                            if label[q] == own[o]:
                                touches = True
                    if touches:
                        if mark[s] != tick:
                            mark[s] = tick
                            liberties += 1
                        break
        if liberties == 0:
            continue  # suicide
        legal[p] = True
        out[CAPTURE_SIZE, p] = min(captured, MAX_COUNT)
        out[LIBERTIES_AFTER, p] = min(liberties, MAX_COUNT)
        if liberties == 1:
            out[SELF_ATARI_SIZE, p] = min(group_size, MAX_COUNT)
        if not own_eye(cells, nbrs, p, 1, size):
            out[SENSIBLE, p] = 1
    clock[0] = tick  # the stamps above stay below every later walk's
    for g in range(groups):
        colour = cells[members[gstart[g]]]
        nl = libstart[g + 1] - libstart[g]
        if colour == 2 and nl == 2:
            # the mover ataris the opponent group from either liberty: does the ladder take it?
            for k in range(libstart[g], libstart[g + 1]):
                at = libs[k]
                if not legal[at] or out[LADDER_CAPTURE, at] != 0:
                    continue
                child = cells.copy()
                made = _play(child, nbrs, at, 1, mark, clock, stack, scratch)
                if _read(child, nbrs, members[gstart[g]], True, made, max_plays,
                         work) == CAPTURED:
                    out[LADDER_CAPTURE, at] = 1
        elif colour == 1 and nl == 1:
            # the mover's group in atari extends at its liberty: is it out of the ladder?
            at = libs[libstart[g]]
            if not legal[at] or out[LADDER_ESCAPE, at] != 0:
                continue
            child = cells.copy()
            made = _play(child, nbrs, at, 1, mark, clock, stack, scratch)
            after = count_liberties(child, nbrs, at, 3, mark, clock, stack, scratch)
            if after >= 3 or (after == 2 and _read(child, nbrs, at, False, made, max_plays,
                                                   work) == ESCAPED):
                out[LADDER_ESCAPE, at] = 1


@kernel
def _work(points, max_plays):
    """The ladder reader's arrays: a board per depth (every frame but the first follows a
    play), the tries of every open frame (at most one per point and the extension, each), a
    frame's kind, first try, number of tries, next try, verdict so far and ko point per depth;
    then `mark` and `clock` (the stamps of every walk), `stack`, a group's stones and a scratch
    list, which the position's own walks share; then the position's groups (`label_groups`:
    label, stones, first stone, first liberty, liberties) and its legal points."""
    depth = max_plays + 2
    return (np.empty((depth, points), np.uint8), np.empty(depth * (points + 1), np.int64),
            np.empty(depth, np.int64), np.empty(depth, np.int64), np.empty(depth, np.int64),
            np.empty(depth, np.int64), np.empty(depth, np.int64), np.empty(depth, np.int64),
            np.zeros(points, np.int64),
            np.zeros(1, np.int64), np.zeros(points, np.int64), np.zeros(points, np.int64),
            np.zeros(3, np.int64),
            np.empty(points, np.int64), np.empty(points, np.int64),
            np.empty(points + 1, np.int64), np.empty(points + 1, np.int64),
            np.empty(4 * points, np.int64), np.empty(points, np.bool_))


@kernel
def _batch(stones, ko, nbrs, size, max_plays):
    n, points = stones.shape
    out = np.zeros((n, TACTICAL_CHANNELS, points), np.int8)
    work = _work(points, max_plays)
    for i in range(n):
        _position(stones[i], ko[i], nbrs, size, max_plays, work, out[i])
    return out
