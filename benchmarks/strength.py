"""Strength benchmark: PUCT search (GenMove) against the raw policy it is built on.

    .venv/bin/python benchmarks/strength.py [--model shao_f32_n2 | --model path/to/model.pt]
        [--steps 3000] [--save-model runs/strength/model.pt]
        [--visits 200 800] [--games 100] [--time-budget 0] [--jobs 2] [--seed 0]
        [--opponent policy|policy+tactics|search-no-value] [--json out.json]

The policy: with a configuration name (default `shao_f32_n2`) the shipped self-play sample is
turned into shards (`services.dataset.build` + `services.dataset.shards`, as the ingest flow
does, without Prefect), the network is trained on them (`services.trainer.train.train`, batch
64, `--steps` steps or `--train-seconds`), then exported with
`services.models.export.export_torchscript` (and kept at `--save-model` if given). With a path
ending in `.pt`, that TorchScript file is used as it is.

Everything runs in-process, without Triton: `services.models.local_evaluator.LocalEvaluator`
wraps the TorchScript model in the evaluator interface the search expects (`infer(int8 boards
[N, 15, 15]) -> .logits [N, 225]`, `.model_name`, `.model_version`).

The match, for each visit count V: freestyle 15x15; seeded random openings of 2-4 stones
(alternating black, white, ...) within 3 lines of the centre, distinct under the board's 8
symmetries; every opening is played twice, the search taking black in one game and white in
the other. The search player calls `services.search.mcts.search(state, policy, max_visits=V)`
on a fresh tree every move (as GenMove with `disable_tree_reuse`); the policy player plays the
legal point with the highest logit (`--opponent policy+tactics`: it first plays a five, then
blocks the opponent's five, as the search does exactly; a harder baseline, not the default;
`--opponent search-no-value`: the same search at the same visits with the network's value head
ignored, leaves worth 0 as with a policy-only network: the A/B of a `_v` model's value head).
Both are deterministic, so a game depends only on its opening and colours (and the result not
on `--jobs`). A game ends with five in a row, a full board, or `--max-moves` moves after the
opening (counted as a draw). Bounds: `--games` per V
(rounded up to whole pairs) and `--time-budget` seconds per V (no new pair starts after it; 0:
none); `--max-time-ms` caps each search too (0: visits only).

Reported per V: wins/losses/draws of the search, its win rate (draws count as not won) with a
95% Wilson interval, its score (draws half), results by colour, average game length, and
seconds per move of each player (wall time of the move's computation in its worker process).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from services.coords import index_name  # noqa: E402
from services.games.gomoku import game as gomoku_game  # noqa: E402
from services.games.gomoku.rules import BLACK, EMPTY, WHITE, GomokuState, Rule  # noqa: E402
from services.games.symmetry import N_SYMMETRIES, transform_board  # noqa: E402
from services.models.local_evaluator import LocalEvaluator  # noqa: E402
from services.search import mcts  # noqa: E402

SIZE = 15
CENTRE = 7
SAMPLE = ROOT / "data" / "sample" / "selfplay.rif"


# ---------------------------------------------------------------------------- the policy
def policy_move(policy: LocalEvaluator, state: GomokuState, tactics: bool = False) -> int:
    """The raw policy's move: the legal point with the highest logit (ties: lowest index).

    With `tactics` (the `policy+tactics` opponent, not the raw policy): a point that makes five
    if there is one, else one that blocks the opponent's five, else the policy's move (the
    same rule the search applies exactly at every node)."""
    legal = state.legal_mask()
    if tactics:
        for colour in (state.to_move, WHITE if state.to_move == BLACK else BLACK):
            points = [p for p in gomoku_game.winning_points(state, colour) if legal[p]]
            if points:
                legal = np.zeros_like(legal)
                legal[points] = True
                break
    logits = policy.infer(state.board[None]).logits[0].astype(np.float64)
    return int(np.argmax(np.where(legal, logits, -np.inf)))


def train_policy(model: str, steps: int, seconds: float, seed: int, out: Path) -> dict:
    """Shards of the shipped sample, a trained `model`, its TorchScript export at `out`."""
    from services.dataset.build import deduplicate
    from services.dataset.shards import (
        SCHEMA_VERSION,
        SPLITS,
        atomic_write_json,
        write_split_shards,
    )
    from services.games.gomoku.replay import source_pairs
    from services.models.export import export_torchscript
    from services.records.rif import read_rif
    from services.trainer.train import TrainConfig, train

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "dataset"
        t = time.perf_counter()
        result = source_pairs(SAMPLE.name, read_rif(SAMPLE, source=SAMPLE.name))
        table = deduplicate([result.pairs])
        files = write_split_shards(table, data)
        splits = {s: sum(f["rows"] for f in files if f["split"] == s) for s in SPLITS}
        atomic_write_json({"schema_version": SCHEMA_VERSION, "files": files, "splits": splits},
                          data / "manifest.json")
        build_s = time.perf_counter() - t
        config = TrainConfig(model=model, batch_size=64, max_steps=steps, max_seconds=seconds,
                             seed=seed, train_eval_rows=1024,
                             num_threads=0)  # 0: keep the caller's --train-threads
        trained = train(data, config, progress=False)
    diff = export_torchscript(trained.model, out)
    m = trained.metrics
    return {"games": result.ingested, "pairs": result.pairs.num_rows, "unique": table.num_rows,
            "splits": splits, "dataset_s": round(build_s, 1), "steps": m["steps"],
            "stopped": m["stopped"], "train_s": m["seconds"], "samples_per_s": m["samples_per_s"],
            "val_top1": m["validation"]["top1"], "val_top5": m["validation"]["top5"],
            "test_top1": m["test"]["top1"], "export_max_abs_diff": diff,
            **{f"val_{k}": m["validation"][k] for k in ("value_mse", "value_sign")
               if k in m["validation"]}}


# ---------------------------------------------------------------------------- openings
def _canonical(board: np.ndarray) -> bytes:
    return min(np.ascontiguousarray(transform_board(board, k)).tobytes()
               for k in range(N_SYMMETRIES))


def openings(n: int, seed: int, radius: int = 3) -> list[tuple[int, ...]]:
    """`n` openings of 2-4 stones (moves alternate from black) within `radius` lines of the
    centre, pairwise distinct under the 8 symmetries; the same `seed` gives the same list."""
    rng = np.random.default_rng(seed)
    box = [(CENTRE + dy) * SIZE + CENTRE + dx
           for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1)]
    seen: set[bytes] = set()
    out: list[tuple[int, ...]] = []
    while len(out) < n:
        stones = int(rng.integers(2, 5))
        moves = tuple(int(p) for p in rng.choice(box, size=stones, replace=False))
        key = _canonical(GomokuState.from_moves(moves).board)
        if key not in seen:
            seen.add(key)
            out.append(moves)
    return out


# ---------------------------------------------------------------------------- games
@dataclass
class GameRecord:
    index: int
    opening: tuple[int, ...]
    search_color: int
    result: str  # "win", "loss" or "draw" for the search
    reason: str  # "five", "full board" or "move limit"
    plies: int  # moves played after the opening
    moves: tuple[int, ...]  # the whole game, opening included
    search_moves: int
    search_s: float
    policy_moves: int
    policy_s: float
    visits: int


_WORKER: dict = {}


def _init_worker(model_path: str, threads: int) -> None:
    torch.set_num_threads(threads)
    _WORKER["policy"] = LocalEvaluator(model_path, threads=threads)
    _WORKER["no_value"] = LocalEvaluator(use_value=False, model=_WORKER["policy"].model,
                                         threads=None)


def play_game(task: tuple[int, tuple[int, ...], int, int, int, int, str]) -> GameRecord:
    index, opening, search_color, visits, max_moves, max_time_ms, opponent = task
    policy: LocalEvaluator = _WORKER["policy"]
    state = GomokuState.from_moves(opening, SIZE, Rule.FREESTYLE)
    counts = {"search": 0, "policy": 0}
    seconds = {"search": 0.0, "policy": 0.0}
    plies = 0
    while state.winner == EMPTY and state.legal_mask().any() and plies < max_moves:
        who = "search" if state.to_move == search_color else "policy"
        t = time.perf_counter()
        if who == "search":
            move = mcts.search(state, policy, max_visits=visits, max_time_ms=max_time_ms).move
        elif opponent == "search-no-value":
            move = mcts.search(state, _WORKER["no_value"], max_visits=visits,
                               max_time_ms=max_time_ms).move
        else:
            move = policy_move(policy, state, opponent == "policy+tactics")
        seconds[who] += time.perf_counter() - t
        counts[who] += 1
        state = state.play(move)
        plies += 1
    if state.winner != EMPTY:
        result, reason = ("win" if state.winner == search_color else "loss"), "five"
    else:
        result = "draw"
        reason = "move limit" if state.legal_mask().any() else "full board"
    return GameRecord(index, opening, search_color, result, reason, plies, state.moves,
                      counts["search"], seconds["search"], counts["policy"], seconds["policy"],
                      visits)


# ---------------------------------------------------------------------------- statistics
def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def summarise(games: list[GameRecord], visits: int, wall_s: float, stopped: str) -> dict:
    n = len(games)
    count = {r: sum(g.result == r for g in games) for r in ("win", "loss", "draw")}
    lo, hi = wilson(count["win"], n)
    by_colour = {}
    for colour, name in ((BLACK, "black"), (WHITE, "white")):
        sub = [g for g in games if g.search_color == colour]
        by_colour[name] = {r: sum(g.result == r for g in sub) for r in ("win", "loss", "draw")}
    s_moves = sum(g.search_moves for g in games)
    p_moves = sum(g.policy_moves for g in games)
    return {
        "visits": visits, "games": n, "wins": count["win"], "losses": count["loss"],
        "draws": count["draw"], "win_rate": count["win"] / n if n else 0.0,
        "wilson95": [lo, hi], "score": (count["win"] + count["draw"] / 2) / n if n else 0.0,
        "by_search_colour": by_colour,
        "reasons": {r: sum(g.reason == r for g in games)
                    for r in ("five", "full board", "move limit")},
        "mean_plies": sum(g.plies for g in games) / n if n else 0.0,
        "search_s_per_move": sum(g.search_s for g in games) / max(s_moves, 1),
        "policy_s_per_move": sum(g.policy_s for g in games) / max(p_moves, 1),
        "search_moves": s_moves, "policy_moves": p_moves,
        "wall_s": wall_s, "stopped": stopped,
    }


def run_match(pool, opening_list: list[tuple[int, ...]], visits: int, games: int,
              time_budget: float, max_moves: int, max_time_ms: int, jobs: int,
              verbose: bool, opponent: str = "policy") -> tuple[list[GameRecord], float, str]:
    """Play opening pairs until `games` games are done or `time_budget` has passed (no new pair
    starts after it); results come back in game order."""
    pairs = (games + 1) // 2
    tasks = [(2 * i + k, opening_list[i], (BLACK, WHITE)[k], visits, max_moves, max_time_ms,
              opponent) for i in range(pairs) for k in (0, 1)]
    start = time.perf_counter()
    records: list[GameRecord] = []
    stopped = "games"
    pending: list = []
    next_task = 0
    while next_task < len(tasks) or pending:
        # keep at most 2 * jobs games in flight, submitted a whole pair at a time
        while next_task < len(tasks) and len(pending) < 2 * jobs:
            if time_budget and time.perf_counter() - start > time_budget:
                stopped = "time budget"
                tasks = tasks[:next_task]
                break
            pending.append(pool.apply_async(play_game, (tasks[next_task],)))
            pending.append(pool.apply_async(play_game, (tasks[next_task + 1],)))
            next_task += 2
        if not pending:
            break
        record = pending.pop(0).get()
        records.append(record)
        if verbose:
            opening = " ".join(index_name(p, SIZE) for p in record.opening)
            colour = "black" if record.search_color == BLACK else "white"
            elapsed = time.perf_counter() - start
            print(f"  V={visits} game {record.index + 1:>3}: opening {opening:<15} search "
                  f"{colour:<5} -> {record.result:<4} ({record.reason}, {record.plies} moves, "
                  f"search {record.search_s / max(record.search_moves, 1):.3f} s/move)  "
                  f"[{elapsed:.0f} s]", flush=True)
    return records, time.perf_counter() - start, stopped


def report(s: dict, jobs: int, opponent: str = "policy") -> str:
    lo, hi = s["wilson95"]
    bc = s["by_search_colour"]
    against = {"policy": "raw policy (argmax)", "policy+tactics": "policy argmax + win/block",
               "search-no-value": "the same search without the value head"}[opponent]
    return "\n".join([
        f"search {s['visits']} visits vs {against}: {s['games']} games "
        f"(stopped by {s['stopped']}) in {s['wall_s']:.0f} s with {jobs} worker(s)",
        f"  search W/L/D {s['wins']}/{s['losses']}/{s['draws']}  win rate {s['win_rate']:.3f} "
        f"(95% Wilson {lo:.3f}-{hi:.3f})  score {s['score']:.3f}",
        f"  search as black W/L/D {bc['black']['win']}/{bc['black']['loss']}/"
        f"{bc['black']['draw']}, as white {bc['white']['win']}/{bc['white']['loss']}/"
        f"{bc['white']['draw']}",
        f"  endings {s['reasons']}; mean game length {s['mean_plies']:.1f} moves after the "
        f"opening",
        f"  seconds/move: search {s['search_s_per_move']:.3f} ({s['search_moves']} moves), "
        f"policy {s['policy_s_per_move'] * 1000:.2f} ms ({s['policy_moves']} moves)",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="shao_f32_n2",
                        help="configuration to train on the sample, or a TorchScript .pt file")
    parser.add_argument("--steps", type=int, default=3000, help="training steps (batch 64)")
    parser.add_argument("--train-seconds", type=float, default=240.0,
                        help="training time cap (0: none)")
    parser.add_argument("--train-threads", type=int, default=2, help="torch threads for training")
    parser.add_argument("--save-model", default=None, help="keep the exported TorchScript here")
    parser.add_argument("--visits", type=int, nargs="+", default=[200, 800])
    parser.add_argument("--games", type=int, default=100,
                        help="games per visit count (rounded up to whole pairs)")
    parser.add_argument("--time-budget", type=float, default=0.0,
                        help="seconds per visit count after which no new pair starts (0: none)")
    parser.add_argument("--max-moves", type=int, default=SIZE * SIZE,
                        help="moves after the opening before a game is a draw")
    parser.add_argument("--max-time-ms", type=int, default=0,
                        help="time cap of each search in ms (0: visits only)")
    parser.add_argument("--opponent", choices=("policy", "policy+tactics", "search-no-value"),
                        default="policy",
                        help="the raw policy (default), the policy that first plays a five "
                             "and blocks a four, or the search ignoring the value head")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes playing games")
    parser.add_argument("--seed", type=int, default=0, help="openings (and training) seed")
    parser.add_argument("--json", default=None, help="write summaries and games here")
    parser.add_argument("--quiet", action="store_true", help="no line per game")
    args = parser.parse_args(argv)
    if args.games < 1 or args.jobs < 1 or args.max_moves < 1:
        parser.error("--games, --jobs and --max-moves must be >= 1")
    print(f"machine: {platform.machine()} cpus={os.cpu_count()} torch {torch.__version__} "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    started = time.perf_counter()
    training = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.model.endswith(".pt"):
            model_path = Path(args.model)
            print(f"policy: TorchScript file {model_path}", flush=True)
        else:
            model_path = Path(args.save_model) if args.save_model else Path(tmp) / "model.pt"
            torch.set_num_threads(args.train_threads)
            training = train_policy(args.model, args.steps, args.train_seconds, args.seed,
                                    model_path)
            print(f"policy: {args.model} trained on {SAMPLE.relative_to(ROOT)} "
                  f"({training['games']} games, {training['unique']} unique pairs, splits "
                  f"{training['splits']}): {training['steps']} steps in {training['train_s']} s "
                  f"({training['samples_per_s']} samples/s), validation top-1 "
                  f"{training['val_top1']:.3f}, top-5 {training['val_top5']:.3f}, test top-1 "
                  f"{training['test_top1']:.3f}"
                  + (f", validation value MSE {training['val_value_mse']:.3f}, sign right "
                     f"{training['val_value_sign']:.3f}" if "val_value_sign" in training else "")
                  + (f"; saved to {model_path}" if args.save_model else ""), flush=True)
        pairs = max((args.games + 1) // 2, 1)
        opening_list = openings(pairs, args.seed)
        summaries, all_games = [], []
        ctx = mp.get_context("spawn")  # no fork after torch has started its threads
        with ctx.Pool(args.jobs, initializer=_init_worker, initargs=(str(model_path), 1)) as pool:
            for visits in args.visits:
                games, wall, stopped = run_match(pool, opening_list, visits, args.games,
                                                 args.time_budget, args.max_moves,
                                                 args.max_time_ms, args.jobs, not args.quiet,
                                                 args.opponent)
                s = summarise(games, visits, wall, stopped)
                summaries.append(s)
                all_games.extend(games)
                print(report(s, args.jobs, args.opponent), flush=True)
    print(f"total {time.perf_counter() - started:.0f} s, load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        out = {"args": vars(args), "training": training, "summaries": summaries,
               "games": [asdict(g) for g in all_games]}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
