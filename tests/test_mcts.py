"""PUCT search: tactics, budgets, batching, determinism (in-process evaluators, no serving).

Boards are ASCII fixtures, top row first ('X' black, 'O' white, '.' empty); `state_from_ascii`
turns one into a GomokuState by alternating the stones as moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from services.coords import index_name, parse_point
from services.evaluator import EvaluatorError, NonFiniteOutputError, finite_outputs
from services.games.gomoku import game as gomoku_game
from services.games.gomoku.rules import BLACK, EMPTY, WHITE, GomokuState, Rule, board_from_ascii
from services.search import mcts


@dataclass(frozen=True)
class Result:
    logits: np.ndarray
    model_name: str = "test_policy"
    model_version: str = "7"


class FakeClock:
    """A clock (seconds) that moves only when an evaluator says a call took time: budgets and
    deadlines are checked against it exactly and without waiting."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class UniformEvaluator:
    """Every point equally likely; records the batch sizes it was called with. With a `clock`,
    each call takes `delay_s` of it."""

    def __init__(self, delay_s: float = 0.0, clock: FakeClock | None = None) -> None:
        self.batches: list[int] = []
        self.delay_s = delay_s
        self.clock = clock

    def infer(self, boards: np.ndarray) -> Result:
        assert boards.dtype == np.int8 and boards.ndim == 3
        self.batches.append(len(boards))
        if self.clock is not None:
            self.clock.now += self.delay_s
        n, size = boards.shape[0], boards.shape[1]
        return Result(np.zeros((n, size * size), dtype=np.float32))


class CornerEvaluator(UniformEvaluator):
    """A hopeless network: it loves the a1 corner and ignores the position."""

    def infer(self, boards: np.ndarray) -> Result:
        out = super().infer(boards)
        size = boards.shape[1]
        y, x = np.divmod(np.arange(size * size), size)
        logits = np.broadcast_to(-3.0 * (x + y), out.logits.shape).astype(np.float32)
        return Result(logits)


def state_from_ascii(text: str, rule: Rule = Rule.FREESTYLE) -> GomokuState:
    """Alternate black and white stones (in point order) as moves; black has one extra stone
    when white is to move. The fixture must not contain a five."""
    board = board_from_ascii(text)
    size = board.shape[0]
    black = np.flatnonzero(board.reshape(-1) == BLACK).tolist()
    white = np.flatnonzero(board.reshape(-1) == WHITE).tolist()
    if len(black) - len(white) not in (0, 1):
        raise ValueError(f"{len(black)} black and {len(white)} white stones cannot alternate")
    moves = [m for pair in zip(black, white, strict=False) for m in pair]
    moves += black[len(white) :]
    state = GomokuState.from_moves(moves, size=size, rule=rule)
    assert (state.board == board).all() and state.winner == EMPTY
    return state


def pt(name: str, size: int = 15) -> int:
    x, y = parse_point(name, size)
    return y * size + x


def names(points: tuple[int, ...] | list[int]) -> list[str]:
    return [index_name(p, 15) for p in points]


BLACK_OPEN_FOUR = """
...............
...............
...............
...............
...............
......OOO......
...............
.......XXXX....
...............
...............
...............
...............
..O............
...............
...............
"""

WHITE_FOUR_ONE_END = """
...............
...............
.........X.....
......X.X......
...............
...............
...............
...............
...............
...............
...XOOOO.......
...............
...............
X..............
...............
"""

WHITE_FOUR_BLACK_TO_MOVE = """
...............
...............
...............
X.X.X..........
...............
...............
...............
...XOOOO.......
...............
...............
...............
...............
...............
...............
...............
"""

WHITE_OPEN_FOUR_BLACK_TO_MOVE = """
...............
...............
X.X.X.X........
...............
...............
...............
...............
....OOOO.......
...............
...............
...............
...............
...............
...............
...............
"""

BOTH_HAVE_FOURS = """
...............
...............
...............
...............
...............
...............
...............
...OXXXX.......
...............
...............
...............
....XOOOO......
...............
...............
...............
"""

# 5x5, one empty point (e1), no five anywhere: filling it is a draw.
ALMOST_FULL_5X5 = """
XXOOX
OOXXO
XXOOX
OOXXO
XXOO.
"""


