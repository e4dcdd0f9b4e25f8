"""A caller's text quoted in an error message, cut short.

Why: a refusal says what was wrong, and quotes the value; a hostile caller's value can be a
megabyte, which echoed into a gRPC status (whose metadata has a 16 KiB hard limit) turns an
INVALID_ARGUMENT into a RESOURCE_EXHAUSTED "stream removed", and into megabytes of log.
"""

from __future__ import annotations

SHOWN_CHARS = 24  # the most of a caller's text an error message quotes


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` quoted (repr) for an error message, cut at `limit` characters with its length."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} chars)"
