"""The search service over real gRPC with a real PolicyClient; no mocks.

First part (always runs): the server runs in-process on a free loopback port and its
PolicyClient points at a loopback port nobody listens on. That covers what must work without
Triton: UNAVAILABLE within the request deadline, validation (INVALID_ARGUMENT naming the field,
before any inference), health and reflection.

Second part (skipped without a ``tritonserver`` binary): a real Triton serving the tiny
TorchScript policy of `tests.triton_fixtures` is started *after* the search service, which must
recover by itself; then Predict (one position and batches), GenMove (candidates, tree reuse,
renju, concurrent searches sharing Triton calls) and Analyze (streaming, cancellation, deadline)
are checked end to end, reading the service's Prometheus registry to see its Triton calls.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.request
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
from services.coords import index_name
from services.games.gomoku.rules import GomokuState, Rule
from services.search.client import SearchClient, position
from services.search.mcts import masked_softmax
from services.search.metrics import Metrics
from services.search.server import SERVICE_NAME, build_server, build_service
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


def _abort_code(call, request, timeout: float = 5.0) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        reply = call(request, timeout=timeout)
        if isinstance(request, search_pb2.AnalyzeRequest):
            list(reply)  # a stream fails when read
    return info.value.code(), info.value.details()


@pytest.mark.parametrize("method", ["Predict", "GenMove", "Analyze", "InferSequence"])
def test_bytes_that_are_not_the_message_are_invalid_argument(target: str, method: str) -> None:
    """Invalid UTF-8 in a string field failed in gRPC's deserializer: INTERNAL "Exception
    deserializing request!", neither logged nor counted as the caller's fault."""
    good = {"Predict": search_pb2.PredictRequest(position=_pos(game_name="ab")),
            "GenMove": search_pb2.GenMoveRequest(position=_pos(game_name="ab")),
            "Analyze": search_pb2.AnalyzeRequest(position=_pos(game_name="ab")),
            "InferSequence": search_pb2.InferSequenceRequest(neighbour="ab")}[method]
    raw = good.SerializeToString().replace(b"ab", b"\xff\xfe")
    with grpc.insecure_channel(target) as channel:
        path = f"/{SERVICE_NAME}/{method}"
        call = (channel.unary_stream(path) if method == "Analyze" else channel.unary_unary(path))
        with pytest.raises(grpc.RpcError) as info:
            reply = call(raw, timeout=10)
            if method == "Analyze":
                list(reply)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert info.value.details().startswith(f"request: not a valid {method} request: "), \
        info.value.details()
    # a well-formed request still goes through the same methods (UNAVAILABLE: Triton is down)
    with grpc.insecure_channel(target) as channel:
        assert _abort_code(getattr(search_pb2_grpc.SearchServiceStub(channel), method),
                           type(good)(position=_pos("h8")) if method != "InferSequence"
                           else search_pb2.InferSequenceRequest(black=[_point("h8")]),
                           timeout=10)[0] == grpc.StatusCode.UNAVAILABLE


