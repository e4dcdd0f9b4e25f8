"""The gate's SPRT and the Bradley-Terry ratings: known answers and the limits of each."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.ratings import bradley_terry as bt
from services.ratings.sprt import Verdict, bounds, draw_elo, llr, sprt


def test_bounds_are_walds():
    lower, upper = bounds(0.05, 0.05)
    assert lower == pytest.approx(math.log(0.05 / 0.95))
    assert upper == pytest.approx(math.log(0.95 / 0.05))


def test_even_results_favour_h0_and_clear_wins_pass():
    assert llr(50, 0, 50) < 0  # an even match is evidence against "35 Elo stronger"
    assert sprt(50, 0, 50).verdict is Verdict.CONTINUE
    assert sprt(120, 0, 80).verdict is Verdict.PASSED  # +70 Elo over 200 games
    assert sprt(80, 0, 120).verdict is Verdict.FAILED
    assert sprt(0, 0, 0).verdict is Verdict.CONTINUE and sprt(0, 0, 0).llr == 0.0


def test_llr_grows_with_the_evidence():
    assert llr(12, 0, 8) < llr(60, 0, 40) < llr(120, 0, 80)


def test_game_cap_ends_an_undecided_match():
    result = sprt(52, 0, 48, max_games=100)
    assert result.verdict is Verdict.UNDECIDED and result.games == 100
    assert "undecided" in result.describe()


def test_draws_are_evidence_but_no_wins():
    # many draws: d is large, the few decisive games weigh more per game than without draws
    assert draw_elo(10, 80, 10) > draw_elo(50, 0, 50)
    assert llr(10, 80, 10) < 0 < llr(20, 80, 0)


def test_sprt_refuses_bad_arguments():
    with pytest.raises(ValueError, match="elo1"):
        sprt(1, 0, 1, elo0=35, elo1=0)
    with pytest.raises(ValueError, match="alpha"):
        sprt(1, 0, 1, alpha=0)
    with pytest.raises(ValueError, match=">= 0"):
        llr(-1, 0, 1)


def test_sprt_error_rates_hold_in_simulation():
    """Simulated matches at the hypotheses' own strengths: false passes at elo0 and false
    fails at elo1 stay near alpha (Wald's bounds are conservative), with a generous cap."""
    rng = np.random.default_rng(0)

    def run(elo: float) -> Verdict:
        p = 1.0 / (1.0 + 10 ** (-elo / 400))
        w = lo = 0
        while True:
            if rng.random() < p:
                w += 1
            else:
                lo += 1
            result = sprt(w, 0, lo, max_games=3000)
            if result.verdict is not Verdict.CONTINUE:
                return result.verdict

    passes_at_h0 = sum(run(0.0) is Verdict.PASSED for _ in range(200))
    fails_at_h1 = sum(run(35.0) is Verdict.FAILED for _ in range(200))
    assert passes_at_h0 <= 25 and fails_at_h1 <= 25  # alpha = beta = 0.05: about 10 of 200


def _games(first, second, wins, draws, losses):
    return ([bt.Game(first, second, 1.0)] * wins + [bt.Game(first, second, 0.5)] * draws
            + [bt.Game(first, second, 0.0)] * losses)


def test_two_players_recover_the_score_difference():
    ratings = bt.fit(_games("new", "old", 76, 0, 24), anchor="old", prior_draws=0)
    expected = 400 * math.log10(76 / 24)  # the score's Elo
    assert ratings["new"].elo == pytest.approx(expected, abs=1e-6)
    assert ratings["old"].elo == 0.0 and ratings["old"].low == ratings["old"].high == 0.0
    assert ratings["new"].games == 100 and ratings["new"].score == pytest.approx(0.76)


def test_interval_of_200_even_games_is_about_48_elo():
    ratings = bt.fit(_games("a", "b", 100, 0, 100), anchor="b", prior_draws=0)
    half = (ratings["a"].high - ratings["a"].low) / 2
    assert ratings["a"].elo == pytest.approx(0.0, abs=1e-9)
    assert 47 < half < 50


def test_transitive_ratings_from_games_never_played_directly():
    games = _games("b", "a", 64, 0, 36) + _games("c", "b", 64, 0, 36)
    ratings = bt.fit(games, anchor="a", prior_draws=0)
    step = 400 * math.log10(64 / 36)
    assert ratings["b"].elo == pytest.approx(step, rel=1e-6)
    assert ratings["c"].elo == pytest.approx(2 * step, rel=1e-6)
    assert ratings["c"].high - ratings["c"].low > ratings["b"].high - ratings["b"].low


def test_a_perfect_score_stays_finite_with_the_prior():
    ratings = bt.fit(_games("x", "a", 20, 0, 0), anchor="a", prior_draws=1.0)
    assert math.isfinite(ratings["x"].elo) and ratings["x"].elo > 300
    with pytest.raises(ValueError, match="unbounded"):
        bt.fit(_games("x", "a", 20, 0, 0), anchor="a", prior_draws=0)


def test_fit_refuses_bad_games():
    with pytest.raises(ValueError, match="score"):
        bt.fit([bt.Game("a", "b", 1.5)], anchor="a")
    with pytest.raises(ValueError, match="itself"):
        bt.fit([bt.Game("a", "a", 1.0)], anchor="a")
