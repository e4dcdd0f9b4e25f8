"""Match: searches whose leaf values mix in fast rollouts (lambda > 0) against lambda 0.

    nice .venv/bin/python benchmarks/rollout_match.py --model runs/strength/model_v.pt
        --rollout rollout.npz [--lambdas 0 0.25 0.5 1] [--time-ms 500] [--pairs 50]
        [--log runs/rollout_match/games.jsonl] [--seed 0] [--threads 1]

Why: mixing rollouts into the leaf values (`services.search.rollout_value`, BAKAGO's equation
3) spends search time on rollouts instead of visits; only games at equal time per move say
whether it pays. For each lambda of `--lambdas` the player searching with it meets the player
searching with lambda 0 (lambda 0 against itself is the control: about 50%) at `--time-ms`
per move each (`services.search.mcts.search` on a fresh tree every move, as GenMove with
`disable_tree_reuse`), Gomoku freestyle 15x15, on `benchmarks/strength.py`'s balanced
openings (2-4 stones near the centre, distinct under the symmetries), each played twice with
the colours swapped. `--model`: a TorchScript network (with a value head: `_v`, e.g. from
`benchmarks/strength.py --model shao_f32_n2_v --save-model ...`); `--rollout`: a rollout
policy file (`benchmarks/rollout_top1.py --save`). A game ends with five, a full board, or
`--max-moves` moves (a draw).

Resumable: every finished game is one JSON line in `--log`; a run skips the games the log
holds already (same lambda, opening and colour), so it can be killed and started again. After
each game it prints a line, and after each pair the standings: per lambda, score against
lambda 0 and the Bradley-Terry Elo difference with its 95% interval
(`services.ratings.bradley_terry`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.strength import SIZE, openings  # noqa: E402
from services.games.gomoku.rules import BLACK, EMPTY, WHITE, GomokuState, Rule  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.games.rollout import RolloutWeights  # noqa: E402
from services.models.local_evaluator import LocalEvaluator  # noqa: E402
from services.ratings.bradley_terry import Game, fit  # noqa: E402
from services.search import mcts  # noqa: E402
from services.search.rollout_value import FixedRollouts, RolloutValueEvaluator  # noqa: E402


def player(policy: LocalEvaluator, weights: RolloutWeights, lam: float, seed: int):
    """The evaluator a player searches with: the network, its values mixed at `lam`."""
    if lam == 0:
        return policy
    return RolloutValueEvaluator(policy, get_game("gomoku").rollouts("freestyle"),
                                 FixedRollouts(weights), lam, seed=seed)


def play(policy: LocalEvaluator, weights: RolloutWeights, lam: float, opening: tuple[int, ...],
         lam_colour: int, args: argparse.Namespace, seed: int) -> dict:
    """One game of lambda `lam` (playing `lam_colour`) against lambda 0."""
    state = GomokuState.from_moves(opening, SIZE, Rule.FREESTYLE)
    players = {lam_colour: player(policy, weights, lam, seed),
               (WHITE if lam_colour == BLACK else BLACK): policy}
    visits = {BLACK: 0, WHITE: 0}
    plies = 0
    while state.winner == EMPTY and state.legal_mask().any() and plies < args.max_moves:
        r = mcts.search(state, players[state.to_move], max_time_ms=args.time_ms)
        visits[state.to_move] += r.total_visits
        state = state.play(r.move)
        plies += 1
    score = 0.5 if state.winner == EMPTY else float(state.winner == lam_colour)
    return {"lambda": lam, "opening": list(opening), "lambda_colour": lam_colour,
            "score": score, "plies": plies, "lambda_visits": visits[lam_colour],
            "zero_visits": visits[WHITE if lam_colour == BLACK else BLACK],
            "moves": list(state.moves)}


def standings(games: list[dict]) -> str:
    """Score and Elo against lambda 0, per lambda."""
    lines = []
    for lam in sorted({g["lambda"] for g in games}):
        mine = [g for g in games if g["lambda"] == lam]
        label = f"lambda={lam:g}"
        pairs = [Game(label, "lambda=0 (opponent)", g["score"]) for g in mine]
        rating = fit(pairs, "lambda=0 (opponent)")[label]
        score = np.mean([g["score"] for g in mine])
        per_move = sum(g["lambda_visits"] for g in mine) / max(1, sum(g["plies"] for g in mine) / 2)
        lines.append(f"{label}: {len(mine)} games, score {score:.3f}, Elo {rating.elo:+.0f} "
                     f"[{rating.low:+.0f}, {rating.high:+.0f}], visits a move {per_move:.0f}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="TorchScript network")
    parser.add_argument("--rollout", type=Path, required=True, help="rollout policy (.npz)")
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0])
    parser.add_argument("--time-ms", type=int, default=500, help="search time per move")
    parser.add_argument("--pairs", type=int, default=50, help="openings per lambda (x2 games)")
    parser.add_argument("--max-moves", type=int, default=SIZE * SIZE)
    parser.add_argument("--log", type=Path, default=Path("runs/rollout_match/games.jsonl"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    policy = LocalEvaluator(args.model, name=args.model.stem, threads=args.threads)
    weights = RolloutWeights.from_bytes(args.rollout.read_bytes())
    args.log.parent.mkdir(parents=True, exist_ok=True)
    games = ([json.loads(line) for line in args.log.read_text().splitlines() if line.strip()]
             if args.log.exists() else [])
    done = {(g["lambda"], tuple(g["opening"]), g["lambda_colour"]) for g in games}
    print(f"{len(games)} games in {args.log} already; {args.time_ms} ms a move", flush=True)
    for i, opening in enumerate(openings(args.pairs, args.seed)):
        for lam in args.lambdas:
            for colour in (BLACK, WHITE):
                if (lam, tuple(opening), colour) in done:
                    continue
                start = time.perf_counter()
                g = play(policy, weights, lam, tuple(opening), colour, args,
                         seed=args.seed * 1000 + i * 2 + colour)
                with args.log.open("a") as f:
                    f.write(json.dumps(g) + "\n")
                games.append(g)
                print(f"pair {i} lambda {lam:g} as {'black' if colour == BLACK else 'white'}: "
                      f"{g['score']:g} in {g['plies']} moves, {time.perf_counter() - start:.0f}"
                      " s", flush=True)
        print(standings(games), flush=True)
    print(standings(games), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
