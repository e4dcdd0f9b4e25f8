"""CPU and wall time per named step of the ingest path, for benchmarks/ingest.py.

The replay of records (in the games) and the in-memory dedup (in services.dataset.build) add
[user s, system s, wall s] per step to `STEP_TIMES` while it is a dict; it is None (nothing
measured, no cost) unless a benchmark sets it to {}.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

STEP_TIMES: dict[str, list[float]] | None = None


@contextmanager
def step(name: str) -> Iterator[None]:
    """Add the time the body takes to `STEP_TIMES[name]` (when measuring)."""
    if STEP_TIMES is None:
        yield
        return
    start = os.times()
    wall = time.perf_counter()
    try:
        yield
    finally:
        end = os.times()
        total = STEP_TIMES.setdefault(name, [0.0, 0.0, 0.0])
        total[0] += end.user - start.user
        total[1] += end.system - start.system
        total[2] += time.perf_counter() - wall
