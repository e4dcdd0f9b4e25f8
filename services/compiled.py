"""`kernel`: numba's `njit`, its machine code cached on disk where it can be, else kept in memory.

Why: numba's `cache=True` saves each process the compile (seconds per kernel) by writing the
machine code next to the source (or under `NUMBA_CACHE_DIR`, or the user's cache directory).
Where none of those is writable (the search service's pod runs a read-only root filesystem
as a non-root user) numba does not fall back: the decorator itself raises `RuntimeError`
("cannot cache function ...: no locator available"), so merely importing the Go rules would
fail. Here such a kernel is compiled per process instead (on its first call), with one warning
naming `NUMBA_CACHE_DIR`, which restores the cache when pointed at a writable directory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from numba import njit

log = logging.getLogger(__name__)
_warned = False


def kernel(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`njit(cache=True)(fn)`, or `njit(fn)` where numba has nowhere to write its cache."""
    global _warned
    try:
        return njit(cache=True)(fn)
    except RuntimeError as exc:
        if "cannot cache" not in str(exc):
            raise
        if not _warned:
            _warned = True
            log.warning("numba cannot cache its compiled kernels here (%s): each process "
                        "compiles them on first use; set NUMBA_CACHE_DIR to a writable "
                        "directory to keep them", exc)
        return njit(fn)
