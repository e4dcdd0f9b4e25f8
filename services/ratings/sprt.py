"""The sequential probability ratio test that gates a candidate network by a match.

Why a sequential test: a fixed-size match either wastes games on a clear verdict or is too
small for a close one. Leela Zero's server (after cutechess) stops a candidate's match as soon
as the log-likelihood ratio of "the candidate is `elo1` stronger" over "it is `elo0` stronger"
leaves [log(beta / (1 - alpha)), log((1 - beta) / alpha)], with elo0 = 0, elo1 = 35,
alpha = beta = 0.05; a cap on the games ends the undecided ones (`Verdict.UNDECIDED`, which the
gate treats as a failure: the candidate did not show it is stronger).

The model is BayesElo's (Rémi Coulom): a rating difference x and a draw parameter d give
P(win) = f(x - d), P(loss) = f(-x - d), P(draw) = the rest, f(e) = 1 / (1 + 10^(-e / 400)).
d is estimated from the observed win and loss rates (`draw_elo`), so games that end drawn
(Gomoku's full board, a Go jigo) count as the evidence they are. elo0 and elo1 are on that
BayesElo scale, as on Leela Zero's server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

DEFAULT_ELO0 = 0.0
DEFAULT_ELO1 = 35.0
DEFAULT_ALPHA = 0.05
DEFAULT_BETA = 0.05


class Verdict(StrEnum):
    PASSED = "passed"  # the candidate is elo1 stronger (H1 accepted)
    FAILED = "failed"  # it is not (H0 accepted)
    CONTINUE = "continue"  # play on
    UNDECIDED = "undecided"  # the game cap came first


@dataclass(frozen=True)
class SprtResult:
    verdict: Verdict
    llr: float
    lower: float
    upper: float
    wins: int
    draws: int
    losses: int

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        """The candidate's score, draws counting half (NaN before any game)."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games else math.nan

    def describe(self) -> str:
        return (f"SPRT {self.verdict.value}: {self.wins}-{self.draws}-{self.losses} (W-D-L), "
                f"LLR {self.llr:.2f} in [{self.lower:.2f}, {self.upper:.2f}]")


def _f(elo: float) -> float:
    return 1.0 / (1.0 + 10.0 ** (-elo / 400.0))


def draw_elo(wins: int, draws: int, losses: int) -> float:
    """BayesElo's draw parameter d fitted to the observed rates (0.5 of a game added to each
    outcome, so a match without draws, wins or losses still gives a finite d)."""
    n = wins + draws + losses + 1.5
    pw, pl = (wins + 0.5) / n, (losses + 0.5) / n
    return 200.0 * math.log10((1.0 - pl) / pl * (1.0 - pw) / pw)


def _probabilities(elo: float, d: float) -> tuple[float, float, float]:
    win, loss = _f(elo - d), _f(-elo - d)
    return win, 1.0 - win - loss, loss


def llr(wins: int, draws: int, losses: int, elo0: float = DEFAULT_ELO0,
        elo1: float = DEFAULT_ELO1) -> float:
    """Log-likelihood ratio of "candidate elo1 stronger" over "elo0 stronger" (BayesElo)."""
    if min(wins, draws, losses) < 0:
        raise ValueError(f"counts must be >= 0, got {wins}-{draws}-{losses}")
    if wins + draws + losses == 0:
        return 0.0
    d = draw_elo(wins, draws, losses)
    p0, p1 = _probabilities(elo0, d), _probabilities(elo1, d)
    return sum(k * math.log(b / a) for k, a, b in zip((wins, draws, losses), p0, p1,
                                                          strict=True) if k)


def bounds(alpha: float = DEFAULT_ALPHA, beta: float = DEFAULT_BETA) -> tuple[float, float]:
    """Wald's stopping bounds on the LLR for error rates alpha (false pass) and beta."""
    if not (0 < alpha < 1 and 0 < beta < 1):
        raise ValueError(f"alpha and beta must be in (0, 1), got {alpha}, {beta}")
    return math.log(beta / (1.0 - alpha)), math.log((1.0 - beta) / alpha)


def sprt(wins: int, draws: int, losses: int, *, elo0: float = DEFAULT_ELO0,
         elo1: float = DEFAULT_ELO1, alpha: float = DEFAULT_ALPHA, beta: float = DEFAULT_BETA,
         max_games: int | None = None) -> SprtResult:
    """The test's state after these games (the candidate's wins, draws, losses)."""
    if elo1 <= elo0:
        raise ValueError(f"elo1 must be above elo0, got {elo0}, {elo1}")
    lower, upper = bounds(alpha, beta)
    value = llr(wins, draws, losses, elo0, elo1)
    if value >= upper:
        verdict = Verdict.PASSED
    elif value <= lower:
        verdict = Verdict.FAILED
    elif max_games is not None and wins + draws + losses >= max_games:
        verdict = Verdict.UNDECIDED
    else:
        verdict = Verdict.CONTINUE
    return SprtResult(verdict, value, lower, upper, wins, draws, losses)


__all__ = ["DEFAULT_ALPHA", "DEFAULT_BETA", "DEFAULT_ELO0", "DEFAULT_ELO1", "SprtResult",
           "Verdict", "bounds", "draw_elo", "llr", "sprt"]
