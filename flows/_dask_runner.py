"""The task runner of a flow's local Dask cluster (`flows.on_dask`): workers on the flow's
Prefect API.

A local worker process knows only what the flow sends with each task (its Prefect settings)
and its own environment. When the flow runs on Prefect's temporary local server (no
PREFECT_API_URL configured) neither names an API, so each worker would start a temporary server
of its own, record its task runs there and not in the flow's, and, when the cluster's close
SIGKILLs a worker still busy, leave that server running with no parent. `LocalDaskTaskRunner`
names the flow's API in both before the cluster starts. Imported only once the flow package
has set its Prefect defaults (this module imports Prefect).
"""

from __future__ import annotations

from typing import Any

from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings
from prefect_dask import DaskTaskRunner


def flow_api_url() -> str | None:
    """The Prefect API this process's flow runs use: the configured one (the current settings:
    the environment, the profile, a test harness's), else the address of the temporary local
    server Prefect keeps for this process (started here if the flow's client has not yet done
    so: it is the one server of the process, stopped when the process exits). None when
    neither is allowed (ephemeral mode off and no API named), where Prefect refuses to run."""
    settings = get_current_settings()
    if settings.api.url:
        return str(settings.api.url)
    if not settings.server.ephemeral.enabled:
        return None
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    return server.api_url


class LocalDaskTaskRunner(DaskTaskRunner):
    """A `DaskTaskRunner` for a local cluster (its `cluster_kwargs`) whose workers use the flow's
    Prefect API. Entered by the flow run, before the cluster starts (on the first task), it
    puts `flow_api_url` into the settings Prefect sends with every task (a task run in a worker
    takes the flow's settings) and into each worker process's environment (the Nanny's
    ``env``: for what a worker does outside a task's settings, and a worker Dask restarts after
    a death); worker threads (``processes=False``) share this process's. In a worker, where
    Prefect enters the flow's task runner again and the flow's settings already name the API,
    nothing changes."""

    def __init__(self, cluster_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(cluster_kwargs=cluster_kwargs, **kwargs)

    def __enter__(self) -> LocalDaskTaskRunner:
        super().__enter__()
        url = flow_api_url()
        if url:
            if self.cluster_kwargs.get("processes", True):  # threads share this process's
                env = {**self.cluster_kwargs.get("env", {}), "PREFECT_API_URL": url}
                self.cluster_kwargs = {**self.cluster_kwargs, "env": env}
            if not get_current_settings().api.url:  # the temporary server's, for this run
                self._exit_stack.enter_context(temporary_settings({PREFECT_API_URL: url}))
        return self
