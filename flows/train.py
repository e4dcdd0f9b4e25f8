"""Prefect flow `train`: shards -> trained policy -> gate -> TorchScript -> next Triton version.

Run: python -m flows.train --dataset artifacts/dataset --repository model_repository
     [--triton-url 127.0.0.1:8001]   (then Triton is asked to load the new version)
     python -m flows.train --dataset artifacts/go-dataset --model go_res_b2c32 --seconds 600

A model is published only if it passes the gate (finite outputs; validation top-1 not below the
published version's minus a tolerance); otherwise the serving version stays and the flow's
result and artifact say why. Plots (learning curves, top-1 by game stage) are written as PNG
next to the checkpoint and attached to the run as a markdown artifact.

The dataset's game (from its shards) picks the default model configuration (`DEFAULT_MODELS`)
and model name (`gomoku_policy`, `go_policy`); a configuration of the other game is refused. A
Go model goes through the same training, metrics (train / validation / test every epoch), gate
and checked TorchScript export (on random Go planes and real validation positions). It is
published only where the repository (or the tracked `model_repository/` template) has a
`config.pbtxt` for the model name whose input dims match the dataset's boards; otherwise it is
written to `<run_dir>/model.pt` and the result says why (a version Triton cannot load would
only break the model's next load).
"""

from __future__ import annotations

import argparse
import base64
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from services.dataset.loader import dataset_game
from services.dataset.shards import read_split
from services.models.export import export_torchscript
from services.trainer import gate
from services.trainer.plots import plot_curves, plot_stages
from services.trainer.train import TrainConfig, TrainResult, train
from services.triton.client import PolicyClient
from services.triton.publisher import config_file, config_io, dims_accept, publish

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = str(ROOT / "artifacts" / "dataset")
DEFAULT_REPOSITORY = str(ROOT / "model_repository")
DEFAULT_RUN_DIR = str(ROOT / "artifacts" / "train")
MODEL_NAME = "gomoku_policy"
DEFAULT_MODELS = {"gomoku": "shao_f32_n2_v", "go": "go_res_b2c32_v"}  # small, with a value head
MODEL_NAMES = {"gomoku": MODEL_NAME, "go": "go_policy"}
CHECK_ROWS = 64  # real validation positions the export check runs on, next to random ones


@task(retries=1, retry_delay_seconds=2)
def fit(dataset_dir: str, config: TrainConfig, checkpoint: str | None) -> TrainResult:
    """Train; a retry resumes from the checkpoint instead of starting over."""
    return train(Path(dataset_dir), config, checkpoint=Path(checkpoint) if checkpoint else None)


def unservable_reason(repository: str, model_name: str, dataset_dir: str) -> str | None:
    """Why a model of this dataset cannot be published as `model_name`, or None if it can:
    there must be a config.pbtxt (the repository's, else the tracked template) whose input
    dims take the dataset's board shape ([s, s] Gomoku cells, [4, s, s] Go planes; a -1 dim,
    as in the tracked go_policy config, takes any size)."""
    game, size = dataset_game(dataset_dir, "train")
    shape = [size, size] if game == "gomoku" else [4, size, size]
    config = config_file(Path(repository), model_name)
    if config is None:
        return (f"no Triton config.pbtxt for {model_name!r} in {repository} or the tracked "
                "templates")
    io = config_io(config)
    dims = list(io[0]) if io is not None else None
    if dims is None or not dims_accept(dims, shape):  # -1: any size
        return f"{config} takes input dims {dims}, this {game} dataset's boards are {shape}"
    return None


def _export(result: TrainResult, model_file: Path, dataset_dir: str) -> float:
    """TorchScript export checked against the eager model on random inputs of the dataset's
    game and on real validation positions; return the max abs difference."""
    game, size = dataset_game(dataset_dir, "validation")
    boards = read_split(Path(dataset_dir), "validation")[0][:CHECK_ROWS]
    return export_torchscript(result.model, model_file, board_size=size, game=game,
                              boards=boards)


@task
def export_and_publish(result: TrainResult, repository: str, model_name: str,
                       dataset_dir: str) -> int:
    """Export, verify against the eager model, then publish atomically as the next version."""
    with tempfile.TemporaryDirectory() as tmp:
        model_file = Path(tmp) / "model.pt"
        diff = _export(result, model_file, dataset_dir)
        metadata = {**result.summary(), "export_max_abs_diff": diff}
        return publish(model_file, Path(repository), model_name, metadata=metadata)


@task
def export_to_run_dir(result: TrainResult, run_dir: str, dataset_dir: str) -> dict:
    """Export and verify into the run folder (games the repository cannot serve yet)."""
    model_file = Path(run_dir) / "model.pt"
    diff = _export(result, model_file, dataset_dir)
    metadata = {**result.summary(), "export_max_abs_diff": diff}
    (Path(run_dir) / "model.json").write_text(json.dumps(metadata, indent=2, default=str) + "\n")
    return {"path": str(model_file), "export_max_abs_diff": diff}


