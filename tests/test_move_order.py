"""Move-order inference (services.move_order) on in-process evaluators: validation, the rules
of every prefix, the neighbours, the prefix-cached cost against a from-scratch reference, the
evaluator calls per candidate, and the annealing recovering a planted order."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pytest

from services import numerics
from services.api.movepred.v1 import search_pb2
from services.evaluator import NonFiniteOutputError
from services.games.ascii_board import board_from_ascii
from services.games.base import InvalidRequest
from services.games.go import features as go_features
from services.games.registry import get_game
from services.move_order.annealing import (
    AnnealingParams,
    anneal,
    anneal_lockstep,
    default_iterations,
    exchange,
    infer_order,
    ladder,
    polish,
    temperature,
)
from services.move_order.greedy import greedy_order
from services.move_order.likelihood import PrefixScorer
from services.move_order.neighbours import NAMES, every_neighbour, propose
from services.move_order.problem import (
    InvalidStones,
    NoLegalOrder,
    Problem,
    problem_from_stones,
    stones_from_board,
)

GOMOKU = get_game("gomoku")
GO = get_game("go")


@dataclass(frozen=True)
class Out:
    logits: np.ndarray
    model_name: str = "test"
    model_version: str = "1"


class PlantedEvaluator:
    """A policy that prefers one order: on a board holding exactly planted[:k], planted[k]
    gets a large bonus; every unplayed planted point's logit falls with its index (so off
    that path the planted order is still the gradient); other points are unlikely. Reads the
    stones of a Gomoku board [N, S, S] or of Go planes [N, 4, S, S] (plane 0)."""

    def __init__(self, planted: list[int], width: int, bonus: float = 6.0) -> None:
        self.planted = list(planted)
        self.width = width
        self.bonus = bonus
        self.calls: list[int] = []  # boards per call

    def infer(self, boards: np.ndarray) -> Out:
        self.calls.append(len(boards))
        n = len(boards)
        occupied = (boards[:, 0] if boards.ndim == 4 else boards).reshape(n, -1) != 0
        logits = np.full((n, self.width), -4.0, dtype=np.float32)
        for r in range(n):
            on = set(np.flatnonzero(occupied[r]).tolist())
            for j, p in enumerate(self.planted):
                if p not in on:
                    logits[r, p] = -0.5 * j
            k = len(on)
            if k < len(self.planted) and on == set(self.planted[:k]):
                logits[r, self.planted[k]] += self.bonus
        return Out(logits)


def naive_cost(problem: Problem, evaluator: PlantedEvaluator,
               order: list[int] | tuple[int, ...]) -> tuple[float, np.ndarray]:
    """Reference: every prefix replayed from the empty board and evaluated alone, one call
    per prefix; (cost, factors)."""
    factors = []
    for i, move in enumerate(order):
        state = problem.start
        for m in order[:i]:
            state = state.play(m)
        board = problem.game.network_input(state)[None]
        logits = np.asarray(evaluator.infer(board).logits)[0]
        policy = numerics.masked_softmax(logits, state.legal_mask())
        factors.append(policy[move])
    f = np.array(factors)
    return 1.0 / math.exp(np.log(f).mean()), f


def legal_in_every_prefix(problem: Problem, order: tuple[int, ...]) -> bool:
    """Reference: the rules accept each move, no stone is ever removed, the game is not over
    before the last stone, and every stone is used once in alternation."""
    if sorted(order[0::2]) != sorted(problem.black) or sorted(order[1::2]) != sorted(problem.white):
        return False
    state = problem.start
    for i, move in enumerate(order):
        if state.is_over:
            return False
        try:
            state = state.play(move)
        except ValueError:
            return False
        if np.count_nonzero(state.board) != i + 1:
            return False
    return True


def random_problem(game, size: int, n: int, seed: int) -> tuple[Problem, list[int]]:
    """n stones at random points in a random order (the planted one), Gomoku without fives."""
    rng = np.random.default_rng(seed)
    while True:
        pts = rng.choice(size * size, n, replace=False).tolist()
        problem = problem_from_stones(game, pts[0::2], pts[1::2], size=size)
        if legal_in_every_prefix(problem, tuple(pts)):
            return problem, pts


# ---- validation -----------------------------------------------------------------------------

def test_counts_must_alternate_and_the_error_names_them() -> None:
    with pytest.raises(InvalidStones) as err:
        problem_from_stones(GOMOKU, [0, 1, 2], [20])
    assert err.value.field == "black"
    assert "black has 3 stones and white 1" in str(err.value)
    with pytest.raises(InvalidStones, match="black has 1 stones and white 2"):
        problem_from_stones(GOMOKU, [0], [20, 21])
    assert isinstance(err.value, InvalidRequest) and isinstance(err.value, ValueError)
    with pytest.raises(InvalidStones, match="no stones"):
        problem_from_stones(GOMOKU, [], [])


def test_points_off_the_board_or_given_twice_are_named() -> None:
    with pytest.raises(InvalidStones) as err:
        problem_from_stones(GOMOKU, [0, 225], [20])
    assert err.value.field == "black[1]" and "off the 15x15 board" in str(err.value)
    with pytest.raises(InvalidStones, match="off the 9x9 board"):
        problem_from_stones(GO, [81], [], size=9)
    with pytest.raises(InvalidStones, match="h8 is given twice") as err:
        problem_from_stones(GOMOKU, [112], [112])
    assert err.value.field == "white[0]"
    with pytest.raises(InvalidStones, match="given twice"):
        problem_from_stones(GOMOKU, [3, 3], [4])
    with pytest.raises(InvalidStones, match="flat index"):
        problem_from_stones(GOMOKU, [1.5], [])  # type: ignore[list-item]


def test_a_size_or_rule_the_game_does_not_serve_is_the_games_error() -> None:
    with pytest.raises(InvalidRequest, match="board_size"):
        problem_from_stones(GOMOKU, [0], [], size=19)
    with pytest.raises(InvalidRequest, match="rule"):
        problem_from_stones(GO, [0], [], size=9, rule=search_pb2.RULE_RENJU)


GO_DEAD_CORNER = """
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
. . . . . . . . .
X . . . . . . . .
O X . . . . . . .
"""


def test_a_go_group_without_liberties_has_no_legal_order() -> None:
    black, white = stones_from_board(board_from_ascii(GO_DEAD_CORNER))
    problem = problem_from_stones(GO, black, white, size=9)
    evaluator = PlantedEvaluator([*black, *white], 82)
    with pytest.raises(NoLegalOrder) as err:
        infer_order(problem, evaluator, AnnealingParams(iterations=10, restarts=1))
    assert isinstance(err.value, InvalidStones)
    assert "no legal order" in str(err.value)
    for order in ((0, 9, 1), (1, 9, 0)):  # each black stone last: a capture
        assert PrefixScorer(problem, evaluator).score(order) is None


# ---- the rules of every prefix ---------------------------------------------------------------

# black's h8 makes a double three once g8, i8, h7 and h9 are down (forbidden under renju)
RENJU_DOUBLE_THREE = """
. . . . . . . . . . . . . . O
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . X . . . . . . .
. . . . . . X X X . . . . . .
. . . . . . . X . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
O . O . . . . . . . . . . . O
"""


def renju_problem() -> tuple[Problem, list[int]]:
    black, white = stones_from_board(board_from_ascii(RENJU_DOUBLE_THREE))
    problem = problem_from_stones(GOMOKU, black, white, rule=search_pb2.RULE_RENJU)
    h8 = GOMOKU.parse_move("h8", 15)
    others = [p for p in black if p != h8]
    planted = [0] * 9
    planted[0::2] = [*others, h8]  # h8 last: forbidden
    planted[1::2] = white
    return problem, planted


def test_renju_forbidden_last_stone_is_refused_and_the_greedy_backs_up() -> None:
    problem, planted = renju_problem()
    evaluator = PlantedEvaluator(planted, 225)
    scorer = PrefixScorer(problem, evaluator)
    assert not legal_in_every_prefix(problem, tuple(planted))
    assert scorer.score(planted) is None
    greedy = greedy_order(scorer)
    assert legal_in_every_prefix(problem, greedy.order)
    assert greedy.order[-1] != planted[-1]


def test_the_greedy_backs_up_only_within_its_budget() -> None:
    problem, planted = renju_problem()
    evaluator = PlantedEvaluator(planted, 225)
    with pytest.raises(NoLegalOrder, match="none of black's remaining stones \\(h8\\)"):
        greedy_order(PrefixScorer(problem, evaluator), max_extra=0)
    evaluator.calls.clear()
    greedy = greedy_order(PrefixScorer(problem, evaluator), max_extra=3)
    assert legal_in_every_prefix(problem, greedy.order)
    assert len(evaluator.calls) <= 9 + 3


def test_every_accepted_order_is_legal_in_every_prefix() -> None:
    problem, planted = renju_problem()
    evaluator = PlantedEvaluator(planted, 225)
    accepted: list[tuple[int, ...]] = []
    result = infer_order(problem, evaluator,
                         AnnealingParams(iterations=300, restarts=2, init="random", seed=3),
                         on_accept=lambda s: accepted.append(s.order))
    assert accepted and sum(r.illegal for r in result.restarts) > 0
    assert all(legal_in_every_prefix(problem, order) for order in accepted)
    assert legal_in_every_prefix(problem, result.best.order)


GOMOKU_FIVE = """
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . X X X X X . . . . .
. . . . . O O O O . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
. . . . . . . . . . . . . . .
"""


def test_a_finished_gomoku_position_ends_with_the_five() -> None:
    black, white = stones_from_board(board_from_ascii(GOMOKU_FIVE))
    problem = problem_from_stones(GOMOKU, black, white)
    planted = [0] * 9
    planted[0::2] = black  # the five is complete at ply 8 only
    planted[1::2] = white
    accepted: list[tuple[int, ...]] = []
    result = infer_order(problem, PlantedEvaluator(planted, 225),
                         AnnealingParams(iterations=200, restarts=1, init="random"),
                         on_accept=lambda s: accepted.append(s.order))
    for order in [*accepted, result.best.order, result.greedy.order]:
        assert legal_in_every_prefix(problem, order)
    assert result.best.states[-1].is_over and not result.best.states[-2].is_over


# ---- neighbours --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [5, 6, 8, 21])
def test_neighbours_keep_alternation_and_the_stone_set(name: str, n: int) -> None:
    rng = np.random.default_rng(n)
    order = tuple(range(100, 100 + n))
    black, white = sorted(order[0::2]), sorted(order[1::2])
    changed = 0
    for it in range(300):
        move = propose(name, order, rng, it)
        assert move is not None
        new, first = move
        assert sorted(new[0::2]) == black and sorted(new[1::2]) == white
        assert new[:first] == order[:first] and new[first] != order[first]
        changed += new != order
        order = new
    assert changed == 300


def test_neighbours_that_cannot_apply_say_so() -> None:
    rng = np.random.default_rng(0)
    assert propose("rot3", (1, 2, 3, 4), rng, 0) is None  # two stones of each colour
    assert propose("mov2", (1, 2, 3), rng, 0) is None
    for _ in range(20):  # four stones: only the pair at plies 0-1 has another place
        assert propose("mov2", (1, 2, 3, 4), rng, 0) == ((3, 4, 1, 2), 0)
    assert propose("mix", (1, 2, 3, 4), rng, 2) is not None  # rot3's turn: the next one
    with pytest.raises(ValueError, match="unknown neighbour"):
        propose("swap", (1, 2, 3, 4), rng, 0)


# ---- the cost --------------------------------------------------------------------------------

@pytest.mark.parametrize("cache_size", [0, 3, 50_000])
@pytest.mark.parametrize("game,size", [(GOMOKU, 15), (GO, 9)])
def test_prefix_cache_gives_exactly_the_from_scratch_costs(game, size: int,
                                                           cache_size: int) -> None:
    problem, planted = random_problem(game, size, 12, seed=size)
    evaluator = PlantedEvaluator(planted, game.policy_size(size))
    scorer = PrefixScorer(problem, evaluator, cache_size=cache_size,
                          prefix_cache_size=cache_size)
    current = scorer.score(planted)
    assert current is not None
    cost, factors = naive_cost(problem, evaluator, planted)
    assert current.cost == cost and np.array_equal(current.factors, factors)
    rng = np.random.default_rng(1)
    for it in range(60):
        order, first = propose("mix", current.order, rng, it)
        candidate = scorer.rescore(current, order, first)
        assert candidate is not None  # no capture on these boards, no five
        cost, factors = naive_cost(problem, evaluator, order)
        assert candidate.cost == cost and np.array_equal(candidate.factors, factors)
        assert candidate.geometric_mean == pytest.approx(1 / cost, rel=1e-12)
        if it % 2:
            current = candidate


def count_plays(problem) -> list[int]:
    """Make `problem.play` record each move it plays (the frozen Problem, for one test only);
    returns the list it appends to."""
    played: list[int] = []
    inner = problem.play

    def counting(state, move):
        played.append(move)
        return inner(state, move)

    object.__setattr__(problem, "play", counting)
    return played


def test_a_move_sequence_seen_before_is_neither_replayed_nor_evaluated() -> None:
    problem, planted = renju_problem()
    evaluator = PlantedEvaluator(planted, 225)
    scorer = PrefixScorer(problem, evaluator)
    current = greedy_order(scorer)
    played = count_plays(problem)
    rng = np.random.default_rng(2)
    moves = [propose("mix", current.order, rng, it) for it in range(30)]
    moves.append((tuple(planted), 0))  # h8 last: the double three, forbidden
    first_pass = [scorer.rescore(current, order, first) for order, first in moves]
    assert played and first_pass[-1] is None
    played.clear()
    evaluator.calls.clear()
    again = [scorer.rescore(current, order, first) for order, first in moves]
    assert played == [] and evaluator.calls == []
    for a, b in zip(first_pass, again, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert b.order == a.order and np.array_equal(b.factors, a.factors)
            assert b.states == a.states


def test_one_batched_call_per_candidate_for_the_changed_prefixes() -> None:
    problem, planted = random_problem(GOMOKU, 15, 14, seed=2)
    evaluator = PlantedEvaluator(planted, 225)
    scorer = PrefixScorer(problem, evaluator, cache_size=0)
    current = scorer.score(planted)
    assert evaluator.calls == [14]
    rng = np.random.default_rng(5)
    for it in range(40):
        order, first = propose("mix", current.order, rng, it)
        evaluator.calls.clear()
        before = scorer.calls
        scorer.rescore(current, order, first)
        changed = 14 - first - 1  # s_first and earlier keep their policies
        assert evaluator.calls == ([changed] if changed else [])
        assert scorer.calls - before == len(evaluator.calls)


def test_inputs_evaluated_before_are_not_sent_again() -> None:
    problem, planted = random_problem(GOMOKU, 15, 14, seed=2)
    evaluator = PlantedEvaluator(planted, 225)
    sent: set[bytes] = set()
    inner = evaluator.infer

    def recording(boards: np.ndarray) -> Out:
        keys = [b.tobytes() for b in boards]
        assert len(set(keys)) == len(keys) and not sent & set(keys)
        sent.update(keys)
        return inner(boards)

    evaluator.infer = recording  # type: ignore[method-assign]
    scorer = PrefixScorer(problem, evaluator)
    current = scorer.score(planted)
    rng = np.random.default_rng(5)
    for it in range(60):
        order, first = propose("mix", current.order, rng, it)
        evaluator.calls.clear()
        candidate = scorer.rescore(current, order, first)
        assert len(evaluator.calls) <= 1
        inputs = {GOMOKU.network_input(st).tobytes() for st in candidate.states[first + 1:-1]}
        assert inputs <= sent
        current = candidate
    # a swap of plies 0 and 2 on a fresh scorer: s_1 and s_2 are new, the boards from ply 3
    # on hold the same stones as before
    fresh = PlantedEvaluator(planted, 225)
    scorer = PrefixScorer(problem, fresh)
    current = scorer.score(planted)
    swapped = (planted[2], planted[1], planted[0], *planted[3:])
    fresh.calls.clear()
    candidate = scorer.rescore(current, swapped, 0)
    assert fresh.calls == [2]
    assert candidate.cost == naive_cost(problem, fresh, swapped)[0]


def test_each_game_says_when_two_orders_reach_one_position() -> None:
    """Swapping plies 0 and 2: a Gomoku position (its board) is the same from ply 3 on; a Go
    position also holds the last RECENT_MOVES moves (its network input does), so it is the
    same only once the swapped plies have left that window, and stays so."""
    problem, planted = random_problem(GOMOKU, 15, 10, seed=3)
    transposed = (planted[2], planted[1], planted[0], *planted[3:])
    a, b = problem.replay(planted), problem.replay(transposed)
    assert a is not None and b is not None
    assert GOMOKU.transposition_key(a[2]) == GOMOKU.transposition_key(b[2])
    assert GOMOKU.transposition_key(a[0]) != GOMOKU.transposition_key(b[0])
    go_problem, go_planted = random_problem(GO, 9, 12, seed=3)
    go_transposed = (go_planted[2], go_planted[1], go_planted[0], *go_planted[3:])
    a, b = go_problem.replay(go_planted), go_problem.replay(go_transposed)
    assert a is not None and b is not None
    window = go_features.RECENT_MOVES
    key = GO.transposition_key
    # a[i] is the position after i + 1 moves: its last moves are plies i + 1 - window .. i
    assert [key(x) == key(y) for x, y in zip(a, b, strict=True)] == [
        i - window + 1 > 2 for i in range(12)]
    for x, y in zip(a, b, strict=True):
        if key(x) == key(y):
            assert np.array_equal(GO.network_input(x), GO.network_input(y))
            assert np.array_equal(x.legal_mask(), y.legal_mask())


@pytest.mark.parametrize("game,size,replayed", [(GOMOKU, 15, 3), (GO, 9, 14)])
def test_a_transposed_tail_is_neither_replayed_nor_evaluated(game, size: int,
                                                             replayed: int) -> None:
    """A swap of plies 0 and 2: from ply 3 on both orders have played the same stones, which
    a Gomoku position is all of (its key), so only plies 0-2 are played and s_1, s_2 sent;
    Go's key holds the last moves too, so every ply from 0 on is played the first time (the
    current order's own moves were never looked up by key) and s_1 .. s_6 are sent; a later
    candidate rejoins the positions of the first from the ply after its window."""
    problem, planted = random_problem(game, size, 14, seed=2)
    evaluator = PlantedEvaluator(planted, game.policy_size(size))
    scorer = PrefixScorer(problem, evaluator)
    current = scorer.score(planted)
    played = count_plays(problem)
    swapped = (planted[2], planted[1], planted[0], *planted[3:])
    evaluator.calls.clear()
    candidate = scorer.rescore(current, swapped, 0)
    assert candidate is not None and len(played) == replayed
    # Go: s_3.. hold the same stones but not the same last moves, so a few more are sent
    assert evaluator.calls == [2] if game is GOMOKU else evaluator.calls[0] > 2
    if game is GOMOKU:  # s_3 is current's position by its key, the later ones are kept
        key = GOMOKU.transposition_key
        assert key(candidate.states[3]) == key(current.states[3])
        assert all(a is b for a, b in zip(candidate.states[4:], current.states[4:],
                                          strict=True))
    cost, factors = naive_cost(problem, evaluator, swapped)
    assert candidate.cost == cost and np.array_equal(candidate.factors, factors)
    if game is GO:
        # plies 0, 2 and 4 rotated: the positions after ply 4 + RECENT_MOVES are the first
        # candidate's by key, whose moves from there on were played and kept
        rotated = (planted[4], planted[1], planted[0], planted[3], planted[2], *planted[5:])
        played.clear()
        evaluator.calls.clear()
        second = scorer.rescore(current, rotated, 0)
        assert second is not None and len(played) == 5 + go_features.RECENT_MOVES
        assert evaluator.calls == [4 + go_features.RECENT_MOVES]  # s_1 .. s_8
        cost, factors = naive_cost(problem, evaluator, rotated)
        assert second.cost == cost and np.array_equal(second.factors, factors)


def test_changed_prefixes_over_max_boards_are_split() -> None:
    problem, planted = random_problem(GOMOKU, 15, 12, seed=4)
    evaluator = PlantedEvaluator(planted, 225)
    scorer = PrefixScorer(problem, evaluator, max_boards=5, cache_size=0)
    current = scorer.score(planted)
    assert evaluator.calls == [5, 5, 2]
    evaluator.calls.clear()
    swapped = (planted[2], *planted[1:2], planted[0], *planted[3:])
    assert scorer.rescore(current, swapped, 0) is not None
    assert evaluator.calls == [5, 5, 1]


def test_an_illegal_candidate_costs_no_call() -> None:
    problem, planted = renju_problem()
    evaluator = PlantedEvaluator(planted, 225)
    scorer = PrefixScorer(problem, evaluator)
    legal = greedy_order(scorer)
    evaluator.calls.clear()
    assert scorer.rescore(legal, tuple(planted), 0) is None
    assert evaluator.calls == []


def test_non_finite_logits_are_refused() -> None:
    problem, planted = random_problem(GOMOKU, 15, 4, seed=0)

    class NaNEvaluator:
        def infer(self, boards: np.ndarray) -> Out:
            return Out(np.full((len(boards), 225), np.nan, dtype=np.float32))

    with pytest.raises(NonFiniteOutputError):
        PrefixScorer(problem, NaNEvaluator()).score(planted)


# ---- greedy and annealing ---------------------------------------------------------------------

def test_greedy_plays_the_planted_order_with_one_call_per_position() -> None:
    problem, planted = random_problem(GOMOKU, 15, 16, seed=7)
    evaluator = PlantedEvaluator(planted, 225)
    greedy = greedy_order(PrefixScorer(problem, evaluator))
    assert list(greedy.order) == planted
    assert evaluator.calls == [1] * 16
    assert greedy.cost == naive_cost(problem, evaluator, planted)[0]


@pytest.mark.parametrize("game,size,n", [(GOMOKU, 15, 14), (GO, 9, 12)])
def test_annealing_from_random_orders_recovers_the_planted_order(game, size: int, n: int) -> None:
    problem, planted = random_problem(game, size, n, seed=11)
    evaluator = PlantedEvaluator(planted, game.policy_size(size))
    result = infer_order(problem, evaluator,
                         AnnealingParams(iterations=2500, restarts=2, init="random", seed=1))
    assert all(r.initial.order != tuple(planted) for r in result.restarts)
    assert list(result.best.order) == planted
    assert result.best.cost < min(r.initial.cost for r in result.restarts)
    assert result.calls == len(evaluator.calls) and result.boards == sum(evaluator.calls)


def test_annealing_is_reproducible_from_its_seed() -> None:
    problem, planted = random_problem(GOMOKU, 15, 10, seed=3)
    evaluator = PlantedEvaluator(planted, 225, bonus=1.0)
    params = AnnealingParams(iterations=200, restarts=3, init="random", seed=9)
    a = infer_order(problem, evaluator, params)
    b = infer_order(problem, evaluator, params)
    assert [r.best.order for r in a.restarts] == [r.best.order for r in b.restarts]
    assert [r.accepted for r in a.restarts] == [r.accepted for r in b.restarts]
    c = infer_order(problem, evaluator, AnnealingParams(iterations=200, restarts=3,
                                                        init="random", seed=10))
    assert [r.initial.order for r in c.restarts] != [r.initial.order for r in a.restarts]
    assert a.spread == pytest.approx(np.std([r.best.geometric_mean for r in a.restarts]))


def test_the_papers_defaults() -> None:
    params = AnnealingParams()
    assert (params.restarts, params.t_start, params.t_end, params.neighbour, params.init) == (
        5, 1.0, 0.1, "mix", "greedy")
    assert default_iterations(20) == 5000 and default_iterations(40) == 20000
    assert params.iterations_for(20) == 5000
    assert AnnealingParams(iterations=7).iterations_for(40) == 7
    assert temperature(0, 100, 1.0, 0.1) == 1.0
    assert temperature(99, 100, 1.0, 0.1) == pytest.approx(0.1)
    assert temperature(50, 100, 1.0, 0.1) < temperature(49, 100, 1.0, 0.1)
    assert params.lockstep and params.candidates == 1
    for bad in ({"restarts": 0}, {"t_end": 0.0}, {"neighbour": "swap"}, {"init": "beam"},
                {"iterations": -1}, {"candidates": 0}, {"candidates": 2, "lockstep": False}):
        with pytest.raises(ValueError):
            AnnealingParams(**bad)


# ---- lock-step chains -------------------------------------------------------------------------

def restart_summary(result) -> list[tuple]:
    return [(r.initial.order, r.best.order, r.best.cost, r.proposals, r.accepted, r.illegal)
            for r in result.restarts]


@pytest.mark.parametrize("case", ["gomoku", "go", "renju"])
def test_lockstep_restarts_are_the_sequential_chains_step_for_step(case: str) -> None:
    if case == "renju":
        problem, planted = renju_problem()
    else:
        game, size = (GOMOKU, 15) if case == "gomoku" else (GO, 9)
        problem, planted = random_problem(game, size, 12, seed=5)
    width = problem.game.policy_size(problem.size)
    for init in ("random", "greedy"):
        params = {"iterations": 250, "restarts": 3, "init": init, "seed": 4}
        paper = infer_order(problem, PlantedEvaluator(planted, width, bonus=1.0),
                            AnnealingParams(lockstep=False, **params))
        lockstep = infer_order(problem, PlantedEvaluator(planted, width, bonus=1.0),
                               AnnealingParams(lockstep=True, **params))
        assert restart_summary(lockstep) == restart_summary(paper)
        assert lockstep.best.order == paper.best.order
        if init == "random":
            assert sum(r.accepted for r in paper.restarts) > 3  # the chains did move
        if case == "renju":
            assert sum(r.illegal for r in paper.restarts) > 0


def test_one_chain_in_lockstep_is_anneal_with_the_same_calls() -> None:
    problem, planted = random_problem(GOMOKU, 15, 14, seed=6)
    params = AnnealingParams(iterations=200, restarts=1, seed=2)
    runs = []
    for lockstep in (False, True):
        evaluator = PlantedEvaluator(planted, 225, bonus=1.0)
        scorer = PrefixScorer(problem, evaluator)
        initial = greedy_order(scorer)
        evaluator.calls.clear()
        rng = np.random.default_rng(8)
        if lockstep:
            run = anneal_lockstep(scorer, [initial], 200, [rng], params)[0][0]
        else:
            run = anneal(scorer, initial, 200, rng, params)
        runs.append((run.best.order, run.best.cost, run.accepted, run.proposals,
                     evaluator.calls))
    assert runs[0] == runs[1]


class StepRecorder(PrefixScorer):
    """A scorer that records, for each `rescore_many` (one lock step), how many distinct
    network inputs its legal candidates' changed prefixes hold (a board two chains share
    travels once)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.steps: list[int] = []

    def rescore_many(self, candidates):
        out = super().rescore_many(candidates)
        inputs = {self.problem.game.network_input(state).tobytes()
                  for (_, order, first), c in zip(candidates, out, strict=True)
                  if c is not None for state in c.states[first + 1:len(order)]}
        self.steps.append(len(inputs))
        return out


