"""Move-order inference speed: the prefix-cached, batched cost against a naive one, in one run.

    .venv/bin/python benchmarks/move_order.py [--game gomoku|go] [--size S] [--stones 20]
        [--positions 3] [--iterations 300] [--threads 1] [--seed 0] [--config NAME]
        [--model model.pt | --triton MODEL_REPOSITORY] [--naive 1] [--budget 0]
        [--variants 5x1,20x1,5x4,10x2] [--recipe] [--profile]

The policy is the game's demo network (`Game.default_config`: shao_f32_n2_v for Gomoku,
go_res_b2c32_v for Go) with random weights, in this process (torch, `--threads` threads, set
explicitly): the speed of a network call does not depend on its weights. `--model` runs a
TorchScript policy instead (a published model.pt: trained weights, so the final geometric
means mean something); `--triton` starts Triton on a model repository and evaluates through
the project's gRPC client, the served path, where a call also pays its round trip.
Positions: Gomoku, the first `--stones` moves of the shipped self-play games
(data/sample/selfplay.rif); Go, `--stones` uniformly random moves from the empty board that
capture nothing (seeded).

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
paper's recipe (greedy + 5 restarts of `default_iterations(stones)`, one after another) on one
position at the single-chain rate measured here, as a wall-time estimate: an upper bound for the
served default, which `--recipe` measures.

Then (`--budget` > 0) the paper's schedule against lock-step chains, whole `infer_order` runs
(greedy included) on the same positions with the same budget of boards evaluated: the paper's
recipe costs `--budget` candidates per position, 5 restarts of budget / 5 iterations one after
another with one evaluator call per candidate (`lockstep=False`), and its boards are the
budget of each `--variants` entry RxC, R chains of C candidates per step advanced in lock step,
one call per step, for budget / (R * C) steps to start with: a variant whose boards differ
from the paper's run by more than 3% is run again with its steps scaled by the ratio, up to
`RERUNS` times (the boards a candidate sends depend on how often its inputs were seen, which
differs between schedules), and the last run is the one reported. Printed: the ratios of wall
time, boards/s, iterations/s (candidates costed per second: the paper's iterations) and the
mean over positions of the final geometric mean, each variant against the paper's recipe.
Variants run interleaved position by position, so load on a shared machine hits all alike.
A variant's options follow its shape: `5x1+polish` (the final descent), `5x1+tempering`
(parallel tempering); the positions where its final geometric mean is above / below the
paper's recipe's are counted.

`--recipe` times the production default, `infer_order` with `AnnealingParams()` (the greedy
order, then 5 lock-step restarts of `default_iterations(stones)`: the paper's recipe, the
schedule InferSequence runs), on each position: wall and CPU seconds of this process (on a
shared machine the CPU seconds are the steadier figure; through Triton the server's work is
in the wall time only). `--profile` prints where one such run's time goes (cProfile timed
in this process's CPU seconds, so the other jobs of a shared machine do not show; the 25
functions with the most time of their own).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.evaluator import PolicyEvaluator  # noqa: E402
from services.games.base import Game, Position  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.models import configs  # noqa: E402
from services.move_order.annealing import (  # noqa: E402
    AnnealingParams,
    anneal,
    default_iterations,
    infer_order,
)
from services.move_order.greedy import greedy_order  # noqa: E402
from services.move_order.likelihood import PrefixScorer, Scored, scored  # noqa: E402
from services.move_order.problem import Problem, problem_from_stones  # noqa: E402
from services.records.rif import RifGame, read_rif  # noqa: E402
from services.triton.client import PolicyClient  # noqa: E402
from services.triton.launcher import TritonServer  # noqa: E402

SAMPLE = ROOT / "data" / "sample" / "selfplay.rif"
RERUNS = 3  # runs of a variant with its steps rescaled toward the paper's boards


@dataclass(frozen=True)
class Output:
    logits: np.ndarray
    model_name: str
    model_version: str = "random"


class TorchPolicy:
    """A network in this process as a `PolicyEvaluator` (the value output is dropped). A
    TorchScript module is frozen (its weights inlined as constants, the module calls folded):
    the same outputs, bit for bit, from less per-call work, which counts at the few boards
    of an annealing step."""

    def __init__(self, model: torch.nn.Module, name: str) -> None:
        model = model.eval()
        self.model = torch.jit.freeze(model) if isinstance(model, torch.jit.ScriptModule) \
            else model
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
    parser.add_argument("--model", default="",
                        help="a TorchScript policy (e.g. a published model.pt) instead of the "
                             "config's network with random weights")
    parser.add_argument("--triton", default="",
                        help="a model repository: start Triton on it and evaluate through its "
                             "gRPC client (the served path) instead of in this process")
    parser.add_argument("--naive", type=int, default=1,
                        help="1: time the cached cost against the naive one; 0: skip")
    parser.add_argument("--budget", type=int, default=0,
                        help="candidates costed per position for the recipe against lock-step "
                             "chains (0: skip; the paper's recipe: 5 x default_iterations)")
    parser.add_argument("--variants", default="5x1,20x1,5x4,10x2",
                        help="lock-step variants RxC[+option...]: R chains, C candidates per "
                             "chain per step, options polish / tempering")
    parser.add_argument("--recipe", action="store_true",
                        help="time the production default (the paper's recipe) per position")
    parser.add_argument("--profile", action="store_true",
                        help="profile one run of the production default (first position)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    game = get_game(args.game)
    size = args.size or game.default_size
    config = args.config or game.default_config
    if args.triton:
        with TritonServer(Path(args.triton)) as triton:
            client = PolicyClient(triton.grpc_url, game=game, timeout_s=60.0)
            try:
                run(game, size, f"Triton {game.default_model} from {args.triton}", client, args)
            finally:
                client.close()
        return
    if args.model:
        config = f"{args.model} (TorchScript)"
        policy = TorchPolicy(torch.jit.load(args.model), config)
    else:
        config = f"{config} (random weights)"
        policy = TorchPolicy(configs.build(config.split()[0]), config)
    run(game, size, config, policy, args)


def run(game: Game, size: int, config: str, policy: PolicyEvaluator,
        args: argparse.Namespace) -> None:
    if game.record_formats and SAMPLE.suffix in game.record_formats:
        stone_sets = gomoku_positions(game, args.stones, args.positions)
    else:
        stone_sets = go_positions(game, size, args.stones, args.positions, args.seed)
    print(f"{game.title} {size}x{size}, {args.stones} stones, {len(stone_sets)} positions, "
          f"network {config}, torch threads {torch.get_num_threads()}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.recipe:
        time_recipe(game, size, stone_sets, policy)
    if args.profile:
        problem = problem_from_stones(game, *stone_sets[0], size=size)
        profiler = cProfile.Profile(time.process_time)  # CPU seconds: other jobs do not count
        profiler.runcall(infer_order, problem, policy, AnnealingParams(seed=args.seed))
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)
    if args.naive:
        naive_against_fast(game, size, stone_sets, policy, args)
    if args.budget:
        recipe_against_chains(game, size, stone_sets, policy, args)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def time_recipe(game: Game, size: int, stone_sets: list[tuple[list[int], list[int]]],
                policy: PolicyEvaluator) -> None:
    """Wall and CPU seconds of `infer_order` with the production defaults, per position."""
    print("the paper's recipe as served (AnnealingParams(): greedy + 5 lock-step restarts of "
          "default_iterations):")
    walls, cpus = [], []
    for i, (black, white) in enumerate(stone_sets):
        problem = problem_from_stones(game, black, white, size=size)
        wall, cpu = time.perf_counter(), time.process_time()
        result = infer_order(problem, policy, AnnealingParams())
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        print(f"position {i}: {walls[-1]:6.2f} s wall {cpus[-1]:6.2f} s CPU, "
              f"{result.calls} calls {result.boards} boards, "
              f"{result.iterations * len(result.restarts) / walls[-1]:7.0f} iterations/s, "
              f"{result.boards / walls[-1]:7.0f} boards/s, gm {result.best.geometric_mean:.5f}")
    print(f"recipe: mean {np.mean(walls):.2f} s wall, {np.mean(cpus):.2f} s CPU per position "
          f"(min {min(walls):.2f} / {min(cpus):.2f})")


def recipe_against_chains(game: Game, size: int, stone_sets: list[tuple[list[int], list[int]]],
                          policy: PolicyEvaluator, args: argparse.Namespace) -> None:
    variants: list[tuple[str, AnnealingParams]] = [
        ("paper 5x1 sequential", AnnealingParams(iterations=max(1, args.budget // 5), restarts=5,
                                                 seed=args.seed, lockstep=False))]
    for spec in args.variants.split(","):
        shape, *options = spec.split("+")
        chains, candidates = (int(x) for x in shape.split("x"))
        steps = max(1, args.budget // (chains * candidates))
        variants.append((f"lockstep {spec}",
                         AnnealingParams(iterations=steps, restarts=chains, candidates=candidates,
                                         seed=args.seed, **{o: True for o in options})))
    print(f"budget {args.budget} candidates per position: "
          + "; ".join(f"{name}: {p.restarts} x {p.iterations} steps x {p.candidates}"
                      for name, p in variants))
    totals = {name: [0.0, 0, 0, 0, 0.0] for name, _ in variants}  # s calls boards cands gm
    # positions where the variant's final geometric mean is above / below the paper's
    wins = {name: [0, 0] for name, _ in variants}
    for i, (black, white) in enumerate(stone_sets):
        problem: Problem = problem_from_stones(game, black, white, size=size)
        line = [f"position {i}:"]
        paper_boards = 0
        paper_gm = 0.0
        for name, params in variants:
            start = time.perf_counter()
            result = infer_order(problem, policy, params)
            elapsed = time.perf_counter() - start
            if not paper_boards:
                paper_boards = result.boards
            for _ in range(RERUNS):
                if abs(result.boards / paper_boards - 1) <= 0.03:
                    break
                steps = max(1, round(result.iterations * paper_boards / result.boards))
                start = time.perf_counter()
                result = infer_order(problem, policy, replace(params, iterations=steps))
                elapsed = time.perf_counter() - start
            costed = sum(r.proposals + r.illegal for r in result.restarts)
            t = totals[name]
            t[0] += elapsed
            t[1] += result.calls
            t[2] += result.boards
            t[3] += costed
            t[4] += result.best.geometric_mean
            if not paper_gm:
                paper_gm = result.best.geometric_mean
            gm = result.best.geometric_mean
            wins[name][0] += gm > paper_gm * (1 + 1e-9)
            wins[name][1] += gm < paper_gm * (1 - 1e-9)
            line.append(f"{name} {elapsed:6.2f} s {result.boards} boards "
                        f"{result.iterations} steps gm {result.best.geometric_mean:.4f};")
        print(" ".join(line))
    paper = totals[variants[0][0]]
    count = len(stone_sets)
    for name, (elapsed, calls, boards, costed, gm) in totals.items():
        print(f"{name:22s}: {elapsed / count:7.2f} s/position, {boards / elapsed:8.0f} boards/s, "
              f"{costed / elapsed:8.1f} iterations/s, {calls:7d} calls, {boards:8d} boards "
              f"({boards / count / max(1, calls / count):.1f}/call), mean gm {gm / count:.4f} | "
              f"vs paper: time {elapsed / paper[0]:.3f}, boards {boards / paper[2]:.3f}, "
              f"boards/s {boards / elapsed / (paper[2] / paper[0]):.2f}x, iterations/s "
              f"{costed / elapsed / (paper[3] / paper[0]):.2f}x, mean gm {gm / paper[4]:.4f}, "
              f"above / below the paper on {wins[name][0]} / {wins[name][1]} of {count} "
              "positions")


def naive_against_fast(game: Game, size: int, stone_sets: list[tuple[list[int], list[int]]],
                       policy: PolicyEvaluator, args: argparse.Namespace) -> None:
    params = AnnealingParams(restarts=1, seed=args.seed)
    print(f"cached against naive cost: {args.iterations} iterations, one restart")
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
          f"iterations) with the restarts one after another (lockstep=False) at this run's "
          f"single-chain rate: {greedy_s / len(stone_sets) + recipe * per_it:.1f} s (an "
          "estimate, wall time; the served default runs the restarts in lock step and reuses "
          "transposed positions: `--recipe` measures it)")


if __name__ == "__main__":
    main()
