"""The self-play loop's bookkeeping: stage order, budget, stop request, and a resume after a
SIGKILL in every stage with the same iteration numbers and no stage's work done twice."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from services.selfplay.loop import STAGES, STOP_FILE, Budget, LoopState, run_loop


class MarkingStages:
    """Each stage appends "start" and "end" lines to a journal; with `slow` set the stage
    sleeps between them (a window to kill it in); its work (a file named after the
    iteration and stage) is written whole at the end, as a real stage's output is."""

    def __init__(self, journal: Path, slow: float = 0.0, games: int = 10) -> None:
        self.journal = journal
        self.slow = slow
        self.games = games

    def _stage(self, name: str, iteration: int, folder: Path, history: list[dict]) -> dict:
        with self.journal.open("a") as f:
            f.write(f"start {iteration} {name} {len(history)}\n")
        time.sleep(self.slow)
        (folder / f"{name}.out").write_text(f"{iteration}")
        with self.journal.open("a") as f:
            f.write(f"end {iteration} {name}\n")
        return {"games": self.games if name == "selfplay" else 0, "stage": name}

    def __getattr__(self, name: str):
        if name in STAGES:
            return lambda iteration, folder, history: self._stage(name, iteration, folder,
                                                                  history)
        raise AttributeError(name)


def _journal(path: Path) -> list[tuple[str, int, str]]:
    return [(w[0], int(w[1]), w[2]) for w in (line.split() for line in
                                               path.read_text().splitlines())]


def test_iterations_run_every_stage_in_order_until_the_budget(tmp_path):
    journal = tmp_path / "journal"
    state, why = run_loop(tmp_path / "run", MarkingStages(journal), Budget(iterations=2))
    assert why == "2 iterations" and state.iteration == 2 and state.games == 20
    ends = [(i, s) for kind, i, s in _journal(journal) if kind == "end"]
    assert ends == [(i, s) for i in range(2) for s in STAGES]
    assert [h["iteration"] for h in state.history] == [0, 1]
    assert state.history[1]["gate"] == {"games": 0, "stage": "gate"}
    assert LoopState.load(tmp_path / "run") == state
    # more budget later: the loop goes on from iteration 2, nothing before it again
    state, why = run_loop(tmp_path / "run", MarkingStages(journal), Budget(games=30))
    assert why == "30 self-play games" and state.iteration == 3
    assert [(i, s) for kind, i, s in _journal(journal) if kind == "start"][10:] == \
        [(2, s) for s in STAGES]


def test_a_stop_request_ends_the_loop_after_the_running_stage(tmp_path):
    run = tmp_path / "run"
    calls = []

    def stop_after_train() -> bool:
        return "train" in LoopState.load(run).done

    state, why = run_loop(run, MarkingStages(tmp_path / "j"), Budget(iterations=5),
                          should_stop=stop_after_train, on_stage=lambda *a: calls.append(a))
    assert why == "stop requested" and state.done == ["selfplay", "ingest", "train"]
    assert [c[1] for c in calls] == ["selfplay", "ingest", "train"]
    (run / STOP_FILE).touch()
    assert run_loop(run, MarkingStages(tmp_path / "j"), Budget(iterations=5))[1] == \
        "stop requested"
    (run / STOP_FILE).unlink()
    state, why = run_loop(run, MarkingStages(tmp_path / "j"), Budget(iterations=1))
    assert why == "1 iterations" and state.iteration == 1
    ends = [(i, s) for kind, i, s in _journal(tmp_path / "j") if kind == "end"]
    assert ends == [(0, s) for s in STAGES]  # every stage once, across the three runs


def _loop_process(run: str, journal: str) -> None:
    run_loop(Path(run), MarkingStages(Path(journal), slow=0.3), Budget(iterations=2))


@pytest.mark.parametrize("stage", STAGES)
def test_a_loop_killed_in_a_stage_resumes_there_with_the_same_iterations(tmp_path, stage):
    run, journal = tmp_path / "run", tmp_path / "journal"
    ctx = multiprocessing.get_context("spawn")
    process = ctx.Process(target=_loop_process, args=(str(run), str(journal)))
    process.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill it inside `stage` of iteration 1
        if journal.exists() and ("start", 1, stage) in _journal(journal):
            break
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    assert ("end", 1, stage) not in _journal(journal)
    state, why = run_loop(run, MarkingStages(journal), Budget(iterations=2))
    assert why == "2 iterations" and state.iteration == 2
    entries = _journal(journal)
    ends = [(i, s) for kind, i, s in entries if kind == "end"]
    assert ends == [(i, s) for i in range(2) for s in STAGES]  # each stage's work once
    starts = [(i, s) for kind, i, s in entries if kind == "start"]
    assert starts.count((1, stage)) == 2 and len(starts) == 2 * len(STAGES) + 1
    assert [h["iteration"] for h in state.history] == [0, 1]
    assert json.loads((run / "loop.json").read_text())["games"] == 20
    assert (run / "iter-0001" / f"{stage}.out").read_text() == "1"
