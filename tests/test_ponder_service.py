"""Pondering through the search service: GenMove's `ponder`, the next move continuing the
pondered tree, and a ponder giving way to every real request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import numpy as np

from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.search.server import build_service
from tests.evaluators import Output


class SteepEvaluator:
    """Logits that fall steeply with the point's index, so visits go deep into one line and
    the pondered tree holds many visits under the likely reply (any board size)."""

    def infer(self, boards: np.ndarray) -> Output:
        n, size = boards.shape[0], boards.shape[-1]
        ramp = -1.0 * np.arange(size * size, dtype=np.float32)
        return Output(np.tile(ramp, (n, 1)))


def _point(move: int) -> search_pb2.Point:
    return search_pb2.Point(x=move % 15, y=move // 15)


def _genmove(stub, moves: list[int], **fields) -> search_pb2.GenMoveResponse:
    position = search_pb2.Position(moves=[_point(m) for m in moves])
    return stub.GenMove(search_pb2.GenMoveRequest(position=position, max_visits=60, **fields),
                        timeout=60)


@contextmanager
def _service(**config) -> Iterator[tuple[object, search_pb2_grpc.SearchServiceStub]]:
    service = build_service(SteepEvaluator(), port=0, **config).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            yield service, search_pb2_grpc.SearchServiceStub(channel)
    finally:
        service.stop()


def _wait_idle(ponderer) -> None:
    deadline = time.monotonic() + 120
    while ponderer.active and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ponderer.active == 0


def _move(response: search_pb2.GenMoveResponse) -> int:
    return response.move.y * 15 + response.move.x


def test_the_next_move_continues_the_pondered_tree():
    with _service(ponder_visits=400, ponder_seconds=120) as (service, stub):
        ponderer = service.servicer.ponderer
        first = _genmove(stub, [112], ponder=True)
        assert first.pondering
        _wait_idle(ponderer)  # ended by its visit budget: nobody asked anything
        assert ponderer.stats.visits == 400 and ponderer.stats.preempted == 0
        ours = _move(first)
        reply = min(set(range(225)) - {112, ours})  # the steep policy's favourite reply
        second = _genmove(stub, [112, ours, reply])
        assert second.reused_visits > 60  # more than the first search had in all: pondered
    with _service(ponder_visits=400, ponder_seconds=120) as (service, stub):
        first = _genmove(stub, [112])  # no ponder asked: only the search's own visits
        assert not first.pondering and service.servicer.ponderer.stats.started == 0
        second = _genmove(stub, [112, _move(first), reply])
        assert second.reused_visits < 60


def test_any_request_stops_the_ponder_first():
    with _service(ponder_visits=10**5, ponder_seconds=600) as (service, stub):
        ponderer = service.servicer.ponderer
        first = _genmove(stub, [112], ponder=True)
        assert first.pondering
        time.sleep(0.2)
        position = search_pb2.Position(moves=[_point(112)])
        stub.Predict(search_pb2.PredictRequest(position=position), timeout=30)
        assert ponderer.active == 0 and ponderer.stats.preempted == 1
        assert ponderer.stats.kept == 1  # its tree went to the cache before the Predict ran
        assert service.servicer.search_memory.reserved == 0  # the ponder's reservation too


def test_no_ponder_without_a_budget_tree_reuse_or_memory():
    with _service(ponder_seconds=0) as (service, stub):
        assert service.servicer.ponderer is None
        assert not _genmove(stub, [112], ponder=True).pondering
    with _service() as (service, stub):
        assert not _genmove(stub, [112], ponder=True, disable_tree_reuse=True).pondering
    # room for the GenMove's own tree, not for a ponder of 100,000 visits more
    with _service(ponder_visits=100_000, search_memory_mb=20) as (service, stub):
        first = _genmove(stub, [112], ponder=True)
        assert not first.pondering and service.servicer.ponderer.stats.started == 0
        again = _genmove(stub, [112])  # the tree was kept all the same
        assert again.reused_visits >= 60


def test_analyze_ponders_on_the_analysed_position():
    with _service(ponder_visits=300, ponder_seconds=120) as (service, stub):
        ponderer = service.servicer.ponderer
        position = search_pb2.Position(moves=[_point(112)])
        reports = list(stub.Analyze(search_pb2.AnalyzeRequest(
            position=position, max_visits=60, report_every_visits=30, ponder=True), timeout=60))
        assert reports[-1].final and reports[-1].pondering
        assert not any(r.pondering for r in reports[:-1])
        _wait_idle(ponderer)
        assert ponderer.stats.visits == 300
        again = _genmove(stub, [112])  # the same position: the analysis and the ponder
        assert again.reused_visits >= 60 + 300
