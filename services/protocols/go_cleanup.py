"""Dead stones for ``kgs-genmove_cleanup``: which opponent chains to capture before passing.

KGS sends ``kgs-genmove_cleanup`` when the players disagree about dead stones: the engine must
then play on until the stones it thinks dead are off the board, since KGS scores what remains.
This engine has no ownership head, so "dead" is judged from the shape, cheaply:

* an eye of a chain is an empty region (points connected through empty points) that touches
  the chain and no stone of the other colour; a region of EYE_SPACE_FOR_TWO points or more
  counts as two eyes (room to make two);
* an opponent chain with fewer than two eyes is judged dead.

So opponent stones sitting in our area (their empty neighbours also touch our stones) are dead
and a group with two eyes, or with territory of its own, is alive. Seki is judged dead too (its
shared liberties touch both colours): cleanup then plays into it only when the move is legal
and leaves the new chain more than one liberty (`capture_move`), which keeps us out of the
self-atari that would lose the seki at once.

The move: the search's answer unless it is a pass while dead opponent stones remain; then a
liberty of the dead chain with the fewest liberties, the one leaving our stone the most
liberties.
"""

from __future__ import annotations

from services.games.go.rules import EMPTY, GoState, neighbours, opponent

EYE_SPACE_FOR_TWO = 7


def _regions(state: GoState) -> list[tuple[set[int], set[int]]]:
    """Every empty region: (its points, the colours of the stones it touches)."""
    cells, nbrs = state.cells, neighbours(state.size)
    seen: set[int] = set()
    out = []
    for start in range(len(cells)):
        if cells[start] != EMPTY or start in seen:
            continue
        points = {start}
        colours: set[int] = set()
        stack = [start]
        seen.add(start)
        while stack:
            p = stack.pop()
            for q in nbrs[p]:
                v = cells[q]
                if v == EMPTY:
                    if q not in seen:
                        seen.add(q)
                        points.add(q)
                        stack.append(q)
                else:
                    colours.add(v)
        out.append((points, colours))
    return out


def chains(state: GoState, color: int) -> list[tuple[set[int], set[int]]]:
    """The chains of `color`: (stones, liberties)."""
    cells, nbrs = state.cells, neighbours(state.size)
    seen: set[int] = set()
    out = []
    for start in range(len(cells)):
        if cells[start] != color or start in seen:
            continue
        stones = {start}
        libs: set[int] = set()
        stack = [start]
        seen.add(start)
        while stack:
            p = stack.pop()
            for q in nbrs[p]:
                if cells[q] == EMPTY:
                    libs.add(q)
                elif cells[q] == color and q not in seen:
                    seen.add(q)
                    stones.add(q)
                    stack.append(q)
        out.append((stones, libs))
    return out


def dead_chains(state: GoState, color: int) -> list[tuple[set[int], set[int]]]:
    """The chains of `color` judged dead (fewer than two eyes), as (stones, liberties)."""
    eyes_of = []  # (region points, eye count) for regions touching `color` only
    for points, colours in _regions(state):
        if colours == {color}:
            eyes_of.append((points, 2 if len(points) >= EYE_SPACE_FOR_TWO else 1))
    dead = []
    for stones, libs in chains(state, color):
        eyes = sum(count for points, count in eyes_of if points & libs)
        if eyes < 2:
            dead.append((stones, libs))
    return dead


def capture_move(state: GoState, color: int) -> int | None:
    """A move of `color` towards capturing the opponent chains judged dead, or None when none
    remain (or no such move is legal and safe)."""
    if state.is_over:
        state = state.resume()
    dead = sorted(dead_chains(state, opponent(color)), key=lambda c: (len(c[1]), min(c[0])))
    for _, libs in dead:
        best: tuple[int, int] | None = None
        for point in sorted(libs):
            if not state.is_legal(point, color):
                continue
            after = state.play(point, color)
            own = next(libs_ for stones, libs_ in chains(after, color) if point in stones)
            if len(own) < 2 and not _captures(state, after, color):
                continue  # self-atari without a capture
            if best is None or len(own) > best[0]:
                best = (len(own), point)
        if best is not None:
            return best[1]
    return None


def _captures(before: GoState, after: GoState, color: int) -> set[int]:
    """Points whose opponent stones `color`'s move took (empty after, the opponent's before)."""
    enemy = opponent(color)
    return {p for p in range(len(before.cells))
            if before.cells[p] == enemy and after.cells[p] == EMPTY}
