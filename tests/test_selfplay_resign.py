"""Calibrated resignation (`services.selfplay.resign`): the would-be resignations replayed from
recorded games as `play_game` makes them, and the threshold rule on hand-made games."""

from __future__ import annotations

import pytest

from services.games.base import BLACK, WHITE
from services.games.registry import get_game
from services.selfplay.play import play_game
from services.selfplay.records import to_json
from services.selfplay.resign import (
    RESIGN_FLOOR,
    calibrate,
    min_checked_for,
    resign_check,
    would_resign,
)
from services.selfplay.settings import SelfPlaySettings
from tests.evaluators import HashEvaluator


def game(black: list[float], white: list[float], winner: int, *, opening: int = 0,
         no_resign: bool = True) -> dict:
    """A game dict whose searched moves alternate from the side to move after `opening`
    stones: `black` the root values of Black's moves, `white` of White's, in turn."""
    first, second = (black, white) if opening % 2 == 0 else (white, black)
    values = [v for pair in zip(first, second, strict=False) for v in pair]
    values += first[len(second):] + second[len(first):]
    return {"opening": list(range(opening)), "no_resign": no_resign, "winner": winner,
            "moves": [{"move": 0, "value": v} for v in values]}


def test_a_resignation_is_the_movers_last_values_below_minus_the_threshold():
    g = game([-0.95, -0.95, 0.1, -0.95, -0.95, -0.95], [0.9] * 6, WHITE)
    assert would_resign(g, 0.9, 3) == (10, BLACK)  # Black's moves 3..5 (plies 6, 8, 10)
    assert would_resign(g, 0.9, 2) == (2, BLACK)
    assert would_resign(g, 0.95, 2) is None  # -0.95 is not below -0.95
    # one stone of opening: White makes the first searched move
    g = game([-0.99] * 3, [0.0] * 3, WHITE, opening=1)
    assert [m["value"] for m in g["moves"]][:2] == [0.0, -0.99]
    assert would_resign(g, 0.9, 3) == (6, BLACK)


def test_the_replayed_resignation_is_the_one_play_game_records():
    """Games played out (values from a hashing evaluator) record their first would-be
    resignation; the replay from their JSON finds the same ply and side, with and without
    an opening stone (which changes who makes the first searched move)."""
    gomoku = get_game("gomoku")
    settings = SelfPlaySettings(full_visits=8, fast_visits=2, batch_size=4,
                                temperature_moves=4, max_moves=40, resign_threshold=0.15,
                                resign_after=2)
    found = 0
    for seed in range(6):
        record = play_game(gomoku, HashEvaluator(seed, values=True), settings, seed=seed,
                           opening=(112,) if seed % 2 else (), no_resign=True)
        data = to_json(record, f"w0-{seed:06d}")
        assert would_resign(data, 0.15, 2) == record.would_resign, seed
        found += record.would_resign is not None
    assert found >= 2  # the check saw resignations, not only games without one


def _thirty_percent_wrong_at_0_9() -> list[dict]:
    """40 played-out games in which Black's values sink: 28 Black lost (at -0.99), 12 Black
    won (at -0.95, the value head too pessimistic); 10 without a resignation; 5 that resigned
    (not played out: they check nothing)."""
    right = [game([0.0, -0.99, -0.99, -0.99, 0.0], [0.5] * 5, WHITE) for _ in range(28)]
    wrong = [game([0.0, -0.95, -0.95, -0.95, 0.0], [0.5] * 5, BLACK) for _ in range(12)]
    never = [game([0.2] * 5, [-0.2] * 5, BLACK) for _ in range(10)]
    resigned = [game([-0.5] * 3, [0.5] * 3, BLACK, no_resign=False) for _ in range(5)]
    return right + wrong + never + resigned


def test_a_threshold_wrong_30_percent_of_the_time_is_calibrated_stricter():
    games = _thirty_percent_wrong_at_0_9()
    at_fixed = resign_check(games, 0.9, 3)
    assert (at_fixed.checked, at_fixed.wrong) == (40, 12) and at_fixed.rate == 0.3
    found = calibrate(games, target=0.05, after=3, previous=0.9)
    # the least strict threshold at which the 12 wrong ones no longer resign: -0.95 itself
    assert found.rule == "calibrated" and found.threshold == pytest.approx(0.95)
    assert (found.checked, found.wrong, found.games) == (28, 0, 50)
    assert (found.previous, found.previous_checked, found.previous_wrong) == (0.9, 40, 12)
    assert found.min_checked == min_checked_for(0.05) == 20
    # a looser target takes the floor: 30% wrong is within 0.3
    loose = calibrate(games, target=0.3, after=3, previous=0.9)
    assert loose.rule == "calibrated" and loose.threshold == RESIGN_FLOOR


def test_the_least_strict_threshold_wins_and_needs_enough_resignations():
    # 40 right at -0.99; 5 wrong at -0.96 (5 of 45 from 0.85 up to 0.96, 11%); 2 draws at
    # -0.85 (7 of 47 below 0.85, 15%)
    games = ([game([-0.99] * 3, [0.0] * 3, WHITE) for _ in range(40)]
             + [game([-0.96] * 3, [0.0] * 3, BLACK) for _ in range(5)]
             + [game([-0.85] * 3, [0.0] * 3, 0) for _ in range(2)])
    found = calibrate(games, target=0.05, after=3, previous=0.9)
    assert found.rule == "calibrated" and found.threshold == pytest.approx(0.96)
    assert (found.checked, found.wrong) == (40, 0)
    # the same shares with too few resignations to certify one: stricter than the previous
    few = games[:4] + games[40:42]
    stricter = calibrate(few, target=0.05, after=3, previous=0.9)
    assert stricter.rule == "stricter" and stricter.threshold == pytest.approx(0.95)
    assert stricter.min_checked == 20 and stricter.previous_wrong == 2
    certified = calibrate(few, target=0.05, after=3, previous=0.9, min_checked=4)
    assert certified.rule == "calibrated" and certified.threshold == pytest.approx(0.96)


def test_without_evidence_the_previous_threshold_is_kept():
    right = [game([-0.99] * 3, [0.0] * 3, WHITE) for _ in range(5)]  # right, but few
    for games in ([], right, [game([-0.99] * 3, [0.0] * 3, BLACK, no_resign=False)]):
        kept = calibrate(games, target=0.05, after=3, previous=0.93)
        assert kept.rule == "kept" and kept.threshold == 0.93
    with pytest.raises(ValueError, match="target must be in"):
        calibrate(right, target=0.0, after=3, previous=0.9)
    with pytest.raises(ValueError, match="not a self-play game dict"):
        calibrate([{"no_resign": True, "moves": []}], target=0.05, after=3, previous=0.9)