def test_search_trees_are_admitted_by_the_memory_they_may_take() -> None:
    """A 20-byte GenMove of 100,000 visits (or one bounded by time alone, with no visit cap
    at all) could build a gigabyte of tree, and the searches allowed at once several: now each
    reserves its tree's bound, and one that does not fit is RESOURCE_EXHAUSTED at once."""
    from services.api import errors
    from services.search.servicer import VISIT_BYTES_PER_POINT
    from tests.evaluators import HungEvaluator, UniformEvaluator

    per_visit = VISIT_BYTES_PER_POINT * 225
    # room for one 100,000-visit Gomoku tree, not two
    mb = -(-100_000 * per_visit // (1 << 20))
    hung = HungEvaluator()
    service = build_service(hung, port=0, search_memory_mb=mb).start()
    target = f"127.0.0.1:{service.port}"
    try:
        with grpc.insecure_channel(target) as channel, SearchClient(target) as client:
            # bounded by time alone: it reserves 100,000 visits' tree, and waits on hung Triton
            held = search_pb2_grpc.SearchServiceStub(channel).GenMove.future(
                search_pb2.GenMoveRequest(position=_pos("h8"), max_time_ms=60_000), timeout=120)
            waited = time.monotonic()
            while service.servicer.search_memory.reserved == 0:
                assert time.monotonic() - waited < 60, "the search never started"
                time.sleep(0.01)
            assert service.servicer.search_memory.reserved == 100_000 * per_visit
            with pytest.raises(grpc.RpcError) as info:
                client.genmove(["h8", "h9"], max_visits=100_000, timeout=30)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "--search-memory-mb" in info.value.details()
            assert errors.error_reason(info.value) == errors.SEARCH_MEMORY_BUSY
            with pytest.raises(grpc.RpcError) as info:
                list(client.analyze(["h8", "h9"], max_visits=50_000, timeout=30))
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            held.cancel()  # the client gives up; Triton answers: the search ends
            hung.release.set()
            waited = time.monotonic()
            while service.servicer.search_memory.reserved and time.monotonic() - waited < 60:
                time.sleep(0.01)
            assert service.servicer.search_memory.reserved == 0  # released when it ended
    finally:
        hung.release.set()
        service.stop()
    # what fits runs: small searches side by side, and a time-bounded one stops at its cap
    service = build_service(UniformEvaluator(), port=0, search_memory_mb=mb).start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            assert client.genmove(["h8"], max_visits=300, timeout=30).total_visits >= 300
    finally:
        service.stop()


def test_a_hung_triton_frees_each_callers_thread_at_its_deadline() -> None:
    """Behind a hung Triton call the batcher's callers waited with no limit: a GenMove kept its
    thread, search slot and memory reservation after its client had given up. Now each call
    ends DEADLINE_EXCEEDED at its deadline, with what it holds released, Triton still hung."""
    from tests.evaluators import HungEvaluator

    hung = HungEvaluator()
    service = build_service(hung, port=0).start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            for ask in (lambda: client.genmove(["h8"], max_visits=50, timeout=2.0),
                        lambda: client.predict(["h8"], timeout=2.0)):
                with pytest.raises(grpc.RpcError) as info:
                    ask()
                assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, \
                    info.value.details()
            def holding() -> bool:
                return bool(service.servicer.search_memory.reserved
                            or service.metrics.value("movepred_searches_active"))

            waited = time.monotonic()
            while holding() and time.monotonic() - waited < 30:
                time.sleep(0.01)
            assert not holding()  # the search ended by itself: its memory and slot are free
            assert not hung.release.is_set()
    finally:
        hung.release.set()
        service.stop()


REQUESTS = {
    "Predict": search_pb2.PredictRequest,
    "GenMove": search_pb2.GenMoveRequest,
    "Analyze": search_pb2.AnalyzeRequest,
}


@pytest.mark.parametrize("method", ["Predict", "GenMove", "Analyze"])
def test_unavailable_within_deadline_and_again(stub, method: str) -> None:
    request = (
        search_pb2.PredictRequest(position=_pos("h8", "h9"))
        if method == "Predict"
        else REQUESTS[method](position=_pos("h8", "h9"), max_visits=50)
    )
    for _ in range(2):  # a failure leaves nothing broken behind: the next call tries afresh
        # UNAVAILABLE, not DEADLINE_EXCEEDED: the error came before the call's deadline
        code, details = _abort_code(getattr(stub, method), request, timeout=5.0)
        assert code == grpc.StatusCode.UNAVAILABLE, details
        assert "Triton is unreachable" in details


WIN_LINE = ["h8", "a1", "i8", "a2", "j8", "a3", "k8", "a4", "l8"]  # black makes five
# Black to move; i8 is a double-three for black (g8 h8 + i9 i10), forbidden under renju.
RENJU_DOUBLE_THREE = ["g8", "a1", "h8", "c1", "i9", "e1", "i10", "a15"]

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
    # this server has no Go model (Go itself: tests/test_go_service.py)
    ("Predict", dict(position=_pos(game=search_pb2.GAME_GO)), "position.game: GO is not served by"),
    ("Predict", dict(position=_pos(game=7)), "position.game: unknown game 7"),
    ("GenMove", dict(position=_pos("h8"), max_visits=-1), "max_visits: must be >= 0"),
    ("GenMove", dict(position=_pos("h8"), max_time_ms=-5), "max_time_ms: must be >= 0"),
    ("Predict", dict(position=_pos("h8"), top_k=-1), "top_k: must be in 0..225"),
    ("Predict", dict(position=_pos("h8"), top_k=226), "top_k: must be in 0..225"),
    ("GenMove", dict(position=_pos(*WIN_LINE)), "position: the game is over (black made five)"),
    ("Predict", dict(position=_pos(*WIN_LINE, "b1")), "position.moves[9]: the game ended"),
    (
        "Predict",
        dict(position=search_pb2.Position(setup_black=[_point("h8")], setup_white=[_point("h8")])),
        "position.setup_white[0]: h8 is occupied",
    ),
    (
        "Predict",
        dict(position=_pos("h8"), positions=[_pos("h8")]),
        "position: give either position or positions, not both",
    ),
    (
        "Predict",
        dict(positions=[_pos("h8"), _pos("h8", "h8")]),
        "positions[1].moves[1]: h8 is occupied",
    ),
    ("Predict", dict(positions=[_pos(), _pos(*WIN_LINE)]), "positions[1]: the game is over"),
    ("GenMove", dict(position=_pos("h8"), max_candidates=226), "max_candidates: must be in 0..225"),
    (
        "GenMove",
        dict(position=_pos(*RENJU_DOUBLE_THREE, "i8", rule=search_pb2.RULE_RENJU)),
        "position.moves[8]: move i8 is forbidden for black (double-three)",
    ),
    ("Analyze", dict(position=_pos("h8"), report_every_visits=-1), "report_every_visits: must"),
    ("Analyze", dict(position=_pos("h8"), max_visits=-1), "max_visits: must be >= 0"),
    ("Analyze", dict(position=_pos(*WIN_LINE)), "position: the game is over (black made five)"),
]


