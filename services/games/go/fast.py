"""Incremental Go replay, compiled, that writes a whole game's compact planes in one pass.

Why: building the compact [4, S, S] inputs of every position with `GoState` + `compact`
costs a board copy and a full-board liberty flood fill per position (~5k positions/s per
core), and an interpreted incremental replay still ~3 µs per move. Here one numba kernel
(`_replay`, compiled once and cached on disk, so worker processes load it instead of
compiling) replays the game with groups kept as linked lists of stones (a group's liberties
are counted when a move touches it), writes each position's planes as it goes and keeps the
8 symmetry images' stones hashes as running XORs of one key per placed or captured stone.

The rules are those of `services.games.go.rules` (and `replay` with `allow_resume=True`):
captures, suicide illegal, simple ko (captured one stone, capturing stone alone with one
liberty; the captured colour may not retake at once), passes always legal, two passes
followed by a move resume play, set-up stones (via `GoState.add_stones`, so the same
errors), and the same error strings. `game_compact` returns exactly what `replay` +
`compact` build (tests/test_go_fast_replay.py compares them on the real archives). The
kernel's state set-up and move step (`start_state`, `play`) also drive the replay that packs
canonical images for the Parquet intermediates (`services.games.go.replay.game_packed_pairs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import NamedTuple

import numpy as np

from services.compiled import kernel
from services.games.go.features import COMPACT_CHANNELS, MAX_LIBERTIES, RECENT_MOVES
from services.games.go.rules import (
    BLACK,
    KO,
    MAX_SIZE,
    MIN_SIZE,
    OCCUPIED,
    OFF_BOARD,
    SUICIDE,
    WHITE,
    GameRecord,
    GoState,
    IllegalMove,
    point_name,
)
from services.games.grid_kernels import neighbour_table

# what the kernel reports for the move it stopped at
LEGAL, OFF_BOARD_MOVE, _OCCUPIED, _KO, _SUICIDE = 0, 1, 2, 3, 4
PASS = np.iinfo(np.int64).min  # a pass in the kernel's int64 points (any int is a point)
_N_IMAGES = 8  # the symmetries whose stones hashes run along the game


class CompactGame(NamedTuple):
    """A replayed main line: `inputs` int8 [n, 4, S, S] (the position before each applied
    move, seen from that move's colour), `moves` int16 [n] (S*S = pass), `to_move` int8 [n],
    `error`, the reference's message for the first illegal move (None if none), and
    `image_hashes` uint64 [n, 8]: position i's stones plane (as its mover sees it) hashed
    with the caller's keys of each symmetry image (see `replay_planes`)."""

    inputs: np.ndarray
    moves: np.ndarray
    to_move: np.ndarray
    error: str | None
    image_hashes: np.ndarray


# ---- the kernel: groups -----------------------------------------------------------------
# A group is a circular list of its stones (`nxt`); `root[p]` names the group of the stone at
# p (-1: empty point), `gsize[root]` counts its stones. `mark` / `clock` stamp the points a
# walk has seen, so a liberty shared by two stones is counted once.
@kernel
def _liberties(start, cells, nxt, nbrs, mark, clock):
    """The number of liberties of the group of the stone at `start`."""
    clock[0] += 1
    tick = clock[0]
    count = 0
    s = start
    while True:
        for j in range(4):
            q = nbrs[s, j]
            if q < 0:
                break
            if cells[q] == 0 and mark[q] != tick:
                mark[q] = tick
                count += 1
        s = nxt[s]
        if s == start:
            return count


@kernel
def _write_liberties(start, count, nxt, libp):
    """Every stone of the group at `start` gets its liberty count, capped, on the plane."""
    value = min(count, MAX_LIBERTIES)
    s = start
    while True:
        libp[s] = value
        s = nxt[s]
        if s == start:
            return


@kernel
def _xor_stone(hashes, keys, point, colour):
    """A stone of absolute `colour` placed at or removed from `point`: rows 0-7 of `hashes`
    run as Black sees the board (own = 1 = Black), rows 8-15 as White does (colours
    swapped)."""
    for k in range(_N_IMAGES):
        hashes[k] ^= keys[k, point, colour]
        hashes[_N_IMAGES + k] ^= keys[k, point, 3 - colour]


@kernel
def set_up(cells, root, nxt, gsize, libp, mark, clock, nbrs, keys, hashes, stack):
    """The set-up position (`cells`) into groups, its liberty plane and stones hashes."""
    area = cells.shape[0]
    for start in range(area):
        colour = cells[start]
        if colour == 0:
            continue
        _xor_stone(hashes, keys, start, colour)
        if root[start] >= 0:
            continue
        root[start] = start
        nxt[start] = start
        gsize[start] = 1
        top = 0
        stack[top] = start
        top += 1
        while top:
            top -= 1
            s = stack[top]
            for j in range(4):
                q = nbrs[s, j]
                if q < 0:
                    break
                if cells[q] == colour and root[q] < 0:
                    root[q] = start
                    nxt[q] = nxt[start]
                    nxt[start] = q
                    gsize[start] += 1
                    stack[top] = q
                    top += 1
        _write_liberties(start, _liberties(start, cells, nxt, nbrs, mark, clock), nxt, libp)


@kernel
def _merge(point, own, n_own, root, nxt, gsize):
    """Put the stone just placed at `point` in one group with its own-colour neighbours'
    groups (the largest keeps its name: fewer stones relabelled); return that group."""
    if n_own == 0:
        root[point] = point
        nxt[point] = point
        gsize[point] = 1
        return point
    base = own[0]
    for i in range(1, n_own):
        if gsize[own[i]] > gsize[base]:
            base = own[i]
    for i in range(n_own):
        g = own[i]
        if g == base:
            continue
        s = g
        while True:
            root[s] = base
            s = nxt[s]
            if s == g:
                break
        nxt[base], nxt[g] = nxt[g], nxt[base]  # splice the two circles into one
        gsize[base] += gsize[g]
    root[point] = base
    nxt[point] = nxt[base]
    nxt[base] = point
    gsize[base] += 1
    return base


@kernel
def _capture(g, colour, cells, root, nxt, libp, nbrs, keys, hashes, seen, clock, gained,
             n_gained):
    """Remove the group `g` (the opponent of `colour`); the roots of `colour`'s groups next
    to its stones are added to `gained` (they got liberties). Returns (stones removed, the
    last one, the new length of `gained`)."""
    removed = 0
    last = -1
    tick = clock[0]
    s = g
    while True:
        following = nxt[s]
        _xor_stone(hashes, keys, s, cells[s])
        cells[s] = 0
        root[s] = -1
        libp[s] = 0
        removed += 1
        last = s
        s = following
        if s == g:
            break
    s = g
    while True:  # every stone of g is off the board: its neighbours of `colour` gained
        for j in range(4):
            q = nbrs[s, j]
            if q < 0:
                break
            if cells[q] == colour and seen[root[q]] != tick:
                seen[root[q]] = tick
                gained[n_gained] = root[q]
                n_gained += 1
        s = nxt[s]
        if s == g:
            break
    return removed, last, n_gained


@kernel
def _add_once(groups, count, g):
    """`groups[:count]` with `g` appended unless it is there; the new count."""
    for i in range(count):
        if groups[i] == g:
            return count
    groups[count] = g
    return count + 1


@kernel
def play(point, colour, cells, root, nxt, gsize, libp, mark, seen, clock, nbrs, keys, hashes,
          ko, scratch, gained):
    """Apply one move (`point` >= 0, not a pass) if it is legal; return `LEGAL` or why not.
    `ko` ([point, colour that may not take it], point -1: none) is updated."""
    area = cells.shape[0]
    if point < 0 or point >= area:
        return OFF_BOARD_MOVE
    if cells[point] != 0:
        return _OCCUPIED
    if point == ko[0] and colour == ko[1]:
        return _KO
    own, opp, taken = scratch[0], scratch[1], scratch[2]
    n_own = n_opp = n_empty = 0
    for j in range(4):
        q = nbrs[point, j]
        if q < 0:
            break
        v = cells[q]
        if v == 0:
            n_empty += 1
            continue
        if v == colour:
            n_own = _add_once(own, n_own, root[q])
        else:
            n_opp = _add_once(opp, n_opp, root[q])
    captures = False
    for i in range(n_opp):  # an opponent's group whose last liberty this is: taken
        taken[i] = _liberties(opp[i], cells, nxt, nbrs, mark, clock) == 1
        if taken[i]:
            captures = True
    if not captures and n_empty == 0:
        breathes = False
        for i in range(n_own):
            if _liberties(own[i], cells, nxt, nbrs, mark, clock) > 1:
                breathes = True
                break
        if not breathes:
            return _SUICIDE
    cells[point] = colour
    _xor_stone(hashes, keys, point, colour)
    base = _merge(point, own, n_own, root, nxt, gsize)
    removed, last, n_gained = 0, -1, 0
    if captures:
        clock[0] += 1
        for i in range(n_opp):
            if taken[i]:
                r, last, n_gained = _capture(opp[i], colour, cells, root, nxt, libp, nbrs,
                                             keys, hashes, seen, clock, gained, n_gained)
                removed += r
    for i in range(n_opp):  # the survivors lost a liberty
        if not taken[i]:
            _write_liberties(opp[i], _liberties(opp[i], cells, nxt, nbrs, mark, clock), nxt,
                             libp)
    for i in range(n_gained):
        if gained[i] != base:
            _write_liberties(gained[i], _liberties(gained[i], cells, nxt, nbrs, mark, clock),
                             nxt, libp)
    base_liberties = _liberties(base, cells, nxt, nbrs, mark, clock)
    _write_liberties(base, base_liberties, nxt, libp)
    ko[0] = -1
    if removed == 1 and n_own == 0 and base_liberties == 1:
        ko[0] = last
        ko[1] = 3 - colour
    return LEGAL


@kernel
def start_state(cells0, nbrs, keys):
    """A replay's state at the set-up position `cells0` (copied), as `play` takes it:
    (cells, root, nxt, gsize, libp, mark, seen, clock, hashes, scratch, gained, ko), the
    groups, liberties and stones hashes of the set-up stones already in place. Every kernel
    that replays a game starts from here, so they all start from the same state."""
    area = cells0.shape[0]
    cells = cells0.copy()
    root = np.full(area, -1, np.int32)
    nxt = np.empty(area, np.int32)
    gsize = np.zeros(area, np.int32)
    libp = np.zeros(area, np.int8)
    mark = np.zeros(area, np.int64)
    seen = np.zeros(area, np.int64)
    clock = np.zeros(1, np.int64)
    hashes = np.zeros(2 * _N_IMAGES, np.uint64)
    scratch = np.empty((3, 4), np.int32)
    gained = np.empty(area, np.int32)
    ko = np.array([-1, 0], np.int64)
    set_up(cells, root, nxt, gsize, libp, mark, clock, nbrs, keys, hashes, gained)
    return cells, root, nxt, gsize, libp, mark, seen, clock, hashes, scratch, gained, ko


# ---- the kernel: planes -----------------------------------------------------------------
@kernel
def _write_position(j, colour, points, cells, libp, ko, hashes, planes, image_hashes):
    """Position j (before move j, seen by `colour`): the stones as its mover sees them (1
    own, 2 the opponent's), the capped liberties, the ages of the last RECENT_MOVES moves
    (the newest wins on a repeated point; a pass takes an age but marks nothing), the ko
    point, and its 8 stones hashes. Planes 2 and 3 arrive zeroed."""
    area = cells.shape[0]
    for p in range(area):
        v = cells[p]
        planes[j, 0, p] = 0 if v == 0 else (1 if v == colour else 2)
        planes[j, 1, p] = libp[p]
    for age in range(RECENT_MOVES, 0, -1):  # oldest first: younger overwrite
        i = j - age
        if i >= 0 and 0 <= points[i] < area:
            planes[j, 2, points[i]] = age
    if ko[0] >= 0:
        planes[j, 3, ko[0]] = 1
    half = _N_IMAGES if colour == WHITE else 0
    for k in range(_N_IMAGES):
        image_hashes[j, k] = hashes[half + k]


@kernel
def _replay(cells0, colours, points, nbrs, keys):
    """(planes int8 [n, 4, S*S], image hashes uint64 [n, 8], moves applied, why the replay
    stopped) for the moves (`colours`, `points`: int64, `PASS` a pass) from `cells0`."""
    area = cells0.shape[0]
    n = colours.shape[0]
    cells, root, nxt, gsize, libp, mark, seen, clock, hashes, scratch, gained, ko = \
        start_state(cells0, nbrs, keys)
    planes = np.zeros((n, COMPACT_CHANNELS, area), np.int8)
    image_hashes = np.empty((n, _N_IMAGES), np.uint64)
    for j in range(n):
        _write_position(j, colours[j], points, cells, libp, ko, hashes, planes, image_hashes)
        if points[j] == PASS:
            ko[0] = -1
            continue
        why = play(points[j], colours[j], cells, root, nxt, gsize, libp, mark, seen, clock,
                    nbrs, keys, hashes, ko, scratch, gained)
        if why != LEGAL:
            return planes, image_hashes, j, why
    return planes, image_hashes, n, LEGAL


# ---- the Python side ---------------------------------------------------------------------
def replay_planes(size: int, cells0: bytes, moves: Sequence[tuple[int, int | None]],
                  image_keys: np.ndarray) -> CompactGame:
    """Replay `moves` from the position `cells0` (flat bytes, index y*size+x) until the
    first illegal move. `image_keys`: uint64 [8, S*S, 3], the key of a stone of each cell
    value (1 own, 2 the opponent's) at each point in each image; `image_hashes` are the XORs
    of the keys of each position's stones."""
    area = size * size
    colours, points = move_arrays(moves)
    planes, hashes, played, why = _replay(np.frombuffer(cells0, np.uint8), colours, points,
                                          neighbour_table(size), image_keys)
    error = None if why == LEGAL else move_error(played, *moves[played], size, why)
    applied = points[:played]
    move_ids = np.where(applied == PASS, area, applied).astype(np.int16)
    return CompactGame(planes[:played].reshape(played, COMPACT_CHANNELS, size, size),
                       move_ids, colours[:played], error, hashes[:played])


def move_arrays(moves: Sequence[tuple[int, int | None]]) -> tuple[np.ndarray, np.ndarray]:
    """(colours int8 [n], points int64 [n], `PASS` for a pass): the kernels' moves."""
    n = len(moves)
    colours = np.fromiter((c for c, _ in moves), np.int8, n)
    points = np.fromiter((PASS if p is None else p for _, p in moves), np.int64, n)
    return colours, points


def move_error(played: int, colour: int, point: int, size: int, why: int) -> str:
    """The message `services.games.go.rules.replay` gives for the illegal move `played`."""
    name = point_name(point, size)
    if why == OFF_BOARD_MOVE:
        exc = IllegalMove(OFF_BOARD, point, f"point {point} on a {size}x{size} board")
    elif why == _OCCUPIED:
        exc = IllegalMove(OCCUPIED, point, name)
    elif why == _KO:
        exc = IllegalMove(KO, point, f"{name} retakes the ko at once")
    else:
        exc = IllegalMove(SUICIDE, point, name)
    who = "B" if colour == BLACK else "W"
    return f"move {played + 1} ({who} {name}): {exc}"


def game_compact(game: GameRecord, image_keys: np.ndarray | None = None) -> CompactGame:
    """A record's main line as `replay(game)` + `compact(states[i], to_move=colour of move
    i)` give it (no pairs at all for an unsupported size or an illegal set-up).
    `image_keys`: see `replay_planes` (None: the hashes are zero)."""
    size = game.size
    start = game_start(game)
    if isinstance(start, str):
        return _no_pairs(size, start)
    if image_keys is None:
        image_keys = _zero_keys(size)
    return replay_planes(size, start, game.moves, image_keys)


def game_start(game: GameRecord) -> bytes | str:
    """The position a record's moves start from (flat cells, index y*size+x), or why the
    game gives no pairs at all (an unsupported size, an illegal set-up)."""
    size = game.size
    if not MIN_SIZE <= size <= MAX_SIZE:
        return f"board size {size} is not supported"
    if game.setup_black or game.setup_white:
        try:
            return bytes(GoState(size).add_stones(game.setup_black, game.setup_white).cells)
        except IllegalMove as exc:
            return f"set-up: {exc}"
    return bytes(size * size)


@cache
def _zero_keys(size: int) -> np.ndarray:
    keys = np.zeros((_N_IMAGES, size * size, 3), np.uint64)
    keys.flags.writeable = False
    return keys


def _no_pairs(size: int, error: str) -> CompactGame:
    return CompactGame(np.zeros((0, COMPACT_CHANNELS, size, size), dtype=np.int8),
                       np.empty(0, dtype=np.int16), np.empty(0, dtype=np.int8), error,
                       np.zeros((0, _N_IMAGES), np.uint64))


__all__ = ["LEGAL", "OFF_BOARD_MOVE", "PASS", "CompactGame", "game_compact", "game_start",
           "move_arrays", "move_error", "play", "replay_planes", "set_up", "start_state"]
