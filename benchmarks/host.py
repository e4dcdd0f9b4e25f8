"""The machine a benchmark ran on, for the first line of its report and the docs' tables."""

from __future__ import annotations

import contextlib
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo; elsewhere what `platform` knows)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"
