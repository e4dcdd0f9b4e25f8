"""Incremental Go replay that writes a whole game's compact planes in one pass.

Why: building the compact [4, S, S] inputs of every position with `GoState` + `compact`
costs a board copy and a full-board liberty flood fill per position (~5k positions/s per
core). Here the replay keeps, for every stone, its group (stones, liberty set, capped
liberty count) and updates only the groups a move touches, as minigo's `LibertyTracker`
does. After each legal move the absolute board and the capped-liberty board are two
`bytearray` slice copies into one preallocated buffer; the mover's view of the stones, the
move ages and the ko points are then filled in for the whole game with a few numpy
operations.

The rules are those of `services.games.go` (and `replay` with `allow_resume=True`):
captures, suicide illegal, simple ko (captured one stone, capturing stone alone with one
liberty; the captured colour may not retake at once), passes always legal, two passes
followed by a move resume play, set-up stones (via `GoState.add_stones`, so the same
errors), and the same error strings. `game_compact` returns exactly what
`services.dataset.go_pairs.game_pairs_reference` builds with `replay` + `compact`
(tests/test_go_fast_replay.py compares them on the real archives).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from services.games.go import (
    BLACK,
    EMPTY,
    KO,
    MAX_SIZE,
    MIN_SIZE,
    OCCUPIED,
    OFF_BOARD,
    SUICIDE,
    GameRecord,
    GoState,
    IllegalMove,
    neighbours,
    point_name,
)
from services.games.go_features import COMPACT_CHANNELS, MAX_LIBERTIES, RECENT_MOVES


class _Group:
    """A chain of stones: its points, its liberty points and the liberty count last written
    to the liberty plane (capped at MAX_LIBERTIES), so unchanged groups are not rewritten."""

    __slots__ = ("cap", "libs", "stones")

    def __init__(self, stones: list[int], libs: set[int]) -> None:
        self.stones = stones
        self.libs = libs
        self.cap = -1


def _initial_groups(cells: bytearray, size: int, group_of: list[_Group | None],
                    libp: bytearray) -> None:
    """Flood-fill the set-up position into groups and write its liberty plane."""
    nbrs = neighbours(size)
    for start in range(size * size):
        color = cells[start]
        if color == EMPTY or group_of[start] is not None:
            continue
        g = _Group([start], set())
        group_of[start] = g
        stones, libs = g.stones, g.libs
        i = 0
        while i < len(stones):
            for q in nbrs[stones[i]]:
                v = cells[q]
                if v == EMPTY:
                    libs.add(q)
                elif v == color and group_of[q] is None:
                    group_of[q] = g
                    stones.append(q)
            i += 1
        g.cap = min(len(libs), MAX_LIBERTIES)
        for s in stones:
            libp[s] = g.cap


class CompactGame(NamedTuple):
    """A replayed main line: `inputs` int8 [n, 4, S, S] (the position before each applied
    move, seen from that move's colour), `moves` int16 [n] (S*S = pass), `to_move` int8 [n],
    and `error`, the reference's message for the first illegal move (None if none).

    `initial` (the set-up position, flat bytes) and `captures` (int32 [m, 2]: the index of
    the applied move that captured, and the stone's point, in capture order) describe every
    change of the board, so the positions' symmetry hashes can be run along the game
    (`services.dataset.go_pairs.running_image_hashes`) instead of computed board by board."""

    inputs: np.ndarray
    moves: np.ndarray
    to_move: np.ndarray
    error: str | None
    initial: bytes = b""
    captures: np.ndarray = np.zeros((0, 2), np.int32)


def replay_planes(size: int, cells0: bytes,
                  moves: Sequence[tuple[int, int | None]]) -> CompactGame:
    """Replay `moves` from the position `cells0` (flat bytes, index y*size+x) until the
    first illegal move."""
    area = size * size
    nbrs = neighbours(size)
    cells = bytearray(cells0)
    libp = bytearray(area)
    group_of: list[_Group | None] = [None] * area
    _initial_groups(cells, size, group_of, libp)
    cap_max = MAX_LIBERTIES
    step = COMPACT_CHANNELS * area
    buf = bytearray(len(moves) * step)
    ko_at: list[int] = []  # positions whose side to move faces a ko point ...
    ko_pt: list[int] = []  # ... and that point
    ko = -1
    ko_color = EMPTY
    played = 0
    cap_at: list[int] = []  # per captured stone: the move that took it ...
    cap_pt: list[int] = []  # ... and its point
    off, off_a, off_b = 0, area, 2 * area  # this position's stones and liberties slices
    error = None
    for color, point in moves:
        buf[off:off_a] = cells
        buf[off_a:off_b] = libp
        if ko >= 0:
            ko_at.append(played)
            ko_pt.append(ko)
        if point is None:
            ko = -1
        else:
            if (point < 0 or point >= area or cells[point]
                    or (point == ko and color == ko_color)):
                error = _illegal(played, color, point, size, cells, ko)
                break
            empties: list[int] = []
            own: list[_Group] = []
            opp: list[_Group] = []
            for q in nbrs[point]:
                v = cells[q]
                if not v:
                    empties.append(q)
                elif v == color:
                    g = group_of[q]
                    if g not in own:
                        own.append(g)  # type: ignore[arg-type]
                else:
                    g = group_of[q]
                    if g not in opp:
                        opp.append(g)  # type: ignore[arg-type]
            captured: list[int] = []
            if opp:
                for g in opp:
                    if len(g.libs) == 1:
                        captured += g.stones
                if not captured and not empties:
                    for g in own:
                        if len(g.libs) > 1:
                            break
                    else:
                        error = _suicide(played, color, point, size)
                        break
                for g in opp:
                    libs = g.libs
                    if len(libs) > 1:
                        libs.discard(point)
                        n = len(libs)
                        if n < cap_max:  # was n + 1 (capped): changed
                            g.cap = n
                            for s in g.stones:
                                libp[s] = n
            elif not empties:
                for g in own:
                    if len(g.libs) > 1:
                        break
                else:
                    error = _suicide(played, color, point, size)
                    break
            # the move is legal: apply it
            cells[point] = color
            if not own:
                base = _Group([point], set(empties))
            elif len(own) == 1:
                base = own[0]
                base.stones.append(point)
                blibs = base.libs
                blibs.discard(point)
                blibs.update(empties)
            else:
                base = max(own, key=_size)
                bstones, blibs = base.stones, base.libs
                for g in own:
                    if g is not base:
                        bstones += g.stones
                        blibs |= g.libs
                        for s in g.stones:
                            group_of[s] = base
                bstones.append(point)
                blibs.discard(point)
                blibs.update(empties)
                base.cap = -1  # the merged stones carried different counts: rewrite all
            group_of[point] = base
            ko = -1
            if captured:
                cap_at += [played] * len(captured)
                cap_pt += captured
                for s in captured:
                    cells[s] = EMPTY
                    group_of[s] = None
                    libp[s] = 0
                gained: list[_Group] = []
                for s in captured:
                    for t in nbrs[s]:
                        if cells[t] == color:
                            g = group_of[t]
                            g.libs.add(s)  # type: ignore[union-attr]
                            if g is not base and g not in gained:
                                gained.append(g)  # type: ignore[arg-type]
                for g in gained:
                    n = min(len(g.libs), cap_max)
                    if n != g.cap:
                        g.cap = n
                        for s in g.stones:
                            libp[s] = n
                if len(captured) == 1 and not own and len(base.libs) == 1:
                    ko = captured[0]
                    ko_color = 3 - color
            n = len(base.libs)
            if n > cap_max:
                n = cap_max
            if n != base.cap:
                base.cap = n
                for s in base.stones:
                    libp[s] = n
            else:
                libp[point] = n
        played += 1
        off += step
        off_a += step
        off_b += step
    if ko_at and ko_at[-1] >= played:  # the ko of the position whose move was illegal
        ko_at.pop()
        ko_pt.pop()
    planes = np.frombuffer(buf, dtype=np.int8)[: played * step].reshape(
        played, COMPACT_CHANNELS, area)
    applied = moves[:played]
    to_move = np.array([c for c, _ in applied], dtype=np.int8)
    points = np.array([area if p is None else p for _, p in applied], dtype=np.int16)
    _finish_planes(planes, to_move, points, ko_at, ko_pt)
    captures = np.array([cap_at, cap_pt], dtype=np.int32).T.reshape(-1, 2)
    return CompactGame(planes.reshape(played, COMPACT_CHANNELS, size, size), points, to_move,
                       error, bytes(cells0), captures)


def _size(group: _Group) -> int:
    return len(group.stones)


def _move_error(played: int, color: int, point: int | None, size: int,
                exc: IllegalMove) -> str:
    """The message `services.games.go.replay` gives for an illegal move."""
    who = "B" if color == BLACK else "W"
    return f"move {played + 1} ({who} {point_name(point, size)}): {exc}"


def _illegal(played: int, color: int, point: int, size: int, cells: bytearray,
             ko: int) -> str:
    """The error for a move off the board, on a stone or retaking the ko (checked in the
    order `GoState.play` checks them)."""
    if not 0 <= point < size * size:
        exc = IllegalMove(OFF_BOARD, point, f"point {point} on a {size}x{size} board")
    elif cells[point]:
        exc = IllegalMove(OCCUPIED, point, point_name(point, size))
    else:
        assert point == ko
        exc = IllegalMove(KO, point, f"{point_name(point, size)} retakes the ko at once")
    return _move_error(played, color, point, size, exc)


def _suicide(played: int, color: int, point: int, size: int) -> str:
    return _move_error(played, color, point, size,
                       IllegalMove(SUICIDE, point, point_name(point, size)))


def _finish_planes(planes: np.ndarray, to_move: np.ndarray, points: np.ndarray,
                   ko_at: list[int], ko_pt: list[int]) -> None:
    """In place, for the whole game ([n, 4, S*S]): stones (absolute colours) -> the mover's
    view, the ages of the last RECENT_MOVES moves (the newest wins on a repeated point; a
    pass takes an age but marks nothing), the ko points."""
    n = len(to_move)
    if n == 0:
        return
    area = planes.shape[-1]
    stones = planes[:, 0]
    own = stones == to_move[:, None]
    planes[:, 0] = (stones != EMPTY).astype(np.int8) * 2 - own
    for age in range(min(RECENT_MOVES, n - 1), 0, -1):  # oldest first: younger overwrite
        src = points[: n - age]
        keep = np.flatnonzero(src < area)
        planes[keep + age, 2, src[keep]] = age
    if ko_at:
        planes[np.asarray(ko_at), 3, np.asarray(ko_pt)] = 1


def game_compact(game: GameRecord) -> CompactGame:
    """A record's main line as `replay(game)` + `compact(states[i], to_move=colour of move
    i)` give it (no pairs at all for an unsupported size or an illegal set-up)."""
    size = game.size
    if not MIN_SIZE <= size <= MAX_SIZE:
        return _no_pairs(size, f"board size {size} is not supported")
    cells = bytes(size * size)
    if game.setup_black or game.setup_white:
        try:
            cells = GoState(size).add_stones(game.setup_black, game.setup_white).cells
        except IllegalMove as exc:
            return _no_pairs(size, f"set-up: {exc}")
    return replay_planes(size, cells, game.moves)


def _no_pairs(size: int, error: str) -> CompactGame:
    return CompactGame(np.zeros((0, COMPACT_CHANNELS, size, size), dtype=np.int8),
                       np.empty(0, dtype=np.int16), np.empty(0, dtype=np.int8), error,
                       bytes(size * size) if MIN_SIZE <= size <= MAX_SIZE else b"")


__all__ = ["CompactGame", "game_compact", "replay_planes"]