@pytest.mark.parametrize("evaluator_cls", [UniformEvaluator, CornerEvaluator])
def test_black_takes_immediate_win(evaluator_cls: type[UniformEvaluator]) -> None:
    state = state_from_ascii(BLACK_OPEN_FOUR)
    assert state.to_move == BLACK and state.winning_points(BLACK) == [pt("g8"), pt("l8")]
    r = mcts.search(state, evaluator_cls(), max_visits=200)
    assert index_name(r.move, 15) in ("g8", "l8")
    assert r.value == 1.0
    assert state.play(r.move).winner == BLACK
    assert r.principal_variation == (r.move,)


@pytest.mark.parametrize("evaluator_cls", [UniformEvaluator, CornerEvaluator])
def test_white_takes_immediate_win(evaluator_cls: type[UniformEvaluator]) -> None:
    state = state_from_ascii(WHITE_FOUR_ONE_END)
    assert state.to_move == WHITE
    r = mcts.search(state, evaluator_cls(), max_visits=200)
    assert index_name(r.move, 15) == "i5"
    assert r.value == 1.0 and state.play(r.move).winner == WHITE


@pytest.mark.parametrize("evaluator_cls", [UniformEvaluator, CornerEvaluator])
def test_blocks_four_with_one_open_end(evaluator_cls: type[UniformEvaluator]) -> None:
    state = state_from_ascii(WHITE_FOUR_BLACK_TO_MOVE)
    assert state.to_move == BLACK and state.winning_points(BLACK) == []
    r = mcts.search(state, evaluator_cls(), max_visits=200)
    assert index_name(r.move, 15) == "i8"
    assert state.play(r.move).winning_points(WHITE) == []


@pytest.mark.parametrize("evaluator_cls", [UniformEvaluator, CornerEvaluator])
def test_blocks_open_four_and_sees_the_loss(evaluator_cls: type[UniformEvaluator]) -> None:
    state = state_from_ascii(WHITE_OPEN_FOUR_BLACK_TO_MOVE)
    assert state.winning_points(WHITE) == [pt("d8"), pt("i8")]
    r = mcts.search(state, evaluator_cls(), max_visits=50)
    assert index_name(r.move, 15) in ("d8", "i8")
    assert {c.move for c in r.children} == {pt("d8"), pt("i8")}  # nothing else searched
    assert r.value == -1.0  # white wins at the other end whatever black does


def test_prefers_own_win_over_blocking() -> None:
    state = state_from_ascii(BOTH_HAVE_FOURS)
    assert state.to_move == BLACK
    assert state.winning_points(BLACK) == [pt("i8")] and state.winning_points(WHITE) == [pt("j4")]
    r = mcts.search(state, CornerEvaluator(), max_visits=100)
    assert index_name(r.move, 15) == "i8" and r.value == 1.0


def test_full_board_is_a_draw() -> None:
    state = state_from_ascii(ALMOST_FULL_5X5)
    r = mcts.search(state, UniformEvaluator(), max_visits=10)
    assert index_name(r.move, 5) == "e1"
    assert r.value == 0.0 and r.total_visits == 10


def test_game_over_raises() -> None:
    line = ("h8", "a1", "i8", "a2", "j8", "a3", "k8", "a4", "l8")  # black makes five
    state = GomokuState.from_moves([pt(n) for n in line])
    assert state.winner == BLACK
    with pytest.raises(mcts.GameOverError):
        mcts.search(state, UniformEvaluator(), max_visits=10)


def test_respects_visit_budget() -> None:
    state = GomokuState.from_moves([pt("h8"), pt("h9")])
    for visits in (1, 7, 100):
        r = mcts.search(state, UniformEvaluator(), max_visits=visits, batch_size=8)
        assert r.total_visits == visits
        assert sum(c.visits for c in r.children) <= visits and r.visits <= visits


STEP_S = 2.0 ** -7  # one evaluator call on the fake clock (~8 ms; sums of it are exact)


def test_respects_time_budget() -> None:
    state = GomokuState.from_moves([pt("h8")])
    clock = FakeClock()
    evaluator = UniformEvaluator(delay_s=STEP_S, clock=clock)
    r = mcts.search(state, evaluator, max_time_ms=150, batch_size=4, clock=clock)
    # the last batch started inside the budget, the search stopped at the first batch end past it
    assert clock.now - STEP_S < 0.150 <= clock.now
    assert r.elapsed_s == clock.now == STEP_S * len(evaluator.batches)
    assert r.total_visits == 4 * (len(evaluator.batches) - 1)  # the root's call, then batches


