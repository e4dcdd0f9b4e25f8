"""The greedy initial order (the paper's): from the empty board, play the unused stone of the
side to move that the policy likes best, until every stone is played.

Its factors are the probabilities it chose, so its cost comes with it: n evaluator calls of
one board each (each position depends on the previous choice). A stone the rules refuse at
that point (`Problem.play`) is skipped for the next best; when the side to move has no
playable stone left the problem has no order the greedy can find (`NoLegalOrder`), which is
how a Go group without liberties, two fives, or a renju position only reachable through a
forbidden point is reported.
"""

from __future__ import annotations

import numpy as np

from services.games.base import COLOR_NAMES
from services.move_order.likelihood import PrefixScorer, Scored, scored
from services.move_order.problem import NoLegalOrder


def greedy_order(scorer: PrefixScorer) -> Scored:
    """The greedy order and its cost (ties go to the lowest point)."""
    problem = scorer.problem
    left = {0: sorted(problem.black), 1: sorted(problem.white)}
    state = problem.start
    states = [state]
    policies: list[np.ndarray] = []
    order: list[int] = []
    for ply in range(problem.n):
        policy = scorer.policies([state])[0]
        stones = left[ply % 2]
        ranked = sorted(stones, key=lambda p: (-policy[p], p))
        for move in ranked:
            after = problem.play(state, move)
            if after is not None:
                break
        else:
            color = COLOR_NAMES[problem.color_at(ply)]
            names = ", ".join(problem.name(p) for p in stones)
            played = " ".join(problem.name(p) for p in order) or "none"
            raise NoLegalOrder(
                "black" if ply % 2 == 0 else "white",
                f"after the moves {played}, none of {color}'s remaining stones ({names}) can "
                "be played: each is illegal there, captures, or ends the game before the last "
                "stone (e.g. a Go group without liberties, or more than one five)")
        stones.remove(move)
        order.append(move)
        policies.append(policy)
        state = after
        states.append(state)
    return scored(order, states, policies)
