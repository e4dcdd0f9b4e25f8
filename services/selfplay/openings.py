"""Balanced opening suites: a few stones near the centre, distinct under the board's symmetries.

Why: self-play from the empty board with the same network repeats itself (the noise and the
temperature vary it only so much), and a match from one position measures one game. An
opening suite starts games from many different but even positions; a match plays each one
twice with the colours swapped, so neither side profits from a lopsided one. The stones are
played by the rules (`Game.start(size).play`), so renju's forbidden points are never an
opening move for black, and an opening that ends the game is never chosen. `plies` 0 gives the
single empty opening (Go self-play, whose balance is the komi).
"""

from __future__ import annotations

import numpy as np

from services.games.base import Game, Position
from services.games.symmetry import N_SYMMETRIES, transform_board


def canonical_key(state: Position) -> bytes:
    """The position's smallest board image under the 8 symmetries (with the side to move)."""
    images = (np.ascontiguousarray(transform_board(state.board, k)).tobytes()
              for k in range(N_SYMMETRIES))
    return bytes([state.to_move]) + min(images)


def opening_suite(game: Game, count: int, *, size: int | None = None, plies: tuple[int, int] =
                  (2, 4), radius: int = 3, seed: int = 0, max_tries: int = 100_000
                  ) -> list[tuple[int, ...]]:
    """`count` openings of `plies[0]`..`plies[1]` moves (alternating from the first mover) on
    points within `radius` lines of the centre, pairwise distinct under the symmetries, each
    legal and leaving the game open; the same arguments give the same list. ValueError when
    the box cannot hold that many distinct openings: `max_tries` draws in all, or as many
    draws in a row as `count` (at least 1,000) without a new opening."""
    lo, hi = plies
    if count < 1 or not 0 <= lo <= hi or radius < 0:
        raise ValueError(f"bad opening suite: {count=} {plies=} {radius=}")
    start = game.start(size)
    n = start.size
    centre = n // 2
    box = np.array([(centre + dy) * n + centre + dx
                    for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1)
                    if 0 <= centre + dy < n and 0 <= centre + dx < n])
    if hi == 0:
        return [()] if count == 1 else _too_many(count, "the empty board is one opening")
    rng = np.random.default_rng(seed)
    seen: set[bytes] = set()
    suite: list[tuple[int, ...]] = []
    stale, patience = 0, max(1000, count)
    for _ in range(max_tries):
        if len(suite) == count or stale >= patience:
            break
        stale += 1
        state = start
        moves: list[int] = []
        for _ in range(int(rng.integers(lo, hi + 1))):
            points = np.asarray(state.legal_mask()).reshape(-1)[: n * n]
            legal = np.flatnonzero(points[box]) if not state.is_over else np.empty(0, np.int64)
            if len(legal) == 0:
                break
            move = int(box[rng.choice(legal)])
            state = state.play(move)
            moves.append(move)
        if state.is_over or len(moves) < lo:
            continue
        key = canonical_key(state)
        if key not in seen:
            seen.add(key)
            suite.append(tuple(moves))
            stale = 0
    if len(suite) == count:
        return suite
    return _too_many(count, f"only {len(suite)} distinct openings found within radius {radius}")


def _too_many(count: int, why: str) -> list[tuple[int, ...]]:
    raise ValueError(f"cannot make {count} openings: {why}")


__all__ = ["canonical_key", "opening_suite"]