@pytest.mark.parametrize("chains,candidates", [(1, 1), (4, 1), (3, 4)])
def test_one_evaluator_call_per_lock_step(chains: int, candidates: int) -> None:
    problem, planted = renju_problem()
    evaluator = PlantedEvaluator(planted, 225, bonus=1.0)
    scorer = StepRecorder(problem, evaluator, cache_size=0)
    greedy = greedy_order(scorer)
    evaluator.calls.clear()
    rngs = [np.random.default_rng(s) for s in range(chains)]
    params = AnnealingParams(candidates=candidates)
    runs, _ = anneal_lockstep(scorer, [greedy] * chains, 120, rngs, params)
    assert len(scorer.steps) == 120
    # every step that has a legal candidate is one call carrying all their changed boards
    assert evaluator.calls == [b for b in scorer.steps if b]
    if chains * candidates > 1:
        assert max(evaluator.calls) > 8  # more than one order's prefixes in a call
    assert sum(r.proposals + r.illegal for r in runs) == 120 * chains * candidates
    assert sum(r.illegal for r in runs) > 0


def test_lockstep_candidates_accept_only_legal_orders_and_are_reproducible() -> None:
    problem, planted = renju_problem()
    params = AnnealingParams(iterations=200, restarts=4, candidates=3, init="random", seed=7)
    accepted: list[tuple[int, ...]] = []
    a = infer_order(problem, PlantedEvaluator(planted, 225, bonus=1.0), params,
                    on_accept=lambda s: accepted.append(s.order))
    assert accepted and sum(r.illegal for r in a.restarts) > 0
    assert all(legal_in_every_prefix(problem, order) for order in accepted)
    b = infer_order(problem, PlantedEvaluator(planted, 225, bonus=1.0), params)
    assert restart_summary(a) == restart_summary(b)
    c = infer_order(problem, PlantedEvaluator(planted, 225, bonus=1.0),
                    AnnealingParams(iterations=200, restarts=4, candidates=3, init="random",
                                    seed=8))
    assert restart_summary(c) != restart_summary(a)


