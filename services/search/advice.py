"""What to do about a failed call to the search service, in one sentence for people.

Every front-end that shows a failed call (the `movepred` command line, the web board) adds
the same advice, so it is written once, here below them: the service down, Triton down, not
allowed, or busy (RESOURCE_EXHAUSTED is capacity in use now: a request over a fixed limit
is INVALID_ARGUMENT, which the service's words explain).
"""

from __future__ import annotations

import grpc


def next_step(code: grpc.StatusCode | None, details: str) -> str:
    """What to run next for a failed call: the service down, Triton down, or not allowed
    ("" when there is nothing better to say than the service's own words)."""
    if code == grpc.StatusCode.UNAVAILABLE:
        if "Triton" in details:
            return ("the search service is up but Triton is not serving: start it with "
                    "`make triton` (and publish a model with `make ingest && make train`)")
        return "the search service is not reachable: start it with `make serve`"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return "give the service's token with --token-file or $MOVEPRED_TOKEN"
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return "the service is busy: retry later"
    return ""
