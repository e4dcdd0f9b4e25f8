"""The whole platform with its real parts: Prefect flows, Triton, gRPC search service.

A session fixture ingests the shipped sample, trains a small policy with the train flow,
publishes version 1, starts the real Triton and the search service on free loopback ports.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from services.coords import parse_point
from services.search.client import SearchClient
from services.search.server import build_server
from services.trainer.train import TrainConfig
from services.triton.client import PolicyClient
from services.triton.launcher import TritonServer
from tests.conftest import SAMPLE_RIF
from tests.training_recipes import SERVED_RECIPES

S = 15
STEPS = 120


def idx(name: str) -> int:
    x, y = parse_point(name, S)
    return y * S + x


@pytest.fixture(scope="module")
def published(tmp_path_factory, prefect_harness) -> dict:
    from flows.ingest import ingest
    from flows.train import train_flow

    work = tmp_path_factory.mktemp("e2e")
    ingest(sources=[str(SAMPLE_RIF)], out_dir=str(work / "dataset"))
    out = train_flow(dataset_dir=str(work / "dataset"), repository=str(work / "repo"),
                     config=TrainConfig(max_steps=STEPS, batch_size=64),
                     run_dir=str(work / "run1"))
    return {"work": work, "repo": work / "repo", "dataset": work / "dataset", **out}


@pytest.fixture(scope="module")
def stack(published):
    with TritonServer(published["repo"], log_path=published["work"] / "triton.log") as triton:
        client = PolicyClient(triton.grpc_url)
        server, port = build_server(client, port=0)
        server.start()
        try:
            yield {"triton": triton, "target": f"127.0.0.1:{port}", **published}
        finally:
            server.stop(grace=1).wait()
            client.close()


@pytest.fixture()
def search(stack):
    with SearchClient(stack["target"]) as client:
        yield client


def test_train_flow_published_version_one_with_metrics(published) -> None:
    assert published["version"] == 1 and published["published"]
    assert (Path(published["run_dir"]) / "stages.png").stat().st_size > 1000
    assert (published["repo"] / "gomoku_policy" / "1" / "model.pt").is_file()
    val = published["metrics"]["validation"]
    assert val["n"] > 0 and 0.0 <= val["top1"] <= val["top5"] <= 1.0
    # a trained model beats picking uniformly among ~200 empty points by far
    assert val["top5"] > 0.1
    # the default configuration has a value head, fitted to the games' results
    assert published["config"]["model"].endswith("_v")
    assert val["value_n"] > 0 and 0.0 <= val["value_sign"] <= 1.0


def test_predict_is_a_distribution_over_legal_points(search) -> None:
    moves = ["h8", "h9", "i8", "g7"]
    r = search.predict(moves, top_k=5)
    policy = np.array(r.policy)
    assert policy.shape == (S * S,)
    assert policy.sum() == pytest.approx(1.0, abs=1e-5)
    assert all(policy[idx(m)] == 0.0 for m in moves)
    assert (policy >= 0).all()
    assert len(r.top_moves) == 5
    probs = [m.probability for m in r.top_moves]
    assert probs == sorted(probs, reverse=True)
    assert policy[r.top_moves[0].point.y * S + r.top_moves[0].point.x] == pytest.approx(probs[0])
    assert r.model_name == "gomoku_policy" and r.model_version == "1"
    assert r.to_move == 1  # black: four moves played
    assert r.HasField("value") and -1.0 <= r.value <= 1.0  # the value head, for Black


def test_genmove_returns_a_legal_move(search) -> None:
    moves = ["h8", "h9", "i8"]
    r = search.genmove(moves, max_visits=64)
    point = r.move.y * S + r.move.x
    assert point not in {idx(m) for m in moves}
    assert 0 <= r.move.x < S and 0 <= r.move.y < S
    assert r.total_visits >= 64 and r.visits > 0
    assert -1.0 <= r.value <= 1.0 and 0.0 <= r.prior <= 1.0
    assert r.model_version == "1"


def test_genmove_takes_an_immediate_win(search) -> None:
    # black: h8 i8 j8 k8 (g8 blocked by white); black to move wins at l8
    r = search.genmove(["h8", "g8", "i8", "a1", "j8", "a2", "k8", "a4"], max_visits=32)
    assert r.name == "l8"
    assert r.value == pytest.approx(1.0)


def test_genmove_blocks_a_four(search) -> None:
    # black threatens l8 (four h8-k8, g8 white); white to move must block
    r = search.genmove(["h8", "g8", "i8", "a1", "j8", "a2", "k8"], max_visits=64)
    assert r.name == "l8"


@pytest.mark.parametrize(
    ("moves", "kwargs", "field"),
    [
        (["h8", "h8"], {}, "position.moves[1]"),
        ([(15, 3)], {}, "position.moves[0]"),
        (["h8"], {"max_visits": -1}, "max_visits"),
    ],
)
def test_bad_genmove_requests_are_invalid_argument(search, moves, kwargs, field) -> None:
    with pytest.raises(grpc.RpcError) as err:
        search.genmove(moves, **kwargs)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()


def test_new_version_rolls_out_without_failed_requests(stack, search) -> None:
    from flows.train import train_flow

    versions: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def hammer() -> None:
        with SearchClient(stack["target"]) as client:
            while not stop.is_set():
                try:
                    versions.append(client.predict(["h8", "h9"], timeout=10).model_version)
                except grpc.RpcError as exc:
                    failures.append(f"{exc.code()}: {exc.details()}")

    thread = threading.Thread(target=hammer, daemon=True)
    thread.start()
    try:
        out = train_flow(dataset_dir=str(stack["dataset"]), repository=str(stack["repo"]),
                         # a recipe that passes the rollout's smoke test (fives taken, fours
                         # blocked) with margin on every float path (tests/training_recipes.py)
                         config=SERVED_RECIPES["make demo"],
                         gate_tolerance=1.0,
                         run_dir=str(stack["work"] / "run2"),
                         triton_url=stack["triton"].grpc_url)
        assert out["version"] == 2
        assert out["served"], out.get("rollout")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not versions or versions[-1] != "2"):
            time.sleep(0.05)
        time.sleep(0.5)  # keep sending for a moment on the new version
    finally:
        stop.set()
        thread.join(timeout=15)
    assert failures == []
    assert "1" in versions and versions[-1] == "2"
    switched = versions.index("2")
    assert set(versions[switched:]) == {"2"}  # once switched, never back to the old version
    assert search.predict(["h8"]).model_version == "2"


def test_triton_down_gives_unavailable_then_recovers(published, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(published["repo"], repo)
    triton = TritonServer(repo, log_path=tmp_path / "triton.log").start()
    grpc_port, http_port = triton.grpc_port, triton.http_port
    client = PolicyClient(triton.grpc_url, timeout_s=2.0)
    server, port = build_server(client, port=0)
    server.start()
    try:
        with SearchClient(f"127.0.0.1:{port}") as search:
            assert search.predict(["h8"]).model_version
            triton.stop()
            with pytest.raises(grpc.RpcError) as err:
                search.predict(["h8"], timeout=5)
            # UNAVAILABLE, not DEADLINE_EXCEEDED: the error came before the call's deadline
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            with pytest.raises(grpc.RpcError) as err:
                search.genmove(["h8"], max_visits=50, timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE

            triton = TritonServer(repo, grpc_port=grpc_port, http_port=http_port,
                                  log_path=tmp_path / "triton2.log").start()
            back = time.monotonic()
            while True:  # the service must reconnect by itself within a few seconds
                try:
                    assert search.predict(["h8"], timeout=5).model_version
                    break
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE
                    assert time.monotonic() - back < 5, "service did not recover in 5 s"
                    time.sleep(0.2)
            assert search.genmove(["h8"], max_visits=16, timeout=30).name
    finally:
        server.stop(grace=1).wait()
        client.close()
        triton.stop()