@pytest.mark.parametrize("game,size,n", [(GOMOKU, 15, 14), (GO, 9, 12)])
def test_many_lockstep_chains_with_candidates_recover_the_planted_order(game, size: int,
                                                                        n: int) -> None:
    problem, planted = random_problem(game, size, n, seed=11)
    evaluator = PlantedEvaluator(planted, game.policy_size(size))
    result = infer_order(problem, evaluator,
                         AnnealingParams(iterations=600, restarts=8, candidates=2,
                                         init="random", seed=1))
    assert list(result.best.order) == planted
    # one call per step (600) besides the greedy's n and the random initial orders' few:
    # not one per chain or candidate (8 * 2 * 600)
    assert result.calls == len(evaluator.calls) <= 600 + n + 50


class CallCounter:
    """`should_stop` that answers True once the evaluator has made `limit` calls."""

    def __init__(self, evaluator: PlantedEvaluator, limit: int) -> None:
        self.evaluator = evaluator
        self.limit = limit
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return len(self.evaluator.calls) >= self.limit


@pytest.mark.parametrize("lockstep", [True, False])
def test_should_stop_ends_the_annealing_with_the_best_order_so_far(lockstep: bool) -> None:
    problem, planted = random_problem(GOMOKU, 15, 14, seed=3)
    params = AnnealingParams(iterations=400, restarts=3, init="random", seed=5,
                             lockstep=lockstep)
    evaluator = PlantedEvaluator(planted, 225, bonus=1.0)
    accepted: list[float] = []
    stop = CallCounter(evaluator, 60)
    result = infer_order(problem, evaluator, params, should_stop=stop,
                         on_accept=lambda s: accepted.append(s.cost))
    assert result.stopped and any(r.stopped for r in result.restarts)
    # stopped at the first check past the limit: no evaluator call after it
    assert len(evaluator.calls) == stop.limit
    assert stop.asked < 400 * 3
    if not lockstep:  # the restarts after the stopped one never began
        assert len(result.restarts) < 3
    # the best so far: no accepted order and not the greedy one is better
    assert result.best.cost <= min([result.greedy.cost, *accepted]) * (1 + 1e-12)
    assert legal_in_every_prefix(problem, result.best.order)
    full = infer_order(problem, PlantedEvaluator(planted, 225, bonus=1.0), params,
                       should_stop=lambda: False)
    assert not full.stopped and len(full.restarts) == 3
    reference = infer_order(problem, PlantedEvaluator(planted, 225, bonus=1.0), params)
    assert restart_summary(full) == restart_summary(reference)


