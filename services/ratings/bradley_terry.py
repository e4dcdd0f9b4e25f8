"""Elo of every player (network versions, engines at a level) from all their games at once.

Why Bradley-Terry over all games: pairwise match scores give one difference each, with no
common scale and no way to use the games of version 3 against version 1 when rating version 4.
A maximum-likelihood Bradley-Terry fit (P(i beats j) = 1 / (1 + 10^((E_j - E_i) / 400))), as
minigo fits its ratings with `choix`, puts everyone on one scale from every game played, and
the curvature of the likelihood gives each rating its uncertainty.

Conventions:
* a draw counts as half a win for each side;
* `anchor` is rated 0 (the supervised start, say); every other rating is relative to it, and
  its interval is that of the difference to the anchor;
* `prior_draws` virtual draws between each player and the anchor (KataGo's rating server ties
  each network to its parent with 4) keep the fit finite for a player who won or lost every
  game, and pull players with few games towards the anchor; 1 by default, reported with the fit;
* intervals are 95% (1.96 standard errors from the inverse Fisher information), so 200 games
  near an even score give about +-48 Elo.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import numpy as np

ELO_PER_NAT = 400.0 / math.log(10.0)
Z95 = 1.959964


@dataclass(frozen=True)
class Game:
    """One game: `first` scored `score` (1 win, 0.5 draw, 0 loss) against `second`."""

    first: Hashable
    second: Hashable
    score: float


@dataclass(frozen=True)
class Rating:
    player: Hashable
    elo: float
    low: float  # 95% interval
    high: float
    games: int  # real games played (virtual draws not counted)
    score: float  # points won / games (NaN without a game)

    def describe(self) -> str:
        return f"{self.player}: {self.elo:+.0f} Elo [{self.low:+.0f}, {self.high:+.0f}] " \
               f"({self.games} games, score {self.score:.3f})"


def fit(games: Iterable[Game], anchor: Hashable, *, prior_draws: float = 1.0,
        iterations: int = 100, tolerance: float = 1e-10) -> dict[Hashable, Rating]:
    """Ratings of every player of `games` (and `anchor`) by Newton's method on the
    log-likelihood; raises ValueError for a score outside [0, 1] or a player without games."""
    games = list(games)
    players = [anchor]
    index = {anchor: 0}
    for g in games:
        if not 0.0 <= g.score <= 1.0:
            raise ValueError(f"a game's score must be in [0, 1], got {g.score}")
        if g.first == g.second:
            raise ValueError(f"{g.first} cannot play itself")
        for p in (g.first, g.second):
            if p not in index:
                index[p] = len(players)
                players.append(p)
    n = len(players)
    # wins[i, j]: points i took from j; played[i]: real games of i
    wins = np.zeros((n, n))
    played = np.zeros(n, dtype=np.int64)
    points = np.zeros(n)
    for g in games:
        i, j = index[g.first], index[g.second]
        wins[i, j] += g.score
        wins[j, i] += 1.0 - g.score
        played[i] += 1
        played[j] += 1
        points[i] += g.score
        points[j] += 1.0 - g.score
    if prior_draws <= 0:
        unbounded = [players[i] for i in range(n) if played[i] and points[i] in (0, played[i])]
        if unbounded:
            raise ValueError(f"{unbounded[0]} won or lost every game: its rating is unbounded "
                             "without prior_draws > 0")
    else:
        wins[1:, 0] += prior_draws / 2
        wins[0, 1:] += prior_draws / 2
    total = wins + wins.T  # games (real and virtual) between each pair
    if n > 1 and (total[1:].sum(axis=1) == 0).any():
        raise ValueError("every player needs a game (or prior_draws > 0) to be rated")

    r = np.zeros(n)  # natural units; r[0] (the anchor) stays 0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(r[None, :] - r[:, None]))  # p[i, j] = P(i beats j)
        gradient = (wins - total * p).sum(axis=1)
        weight = total * p * (1.0 - p)
        hessian = -np.diag(weight.sum(axis=1)) + weight  # symmetric
        step = np.linalg.solve(hessian[1:, 1:], -gradient[1:]) if n > 1 else np.zeros(0)
        r[1:] += step
        if n == 1 or np.abs(step).max() < tolerance:
            break
    p = 1.0 / (1.0 + np.exp(r[None, :] - r[:, None]))
    weight = total * p * (1.0 - p)
    information = np.diag(weight.sum(axis=1)) - weight
    covariance = np.zeros((n, n))
    if n > 1:
        covariance[1:, 1:] = np.linalg.inv(information[1:, 1:])
    ratings = {}
    for player, i in index.items():
        elo = float(r[i] * ELO_PER_NAT)
        half = float(Z95 * math.sqrt(max(covariance[i, i], 0.0)) * ELO_PER_NAT)
        score = points[i] / played[i] if played[i] else math.nan
        ratings[player] = Rating(player, elo, elo - half, elo + half, int(played[i]), score)
    return ratings


__all__ = ["ELO_PER_NAT", "Game", "Rating", "fit"]
