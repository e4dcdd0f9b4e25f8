"""Leaf values mixed with rollouts (services/search/rollout_value.py): the wrapper's values,
lambda 0 as no wrapper, the version's rollout policy, and the option through GenMove/Analyze."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.games.base import BLACK, WHITE
from services.games.go.features import compact
from services.games.go.rules import GoState
from services.games.registry import get_game
from services.games.rollout import RolloutWeights
from services.repository.rollout_policy import (
    ROLLOUT_FILE,
    VersionRollouts,
    read_rollout,
    rollout_files,
    rollout_metadata,
)
from services.search import mcts, validation
from services.search.rollout_value import (
    FixedRollouts,
    NoRolloutPolicy,
    RolloutValueEvaluator,
)
from services.search.server import build_service
from tests.evaluators import HashEvaluator

GOMOKU = get_game("gomoku")
GO = get_game("go")


def weights(seed: int = 0) -> RolloutWeights:
    rng = np.random.default_rng(seed)
    return RolloutWeights(rng.normal(0, 0.5, (3, 5, 5)).astype(np.float32), 0.0,
                          config="rollout_k5", top1=0.25)


def gomoku_boards(n: int = 6) -> np.ndarray:
    return GOMOKU.sample_inputs(n, seed=4)


class CountingSource:
    """A rollout source that says which versions were asked for."""

    def __init__(self, w: RolloutWeights | None) -> None:
        self.w = w
        self.asked: list[tuple[str, str]] = []

    def weights_for(self, model_name: str, model_version: str) -> RolloutWeights | None:
        self.asked.append((model_name, model_version))
        return self.w


class Recording:
    """An evaluator that keeps its last answer."""

    def __init__(self, inner: HashEvaluator) -> None:
        self.inner = inner
        self.last = None

    def infer(self, boards: np.ndarray):
        self.last = self.inner.infer(boards)
        return self.last


@pytest.mark.parametrize("lam", [0.25, 0.5, 1.0])
def test_values_are_the_mix_of_network_and_seeded_rollouts(lam: float) -> None:
    inner = HashEvaluator(values=True)
    w = weights()
    wrapper = RolloutValueEvaluator(inner, GOMOKU.rollouts(), FixedRollouts(w), lam, seed=3,
                                    rollouts_per_leaf=4)
    boards = gomoku_boards()
    out = wrapper.infer(boards)
    v = inner.infer(boards).values.astype(np.float64)
    z = GOMOKU.rollouts().play(boards, w, seed=wrapper.call_seed(0), rollouts=4)
    np.testing.assert_array_equal(out.values, ((1 - lam) * v + lam * z).astype(np.float32))
    np.testing.assert_array_equal(out.logits, inner.infer(boards).logits)
    assert wrapper.call_seed(1) != wrapper.call_seed(0)


def test_without_a_value_head_lambda_one_is_pure_rollouts() -> None:
    w = weights(1)
    wrapper = RolloutValueEvaluator(HashEvaluator(values=False), GOMOKU.rollouts(),
                                    FixedRollouts(w), 1.0)
    boards = gomoku_boards()
    z = GOMOKU.rollouts().play(boards, w, seed=wrapper.call_seed(0))
    np.testing.assert_array_equal(wrapper.infer(boards).values, z.astype(np.float32))


def test_lambda_zero_is_the_search_without_a_wrapper() -> None:
    state = GOMOKU.start().play(112).play(113)
    inner = Recording(HashEvaluator(values=True))
    source = CountingSource(None)
    wrapper = RolloutValueEvaluator(inner, GOMOKU.rollouts(), source, 0.0)
    assert wrapper.infer(gomoku_boards()) is inner.last  # the inner answer itself
    plain = mcts.search(state, HashEvaluator(values=True), max_visits=64)
    mixed = mcts.search(state, wrapper, max_visits=64)
    assert (plain.move, plain.value, plain.children) == (mixed.move, mixed.value, mixed.children)
    assert source.asked == []  # lambda 0 never looks for a rollout policy


def test_a_version_without_rollout_policy_is_refused() -> None:
    wrapper = RolloutValueEvaluator(HashEvaluator(), GOMOKU.rollouts(), CountingSource(None),
                                    0.5)
    with pytest.raises(NoRolloutPolicy, match="hash version 1 has no rollout policy"):
        wrapper.infer(gomoku_boards())


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_lambda_outside_zero_one_is_refused(bad: float) -> None:
    with pytest.raises(ValueError):
        RolloutValueEvaluator(HashEvaluator(), GOMOKU.rollouts(), FixedRollouts(weights()), bad)
    with pytest.raises(validation.InvalidRequest, match="rollout_lambda"):
        validation.rollout_lambda(search_pb2.GenMoveRequest(rollout_lambda=bad))


def test_go_leaves_are_scored_with_the_komi_of_their_colour() -> None:
    root = GO.start(9).play(40)  # white to move
    w = weights(2)
    wrapper = RolloutValueEvaluator.for_search(HashEvaluator(has_pass=True), root,
                                               FixedRollouts(w), 1.0)
    assert wrapper.komi == root.komi and wrapper.takes_colours
    leaves = [root.play(41), root.play(41).play(42)]
    boards = np.stack([GO.network_input(s) for s in leaves])
    colours = np.array([s.to_move for s in leaves])
    assert colours.tolist() == [BLACK, WHITE]
    z = GO.rollouts().play(boards, w, seed=wrapper.call_seed(0), komi=root.komi,
                           colours=colours)
    np.testing.assert_array_equal(wrapper.infer(boards, colours=colours).values,
                                  z.astype(np.float32))


def test_go_rollouts_without_colours_are_refused() -> None:
    """No guessed colour: a caller that does not say whose move it is gets an error."""
    state = GoState(9).play(40)
    boards = compact(state)[None]
    with pytest.raises(ValueError, match="colours"):
        GO.rollouts().play(boards, weights(), komi=7.5)
    with pytest.raises(ValueError, match="BLACK"):
        GO.rollouts().play(boards, weights(), komi=7.5, colours=np.array([0]))
    inner = HashEvaluator(has_pass=True)
    wrapper = RolloutValueEvaluator.for_search(inner, GO.start(9), FixedRollouts(weights()), 0.5)
    with pytest.raises(ValueError, match="colours"):
        wrapper.infer(boards)
    assert inner.calls == []  # refused before the network was asked
    gomoku = RolloutValueEvaluator(HashEvaluator(), GOMOKU.rollouts(), FixedRollouts(weights()),
                                   0.5)
    assert not gomoku.takes_colours  # Gomoku's input says whose move it is
    assert len(gomoku.infer(gomoku_boards()).values) == 6


@pytest.mark.parametrize("komi, black_value", [(100.0, -1.0), (-100.0, 1.0)])
@pytest.mark.parametrize("tree", ["compiled", "interpreted"])
def test_a_go_search_gives_the_komi_to_white(komi: float, black_value: float, tree: str
                                             ) -> None:
    """A komi larger than the board: whatever the rollouts play, White wins every one (komi
    100) or loses every one (-100). Each leaf's value is its mover's result, so the search's
    values are all that result for Black only when every leaf was scored for its colour."""
    from services.games.go.game import GoSearchState
    from services.search import interpreted

    state = GoSearchState(GoState(5), komi=komi)  # black to move
    wrapper = RolloutValueEvaluator.for_search(HashEvaluator(has_pass=True), state,
                                               FixedRollouts(weights(7)), 1.0)
    make = mcts.Search if tree == "compiled" else interpreted.Search
    search = make(state, wrapper)
    search.run(96)
    result = search.result()
    assert result.value == pytest.approx(black_value)
    visited = [c for c in result.children if c.visits > 0]
    assert len(visited) > 3
    assert all(c.value == pytest.approx(black_value) for c in visited)
    white_root = make(state.play(12), RolloutValueEvaluator.for_search(
        HashEvaluator(has_pass=True), state, FixedRollouts(weights(7)), 1.0))
    white_root.run(48)
    assert white_root.result().value == pytest.approx(-black_value)


def test_the_rollout_policy_is_found_with_its_version(tmp_path) -> None:
    w = weights(3)
    (tmp_path / "gomoku_policy" / "4").mkdir(parents=True)
    (tmp_path / "gomoku_policy" / "4" / ROLLOUT_FILE).write_bytes(rollout_files(w)[ROLLOUT_FILE])
    (tmp_path / "gomoku_policy" / "5").mkdir()
    found = read_rollout(tmp_path, "gomoku_policy", 4)
    assert found is not None and np.array_equal(found.kernel, w.kernel)
    source = VersionRollouts(tmp_path)
    assert source.weights_for("gomoku_policy", "4").config == "rollout_k5"
    assert source.weights_for("gomoku_policy", "5") is None
    assert source.weights_for("gomoku_policy", "") is None
    assert rollout_metadata(w)["rollout"] == {"file": ROLLOUT_FILE, "config": "rollout_k5",
                                              "top1": 0.25, "kernel": 5}


def _genmove(stub, **fields) -> search_pb2.GenMoveResponse:
    position = search_pb2.Position(moves=[search_pb2.Point(x=7, y=7)])
    return stub.GenMove(search_pb2.GenMoveRequest(position=position, max_visits=32, **fields),
                        timeout=30)


@pytest.mark.parametrize("source_given", [True, False])
def test_genmove_and_analyze_take_rollout_lambda(source_given: bool) -> None:
    source = CountingSource(weights(4))
    service = build_service(HashEvaluator(values=True), port=0, model_repository="",
                            rollout_source=source if source_given else None).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            stub = search_pb2_grpc.SearchServiceStub(channel)
            with pytest.raises(grpc.RpcError) as bad:
                _genmove(stub, rollout_lambda=1.5)
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "rollout_lambda" in bad.value.details()
            plain = _genmove(stub, disable_tree_reuse=True)
            assert _genmove(stub, rollout_lambda=0.0, disable_tree_reuse=True) == plain
            assert source.asked == []
            if not source_given:
                with pytest.raises(grpc.RpcError) as refused:
                    _genmove(stub, rollout_lambda=0.5)
                assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                return
            mixed = _genmove(stub, rollout_lambda=1.0)
            assert mixed.total_visits == 32 and source.asked[-1] == ("hash", "1")
            asked = len(source.asked)
            reports = list(stub.Analyze(search_pb2.AnalyzeRequest(
                position=search_pb2.Position(moves=[search_pb2.Point(x=7, y=7)]),
                max_visits=32, rollout_lambda=0.5), timeout=30))
            assert reports[-1].final and len(source.asked) > asked
    finally:
        service.stop()


def test_gtp_and_gomocup_options_reach_the_search() -> None:
    import argparse

    from services.protocols import gomocup, gtp

    source = CountingSource(weights(5))
    service = build_service(HashEvaluator(values=True), port=0, model_repository="",
                            go_evaluator=HashEvaluator(values=True, has_pass=True),
                            rollout_source=source).start()
    target = f"127.0.0.1:{service.port}"
    try:
        parser = argparse.ArgumentParser()
        gtp.add_arguments(parser)
        with pytest.raises(SystemExit):
            parser.parse_args(["--rollout-lambda", "1.5"])
        args = parser.parse_args(["--target", target, "--rollout-lambda", "0.5",
                                  "--visits", "16"])
        engine = gtp.engine_from(args)
        assert engine.rollout_lambda == 0.5
        assert engine.handle("boardsize 9").startswith("=")
        assert engine.handle("genmove b").startswith("= ")
        assert source.asked and source.asked[-1] == ("hash", "1")
        engine.close()

        asked = len(source.asked)
        brain = gomocup.Brain(target, visits=16)
        assert brain.handle("INFO rollout_lambda 2")[0].startswith("ERROR")
        assert brain.rollout_lambda == 0.0
        brain.handle("START 15")
        assert len(source.asked) == asked  # lambda 0: no rollouts
        assert brain.handle("INFO rollout_lambda 0.25") == []
        assert brain.rollout_lambda == 0.25
        assert len(brain.handle("BEGIN")) == 1
        assert len(source.asked) > asked
        brain.close()
    finally:
        service.stop()


def test_published_with_its_network_and_served_with_its_version(tmp_path) -> None:
    import json

    from services.repository.publish import publish
    from tests.triton_fixtures import build_tiny_policy

    w = weights(6)
    model = build_tiny_policy(tmp_path / "m.pt")
    repository = tmp_path / "repo"
    plain = publish(model, repository, "gomoku_policy", game="gomoku")
    with_rollout = publish(model, repository, "gomoku_policy", game="gomoku", rollout=w)
    folder = repository / "gomoku_policy" / str(with_rollout)
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["rollout"]["config"] == "rollout_k5" and (folder / ROLLOUT_FILE).is_file()
    source = VersionRollouts(repository)
    assert source.weights_for("gomoku_policy", str(plain)) is None
    served = source.weights_for("gomoku_policy", str(with_rollout))
    assert served is not None and np.array_equal(served.kernel, w.kernel)
