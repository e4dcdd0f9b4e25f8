"""The search service over real gRPC with a real PolicyClient; no mocks.

First part (always runs): the server runs in-process on a free loopback port and its
PolicyClient points at a loopback port nobody listens on. That covers what must work without
Triton: UNAVAILABLE within the request deadline, validation (INVALID_ARGUMENT naming the field,
before any inference), health and reflection.

Second part (skipped without a ``tritonserver`` binary): a real Triton serving the tiny
TorchScript policy of `tests.triton_fixtures` is started *after* the search service, which must
recover by itself; then Predict and GenMove are checked end to end.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services import cli
from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.games.coords import index_name
from services.games.gomoku import GomokuState
from services.search.client import SearchClient, position
from services.search.mcts import masked_softmax
from services.search.server import SERVICE_NAME, build_server
from services.triton.client import PolicyClient


def closed_port() -> int:
    """A loopback port that nothing listens on (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    policy = PolicyClient(f"127.0.0.1:{closed_port()}", timeout_s=2.0)
    server, port = build_server(policy, port=0)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0).wait()
        policy.close()


@pytest.fixture(scope="module")
def stub(target: str) -> Iterator[search_pb2_grpc.SearchServiceStub]:
    with grpc.insecure_channel(target) as channel:
        yield search_pb2_grpc.SearchServiceStub(channel)


def _point(name: str) -> search_pb2.Point:
    return search_pb2.Point(x=ord(name[0]) - ord("a"), y=int(name[1:]) - 1)


def _pos(*moves: str | tuple[int, int], **fields: object) -> search_pb2.Position:
    pts = [_point(m) if isinstance(m, str) else search_pb2.Point(x=m[0], y=m[1]) for m in moves]
    return search_pb2.Position(moves=pts, **fields)


def _abort_code(call, request, timeout: float = 5.0) -> tuple[grpc.StatusCode, str, float]:
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=timeout)
    return info.value.code(), info.value.details(), time.monotonic() - start


@pytest.mark.parametrize("method", ["Predict", "GenMove"])
def test_unavailable_within_deadline_and_again(stub, method: str) -> None:
    request = (
        search_pb2.PredictRequest(position=_pos("h8", "h9"))
        if method == "Predict"
        else search_pb2.GenMoveRequest(position=_pos("h8", "h9"), max_visits=50)
    )
    for _ in range(2):  # a failure leaves nothing broken behind: the next call tries afresh
        code, details, elapsed = _abort_code(getattr(stub, method), request, timeout=5.0)
        assert code == grpc.StatusCode.UNAVAILABLE, details
        assert "Triton is unreachable" in details
        assert elapsed < 5.0


WIN_LINE = ["h8", "a1", "i8", "a2", "j8", "a3", "k8", "a4", "l8"]  # black makes five

INVALID = [
    ("Predict", dict(position=_pos("h8", "h8")), "position.moves[1]: h8 is occupied"),
    (
        "GenMove",
        dict(position=_pos("h8", "i9", "j10", (15, 2))),
        "position.moves[3]: (15, 2) is off the 15x15 board",
    ),
    ("Predict", dict(position=_pos((-1, 0))), "position.moves[0]: (-1, 0) is off"),
    ("Predict", dict(position=_pos("h8", board_size=19)), "position.board_size:"),
    ("GenMove", dict(position=_pos("h8", board_size=9)), "position.board_size:"),
    ("Predict", dict(position=_pos("h8", rule=9)), "position.rule: unknown rule 9"),
    ("Predict", dict(position=_pos(game=search_pb2.GO)), "position.game: GO is not served yet"),
    ("GenMove", dict(position=_pos("h8"), max_visits=-1), "max_visits: must be >= 0"),
    ("GenMove", dict(position=_pos("h8"), max_time_ms=-5), "max_time_ms: must be >= 0"),
    ("GenMove", dict(position=_pos("h8"), max_visits=100_001), "max_visits: must be at most"),
    ("GenMove", dict(position=_pos("h8"), max_time_ms=60_001), "max_time_ms: must be at most"),
    ("Predict", dict(position=_pos("h8"), top_k=-1), "top_k: must be in 0..225"),
    ("Predict", dict(position=_pos("h8"), top_k=226), "top_k: must be in 0..225"),
    ("GenMove", dict(position=_pos(*WIN_LINE)), "position: the game is over (black made five)"),
    ("Predict", dict(position=_pos(*WIN_LINE, "b1")), "position.moves[9]: the game ended"),
    (
        "Predict",
        dict(position=search_pb2.Position(setup_black=[_point("h8")], setup_white=[_point("h8")])),
        "position.setup_white[0]: h8 is occupied",
    ),
]


@pytest.mark.parametrize(("method", "fields", "message"), INVALID)
def test_invalid_request_names_the_field(stub, method: str, fields: dict, message: str) -> None:
    request_cls = search_pb2.PredictRequest if method == "Predict" else search_pb2.GenMoveRequest
    code, details, _ = _abort_code(getattr(stub, method), request_cls(**fields))
    # INVALID_ARGUMENT, not UNAVAILABLE: validation runs before Triton is called
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert details.startswith(message), details


