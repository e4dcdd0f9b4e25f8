"""Prefect flows: `ingest` (records -> shards) and `train` (shards -> published model).

Modules:
    ingest     records -> deduplicated Parquet shards + manifest, one cached task per source
    train      shards -> trained policy -> gate -> TorchScript -> next Triton version
    rollout    `rollout` and `rollback`: change the version a running Triton serves
    schedules  the nightly `ingest` (and `train`) deployments, served until interrupted

Prefect settings that make local runs quiet and robust are defaulted here, before Prefect is
imported by any flow module: a project-local PREFECT_HOME, no telemetry, and a longer timeout
for the ephemeral API server's first start (its database migration takes a while on 2 cores).

Logging: Prefect's level is INFO, so a flow's and its tasks' lines (``get_run_logger``) reach
the run's log in the Prefect UI; the project's own loggers (``services.*``, ``flows.*``: the
trainer's progress, the ingest's counts) are Prefect "extra loggers", so their lines made during
a run are sent there too. An entry point calls `configure_logging` to print them all once, in the
project's format (``--log-format text|json``).
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PREFECT_HOME", str(_ROOT / ".prefect"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
RUN_LOGGERS = ("services", "flows")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", ",".join(RUN_LOGGERS))
# outside a flow run (the search service in the demo's process) those lines have no run to go
# to: they are printed as usual, with no warning about it
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
# the ephemeral API server's own access and start-up lines are not the run's: keep them quiet
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
# A flow run that no entry point configured (a deployment's run, a test, a notebook) leaves the
# root logger at Prefect's WARNING: the project's loggers take Prefect's level themselves, so
# their INFO lines still reach the run's log. `configure_logging` hands them back to the root.
for _name in RUN_LOGGERS:
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(os.environ["PREFECT_LOGGING_LEVEL"].upper())


def configure_logging(args: argparse.Namespace) -> None:
    """`services.logs.configure_from(args)` for a flow's command line, and Prefect's own
    console handler taken off the root logger, so each line is printed once, in one format
    (the run's lines still go to the Prefect API through its API handlers)."""
    from prefect.logging.handlers import PrefectConsoleHandler

    from services import logs

    logs.configure_from(args)
    for name in RUN_LOGGERS:  # --log-level decides, as for every other logger
        logging.getLogger(name).setLevel(logging.NOTSET)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per Prefect API call
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, PrefectConsoleHandler):
            root.removeHandler(handler)