def test_a_stop_before_the_first_step_answers_the_greedy_order() -> None:
    problem, planted = random_problem(GO, 9, 12, seed=4)
    evaluator = PlantedEvaluator(planted, GO.policy_size(9))
    result = infer_order(problem, evaluator, AnnealingParams(iterations=50, restarts=2),
                         should_stop=lambda: True)
    assert result.stopped and result.best.order == result.greedy.order
    assert len(evaluator.calls) == result.calls == problem.n  # the greedy's calls alone


def test_ladder_runs_from_the_coldest_to_the_hottest() -> None:
    assert ladder(4, 1.0, 0.1) == pytest.approx([0.1, 0.1 * 10 ** (1 / 3), 0.1 * 10 ** (2 / 3),
                                                 1.0])
    assert ladder(1, 1.0, 0.1) == [0.1]


def test_an_exchange_hands_the_better_order_to_the_colder_chain() -> None:
    problem, planted = random_problem(GOMOKU, 15, 10, seed=2)
    scorer = PrefixScorer(problem, PlantedEvaluator(planted, 225))
    good = scorer.score(planted)
    swapped = [planted[2], planted[1], planted[0], *planted[3:]]
    other = scorer.score(swapped)
    assert good is not None and other is not None and good.cost < other.cost
    chains = [other, good]  # the cold chain (0) holds the worse order
    made = exchange(chains, [0.1, 1.0], 0, np.random.default_rng(0))
    assert made == 1 and chains == [good, other]  # always taken: the cold chain gains
    # the other way round it is taken with probability exp(-(1/T0 - 1/T1) * dE): e^-1 here
    cold = 1 / (1 + 1 / (other.cost - good.cost))
    rng = np.random.default_rng(1)
    taken = sum(exchange([good, other], [cold, 1.0], 0, rng) for _ in range(2000))
    assert abs(taken - 2000 * math.exp(-1)) <= 4 * math.sqrt(2000 * 0.25)
    # only the pairs of the step's parity are offered: (1, 2) here, of three chains
    chains = [other, good, other]
    assert exchange(chains, [0.1, 0.3, 1.0], 1, rng) == 0 and chains == [other, good, other]
    chains = [good, other, good]
    assert exchange(chains, [0.1, 0.3, 1.0], 1, rng) == 1 and chains == [good, good, other]


