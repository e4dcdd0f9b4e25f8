"""Tree reuse for searches whose leaf values mix in fast rollouts (lambda > 0): a tree is kept
and continued like lambda 0's, under the lambda and the rollout policy it was mixed with, so
a search never continues a tree mixed another way (services/search/tree_cache.py,
services/search/rollout_value.py, the search service)."""

from __future__ import annotations

import threading

import numpy as np

from services.games.gomoku.rules import GomokuState
from services.games.registry import get_game
from services.games.rollout import RolloutWeights
from services.search import mcts
from services.search.client import SearchClient
from services.search.ponder import Ponderer
from services.search.rollout_value import FixedRollouts, RolloutValueEvaluator, tree_key
from services.search.server import build_service
from services.search.tree_cache import TreeCache
from tests.evaluators import HashEvaluator

GOMOKU = get_game("gomoku")


def weights(seed: int) -> RolloutWeights:
    rng = np.random.default_rng(seed)
    return RolloutWeights(rng.normal(0, 0.5, (3, 5, 5)).astype(np.float32), 0.0,
                          config="rollout_k5")


class SwitchableSource:
    """One rollout policy for every version, replaceable (a republished policy)."""

    def __init__(self, w: RolloutWeights) -> None:
        self.w = w

    def weights_for(self, model_name: str, model_version: str) -> RolloutWeights:
        return self.w


def mixed_search(state: GomokuState, lam: float, w: RolloutWeights, visits: int = 64
                 ) -> tuple[mcts.Search, RolloutValueEvaluator]:
    wrapper = RolloutValueEvaluator.for_search(HashEvaluator(values=True), state,
                                               FixedRollouts(w), lam)
    search = mcts.Search(state, wrapper)
    search.run(visits)
    return search, wrapper


def test_the_fingerprint_names_the_weights() -> None:
    a, b = weights(1), weights(2)
    assert a.fingerprint == RolloutWeights.from_bytes(a.to_bytes()).fingerprint
    assert a.fingerprint != b.fingerprint
    assert RolloutWeights(a.kernel, 0.5).fingerprint != a.fingerprint  # the bias counts


def test_the_wrapper_names_its_mix() -> None:
    state = GomokuState.from_moves([112, 113])
    w = weights(1)
    plain = RolloutValueEvaluator.for_search(HashEvaluator(), state, FixedRollouts(w), 0.0)
    assert plain.tree_key() == () and tree_key(HashEvaluator()) == ()
    fresh = RolloutValueEvaluator.for_search(HashEvaluator(), state, FixedRollouts(w), 0.5)
    assert fresh.tree_key() is None  # no rollout played yet: nothing known to key a tree by
    fresh.continues(w.fingerprint)
    assert fresh.tree_key() == (0.5, w.fingerprint)
    _, used = mixed_search(state, 0.5, w, visits=16)
    assert tree_key(used) == (0.5, w.fingerprint)
    used.source = FixedRollouts(weights(2))  # the served version's policy changed mid-search
    used.infer(GOMOKU.sample_inputs(2, seed=1))
    assert used.tree_key() is None  # two policies in one tree: not kept


def test_the_cache_finds_a_tree_only_under_its_mix() -> None:
    state = GomokuState.from_moves([112, 113])
    w = weights(1)
    search, wrapper = mixed_search(state, 0.5, w)
    mix = wrapper.tree_key()
    cache = TreeCache()
    assert not cache.put(state, search.root, "hash", "1", mix=None)
    assert cache.put(state, search.root, "hash", "1", mix=mix)
    assert cache.take(state, "1") is None  # lambda 0
    assert cache.take(state, "1", (0.25, w.fingerprint)) is None  # another lambda
    assert cache.take(state, "1", (0.5, weights(2).fingerprint)) is None  # another policy
    assert len(cache) == 1  # a miss under another mix leaves the tree where it is
    hit = cache.take(state, "1", mix)
    assert hit is not None and hit.visits == search.root.visits


def test_a_reused_mixed_tree_goes_on_with_its_visits() -> None:
    state = GomokuState.from_moves([112, 113])
    w = weights(3)
    search, wrapper = mixed_search(state, 0.5, w, visits=96)
    cache = TreeCache()
    cache.put(state, search.root, "hash", "1", mix=tree_key(wrapper))
    move = search.result().move
    later = state.play(move)
    hit = cache.take(later, "1", (0.5, w.fingerprint))
    assert hit is not None and hit.extension == 1 and hit.visits > 0
    again = RolloutValueEvaluator.for_search(HashEvaluator(values=True), later,
                                             FixedRollouts(w), 0.5)
    again.continues(w.fingerprint)
    reused = mcts.Search(hit.root, again)
    reused.run(hit.visits + 32)
    result = reused.result()
    assert result.reused_visits == hit.visits and result.total_visits == hit.visits + 32
    assert cache.put(later, reused.root, "hash", "1", mix=tree_key(again))


def test_a_ponder_keeps_its_tree_under_the_mix_of_its_search() -> None:
    state = GomokuState.from_moves([112, 113])
    w = weights(4)
    wrapper = RolloutValueEvaluator.for_search(HashEvaluator(values=True), state,
                                               FixedRollouts(w), 0.25)
    trees = TreeCache()
    ponderer = Ponderer(trees, max_visits=48, max_seconds=60)
    assert ponderer.start(state, mcts.Search(state, wrapper))
    for _ in range(3000):
        if ponderer.active == 0:
            break
        threading.Event().wait(0.01)
    assert ponderer.stats.kept == 1
    assert trees.take(state) is None
    assert trees.take(state, None, (0.25, w.fingerprint)) is not None


def test_genmove_and_analyze_reuse_trees_of_their_own_lambda() -> None:
    lam = 0.5
    source = SwitchableSource(weights(5))
    service = build_service(HashEvaluator(values=True), port=0, model_repository="",
                            rollout_source=source).start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            moves = ["h8", "h9"]
            r1 = client.genmove(moves, max_visits=64, rollout_lambda=lam, timeout=30)
            assert r1.reused_visits == 0 and r1.total_visits == 64
            after = [*moves, r1.name]
            r2 = client.genmove(after, max_visits=96, rollout_lambda=lam, timeout=30)
            assert r2.reused_visits > 0 and r2.total_visits == 96  # the tree went on
            reply = [*after, r2.name]
            # the tree below r2's move was kept under lambda 0.5: other mixes do not see it
            other = client.genmove(reply, max_visits=32, rollout_lambda=0.25, timeout=30)
            assert other.reused_visits == 0
            plain = client.genmove(reply, max_visits=32, timeout=30)
            assert plain.reused_visits == 0
            final = list(client.analyze(reply, max_visits=128, rollout_lambda=lam,
                                        timeout=30))[-1]
            assert final.final and final.reused_visits > 0
            # a republished rollout policy: the trees mixed with the old one are not reused
            source.w = weights(6)
            renewed = client.genmove(reply, max_visits=160, rollout_lambda=lam, timeout=30)
            assert renewed.reused_visits == 0
            again = client.genmove(reply, max_visits=192, rollout_lambda=lam, timeout=30)
            assert again.reused_visits > 0  # the new policy's tree
            fresh = client.genmove(reply, max_visits=32, rollout_lambda=lam,
                                   reuse_tree=False, timeout=30)
            assert fresh.reused_visits == 0 and fresh.total_visits == 32
    finally:
        service.stop()
