"""Prefect flow `train`: shards -> trained policy -> gate -> TorchScript -> next Triton version.

Run: python -m flows.train --dataset artifacts/dataset --repository model_repository
     [--triton-url 127.0.0.1:8001]   (then the new version is rolled out there)
     python -m flows.train --dataset artifacts/go-dataset --model go_res_b2c32 --seconds 600

A model is published only if it passes the gate (finite outputs; validation top-1 not below the
published version's minus a tolerance); otherwise the serving version stays and the flow's
result and artifact say why. Plots (learning curves against the step: the training loss every
`curve_every` steps and the splits' loss and top-1 at each evaluation; top-1 by game stage) are
written as PNG next to the checkpoint, embedded in the ``train-summary`` markdown artifact and
attached as image artifacts ``train-curves`` and ``train-stages`` (Prefect's
`create_image_artifact`, the image as a data URI, so it shows wherever the run folder is).

With `--track mlflow` (a `TrainConfig` field, off by default) the run is also an MLflow run
(services/trainer/tracking.py; `--tracking-uri`, default the local store ``artifacts/mlruns``):
scalars every `--curve-every` steps and at each evaluation, the config and the dataset's
manifest sha256 as parameters, and ``report.md``, the plots and ``model_card.json`` (the
published version's card, or the trained network's when nothing was published) as artefacts.
The result's ``tracking`` names the run; docs/tracking.md says how to look at it.

The dataset's game (from its shards) picks the default model configuration (`Game.default_config`)
and model name (`gomoku_policy`, `go_policy`); a configuration of the other game is refused. A
Go model goes through the same training, metrics (train / validation / test every epoch), gate
and checked TorchScript export (on random Go planes and real validation positions). It is
published only where the repository (or the tracked `model_repository/` template) has a
`config.pbtxt` for the model name whose input dims match the dataset's boards in the model's
input (its configuration's encoder: a `go_..._x` network takes Go's extended [10, S, S] input,
which the tracked `go_policy` config does not); otherwise it is written to `<run_dir>/model.pt`
and the result says why (a version Triton cannot load would only break the model's next load).

The training settings are one `TrainConfig` (services/trainer/train.py): the flow takes it as
its `config` parameter (a deployment passes it as a dict of its fields), and the command line's
training flags are generated from its fields, with their defaults (`services.settings`).
Budgets: `--steps` defaults to the trainer's DEFAULT_MAX_STEPS, except with `--seconds`, where
the time budget alone stops the run (`--steps 0`: no step limit). `--threads` defaults to one
torch thread (DEFAULT_THREADS: with one thread per core, training collapsed 20x whenever another
process held a core).

With `--triton-url` and Triton not answering there, the version is still published and the
report written; the run ends with one line saying it is not served and what to run next.

The version is published (`services.trainer.publish`: the gate, the checked export and the
publication, shared with the distributed trainer) with ``smoke_positions.npz`` (up to
`SMOKE_ROWS` validation positions as the network takes them, and the moves played) and its
top-1 on them in the metadata; with `--triton-url` it is rolled out by
`services.triton.rollout.rollout` (smoke-tested on those positions, then pinned), never by a
plain load of the newest folder, which would bring back a rolled-back version. A refused version
(quarantined by the rollout) is reported in the result
(``rollout``), the report and the ``rollout-summary`` artifact; the serving version stays.
"""

from __future__ import annotations

import argparse
import base64
import inspect
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_image_artifact, create_markdown_artifact

from flows import announce_prefect_api, configure_logging
from services import logs, settings
from services.dataset.shards import GAME_SPLIT, read_manifest
from services.defaults import MODEL_FILE, TRITON_URL
from services.games.registry import default_game, get_game, registered_games
from services.models.configs import spec
from services.repository import gate
from services.settings import DEFAULT_DATASET, DEFAULT_REPOSITORY, DEFAULT_RUN_DIR
from services.trainer import publish
from services.trainer.plots import plot_curves, plot_stages
from services.trainer.publish import (
    MODEL_CARD_FILE,
    check_gate,
    export_checked,
    unservable_reason,
    write_run_card,
)
from services.trainer.tracking import Tracker, TrackingError, tracked
from services.trainer.train import TrainConfig, TrainResult, check_run, train
from services.triton.client import PolicyClient

