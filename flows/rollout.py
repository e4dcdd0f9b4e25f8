"""Prefect flows `rollout` and `rollback`: change the version a running Triton serves.

Run: python -m flows.rollout --triton-url 127.0.0.1:8001 --repository model_repository
     [--version N]      (default: the newest published version)
     python -m flows.rollout --rollback --triton-url 127.0.0.1:8001

The work is `services.triton.rollout`: files checked, the version smoke-tested under a separate
name, traffic switched, the old version unloaded, the record kept in
``<repository>/<model>/rollout.json`` (the record the launcher starts Triton from). Each run
attaches a markdown artifact (the smoke checks and timings, or why the version was refused and
where it was quarantined); a refused version fails the flow run and the serving version keeps
serving. No retries: a rollout is not retried blindly.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from flows import announce_prefect_api, configure_logging
from services import logs
from services.defaults import TRITON_URL
from services.repository.versions import latest_version
from services.settings import DEFAULT_REPOSITORY
from services.triton.client import PolicyClient, default_model_name
from services.triton.rollout import RolloutError, rollback, rollout

MODEL_NAME = default_model_name()


@task
def switch_version(triton_url: str, repository: str, version: int | None,
                   model_name: str) -> dict:
    """Roll out `version` (None: roll back); the report as a dict, or RolloutError."""
    client = PolicyClient(triton_url, model_name)
    try:
        if version is None:
            report = rollback(client, Path(repository), model_name)
        else:
            report = rollout(client, Path(repository), version, model_name)
    except RolloutError as exc:
        create_markdown_artifact(key=f"{exc.action}-summary", markdown=exc.to_markdown(),
                                 description=str(exc))
        raise
    finally:
        client.close()
    create_markdown_artifact(key=f"{report.action}-summary", markdown=report.to_markdown())
    return report.to_dict()


@flow(name="rollout", persist_result=True)  # the report survives a state read back from the API
def rollout_flow(
    triton_url: str = TRITON_URL,
    repository: str = DEFAULT_REPOSITORY,
    version: int | None = None,
    model_name: str = MODEL_NAME,
) -> dict:
    """Serve `version` (None: the newest published) after a smoke test; old version unloaded."""
    if version is None:
        version = latest_version(Path(repository), model_name)
        if version is None:
            raise RolloutError(f"no published version of {model_name} in {repository}",
                               model_name=model_name, version=None, serving=None)
    return switch_version(triton_url, repository, version, model_name)


@flow(name="rollback", persist_result=True)
def rollback_flow(
    triton_url: str = TRITON_URL,
    repository: str = DEFAULT_REPOSITORY,
    model_name: str = MODEL_NAME,
) -> dict:
    """Serve the previously served version again (smoke-tested like a rollout)."""
    return switch_version(triton_url, repository, None, model_name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.rollout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--triton-url", default=TRITON_URL)
    parser.add_argument("--repository", default=DEFAULT_REPOSITORY)
    parser.add_argument("--model-name", default=MODEL_NAME)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--version", type=int, default=None)
    what.add_argument("--rollback", action="store_true")
    logs.add_arguments(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    announce_prefect_api()
    if args.rollback:
        out = rollback_flow(triton_url=args.triton_url, repository=args.repository,
                            model_name=args.model_name)
    else:
        out = rollout_flow(triton_url=args.triton_url, repository=args.repository,
                           version=args.version, model_name=args.model_name)
    print(json.dumps({k: out[k] for k in ("action", "previous", "current", "seconds",
                                          "smoke_passed")}, indent=2))


if __name__ == "__main__":
    main()