@pytest.mark.parametrize(("method", "fields", "message"), INVALID)
def test_invalid_request_names_the_field(stub, method: str, fields: dict, message: str) -> None:
    from services.api import errors

    with pytest.raises(grpc.RpcError) as info:
        reply = getattr(stub, method)(REQUESTS[method](**fields), timeout=5)
        if method == "Analyze":
            list(reply)
    code, details = info.value.code(), info.value.details()
    # INVALID_ARGUMENT, not UNAVAILABLE: validation runs before Triton is called
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert details.startswith(message), details
    # the same, structured: the field (the message's prefix) in a BadRequest
    (violation,) = errors.field_violations(info.value)
    assert f"{violation.field}: {violation.description}" == details
    assert violation.reason == errors.INVALID


ALL_POINTS = [(x, y) for y in range(15) for x in range(15)]
TOO_LARGE = [
    ("GenMove", dict(position=_pos("h8"), max_visits=100_001), "max_visits: must be at most"),
    ("GenMove", dict(position=_pos("h8"), max_time_ms=60_001), "max_time_ms: must be at most"),
    ("Analyze", dict(position=_pos("h8"), max_visits=100_001), "max_visits: must be at most"),
    ("Analyze", dict(position=_pos("h8"), max_time_ms=60_001), "max_time_ms: must be at most"),
    ("Predict", dict(positions=[_pos("h8")] * 257), "positions: at most 256 per request, got 257"),
    ("GenMove", dict(position=_pos(*ALL_POINTS, (0, 0))), "position.moves: at most 225 points"),
    (
        "Predict",
        dict(positions=[_pos(), search_pb2.Position(setup_black=[_point("a1")] * 226)]),
        "positions[1].setup_black: at most 225 points",
    ),
]


def _no_five_moves(n: int, seed: int) -> list[tuple[int, int]]:
    """`n` distinct points, alternately black and white, whose board has no five in a row."""
    from services.games.gomoku.rules import has_five

    rng = np.random.default_rng(seed)
    while True:
        points = [ALL_POINTS[i] for i in rng.permutation(len(ALL_POINTS))[:n]]
        board = np.zeros((15, 15), np.int8)
        for i, (x, y) in enumerate(points):
            board[y, x] = 1 + i % 2
        if not has_five(board):
            return points


_MOVES_64 = [_pos(*_no_five_moves(64, seed)) for seed in range(4)]
_GO_700 = search_pb2.Position(game=search_pb2.GAME_GO, moves=[search_pb2.Point(x=3, y=3)] * 700)
# replay work over the per-request limit (16,384 moves, a renju move counting 3), refused before
# any move is replayed (the renju and Go moves are not even legal: INVALID_ARGUMENT once replayed)
TOO_LARGE += [
    ("Predict", dict(positions=[*(_MOVES_64 * 64)[:255], _pos(*_no_five_moves(65, 9))]),
     "positions: the request replays 16385 moves (moves and set-up stones of all positions; "
     "a renju move counts 3), at most 16384 per request"),
    ("Predict", dict(positions=[_pos(*ALL_POINTS[:60], rule=search_pb2.RULE_RENJU)] * 92),
     "positions: the request replays 16560 moves"),
    ("Predict", dict(positions=[_GO_700] * 24), "positions: the request replays 16800 moves"),
]


