"""Strength from game results, numbers only (no game, network or engine): the match gate's
sequential test and the ratings of every version over all its games.

Modules:
    sprt           the sequential probability ratio test on win/draw/loss counts (the gate)
    bradley_terry  maximum-likelihood Elo of many players from all their pairwise games, with
                   95% intervals
"""