MODEL_NAME = default_game().default_model
TRITON_PROBE_S = 3.0  # how long the flow waits for Triton to say it is live before publishing

log = logging.getLogger(__name__)


class NoDatasetError(FileNotFoundError):
    """The dataset folder has no committed manifest (nothing ingested there yet)."""


def shown_path(path: str) -> str:
    """`path` as a user in the current folder would type it: relative when it is under that
    folder (the default dataset is ``artifacts/dataset``, not its absolute path), else as
    given."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


def check_dataset(dataset_dir: str) -> None:
    """Raise `NoDatasetError` with the command to run when `dataset_dir` holds no dataset,
    `DatasetError` (a ValueError) when its manifest is unreadable or of another version."""
    if not (Path(dataset_dir) / "manifest.json").is_file():
        shown = shown_path(dataset_dir)
        raise NoDatasetError(f"no dataset at {shown}: run `make ingest` first (or "
                             f"`python -m flows.ingest SOURCES --out {shown}`)")
    read_manifest(Path(dataset_dir))


def triton_unreachable(url: str, timeout_s: float = TRITON_PROBE_S) -> str | None:
    """Why Triton at `url` cannot take a model now (not listening, not live), or None."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    try:
        client = grpcclient.InferenceServerClient(url=url)
    except InferenceServerException as exc:
        return str(exc)
    try:
        return None if client.is_server_live(client_timeout=timeout_s) else "not live"
    except InferenceServerException as exc:
        return exc.message() or str(exc)
    finally:
        client.close()


def serving_hint(triton_url: str | None, repository: str, model_name: str,
                 version: int) -> str:
    """The one line that ends a run whose version is published but not served."""
    why = (f"Triton at {triton_url} is not reachable, so" if triton_url else "no --triton-url:")
    start = ("`make triton`" if Path(repository).resolve() == Path(DEFAULT_REPOSITORY).resolve()
             else f"`.venv/bin/python -m services.triton.server --repository {repository}`")
    return (f"{why} {model_name} v{version} is published in {repository} but not served. "
            f"Next: {start} (it starts on the newest good version), or with Triton running: "
            f"`.venv/bin/movepred rollout --triton-url {triton_url or TRITON_URL} "
            f"--repository {repository}"
            + (f" --model-name {model_name}`" if model_name != MODEL_NAME else "`"))


@task(retries=1, retry_delay_seconds=2)
def fit(dataset_dir: str, config: TrainConfig, checkpoint: str | None,
        tracker: Tracker | None = None) -> TrainResult:
    """Train; a retry resumes from the checkpoint instead of starting over (and logs into the
    same tracking run: steps between the checkpoint and the failure are logged twice)."""
    return train(Path(dataset_dir), config, checkpoint=Path(checkpoint) if checkpoint else None,
                 tracker=tracker)


# the trainer's publication (services.trainer.publish) as a task of this flow
export_and_publish = task(publish.export_and_publish)


@task
def export_to_run_dir(result: TrainResult, run_dir: str, dataset_dir: str) -> dict:
    """Export and verify into the run folder (games the repository cannot serve yet)."""
    model_file = Path(run_dir) / MODEL_FILE
    diff = export_checked(result, model_file, dataset_dir)
    metadata = {**result.summary(), "export_max_abs_diff": diff}
    (Path(run_dir) / "model.json").write_text(json.dumps(metadata, indent=2, default=str) + "\n")
    return {"path": str(model_file), "export_max_abs_diff": diff}