def test_tempering_chains_exchange_orders_and_recover_the_planted_order() -> None:
    problem, planted = random_problem(GOMOKU, 15, 14, seed=11)
    params = AnnealingParams(iterations=500, restarts=5, init="random", seed=1,
                             tempering=True)
    result = infer_order(problem, PlantedEvaluator(planted, 225), params)
    assert list(result.best.order) == planted and result.exchanges > 0
    again = infer_order(problem, PlantedEvaluator(planted, 225), params)
    assert restart_summary(again) == restart_summary(result)
    with pytest.raises(ValueError, match="tempering"):
        AnnealingParams(tempering=True, lockstep=False)


@pytest.mark.parametrize("n", [2, 3, 6, 9])
def test_every_neighbour_is_each_distinct_swp2_and_mov2_neighbour(n: int) -> None:
    order = tuple(range(100, 100 + n))
    listed = every_neighbour(order)
    orders = [o for o, _ in listed]
    assert len(set(orders)) == len(orders) and order not in orders
    rng = np.random.default_rng(0)
    drawn = set()
    for name in ("swp2", "mov2"):
        for it in range(3000):
            move = propose(name, order, rng, it)
            if move is not None:
                drawn.add(move)
    # the random neighbours are exactly the listed ones, with the same first changed ply
    assert drawn - {(order, 0)} == set(listed)
    for new, first in listed:
        assert new[:first] == order[:first] and new[first] != order[first]
        assert sorted(new[0::2]) == sorted(order[0::2])


