"""The compiled search tree gives the interpreted tree's answers (`services.search.interpreted`):
the same visits per move, priors, values, chosen move and principal variations, on fixed
positions of every game with compiled kernels, several batch sizes, evaluators with and without
a value head, and reused trees; plus its own options (root noise, temperature).

The evaluator is `HashEvaluator`: logits and values drawn from a hash of each board, so both
searches get the same answer for the same position whatever order they ask in."""

from __future__ import annotations

import numpy as np
import pytest
from evaluators import HashEvaluator

from services.games.gomoku.rules import GomokuState, Rule
from services.search import interpreted as ref
from services.search import mcts


def stats(r) -> tuple:
    """Everything a result says about the search (not the time it took)."""
    return (r.move, r.visits, r.total_visits, r.prior, r.value, r.principal_variation,
            r.evaluator_calls, r.evaluated_leaves, r.reused_visits, r.new_visits,
            [(c.move, c.visits, c.prior, c.value, c.principal_variation) for c in r.children])


def both(state, visits: int, **kw) -> tuple:
    """(compiled search, reference search) of `state`, run with the same options."""
    evaluator = kw.pop("evaluator")
    new = mcts.Search(state, evaluator, **kw)
    old = ref.Search(state, evaluator, **kw)
    new.run(visits)
    old.run(visits)
    return new, old


def random_gomoku(seed: int, moves: int, rule: Rule) -> GomokuState:
    """A position after `moves` random legal moves (near the centre), no five made."""
    rng = np.random.default_rng(seed)
    state = GomokuState(rule=rule)
    for _ in range(moves):
        legal = np.flatnonzero(state.legal_mask())
        y, x = np.divmod(legal, 15)
        near = legal[(abs(y - 7) <= 4) & (abs(x - 7) <= 4)]
        nxt = state.play(int(rng.choice(near if len(near) else legal)))
        if nxt.winner:
            break
        state = nxt
    return state


GOMOKU_CASES = [(rule, seed, moves) for rule in Rule for seed, moves in ((1, 0), (2, 9),
                                                                         (3, 24), (4, 40))]


@pytest.mark.parametrize(("rule", "seed", "moves"), GOMOKU_CASES)
@pytest.mark.parametrize("batch_size", [1, 5, 16])
def test_gomoku_same_answers(rule: Rule, seed: int, moves: int, batch_size: int) -> None:
    state = random_gomoku(seed, moves, rule)
    evaluator = HashEvaluator(seed=seed, values=batch_size != 5, scale=2.0)
    new, old = both(state, 300, evaluator=evaluator, batch_size=batch_size)
    assert stats(new.result(top_children=400)) == stats(old.result(top_children=400))


def test_gomoku_reused_trees_same_answers() -> None:
    state = random_gomoku(7, 12, Rule.RENJU)
    evaluator = HashEvaluator(seed=3, values=True)
    new, old = both(state, 400, evaluator=evaluator, batch_size=8)
    r = new.result()
    assert stats(r) == stats(old.result())
    reply = r.principal_variation[1]
    later = state.play(r.move).play(reply)
    a = mcts.search(later, evaluator, max_visits=300, tree=new.root.child(r.move).child(reply))
    b = ref.search(later, evaluator, max_visits=300, tree=old.root.child(r.move).child(reply))
    assert a.reused_visits > 0 and stats(a) == stats(b)


def test_noise_and_temperature_are_off_by_default_and_seeded() -> None:
    state = random_gomoku(5, 10, Rule.FREESTYLE)
    evaluator = HashEvaluator(seed=1)
    plain = mcts.search(state, evaluator, max_visits=200)
    assert stats(plain) == stats(ref.search(state, evaluator, max_visits=200))
    noisy = [stats(mcts.search(state, evaluator, max_visits=200, noise_alpha=0.3, seed=s))
             for s in (1, 1, 2)]
    assert noisy[0] == noisy[1]  # the seed decides
    assert noisy[0][-1] != stats(plain)[-1] and noisy[0][-1] != noisy[2][-1]
    # the reported priors stay the network's
    noisy_children = {c.move: c.prior for c in mcts.search(
        state, evaluator, max_visits=200, noise_alpha=0.3, seed=1, top_children=400).children}
    plain_children = {c.move: c.prior for c in mcts.search(
        state, evaluator, max_visits=200, top_children=400).children}
    assert noisy_children == plain_children
    drawn = {mcts.search(state, evaluator, max_visits=200, temperature=5.0, seed=s).move
             for s in range(12)}
    assert len(drawn) > 1 and plain.move in {
        mcts.search(state, evaluator, max_visits=200, temperature=1e-3, seed=s).move
        for s in range(3)}
    with pytest.raises(ValueError, match="exploration"):
        mcts.Search(state, evaluator, noise_alpha=-1.0)