def test_replay_work_up_to_the_limit_is_validated(stub) -> None:
    """256 positions of 64 moves (16,384 moves, just within the limit) are replayed: the
    request passes validation and meets the dead Triton (UNAVAILABLE)."""
    request = search_pb2.PredictRequest(positions=(_MOVES_64 * 64)[:256])
    code, details = _abort_code(stub.Predict, request, timeout=20)
    assert code == grpc.StatusCode.UNAVAILABLE, details


@pytest.mark.parametrize(("method", "fields", "message"), TOO_LARGE)
def test_over_the_limits_is_invalid_argument(stub, method: str, fields: dict, message: str):
    """A fixed limit is no busy server: the same request never passes (not RESOURCE_EXHAUSTED,
    which says retry later); the BadRequest details name the field, reason OVER_LIMIT."""
    from services.api import errors

    with pytest.raises(grpc.RpcError) as info:
        reply = getattr(stub, method)(REQUESTS[method](**fields), timeout=5)
        if method == "Analyze":
            list(reply)
    code, details = info.value.code(), info.value.details()
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert details.startswith(message), details
    (violation,) = errors.field_violations(info.value)
    assert (violation.field, violation.reason) == (message.split(":")[0], errors.OVER_LIMIT)


def test_a_message_over_the_size_limit_is_refused(stub) -> None:
    # ~1.3 MB: over the server's 1 MiB max_receive_message_length, refused by gRPC itself
    big = search_pb2.Position(setup_black=[search_pb2.Point(x=14, y=14)] * 200_000)
    assert big.ByteSize() > 1 << 20
    code, details = _abort_code(stub.Predict, search_pb2.PredictRequest(position=big))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    # a full 256-position batch of 225-move records is well within it: it reaches validation,
    # whose replay limit refuses it before replaying anything
    full = search_pb2.PredictRequest(positions=[_pos(*ALL_POINTS)] * 256)
    assert full.ByteSize() < 1 << 20
    code, details = _abort_code(stub.Predict, full)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("positions: the request replays 57600 moves"), details


def test_metrics_endpoint_counts_requests_by_code(stub) -> None:
    from services.triton.ports import free_port

    policy = PolicyClient(f"127.0.0.1:{closed_port()}", timeout_s=2.0)
    service = build_service(policy, port=0, metrics_port=free_port()).start()
    try:
        assert service.metrics_server is not None
        assert service.metrics_server.httpd.server_address[0] == "127.0.0.1"  # loopback
        with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            own = search_pb2_grpc.SearchServiceStub(channel)
            for request in (
                search_pb2.PredictRequest(position=_pos("h8", "h8")),
                search_pb2.PredictRequest(position=_pos("h8")),
                search_pb2.PredictRequest(positions=[_pos()] * 300),
            ):
                with pytest.raises(grpc.RpcError):
                    own.Predict(request, timeout=5)
        with urllib.request.urlopen(service.metrics_server.url, timeout=5) as reply:
            text = reply.read().decode()
    finally:
        service.stop()
        policy.close()
    from prometheus_client.parser import text_string_to_metric_families

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def sample(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    # an occupied point and 300 positions (over the fixed limit of 256) are both the caller's
    # mistake, INVALID_ARGUMENT; a busy server (RESOURCE_EXHAUSTED) is not among them
    expected = {"INVALID_ARGUMENT": 2, "UNAVAILABLE": 1, "RESOURCE_EXHAUSTED": 0}
    for code, count in expected.items():
        assert sample("movepred_requests_total", rpc="Predict", code=code) == count, code
    assert sample("movepred_request_duration_seconds_count", rpc="Predict") == 3
    assert sample("movepred_triton_errors_total", kind="unavailable") == 1
    assert sample("movepred_triton_batch_boards_count") == 1  # the one call that got that far


def test_metrics_are_off_by_default() -> None:
    service = build_service(PolicyClient(f"127.0.0.1:{closed_port()}"), port=0)
    try:
        assert service.metrics_server is None and isinstance(service.metrics, Metrics)
    finally:
        service.stop()


def test_health_tells_the_truth_without_triton(target: str) -> None:
    """The process is alive (""), but nothing can be answered: Triton is unreachable."""
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)

        def status(service: str) -> int:
            return health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status

        time.sleep(0.5)  # a few polls of the watcher
        assert status("") == health_pb2.HealthCheckResponse.SERVING
        assert status(SERVICE_NAME) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert status(f"{SERVICE_NAME}/gomoku") == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.RpcError) as info:  # Go is not served by this server
            status(f"{SERVICE_NAME}/go")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


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


