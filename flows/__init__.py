"""Prefect flows: `ingest` (records -> shards) and `train` (shards -> published model).

Prefect settings that make local runs quiet and robust are defaulted here, before Prefect is
imported by any flow module: a project-local PREFECT_HOME, no telemetry, and a longer timeout
for the ephemeral API server's first start (its database migration takes a while on 2 cores).
"""

import os
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PREFECT_HOME", str(_ROOT / ".prefect"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