def test_health_serving(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE_NAME):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_service(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        services = {s.name for r in replies for s in r.list_services_response.service}
    assert SERVICE_NAME == "movepred.v1.SearchService"
    assert {SERVICE_NAME, "grpc.health.v1.Health"} <= services


def test_python_client(target: str) -> None:
    assert position(["h8", (8, 8)], rule="renju").moves[1] == search_pb2.Point(x=8, y=8)
    with SearchClient(target) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.predict(["h8", "h8"])
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as info:
            client.genmove(["h8"], max_visits=10, timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_cli_reports_errors(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["predict", "--target", target, "h8", "h9"]) == cli.EXIT_RPC_ERROR
    out = capsys.readouterr().out
    assert " 8 " in out and "UNAVAILABLE" in out  # the board, then the error
    assert cli.main(["genmove", "--target", target, "--visits", "-3", "h8"]) == cli.EXIT_RPC_ERROR
    assert "max_visits" in capsys.readouterr().out
    assert cli.main(["genmove", "--target", target, "z99"]) == cli.EXIT_USAGE


# --------------------------------------------------------------------------- with real Triton


@dataclass
class Live:
    """A search service whose Triton starts late (on a port fixed in advance)."""

    target: str
    triton: object  # services.triton.server.TritonServer, not started until `bring_up`
    model_path: Path
    outage_codes: list[grpc.StatusCode] = field(default_factory=list)
    recovery_s: float | None = None

    def bring_up(self, within_s: float = 60.0) -> None:
        """Start Triton once and wait until the search service answers Predict again."""
        if self.recovery_s is not None:
            return
        with SearchClient(self.target) as client:
            for _ in range(2):
                with pytest.raises(grpc.RpcError) as info:
                    client.predict(["h8"], timeout=5)
                self.outage_codes.append(info.value.code())
            self.triton.start()
            start = time.monotonic()
            while True:
                try:
                    client.predict(["h8"], timeout=5)
                    break
                except grpc.RpcError as exc:
                    if time.monotonic() - start > within_s:
                        raise AssertionError(f"no recovery after {within_s} s: {exc}") from exc
                    time.sleep(0.2)
            self.recovery_s = time.monotonic() - start


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    from services.triton.publisher import publish
    from services.triton.server import TritonServer, free_port
    from tests.triton_fixtures import (
        MODEL_NAME,
        build_tiny_policy,
        make_repository,
        require_tritonserver,
    )

    require_tritonserver()
    root = tmp_path_factory.mktemp("search-triton")
    repository = make_repository(root)
    model_path = build_tiny_policy(root / "tiny-seed0.pt", seed=0)
    publish(model_path, repository, MODEL_NAME)
    grpc_port = free_port()
    triton = TritonServer(repository, grpc_port=grpc_port, log_path=root / "tritonserver.log")
    policy = PolicyClient(f"127.0.0.1:{grpc_port}", timeout_s=5.0)
    server, port = build_server(policy, port=0)
    server.start()
    try:
        yield Live(f"127.0.0.1:{port}", triton, model_path)
    finally:
        server.stop(0).wait()
        policy.close()
        triton.stop()


@pytest.mark.timeout(180)
def test_recovers_when_triton_comes_up(live: Live) -> None:
    live.bring_up()
    assert live.outage_codes == [grpc.StatusCode.UNAVAILABLE] * 2
    assert live.recovery_s is not None and live.recovery_s < 60


@pytest.mark.timeout(180)
def test_predict_end_to_end(live: Live) -> None:
    from tests.triton_fixtures import run_local

    live.bring_up()
    moves = ["h8", "h9", "i8", "g7"]
    with SearchClient(live.target) as client:
        r = client.predict(moves, top_k=7)
    state = GomokuState.from_moves([p.y * 15 + p.x for p in position(moves).moves])
    logits = run_local(live.model_path, state.board[np.newaxis].astype(np.int8))[0]
    expected = masked_softmax(logits, state.legal_mask())
    policy = np.array(r.policy)
    assert policy.shape == (225,)
    assert (policy[~state.legal_mask()] == 0).all()  # illegal points exactly 0
    np.testing.assert_allclose(policy, expected, rtol=1e-4, atol=1e-6)
    assert abs(policy.sum() - 1) < 1e-5
    assert r.top_moves[0].name == index_name(int(np.argmax(expected)), 15)
    probs = [m.probability for m in r.top_moves]
    assert len(probs) == 7 and probs == sorted(probs, reverse=True)
    assert r.to_move == search_pb2.BLACK
    assert (r.model_name, r.model_version) == ("gomoku_policy", "1")


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("moves", "expected"),
    [
        # black h8-k8 open four, white scattered: black must win at g8 or l8
        (["h8", "a1", "i8", "c1", "j8", "e1", "k8", "g1"], {"g8", "l8"}),
        # white h8-k8 blocked at g8: black must block l8
        (["g8", "h8", "a15", "i8", "c15", "j8", "e15", "k8"], {"l8"}),
    ],
)
def test_genmove_tactics_end_to_end(live: Live, moves: list[str], expected: set[str]) -> None:
    live.bring_up()
    with SearchClient(live.target) as client:
        r = client.genmove(moves, max_visits=100)
    assert r.name in expected and r.color == search_pb2.BLACK
    assert r.principal_variation_names[0] == r.name
    assert (r.model_name, r.model_version) == ("gomoku_policy", "1")


@pytest.mark.timeout(180)
def test_genmove_budget_end_to_end(live: Live) -> None:
    live.bring_up()
    with SearchClient(live.target) as client:
        r = client.genmove(["h8", "h9"], max_visits=300)
        assert r.total_visits == 300 and 0 < r.visits <= 300
        state = GomokuState.from_moves([7 * 15 + 7, 8 * 15 + 7])
        for p in r.principal_variation:  # a legal line
            state = state.play(p.y * 15 + p.x)
        start = time.monotonic()
        t = client.genmove(["h8", "h9"], max_time_ms=300)
        assert time.monotonic() - start < 2.0 and t.total_visits > 0
        # the request deadline bounds a search whose own budget is larger
        start = time.monotonic()
        d = client.genmove(["h8"], max_visits=100_000, timeout=1.0)
        assert time.monotonic() - start < 1.0 and 0 < d.total_visits < 100_000
