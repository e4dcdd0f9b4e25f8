"""Match: the same engine with and without pondering, at equal time per move (Gomoku freestyle).

    nice .venv/bin/python benchmarks/ponder_match.py --model runs/strength/model_v.pt
        [--time-ms 100] [--pairs 100] [--log runs/ponder_match/games.jsonl] [--seed 0]

Why: pondering (`services.search.ponder`) spends the opponent's thinking time on the position
the opponent faces, and the reply's search continues that tree; whether that buys strength,
and at what CPU cost, only games say. Two engine processes (one core each: the ponderer
searches while the other engine thinks) play with the same network (`--model`, TorchScript,
e.g. `benchmarks/strength.py --model shao_f32_n2_v --save-model ...`), the same search and
`--time-ms` of wall time a move each; both keep their trees between moves (tree reuse), and
only one ponders, with the service's own `Ponderer` and `TreeCache`, stopped by the next move
request as the service stops it. Openings: `services.selfplay.openings.opening_suite` (2-4
stones near the centre, distinct under the symmetries), each played twice with the colours
swapped. A game ends with five, a full board, or `--max-moves` moves (a draw).

Resumable: every finished game is one JSON line in `--log`; a run skips the games the log
already holds (same opening and colour). After each pair it prints the standings: the
ponderer's score and Bradley-Terry Elo with its 95% interval (`services.ratings`), the visits
each engine searched a move and how many of them came with the reused tree, and the CPU
seconds each engine's process used a move (the extra CPU pondering takes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from services.games.gomoku.rules import BLACK, WHITE, GomokuState, Rule  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.ratings.bradley_terry import Game, fit  # noqa: E402
from services.selfplay.openings import opening_suite  # noqa: E402

SIZE = 15
PONDERER, PLAIN = "ponder", "no ponder"


def engine(conn: Connection, model: str, ponder: bool, time_ms: int, threads: int) -> None:
    """One engine process: answers ("move", moves) with (move, visits, reused visits),
    ("cpu",) with its process CPU seconds, ("new",) by forgetting its trees, ("stop",)."""
    from services.models.local_evaluator import LocalEvaluator
    from services.search import mcts
    from services.search.ponder import Ponderer
    from services.search.tree_cache import TreeCache

    policy = LocalEvaluator(model, name=Path(model).stem, threads=threads)
    trees = TreeCache()
    ponderer = Ponderer(trees, max_visits=10**6, max_seconds=600) if ponder else None
    while True:
        message = conn.recv()
        if ponderer is not None:
            ponderer.yield_to_request()
        if message[0] == "stop":
            return
        if message[0] == "new":
            trees.clear()
            conn.send("ok")
            continue
        if message[0] == "cpu":
            conn.send(time.process_time())
            continue
        state = GomokuState.from_moves(message[1], SIZE, Rule.FREESTYLE)
        hit = trees.take(state)
        search = mcts.Search(hit.root if hit is not None else state, policy)
        search.run(0, time.monotonic() + time_ms / 1000.0)
        result = search.result()
        after = state.play(result.move)
        child = search.root.child(result.move)
        if ponderer is not None and not after.is_over:
            root = child if child is not None and child.priors is not None and \
                not child.terminal else after
            ponderer.start(after, mcts.Search(root, policy))
        else:
            trees.put(state, search.root, search.model_name, search.model_version)
        conn.send((result.move, result.total_visits, hit.visits if hit is not None else 0))


class Engines:
    """The two engine processes and their pipes."""

    def __init__(self, args: argparse.Namespace) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipes: dict[str, Connection] = {}
        self.processes = []
        for name, ponder in ((PONDERER, True), (PLAIN, False)):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=engine, args=(theirs, str(args.model), ponder,
                                                 args.time_ms, args.threads), daemon=True)
            p.start()
            self.pipes[name], self.processes = mine, [*self.processes, p]

    def ask(self, name: str, *message: object) -> object:
        self.pipes[name].send(message)
        return self.pipes[name].recv()

    def close(self) -> None:
        for pipe in self.pipes.values():
            pipe.send(("stop",))
        for p in self.processes:
            p.join(10)


def play(engines: Engines, opening: tuple[int, ...], ponder_colour: int, max_moves: int
         ) -> dict:
    """One game; the pondering engine plays `ponder_colour`."""
    names = {ponder_colour: PONDERER, (WHITE if ponder_colour == BLACK else BLACK): PLAIN}
    cpu0 = {n: engines.ask(n, "cpu") for n in names.values()}
    for n in names.values():
        engines.ask(n, "new")
    state = GomokuState.from_moves(opening, SIZE, Rule.FREESTYLE)
    visits = {PONDERER: 0, PLAIN: 0}
    reused = {PONDERER: 0, PLAIN: 0}
    moves = {PONDERER: 0, PLAIN: 0}
    while not state.is_over and len(state.moves) < max_moves:
        name = names[state.to_move]
        move, total, kept = engines.ask(name, "move", list(state.moves))
        visits[name] += total
        reused[name] += kept
        moves[name] += 1
        state = state.play(move)
    cpu = {n: engines.ask(n, "cpu") - cpu0[n] for n in names.values()}
    score = 0.5 if state.winner == 0 else float(state.winner == ponder_colour)
    return {"opening": list(opening), "ponder_colour": ponder_colour, "score": score,
            "plies": len(state.moves), "moves": list(state.moves),
            **{f"{key}_{'ponder' if n == PONDERER else 'plain'}": value[n]
               for key, value in (("visits", visits), ("reused", reused), ("cpu_s", cpu),
                                  ("searches", moves)) for n in (PONDERER, PLAIN)}}


def standings(games: list[dict]) -> str:
    if not games:
        return "no games yet"
    rating = fit([Game(PONDERER, PLAIN, g["score"]) for g in games], PLAIN)[PONDERER]
    lines = [f"pondering: {len(games)} games, score {np.mean([g['score'] for g in games]):.3f},"
             f" Elo {rating.elo:+.0f} [{rating.low:+.0f}, {rating.high:+.0f}]"]
    for side in ("ponder", "plain"):
        searches = max(1, sum(g[f"searches_{side}"] for g in games))
        lines.append(
            f"  {side}: {sum(g[f'visits_{side}'] for g in games) / searches:.0f} visits a move "
            f"({sum(g[f'reused_{side}'] for g in games) / searches:.0f} reused), "
            f"{sum(g[f'cpu_s_{side}'] for g in games) / searches:.3f} CPU-s a move")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="TorchScript network")
    parser.add_argument("--time-ms", type=int, default=100, help="search time per move")
    parser.add_argument("--pairs", type=int, default=100, help="openings (x2 games)")
    parser.add_argument("--max-moves", type=int, default=SIZE * SIZE)
    parser.add_argument("--log", type=Path, default=Path("runs/ponder_match/games.jsonl"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per engine")
    args = parser.parse_args()
    args.log.parent.mkdir(parents=True, exist_ok=True)
    games = ([json.loads(line) for line in args.log.read_text().splitlines() if line.strip()]
             if args.log.exists() else [])
    done = {(tuple(g["opening"]), g["ponder_colour"]) for g in games}
    print(f"{len(games)} games in {args.log} already; {args.time_ms} ms a move", flush=True)
    engines = Engines(args)
    try:
        suite = opening_suite(get_game("gomoku"), args.pairs, seed=args.seed)
        for i, opening in enumerate(suite):
            for colour in (BLACK, WHITE):
                if (tuple(opening), colour) in done:
                    continue
                started = time.perf_counter()
                g = play(engines, tuple(opening), colour, args.max_moves)
                with args.log.open("a") as f:
                    f.write(json.dumps(g) + "\n")
                games.append(g)
                print(f"pair {i} ponderer as {'black' if colour == BLACK else 'white'}: "
                      f"{g['score']:g} in {g['plies']} moves, "
                      f"{time.perf_counter() - started:.0f} s", flush=True)
            print(standings(games), flush=True)
    finally:
        engines.close()
    print(standings(games), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
