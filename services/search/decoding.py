"""Requests whose bytes are not a valid message reach the servicer as `UndecodableRequest`.

Why: gRPC's own deserialization failure (a string field holding invalid UTF-8, a truncated
field) answers INTERNAL "Exception deserializing request!" before the servicer runs, so the
call is neither refused as the caller's fault nor logged nor counted. `TolerantDecoding` swaps
each SearchService method's deserializer for one that returns an `UndecodableRequest` instead
of raising; the servicer turns that into INVALID_ARGUMENT like any other bad request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from services.search.validation import InvalidRequest


@dataclass(frozen=True)
class UndecodableRequest:
    """What a request's bytes were meant to be, and why they are not."""

    message: str
    reason: str


def decoded(request: Any) -> Any:
    """`request`, or InvalidRequest when its bytes did not decode."""
    if isinstance(request, UndecodableRequest):
        raise InvalidRequest("request", f"not a valid {request.message}: {request.reason}")
    return request


def _tolerant(deserialize: Callable[[bytes], Any], message: str) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError as exc:
            return UndecodableRequest(message, str(exc) or "cannot be parsed")

    return parse


class TolerantDecoding(grpc.ServerInterceptor):
    """Gives the methods of `service` (e.g. ``movepred.v1.SearchService``) a deserializer that
    returns `UndecodableRequest` for bytes that are not their request message."""

    def __init__(self, service: str) -> None:
        self._prefix = f"/{service}/"

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or handler.request_deserializer is None or \
                not method.startswith(self._prefix):
            return handler
        message = f"{method.removeprefix(self._prefix)} request"
        return handler._replace(
            request_deserializer=_tolerant(handler.request_deserializer, message))
