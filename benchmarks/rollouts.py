"""Fast rollouts: rollouts per second and microseconds per rollout move, Gomoku and Go.

    .venv/bin/python benchmarks/rollouts.py [--leaves 64] [--rollouts 4] [--repeats 3]
        [--kernel 5] [--weights rollout.npz] [--seed 0] [--cases gomoku renju go9 go19]

Why: a leaf value mixed with rollouts (services/search/rollout_value.py) costs one rollout per
leaf, hundreds of moves each; the budget of a search at a given time per move follows from
these figures. Each case plays `--rollouts` rollouts from each of `--leaves` positions (Gomoku
15x15 under freestyle and under renju, whose rollouts keep Black off its forbidden points, and
Go 9x9 / 19x19, after 10 random moves from the empty board) with the game's compiled rollouts
(`Game.rollouts`), after one warm-up call (numba compiles or loads its cache). The
policy is `--weights` (a rollout.npz of a version, `services.repository.rollout_policy`), else
random weights of the `--kernel` width drawn from `--seed`: the cost of a move does not depend
on what the weights are, only the game lengths do (a trained policy plays other games). The
best of `--repeats` runs is reported; one process, one thread.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.go_replay import machine  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.games.rollout import RolloutWeights  # noqa: E402

# name: (game, rule, board size, komi)
CASES = {"gomoku": ("gomoku", "freestyle", 15, 0.0), "renju": ("gomoku", "renju", 15, 0.0),
         "go9": ("go", "", 9, 7.5), "go19": ("go", "", 19, 7.5)}
OPENING_MOVES = 10


def leaves(game_name: str, size: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(network inputs, colours to move) of `n` positions `OPENING_MOVES` random moves in."""
    game = get_game(game_name)
    rng = np.random.default_rng(seed)
    boards, colours = [], []
    for _ in range(n):
        state = game.start(size)
        for _ in range(OPENING_MOVES):
            legal = np.flatnonzero(state.legal_mask()[: size * size])
            state = state.play(int(rng.choice(legal)))
        boards.append(game.network_input(state))
        colours.append(state.to_move)
    return np.stack(boards).astype(np.int8), np.array(colours, np.int8)


def measure(game_name: str, rule: str, size: int, komi: float, weights: RolloutWeights,
            args: argparse.Namespace) -> dict:
    rollouts = get_game(game_name).rollouts(rule)
    boards, colours = leaves(game_name, size, args.leaves, args.seed)
    rollouts.run(boards[:2], weights, komi=komi, colours=colours[:2])  # compile / load
    best = None
    for r in range(args.repeats):
        start = time.perf_counter()
        z, moves = rollouts.run(boards, weights, seed=args.seed + r, rollouts=args.rollouts,
                                komi=komi, colours=colours)
        seconds = time.perf_counter() - start
        if best is None or seconds < best[0]:
            best = (seconds, moves, float(np.mean(z)))
    seconds, moves, mean_z = best
    games = args.leaves * args.rollouts
    name = f"{game_name} {size}x{size}" + (f" {rule}" if rule else "")
    return {"case": name, "rollouts_s": games / seconds,
            "us_move": 1e6 * seconds / moves, "moves": moves / games, "mean_z": mean_z}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leaves", type=int, default=64)
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per leaf")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kernel", type=int, default=5)
    parser.add_argument("--weights", type=Path, default=None, help="a rollout.npz")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    args = parser.parse_args()
    if args.weights is not None:
        weights = RolloutWeights.from_bytes(args.weights.read_bytes())
    else:
        rng = np.random.default_rng(args.seed)
        weights = RolloutWeights(rng.normal(0, 0.5, (3, args.kernel, args.kernel))
                                 .astype(np.float32), 0.0, config="random")
    print(machine())
    print(f"policy: {weights.config or args.weights} ({weights.size}x{weights.size}); "
          f"{args.leaves} leaves x {args.rollouts} rollouts, best of {args.repeats}")
    print("| case | rollouts/s | µs per move | moves per rollout | mean result |")
    print("|---|---|---|---|---|")
    for case in args.cases:
        r = measure(*CASES[case], weights, args)
        print(f"| {r['case']} | {r['rollouts_s']:.0f} | {r['us_move']:.2f} | "
              f"{r['moves']:.0f} | {r['mean_z']:+.3f} |")
    print(machine())
    return 0


if __name__ == "__main__":
    sys.exit(main())
