"""The API's error model: the status codes the search service answers, and the structured
details (google.rpc, as in Google's AIP-193) it attaches for a client to read without parsing
messages.

The codes divide what a client should do: INVALID_ARGUMENT is never worth a retry unchanged (a
malformed value, or a value over one of the server's fixed limits); RESOURCE_EXHAUSTED is
capacity in use now (every search slot busy, the search memory held by running searches) and
is worth a retry later. Details ride in the status's `grpc-status-details-bin` trailer
(`grpc_status.rpc_status`):

* INVALID_ARGUMENT: `google.rpc.BadRequest`, one field violation whose `field` is the request
  field's path (`position.moves[3]`, `max_visits`: the message's "<field>: " prefix) and whose
  `reason` is INVALID or OVER_LIMIT.
* RESOURCE_EXHAUSTED from the service: `google.rpc.ErrorInfo`, `reason` SEARCH_SLOTS_BUSY,
  SEARCH_MEMORY_BUSY or OPERATIONS_BUSY, `domain` movepred.v1, `metadata` the figures (limits,
  bytes held).

`ERROR_CODES` is the table docs/api.md shows (scripts/api_reference.py writes it from here).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

DOMAIN = "movepred.v1"  # ErrorInfo.domain: the API whose reasons these are

# BadRequest.FieldViolation.reason
INVALID = "INVALID"        # a malformed value: wrong type of point, occupied, unknown rule, ...
OVER_LIMIT = "OVER_LIMIT"  # over a fixed limit of the server (visits, positions, replay work)
# ErrorInfo.reason of a RESOURCE_EXHAUSTED
SEARCH_SLOTS_BUSY = "SEARCH_SLOTS_BUSY"    # every --max-searches slot is taken
SEARCH_MEMORY_BUSY = "SEARCH_MEMORY_BUSY"  # the running searches hold the --search-memory-mb
OPERATIONS_BUSY = "OPERATIONS_BUSY"  # the most InferSequence operations held, all running

_DETAIL_TYPES: tuple[type[Message], ...] = (
    error_details_pb2.BadRequest,
    error_details_pb2.ErrorInfo,
    error_details_pb2.RetryInfo,
)


@dataclass(frozen=True)
class ErrorCode:
    """One row of the API's error table."""

    code: str
    retry: str
    when: str
    details: str


ERROR_CODES: tuple[ErrorCode, ...] = (
    ErrorCode("INVALID_ARGUMENT", "no",
              "a malformed request (unknown game or rule, an occupied or off-board point, an "
              "illegal move, a finished game, bytes that are not the message), or a value over "
              "a fixed limit of the server: max_visits over 100,000, max_time_ms over 60,000, "
              "more than 256 positions, more moves than the board has points, more than 16,384 "
              "moves to replay in one request, InferSequence's restarts over 64 or restarts * "
              "iterations over 200,000, an InferSequence operation's max_time_ms over "
              "3,600,000, a search whose tree could never fit in --search-memory-mb",
              "BadRequest: the field's path, reason INVALID or OVER_LIMIT"),
    ErrorCode("RESOURCE_EXHAUSTED", "yes, later",
              "capacity in use now: every --max-searches search slot is busy (GenMove, Analyze, "
              "InferSequence and its running operations), or the running searches hold so much "
              "of --search-memory-mb that this one's tree does not fit beside them, or the "
              "server holds its most InferSequence operations and all still run. gRPC itself "
              "also answers it for a "
              "message over the server's 1 MiB receive limit (which no retry mends) and past "
              "--max-concurrent-rpcs",
              "ErrorInfo: reason SEARCH_SLOTS_BUSY, SEARCH_MEMORY_BUSY or OPERATIONS_BUSY (none "
              "from gRPC itself)"),
    ErrorCode("NOT_FOUND", "no",
              "GetInferSequence / CancelInferSequence of an operation id the server does not "
              "hold: never started there, expired (kept an hour after it ended), or the server "
              "restarted", "none"),
    ErrorCode("FAILED_PRECONDITION", "no",
              "rollout_lambda > 0 and the served version has no rollout policy", "none"),
    ErrorCode("UNAVAILABLE", "yes",
              "Triton (the policy network) is unreachable, or the service itself is down",
              "none"),
    ErrorCode("DEADLINE_EXCEEDED", "yes, with a longer deadline",
              "no answer from the policy network before the call's deadline", "none"),
    ErrorCode("INTERNAL", "no",
              "the model answered NaN/Inf or an unusable reply (the message names the model "
              "and version)", "none"),
    ErrorCode("UNAUTHENTICATED", "no",
              "the server wants a bearer token (--token-file) and the call has none or "
              "another", "none"),
)


def bad_request(field: str, description: str, reason: str = INVALID
                ) -> error_details_pb2.BadRequest:
    """A BadRequest of one violation: `field` the request field's path."""
    return error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(field=field, description=description,
                                                    reason=reason)])


def error_info(reason: str, **metadata: object) -> error_details_pb2.ErrorInfo:
    """An ErrorInfo of this API's domain; metadata values are written as text."""
    return error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN,
                                       metadata={k: str(v) for k, v in metadata.items()})


def rich_status(code: grpc.StatusCode, message: str, details: tuple[Message, ...] = ()
                ) -> grpc.Status:
    """The status to abort a call with (`context.abort_with_status`): code, message and the
    details packed into a google.rpc.Status."""
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        status.details.add().Pack(detail)
    return rpc_status.to_status(status)


def details_of(error: grpc.RpcError) -> list[Message]:
    """The known google.rpc details of a failed call (BadRequest, ErrorInfo, RetryInfo), in
    the order sent; [] when it carries none."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]  # an RpcError is a Call
    if status is None:
        return []
    found: list[Message] = []
    for packed in status.details:
        for kind in _DETAIL_TYPES:
            if packed.Is(kind.DESCRIPTOR):
                detail = kind()
                packed.Unpack(detail)
                found.append(detail)
                break
    return found


def field_violations(error: grpc.RpcError) -> list[error_details_pb2.BadRequest.FieldViolation]:
    """The field violations of a failed call's BadRequest details ([] when it has none)."""
    return [v for d in details_of(error) if isinstance(d, error_details_pb2.BadRequest)
            for v in d.field_violations]


def error_reason(error: grpc.RpcError) -> str:
    """The ErrorInfo reason of a failed call ("" when it has none)."""
    return next((d.reason for d in details_of(error)
                 if isinstance(d, error_details_pb2.ErrorInfo)), "")
