"""Prefect flow `train`: shards -> trained policy -> gate -> TorchScript -> next Triton version.

Run: python -m flows.train --dataset artifacts/dataset --repository model_repository
     [--triton-url 127.0.0.1:8001]   (then Triton is asked to load the new version)

A model is published only if it passes the gate (finite outputs; validation top-1 not below the
published version's minus a tolerance); otherwise the serving version stays and the flow's
result and artifact say why. Plots (learning curves, top-1 by game stage) are written as PNG
next to the checkpoint and attached to the run as a markdown artifact.
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

from services.trainer import gate
from services.trainer.export import export_torchscript
from services.trainer.plots import plot_curves, plot_stages
from services.trainer.train import TrainConfig, TrainResult, train
from services.triton.client import PolicyClient
from services.triton.publisher import publish

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = str(ROOT / "artifacts" / "dataset")
DEFAULT_REPOSITORY = str(ROOT / "model_repository")
DEFAULT_RUN_DIR = str(ROOT / "artifacts" / "train")
MODEL_NAME = "gomoku_policy"


@task(retries=1, retry_delay_seconds=2)
def fit(dataset_dir: str, config: TrainConfig, checkpoint: str | None) -> TrainResult:
    """Train; a retry resumes from the checkpoint instead of starting over."""
    return train(Path(dataset_dir), config, checkpoint=Path(checkpoint) if checkpoint else None)


@task
def export_and_publish(result: TrainResult, repository: str, model_name: str) -> int:
    """Export, verify against the eager model, then publish atomically as the next version."""
    with tempfile.TemporaryDirectory() as tmp:
        model_file = Path(tmp) / "model.pt"
        diff = export_torchscript(result.model, model_file)
        metadata = {**result.summary(), "export_max_abs_diff": diff}
        return publish(model_file, Path(repository), model_name, metadata=metadata)


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
            run_dir: Path, model_name: str) -> str:
    m = result.metrics
    curves = plot_curves(result.history, run_dir / "curves.png") if result.history else None
    stages = plot_stages(m["validation"].get("top1_by_stage", {}), run_dir / "stages.png",
                         "validation top-1 by game stage")
    rows = "\n".join(f"| {s} | {m[s]['top1']:.3f} | {m[s]['top5']:.3f} | {m[s]['loss']:.3f} | "
                     f"{m[s]['n']} |" for s in ("validation", "test"))
    outcome = (f"published **{model_name} v{version}**" if version is not None
               else "**not published**")
    return (f"# Train {result.config.model}: {outcome}\n\nGate: {decision.reason}\n\n"
            f"| split | top-1 | top-5 | loss | rows |\n|---|---|---|---|---|\n{rows}\n\n"
            f"{m['steps']} steps, {m['epochs']} epochs, stopped by {m['stopped']}, "
            f"{m['samples_per_s']} samples/s\n\n"
            + (_png_markdown(curves) + "\n\n" if curves else "") + _png_markdown(stages))


@flow(name="train")
def train_flow(
    dataset_dir: str = DEFAULT_DATASET,
    repository: str = DEFAULT_REPOSITORY,
    model: str = "shao_f32_n2",
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
    model_name: str = MODEL_NAME,
) -> dict:
    """Train, gate, export, publish; returns the published version (or None) and metrics."""
    config = TrainConfig(model=model, max_steps=max_steps, max_epochs=max_epochs,
                         max_seconds=max_seconds, batch_size=batch_size,
                         learning_rate=learning_rate, lr_schedule=lr_schedule,
                         patience=patience, device=device, seed=seed)
    out_dir = Path(run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = out_dir / "checkpoint.pt"
    checkpoint.unlink(missing_ok=True)  # a new flow run starts fresh; task retries resume
    result = fit(dataset_dir, config, str(checkpoint))
    decision = gate.check(result.metrics, Path(repository), model_name, Path(dataset_dir),
                          tolerance=gate_tolerance, device=device)
    version = None
    if decision.passed:
        version = export_and_publish(result, repository, model_name)
        if triton_url:
            load_in_triton(triton_url, model_name)
    report = _report(result, decision, version, out_dir, model_name)
    (out_dir / "report.md").write_text(report)
    create_markdown_artifact(key="train-summary", markdown=report)
    return {"version": version, "published": decision.passed, "gate": decision.reason,
            "config": asdict(config), "metrics": result.metrics, "run_dir": str(out_dir)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=DEFAULT_DATASET)
    parser.add_argument("--repository", default=DEFAULT_REPOSITORY)
    parser.add_argument("--model", default="shao_f32_n2")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--patience", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--gate-tolerance", type=float, default=0.01)
    parser.add_argument("--run-dir", default=DEFAULT_RUN_DIR)
    parser.add_argument("--triton-url", default=None)
    args = parser.parse_args(argv)
    out = train_flow(dataset_dir=args.dataset, repository=args.repository, model=args.model,
                     max_steps=args.steps, max_epochs=args.epochs, max_seconds=args.seconds,
                     batch_size=args.batch_size, patience=args.patience, device=args.device,
                     gate_tolerance=args.gate_tolerance, run_dir=args.run_dir,
                     triton_url=args.triton_url)
    print(json.dumps({k: out[k] for k in ("version", "published", "gate")}, indent=2))
    print(f"metrics, plots and report in {out['run_dir']}")


if __name__ == "__main__":
    main()
