"""The cache of network answers (`services.evaluator_cache`): a board asked again is answered
from memory, two different inputs never share an answer, the bound holds, and a search gives
the same answer with and without it (`HashEvaluator`: each board's answer is a function of its
bytes alone, as a deterministic network's)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from evaluators import HashEvaluator

from services.evaluator_cache import ENTRY_OVERHEAD_BYTES, CachingEvaluator, EvalCache
from services.games.go.game import GO, GoSearchState, parse_vertex
from services.games.go.rules import GoState
from services.games.gomoku.rules import GomokuState
from services.search import mcts


class Recording:
    """`inner`, keeping the bytes of every board it is sent."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.boards: list[bytes] = []

    def infer(self, boards: np.ndarray, *args):
        self.boards.extend(b.tobytes() for b in boards)
        return self.inner.infer(boards, *args)


def stats(r) -> tuple:
    return (r.move, r.visits, r.prior, r.value, r.principal_variation, r.evaluated_leaves,
            [(c.move, c.visits, c.prior, c.value, c.principal_variation) for c in r.children])


def go(vertices: list[str]) -> GoSearchState:
    pos = GoSearchState(GoState(GO.default_size), 7.5)
    for v in vertices:
        p = parse_vertex(v, GO.default_size)
        pos = pos.play(pos.pass_move if p is None else p)
    return pos


def test_a_board_asked_again_or_twice_in_one_call_is_evaluated_once() -> None:
    net = Recording(HashEvaluator(values=True))
    cached = CachingEvaluator(net)
    a, b, c = (GomokuState.from_moves(m).board for m in ([112], [112, 113], [100]))
    first = cached.infer(np.stack([a, b, a]))
    assert net.boards == [a.tobytes(), b.tobytes()]
    second = cached.infer(np.stack([b, c]))
    assert net.boards[2:] == [c.tobytes()]
    fresh = HashEvaluator(values=True).infer(np.stack([a, b, a, c]))
    assert np.array_equal(first.logits, fresh.logits[:3])
    assert np.array_equal(second.logits, fresh.logits[[1, 3]])
    assert np.array_equal(second.values, fresh.values[[1, 3]])
    assert (cached.cache.hits, cached.cache.misses) == (2, 3)


def test_a_transposition_is_evaluated_once() -> None:
    """Two move orders, one stone set: the second search's root is the first's answer."""
    net = Recording(HashEvaluator(values=True))
    cached = CachingEvaluator(net)
    one = GomokuState.from_moves([112, 113, 97])
    other = GomokuState.from_moves([97, 113, 112])
    assert np.array_equal(one.board, other.board)
    mcts.search(one, cached, max_visits=1)
    asked = len(net.boards)
    mcts.search(other, cached, max_visits=1)
    assert len(net.boards) == asked  # the root: a hit
    assert cached.cache.hits >= 1


def test_a_search_sends_each_distinct_board_once() -> None:
    """A small board, many visits: leaves reached by different move orders are repeated."""
    net = Recording(HashEvaluator(values=True))
    asked = Recording(CachingEvaluator(net))
    mcts.search(GomokuState.from_moves([12], size=5), asked, max_visits=600)
    assert len(set(asked.boards)) < len(asked.boards)  # the search did meet transpositions
    assert sorted(net.boards) == sorted(set(asked.boards))


@pytest.mark.parametrize(("one", "other"), [
    # the same stones, white to move: just after black's E5 took the ko at D5, or with no ko
    (["D4", "E4", "C5", "F5", "D6", "E6", "A1", "D5", "E5"],
     ["D4", "E4", "C5", "F5", "D6", "E6", "A1", "pass", "E5"]),
    # the same stones, black or white to move
    (["D4", "E4"], ["D4", "E4", "pass"]),
])
def test_different_go_inputs_never_share_an_entry(one: list[str], other: list[str]) -> None:
    a, b = go(one), go(other)
    assert np.array_equal(a.state.board, b.state.board)
    net = Recording(HashEvaluator(values=True, has_pass=True))
    cached = CachingEvaluator(net)
    boards = [GO.network_input(p) for p in (a, b)]
    out_a = cached.infer(boards[0][None])
    out_b = cached.infer(boards[1][None])
    assert len(net.boards) == 2 and cached.cache.hits == 0
    assert not np.array_equal(out_a.logits, out_b.logits)


