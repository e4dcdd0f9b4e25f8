"""gRPC health tells the truth, against a real Triton (skipped without a ``tritonserver``).

Health used to be SERVING with Triton dead, with a wrong `--model`, and with no model loaded.
Now (services/search/readiness.py): "" stays SERVING while the process runs (liveness), while
"movepred.v1.SearchService" and one name per game ("movepred.v1.SearchService/gomoku", ".../go")
are NOT_SERVING while Triton is unreachable or the game's model is not loaded, and SERVING
again within about a second of Triton or the model coming back. The first poll is the start-up
check: it logs each missing model, why, and what to run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.repository.publish import publish
from services.search.readiness import REMEDY, game_service_name
from services.search.server import SERVICE_NAME, Service, build_service
from services.triton.client import PolicyClient
from services.triton.launcher import TritonServer
from services.triton.ports import free_port
from tests.triton_fixtures import (
    MODEL_NAME,
    build_tiny_policy,
    make_repository,
    require_tritonserver,
)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
GOMOKU = game_service_name("gomoku")
GO = game_service_name("go")
# health must be SERVING again this soon after Triton / the model is back: ten of the watcher's
# 0.2 s polls, so a loaded machine's lag is not read as a missed recovery (without the watcher
# health never came back; with gRPC's default backoff, seconds late)
RECOVERY_S = 2.0


def status(service: Service, name: str) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status


def wait_for(service: Service, name: str, want: int, within_s: float = 30.0) -> float:
    """Seconds until `name` reports `want` (polled every 10 ms on one channel)."""
    start = time.monotonic()
    with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            got = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status
            if got == want:
                return time.monotonic() - start
            assert time.monotonic() - start < within_s, f"{name}: still {got} after {within_s} s"
            time.sleep(0.01)


@dataclass
class Stack:
    triton: TritonServer  # not started until the first test starts it
    url: str
    service: Service  # Gomoku only, built while Triton is down
    clients: list[PolicyClient]
    startup_log: list[logging.LogRecord]

    def up(self) -> None:
        """Triton running (each test can run alone)."""
        if not self.triton.is_running():
            self.triton.start()

    def build(self, model: str = MODEL_NAME, go_model: str | None = None) -> Service:
        client = PolicyClient(self.url, model_name=model, timeout_s=5.0)
        go = PolicyClient(self.url, model_name=go_model, game="go") if go_model else None
        self.clients += [c for c in (client, go) if c is not None]
        return build_service(client, port=0, go_evaluator=go).start()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_tritonserver()
    root: Path = tmp_path_factory.mktemp("health")
    repository = make_repository(root)
    publish(build_tiny_policy(root / "tiny.pt"), repository, MODEL_NAME)
    port = free_port()
    triton = TritonServer(repository, models=(MODEL_NAME,), grpc_port=port,
                          log_path=root / "tritonserver.log", startup_timeout_s=120)
    url = f"127.0.0.1:{port}"
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(logging.INFO)
    log = logging.getLogger("services.search.readiness")
    log.addHandler(keep)
    old_level = log.level
    log.setLevel(logging.INFO)
    client = PolicyClient(url, timeout_s=5.0)
    service = build_service(client, port=0).start()
    s = Stack(triton, url, service, [client], records)
    try:
        yield s
    finally:
        log.removeHandler(keep)
        log.setLevel(old_level)
        service.stop()
        for c in s.clients:
            c.close()
        triton.stop()


def messages(records: list[logging.LogRecord], text: str) -> list[str]:
    return [r.getMessage() for r in records if text in r.getMessage()]


@pytest.mark.timeout(300)
def test_not_serving_while_triton_is_down_then_serving_once_it_is_up(stack: Stack) -> None:
    service = stack.service
    wait_for(service, GOMOKU, NOT_SERVING, within_s=5)
    assert status(service, "") == SERVING  # the process is alive: liveness
    assert status(service, SERVICE_NAME) == NOT_SERVING
    # the start-up check said which model is missing, why, and what to run
    deadline = time.monotonic() + 10
    while not messages(stack.startup_log, "start-up check") and time.monotonic() < deadline:
        time.sleep(0.05)
    (line,) = messages(stack.startup_log, "start-up check: gomoku")
    assert f"model {MODEL_NAME} on Triton at {stack.url} is not ready" in line
    assert "unreachable" in line and REMEDY in line

    stack.triton.start()  # returns once Triton is ready
    took = wait_for(service, GOMOKU, SERVING)
    assert status(service, SERVICE_NAME) == SERVING and status(service, "") == SERVING
    logging.getLogger(__name__).warning("health SERVING %.3f s after Triton came up", took)
    assert took < RECOVERY_S + 1.0  # the channel's reconnect backoff is up to 1 s on its own
    assert messages(stack.startup_log, "is ready again; health of " + GOMOKU)


@pytest.mark.timeout(300)
def test_wrong_model_names_are_not_serving_and_reported(stack: Stack) -> None:
    stack.up()
    wait_for(stack.service, GOMOKU, SERVING)
    typo = stack.build(model="gomoku_polcy")
    half = stack.build(go_model="go_policy")  # Gomoku fine, no Go model on this Triton
    try:
        deadline = time.monotonic() + 10
        while len(messages(stack.startup_log, "start-up check")) < 4:
            assert time.monotonic() < deadline, messages(stack.startup_log, "")
            time.sleep(0.05)
        assert status(typo, GOMOKU) == NOT_SERVING and status(typo, SERVICE_NAME) == NOT_SERVING
        assert messages(stack.startup_log, "has no model 'gomoku_polcy' in its repository")
        wait_for(half, GOMOKU, SERVING, within_s=10)
        assert status(half, GO) == NOT_SERVING
        assert status(half, SERVICE_NAME) == NOT_SERVING  # every configured game must be ready
        assert messages(stack.startup_log, "has no model 'go_policy' in its repository")
        with grpc.insecure_channel(f"127.0.0.1:{stack.service.port}") as channel, \
                pytest.raises(grpc.RpcError) as info:  # Go is not configured there at all
            health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=GO), timeout=5)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        typo.stop()
        half.stop()


@pytest.mark.timeout(300)
def test_unloaded_model_is_not_serving_and_serving_again_once_loaded(stack: Stack) -> None:
    stack.up()
    service = stack.service
    wait_for(service, GOMOKU, SERVING)
    with PolicyClient(stack.url, timeout_s=60) as admin:
        admin.unload_model(MODEL_NAME)
        wait_for(service, GOMOKU, NOT_SERVING, within_s=10)
        assert status(service, SERVICE_NAME) == NOT_SERVING and status(service, "") == SERVING
        assert messages(stack.startup_log, "is no longer ready")
        admin.load_model(MODEL_NAME)  # returns once the version is READY
        took = wait_for(service, GOMOKU, SERVING)
    logging.getLogger(__name__).warning("health SERVING %.3f s after the model loaded", took)
    assert took < RECOVERY_S
    assert status(service, SERVICE_NAME) == SERVING


@pytest.mark.timeout(400)
def test_triton_restart(stack: Stack) -> None:
    stack.up()
    service = stack.service
    wait_for(service, GOMOKU, SERVING)
    stack.triton.stop()
    wait_for(service, GOMOKU, NOT_SERVING, within_s=10)
    assert status(service, "") == SERVING and status(service, SERVICE_NAME) == NOT_SERVING
    stack.triton.start()
    took = wait_for(service, GOMOKU, SERVING)
    logging.getLogger(__name__).warning("health SERVING %.3f s after Triton restarted", took)
    assert took < RECOVERY_S + 1.0  # as above: the reconnect backoff
    assert status(service, SERVICE_NAME) == SERVING


def test_stopping_service_turns_every_name_not_serving(stack: Stack) -> None:
    service = stack.build()
    names = ("", SERVICE_NAME, GOMOKU)
    before = {n: status(service, n) for n in names}
    service.watcher.stop()  # what Service.stop does first, before draining the calls
    after = {n: status(service, n) for n in names}
    service.stop()
    assert before[""] == SERVING
    assert all(v == NOT_SERVING for v in after.values()), after