def test_cli_says_to_start_the_service_when_it_is_down(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    from services.triton.ports import free_port

    target = f"127.0.0.1:{free_port()}"  # nothing listens there
    assert cli.main(["predict", "--target", target, "--timeout", "2", "h8"]) == cli.EXIT_RPC_ERROR
    printed = capsys.readouterr()
    error = [line for line in printed.err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "UNAVAILABLE" in error[0] and "make serve" in error[0], error
    assert "error" not in printed.out  # errors go to stderr only


def test_cli_reports_errors(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["predict", "--target", target, "h8", "h9"]) == cli.EXIT_RPC_ERROR
    printed = capsys.readouterr()
    assert " 8 " in printed.out and "UNAVAILABLE" in printed.err  # the board, then the error
    error = [line for line in printed.err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "make triton" in error[0], printed  # one line: what to run
    # past the service's limit (the command line only keeps numbers within the API's int32)
    assert cli.main(["genmove", "--target", target, "--visits", "100001", "h8"]) == \
        cli.EXIT_RPC_ERROR
    assert "max_visits" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:  # a negative count never leaves the command line
        cli.main(["genmove", "--target", target, "--visits", "-3", "h8"])
    assert usage.value.code == cli.EXIT_USAGE
    assert cli.main(["genmove", "--target", target, "z99"]) == cli.EXIT_USAGE


# --------------------------------------------------------------------------- with real Triton


@dataclass
class Live:
    """A search service whose Triton starts late (on a port fixed in advance)."""

    target: str
    triton: object  # services.triton.launcher.TritonServer, not started until `bring_up`
    model_path: Path
    metrics: Metrics
    outage_codes: list[grpc.StatusCode] = field(default_factory=list)
    recovery_s: float | None = None
    repository: Path | None = None  # Triton's model repository, to publish into

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
    from services.repository.publish import publish
    from services.triton.launcher import TritonServer
    from services.triton.ports import free_port
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
    service = build_service(policy, port=0).start()
    try:
        yield Live(f"127.0.0.1:{service.port}", triton, model_path, service.metrics,
                   repository=repository)
    finally:
        service.stop()
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
    assert r.to_move == search_pb2.COLOR_BLACK
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
    assert r.name in expected and r.color == search_pb2.COLOR_BLACK
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
        # a time budget alone is a valid request, which the search ends by itself (that it
        # stops at the budget is tests/test_mcts.py's, on a fake clock)
        t = client.genmove(["h8", "h9"], max_time_ms=300)
        assert t.total_visits > 0
        # the request deadline bounds a search whose own budget is larger: an answer (within
        # the deadline, or gRPC would have failed the call) with fewer visits than asked for
        d = client.genmove(["h8"], max_visits=100_000, timeout=1.0)
        assert 0 < d.total_visits < 100_000


# --------------------------------------------------------------------------- batches, reuse,
# renju, concurrency, Analyze: all on the real Triton of `live`


def _boards_calls(live: Live) -> tuple[float, float]:
    """(Triton infer calls, boards sent) so far, from the service's own metrics."""
    m = live.metrics
    calls = m.value("movepred_triton_batch_boards_count")
    return calls, m.value("movepred_triton_batch_boards_sum")


def _wait_for(predicate, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


@pytest.mark.timeout(180)
def test_predict_batch_is_one_triton_call(live: Live) -> None:
    from tests.triton_fixtures import run_local

    live.bring_up()
    games = [
        (["h8"], search_pb2.RULE_FREESTYLE),
        (["h8", "h9", "i8", "g7"], search_pb2.RULE_FREESTYLE),
        ([], search_pb2.RULE_FREESTYLE),
        (RENJU_DOUBLE_THREE, search_pb2.RULE_RENJU),
        (["a1", "b2", "c3"], search_pb2.RULE_STANDARD),
    ]
    request = search_pb2.PredictRequest(
        positions=[_pos(*moves, rule=rule) for moves, rule in games], top_k=3
    )
    calls, boards = _boards_calls(live)
    with grpc.insecure_channel(live.target) as channel:
        r = search_pb2_grpc.SearchServiceStub(channel).Predict(request, timeout=10)
    assert _boards_calls(live) == (calls + 1, boards + len(games))  # ONE call, all positions
    assert len(r.results) == len(games) and not r.policy and not r.top_moves
    assert not r.HasField("value")  # v1 is policy-only (and `positions` leave it unset)
    assert (r.model_name, r.model_version) == ("gomoku_policy", "1")
    rules = {search_pb2.RULE_FREESTYLE: Rule.FREESTYLE, search_pb2.RULE_RENJU: Rule.RENJU,
             search_pb2.RULE_STANDARD: Rule.STANDARD}
    states = [
        GomokuState.from_moves([p.y * 15 + p.x for p in position(m).moves], rule=rules[rule])
        for m, rule in games
    ]
    logits = run_local(live.model_path, np.stack([s.board for s in states]).astype(np.int8))
    for state, row, result in zip(states, logits, r.results, strict=True):
        expected = masked_softmax(row, state.legal_mask())
        np.testing.assert_allclose(np.array(result.policy), expected, rtol=1e-4, atol=1e-6)
        assert len(result.top_moves) == 3 and not result.HasField("value")
        assert result.to_move == (search_pb2.COLOR_BLACK if len(state.moves) % 2 == 0 else
                                  search_pb2.COLOR_WHITE)
    renju = np.array(r.results[3].policy)
    assert renju[7 * 15 + 8] == 0.0  # i8: forbidden for black, so never predicted
    with SearchClient(live.target) as client:
        one = client.predict(["h8"], top_k=3)
        assert list(one.results[0].policy) == list(one.policy)
        assert list(one.results[0].top_moves) == list(one.top_moves)
        many = client.predict_many([["h8"], ["h8", "h9"]], top_k=2)
        assert [len(x.top_moves) for x in many.results] == [2, 2]


@pytest.mark.timeout(180)
def test_genmove_reports_candidates(live: Live) -> None:
    live.bring_up()
    with SearchClient(live.target) as client:
        r = client.genmove(["e5", "k11", "f5"], max_visits=200, max_candidates=4)
        default = client.genmove(["e5", "k11"], max_visits=20)
    assert len(r.candidates) == 4 and r.candidates[0].name == r.name
    visits = [c.visits for c in r.candidates]
    assert visits == sorted(visits, reverse=True) and visits[0] == r.visits
    for c in r.candidates:
        assert c.principal_variation_names[0] == c.name
        assert len(c.principal_variation) == len(c.principal_variation_names)
        assert 0.0 < c.prior <= 1.0 and -1.0 <= c.value <= 1.0
    assert list(r.candidates[0].principal_variation_names) == list(r.principal_variation_names)
    assert len(default.candidates) == 5


@pytest.mark.timeout(180)
def test_genmove_reuses_the_tree_of_the_previous_move(live: Live) -> None:
    live.bring_up()
    # white must block l8: every simulation goes through that one move, so after it the
    # tree below holds nearly all of the first search's visits
    moves = ["h8", "g8", "i8", "a1", "j8", "a2", "k8"]
    hits = live.metrics.value("movepred_tree_reuse_total", result="hit")
    reused = live.metrics.value("movepred_tree_reused_visits_total")
    with SearchClient(live.target) as client:
        r1 = client.genmove(moves, max_visits=200)
        assert r1.name == "l8" and r1.reused_visits == 0 and r1.total_visits == 200
        r2 = client.genmove([*moves, "l8"], max_visits=300)  # black's turn, one move later
        assert r2.reused_visits == 199 and r2.total_visits == 300  # reused visits count
        assert live.metrics.value("movepred_tree_reuse_total", result="hit") == hits + 1
        assert live.metrics.value("movepred_tree_reused_visits_total") == reused + 199
        pv = list(r2.principal_variation_names)
        assert len(pv) >= 2
        r3 = client.genmove([*moves, "l8", *pv[:2]], max_visits=50)  # two moves later
        assert live.metrics.value("movepred_tree_reuse_total", result="hit") == hits + 2
        assert r3.total_visits == max(50, r3.reused_visits)
        r4 = client.genmove([*moves, "l8"], max_visits=100, reuse_tree=False)
        assert r4.reused_visits == 0 and r4.total_visits == 100


@pytest.mark.timeout(180)
def test_genmove_renju_plays_legal_moves_only(live: Live) -> None:
    live.bring_up()
    with SearchClient(live.target) as client:
        r = client.genmove(RENJU_DOUBLE_THREE, rule="renju", max_visits=150, max_candidates=225)
    assert r.color == search_pb2.COLOR_BLACK and r.name != "i8"
    names = {c.name for c in r.candidates}
    assert len(names) == 225 - 8 - 1 and "i8" not in names  # every legal point, no forbidden one
    for c in r.candidates:
        assert "i8" not in c.principal_variation_names[::2]  # black's moves along each line


@pytest.mark.timeout(180)
def test_concurrent_genmoves_share_triton_calls(live: Live) -> None:
    live.bring_up()
    m = live.metrics
    count0 = m.value("movepred_triton_batch_boards_count")
    small0 = m.value("movepred_triton_batch_boards_bucket", le="16.0")
    requests0 = m.value("movepred_triton_batch_requests_sum")
    openings = [["a1"], ["o15"], ["a15"], ["o1"], ["h8", "c3"], ["h8", "m13"], ["c13"], ["m3"]]

    def one(moves: list[str]) -> search_pb2.GenMoveResponse:
        with SearchClient(live.target) as client:
            return client.genmove(moves, max_visits=160, reuse_tree=False, timeout=60)

    threads_out: list = [None] * len(openings)

    def run(i: int) -> None:
        threads_out[i] = one(openings[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(openings))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert all(r is not None and r.total_visits == 160 for r in threads_out)
    calls = m.value("movepred_triton_batch_boards_count") - count0
    merged = calls - (m.value("movepred_triton_batch_boards_bucket", le="16.0") - small0)
    requests = m.value("movepred_triton_batch_requests_sum") - requests0
    # a search sends at most 16 leaves at a time: a call with more carried several searches
    assert merged > 0 and requests > calls


@pytest.mark.timeout(180)
def test_analyze_streams_reports_until_the_budget(live: Live) -> None:
    live.bring_up()
    with SearchClient(live.target) as client:
        reports = list(
            client.analyze(["h8", "j9"], max_visits=256, report_every_visits=64,
                           max_candidates=3, reuse_tree=False)
        )
    totals = [r.total_visits for r in reports]
    assert [r.final for r in reports] == [False] * (len(reports) - 1) + [True]
    assert totals == sorted(totals) and totals[-1] == 256 and len(reports) >= 4
    for k, total in enumerate(totals[:-1], 1):
        assert total >= 64 * k  # one report per 64 visits (at the end of a batch)
    for r in reports:
        assert 0 < len(r.candidates) <= 3 and r.to_move == search_pb2.COLOR_BLACK
        visits = [c.visits for c in r.candidates]
        assert visits == sorted(visits, reverse=True)
        assert r.model_version == "1"
    assert reports[-1].candidates[0].principal_variation_names[0] == reports[-1].candidates[0].name


@pytest.mark.timeout(180)
def test_cancelled_calls_stop_their_search(live: Live, caplog: pytest.LogCaptureFixture) -> None:
    live.bring_up()
    caplog.set_level(logging.WARNING)
    m = live.metrics
    cancelled = m.value("movepred_requests_total", rpc="Analyze", code="CANCELLED")
    playouts = m.value("movepred_search_playouts_total")
    with SearchClient(live.target) as client:
        call = client.analyze(["g7", "h9"], max_visits=100_000, report_every_visits=32,
                              reuse_tree=False, timeout=60)
        seen = []
        for report in call:
            seen.append(report.total_visits)
            if len(seen) == 2:
                call.cancel()
                break
        _wait_for(lambda: m.value("movepred_requests_total", rpc="Analyze", code="CANCELLED")
                  == cancelled + 1)
        calls = m.value("movepred_triton_batch_boards_count")
        time.sleep(0.5)
        assert m.value("movepred_triton_batch_boards_count") == calls  # no more Triton calls
        assert m.value("movepred_search_playouts_total") - playouts < 2000

        # a unary GenMove whose client gives up stops too
        genmoves = m.value("movepred_requests_total", rpc="GenMove", code="CANCELLED")
        request = search_pb2.GenMoveRequest(
            position=position(["f6", "j10"]), max_visits=100_000, disable_tree_reuse=True
        )
        started = m.value("movepred_triton_batch_boards_count")
        future = client._stub.GenMove.future(request, timeout=60)
        _wait_for(lambda: m.value("movepred_triton_batch_boards_count") > started + 5)
        future.cancel()
        _wait_for(lambda: m.value("movepred_requests_total", rpc="GenMove", code="CANCELLED")
                  == genmoves + 1)
        calls = m.value("movepred_triton_batch_boards_count")
        time.sleep(0.5)
        assert m.value("movepred_triton_batch_boards_count") == calls
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]  # a cancel is no server error


@pytest.mark.timeout(180)
def test_analyze_ends_before_the_deadline(live: Live) -> None:
    live.bring_up()
    with SearchClient(live.target) as client:
        # the stream ends with a final report: before its deadline, or reading it would fail
        reports = list(client.analyze(["h8", "h10"], max_visits=100_000,
                                      report_every_visits=50_000, reuse_tree=False, timeout=1.5))
    assert reports[-1].final and 0 < reports[-1].total_visits < 100_000


@pytest.mark.timeout(180)
def test_live_metrics_count_requests_and_latency(live: Live) -> None:
    live.bring_up()
    m = live.metrics
    ok = m.value("movepred_requests_total", rpc="Predict", code="OK")
    seconds = m.value("movepred_request_duration_seconds_count", rpc="Predict")
    with SearchClient(live.target) as client:
        client.predict(["h8"])
    assert m.value("movepred_requests_total", rpc="Predict", code="OK") == ok + 1
    assert m.value("movepred_request_duration_seconds_count", rpc="Predict") == seconds + 1
    assert m.value("movepred_triton_infer_duration_seconds_count") > 0


@pytest.mark.timeout(180)
def test_cli_analyze_and_predict_batch(live: Live, capsys: pytest.CaptureFixture[str]) -> None:
    live.bring_up()
    argv = ["analyze", "--target", live.target, "--visits", "64", "--every", "32", "--no-reuse"]
    assert cli.main([*argv, "h8", "h9"]) == 0
    out = capsys.readouterr().out
    assert "visits 32" in out and "final 64 (reused 0)" in out and "principal variation" in out
    argv = ["predict", "--target", live.target, "--top-k", "2", "h8", "-p", "h8 h9", "-p", ""]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "h8 h9: black to move" in out and "(empty board): black to move" in out
    assert "h8: white to move" in out


@pytest.mark.timeout(300)
def test_value_model_end_to_end(live: Live, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs last: publishes a network with a value head as the next gomoku_policy version.
    Predict then reports the value for the side to move (the local TorchScript's), per
    position of a batch too, and GenMove searches with it; v1 (policy-only) left it unset."""
    from services.repository.publish import publish
    from tests.triton_fixtures import MODEL_NAME, build_value_model, run_local_outputs

    live.bring_up()
    with SearchClient(live.target) as client:
        before = client.predict(["h8", "h9"])
        assert before.model_version == "1"
        assert not before.HasField("value") and not before.results[0].HasField("value")
    assert live.repository is not None
    model = build_value_model(live.repository.parent / "value-seed0.pt", seed=0)
    version = publish(model, live.repository, MODEL_NAME)
    with PolicyClient(live.triton.grpc_url, timeout_s=30.0) as admin:
        admin.load_model()
    games = [["h8", "h9", "i8", "g7"], [], ["a1"]]
    states = [GomokuState.from_moves([p.y * 15 + p.x for p in position(m).moves]) for m in games]
    logits, values = run_local_outputs(model, np.stack([st.board for st in states]))
    assert values is not None
    with SearchClient(live.target) as client:
        one = client.predict(games[0], top_k=3)
        assert one.model_version == str(version)
        assert one.HasField("value") and one.results[0].HasField("value")
        assert -1.0 <= one.value <= 1.0
        assert one.value == pytest.approx(float(values[0]), abs=1e-5)
        assert one.results[0].value == one.value
        np.testing.assert_allclose(np.array(one.policy),
                                   masked_softmax(logits[0], states[0].legal_mask()),
                                   rtol=1e-4, atol=1e-6)
        many = client.predict_many(games, top_k=2)
        assert not many.HasField("value")  # set for `position` only
        for result, want in zip(many.results, values, strict=True):
            assert result.HasField("value") and -1.0 <= result.value <= 1.0
            assert result.value == pytest.approx(float(want), abs=1e-5)
        r = client.genmove(games[0], max_visits=64, reuse_tree=False)
        assert r.model_version == str(version) and r.total_visits == 64
        # every leaf is worth the network's value now, so the root's mean value moves off 0
        assert r.value != 0.0 and -1.0 <= r.value <= 1.0
        assert all(-1.0 <= c.value <= 1.0 for c in r.candidates)
    assert cli.main(["predict", "--target", live.target, "h8", "h9", "i8", "g7"]) == 0
    assert f"value {float(values[0]):+.3f} for black" in capsys.readouterr().out
