"""Experiment tracking of training runs: scalars, parameters and artefacts in MLflow.

A training run's own record is its run folder (checkpoint, ``report.md`` or ``metrics.json``,
the PNG plots) and, once published, the version's model card. Teams compare runs in a tracking
UI; this module puts each run there behind one small interface, `Tracker`:

* `Tracker.log_scalars(step, {name: value})`: the trainer calls it every `curve_every` steps
  (``batch/loss``: the mean mini-batch loss since the last point, ``batch/samples_per_s``,
  ``batch/learning_rate``) and at every evaluation (``<split>/loss``, ``top1``, ``top5``,
  ``value_mse``, ``value_sign`` and ``<split>/top1_by_stage/<stage>`` for train, validation,
  test and the held-out games, and ``epoch``). The splits are measured at evaluations only (each
  epoch end and where a run stops), not every `curve_every` steps: an evaluation reads thousands
  of rows and would cost more than the steps between two points;
* `Tracker.log_params({...})`: the run's `TrainConfig` fields, the dataset's folder, game and
  manifest sha256 (the manifest lists every shard with its checksum, so its hash names the
  data), the train rows and the number of ranks;
* `Tracker.log_artifact(path)`: files of the run (the model card, the plots, the report);
* `NullTracker`: the same calls doing nothing, for a run with tracking off (the default): it
  imports no tracking library and writes nothing.

Why MLflow rather than TensorBoard: the run's config and dataset hash are parameters and the
model card and plots are files, and MLflow stores both natively (`log_batch` params, artefact
files), with `mlflow.tracking.MlflowClient` to read a run back; TensorBoard keeps scalars and
images but parameters only through its hparams plugin, and no arbitrary files (a model card).
For the install, ``mlflow-skinny`` (the client without the server, UI and data-science stack)
adds 13 packages, 6.9 MB of wheels, to this project's environment, against 4 packages and
12.5 MB for ``tensorboard`` (its data server alone is 6.6 MB); the full ``mlflow`` package would
add 38 (pandas, scipy, scikit-learn, Flask among them) and, resolved on its own, move numpy to
2.x (pinned 1.26.4 here). The UI is the full package's: run it from its own environment on
the same store (docs/tracking.md).

Where runs go (`tracking_uri`): None is a local SQLite store, ``artifacts/mlruns/mlflow.db``
with the artefact files beside it in ``artifacts/mlruns/artifacts`` (`DEFAULT_TRACKING_DIR`,
one store for all runs so the UI compares them); a folder path is the same layout in that
folder; a URI (``sqlite:///...``, ``http://host:5000``, ``databricks``) goes to MLflow as it
is (a ``sqlite:`` store keeps its artefacts beside the database file). A local store is SQLite,
not MLflow's plain-folder store: MLflow 3.18 refuses to open that one unless told to
(``MLFLOW_ALLOW_FILE_STORE``), as it is no longer developed. The experiment is
``$MLFLOW_EXPERIMENT_NAME`` or ``movepred-<game>``.

A store that cannot be opened is a `TrackingError` before any step. Once a run trains, a
failing store (a tracking server going away) costs what it was sent, not the training: scalars
are queued to MLflow's logging thread, which logs its own failures, and the first failure of
each other kind of call is logged here as a warning; the run goes on, and the run folder keeps
the run's full record.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from services.settings import ROOT

log = logging.getLogger(__name__)

TRACKERS = ("none", "mlflow")
DEFAULT_TRACKING_DIR = ROOT / "artifacts" / "mlruns"
DATABASE_FILE = "mlflow.db"
ARTIFACTS_DIR = "artifacts"
EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"
# schemes MLflow takes as a tracking store; anything else is a folder for a local store
_URI = re.compile(r"^(sqlite|postgresql|mysql|mssql|https?|file|databricks)(\+\w+)?:|^databricks$")
# what MLflow accepts in a metric name (mlflow.utils.validation, POSIX): the rest becomes "_"
_NAME_BAD = re.compile(r"[^/\w.\- :]")


class TrackingError(ValueError):
    """The tracking store or run cannot be opened (a bad URI, an unreachable server)."""


class Tracker:
    """Where a training run's scalars, parameters and files go; this base does nothing (tracking
    off), so the trainer makes the same calls either way."""

    enabled = False

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Record the run's settings (strings; a value is written once per run)."""

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        """Record one value of each named scalar at `step`."""

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        """Attach a file of the run (under `folder` in the run's artefacts)."""

    def finish(self, failed: bool = False) -> None:
        """Close the run: finished, or failed."""

    def where(self) -> dict[str, str] | None:
        """{"tracking_uri", "run_id"} of the run; None with tracking off."""
        return None


class NullTracker(Tracker):
    """Tracking off: every call does nothing, nothing is imported or written."""


def scalar_name(*parts: str) -> str:
    """A metric name MLflow accepts from `parts` joined by "/": a stage label's "+" ("100+",
    the last stage) becomes "plus", any other character outside MLflow's set "_"."""
    return _NAME_BAD.sub("_", "/".join(parts).replace("+", "plus"))


