"""Move-order inference speed: the prefix-cached, batched cost against a naive one, in one run.

    .venv/bin/python benchmarks/move_order.py [--game gomoku|go] [--size S] [--stones 20]
        [--positions 3] [--iterations 300] [--threads 1] [--seed 0] [--config NAME]

The policy is the game's demo network (`Game.default_config`: shao_f32_n2_v for Gomoku,
go_res_b2c32_v for Go) with random weights, in this process (torch, `--threads` threads, set
explicitly): the speed of a network call does not depend on its weights. Positions: Gomoku,
the first `--stones` moves of the shipped self-play games (data/sample/selfplay.rif); Go,
`--stones` uniformly random moves from the empty board that capture nothing (seeded).

For each position the greedy order is computed once, then the same annealing run (the
production loop, `services.move_order.annealing.anneal`, same seed, same iterations, one
restart) is timed twice, interleaved position by position so load on a shared machine hits both
alike:

* fast: `PrefixScorer.rescore` (positions before the first changed ply kept with their
  policies, the changed ones whose network input was not evaluated before in one batched
  call);
* naive: every prefix of every candidate replayed from the empty board and evaluated in its
  own call (one call per prefix).

Printed: per position and in total, iterations/s and boards/s (positions evaluated by the
network per second) of each, evaluator calls, and the ratio of the fast run time to the naive
one. The two runs can part ways only where batched and single-board network outputs differ in
their last bits; each line prints both final geometric means. Also printed: the time of the
paper's recipe (greedy + 5 restarts of `default_iterations(stones)`) on one position at the
fast rate measured here, as an estimate.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.games.base import Game, Position  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.models import configs  # noqa: E402
from services.move_order.annealing import AnnealingParams, anneal, default_iterations  # noqa: E402
from services.move_order.greedy import greedy_order  # noqa: E402
from services.move_order.likelihood import PrefixScorer, Scored, scored  # noqa: E402
from services.move_order.problem import Problem, problem_from_stones  # noqa: E402
from services.records.rif import RifGame, read_rif  # noqa: E402

SAMPLE = ROOT / "data" / "sample" / "selfplay.rif"


@dataclass(frozen=True)
class Output:
    logits: np.ndarray
    model_name: str
    model_version: str = "random"


class TorchPolicy:
    """A network in this process as a `PolicyEvaluator` (the value output is dropped)."""

    def __init__(self, model: torch.nn.Module, name: str) -> None:
        self.model = model.eval()
        self.name = name

    def infer(self, boards: np.ndarray) -> Output:
        x = torch.from_numpy(np.ascontiguousarray(boards, dtype=np.int8))
        with torch.inference_mode():
            out = self.model(x)
        logits = out[0] if isinstance(out, tuple) else out
        return Output(logits.to(torch.float32).numpy(), self.name)


class NaiveScorer(PrefixScorer):
    """The reference cost: every prefix replayed from the start, one call per prefix, no
    cache of logits by input."""

    def __init__(self, problem: Problem, evaluator: TorchPolicy) -> None:
        super().__init__(problem, evaluator, cache_size=0)

    def rescore(self, current: Scored, order, first: int) -> Scored | None:
        states = self.problem.replay(order)
        if states is None:
            return None
        all_states = [self.problem.start, *states]
        policies = [self.policies([s])[0] for s in all_states[:-1]]
        return scored(order, all_states, policies)


def gomoku_positions(game: Game, stones: int, count: int) -> list[tuple[list[int], list[int]]]:
    out = []
    for record in read_rif(SAMPLE):
        if isinstance(record, RifGame) and len(record.moves) >= stones:
            moves = list(record.moves[:stones])
            out.append((moves[0::2], moves[1::2]))
            if len(out) == count:
                break
    return out


def go_positions(game: Game, size: int, stones: int, count: int,
                 seed: int) -> list[tuple[list[int], list[int]]]:
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        state: Position = game.start(size)
        moves: list[int] = []
        while len(moves) < stones:
            legal = np.flatnonzero(state.legal_mask()[: size * size])
            move = int(rng.choice(legal))
            after = state.play(move)
            if np.count_nonzero(after.board) == len(moves) + 1:  # no capture
                state = after
                moves.append(move)
        out.append((moves[0::2], moves[1::2]))
    return out


def timed_anneal(scorer: PrefixScorer, initial: Scored, iterations: int, seed: int,
                 params: AnnealingParams) -> tuple[float, int, int, float]:
    calls, boards = scorer.calls, scorer.boards
    start = time.perf_counter()
    result = anneal(scorer, initial, iterations, np.random.default_rng(seed), params)
    elapsed = time.perf_counter() - start
    return elapsed, scorer.calls - calls, scorer.boards - boards, result.best.geometric_mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="gomoku")
    parser.add_argument("--size", type=int, default=0, help="board size (0: the game's default)")
    parser.add_argument("--stones", type=int, default=20)
    parser.add_argument("--positions", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default="", help="network config (default: the game's)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    game = get_game(args.game)
    size = args.size or game.default_size
    config = args.config or game.default_config
    policy = TorchPolicy(configs.build(config), config)
    if game.record_formats and SAMPLE.suffix in game.record_formats:
        stone_sets = gomoku_positions(game, args.stones, args.positions)
    else:
        stone_sets = go_positions(game, size, args.stones, args.positions, args.seed)
    params = AnnealingParams(restarts=1, seed=args.seed)
    print(f"{game.title} {size}x{size}, {args.stones} stones, {len(stone_sets)} positions, "
          f"{args.iterations} iterations, network {config} (random weights), "
          f"torch threads {torch.get_num_threads()}")
    totals = {"fast": [0.0, 0, 0], "naive": [0.0, 0, 0]}
    greedy_s = 0.0
    for i, (black, white) in enumerate(stone_sets):
        problem: Problem = problem_from_stones(game, black, white, size=size)
        fast = PrefixScorer(problem, policy)
        naive = NaiveScorer(problem, policy)
        t0 = time.perf_counter()
        greedy = greedy_order(fast)
        greedy_s += time.perf_counter() - t0
        initial = naive.score(greedy.order)
        assert initial is not None
        line = [f"position {i}:"]
        for name, scorer, start in (("fast", fast, greedy), ("naive", naive, initial)):
            elapsed, calls, boards, gm = timed_anneal(scorer, start, args.iterations,
                                                      args.seed + i, params)
            t = totals[name]
            t[0] += elapsed
            t[1] += calls
            t[2] += boards
            line.append(f"{name} {args.iterations / elapsed:8.1f} it/s {boards / elapsed:9.0f} "
                        f"boards/s {calls:6d} calls, best geometric mean {gm:.4f};")
        print(" ".join(line))
    n_it = args.iterations * len(stone_sets)
    for name, (elapsed, calls, boards) in totals.items():
        print(f"{name:5s}: {n_it / elapsed:8.1f} iterations/s, {boards / elapsed:9.0f} boards/s, "
              f"{calls} calls, {boards} boards, {elapsed:.2f} s")
    ratio = totals["fast"][0] / totals["naive"][0]
    print(f"run time fast / naive: {ratio:.3f} (naive / fast: {1 / ratio:.1f}x)")
    per_it = totals["fast"][0] / n_it
    recipe = default_iterations(args.stones) * 5
    print(f"paper's recipe on one position (greedy + 5 x {default_iterations(args.stones)} "
          f"iterations) at the fast rate: {greedy_s / len(stone_sets) + recipe * per_it:.1f} s "
          "(estimate)")


if __name__ == "__main__":
    main()
