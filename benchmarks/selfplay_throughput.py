"""Self-play throughput: the worker (many games, one batched evaluator, playout cap randomization)
against a naive loop (one game at a time through the search service, one GenMove a move).

    nice .venv/bin/python benchmarks/selfplay_throughput.py [--model model.pt] [--games 16]
        [--concurrency 8] [--visits 200] [--fast-visits 50] [--max-moves 60]

Why: self-play is where the loop spends its compute; what matters is games and training
positions per CPU-hour. The naive baseline is what a user would write with the service alone:
play a game by asking GenMove for every move (full `--visits`, tree reuse as the service does
it), one game at a time, so each leaf batch of one search is one evaluator call. The worker
(`services.selfplay.worker`) plays `--concurrency` games at once with their leaf batches merged
into one evaluator call, and searches a quarter of the moves fully (policy targets) and the
rest with `--fast-visits` (KataGo's playout cap randomization). Both use the same network
in-process (`services.models.local_evaluator.LocalEvaluator`, one torch thread: the service
here is built around it, no Triton) and the same openings; CPU is this process's (server
threads included), measured around each part.

Printed: per side games and positions (searched moves; for the worker also the policy-target
rows, its full searches) per CPU-hour, evaluator calls and boards per call, and the worker's
ratio to the baseline. `--model`: a TorchScript Gomoku network (default: `shao_f32_n2_v` with
seeded weights, exported to a temporary file: the speed does not depend on training).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from services.games.registry import get_game  # noqa: E402
from services.models.configs import CONFIGS  # noqa: E402
from services.models.local_evaluator import LocalEvaluator  # noqa: E402
from services.search.client import SearchClient  # noqa: E402
from services.search.server import build_service  # noqa: E402
from services.selfplay.openings import opening_suite  # noqa: E402
from services.selfplay.settings import SelfPlaySettings  # noqa: E402
from services.selfplay.worker import run_worker  # noqa: E402

GOMOKU = get_game("gomoku")


class Counting:
    """The evaluator with its calls and boards counted."""

    def __init__(self, inner: LocalEvaluator) -> None:
        self.inner, self.calls, self.boards = inner, 0, 0

    def infer(self, boards):
        self.calls += 1
        self.boards += len(boards)
        return self.inner.infer(boards)


def seeded_model(out: Path) -> Path:
    spec = CONFIGS["shao_f32_n2_v"]
    net = spec.served(spec.network(0)).eval()
    torch.jit.script(net).save(str(out))
    return out


def naive(evaluator: Counting, openings: list[tuple[int, ...]], games: int, visits: int,
          max_moves: int) -> tuple[int, int, float]:
    """Games one at a time through the service, one GenMove a move; (games, moves, CPU s)."""
    service = build_service(evaluator, port=0, max_workers=4).start()
    moves = 0
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            cpu = time.process_time()
            for i in range(games):
                state = GOMOKU.start()
                for m in openings[i % len(openings)]:
                    state = state.play(m)
                while not state.is_over and len(state.moves) < max_moves:
                    point = [(m % 15, m // 15) for m in state.moves]
                    reply = client.genmove(point, max_visits=visits, timeout=120)
                    state = state.play(reply.move.y * 15 + reply.move.x)
                    moves += 1
            cpu = time.process_time() - cpu
    finally:
        service.stop()
    return games, moves, cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--games", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--visits", type=int, default=200, help="full searches (and the baseline's)")
    p.add_argument("--fast-visits", type=int, default=50)
    p.add_argument("--max-moves", type=int, default=60, help="a game's cap (a draw)")
    args = p.parse_args()
    torch.set_num_threads(1)
    model = args.model or seeded_model(Path(tempfile.mkdtemp()) / "model.pt")
    openings = opening_suite(GOMOKU, max(1, args.games // 2), seed=0)

    base_eval = Counting(LocalEvaluator(model, "throughput", version="1"))
    games, moves, base_cpu = naive(base_eval, openings, args.games, args.visits, args.max_moves)
    base_calls, base_boards = base_eval.calls, base_eval.boards

    settings = SelfPlaySettings(full_visits=args.visits, fast_visits=args.fast_visits,
                                max_moves=args.max_moves, no_resign_share=1.0)
    work_eval = LocalEvaluator(model, "throughput", version="1")
    cpu = time.process_time()
    with tempfile.TemporaryDirectory() as out:
        report = run_worker(GOMOKU, work_eval, Path(out), games=args.games, settings=settings,
                            concurrency=args.concurrency, openings=openings)
    work_cpu = time.process_time() - cpu
    targets = sum(1 for g in report.played for m in g.moves if m.full)

    hour = 3600.0
    print(f"naive (one game at a time, GenMove per move, {args.visits} visits): {games} games, "
          f"{moves} positions, {base_cpu:.1f} CPU s: {games / base_cpu * hour:,.0f} games and "
          f"{moves / base_cpu * hour:,.0f} positions per CPU-hour; {base_calls} evaluator calls,"
          f" {base_boards / max(base_calls, 1):.1f} boards a call")
    print(f"worker ({args.concurrency} games at once, {args.visits}/{args.fast_visits} visits, "
          f"a quarter full): {len(report.played)} games, {report.moves} positions "
          f"({targets} policy targets), {work_cpu:.1f} CPU s: "
          f"{len(report.played) / work_cpu * hour:,.0f} games and "
          f"{report.moves / work_cpu * hour:,.0f} positions per CPU-hour; "
          f"{report.evaluator_calls} evaluator calls, "
          f"{report.boards / max(report.evaluator_calls, 1):.1f} boards a call")
    ratio_games = (len(report.played) / work_cpu) / (games / base_cpu)
    ratio_positions = (report.moves / work_cpu) / (moves / base_cpu)
    ratio_targets = (targets / work_cpu) / (moves / base_cpu)
    print(f"ratio worker / naive: games per CPU-hour {ratio_games:.2f}x, positions "
          f"{ratio_positions:.2f}x, policy-target positions {ratio_targets:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
