"""A self-play worker: many games at once in one process, every leaf through one batched call.

Why threads around one `BatchingEvaluator`: each game's search asks for a batch of leaves at a
time; with `concurrency` games in flight, the batcher merges their batches into one evaluator
call (one TorchScript forward on the CPU, one Triton request on a GPU) and sends it as soon as
every game is waiting, so the network sees batches `concurrency` times larger than one game
makes, and no game waits for a timer. The searches' own work runs in their threads.

Kill-safety: game `index` of worker `worker` has the id `<worker>-<index:06d>` and a seed
derived from (seed, worker, index); a game is finished when its JSON file exists
(`services.selfplay.records`). A worker asked for `games` games plays the indices below
`games` whose file is missing, so a worker killed at any moment and started again with the
same arguments loses no finished game, counts none twice, and ends with the same ids. A
worker holds an exclusive lock on its name under the folder while it runs (two processes
with one name would play the same games), and at start removes the temporary files a killed
run of its name left behind.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from services.atomic_files import locked
from services.evaluator import PolicyEvaluator
from services.games.base import Game
from services.search.batcher import BatchingEvaluator
from services.selfplay.play import SelfPlayGame, play_game
from services.selfplay.records import GAMES_DIR, RECORDS_DIR, finished_ids, write_game
from services.selfplay.settings import SelfPlaySettings

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 8


def game_id(worker: str, index: int) -> str:
    return f"{worker}-{index:06d}"


def game_seed(seed: int, worker: str, index: int) -> int:
    """A game's seed: independent streams per (seed, worker, index), stable across runs."""
    sequence = np.random.SeedSequence([seed, zlib.crc32(worker.encode()), index])
    return int(sequence.generate_state(1, np.uint64)[0] >> np.uint64(1))


@dataclass
class WorkerReport:
    played: list[SelfPlayGame] = field(default_factory=list)
    skipped: int = 0  # finished before this run
    seconds: float = 0.0
    evaluator_calls: int = 0
    boards: int = 0

    @property
    def moves(self) -> int:
        return sum(len(g.moves) for g in self.played)


class _CountingEvaluator:
    """The evaluator below the batcher, counting what the batcher sends it."""

    def __init__(self, inner: PolicyEvaluator) -> None:
        self.inner = inner
        self.calls = 0
        self.boards = 0

    def infer(self, boards: np.ndarray):
        self.calls += 1
        self.boards += len(boards)
        return self.inner.infer(boards)


def run_worker(game: Game, evaluator: PolicyEvaluator, out_dir: Path, *, games: int,
               settings: SelfPlaySettings, worker: str = "w0", seed: int = 0,
               concurrency: int = DEFAULT_CONCURRENCY, size: int | None = None,
               openings: Sequence[tuple[int, ...]] = ((),),
               should_stop: Callable[[], bool] | None = None,
               on_game: Callable[[str, SelfPlayGame], None] | None = None) -> WorkerReport:
    """Play the missing games of indices 0..games-1 into `out_dir`, `concurrency` at a time;
    game `index` starts from `openings[index % len(openings)]`. `should_stop` is asked before
    each game starts (games in flight finish); `on_game(game_id, record)` is called after each
    game is written (progress, metrics)."""
    if games < 0 or concurrency < 1 or not openings:
        raise ValueError(f"need games >= 0, concurrency >= 1 and an opening, got {games}, "
                         f"{concurrency}, {len(openings)} openings")
    if not worker or "/" in worker or worker.startswith("."):
        raise ValueError(f"bad worker name {worker!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with locked(out_dir / f".{worker}.lock", timeout_s=0, holder=f"self-play worker {worker}"):
        _remove_leftovers(out_dir, worker)
        return _play(game, evaluator, out_dir, games=games, settings=settings, worker=worker,
                     seed=seed, concurrency=concurrency, size=size, openings=openings,
                     should_stop=should_stop, on_game=on_game)


def _remove_leftovers(out_dir: Path, worker: str) -> None:
    """Temporary files of this worker's games that a killed run left (hidden `.tmp` names)."""
    for folder in (out_dir / GAMES_DIR, out_dir / RECORDS_DIR):
        for path in folder.glob(f".{worker}-*.tmp") if folder.is_dir() else ():
            log.info("removing %s, left by a stopped run", path)
            path.unlink(missing_ok=True)


def _play(game: Game, evaluator: PolicyEvaluator, out_dir: Path, *, games: int,
          settings: SelfPlaySettings, worker: str, seed: int, concurrency: int,
          size: int | None, openings: Sequence[tuple[int, ...]],
          should_stop: Callable[[], bool] | None,
          on_game: Callable[[str, SelfPlayGame], None] | None) -> WorkerReport:
    done = finished_ids(out_dir)
    todo = [i for i in range(games) if game_id(worker, i) not in done]
    report = WorkerReport(skipped=games - len(todo))
    counting = _CountingEvaluator(evaluator)
    batcher = BatchingEvaluator(counting, max_boards=max(concurrency * settings.batch_size, 1))
    lock = threading.Lock()
    started = time.perf_counter()

    def one(index: int) -> None:
        if should_stop is not None and should_stop():
            return
        gid = game_id(worker, index)
        with batcher.participant():
            record = play_game(game, batcher, settings, seed=game_seed(seed, worker, index),
                               opening=tuple(openings[index % len(openings)]), size=size)
        write_game(out_dir, gid, record, game)
        with lock:
            report.played.append(record)
        log.info("self-play %s: %d moves, %s, winner %d", gid, len(record.moves), record.end,
                 record.winner)
        if on_game is not None:
            on_game(gid, record)

    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="selfplay") as pool:
            for future in [pool.submit(one, i) for i in todo]:
                future.result()
    finally:
        batcher.close()
    report.seconds = time.perf_counter() - started
    report.evaluator_calls, report.boards = counting.calls, counting.boards
    return report


__all__ = ["DEFAULT_CONCURRENCY", "WorkerReport", "game_id", "game_seed", "run_worker"]