def test_pairwise_sum_is_numpys_sum() -> None:
    from services.search.compiled_tree import pairwise_sum

    rng = np.random.default_rng(0)
    for n in [*range(1, 300), 361, 362, 626, 1000, 3000]:
        a = rng.random(n) * rng.choice([1e-6, 1.0, 1e6], n)
        assert pairwise_sum(a, 0, n) == a.sum()


def random_go(seed: int, size: int, moves: int, komi: float = 7.5):
    """A Go position after random legal moves (captures and kos happen on a small board)."""
    from services.games.go.game import GO

    rng = np.random.default_rng(seed)
    state = GO.start(size)
    state = type(state)(state.state, komi)
    for _ in range(moves):
        legal = np.flatnonzero(state.legal_mask()[:-1])
        if not len(legal):
            break
        state = state.play(int(rng.choice(legal)))
    return state


@pytest.mark.parametrize(("seed", "moves"), [(1, 0), (2, 30), (3, 60), (4, 75)])
@pytest.mark.parametrize("batch_size", [1, 7, 16])
def test_go_same_answers(seed: int, moves: int, batch_size: int) -> None:
    state = random_go(seed, 9, moves)
    evaluator = HashEvaluator(seed=seed, values=batch_size != 7, has_pass=True, scale=2.0)
    new, old = both(state, 250, evaluator=evaluator, batch_size=batch_size)
    assert stats(new.result(top_children=100)) == stats(old.result(top_children=100))


def test_go_captures_ko_and_passes_same_answers() -> None:
    """Positions the random games reach: a ko to respect, and two passes scored (the network
    loves the pass here, so the tree is full of scored ends)."""
    state = random_go(9, 9, 70)
    kos = 0
    for seed in range(40):
        s = random_go(seed, 9, 50 + seed)
        kos += s.state.ko is not None
    assert kos > 0
    evaluator = HashEvaluator(seed=5, values=True, has_pass=True, scale=3.0)
    new, old = both(state.play(81), 300, evaluator=evaluator, batch_size=4)
    assert stats(new.result(top_children=100)) == stats(old.result(top_children=100))
    for seed in range(40):
        s = random_go(seed, 9, 50 + seed)
        if s.state.ko is not None:
            new, old = both(s, 120, evaluator=evaluator, batch_size=8)
            assert stats(new.result(top_children=100)) == stats(old.result(top_children=100))


def test_go_reused_trees_same_answers() -> None:
    state = random_go(11, 9, 20)
    evaluator = HashEvaluator(seed=2, values=True, has_pass=True)
    new, old = both(state, 400, evaluator=evaluator, batch_size=8)
    r = new.result()
    reply = r.principal_variation[1]
    later = state.play(r.move).play(reply)
    a = mcts.search(later, evaluator, max_visits=300, tree=new.root.child(r.move).child(reply))
    b = ref.search(later, evaluator, max_visits=300, tree=old.root.child(r.move).child(reply))
    assert a.reused_visits > 0 and stats(a) == stats(b)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_capture_same_answers(seed: int) -> None:
    from services.games.capture.game import CAPTURE

    rng = np.random.default_rng(seed)
    state = CAPTURE.start(7)
    for _ in range(8):
        nxt = state.play(int(rng.choice(np.flatnonzero(state.legal_mask()))))
        if nxt.is_over:
            break
        state = nxt
    new, old = both(state, 300, evaluator=HashEvaluator(seed=seed, values=True), batch_size=6)
    assert stats(new.result(top_children=100)) == stats(old.result(top_children=100))
