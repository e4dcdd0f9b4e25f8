"""In-process policy evaluators for search-service tests that check plumbing (who gets through,
how a client reconnects), not what a network answers: those tests need no Triton."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Output:
    logits: np.ndarray
    model_name: str = "uniform"
    model_version: str = "1"


class UniformEvaluator:
    """Every point equally likely (any board size)."""

    def infer(self, boards: np.ndarray) -> Output:
        n, size = boards.shape[0], boards.shape[-1]
        return Output(np.zeros((n, size * size), dtype=np.float32))


class HungEvaluator:
    """Every call blocks until `release` is set (at most a minute): a Triton that took the call
    and hangs. `calls` holds the boards of each call."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.release = threading.Event()

    def infer(self, boards: np.ndarray) -> Output:
        self.calls.append(len(boards))
        self.release.wait(60)
        n, size = boards.shape[0], boards.shape[-1]
        return Output(np.zeros((n, size * size), dtype=np.float32))