def split_scalars(evaluation: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of one evaluation (`_Run.evaluate_splits`: {split: metrics}, plus "epoch"):
    each split's loss, top-1, top-5, value MSE and sign, top-1 by stage. Counts and flags (rows,
    ``finite``) are not curves and are left out."""
    out: dict[str, float] = {}
    for split, metrics in evaluation.items():
        if not isinstance(metrics, Mapping):
            continue
        for key in ("loss", "top1", "top5", "value_mse", "value_sign"):
            if key in metrics:
                out[scalar_name(split, key)] = float(metrics[key])
        for stage, figures in metrics.get("top1_by_stage", {}).items():
            out[scalar_name(split, "top1_by_stage", stage)] = float(figures["top1"])
    return out


def store_uri(uri: str | None) -> tuple[str, str | None]:
    """(tracking URI, artefact location for a new experiment or None: the store's own) of a
    `tracking_uri` setting: None is the local store in `DEFAULT_TRACKING_DIR`, a folder a local
    store there, a URI itself (a ``sqlite:`` database keeps its artefacts beside it)."""
    if uri is None or not _URI.match(uri):
        folder = Path(uri) if uri is not None else DEFAULT_TRACKING_DIR
        folder = folder.expanduser().resolve()
        return f"sqlite:///{folder / DATABASE_FILE}", (folder / ARTIFACTS_DIR).as_uri()
    if uri.startswith("sqlite:///"):
        database = Path(uri.removeprefix("sqlite:///")).expanduser()
        if not database.is_absolute():
            database = database.resolve()
        return uri, (database.parent / ARTIFACTS_DIR).as_uri()
    return uri, None


def _plain(value: Any) -> str:
    return "" if value is None else str(value)


class MlflowTracker(Tracker):
    """One MLflow run, through `MlflowClient` (no process-global active run: two runs in one
    process, or one in a Prefect task thread, do not meet). It holds only the store's URI and
    the run id, so it pickles (a Prefect task parameter) and a task retry logs into the same
    run; the client is made again on first use after unpickling."""

    enabled = True

    def __init__(self, tracking_uri: str, run_id: str) -> None:
        self.tracking_uri, self.run_id = tracking_uri, run_id
        self._client: Any = None
        self._warned: set[str] = set()

    def __getstate__(self) -> dict:
        return {"tracking_uri": self.tracking_uri, "run_id": self.run_id}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["tracking_uri"], state["run_id"])  # type: ignore[misc]

    @property
    def client(self) -> Any:
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def _failed(self, what: str, exc: Exception) -> None:
        """A call the store refused: warn once per kind of call, train on."""
        if what not in self._warned:
            self._warned.add(what)
            log.warning("tracking: %s failed for run %s at %s (%s: %s); training goes on, "
                        "further failures of this kind are not reported", what, self.run_id,
                        self.tracking_uri, type(exc).__name__, str(exc)[:300])

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(scalar_name(k), _plain(v)) for k, v in params.items()]
        try:
            for start in range(0, len(items), 100):  # MLflow's params per batch
                self.client.log_batch(self.run_id, params=items[start:start + 100])
        except Exception as exc:  # the store raises many kinds
            self._failed("log_params", exc)

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(name, float(value), now, int(step)) for name, value in scalars.items()
                   if value is not None and not math.isnan(float(value))]
        try:
            for start in range(0, len(metrics), 1000):  # MLflow's metrics per batch
                # queued, written by MLflow's logging thread (`finish` waits for the queue): a
                # synchronous write to a local SQLite store took 30 ms, several training steps
                self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000],
                                      synchronous=False)
        except Exception as exc:
            self._failed("log_scalars", exc)

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        try:
            self.client.log_artifact(self.run_id, str(path), artifact_path=folder)
        except Exception as exc:
            self._failed(f"log_artifact {Path(path).name}", exc)

    def where(self) -> dict[str, str] | None:
        return {"tracking_uri": self.tracking_uri, "run_id": self.run_id}

    def finish(self, failed: bool = False) -> None:
        try:
            self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")
        except Exception as exc:
            self._failed("finish", exc)


def open_tracker(kind: str, tracking_uri: str | None = None, *, game: str,
                 run_name: str | None = None, tags: Mapping[str, str] | None = None,
                 rank: int = 0) -> Tracker:
    """A new run in the store `tracking_uri` (`store_uri`) for `kind` ("none": a `NullTracker`;
    "mlflow"), in the experiment ``$MLFLOW_EXPERIMENT_NAME`` or ``movepred-<game>`` (made when
    missing). A distributed run's ranks other than 0 get a `NullTracker`: rank 0 logs alone.
    TrackingError when the store or run cannot be opened."""
    if kind not in TRACKERS:
        raise TrackingError(f"tracking must be one of {', '.join(TRACKERS)}, got {kind!r}")
    if kind == "none" or rank != 0:
        return NullTracker()
    uri, artifacts = store_uri(tracking_uri)
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    experiment = os.environ.get(EXPERIMENT_ENV) or f"movepred-{game}"
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(experiment)
        experiment_id = (found.experiment_id if found is not None else
                         client.create_experiment(experiment, artifact_location=artifacts))
        run = client.create_run(experiment_id, run_name=run_name, tags=dict(tags or {}))
    except Exception as exc:  # MlflowException, a driver's, a connection's
        raise TrackingError(f"cannot open an MLflow run in {uri} (experiment "
                            f"{experiment!r}): {type(exc).__name__}: {str(exc)[:500]}") from exc
    tracker = MlflowTracker(uri, run.info.run_id)
    tracker._client = client
    log.info("tracking run %s in %s, experiment %r", run.info.run_id, uri, experiment)
    return tracker


@contextmanager
def tracked(tracker: Tracker | None, kind: str, tracking_uri: str | None = None, *, game: str,
            run_name: str | None = None, rank: int = 0) -> Iterator[Tracker]:
    """`tracker` when given (its owner finishes it), else a run opened here (`open_tracker`) and
    finished on the way out: failed when an exception leaves the block."""
    if tracker is not None:
        yield tracker
        return
    own = open_tracker(kind, tracking_uri, game=game, run_name=run_name, rank=rank)
    try:
        yield own
    except BaseException:
        own.finish(failed=True)
        raise
    own.finish()
