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


@dataclass(frozen=True)
class ValueOutput:
    logits: np.ndarray
    values: np.ndarray | None
    model_name: str = "hash"
    model_version: str = "1"


class HashEvaluator:
    """A deterministic stand-in for a network: each board's logits (and, with `values`, its
    value) are drawn from a generator seeded with a hash of the board's bytes and `seed`, so
    two searches asking about the same positions get the same answers, whatever the order.
    `points`: logits per board (default size * size, + 1 with `has_pass`)."""

    def __init__(self, seed: int = 0, values: bool = False, has_pass: bool = False,
                 scale: float = 1.0) -> None:
        self.seed = seed
        self.values = values
        self.has_pass = has_pass
        self.scale = scale
        self.calls: list[int] = []

    def infer(self, boards: np.ndarray) -> ValueOutput:
        import zlib

        self.calls.append(len(boards))
        n, size = boards.shape[0], boards.shape[-1]
        points = size * size + int(self.has_pass)
        logits = np.empty((n, points), np.float32)
        values = np.empty(n, np.float32)
        for k, board in enumerate(boards):
            rng = np.random.default_rng([self.seed, zlib.crc32(board.tobytes())])
            logits[k] = rng.normal(0.0, self.scale, points)
            values[k] = rng.uniform(-1.0, 1.0)
        return ValueOutput(logits, values if self.values else None)