def test_deadline_cuts_a_visit_search_short() -> None:
    state = GomokuState.from_moves([pt("h8")])
    clock = FakeClock()
    evaluator = UniformEvaluator(delay_s=STEP_S, clock=clock)
    r = mcts.search(state, evaluator, max_visits=100_000, deadline=0.1, clock=clock)
    # stopped where one more batch (as long as the last) would have ended past the deadline
    assert clock.now <= 0.1 < clock.now + STEP_S
    assert 0 < r.total_visits < 100_000


def test_principal_variation_is_legal() -> None:
    state = GomokuState.from_moves([pt(n) for n in ("h8", "h9", "i8", "i9", "g7")])
    r = mcts.search(state, CornerEvaluator(), max_visits=300)
    assert r.principal_variation[0] == r.move and len(r.principal_variation) > 1
    s = state
    for p in r.principal_variation:
        s = s.play(p)  # raises IllegalMove if the PV is not a legal line


def test_batched_evaluation_sends_many_leaves_per_call() -> None:
    evaluator = UniformEvaluator()
    state = GomokuState.from_moves([pt("h8"), pt("i9")])
    r = mcts.search(state, evaluator, max_visits=64, batch_size=8)
    assert evaluator.batches[0] == 1  # the root
    assert max(evaluator.batches) == 8 and all(b <= 8 for b in evaluator.batches)
    assert r.evaluator_calls == len(evaluator.batches) < r.total_visits
    assert r.evaluated_leaves == sum(evaluator.batches)


def test_result_reports_model_and_stats() -> None:
    state = GomokuState.from_moves([pt("h8")])
    r = mcts.search(state, CornerEvaluator(), max_visits=50, top_children=5)
    assert (r.model_name, r.model_version) == ("test_policy", "7")
    assert len(r.children) == 5 and r.children[0].move == r.move
    assert [c.visits for c in r.children] == sorted((c.visits for c in r.children), reverse=True)
    assert 0.0 < r.prior <= 1.0 and -1.0 <= r.value <= 1.0


def test_deterministic_given_the_evaluator() -> None:
    state = GomokuState.from_moves([pt(n) for n in ("h8", "h9", "i8")])
    a = mcts.search(state, UniformEvaluator(), max_visits=120, batch_size=8)
    b = mcts.search(state, UniformEvaluator(), max_visits=120, batch_size=8)
    assert (a.move, a.principal_variation) == (b.move, b.principal_variation)
    assert a.children == b.children and a.value == b.value
    assert names([a.move]) == ["a1"]  # uniform priors, no values: ties go to the lowest index


@pytest.mark.parametrize(("max_visits", "max_time_ms"), [(0, 0), (-1, 0), (10, -5)])
def test_bad_budget_is_rejected(max_visits: int, max_time_ms: int) -> None:
    with pytest.raises(ValueError):
        mcts.search(
            GomokuState(), UniformEvaluator(), max_visits=max_visits, max_time_ms=max_time_ms
        )


@pytest.mark.parametrize("rule", list(Rule))
def test_fast_winning_points_match_the_rules(rule: Rule) -> None:
    rng = np.random.default_rng(42)
    region = np.array([y * 15 + x for y in range(3, 11) for x in range(3, 11)])  # dense: 8x8
    found = 0
    for _ in range(60):
        state = GomokuState(rule=rule)
        for _ in range(int(rng.integers(10, 50))):
            free = region[state.legal_mask()[region]]
            state = state.play(int(rng.choice(free)))
            if state.winner:
                break
        for color in (BLACK, WHITE):
            expected = state.winning_points(color)
            assert gomoku_game.winning_points(state, color) == expected
            found += len(expected)
    assert found > 20  # the positions do have threats to find


