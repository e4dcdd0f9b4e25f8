"""A search client is back within a second of a restarted service listening, after an outage
long enough that gRPC's default reconnect backoff (1 s x 1.6 per attempt, up to 120 s) would
keep it away for several seconds more.

The bound is a property of the channel options (`services.grpc_options`: an attempt at least
every 0.6 s), not a speed target: with gRPC's defaults this test measures 2.5-9 s.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from services.grpc_options import RECONNECT_OPTIONS
from services.search.client import SearchClient
from services.search.server import build_service
from services.triton import client as triton_client
from tests.evaluators import UniformEvaluator

OUTAGE_S = 12.0  # default backoff: attempts at ~1, 2.6, 5.2, 9.3, 15.8 s -> ~4 s late
# the longest backoff with its jitter (0.6 s) plus a loaded machine's connect and call, far
# from the ~4 s that gRPC's default backoff leaves after such an outage
RECONNECT_BOUND_S = 2.0


@pytest.mark.integration  # a 12 s outage against gRPC's own reconnect timers
def test_client_reconnects_within_two_seconds_after_a_long_outage() -> None:
    service = build_service(UniformEvaluator()).start()
    port = service.port
    client = SearchClient(f"127.0.0.1:{port}", wait_for_ready=True)
    try:
        assert client.predict(["h8"], top_k=1).top_moves
        service.stop()

        done: dict[str, object] = {}

        def call_through_the_outage() -> None:
            try:  # waits for the connection (wait_for_ready), trying all along
                done["response"] = client.predict(["h8"], top_k=1, timeout=OUTAGE_S + 30)
            except grpc.RpcError as exc:
                done["error"] = exc
            done["at"] = time.monotonic()

        caller = threading.Thread(target=call_through_the_outage, daemon=True)
        caller.start()
        time.sleep(OUTAGE_S)
        assert caller.is_alive(), done  # it waited for the service rather than failing
        service = build_service(UniformEvaluator(), port=port).start()
        ready_at = time.monotonic()
        caller.join(OUTAGE_S + 30)
        assert "response" in done, done
        delay = float(done["at"]) - ready_at  # type: ignore[arg-type]
        assert delay < RECONNECT_BOUND_S, f"back {delay:.2f} s after the service was ready"
    finally:
        client.close()
        service.stop()


def test_both_clients_use_the_same_reconnect_options() -> None:
    """The search client and the Triton client take their reconnect settings from one place."""
    assert set(RECONNECT_OPTIONS) <= set(triton_client._CHANNEL_ARGS)
    names = dict(RECONNECT_OPTIONS)
    assert names["grpc.max_reconnect_backoff_ms"] * 1.2 < RECONNECT_BOUND_S * 1000
