"""Turn a game's move list into (position, next move) pairs by replaying it under the rules.

A move the rules refuse ends the game's pairs there; the caller gets the reason so the record
can be quarantined instead of silently producing bad positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.games.gomoku import BLACK, WHITE, GomokuState, IllegalMove, Rule


@dataclass(frozen=True)
class GamePairs:
    boards: np.ndarray  # int8 [n, size*size], the position before each move
    moves: np.ndarray  # int16 [n], the move played
    to_move: np.ndarray  # int8 [n], BLACK or WHITE
    plies: np.ndarray  # int16 [n], 0-based move number
    error: str | None  # why the replay stopped early, None when the whole game was legal


def replay(moves: tuple[int, ...] | list[int], size: int = 15,
           rule: Rule = Rule.FREESTYLE) -> GamePairs:
    state = GomokuState(size=size, rule=rule)
    error = None
    legal = 0
    for i, point in enumerate(moves):
        try:
            state = state.play(point)
        except IllegalMove as exc:
            error = f"illegal move at ply {i + 1}: {exc}"
            break
        legal += 1
    played = np.asarray(moves[:legal], dtype=np.int16)
    colors = np.where(np.arange(legal) % 2 == 0, BLACK, WHITE).astype(np.int8)
    # boards[i] holds every stone played before ply i: stone j is present in rows i > j.
    boards = np.zeros((legal, size * size), dtype=np.int8)
    if legal:
        later = np.arange(legal)[:, None] > np.arange(legal)[None, :]  # [ply, stone]
        rows, stones = np.nonzero(later)
        boards[rows, played[stones]] = colors[stones]
    return GamePairs(boards, played, colors, np.arange(legal, dtype=np.int16), error)
