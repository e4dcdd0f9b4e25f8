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

With `--train-cron` the same process also serves the `train` flow as `train/nightly-train` on
the dataset folder that the ingest writes (`--out`), e.g. a Go dataset re-trained two hours
after its nightly ingest:

    python -m flows.schedules ../shared/data/kgs/kgs-games-dev.tar.gz --out artifacts/go-dataset \
        --train-cron "0 5 * * *" --train-model go_res_b2c32 --train-seconds 600

Every training setting is a `--train-*` flag generated from `TrainConfig` (e.g. `--train-steps`,
`--train-batch-size`; `--help` lists them), and the deployment passes the whole configuration
as the flow's `config` parameter. `prefect deployment run train/nightly-train` starts a training
run now. The two schedules are
independent: a train run that starts while an ingest still writes reads whichever manifest
was committed last (see services/dataset/shards.py), never half a dataset.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from prefect import flow, serve
from prefect.deployments.runner import RunnerDeployment
from prefect.schedules import Cron

from flows import announce_prefect_api, configure_logging
from flows.ingest import DEFAULT_OUT, DEFAULT_SOURCES, ingest, ingest_on
from flows.train import train_flow
from services import logs, settings
from services.settings import DEFAULT_REPOSITORY, DEFAULT_RUN_DIR
from services.trainer.train import TrainConfig

DEPLOYMENT_NAME = "nightly-ingest"
DEFAULT_CRON = "0 3 * * *"  # every day at 03:00
DEFAULT_TIMEZONE = "UTC"
TRAIN_DEPLOYMENT_NAME = "nightly-train"
DEFAULT_TRAIN_CRON = "0 5 * * *"  # two hours after the nightly ingest
TRAIN_PREFIX = "train-"  # of the TrainConfig flags: --train-steps, --train-model, ...


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


def train_deployment(dataset_dir: str = DEFAULT_OUT, config: TrainConfig | None = None,
                     cron: str = DEFAULT_TRAIN_CRON, timezone: str = DEFAULT_TIMEZONE,
                     repository: str = DEFAULT_REPOSITORY, run_dir: str = DEFAULT_RUN_DIR,
                     name: str = TRAIN_DEPLOYMENT_NAME) -> RunnerDeployment:
    """The `train` flow on a cron schedule over one dataset folder (Gomoku or Go: the model,
    when the config names none, and the model name follow the dataset's game at run time).
    `config` (None: `TrainConfig()`) goes to the flow whole, as the dict of its fields, so the
    deployment's parameters show every setting a run uses."""
    config = config or TrainConfig()
    model = config.model
    parameters: dict = {
        "dataset_dir": str(Path(dataset_dir).resolve()),
        "repository": str(Path(repository).resolve()),
        "run_dir": str(Path(run_dir).resolve()),
        "config": asdict(config),
    }
    return train_flow.to_deployment(
        name=name,
        schedule=Cron(cron, timezone=timezone),
        parameters=parameters,
        description=f"Train {model or 'the default model of the dataset'} on "
                    f"{parameters['dataset_dir']} on '{cron}' ({timezone})",
        tags=["train"],
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m flows.schedules` (`make schedule`)."""
    parser = argparse.ArgumentParser(prog="python -m flows.schedules", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="*",
                        help="RenjuNet .rif files or Go .sgf files / archives (default: the "
                             "sample)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="dataset folder to write")
    parser.add_argument("--cron", default=DEFAULT_CRON, help=f"default '{DEFAULT_CRON}'")
    parser.add_argument("--timezone", default=DEFAULT_TIMEZONE, help="IANA name, default UTC")
    parser.add_argument("--name", default=DEPLOYMENT_NAME, help="deployment name")
    parser.add_argument("--dask-address", default=None,
                        help="run the tasks on this Dask cluster (tcp://host:8786)")
    parser.add_argument("--train-cron", default=None,
                        help=f"also serve train/{TRAIN_DEPLOYMENT_NAME} on the --out dataset on "
                             f"this cron (e.g. '{DEFAULT_TRAIN_CRON}')")
    parser.add_argument("--repository", default=DEFAULT_REPOSITORY,
                        help="Triton model repository the train runs publish into")
    parser.add_argument("--run-dir", default=DEFAULT_RUN_DIR,
                        help="the train runs' checkpoint, plots and report")
    settings.add_arguments(parser, TrainConfig, prefix=TRAIN_PREFIX,
                           title="settings of the train runs (TrainConfig, with --train-cron)")
    logs.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    # as in flows.ingest: take the flows from the importable module, not __main__, so that the
    # deployment's entrypoint is a module path that the run's subprocess can import
    from flows.schedules import nightly_deployment as importable
    from flows.schedules import train_deployment as importable_train

    deployments = [importable(args.sources or None, args.out, args.cron, args.timezone,
                              args.dask_address, args.name)]
    if args.train_cron:
        deployments.append(importable_train(
            args.out, settings.from_args(TrainConfig, args, prefix=TRAIN_PREFIX),
            args.train_cron, args.timezone, args.repository, args.run_dir))
    announce_prefect_api()
    serve(*deployments)


if __name__ == "__main__":
    main()
