"""The self-play loop's bookkeeping: iterations of stages, a budget, a stop request, a resume.

Why a state file and idempotent stages: a loop runs for hours or days and is killed by
people, machines and OOM killers. Every iteration runs the same stages in order (self-play ->
ingest -> train -> gate -> rollout); after each stage the loop records it as done in
``loop.json`` (atomically), and each stage is written so that running it again after a kill
finishes its work without repeating what is done (the self-play workers play only missing
games, the ingest rewrites its manifest whole, training restarts its iteration, the gate's
match log skips finished games). A rerun with the same folder therefore resumes at the stage
that was running, with the same iteration numbers; nothing is lost or counted twice.

A stop request (the file ``STOP`` in the run folder, or `should_stop()`) is honoured between
stages, the loop's safe points: the running stage finishes, its completion is recorded, and
the loop returns. The budget (iterations, self-play games, wall hours) is checked between
iterations: an iteration that has played its games also trains and gates on them.

What a stage does is the caller's (`Stages`): this module is the order, the record and the
budget only, so every registered game runs the same loop.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from services.atomic_files import atomic_write_text

log = logging.getLogger(__name__)

STATE_FILE = "loop.json"
STOP_FILE = "STOP"
STAGES = ("selfplay", "ingest", "train", "gate", "rollout")


class Stages(Protocol):
    """What one iteration does; each returns a JSON-able summary kept in the loop's record.
    `folder` is the iteration's own folder (``iter-0003``), `history` the records of the
    iterations before, oldest first."""

    def selfplay(self, iteration: int, folder: Path, history: list[dict]) -> dict: ...

    def ingest(self, iteration: int, folder: Path, history: list[dict]) -> dict: ...

    def train(self, iteration: int, folder: Path, history: list[dict]) -> dict: ...

    def gate(self, iteration: int, folder: Path, history: list[dict]) -> dict: ...

    def rollout(self, iteration: int, folder: Path, history: list[dict]) -> dict: ...


@dataclass(frozen=True)
class Budget:
    iterations: int | None = None
    games: int | None = None  # self-play games in all (each stage's summary counts "games")
    hours: float | None = None  # wall hours of stage work in all

    def spent(self, state: LoopState) -> str | None:
        """Why the budget is spent, or None."""
        if self.iterations is not None and state.finished_iterations >= self.iterations:
            return f"{state.finished_iterations} iterations"
        if self.games is not None and state.games >= self.games:
            return f"{state.games} self-play games"
        if self.hours is not None and state.seconds >= self.hours * 3600:
            return f"{state.seconds / 3600:.2f} hours"
        return None


@dataclass
class LoopState:
    iteration: int = 0  # the iteration running or next
    done: list[str] = field(default_factory=list)  # stages of `iteration` finished
    current: dict[str, Any] = field(default_factory=dict)  # their summaries
    history: list[dict] = field(default_factory=list)  # finished iterations' records
    games: int = 0
    seconds: float = 0.0

    @property
    def finished_iterations(self) -> int:
        return len(self.history)

    @staticmethod
    def load(run_dir: Path) -> LoopState:
        path = Path(run_dir) / STATE_FILE
        if not path.exists():
            return LoopState()
        data = json.loads(path.read_text(encoding="utf-8"))
        unknown = set(data.get("done", [])) - set(STAGES)
        if unknown:
            raise ValueError(f"{path}: unknown stages {sorted(unknown)}")
        return LoopState(**data)

    def save(self, run_dir: Path) -> None:
        atomic_write_text(json.dumps(asdict(self), indent=1), Path(run_dir) / STATE_FILE)


def iteration_folder(run_dir: Path, iteration: int) -> Path:
    return Path(run_dir) / f"iter-{iteration:04d}"


def stop_requested(run_dir: Path) -> bool:
    return (Path(run_dir) / STOP_FILE).exists()


def run_loop(run_dir: Path, stages: Stages, budget: Budget, *,
             should_stop: Callable[[], bool] | None = None,
             on_stage: Callable[[int, str, dict], None] | None = None) -> tuple[LoopState, str]:
    """Run iterations until the budget is spent or a stop is asked; returns the state and why
    it ended. Resumes from ``loop.json`` when the folder holds one."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    state = LoopState.load(run_dir)

    def stop_asked() -> str | None:
        if stop_requested(run_dir) or (should_stop is not None and should_stop()):
            return "stop requested"
        return None

    while True:
        # the budget is checked between iterations (an iteration trains on its games); a stop
        # request after every stage
        why = stop_asked() or (budget.spent(state) if not state.done else None)
        if why is not None:
            log.info("self-play loop ends at iteration %d (%s)", state.iteration, why)
            return state, why
        folder = iteration_folder(run_dir, state.iteration)
        folder.mkdir(parents=True, exist_ok=True)
        for stage in STAGES:
            if stage in state.done:
                continue
            started = time.monotonic()
            log.info("iteration %d: %s", state.iteration, stage)
            summary = getattr(stages, stage)(state.iteration, folder, state.history)
            state.seconds += time.monotonic() - started
            state.games += int(summary.get("games", 0))
            state.current[stage] = summary
            state.done.append(stage)
            state.save(run_dir)
            if on_stage is not None:
                on_stage(state.iteration, stage, summary)
            if stage != STAGES[-1]:
                why = stop_asked()
                if why is not None:
                    log.info("self-play loop stops after %s of iteration %d (%s)", stage,
                             state.iteration, why)
                    return state, why
        state.history.append({"iteration": state.iteration, **state.current})
        state.iteration += 1
        state.done, state.current = [], {}
        state.save(run_dir)


__all__ = ["STAGES", "STATE_FILE", "STOP_FILE", "Budget", "LoopState", "Stages",
           "iteration_folder", "run_loop", "stop_requested"]