@task
def load_in_triton(triton_url: str, repository: str, model_name: str, version: int,
                   tolerance: float = gate.DEFAULT_TOLERANCE) -> dict:
    """Roll `version` out on a running Triton (`services.triton.rollout.rollout`: smoke-tested
    on the stored positions, then pinned), never a plain load of the newest folder, which
    could bring back a rolled-back version. A refusal is an answer, not an exception:
    ``{"served": False, "reason", "quarantined", "next"}`` (the serving version kept serving);
    the rollout's report or refusal is attached as the ``rollout-summary`` artifact. Not
    retried: a refused version is not tried again blindly."""
    from services.triton.client import TritonError
    from services.triton.rollout import RolloutError, rollout

    client = PolicyClient(triton_url, model_name)
    try:
        report = rollout(client, Path(repository), version, model_name, tolerance=tolerance)
    except RolloutError as exc:
        create_markdown_artifact(key="rollout-summary", markdown=exc.to_markdown(),
                                 description=str(exc))
        kept = "nothing serves" if exc.serving is None else f"v{exc.serving} keeps serving"
        moved = f"; moved to {exc.quarantined}" if exc.quarantined else ""
        return {"served": False, "reason": exc.cause, "serving": exc.serving,
                "quarantined": exc.quarantined,
                "next": f"{model_name} v{version} is published but the rollout refused it "
                        f"({exc.cause}){moved}; {kept}. Train again, or roll out another "
                        f"version: `.venv/bin/movepred rollout --triton-url {triton_url} "
                        f"--repository {repository} --version N`"}
    except (TritonError, TimeoutError) as exc:
        return {"served": False, "reason": str(exc), "serving": None, "quarantined": None,
                "next": f"{model_name} v{version} is published but not served: {exc}. Next, "
                        f"with Triton running: `.venv/bin/movepred rollout --triton-url "
                        f"{triton_url} --repository {repository} --version {version}`"}
    finally:
        client.close()
    create_markdown_artifact(key="rollout-summary", markdown=report.to_markdown())
    return {"served": True, "reason": None, "serving": report.current, "quarantined": None,
            "next": None, "report": report.to_dict()}


def _png_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _png_markdown(path: Path) -> str:
    return f"![{path.stem}]({_png_data_uri(path)})"


def _report(result: TrainResult, decision: gate.GateDecision, version: int | None,
            run_dir: Path, model_name: str, exported: str | None = None) -> str:
    m = result.metrics
    curves = (plot_curves(result.history, run_dir / "curves.png", result.curve)
              if result.history or result.curve else None)
    stages = plot_stages(m["validation"].get("top1_by_stage", {}), run_dir / "stages.png",
                         "validation top-1 by game stage")
    splits = [s for s in ("train", "validation", "test", GAME_SPLIT) if m.get(s)]
    value = all("value_mse" in m[s] for s in splits)  # a model with a value head
    rows = "\n".join(f"| {s} | {m[s]['top1']:.3f} | {m[s]['top5']:.3f} | {m[s]['loss']:.3f} | "
                     + (f"{m[s]['value_mse']:.3f} | {m[s]['value_sign']:.3f} | " if value else "")
                     + f"{m[s]['n']} |" for s in splits)
    head = ("| split | top-1 | top-5 | loss | value MSE | value sign right | rows |\n"
            "|---|---|---|---|---|---|---|" if value else
            "| split | top-1 | top-5 | loss | rows |\n|---|---|---|---|---|")
    outcome = (f"published **{model_name} v{version}**" if version is not None
               else "**not published**")
    if exported:
        outcome += f" (exported to `{exported}`)"
    return (f"# Train {result.config.model}: {outcome}\n\nGate: {decision.reason}\n\n"
            f"{head}\n{rows}\n\n"
            f"{m['steps']} steps, {m['epochs']} epochs, stopped by {m['stopped']}, "
            f"{m['samples_per_s']} samples/s\n\n"
            + (_png_markdown(curves) + "\n\n" if curves else "") + _png_markdown(stages))


