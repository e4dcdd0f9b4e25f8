"""Experiment tracking (services/trainer/tracking.py): a training run with ``--track mlflow`` is
an MLflow run that MLflow's own reader gives back whole, and tracking off writes nothing.

* the train flow (real Prefect, the shipped sample ingested) with tracking on: read back with
  `MlflowClient`, the run has the mini-batch loss, samples/s and learning rate at every
  `curve_every` step, each split's loss, top-1, top-5, value figures and top-1 by stage at the
  evaluation, equal to the flow's metrics; every `TrainConfig` field and the dataset's manifest
  sha256 as parameters; the report, both plots and the model card (the published version's)
  as artefact files;
* torchrun's entry (one process) logs from rank 0: its metrics.json, curves.png and the
  trained network's model card;
* tracking off (the default) opens no store and writes nothing, and a store MLflow will not
  open is one clear error before any step.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from services.dataset.shards import manifest_sha256
from services.trainer.tracking import (
    DATABASE_FILE,
    DEFAULT_TRACKING_DIR,
    NullTracker,
    TrackingError,
    open_tracker,
    scalar_name,
    split_scalars,
    store_uri,
)
from services.trainer.train import TrainConfig, train
from tests.conftest import SAMPLE_RIF
from tests.training_recipes import write_sample_dataset

STEPS, EVERY = 20, 5


def client_of(tracking: dict):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking["tracking_uri"])


def steps_of(client, run_id: str, name: str) -> list[int]:
    return [m.step for m in client.get_metric_history(run_id, name)]


@pytest.fixture(scope="module")
def flow_run(tmp_path_factory, prefect_harness) -> dict:
    from flows.ingest import ingest
    from flows.train import train_flow

    work = tmp_path_factory.mktemp("tracked")
    ingest(sources=[str(SAMPLE_RIF)], out_dir=str(work / "dataset"))
    config = TrainConfig(max_steps=STEPS, batch_size=64, curve_every=EVERY, track="mlflow",
                         tracking_uri=str(work / "mlruns"))
    out = train_flow(dataset_dir=str(work / "dataset"), repository=str(work / "repo"),
                     config=config, run_dir=str(work / "run"))
    return {"work": work, **out}


def test_the_tracked_flow_run_reads_back_with_its_scalars(flow_run: dict) -> None:
    client, run_id = client_of(flow_run["tracking"]), flow_run["tracking"]["run_id"]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "movepred-gomoku"
    assert flow_run["tracking"]["tracking_uri"] == \
        f"sqlite:///{(flow_run['work'] / 'mlruns' / DATABASE_FILE).resolve()}"
    # every curve_every steps: the loss of the mini-batches since the last point, the rate, lr
    points = list(range(EVERY, STEPS + 1, EVERY))
    for name in ("batch/loss", "batch/samples_per_s", "batch/learning_rate"):
        assert steps_of(client, run_id, name) == points, name
    assert all(m.value > 0 for m in client.get_metric_history(run_id, "batch/samples_per_s"))
    assert {m.value for m in client.get_metric_history(run_id, "batch/learning_rate")} == \
        {TrainConfig().learning_rate}
    # each split at the evaluation where the run stopped, the figures the flow reports
    metrics = flow_run["metrics"]
    splits = [s for s in ("train", "validation", "test", "game_test") if metrics.get(s)]
    assert "game_test" in splits
    for split in splits:
        for key in ("loss", "top1", "top5", "value_mse", "value_sign"):
            (point,) = client.get_metric_history(run_id, f"{split}/{key}")
            assert point.step == STEPS
            assert point.value == pytest.approx(metrics[split][key], rel=1e-6), (split, key)
    for stage, figures in metrics["validation"]["top1_by_stage"].items():
        (point,) = client.get_metric_history(run_id, scalar_name("validation", "top1_by_stage",
                                                                  stage))
        assert point.step == STEPS and point.value == pytest.approx(figures["top1"])
    assert "validation/top1_by_stage/100plus" in run.data.metrics  # the last stage, "100+"


def test_the_tracked_flow_run_has_its_config_dataset_and_files(flow_run: dict) -> None:
    client, run_id = client_of(flow_run["tracking"]), flow_run["tracking"]["run_id"]
    params = client.get_run(run_id).data.params
    for name, value in flow_run["config"].items():  # every TrainConfig field, as trained
        assert params[name] == ("" if value is None else str(value)), name
    assert params["max_steps"] == str(STEPS) and params["track"] == "mlflow"
    dataset = flow_run["work"] / "dataset"
    digest = manifest_sha256(dataset)
    assert params["dataset_manifest_sha256"] == digest
    assert params["dataset_dir"] == str(dataset.resolve()) and params["game"] == "gomoku"

    files = {f.path for f in client.list_artifacts(run_id)}
    assert {"report.md", "curves.png", "stages.png", "model_card.json"} <= files
    got = Path(client.download_artifacts(run_id, "", str(flow_run["work"] / "download")))
    for png in ("curves.png", "stages.png"):
        assert (got / png).read_bytes() == (flow_run["work"] / "run" / png).read_bytes()
    assert (got / "report.md").read_text() == (flow_run["work"] / "run" / "report.md").read_text()
    card = json.loads((got / "model_card.json").read_text())
    assert flow_run["version"] == 1 and card["version"] == 1  # the published version's card
    published = json.loads((flow_run["work"] / "repo" / "gomoku_policy" / "1" /
                            "metadata.json").read_text())
    assert card == published
    assert card["dataset"]["manifest_sha256"] == digest
    assert card["config"]["max_steps"] == STEPS and card["gate"]["passed"] is True


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_torchrun_entry_tracks_from_rank_0(tmp_path: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    from services.trainer import distributed

    dataset = write_sample_dataset(tmp_path / "ds")
    run_dir, store = tmp_path / "run", tmp_path / "mlruns"
    assert distributed.main(["--dataset", str(dataset), "--run-dir", str(run_dir), "--model",
                             "shao_f32_n2", "--steps", "4", "--batch-size", "64",
                             "--curve-every", "2", "--device", "cpu", "--log-level", "WARNING",
                             "--track", "mlflow", "--tracking-uri", str(store)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("tracking run ") and last.endswith(f" in {store_uri(str(store))[0]}")
    tracking = {"tracking_uri": store_uri(str(store))[0], "run_id": last.split()[2]}
    client, run_id = client_of(tracking), tracking["run_id"]
    assert steps_of(client, run_id, "batch/loss") == [2, 4]
    assert steps_of(client, run_id, "validation/top1") == [4]
    params = client.get_run(run_id).data.params
    assert params["world_size"] == "1" and params["model"] == "shao_f32_n2"
    assert params["dataset_manifest_sha256"] == manifest_sha256(dataset)
    assert {f.path for f in client.list_artifacts(run_id)} == {
        "metrics.json", "curves.png", "model_card.json"}
    card = json.loads(Path(client.download_artifacts(run_id, "model_card.json",
                                                     str(tmp_path / "dl"))).read_text())
    assert card["model_config"]["name"] == "shao_f32_n2" and card["gate"]["passed"] is None
    assert card["metrics"]["validation"]["n"] > 0


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_tracking_off_writes_nothing(tmp_path: Path) -> None:
    dataset = write_sample_dataset(tmp_path / "ds")
    store = tmp_path / "store"
    config = TrainConfig(model="shao_f32_n2", batch_size=64, max_steps=4, curve_every=2,
                         train_eval_rows=256, tracking_uri=str(store))
    assert config.track == "none"  # off unless asked for
    result = train(dataset, config, progress=False)
    assert result.metrics["steps"] == 4 and not store.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_an_unopenable_store_is_one_clear_error(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(TrackingError, match="cannot open an MLflow run in file:"):
        open_tracker("mlflow", (tmp_path / "plain").as_uri(), game="gomoku")
    with pytest.raises(TrackingError, match="tracking must be one of none, mlflow"):
        open_tracker("tensorboard", game="gomoku")
    with pytest.raises(ValueError, match="track must be one of none, mlflow"):
        TrainConfig(track="tensorboard")


def test_off_and_other_ranks_get_a_tracker_that_does_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for tracker in (open_tracker("none", str(store), game="gomoku"),
                    open_tracker("mlflow", str(store), game="gomoku", rank=1)):
        assert isinstance(tracker, NullTracker) and not tracker.enabled
        tracker.log_params({"a": 1})
        tracker.log_scalars(1, {"b": 2.0})
        tracker.log_artifact(tmp_path / "missing.png")
        tracker.finish()
        assert tracker.where() is None
    assert not store.exists()


def test_scalar_names_and_store_locations(tmp_path: Path) -> None:
    assert scalar_name("validation", "top1_by_stage", "100+") == \
        "validation/top1_by_stage/100plus"
    assert scalar_name("a", "b?c") == "a/b_c"
    evaluation = {"epoch": 3, "validation": {"loss": 2.0, "top1": 0.5, "top5": 0.9, "n": 10,
                                             "finite": True,
                                             "top1_by_stage": {"0-9": {"top1": 0.25, "n": 4}}}}
    assert split_scalars(evaluation) == {"validation/loss": 2.0, "validation/top1": 0.5,
                                         "validation/top5": 0.9,
                                         "validation/top1_by_stage/0-9": 0.25}
    assert store_uri(None) == (f"sqlite:///{DEFAULT_TRACKING_DIR / DATABASE_FILE}",
                               (DEFAULT_TRACKING_DIR / "artifacts").as_uri())
    folder = tmp_path / "runs"
    assert store_uri(str(folder)) == (f"sqlite:///{folder / DATABASE_FILE}",
                                      (folder / "artifacts").as_uri())
    assert store_uri(f"sqlite:///{folder}/x.db") == (f"sqlite:///{folder}/x.db",
                                                     (folder / "artifacts").as_uri())
    assert store_uri("http://127.0.0.1:5000") == ("http://127.0.0.1:5000", None)
    assert store_uri("databricks") == ("databricks", None)


def test_a_tracker_pickles_to_its_run(tmp_path: Path) -> None:
    """The flow hands the tracker to its Prefect task: it travels as the store and run id."""
    import pickle

    from services.trainer.tracking import MlflowTracker

    tracker = MlflowTracker("sqlite:///x.db", "abc")
    tracker._client = object()  # a live client stays behind
    again = pickle.loads(pickle.dumps(tracker))
    assert again.where() == {"tracking_uri": "sqlite:///x.db", "run_id": "abc"}
    assert again._client is None and again.enabled
    assert asdict(TrainConfig())["track"] == "none"