@task(retries=3, retry_delay_seconds=2)
def load_in_triton(triton_url: str, model_name: str) -> None:
    """Ask a running Triton (explicit model control) to load the newest version."""
    client = PolicyClient(triton_url, model_name)
    try:
        client.load_model(model_name)
    finally:
        client.close()


def _png_markdown(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f"![{path.stem}](data:image/png;base64,{data})"


def _report(result: TrainResult, decision: gate.GateDecision, version: int | None,
            run_dir: Path, model_name: str, exported: str | None = None) -> str:
    m = result.metrics
    curves = plot_curves(result.history, run_dir / "curves.png") if result.history else None
    stages = plot_stages(m["validation"].get("top1_by_stage", {}), run_dir / "stages.png",
                         "validation top-1 by game stage")
    splits = [s for s in ("train", "validation", "test") if m.get(s)]
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
    model: str | None = None,
    max_steps: int = 1500,
    max_epochs: int = 1000,
    max_seconds: float = 0.0,
    batch_size: int = 32,
    learning_rate: float = 0.003,
    lr_schedule: str = "constant",
    patience: int = 0,
    device: str = "cpu",
    seed: int = 0,
    gate_tolerance: float = 0.01,
    run_dir: str = DEFAULT_RUN_DIR,
    triton_url: str | None = None,
    model_name: str | None = None,
    num_threads: int = 0,
) -> dict:
    """Train, gate, export, publish; returns the published version (or None) and metrics.

    `model` and `model_name` default to the dataset's game's (`DEFAULT_MODELS`,
    `MODEL_NAMES`); `num_threads` > 0 sets torch's intra-op threads (see TrainConfig).
    """
    game, _ = dataset_game(dataset_dir, "train")
    model = model or DEFAULT_MODELS[game]
    model_name = model_name or MODEL_NAMES[game]
    config = TrainConfig(model=model, max_steps=max_steps, max_epochs=max_epochs,
                         max_seconds=max_seconds, batch_size=batch_size,
                         learning_rate=learning_rate, lr_schedule=lr_schedule,
                         patience=patience, device=device, seed=seed, num_threads=num_threads)
    out_dir = Path(run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = out_dir / "checkpoint.pt"
    checkpoint.unlink(missing_ok=True)  # a new flow run starts fresh; task retries resume
    result = fit(dataset_dir, config, str(checkpoint))
    decision = gate.check(result.metrics, Path(repository), model_name, Path(dataset_dir),
                          tolerance=gate_tolerance, device=device)
    version = None
    exported = None
    reason = decision.reason
    unservable = unservable_reason(repository, model_name, dataset_dir)
    if decision.passed and unservable is None:
        version = export_and_publish(result, repository, model_name, dataset_dir)
        if triton_url:
            load_in_triton(triton_url, model_name)
    elif decision.passed:
        exported = export_to_run_dir(result, str(out_dir), dataset_dir)["path"]
        reason += f"; exported to the run folder, not published: {unservable}"
        decision = gate.GateDecision(decision.passed, reason, decision.candidate_top1,
                                     decision.serving_version, decision.serving_top1)
    report = _report(result, decision, version, out_dir, model_name, exported)
    (out_dir / "report.md").write_text(report)
    create_markdown_artifact(key="train-summary", markdown=report)
    return {"version": version, "published": version is not None, "gate": reason,
            "exported": exported, "game": game, "model_name": model_name,
            "config": asdict(config), "metrics": result.metrics, "run_dir": str(out_dir)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=DEFAULT_DATASET)
    parser.add_argument("--repository", default=DEFAULT_REPOSITORY)
    parser.add_argument("--model", default=None,
                        help=f"model config (default by the dataset's game: {DEFAULT_MODELS})")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--patience", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--gate-tolerance", type=float, default=0.01)
    parser.add_argument("--run-dir", default=DEFAULT_RUN_DIR)
    parser.add_argument("--triton-url", default=None)
    parser.add_argument("--learning-rate", type=float, default=0.003)
    parser.add_argument("--lr-schedule", default="constant", choices=("constant", "cosine"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args(argv)
    out = train_flow(dataset_dir=args.dataset, repository=args.repository, model=args.model,
                     max_steps=args.steps, max_epochs=args.epochs, max_seconds=args.seconds,
                     batch_size=args.batch_size, patience=args.patience, device=args.device,
                     gate_tolerance=args.gate_tolerance, run_dir=args.run_dir,
                     triton_url=args.triton_url, learning_rate=args.learning_rate,
                     lr_schedule=args.lr_schedule, seed=args.seed, num_threads=args.threads)
    m = out["metrics"]
    summary = {k: out[k] for k in ("version", "published", "gate", "exported")}
    keys = ("top1", "top5", "loss", "value_mse", "value_sign", "n")
    summary["metrics"] = {s: {k: m[s][k] for k in keys if k in m[s]}
                          for s in ("train", "validation", "test") if m.get(s)}
    summary["run"] = {k: m[k] for k in ("steps", "epochs", "stopped", "seconds",
                                        "samples_per_s", "train_rows")}
    print(json.dumps(summary, indent=2))
    print(f"metrics, plots and report in {out['run_dir']}")


if __name__ == "__main__":
    main()
