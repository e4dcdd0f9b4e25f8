"""The Capture Game and its greedy opponent, one game at a time in plain Python: obviously right
and slow, the reference `services.games.capture.batch` is checked against (move by move) and
timed against (benchmarks/capture_speed.py).

Boards are lists of S*S ints (flat point y * S + x; 0 empty, 1 black, 2 white). Groups are
found by a breadth-first walk over same-coloured neighbours, liberties as the set of empty
points next to a group. The rules and the greedy player are written as the paper and
`services.games.capture.batch`'s docstring state them, with no shortcut: the greedy player
plays every candidate move on a copy of the board and counts liberties there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

EMPTY, BLACK, WHITE = 0, 1, 2
GOES_ON, CAPTURED, SUICIDE = 0, 1, -1


def neighbours(p: int, size: int) -> list[int]:
    y, x = divmod(p, size)
    out = []
    for dx, dy in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        if 0 <= x + dx < size and 0 <= y + dy < size:
            out.append((y + dy) * size + x + dx)
    return out


def group(board: Sequence[int], p: int, size: int) -> tuple[set[int], set[int]]:
    """(stones, liberties) of the group of the stone at p."""
    colour = board[p]
    stones = {p}
    frontier = [p]
    libs: set[int] = set()
    while frontier:
        s = frontier.pop()
        for q in neighbours(s, size):
            if board[q] == EMPTY:
                libs.add(q)
            elif board[q] == colour and q not in stones:
                stones.add(q)
                frontier.append(q)
    return stones, libs


def groups(board: Sequence[int], size: int) -> list[tuple[int, set[int], set[int]]]:
    """Every group: (colour, stones, liberties)."""
    seen: set[int] = set()
    out = []
    for p, c in enumerate(board):
        if c != EMPTY and p not in seen:
            stones, libs = group(board, p, size)
            seen |= stones
            out.append((c, stones, libs))
    return out


def liberties(board: Sequence[int], size: int) -> list[int]:
    """Per point: the liberties of the group of the stone there, 0 on empty points."""
    out = [0] * (size * size)
    for _, stones, libs in groups(board, size):
        for s in stones:
            out[s] = len(libs)
    return out


def play(board: list[int], colour: int, p: int, size: int) -> int:
    """Place `colour` at empty point p (in place): CAPTURED if an opponent group is left
    without liberties, else SUICIDE if its own group is, else GOES_ON."""
    assert board[p] == EMPTY, "the point is taken"
    board[p] = colour
    for q in neighbours(p, size):
        if board[q] == 3 - colour and not group(board, q, size)[1]:
            return CAPTURED
    if not group(board, p, size)[1]:
        return SUICIDE
    return GOES_ON


def greedy_move(board: Sequence[int], colour: int, size: int, u: float) -> int:
    """The paper's greedy player (capture; else extend a group in atari; else max p - q over
    the non-suicide moves; else a random empty point), ties: the candidate at floor(u * n) in
    ascending point order."""
    empty = [p for p in range(size * size) if board[p] == EMPTY]
    outcome = {}
    after = {}
    for p in empty:
        b = list(board)
        outcome[p] = play(b, colour, p, size)
        after[p] = b
    captures = [p for p in empty if outcome[p] == CAPTURED]
    if captures:
        return pick(captures, u)
    valid = [p for p in empty if outcome[p] == GOES_ON]
    in_atari = [libs for c, _, libs in groups(board, size) if c == colour and len(libs) == 1]
    extensions = sorted({p for libs in in_atari for p in libs if p in valid})
    candidates = extensions or valid
    if not candidates:
        return pick(empty, u)  # where the Java player would pass

    def p_minus_q(p: int) -> int:
        gs = groups(after[p], size)
        own = min(len(libs) for c, _, libs in gs if c == colour)
        theirs = [len(libs) for c, _, libs in gs if c != colour]
        return own - (min(theirs) if theirs else 0)

    values = {p: p_minus_q(p) for p in candidates}
    best = max(values.values())
    return pick([p for p in candidates if values[p] == best], u)


def pick(candidates: Sequence[int], u: float) -> int:
    ordered = sorted(candidates)
    return ordered[min(int(u * len(ordered)), len(ordered) - 1)]


def network_move(board: Sequence[int], scores: Sequence[float]) -> int:
    """The empty point with the highest score (NaN skipped, ties: the lowest point)."""
    best, arg = 0.0, -1
    for p, c in enumerate(board):
        s = float(scores[p])
        if c == EMPTY and s == s and (arg < 0 or s > best):
            best, arg = s, p
    if arg < 0:
        arg = board.index(EMPTY)
    return arg


def play_game(policy: Callable[[np.ndarray, np.ndarray], object], size: int,
              network_colour: int, uniforms: Sequence[float]) -> tuple[int, list[int]]:
    """One game of `policy` (called on one board) against the greedy player; `uniforms[ply]`
    breaks the greedy player's ties at that ply. Returns (+1 network won / -1 lost, moves)."""
    board = [EMPTY] * (size * size)
    colour = BLACK
    moves: list[int] = []
    for ply in range(size * size):
        if colour == network_colour:
            arr = np.array(board, dtype=np.int8).reshape(1, size, size)
            scores = policy(arr, np.array([colour], dtype=np.int8))
            if hasattr(scores, "detach"):
                scores = scores.detach().cpu().numpy()
            move = network_move(board, np.asarray(scores, dtype=np.float32).reshape(-1))
        else:
            move = greedy_move(board, colour, size, float(uniforms[ply]))
        moves.append(move)
        result = play(board, colour, move, size)
        if result != GOES_ON:
            mover_won = result == CAPTURED
            return (1 if mover_won == (colour == network_colour) else -1), moves
        colour = 3 - colour
    return 0, moves