def test_masked_softmax() -> None:
    legal = np.array([True, False, True, True])
    p = mcts.masked_softmax(np.array([1.0, 50.0, 1.0, 1.0]), legal)
    assert p[1] == 0.0 and np.allclose(p[legal], 1 / 3)
    p = mcts.masked_softmax(np.array([1.0, np.nan, 1.0, 1.0 + np.log(2.0)]), legal)
    assert p[1] == 0.0 and np.allclose(p[legal], [0.25, 0.25, 0.5])  # illegal NaN: unused
    assert not mcts.masked_softmax(np.zeros(4), np.zeros(4, dtype=bool)).any()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_masked_softmax_refuses_non_finite_legal_logits(bad: float) -> None:
    """All-NaN logits used to become a uniform policy: a broken model served as an answer."""
    legal = np.array([True, False, True, True])
    with pytest.raises(ValueError, match="finite"):
        mcts.masked_softmax(np.array([1.0, 0.0, bad, 1.0]), legal)
    with pytest.raises(ValueError, match="finite"):
        mcts.masked_softmax(np.full(4, bad), legal)


def test_finite_outputs_refuses_nan_and_inf_but_keeps_the_no_value_convention() -> None:
    logits = np.zeros((3, 4), np.float32)
    assert finite_outputs(logits, None, "m", "2") is None
    np.testing.assert_array_equal(
        finite_outputs(logits, np.array([[0.5], [-1.0], [0.0]]), "m", "2"), [0.5, -1, 0])
    # NaN for every board: a network without a value head (policy_model.py's convention)
    assert finite_outputs(logits, np.full(3, np.nan, np.float32), "m", "2") is None
    for bad in (np.nan, np.inf, -np.inf):
        broken = logits.copy()
        broken[1, 2] = bad
        with pytest.raises(NonFiniteOutputError,
                           match=r"model m version 2 .*non-finite logits .*1 of 3 boards"):
            finite_outputs(broken, None, "m", "2")
    for values in ([0.5, np.nan, 0.1], [np.inf, np.inf, np.inf], [np.nan, -np.inf, np.nan]):
        with pytest.raises(NonFiniteOutputError, match=r"model m version 2 .*values"):
            finite_outputs(logits, np.array(values, np.float32), "m", "2")


class NaNEvaluator(UniformEvaluator):
    """A broken network: NaN logits (`logits=True`) or a NaN value next to finite ones."""

    def __init__(self, logits: bool = True) -> None:
        super().__init__()
        self.nan_logits = logits

    def infer(self, boards: np.ndarray) -> ValueResult:
        logits = super().infer(boards).logits
        values = np.linspace(-0.5, 0.5, len(boards)).astype(np.float32)
        if self.nan_logits:
            logits = np.full_like(logits, np.nan)
        else:
            values[-1] = np.nan
        return ValueResult(logits, values)


@pytest.mark.parametrize("nan_logits", [True, False])
def test_search_never_picks_a_move_from_nan(nan_logits: bool) -> None:
    state = GomokuState.from_moves([pt("h8")])
    with pytest.raises(NonFiniteOutputError, match="model test_value version 8"):
        mcts.search(state, NaNEvaluator(nan_logits), max_visits=100, batch_size=8)


# --------------------------------------------------------------------------- renju legality

# Black's i8 is a double-three (g8 h8 + i9 i10): forbidden for black under renju.
RENJU_DOUBLE_THREE = """
O..............
...............
...............
...............
...............
........X......
........X......
......XX.......
...............
...............
...............
...............
...............
...............
O.O.O..........
"""

# As above, and white's four j9-m12 (n13 blocked) can only be stopped at i8: black cannot.
RENJU_FORBIDDEN_BLOCK = """
O..............
...............
.............X.
............O..
...........O...
........X.O....
........XO.....
......XX.......
...............
...............
...............
...............
...............
...............
...............
"""


class PointEvaluator(UniformEvaluator):
    """A network that is sure about one point, whatever the position."""

    def __init__(self, point: int) -> None:
        super().__init__()
        self.point = point

    def infer(self, boards: np.ndarray) -> Result:
        out = super().infer(boards)
        logits = out.logits.copy()
        logits[:, self.point] = 20.0
        return Result(logits)


def walk(node: mcts.Node):
    yield node
    for child in node.children.values():
        yield from walk(child)


def test_renju_black_never_searches_a_forbidden_point() -> None:
    state = state_from_ascii(RENJU_DOUBLE_THREE, rule=Rule.RENJU)
    assert state.to_move == BLACK and not state.legal_mask()[pt("i8")]
    s = mcts.Search(state, PointEvaluator(pt("i8")))
    s.run(300)
    r = s.result(top_children=225)
    assert r.move != pt("i8") and pt("i8") not in {c.move for c in r.children}
    assert r.total_visits == 300
    for node in walk(s.root):  # no node anywhere offers a move its side may not play
        if not node.terminal and len(node.moves):
            assert node.state.legal_mask()[node.moves].all()
    for c in r.children:
        line = state
        for p in c.principal_variation:
            line = line.play(p)  # IllegalMove if a PV went through a forbidden point