@flow(name="train")
def train_flow(
    dataset_dir: str = DEFAULT_DATASET,
    repository: str = DEFAULT_REPOSITORY,
    config: TrainConfig | None = None,
    gate_tolerance: float = gate.DEFAULT_TOLERANCE,
    run_dir: str = DEFAULT_RUN_DIR,
    triton_url: str | None = None,
    model_name: str | None = None,
) -> dict:
    """Train, gate, export, publish; returns the published version (or None) and metrics.

    `config`: every training setting (None: `TrainConfig()`'s defaults); its model, when it
    names none, and `model_name` default to the dataset's game's (`Game.default_config`,
    `Game.default_model`). A `triton_url` where no Triton answers does not fail the run: the version
    is published and the result's `served` is False with `next` saying what to run.
    """
    logger = get_run_logger()
    check_dataset(dataset_dir)
    config = check_run(dataset_dir, config or TrainConfig())  # before the task (no retry)
    game = spec(config.model).game  # the dataset's: check_run matched them
    model = config.model
    model_name = model_name or get_game(game).default_model
    out_dir = Path(run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = out_dir / "checkpoint.pt"
    checkpoint.unlink(missing_ok=True)  # a new flow run starts fresh; task retries resume
    logger.info("training %s (%s) on %s into %s: %s", model, game, dataset_dir, model_name,
                f"{config.step_limit()} steps" if config.step_limit() else "no step limit")
    # with --track, one tracking run for the training and the files after it (failed when
    # anything below raises)
    with tracked(None, config.track, config.tracking_uri, game=game,
                 run_name=f"{model} {out_dir.name}") as tracker:
        result = fit(dataset_dir, config, str(checkpoint), tracker)
        return _publish_and_report(result, dataset_dir, repository, gate_tolerance, out_dir,
                                   triton_url, model_name, tracker)


def _publish_and_report(result: TrainResult, dataset_dir: str, repository: str,
                        gate_tolerance: float, out_dir: Path, triton_url: str | None,
                        model_name: str, tracker: Tracker) -> dict:
    """The flow after training: gate, export, publish, roll out, report; the report, plots and
    model card go to the tracking run too. Returns the flow's result."""
    logger = get_run_logger()
    config = result.config
    game, device = spec(config.model).game, config.device
    decision = check_gate(result.metrics, Path(repository), model_name, Path(dataset_dir),
                          tolerance=gate_tolerance, device=device)
    logger.info("gate %s: %s", "passed" if decision.passed else "refused", decision.reason)
    served: bool | None = None  # None: no Triton asked
    rolled: dict | None = None  # the rollout's outcome (load_in_triton)
    asked_url = triton_url
    version = None
    exported = None
    reason = decision.reason
    unservable = unservable_reason(repository, model_name, dataset_dir,
                                   encoder=spec(config.model).encoder)
    if decision.passed and unservable is None:
        version = export_and_publish(result, repository, model_name, dataset_dir, decision,
                                     str(out_dir))
        logger.info("published %s v%s in %s", model_name, version, repository)
        unreachable = triton_unreachable(triton_url) if triton_url else None
        if unreachable:  # published but not served: the run ends with the next command to run
            logger.warning("Triton at %s does not answer (%s)", triton_url, unreachable)
            served, triton_url = False, None  # `triton_url` stays in the result as asked_url
        if triton_url:
            rolled = load_in_triton(triton_url, repository, model_name, version, gate_tolerance)
            served = rolled["served"]
    elif decision.passed:
        exported = export_to_run_dir(result, str(out_dir), dataset_dir)["path"]
        reason += f"; exported to the run folder, not published: {unservable}"
        decision = gate.GateDecision(decision.passed, reason, decision.candidate_top1,
                                     decision.serving_version, decision.serving_top1)
    if version is not None and served is None and triton_url:
        served = True  # the Triton step above returned
    next_step = (serving_hint(asked_url, repository, model_name, version)
                 if version is not None and not served else None)
    if rolled is not None and not rolled["served"]:
        next_step = rolled["next"]  # refused, or Triton failed during the rollout
    report = _report(result, decision, version, out_dir, model_name, exported)
    if next_step:
        report += f"\n\n{next_step}\n"
    (out_dir / "report.md").write_text(report)
    create_markdown_artifact(key="train-summary", markdown=report)
    for name, description in (("curves", "loss every N steps, loss and top-1 at evaluations"),
                              ("stages", "validation top-1 by game stage")):
        png = out_dir / f"{name}.png"
        if png.exists():  # the image itself, as a data URI: the run folder may be elsewhere
            create_image_artifact(image_url=_png_data_uri(png), key=f"train-{name}",
                                  description=description)
    logger.info("report in %s", out_dir / "report.md")
    if tracker.enabled:
        write_run_card(result, dataset_dir, out_dir / MODEL_CARD_FILE, repository=repository,
                       model_name=model_name, version=version, decision=decision)
        for name in ("report.md", "curves.png", "stages.png", MODEL_CARD_FILE):
            if (out_dir / name).exists():
                tracker.log_artifact(out_dir / name)
    if next_step and served is False:
        logger.warning(next_step)
    return {"version": version, "published": version is not None, "gate": reason,
            "exported": exported, "game": game, "model_name": model_name,
            "served": served, "triton_url": asked_url, "next": next_step, "rollout": rolled,
            "config": asdict(config), "metrics": result.metrics, "run_dir": str(out_dir),
            "tracking": tracker.where()}


# the flow's parameters other than `config`, as command-line flags: (flag, parameter, help)
FLOW_FLAGS = (
    ("--dataset", "dataset_dir", "dataset folder (the ingest flow's --out)"),
    ("--repository", "repository", "Triton model repository to publish into"),
    ("--run-dir", "run_dir", "checkpoint, plots and report.md"),
    ("--triton-url", "triton_url", "a running Triton to serve the new version (host:port)"),
    ("--model-name", "model_name",
     "model name to publish as (default: the dataset's game's, e.g. "
     + ", ".join(f"{g.name} {g.default_model}" for g in registered_games()) + ")"),
    ("--gate-tolerance", "gate_tolerance",
     "top-1 the new version may lose against the serving one"),
)


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m flows.train` (`make train`): the flow's parameters with
    the flow's own defaults, and one flag per `TrainConfig` field with the field's default."""
    parser = argparse.ArgumentParser(prog="python -m flows.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = inspect.signature(train_flow.fn).parameters
    for flag, name, help_text in FLOW_FLAGS:
        default = defaults[name].default
        kind = type(default) if default is not None else str
        if name == "gate_tolerance":  # a share of top-1: NaN or a negative would be nonsense
            kind = settings.bounded(float, 0, 1)
        parser.add_argument(flag, dest=name, type=kind, default=default,
                            help=help_text + (f" (default {default})" if default else ""))
    settings.add_arguments(parser, TrainConfig, title="training settings (TrainConfig)")
    logs.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the flow; a missing dataset or a bad option is one line on stderr and exit 2."""
    args = build_parser().parse_args(argv)
    configure_logging(args)
    config = settings.from_args(TrainConfig, args)
    try:
        check_dataset(args.dataset_dir)
        check_run(args.dataset_dir, config)
    except (NoDatasetError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    announce_prefect_api()
    try:
        out = train_flow(config=config, **{name: getattr(args, name) for _, name, _ in FLOW_FLAGS})
    except TrackingError as exc:  # the store named by --tracking-uri cannot be opened
        print(f"error: {exc}", file=sys.stderr)
        return 2
    m = out["metrics"]
    summary = {k: out[k] for k in ("version", "published", "served", "gate", "exported")}
    keys = ("top1", "top5", "loss", "value_mse", "value_sign", "n")
    summary["metrics"] = {s: {k: m[s][k] for k in keys if k in m[s]}
                          for s in ("train", "validation", "test", GAME_SPLIT) if m.get(s)}
    summary["run"] = {k: m[k] for k in ("steps", "epochs", "stopped", "seconds",
                                        "samples_per_s", "train_rows")}
    print(json.dumps(summary, indent=2))
    print(f"metrics, plots and report in {out['run_dir']}")
    if out["tracking"]:
        print("tracking run {run_id} in {tracking_uri}".format(**out["tracking"]))
    if out["next"]:
        print(out["next"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