def test_polish_descends_to_an_order_no_neighbour_improves() -> None:
    problem, planted = random_problem(GOMOKU, 15, 12, seed=9)
    evaluator = PlantedEvaluator(planted, 225, bonus=1.0)
    scorer = PrefixScorer(problem, evaluator)
    start = scorer.score([*planted[2:4], *planted[0:2], *planted[4:]])  # a pair moved
    assert start is not None
    calls = len(evaluator.calls)
    best, sweeps, stopped = polish(scorer, start)
    assert not stopped and sweeps >= 2 and best.cost < start.cost
    assert len(evaluator.calls) - calls <= sweeps * 2  # a sweep is one call (two above 256)
    for order, first in every_neighbour(best.order):
        other = scorer.rescore(best, order, first)
        assert other is None or other.cost >= best.cost
    assert polish(scorer, start, should_stop=lambda: True) == (start, 0, True)


def test_polish_costs_a_sweep_in_bounded_chunks_and_stops_between_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One sweep was one call over every neighbour (about n**2 of them, each up to n changed
    positions): 1.2 GB for 100 stones, and no stop before the sweep ended, past the caller's
    deadline. Now POLISH_CHUNK neighbours a call, a stop seen between calls, the same descent."""
    import services.move_order.annealing as annealing

    problem, planted = random_problem(GOMOKU, 15, 30, seed=4)
    evaluator = PlantedEvaluator(planted, 225, bonus=1.0)
    scorer = PrefixScorer(problem, evaluator)
    start = scorer.score([*planted[2:4], *planted[0:2], *planted[4:]])
    assert start is not None and len(every_neighbour(start.order)) > 4 * annealing.POLISH_CHUNK
    best, sweeps, stopped = polish(scorer, start)
    assert not stopped and best.cost < start.cost
    assert max(evaluator.calls) <= annealing.POLISH_CHUNK * problem.n
    # the same descent as one call per sweep
    monkeypatch.setattr(annealing, "POLISH_CHUNK", 10**9)
    whole = polish(PrefixScorer(problem, PlantedEvaluator(planted, 225, bonus=1.0)), start)
    assert whole[0].order == best.order and whole[0].cost == pytest.approx(best.cost)
    assert whole[1] == sweeps
    monkeypatch.undo()
    # a stop asked for mid-sweep is seen before the next chunk
    asked = []

    def third_time() -> bool:
        asked.append(1)
        return len(asked) >= 3

    stopped_scorer = PrefixScorer(problem, PlantedEvaluator(planted, 225, bonus=1.0))
    result, made, was_stopped = polish(stopped_scorer, start, should_stop=third_time)
    assert was_stopped and made == 0 and result is start and len(asked) == 3


def test_infer_order_polishes_the_best_order() -> None:
    problem, planted = random_problem(GO, 9, 12, seed=13)
    params = AnnealingParams(iterations=30, restarts=2, init="random", seed=3)
    plain = infer_order(problem, PlantedEvaluator(planted, GO.policy_size(9), bonus=1.0), params)
    polished = infer_order(problem, PlantedEvaluator(planted, GO.policy_size(9), bonus=1.0),
                           replace(params, polish=True))
    assert restart_summary(plain) == restart_summary(polished)  # the same annealing
    assert polished.sweeps >= 1 and polished.best.cost <= plain.best.cost
    assert legal_in_every_prefix(problem, polished.best.order)


def test_evaluation_shards_split_a_set_into_interleaved_parts() -> None:
    """`scripts/infer_eval.py run --shard K/N`: N processes on one set each take every N-th
    position from the K-th, so together they cover the set once."""
    from scripts.infer_eval import parse_shard

    positions = list(range(23))
    parts = [positions[k::n] for k, n in (parse_shard(f"{k}/4") for k in range(4))]
    assert sorted(p for part in parts for p in part) == positions
    assert parse_shard("0/1") == (0, 1)
    for bad in ("4/4", "-1/4", "a/b", "3"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)
