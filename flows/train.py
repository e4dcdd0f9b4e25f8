"""Prefect flow `train`: shards -> trained policy -> TorchScript -> next version in Triton.

Run: python -m flows.train --dataset artifacts/dataset --repository model_repository
     [--triton-url 127.0.0.1:8001]   (then Triton is asked to load the new version)
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from services.trainer.export import export_torchscript
from services.trainer.train import TrainConfig, TrainResult, train
from services.triton.client import PolicyClient
from services.triton.publisher import publish

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = str(ROOT / "artifacts" / "dataset")
DEFAULT_REPOSITORY = str(ROOT / "model_repository")
MODEL_NAME = "gomoku_policy"


@task
def fit(dataset_dir: str, config: TrainConfig) -> TrainResult:
    return train(Path(dataset_dir), config)


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


@flow(name="train")
def train_flow(
    dataset_dir: str = DEFAULT_DATASET,
    repository: str = DEFAULT_REPOSITORY,
    model: str = "shao_f32_n2",
    max_steps: int = 1500,
    max_seconds: float = 0.0,
    batch_size: int = 32,
    learning_rate: float = 0.003,
    device: str = "cpu",
    seed: int = 0,
    triton_url: str | None = None,
    model_name: str = MODEL_NAME,
) -> dict:
    """Train, export, publish; returns the published version and the metrics."""
    config = TrainConfig(model=model, max_steps=max_steps, max_seconds=max_seconds,
                         batch_size=batch_size, learning_rate=learning_rate, device=device,
                         seed=seed)
    result = fit(dataset_dir, config)
    version = export_and_publish(result, repository, model_name)
    if triton_url:
        load_in_triton(triton_url, model_name)
    m = result.metrics
    create_markdown_artifact(
        key="train-summary",
        markdown=(f"# Train {model} -> {model_name} v{version}\n\n"
                  f"| split | top-1 | top-5 | loss | rows |\n|---|---|---|---|---|\n"
                  + "\n".join(f"| {s} | {m[s]['top1']:.3f} | {m[s]['top5']:.3f} | "
                              f"{m[s]['loss']:.3f} | {m[s]['n']} |" for s in ("validation", "test"))
                  + f"\n\n{m['steps']} steps, {m['samples_per_s']} samples/s"),
    )
    return {"version": version, "config": asdict(config), "metrics": m}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=DEFAULT_DATASET)
    parser.add_argument("--repository", default=DEFAULT_REPOSITORY)
    parser.add_argument("--model", default="shao_f32_n2")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--triton-url", default=None)
    args = parser.parse_args(argv)
    out = train_flow(dataset_dir=args.dataset, repository=args.repository, model=args.model,
                     max_steps=args.steps, max_seconds=args.seconds, device=args.device,
                     triton_url=args.triton_url)
    print(json.dumps({"version": out["version"], "metrics": out["metrics"]}, indent=2))


if __name__ == "__main__":
    main()