def test_games_sharing_a_cache_are_kept_apart_by_namespace() -> None:
    cache = EvalCache()
    first = Recording(HashEvaluator(seed=1))
    second = Recording(HashEvaluator(seed=2))
    board = GomokuState.from_moves([112]).board[None]
    one = CachingEvaluator(first, cache, namespace="gomoku").infer(board)
    two = CachingEvaluator(second, cache, namespace="capture").infer(board)
    assert len(first.boards) == len(second.boards) == 1
    assert not np.array_equal(one.logits, two.logits)


def test_the_bound_is_kept_and_the_least_recently_used_go_first() -> None:
    board_bytes, row_bytes = 225, 225 * 4
    entry = board_bytes + row_bytes + ENTRY_OVERHEAD_BYTES
    cache = EvalCache(max_bytes=10 * entry)
    net = Recording(HashEvaluator())
    cached = CachingEvaluator(net, cache)
    boards = [GomokuState.from_moves([p]).board for p in range(30)]
    cached.infer(np.stack(boards[:10]))
    assert len(cache) == 10 and cache.nbytes == 10 * entry
    cached.infer(boards[0][None])  # the oldest made the most recent
    cached.infer(np.stack(boards[10:15]))
    assert len(cache) == 10 and cache.nbytes <= cache.max_bytes
    sent = len(net.boards)
    cached.infer(boards[0][None])  # kept
    assert len(net.boards) == sent
    cached.infer(boards[1][None])  # evicted
    assert len(net.boards) == sent + 1
    cached.infer(np.stack(boards[15:30]))
    assert len(cache) == 10 and cache.nbytes <= cache.max_bytes


def test_size_zero_caches_nothing() -> None:
    net = Recording(HashEvaluator())
    cached = CachingEvaluator(net, EvalCache(0))
    board = GomokuState.from_moves([112]).board[None]
    cached.infer(board)
    cached.infer(board)
    assert len(net.boards) == 2 and len(cached.cache) == 0


@pytest.mark.parametrize(("moves", "options"), [
    ([112, 113, 97], {}),
    ([112, 113, 97, 98, 127, 111], {"batch_size": 8}),
    ([112, 128, 96, 144], {"noise_alpha": 0.3, "temperature": 1.0, "seed": 7}),
])
def test_searches_give_the_same_answers_with_and_without_the_cache(moves, options) -> None:
    """Fresh, and with the cache already holding an earlier search's boards (most leaves
    hits): the same visits, priors, values and lines."""
    state = GomokuState.from_moves(moves)
    plain = mcts.search(state, HashEvaluator(values=True), max_visits=400, **options)
    cached = CachingEvaluator(HashEvaluator(values=True))
    assert stats(mcts.search(state, cached, max_visits=400, **options)) == stats(plain)
    misses = cached.cache.misses
    again = mcts.search(state, cached, max_visits=400, **options)
    assert cached.cache.misses == misses  # every board of the repeated search: a hit
    assert cached.cache.hits >= again.evaluated_leaves > 100
    assert stats(again) == stats(plain)


def test_go_searches_give_the_same_answers_with_and_without_the_cache() -> None:
    state = go(["D4", "E4", "C5", "F5", "D6", "E6", "A1", "D5", "E5"])
    plain = mcts.search(state, HashEvaluator(values=True, has_pass=True), max_visits=200)
    cached = CachingEvaluator(HashEvaluator(values=True, has_pass=True))
    mcts.search(state.play(parse_vertex("Q16", GO.default_size)), cached, max_visits=100)
    assert stats(mcts.search(state, cached, max_visits=200)) == stats(plain)


@dataclass(frozen=True)
class _Out:
    logits: np.ndarray
    values: np.ndarray | None
    model_name: str
    model_version: str


class Versioned:
    """Logits that are the model version everywhere; `bad` answers NaN."""

    def __init__(self) -> None:
        self.version = "1"
        self.bad = False
        self.sent = 0

    def infer(self, boards: np.ndarray) -> _Out:
        self.sent += len(boards)
        fill = np.nan if self.bad else float(self.version)
        return _Out(np.full((len(boards), 225), fill, np.float32),
                    np.zeros(len(boards), np.float32), "m", self.version)