def test_renju_forbidden_only_block_is_a_proven_loss() -> None:
    state = state_from_ascii(RENJU_FORBIDDEN_BLOCK, rule=Rule.RENJU)
    assert state.to_move == BLACK and state.winning_points(WHITE) == [pt("i8")]
    r = mcts.search(state, PointEvaluator(pt("i8")), max_visits=300)
    assert r.move != pt("i8") and state.legal_mask()[r.move]
    assert r.value == -1.0  # white makes five at i8 whatever black does


def test_renju_white_may_play_blacks_forbidden_point() -> None:
    state = state_from_ascii(RENJU_DOUBLE_THREE, rule=Rule.RENJU).play(pt("a2"))
    assert state.to_move == WHITE and state.legal_mask()[pt("i8")]
    r = mcts.search(state, PointEvaluator(pt("i8")), max_visits=50)
    assert r.move == pt("i8")


# --------------------------------------------------------------------------- candidates


def test_candidates_carry_visits_q_prior_and_legal_variations() -> None:
    state = GomokuState.from_moves([pt(n) for n in ("h8", "h9", "i8", "i9", "g7")])
    r = mcts.search(state, CornerEvaluator(), max_visits=400, top_children=6)
    assert [c.visits for c in r.children] == sorted((c.visits for c in r.children), reverse=True)
    assert r.children[0].move == r.move
    assert r.children[0].principal_variation == r.principal_variation
    logits = CornerEvaluator().infer(state.board[np.newaxis].astype(np.int8)).logits[0]
    policy = mcts.masked_softmax(logits, state.legal_mask())
    for c in r.children:
        assert c.principal_variation[0] == c.move
        assert c.prior == pytest.approx(policy[c.move])
        assert -1.0 <= c.value <= 1.0
        line = state
        for p in c.principal_variation:
            line = line.play(p)


# --------------------------------------------------------------------------- steps, reuse


def test_tree_reuse_continues_with_the_subtree_visits() -> None:
    state = GomokuState.from_moves([pt(n) for n in ("h8", "h9", "i8", "i9", "g7")])
    first = mcts.Search(state, CornerEvaluator())
    first.run(600)
    r1 = first.result()
    reply = r1.principal_variation[1]
    node = first.root.child(r1.move).child(reply)  # two moves later: the same player to move
    assert node is not None and node.visits > 0
    later = state.play(r1.move).play(reply)
    reused = node.visits
    evaluator = CornerEvaluator()
    probe = mcts.Search(node, evaluator)
    probe.start()
    assert evaluator.batches == []  # the reused root has its network priors already
    r2 = mcts.search(later, evaluator, max_visits=reused + 50, tree=node)
    assert r2.reused_visits == reused  # all of the subtree's visits
    assert r2.total_visits == reused + 50 and r2.new_visits == 50
    node = first.root.child(r1.move).child(reply)
    # the budget counts reused visits: a smaller budget runs nothing new
    evaluator = CornerEvaluator()
    r3 = mcts.search(later, evaluator, max_visits=10, tree=node)
    assert r3.new_visits == 0 and evaluator.batches == [] and r3.total_visits == node.visits
    assert r3.move == r2.move
    with pytest.raises(ValueError, match="not a search of this position"):
        mcts.search(state, CornerEvaluator(), max_visits=10, tree=node)


def test_should_stop_ends_the_search_between_batches() -> None:
    state = GomokuState.from_moves([pt("h8")])
    checks = []

    def stop() -> bool:
        checks.append(1)
        return len(checks) > 3

    evaluator = UniformEvaluator()
    r = mcts.search(state, evaluator, max_visits=10_000, batch_size=8, should_stop=stop)
    assert r.total_visits == 3 * 8 and len(evaluator.batches) == 1 + 3


def test_batches_yield_the_visits_as_they_grow() -> None:
    s = mcts.Search(GomokuState.from_moves([pt("h8")]), UniformEvaluator(), batch_size=8)
    assert list(s.batches(40)) == [8, 16, 24, 32, 40]


