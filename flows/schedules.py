"""Serve the `ingest` flow on a cron schedule (nightly by default) until interrupted.

Run: python -m flows.schedules [SOURCES ...] --out artifacts/dataset
         [--cron "0 3 * * *"] [--timezone UTC] [--dask-address tcp://scheduler:8786]

`serve` registers the deployment `ingest/nightly-ingest` with the Prefect API and runs each
scheduled flow run in a subprocess of this process; Ctrl-C stops it (and pauses the schedule).
Point it at a long-lived Prefect server (`prefect server start`, then
PREFECT_API_URL=http://127.0.0.1:4200/api) so that the schedule, runs and artifacts are visible
in the UI; see the README. Runs can also be started by hand:
`prefect deployment run ingest/nightly-ingest`.

A served run loads the flow from its entrypoint, so a task runner set with `with_options` would
not reach it: with `--dask-address` the deployment is the small flow `ingest-on-dask`, which
runs `ingest` as a subflow on that Dask cluster.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prefect import flow, serve
from prefect.deployments.runner import RunnerDeployment
from prefect.schedules import Cron

from flows.ingest import DEFAULT_OUT, DEFAULT_SOURCES, ingest, ingest_on

DEPLOYMENT_NAME = "nightly-ingest"
DEFAULT_CRON = "0 3 * * *"  # every day at 03:00
DEFAULT_TIMEZONE = "UTC"


@flow(name="ingest-on-dask")
def ingest_on_dask(dask_address: str, sources: list[str] | None = None,
                   out_dir: str = DEFAULT_OUT, work_dir: str | None = None) -> dict:
    """`ingest` with its tasks on the Dask cluster at `dask_address` (tcp://host:8786)."""
    return ingest_on(dask_address=dask_address)(sources=sources, out_dir=out_dir,
                                                work_dir=work_dir)


def nightly_deployment(sources: list[str] | None = None, out_dir: str = DEFAULT_OUT,
                       cron: str = DEFAULT_CRON, timezone: str = DEFAULT_TIMEZONE,
                       dask_address: str | None = None,
                       name: str = DEPLOYMENT_NAME) -> RunnerDeployment:
    """The deployment object that `main` serves (built without contacting the API)."""
    parameters: dict = {
        "sources": [str(Path(s).resolve()) for s in (sources or DEFAULT_SOURCES)],
        "out_dir": str(Path(out_dir).resolve()),
    }
    target = ingest
    if dask_address:
        target, parameters = ingest_on_dask, {"dask_address": dask_address, **parameters}
    return target.to_deployment(
        name=name,
        schedule=Cron(cron, timezone=timezone),
        parameters=parameters,
        description=f"Ingest {len(parameters['sources'])} source(s) into "
                    f"{parameters['out_dir']} on '{cron}' ({timezone})",
        tags=["ingest"],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="*", help="RenjuNet .rif files (default: the sample)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="dataset folder to write")
    parser.add_argument("--cron", default=DEFAULT_CRON, help=f"default '{DEFAULT_CRON}'")
    parser.add_argument("--timezone", default=DEFAULT_TIMEZONE, help="IANA name, default UTC")
    parser.add_argument("--name", default=DEPLOYMENT_NAME, help="deployment name")
    parser.add_argument("--dask-address", default=None,
                        help="run the tasks on this Dask cluster (tcp://host:8786)")
    args = parser.parse_args(argv)
    # as in flows.ingest: take the flows from the importable module, not __main__, so that the
    # deployment's entrypoint is a module path that the run's subprocess can import
    from flows.schedules import nightly_deployment as importable

    deployment = importable(args.sources or None, args.out, args.cron, args.timezone,
                            args.dask_address, args.name)
    serve(deployment)


if __name__ == "__main__":
    main()
