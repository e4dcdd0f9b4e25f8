"""Capture Game speed: network-vs-greedy games per second per core, the batched engine
(services/games/capture/batch.py) against the plain one-game-at-a-time reference
(tests/capture_reference.py), in one run.

    .venv/bin/python benchmarks/capture_speed.py [--size 5] [--games 40000] [--batch-size 4096]
        [--reference-games 300] [--repeat 3]

The network is a fixed random-weight MDRNN with k = 2 (`services.models.mdrnn`, 12 weights,
seed 0) when that module is there, else a cheap torch stand-in (one 3x3 convolution), and the
output says which. It plays every other game as black against the greedy opponent, as fitness
evaluation does.

One core: torch and numba are set to one thread (and OMP/MKL before torch is imported), and
the figures are games per CPU-second of this process (`time.process_time`), so load from
other jobs on a shared machine slows the wall clock but not the figure much; wall-clock games/s
are printed too. The numba kernels are compiled (or loaded from their cache) before any timing.

With --mirror-greedy the network is run and its move then replaced by the greedy player's, so
the games last as long as greedy against greedy (the random network loses fast) at the
network's cost; the greedy call is counted in the network's share.

Printed: the batched engine's best and median games per CPU-s over --repeat runs of --games
games, the share of that time spent in the network, the reference's games per CPU-s on
--reference-games games, their ratio (best batched / reference), and a check that both play
the same games to the same ends (the reference replays the batched engine's first
--reference-games games with the same tie-break numbers). Exit status 1 if any game differs.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.host import cpu_model  # noqa: E402
from services.games.capture import batch as cb  # noqa: E402
from tests import capture_reference as ref  # noqa: E402

GOAL = 5_000  # games per second per core on 5x5, network against greedy


class TimedPolicy:
    """A torch network as a `capture_batch` policy: planes (own, opponent) from the boards,
    scores out; counts the CPU time spent in it."""

    def __init__(self, net: torch.nn.Module, mirror_greedy: bool = False) -> None:
        self.net = net
        self.mirror_greedy = mirror_greedy
        self.cpu_s = 0.0

    def __call__(self, boards: np.ndarray, to_move: np.ndarray) -> torch.Tensor:
        start = time.process_time()
        b = torch.from_numpy(boards)
        me = torch.from_numpy(to_move).view(-1, 1, 1)
        planes = torch.stack([b == me, (b != me) & (b != 0)], dim=1).float()
        with torch.no_grad():
            scores = self.net(planes)
        if self.mirror_greedy:  # the network's cost, the greedy player's (untied) choice
            flat = np.ascontiguousarray(boards.reshape(len(boards), -1))
            moves = cb.greedy_moves(flat, to_move, np.full(len(boards), 0.5))
            scores = torch.zeros(flat.shape)
            scores[torch.arange(len(boards)), torch.from_numpy(moves)] = 1.0
        self.cpu_s += time.process_time() - start
        return scores


class StandIn(torch.nn.Module):
    """One 3x3 convolution over the two planes: a cheap network of the same interface."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(2, 1, kernel_size=3, padding=1)

    def forward(self, planes: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.conv(planes)[:, 0])


def network() -> tuple[torch.nn.Module, str]:
    try:
        from services.models.mdrnn import MDRNN
    except ImportError:
        return StandIn().eval(), "torch stand-in (services.models.mdrnn is missing): one 3x3 conv"
    net = MDRNN(hidden=2, seed=0).eval()
    return net, f"MDRNN k=2, random weights (seed 0, {net.n_weights()} weights)"


def timed(fn: Callable[[], object]) -> tuple[object, float, float]:
    """(result, CPU s, wall s) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=5)
    p.add_argument("--games", type=int, default=40_000, help="games per batched run")
    p.add_argument("--batch-size", type=int, default=cb.DEFAULT_BATCH)
    p.add_argument("--reference-games", type=int, default=300)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mirror-greedy", action="store_true",
                   help="the network is run, then its move replaced by the greedy player's "
                        "(ties: the middle candidate): games as long as greedy against greedy")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    net, described = network()
    policy = TimedPolicy(net, args.mirror_greedy)
    size = args.size
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"python {platform.python_version()}, torch {torch.__version__}, numba "
          f"{numba.__version__}; threads: torch {torch.get_num_threads()}, numba "
          f"{numba.get_num_threads()}")
    if args.mirror_greedy:
        described += ", its moves replaced by the greedy player's (--mirror-greedy)"
    print(f"network: {described}; {size}x{size}, network against greedy, colours alternated")

    cb.play_games(policy, 64, size, np.random.default_rng(args.seed))  # compile / load kernels

    rates, shares = [], []
    results = None
    for i in range(args.repeat):
        policy.cpu_s = 0.0
        results, cpu, wall = timed(lambda i=i: cb.play_games(
            policy, args.games, size, np.random.default_rng(args.seed + i),
            batch_size=args.batch_size))
        rates.append(args.games / cpu)
        shares.append(policy.cpu_s / cpu)
        print(f"  batched run {i + 1}: {args.games} games in {cpu:.2f} CPU s ({wall:.2f} s wall,"
              f" {args.games / wall:,.0f} games/s wall); network {policy.cpu_s:.2f} CPU s")
    assert isinstance(results, cb.Results)
    best = max(rates)
    print(f"batched engine: best {best:,.0f}, median {statistics.median(rates):,.0f} games per "
          f"CPU-s ({args.repeat} runs of {args.games} games, batches of {args.batch_size}); "
          f"network share {statistics.median(shares):.0%}; the network's fitness "
          f"{results.fitness:+.3f}, {results.plies.mean():.1f} moves a game")

    n = args.reference_games
    rng = np.random.default_rng(args.seed)
    batched = cb.play_games(policy, n, size, np.random.default_rng(args.seed), batch_size=n)
    uniforms = cb.tie_uniforms(rng, size, n)
    colours = cb.network_colours(n)

    def reference() -> list[int]:
        return [ref.play_game(policy, size, int(colours[j]), uniforms[:, j])[0]
                for j in range(n)]

    outcomes, cpu, wall = timed(reference)
    assert isinstance(outcomes, list)
    ref_rate = n / cpu
    same = outcomes == batched.outcomes.tolist()
    print(f"reference (one game at a time, plain Python): {ref_rate:,.1f} games per CPU-s "
          f"({n} games in {cpu:.2f} CPU s, {wall:.2f} s wall)")
    print(f"ratio batched / reference: {best / ref_rate:,.0f}x; the same {n} games end alike: "
          f"{'yes' if same else 'NO'}")
    if size == 5:
        print(f"goal >= {GOAL:,} games/s per core on 5x5: "
              f"{'met' if best >= GOAL else 'NOT met'} ({best:,.0f})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