def test_deadline_does_not_start_a_batch_that_would_overrun() -> None:
    state = GomokuState.from_moves([pt("h8")])
    clock = FakeClock()
    # root 0.25 s, one batch 0.25 s; a second batch would end after the deadline at 0.625 s
    r = mcts.search(state, UniformEvaluator(delay_s=0.25, clock=clock), max_visits=10_000,
                    deadline=0.625, clock=clock)
    assert r.evaluator_calls == 2  # without the estimate: 3 (the last ending at 0.75 s)
    assert clock.now == 0.5


class FailingEvaluator(UniformEvaluator):
    def __init__(self, fail_on_call: int) -> None:
        super().__init__()
        self.fail_on_call = fail_on_call

    def infer(self, boards: np.ndarray) -> Result:
        if len(self.batches) + 1 == self.fail_on_call:
            self.batches.append(len(boards))
            raise RuntimeError("network down")
        return super().infer(boards)


def test_evaluator_error_leaves_a_clean_tree() -> None:
    state = GomokuState.from_moves([pt(n) for n in ("h8", "h9")])
    s = mcts.Search(state, FailingEvaluator(fail_on_call=4), batch_size=8)
    with pytest.raises(RuntimeError, match="network down"):
        s.run(1000)
    assert s.total_visits == s.root.visits == 16  # two batches made it
    for node in walk(s.root):  # no virtual loss left, no node stuck awaiting the network
        assert (node.child_n == np.round(node.child_n)).all() and (node.child_n >= 0).all()
        assert node.terminal or node.priors is not None
    s.evaluator = UniformEvaluator()  # the tree can be searched further
    s.run(100)
    assert s.root.visits == 100


# --------------------------------------------------------------------------- value head


@dataclass(frozen=True)
class ValueResult:
    logits: np.ndarray
    values: np.ndarray | None
    model_name: str = "test_value"
    model_version: str = "8"


class HolderWinsEvaluator(UniformEvaluator):
    """A uniform policy with a value head sure that whoever holds `point` wins: `v` for the side
    to move when it has a stone there, -`v` when the opponent has, 0 while the point is empty.
    `fill` replaces every value (e.g. NaN: a model without a value head)."""

    def __init__(self, point: int, v: float = 0.8, fill: float | None = None) -> None:
        super().__init__()
        self.point, self.v, self.fill = point, v, fill

    def infer(self, boards: np.ndarray) -> ValueResult:
        logits = super().infer(boards).logits
        flat = boards.reshape(len(boards), -1)
        black, white = (flat == BLACK).sum(axis=1), (flat == WHITE).sum(axis=1)
        to_move = np.where(black == white, BLACK, WHITE)
        holder = flat[:, self.point]
        values = np.where(holder == EMPTY, 0.0, np.where(holder == to_move, self.v, -self.v))
        if self.fill is not None:
            values = np.full(len(boards), self.fill)
        return ValueResult(logits, values.astype(np.float32))


def test_leaf_values_are_minus_the_network_value_and_zero_without_one() -> None:
    got = mcts.leaf_values(np.array([0.5, -2.0, 0.0], np.float32), 3)
    assert got.tolist() == [-0.5, 1.0, 0.0]  # clipped
    with pytest.raises(EvaluatorError, match="finite"):
        mcts.leaf_values(np.array([0.5, np.nan, np.inf], np.float32), 3)
    assert mcts.leaf_values(None, 3).tolist() == [0.0, 0.0, 0.0]
    assert mcts.leaf_values(np.array([[0.25], [-0.25]]), 2).tolist() == [-0.25, 0.25]
    with pytest.raises(EvaluatorError, match="values"):
        mcts.leaf_values(np.zeros(3), 2)


def test_a_leaf_is_worth_minus_the_value_for_its_side_to_move() -> None:
    """The network's value is for the side to move AT the leaf; the leaf's value (and the
    parent's Q of that move) is for the player who moved into it: the opposite."""
    state = GomokuState.from_moves([pt("h8")])  # white to move
    s = mcts.Search(state, HolderWinsEvaluator(pt("a1"), fill=0.5), batch_size=1)
    s.start()
    assert s.step() == 1
    (i, leaf), = s.root.children.items()
    assert leaf.value == -0.5  # black to move at the leaf is +0.5: bad for white
    assert s.root.child_n[i] == 1 and s.root.child_w[i] == -0.5
    assert s.result().children[0].value == -0.5


