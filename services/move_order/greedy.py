"""The greedy initial order (the paper's): from the empty board, play the unused stone of the
side to move that the policy likes best, until every stone is played.

Its factors are the probabilities it chose, so its cost comes with it: one evaluator call of
one board per position (each position depends on the previous choice). A stone the rules
refuse at that point (`Problem.play`) is skipped for the next best. When the side to move has
no playable stone left (under renju, say, the last black stone of a double three is forbidden
once the rest are down) the greedy backs up one move at a time and plays the next best stone
there (depth-first, each position's policy kept), so a legal order is found whenever one
exists within `max_extra` positions beyond the n of a straight run. None found is
`NoLegalOrder`: that is how a Go group without liberties, or two fives, is reported.
"""

from __future__ import annotations

import numpy as np

from services.games.base import COLOR_NAMES, Position
from services.move_order.likelihood import PrefixScorer, Scored, scored
from services.move_order.problem import NoLegalOrder

DEFAULT_MAX_EXTRA = 1000  # positions evaluated beyond n while backing up


class _Frame:
    """A position of the search: its policy, its stones in the policy's order, the next to try."""

    __slots__ = ("next", "policy", "ranked", "state")

    def __init__(self, state: Position, policy: np.ndarray, stones: list[int]) -> None:
        self.state = state
        self.policy = policy
        self.ranked = sorted(stones, key=lambda p: (-policy[p], p))  # ties: the lowest point
        self.next = 0


def greedy_order(scorer: PrefixScorer, max_extra: int = DEFAULT_MAX_EXTRA) -> Scored:
    """The greedy order and its cost."""
    problem = scorer.problem
    n = problem.n
    budget = n + max_extra
    stack: list[_Frame] = []
    order: list[int] = []
    left = [set(problem.black), set(problem.white)]

    def open_frame(state: Position) -> None:
        nonlocal budget
        budget -= 1
        stack.append(_Frame(state, scorer.policies([state])[0], sorted(left[len(order) % 2])))

    open_frame(problem.start)
    stuck_at: tuple[int, list[int]] | None = None
    while len(order) < n:
        frame = stack[-1]
        ply = len(order)
        after = None
        while frame.next < len(frame.ranked) and after is None:
            move = frame.ranked[frame.next]
            frame.next += 1
            after = problem.play(frame.state, move)
        if after is not None:
            order.append(move)
            left[ply % 2].discard(move)
            if len(order) == n:
                stack.append(_Frame(after, frame.policy, []))  # the final position
                break
            if budget > 0:
                open_frame(after)
                continue
            order.pop()
            left[ply % 2].add(move)
            frame.next = len(frame.ranked)  # out of budget: unwind
        if stuck_at is None:
            stuck_at = (ply, [*order])
        stack.pop()
        if not stack:
            _raise_no_order(scorer, *stuck_at)
        last = order.pop()
        left[len(order) % 2].add(last)
    return scored(order, [f.state for f in stack], [f.policy for f in stack[:-1]])


def _raise_no_order(scorer: PrefixScorer, ply: int, played: list[int]) -> None:
    problem = scorer.problem
    field = "black" if ply % 2 == 0 else "white"
    color = COLOR_NAMES[problem.color_at(ply)]
    rest = sorted(set(problem.black if ply % 2 == 0 else problem.white) - set(played))
    names = ", ".join(problem.name(p) for p in rest)
    moves = " ".join(problem.name(p) for p in played) or "none"
    raise NoLegalOrder(
        field, f"no legal order found: after the moves {moves}, none of {color}'s remaining "
        f"stones ({names}) can be played (each is illegal there, captures, or ends the game "
        "before the last stone: e.g. a Go group without liberties, or more than one five)")
