"""Self-play games and workers: targets, exploration, resignation, files, kill-safety."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from services.games.base import BLACK, WHITE
from services.games.registry import get_game
from services.selfplay import records
from services.selfplay.openings import canonical_key, opening_suite
from services.selfplay.play import (
    END_MOVE_CAP,
    END_RESIGNED,
    END_RULES,
    play_game,
    wrong_resignations,
)
from services.selfplay.settings import SelfPlaySettings
from services.selfplay.worker import game_id, game_seed, run_worker

GOMOKU = get_game("gomoku")
GO = get_game("go")
FAST = SelfPlaySettings(full_visits=12, fast_visits=3, batch_size=4, temperature_moves=4,
                        max_moves=40)


@dataclass(frozen=True)
class Out:
    logits: np.ndarray
    model_name: str = "hashed"
    model_version: str = "7"
    values: np.ndarray | None = None


class HashedEvaluator:
    """Logits a fixed function of each board (deterministic, any game); `black_value` (None:
    no value head): every position is worth that much to Black (Gomoku boards: Black is to
    move when both colours have as many stones)."""

    def __init__(self, black_value: float | None = None, points_extra: int = 0) -> None:
        self.value = black_value
        self.extra = points_extra

    def infer(self, boards: np.ndarray) -> Out:
        n = len(boards)
        size = boards.shape[-1]
        flat = boards.reshape(n, -1).astype(np.float32)
        points = size * size + self.extra
        weights = np.sin(np.arange(flat.shape[1] * points, dtype=np.float32)).reshape(
            flat.shape[1], points)
        logits = flat @ weights + np.cos(np.arange(points, dtype=np.float32))
        black_to_move = (flat == 1).sum(axis=1) == (flat == 2).sum(axis=1)
        values = None if self.value is None else np.where(
            black_to_move, self.value, -self.value).astype(np.float32)
        return Out(logits.astype(np.float32), values=values)


def test_settings_refuse_nonsense():
    with pytest.raises(ValueError, match="fast_visits"):
        SelfPlaySettings(full_visits=10, fast_visits=20)
    with pytest.raises(ValueError, match="full_share"):
        SelfPlaySettings(full_share=1.5)
    with pytest.raises(ValueError, match="resign"):
        SelfPlaySettings(resign_after=0)


def test_a_game_is_its_seed():
    a = play_game(GOMOKU, HashedEvaluator(), FAST, seed=3)
    b = play_game(GOMOKU, HashedEvaluator(), FAST, seed=3)
    c = play_game(GOMOKU, HashedEvaluator(), FAST, seed=4)
    assert a.all_moves == b.all_moves and a.moves == b.moves
    assert a.all_moves != c.all_moves
    assert a.model_name == "hashed" and a.model_version == "7"


def test_full_searches_leave_targets_and_fast_ones_do_not():
    record = play_game(GOMOKU, HashedEvaluator(), FAST, seed=1)
    assert record.end in (END_RULES, END_MOVE_CAP)
    full = [m for m in record.moves if m.full]
    fast = [m for m in record.moves if not m.full]
    assert full and fast  # a quarter of the moves, give or take, at 40 moves
    for m in full:
        assert m.target and sum(v for _, v in m.target) >= FAST.full_visits - 1
        assert all(v > 0 for _, v in m.target)
        if len(record.moves) > FAST.temperature_moves:
            pass
    assert all(m.target == () for m in fast)
    only_full = play_game(GOMOKU, HashedEvaluator(), SelfPlaySettings(
        full_visits=6, fast_visits=2, full_share=1.0, max_moves=10), seed=1)
    assert all(m.full and m.target for m in only_full.moves)


def test_after_the_temperature_moves_the_most_visited_move_is_played():
    record = play_game(GOMOKU, HashedEvaluator(), SelfPlaySettings(
        full_visits=16, fast_visits=16, full_share=1.0, temperature_moves=2, max_moves=12,
        noise_weight=0.0), seed=5)
    for m in record.moves[2:]:
        most = max(v for _, v in m.target)
        assert dict(m.target)[m.move] == most


def test_move_cap_is_a_draw():
    record = play_game(GOMOKU, HashedEvaluator(), SelfPlaySettings(
        full_visits=4, fast_visits=2, max_moves=6), seed=0, opening=(112, 113))
    assert record.end == END_MOVE_CAP and record.winner == 0
    assert len(record.all_moves) == 6 and record.all_moves[:2] == (112, 113)


def test_a_hopeless_side_resigns_unless_the_game_is_played_out():
    # every position is lost for Black: Black resigns at its second move
    settings = SelfPlaySettings(full_visits=4, fast_visits=2, resign_after=2, max_moves=30)
    resigned = play_game(GOMOKU, HashedEvaluator(black_value=-1.0), settings, seed=0,
                         no_resign=False)
    assert resigned.end == END_RESIGNED and len(resigned.moves) == 3
    assert resigned.would_resign == (2, BLACK) and resigned.winner == WHITE
    played_out = play_game(GOMOKU, HashedEvaluator(black_value=-1.0), settings, seed=0,
                           no_resign=True)
    assert played_out.end != END_RESIGNED and played_out.would_resign == (2, BLACK)
    assert len(played_out.moves) > 3
    wrong, counted = wrong_resignations([resigned, played_out])
    assert counted == 1 and wrong == int(played_out.winner != WHITE)


def test_go_plays_with_its_pass_and_komi():
    record = play_game(GO, HashedEvaluator(points_extra=1), SelfPlaySettings(
        full_visits=6, fast_visits=2, max_moves=30), seed=2, size=9)
    assert record.size == 9 and len(record.all_moves) == 30
    assert record.model_name == "hashed"  # named even when a move's search was all reused
    assert all(0 <= m <= 81 for m in record.all_moves)


def test_opening_suite_is_distinct_legal_and_stable():
    suite = opening_suite(GOMOKU, 40, seed=1)
    assert suite == opening_suite(GOMOKU, 40, seed=1)
    keys = set()
    for moves in suite:
        assert 2 <= len(moves) <= 4
        state = GOMOKU.start()
        for m in moves:
            y, x = divmod(m, 15)
            assert abs(y - 7) <= 3 and abs(x - 7) <= 3
            state = state.play(m)
        keys.add(canonical_key(state))
    assert len(keys) == 40
    assert opening_suite(GO, 1, size=9, plies=(0, 0)) == [()]
    with pytest.raises(ValueError, match="cannot make"):
        opening_suite(GOMOKU, 5, plies=(1, 1), radius=0)


def test_game_files_round_trip_and_a_record_the_ingest_reads(tmp_path):
    record = play_game(GOMOKU, HashedEvaluator(black_value=0.1), FAST, seed=9, opening=(112,))
    path = records.write_game(tmp_path, "w0-000000", record, GOMOKU)
    assert records.read_game(path) == record
    assert records.finished_ids(tmp_path) == {"w0-000000"}
    suffix = records.record_suffix(GOMOKU)
    assert suffix in GOMOKU.record_formats
    assert (tmp_path / "records" / f"w0-000000{suffix}").stat().st_size > 0
    with pytest.raises(ValueError, match="not a self-play game"):
        records.from_json({"format": 1})
    with pytest.raises(ValueError, match="format"):
        records.from_json({**json.loads(path.read_text()), "format": 99})


def test_seeds_differ_by_game_and_worker():
    seeds = {game_seed(0, w, i) for w in ("a", "b") for i in range(50)}
    assert len(seeds) == 100 and game_seed(0, "a", 3) == game_seed(0, "a", 3)


def test_worker_batches_games_and_a_rerun_plays_only_the_missing(tmp_path):
    openings = opening_suite(GOMOKU, 3, seed=0)
    report = run_worker(GOMOKU, HashedEvaluator(), tmp_path, games=6, settings=FAST,
                        concurrency=3, openings=openings)
    assert len(report.played) == 6 and report.skipped == 0
    assert report.boards / report.evaluator_calls > FAST.batch_size  # games share calls
    assert records.finished_ids(tmp_path) == {game_id("w0", i) for i in range(6)}
    (tmp_path / "games" / "w0-000004.json").unlink()  # as if killed before game 4 ended
    again = run_worker(GOMOKU, HashedEvaluator(), tmp_path, games=6, settings=FAST,
                       concurrency=3, openings=openings)
    assert again.skipped == 5 and len(again.played) == 1
    assert again.played[0] == records.read_game(tmp_path / "games" / "w0-000004.json")
    replayed = [g for g in report.played if g.seed == again.played[0].seed]
    assert replayed and replayed[0].all_moves == again.played[0].all_moves


def _worker_process(out: str) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    slow = SelfPlaySettings(full_visits=40, fast_visits=10, batch_size=4, max_moves=60)
    run_worker(GOMOKU, HashedEvaluator(), Path(out), games=40, settings=slow, concurrency=2)


def test_a_killed_worker_loses_and_repeats_no_finished_game(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    process = ctx.Process(target=_worker_process, args=(str(tmp_path),))
    process.start()
    deadline = time.monotonic() + 300
    while len(records.finished_ids(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    before = records.finished_ids(tmp_path)
    assert len(before) >= 2
    for gid in before:  # every finished game is whole
        assert records.read_game(tmp_path / "games" / f"{gid}.json").moves
    games = max(int(g.split("-")[1]) for g in before) + 3
    settings = SelfPlaySettings(full_visits=40, fast_visits=10, batch_size=4, max_moves=60)
    report = run_worker(GOMOKU, HashedEvaluator(), tmp_path, games=games, settings=settings,
                        concurrency=2)
    assert records.finished_ids(tmp_path) == {game_id("w0", i) for i in range(games)}
    assert report.skipped == len(before) and len(report.played) == games - len(before)
    assert sorted(p.name for p in (tmp_path / "games").iterdir()) == sorted(
        f"{game_id('w0', i)}.json" for i in range(games))  # no temporary file left over


def test_a_worker_name_runs_once_and_cleans_what_a_killed_run_left(tmp_path):
    from services.atomic_files import locked

    (tmp_path / "games").mkdir()
    leftover = tmp_path / "games" / ".w0-000000.json.123-abcd.tmp"
    leftover.write_text("{")
    other = tmp_path / "games" / ".w1-000000.json.123-abcd.tmp"  # another worker's: kept
    other.write_text("{")
    with locked(tmp_path / ".w0.lock"), pytest.raises(TimeoutError, match="w0"):
        run_worker(GOMOKU, HashedEvaluator(), tmp_path, games=1, settings=FAST)
    assert leftover.exists()
    run_worker(GOMOKU, HashedEvaluator(), tmp_path, games=1, settings=FAST)
    assert not leftover.exists() and other.exists()
    with pytest.raises(ValueError, match="worker name"):
        run_worker(GOMOKU, HashedEvaluator(), tmp_path, games=1, settings=FAST, worker="../x")
