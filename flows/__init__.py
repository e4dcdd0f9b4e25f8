"""Prefect flows: `ingest` (records -> shards) and `train` (shards -> published model).

Modules:
    ingest     records -> deduplicated Parquet shards + manifest, one cached task per source
    train      shards -> trained policy -> gate -> TorchScript -> next Triton version
    rollout    `rollout` and `rollback`: change the version a running Triton serves
    schedules  the nightly `ingest` (and `train`) deployments, served until interrupted
    selfplay   the self-play loop: self-play -> ingest -> train -> gate -> rollout, resumable
    _dask_runner  the task runner of `on_dask`'s local cluster: workers on the flow's Prefect API

Prefect settings that make local runs quiet and robust are defaulted here, before Prefect is
imported by any flow module (no telemetry, a longer timeout for the ephemeral API server's first
start, whose database migration takes a while on 2 cores, and the log levels below), each only
where the caller set it neither in the environment nor in the active Prefect profile: importing
the flows never changes the caller's Prefect. PREFECT_HOME is left alone, so the runs go to the
API the user's profile names (a `prefect server`, Prefect Cloud) and, only when none is
configured, to Prefect's temporary local server; `announce_prefect_api` says which in one line.
(The defaults are environment variables, which Prefect ranks above a `.env`, `prefect.toml` or
`[tool.prefect]` in the working directory: a setting the caller keeps there, and not in the
environment or the profile, gives way to them. None of them names the API.)

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
import tomllib
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Prefect is imported only after the defaults below are set
    from prefect import Flow

RUN_LOGGERS = ("services", "flows")
PREFECT_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_LOGGING_LEVEL": "INFO",
    "PREFECT_LOGGING_EXTRA_LOGGERS": ",".join(RUN_LOGGERS),
    # outside a flow run (the search service in the demo's process) those lines have no run to
    # go to: they are printed as usual, with no warning about it
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
    # the ephemeral API server's own access and start-up lines are not the run's: keep them quiet
    "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
}


def active_profile_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings of the caller's active Prefect profile, read as Prefect reads them (without
    importing Prefect, whose settings are fixed on import): the profiles file
    PREFECT_PROFILES_PATH, else PREFECT_HOME/profiles.toml (PREFECT_HOME defaults to
    ~/.prefect); the profile PREFECT_PROFILE, else the file's ``active``. {} when there is no
    such file or profile, or the file cannot be read (Prefect then uses its own defaults)."""
    env = os.environ if environ is None else environ
    home = Path(env.get("PREFECT_HOME") or "~/.prefect").expanduser()
    path = Path(env.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        profiles = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}
    name = env.get("PREFECT_PROFILE") or profiles.get("active")
    table = profiles.get("profiles", {})
    chosen = table.get(name) if isinstance(table, dict) and isinstance(name, str) else None
    return {str(k): str(v) for k, v in chosen.items()} if isinstance(chosen, dict) else {}


def apply_prefect_defaults(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set each of `PREFECT_DEFAULTS` in `environ` (the process environment) that neither
    `environ` nor the active profile sets; returns what it set."""
    env = os.environ if environ is None else environ
    profile = active_profile_settings(env)
    chosen = {k: v for k, v in PREFECT_DEFAULTS.items() if k not in env and k not in profile}
    env.update(chosen)
    return chosen


def configured_api_url(environ: Mapping[str, str] | None = None) -> str | None:
    """The Prefect API the caller configured (PREFECT_API_URL in the environment, else in the
    active profile), None when none is: then Prefect runs flows on a temporary local server."""
    env = os.environ if environ is None else environ
    return env.get("PREFECT_API_URL") or active_profile_settings(env).get("PREFECT_API_URL")


def prefect_api_line() -> str:
    """One line saying where this process's flow runs are recorded (Prefect's own settings)."""
    from prefect.context import get_settings_context

    context = get_settings_context()
    url = context.settings.api.url
    if url:
        return f"Prefect API: {url} (profile {context.profile.name!r}); the runs are recorded there"
    return (f"Prefect API: none configured (profile {context.profile.name!r} and the environment "
            "name no PREFECT_API_URL); the runs go to a temporary local Prefect server with its "
            f"state in {context.settings.home}")


apply_prefect_defaults()
# A flow run that no entry point configured (a deployment's run, a test, a notebook) leaves the
# root logger at Prefect's WARNING: the project's loggers take Prefect's level themselves, so
# their INFO lines still reach the run's log. `configure_logging` hands them back to the root.
for _name in RUN_LOGGERS:
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(
            (os.environ.get("PREFECT_LOGGING_LEVEL")
             or active_profile_settings().get("PREFECT_LOGGING_LEVEL") or "INFO").upper())


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


def announce_prefect_api() -> None:
    """Log `prefect_api_line`: an entry point calls it once its arguments are checked, just
    before its flow runs (a refused command line stays one line)."""
    logging.getLogger(__name__).info("%s", prefect_api_line())


def on_dask(flow: Flow, address: str | None = None, workers: int = 0,
            processes: bool = True) -> Flow:
    """`flow` with its tasks on a Dask cluster: an existing one at `address`
    (tcp://host:8786), or a local one of `workers` workers (one thread each; processes unless
    `processes` is False) started for the run; with neither, `flow` itself. One place for what
    every flow with a `--dask` option does: Dask's INFO lines (every worker start and stop)
    kept to warnings, in this process and, through the environment, in local workers; local
    workers on the flow's Prefect API (`flows._dask_runner`). An existing cluster's workers use
    the API their own environment names (PREFECT_API_URL, as deploy/ sets it)."""
    if not address and not workers:
        return flow
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    logging.getLogger("distributed").setLevel(logging.WARNING)
    from prefect_dask import DaskTaskRunner

    if address:
        runner: DaskTaskRunner = DaskTaskRunner(address=address)
    else:
        from flows._dask_runner import LocalDaskTaskRunner

        runner = LocalDaskTaskRunner({
            "n_workers": workers, "threads_per_worker": 1, "processes": processes,
            "dashboard_address": None})
    return flow.with_options(task_runner=runner)
