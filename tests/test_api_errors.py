"""The API's error model as a client sees it (`services.api.errors`): a request over a fixed
limit is INVALID_ARGUMENT (never worth a retry), RESOURCE_EXHAUSTED is capacity in use now, and
both carry google.rpc details read from the status trailer: a BadRequest field violation naming
the field, an ErrorInfo reason. Once a `max_visits` over 100,000 or 257 positions were
RESOURCE_EXHAUSTED, the same code as a busy search slot, so a client could not tell "retry" from
"never"."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2

from services.api import errors
from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.search.server import build_service
from services.search.servicer import VISIT_BYTES_PER_POINT
from tests.evaluators import HungEvaluator, UniformEvaluator


def _pos(*moves: tuple[int, int]) -> search_pb2.Position:
    return search_pb2.Position(moves=[search_pb2.Point(x=x, y=y) for x, y in moves])


def _error(call, request, timeout: float = 10.0) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        reply = call(request, timeout=timeout)
        if isinstance(request, search_pb2.AnalyzeRequest):
            list(reply)
    return info.value


@pytest.fixture(scope="module")
def stub() -> Iterator[search_pb2_grpc.SearchServiceStub]:
    service = build_service(UniformEvaluator(), port=0).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            yield search_pb2_grpc.SearchServiceStub(channel)
    finally:
        service.stop()


OVER_LIMITS = [
    ("GenMove", search_pb2.GenMoveRequest(position=_pos(), max_visits=100_001), "max_visits"),
    ("Analyze", search_pb2.AnalyzeRequest(position=_pos(), max_time_ms=60_001), "max_time_ms"),
    ("Predict", search_pb2.PredictRequest(positions=[_pos()] * 257), "positions"),
    ("Predict", search_pb2.PredictRequest(
        positions=[_pos(), search_pb2.Position(setup_black=[search_pb2.Point()] * 226)]),
     "positions[1].setup_black"),
]


@pytest.mark.parametrize(("method", "request_", "field"), OVER_LIMITS)
def test_a_request_over_a_fixed_limit_is_invalid_argument_naming_the_field(
        stub, method: str, request_, field: str) -> None:
    error = _error(getattr(stub, method), request_)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    (violation,) = errors.field_violations(error)
    assert violation.field == field
    assert violation.reason == errors.OVER_LIMIT
    assert error.details() == f"{field}: {violation.description}"  # the message says the same
    assert errors.error_reason(error) == ""


@pytest.mark.parametrize(("request_", "field", "words"), [
    (search_pb2.PredictRequest(position=_pos((7, 7), (7, 7))), "position.moves[1]", "occupied"),
    (search_pb2.PredictRequest(position=search_pb2.Position(rule=search_pb2.RULE_GO_AREA)),
     "position.rule", "RULE_GO_AREA is a Go rule"),
    (search_pb2.PredictRequest(position=_pos(), top_k=-1), "top_k", "must"),
])
def test_a_malformed_request_names_the_field_in_a_bad_request(
        stub, request_, field: str, words: str) -> None:
    error = _error(stub.Predict, request_)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    (detail,) = errors.details_of(error)
    assert isinstance(detail, error_details_pb2.BadRequest)
    (violation,) = detail.field_violations
    assert (violation.field, violation.reason) == (field, errors.INVALID)
    assert words in violation.description


def test_a_busy_search_slot_is_resource_exhausted_with_its_reason() -> None:
    """The only slot is held by a search waiting on a hung network: the next search is
    refused at once with RESOURCE_EXHAUSTED, ErrorInfo SEARCH_SLOTS_BUSY (retry later)."""
    hung = HungEvaluator()
    service = build_service(hung, port=0, max_searches=1).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            stub = search_pb2_grpc.SearchServiceStub(channel)
            held = stub.GenMove.future(search_pb2.GenMoveRequest(position=_pos(), max_visits=10),
                                       timeout=120)
            waited = time.monotonic()
            while service.metrics.value("movepred_searches_active") < 1:
                assert time.monotonic() - waited < 60, "the first search never started"
                time.sleep(0.01)
            error = _error(stub.GenMove, search_pb2.GenMoveRequest(position=_pos((7, 7))))
            held.cancel()
    finally:
        hung.release.set()
        service.stop()
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    (info,) = errors.details_of(error)
    assert isinstance(info, error_details_pb2.ErrorInfo)
    assert (info.reason, info.domain) == (errors.SEARCH_SLOTS_BUSY, errors.DOMAIN)
    assert info.metadata["max_searches"] == "1"
    assert errors.field_violations(error) == []


def test_a_search_that_could_never_fit_in_memory_is_invalid_argument() -> None:
    """A tree bigger than the whole --search-memory-mb fits beside no other search or alone:
    INVALID_ARGUMENT naming max_visits, with the visits that would fit; a search that fits is
    served."""
    service = build_service(UniformEvaluator(), port=0, search_memory_mb=1).start()
    fits = (1 << 20) // (VISIT_BYTES_PER_POINT * 225)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            stub = search_pb2_grpc.SearchServiceStub(channel)
            error = _error(stub.GenMove, search_pb2.GenMoveRequest(position=_pos(),
                                                                   max_visits=fits + 1))
            reply = stub.GenMove(search_pb2.GenMoveRequest(position=_pos(), max_visits=fits),
                                 timeout=60)
    finally:
        service.stop()
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    (violation,) = errors.field_violations(error)
    assert (violation.field, violation.reason) == ("max_visits", errors.OVER_LIMIT)
    assert f"ask at most {fits} visits" in violation.description
    assert reply.total_visits == fits


def test_the_error_table_names_each_code_once() -> None:
    codes = [row.code for row in errors.ERROR_CODES]
    assert len(codes) == len(set(codes))
    assert all(code in grpc.StatusCode.__members__ for code in codes)
