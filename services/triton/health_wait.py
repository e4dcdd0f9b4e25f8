"""Waiting until a Triton server answers ready on its HTTP endpoints.

Readiness only counts while our own child runs: an answer from another process on the port is
not ours. A single slow answer must not fail a wait (on a loaded machine one probe can take
longer than its timeout), so the endpoints are polled until a deadline.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

PROBE_TIMEOUT_S = 1.0  # one readiness probe
POLL_S = 0.05  # between probes
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def http_ok(opener: urllib.request.OpenerDirector, url: str) -> bool:
    """Whether `url` answers HTTP 200 within `PROBE_TIMEOUT_S`."""
    try:
        with opener.open(url, timeout=PROBE_TIMEOUT_S) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def await_ready(urls: list[str], timeout_s: float, running: Callable[[], bool],
                exited: Callable[[], Exception], timed_out: Callable[[], Exception]) -> None:
    """Poll until every url answers ready while `running()` (our child) holds; raise
    `exited()` when it stops, `timed_out()` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        if not running():
            raise exited()
        if all(http_ok(OPENER, url) for url in urls) and running():
            return
        if time.monotonic() >= deadline:
            raise timed_out()
        time.sleep(POLL_S)
