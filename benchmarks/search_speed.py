"""Search tree speed: the interpreted PUCT tree (tests/reference_search.py) against the compiled
one (`services.search.mcts`), in the same run.

1. Tree work per playout: a zero-cost evaluator (precomputed uniform logits, no value), the
   same position and budget for both trees, Gomoku 15x15 and Go 19x19; µs of CPU per playout
   and the ratio. Numba compiles before the clock starts (a warm-up search).
2. GenMove playouts/s with a network in this process on CPU (torch threads 1): the Gomoku
   network `--config` (default the served one) with seeded random weights, scripted, searched
   by both trees; the ratio.

Usage: .venv/bin/python benchmarks/search_speed.py [--visits 3200] [--genmove-visits 800]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the interpreted reference tree

import reference_search  # noqa: E402

from services.games.go.game import GO  # noqa: E402
from services.games.gomoku.rules import GomokuState  # noqa: E402
from services.search import mcts  # noqa: E402


@dataclass(frozen=True)
class Output:
    logits: np.ndarray
    values: np.ndarray | None = None
    model_name: str = "zero"
    model_version: str = "1"


class ZeroCost:
    """Uniform logits, precomputed: the evaluator costs (almost) nothing."""

    def __init__(self, points: int, batch: int) -> None:
        self.out = [Output(np.zeros((n, points), np.float32)) for n in range(batch + 1)]

    def infer(self, boards: np.ndarray) -> Output:
        return self.out[len(boards)]


def per_playout_us(module, state, evaluator, visits: int, repeats: int = 3) -> float:
    """Best of `repeats`: CPU µs per playout of a `visits` search of `state`."""
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        r = module.search(state, evaluator, max_visits=visits, batch_size=16)
        best = min(best, (time.process_time() - t) / r.new_visits * 1e6)
    return best


def tree_work(visits: int) -> list[tuple[str, float, float]]:
    gomoku = GomokuState.from_moves([112, 113, 97])
    go = GO.start(19)
    for m in (72, 288, 60, 300):
        go = go.play(m)
    rows = []
    for name, state in (("Gomoku 15x15", gomoku), ("Go 19x19", go)):
        ev = ZeroCost(state.game.policy_size(state.size), 16)
        mcts.search(state, ev, max_visits=64)  # compile (or load) the kernels
        old = per_playout_us(reference_search, state, ev, max(visits // 4, 200))
        new = per_playout_us(mcts, state, ev, visits)
        rows.append((name, old, new))
    return rows


def genmove(visits: int, config: str) -> tuple[float, float]:
    import tempfile

    import torch

    from services.models.configs import build
    from services.models.export import export_torchscript
    from services.models.value import split_outputs

    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.pt"
        export_torchscript(build(config).eval(), path)
        model = torch.jit.load(str(path), map_location="cpu").eval()

    class Torch:
        def infer(self, boards: np.ndarray) -> Output:
            with torch.inference_mode():
                logits, values = split_outputs(model(torch.from_numpy(boards)))
            v = values.to(torch.float32).numpy() if values is not None else None
            return Output(logits.to(torch.float32).numpy(), v)

    state = GomokuState.from_moves([112, 113, 97])
    ev = Torch()
    mcts.search(state, ev, max_visits=64)
    rates = []
    for module in (reference_search, mcts):
        t = time.perf_counter()
        r = module.search(state, ev, max_visits=visits, batch_size=16)
        rates.append(r.new_visits / (time.perf_counter() - t))
    return rates[0], rates[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=3200)
    parser.add_argument("--genmove-visits", type=int, default=800)
    parser.add_argument("--config", default="", help="network config (default: Gomoku's)")
    args = parser.parse_args(argv)
    print(f"cpus={os.cpu_count()}")
    for name, old, new in tree_work(args.visits):
        print(f"{name}: tree work per playout {old:.1f} µs interpreted, {new:.1f} µs compiled, "
              f"{old / new:.1f}x")
    config = args.config or GomokuState().game.default_config
    old, new = genmove(args.genmove_visits, config)
    print(f"GenMove Gomoku ({config}, CPU, 1 torch thread): {old:.0f} playouts/s interpreted, "
          f"{new:.0f} compiled, {new / old:.1f}x")


if __name__ == "__main__":
    main()
