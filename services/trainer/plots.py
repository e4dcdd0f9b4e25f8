"""PNG plots of a training run: learning curves and top-1 accuracy by game stage."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: files only
import matplotlib.pyplot as plt


def plot_curves(history: list[dict], path: Path) -> Path:
    """Loss and top-1 per epoch for every split found in `history`."""
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    epochs = [h["epoch"] for h in history]
    for split in ("train", "validation", "test"):
        if all(split in h for h in history):
            ax_loss.plot(epochs, [h[split]["loss"] for h in history], marker="o", label=split)
            ax_acc.plot(epochs, [h[split]["top1"] for h in history], marker="o", label=split)
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="top-1 accuracy", title="top-1 (legal moves only)")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
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