def test_a_new_model_version_is_never_mixed_with_the_old_ones_answers() -> None:
    net = Versioned()
    cached = CachingEvaluator(net)
    a, b = (GomokuState.from_moves([p]).board for p in (0, 1))
    cached.infer(a[None])
    net.version = "2"
    out = cached.infer(np.stack([a, b]))  # b misses: version 2 answers, both are asked again
    assert out.model_version == "2" and (out.logits == 2).all()
    assert net.sent == 1 + 1 + 2 and len(cached.cache) == 2


def test_a_served_model_change_empties_the_cache() -> None:
    net = Versioned()
    served = [("m", "1")]
    cached = CachingEvaluator(net, served_model=lambda: served[0])
    board = GomokuState.from_moves([0]).board[None]
    cached.infer(board)
    net.version, served[0] = "2", ("m", "2")
    out = cached.infer(board)  # all hits, but another version serves now
    assert out.model_version == "2" and net.sent == 2


def test_a_non_finite_answer_is_not_kept() -> None:
    net = Versioned()
    net.bad = True
    cached = CachingEvaluator(net)
    board = GomokuState.from_moves([0]).board[None]
    assert np.isnan(cached.infer(board).logits).all()
    assert len(cached.cache) == 0


def test_a_network_without_a_value_head_still_answers_no_value() -> None:
    cached = CachingEvaluator(HashEvaluator(values=False))
    board = GomokuState.from_moves([0]).board[None]
    assert cached.infer(board).values is None
    assert cached.infer(board).values is None  # from the cache


@pytest.mark.parametrize("mb", [64, 0])
def test_the_service_answers_a_repeated_search_from_its_cache_the_same(mb: int) -> None:
    """Two GenMoves of one position without tree reuse: the second asks the network for
    nothing new (counted in the metrics) and answers as the first; `--eval-cache-mb 0`
    caches nothing."""
    from services.search.client import SearchClient
    from services.search.server import build_service

    net = Recording(HashEvaluator(values=True))
    service = build_service(net, port=0, eval_cache_mb=mb).start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            first = client.genmove(["h8", "h9"], max_visits=200, reuse_tree=False, timeout=30)
            sent = len(net.boards)
            second = client.genmove(["h8", "h9"], max_visits=200, reuse_tree=False, timeout=30)
        hits = service.metrics.value("movepred_eval_cache_boards_total", result="hit")
        misses = service.metrics.value("movepred_eval_cache_boards_total", result="miss")
    finally:
        service.stop()
    assert second.move == first.move
    assert [(c.move, c.visits) for c in second.candidates] == \
        [(c.move, c.visits) for c in first.candidates]
    if mb:
        assert len(net.boards) == sent  # the second search: every board from the cache
        assert hits >= 150 and misses == sent
    else:
        assert len(net.boards) == 2 * sent
        assert hits == 0 and misses == 2 * sent


@pytest.mark.parametrize("mb", [64, 0])
def test_the_in_process_evaluator_answers_a_board_again_from_its_cache(tmp_path, mb) -> None:
    """`LocalEvaluator` (matches, self-play, benchmarks): a board asked again costs no forward
    pass and gets the answer it got; `cache_mb` 0 evaluates every board."""
    import torch
    from match_nets import LineNet, save

    from services.models.local_evaluator import LocalEvaluator

    threads = torch.get_num_threads()
    try:
        ev = LocalEvaluator(save(LineNet(), tmp_path / "lines.pt"), "lines", cache_mb=mb)
    finally:
        torch.set_num_threads(threads)
    a, b = (GomokuState.from_moves(m).board for m in ([112, 113], [112, 113, 97]))
    first = ev.infer(np.stack([a, b]))
    again = ev.infer(np.stack([b, a, b]))
    assert np.array_equal(again.logits, first.logits[[1, 0, 1]])
    assert np.array_equal(ev.evaluate(a[None]).logits, first.logits[:1])
    assert ev.boards == (2 + 1 if mb else 2 + 3 + 1)
