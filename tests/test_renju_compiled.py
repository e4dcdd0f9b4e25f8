"""The compiled renju rules (`renju_compiled`) against the interpreted ones (`renju`): the same
forbidden points, for the same reasons, on many random dense positions."""

from __future__ import annotations

import numpy as np

from services.games.gomoku import renju, renju_compiled

REASONS = {renju.OVERLINE: renju_compiled.OVERLINE, renju.DOUBLE_FOUR: renju_compiled.DOUBLE_FOUR,
           renju.DOUBLE_THREE: renju_compiled.DOUBLE_THREE}


def test_forbidden_points_match_the_interpreted_rules() -> None:
    rng = np.random.default_rng(11)
    found = {code: 0 for code in REASONS.values()}
    for k in range(600):
        size = 15 if k % 4 else int(rng.integers(7, 20))
        black, white = rng.uniform(0.1, 0.4), rng.uniform(0.05, 0.3)
        u = rng.random(size * size)
        board = np.where(u < black, 1, np.where(u < black + white, 2, 0)).astype(np.int8)
        expected = np.zeros(size * size, np.int8)
        for p, reason in renju.forbidden_points(board.reshape(size, size)).items():
            expected[p] = REASONS[reason]
        got = np.empty(size * size, np.int8)
        count = renju_compiled.forbidden_reasons(board, size, got)
        assert (got == expected).all(), k
        assert count == int((expected > 0).sum())
        for code in found:
            found[code] += int((got == code).sum())
    assert all(n > 20 for n in found.values()), found  # every reason was exercised
