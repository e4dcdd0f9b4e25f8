"""Tree reuse cache (`services.search.tree_cache`) with real searches and an in-process policy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.games.gomoku.rules import GomokuState, Rule
from services.search import mcts
from services.search.tree_cache import TreeCache, base_key


@dataclass(frozen=True)
class Out:
    logits: np.ndarray
    model_name: str = "fake"
    model_version: str = "1"


class Centre:
    """Prefers the centre: searches go deep along a few lines, so subtrees have visits."""

    def infer(self, boards: np.ndarray) -> Out:
        n, size = boards.shape[0], boards.shape[1]
        y, x = np.divmod(np.arange(size * size), size)
        c = (size - 1) / 2
        logits = -0.8 * (np.abs(x - c) + np.abs(y - c))
        return Out(np.broadcast_to(logits, (n, size * size)).astype(np.float32))


def searched(moves: list[int], visits: int = 300, **kw) -> tuple[GomokuState, mcts.Search]:
    state = GomokuState.from_moves(moves, **kw)
    s = mcts.Search(state, Centre())
    s.run(visits)
    return state, s


def line(s: mcts.Search, n: int) -> list[int]:
    pv = s.result().principal_variation
    assert len(pv) >= n
    return list(pv[:n])


@pytest.mark.parametrize("extension", [0, 1, 2])
def test_take_finds_the_subtree_of_an_extended_game(extension: int) -> None:
    cache = TreeCache()
    moves = [112, 113]
    state, s = searched(moves)
    assert cache.put(state, s.root, "fake", "1")
    later = GomokuState.from_moves(moves + line(s, extension))
    hit = cache.take(later, "1")
    assert hit is not None and hit.extension == extension
    assert (hit.root.state.board == later.board).all() and hit.visits == hit.root.visits > 0
    assert len(cache) == 0 and cache.visits == 0  # taken, not shared
    assert cache.take(later, "1") is None


def test_three_moves_on_or_another_game_is_a_miss() -> None:
    cache = TreeCache()
    state, s = searched([112, 113])
    cache.put(state, s.root, "fake", "1")
    assert cache.take(GomokuState.from_moves([112, 113, *line(s, 3)]), "1") is None
    cache.put(state, s.root, "fake", "1")
    other_rule = GomokuState.from_moves([112, 113], rule=Rule.RENJU)
    assert base_key(other_rule) != base_key(state)
    assert cache.take(other_rule, "1") is None
    setup = GomokuState.from_moves([112, 113], setup_black=(0,))
    assert cache.take(setup, "1") is None
    unplayed = GomokuState.from_moves([112, 113, 0])  # a move the tree never expanded
    assert cache.take(unplayed, "1") is None


def test_a_tree_of_another_model_version_is_dropped() -> None:
    cache = TreeCache()
    state, s = searched([112])
    cache.put(state, s.root, "fake", "1")
    assert cache.take(state, "2") is None and len(cache) == 0
    cache.put(state, s.root, "fake", "1")
    assert cache.take(state, None) is not None  # no served version known yet: no check


def test_lru_bounds_entries_and_visits() -> None:
    cache = TreeCache(max_entries=2, max_visits=70)
    games = [searched([p], visits=30) for p in (0, 14, 210)]
    for state, s in games:
        cache.put(state, s.root, "fake", "1")
    assert len(cache) == 2 and cache.visits == 60
    assert cache.take(games[0][0]) is None  # the oldest went first
    big_state, big = searched([224], visits=80)
    assert not cache.put(big_state, big.root, "fake", "1")  # larger than the whole cache
    mid_state, mid = searched([100], visits=50)
    cache.put(mid_state, mid.root, "fake", "1")  # 30 + 30 + 50 > 70: two must go
    assert len(cache) == 1 and cache.visits == 50
    assert cache.take(mid_state) is not None


def test_disabled_cache_keeps_nothing() -> None:
    cache = TreeCache(max_entries=0)
    state, s = searched([112], visits=20)
    assert not cache.enabled and not cache.put(state, s.root, "fake", "1")
    assert cache.take(state) is None


def test_reused_search_from_the_cache_counts_the_reused_visits() -> None:
    cache = TreeCache()
    state, s = searched([112, 113], visits=400)
    cache.put(state, s.root, "fake", "1")
    later = GomokuState.from_moves([112, 113, *line(s, 2)])
    hit = cache.take(later, "1")
    assert hit is not None
    r = mcts.search(later, Centre(), max_visits=hit.visits + 64, tree=hit.root)
    assert r.reused_visits == hit.visits and r.total_visits == hit.visits + 64


@settings(max_examples=15, deadline=None)
@given(
    opening=st.lists(st.integers(0, 224), min_size=0, max_size=6, unique=True),
    visits=st.integers(1, 120),
    extension=st.integers(0, 2),
    budget=st.integers(1, 150),
)
def test_reuse_keeps_the_visit_accounting(opening, visits, extension, budget) -> None:
    state = GomokuState.from_moves(opening)
    s = mcts.Search(state, Centre(), batch_size=8)
    s.run(visits)
    assert s.root.visits == s.total_visits == visits
    cache = TreeCache()
    cache.put(state, s.root, "fake", "1")
    pv = list(s.result().principal_variation)[:extension]
    later = GomokuState.from_moves(opening + pv)
    hit = cache.take(later, "1")
    if hit is None:  # the line ended in a node that was never expanded (or is terminal)
        return
    assert (hit.root.state.board == later.board).all()
    r = mcts.search(later, Centre(), max_visits=budget, batch_size=8, tree=hit.root)
    assert r.reused_visits == hit.visits
    assert r.total_visits == max(budget, hit.visits) == r.reused_visits + r.new_visits



def test_go_trees_are_keyed_by_the_exact_komi() -> None:
    """The key printed komi to 6 digits: 7 and 7.0000005 (a float32 7.000000476...) shared a
    tree, so a search under one komi answered for the other, where a tie is a loss."""
    from services.games.go.game import GoSearchState
    from services.games.go.rules import GoState

    seven = GoSearchState(GoState(9), komi=7.0).play(40)
    nearly = GoSearchState(GoState(9), komi=float(np.float32(7.0000005))).play(40)
    assert nearly.komi != seven.komi and f"{nearly.komi:g}" == f"{seven.komi:g}"
    assert base_key(nearly) != base_key(seven)
    assert base_key(GoSearchState(GoState(9), komi=7.0).play(40)) == base_key(seven)

def test_answers_are_read_off_the_tree_before_the_cache_shares_it() -> None:
    """The tree went into the cache before its answer was built: another request could take it
    and search on (virtual loss, new visits) while this one read it, and answer with visits it
    never made. Here the cache lets a "later search" add visits the moment it holds a tree."""
    from services.search.client import SearchClient
    from services.search.server import build_service
    from tests.evaluators import UniformEvaluator

    class TakenAtOnce(TreeCache):
        def put(self, state, root, model_name, model_version, **options) -> bool:
            kept = super().put(state, root, model_name, model_version, **options)
            root.child_n += 1000  # another search's visits, as soon as the tree is shared
            return kept

    service = build_service(UniformEvaluator(), port=0)
    service.servicer.trees = TakenAtOnce()
    service.start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            moved = client.genmove(["h8", "h9"], max_visits=64, timeout=30)
            assert moved.total_visits <= 64, moved.total_visits
            final = list(client.analyze(["h8", "h10"], max_visits=64, timeout=30))[-1]
            assert final.final and final.total_visits <= 64, final.total_visits
    finally:
        service.stop()


def test_cache_counts_the_bytes_of_the_subtrees_it_keeps() -> None:
    """A tree is kept as its subtree alone (the rest of a reused tree's pools is freed) and
    the cache counts the bytes of what it keeps."""
    state, s = searched([112, 113], visits=400)
    cache = TreeCache()
    r = s.result()
    child = s.root.child(r.move)
    later = state.play(r.move)
    assert cache.put(later, child, "fake", "1")
    kept = cache.nbytes
    assert 0 < kept < s.root.tree_bytes
    hit = cache.take(later)
    assert hit is not None and hit.visits == child.visits and cache.nbytes == 0
    assert hit.root.tree_bytes == kept and hit.root.visits == child.visits
    cache.put(later, hit.root, "fake", "1")
    cache.clear()
    assert cache.nbytes == 0