def test_value_head_steers_the_search_to_the_position_it_calls_won() -> None:
    state = GomokuState.from_moves([pt("h8")])  # white to move; the policy is uniform
    target = pt("c3")
    evaluator = HolderWinsEvaluator(target)
    r = mcts.search(state, evaluator, max_visits=400, top_children=225)
    children = {c.move: c for c in r.children}
    # after white c3 black is to move and the value head calls it lost for black (-0.8):
    # worth +0.8 to white, every other move 0
    assert r.move == target and r.visits > 400 // 2
    assert children[target].value == pytest.approx(0.8)
    assert all(c.value == 0.0 for c in r.children if c.move != target)
    assert r.value > 0.5
    # the same position with black to move: black takes c3 first
    black = GomokuState.from_moves([pt("h8"), pt("h9")])
    assert mcts.search(black, evaluator, max_visits=400).move == target


@pytest.mark.parametrize("fill", [np.nan, None])
def test_nan_or_absent_values_count_as_zero(fill: float | None) -> None:
    class NoValue(HolderWinsEvaluator):
        def infer(self, boards: np.ndarray) -> ValueResult:
            out = super().infer(boards)
            return ValueResult(out.logits, None if fill is None else out.values)

    state = GomokuState.from_moves([pt("h8"), pt("a15"), pt("i9")])
    with_nan = mcts.search(state, NoValue(pt("c3"), fill=np.nan), max_visits=300,
                           top_children=225)
    plain = mcts.search(state, UniformEvaluator(), max_visits=300, top_children=225)
    assert with_nan.move == plain.move and with_nan.value == plain.value
    assert [(c.move, c.visits, c.value) for c in with_nan.children] == [
        (c.move, c.visits, c.value) for c in plain.children
    ]


def test_a_reused_root_with_a_negative_value_is_not_a_proven_win() -> None:
    state = GomokuState.from_moves([pt("h8")])
    first = mcts.Search(state, HolderWinsEvaluator(pt("c3")))
    first.run(600)
    after = first.root.child(pt("c3"))
    reply = int(after.moves[after.best_child()])
    node = after.child(reply)  # black moved into it: the value head says -0.8 for black
    assert node is not None and node.value == pytest.approx(-0.8) and not node.proven
    assert node.visits > 0
    later = state.play(pt("c3")).play(reply)
    reused = node.visits
    r = mcts.search(later, HolderWinsEvaluator(pt("c3")), max_visits=reused + 40, tree=node)
    assert r.reused_visits == reused and r.new_visits == 40  # the search went on
    # a real proven win still stops after its first visit
    win = state_from_ascii(BLACK_OPEN_FOUR)
    s = mcts.Search(win, HolderWinsEvaluator(pt("c3")))
    s.start()
    assert s.proven_win and s.root.proven


def test_a_game_without_compiled_rules_is_searched_on_the_interpreted_tree():
    """A new game needs no numba kernels to be searched: `mcts.Search` hands its positions to
    the interpreted tree, reuse, exploration and the tree cache's calls included."""
    from services.search import interpreted
    from tests.evaluators import HashEvaluator
    from tests.tictactoe_game import TICTACTOE

    assert TICTACTOE.search_kernels() is None
    evaluator = HashEvaluator(seed=3)
    state = TICTACTOE.start()
    search = mcts.Search(state, evaluator, batch_size=4)
    assert isinstance(search, interpreted.Search)
    search.run(60)
    result = search.result()
    assert result.total_visits == 60 and 0 <= result.move < 9
    child = search.root.child(result.move)
    assert child is not None and child.compacted() is child and child.tree_bytes > 0
    reply = int(child.moves[child.best_child()])
    again = mcts.search(state.play(result.move).play(reply), evaluator, max_visits=80,
                        tree=child.child(reply))
    assert again.reused_visits > 0 and again.total_visits == 80
    noisy = [mcts.search(state, evaluator, max_visits=40, noise_alpha=0.3, temperature=1.0,
                         seed=s).move for s in range(12)]
    assert len(set(noisy)) > 1  # the seeded exploration varies the moves
    assert noisy == [mcts.search(state, evaluator, max_visits=40, noise_alpha=0.3,
                                 temperature=1.0, seed=s).move for s in range(12)]
