"""PNG plots of a training run: learning curves and top-1 accuracy by game stage."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: files only
import matplotlib.pyplot as plt


def plot_curves(history: list[dict], path: Path, curve: list[dict] | None = None) -> Path:
    """Learning curves against the step: the training loss every N steps (`curve`: the mean
    mini-batch loss since the previous point, so a run of one epoch still draws a line), and
    the loss and top-1 of every split measured at each evaluation in `history` (epoch ends,
    and where a run stopped)."""
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    if curve:
        ax_loss.plot([c["step"] for c in curve], [c["loss"] for c in curve], lw=1,
                     color="0.55", label="train mini-batches")
    steps = [h.get("step", h["epoch"]) for h in history]
    for split in ("train", "validation", "test"):
        if history and all(split in h for h in history):
            ax_loss.plot(steps, [h[split]["loss"] for h in history], marker="o", label=split)
            ax_acc.plot(steps, [h[split]["top1"] for h in history], marker="o", label=split)
    ax_loss.set(xlabel="step", ylabel="loss", title="loss")
    ax_acc.set(xlabel="step", ylabel="top-1 accuracy", title="top-1 (legal moves only)")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_stages(by_stage: dict, path: Path, title: str = "top-1 by game stage") -> Path:
    labels = list(by_stage)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(labels, [by_stage[k]["top1"] for k in labels])
    for i, k in enumerate(labels):
        ax.annotate(str(by_stage[k]["n"]), (i, by_stage[k]["top1"]), ha="center",
                    va="bottom", fontsize=7)
    ax.set(xlabel="moves played (bucket)", ylabel="top-1 accuracy", title=title, ylim=(0, 1))
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
