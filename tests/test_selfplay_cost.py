"""The loop's cost ledgers: a stage's run that is killed keeps what it cost so far, and the
rerun's summary adds it, counting each process's CPU once."""

from __future__ import annotations

import json
import logging
import time

import pytest

from services.selfplay_loop.cost import (
    CostLedger,
    RunCost,
    earlier_cost,
    read_runs,
    share_ledger,
    stage_ledger,
)


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_ledger_keeps_each_run_after_the_ones_before(tmp_path):
    path = stage_ledger(tmp_path / "cost", "train")
    with CostLedger(path) as first:
        assert first.earlier == []
        assert [r.cpu_seconds for r in read_runs(path)] == [pytest.approx(0, abs=0.05)]
        _burn(0.2)
    runs = read_runs(path)
    assert len(runs) == 1 and runs[0].cpu_seconds >= 0.2 and runs[0].wall_seconds >= 0.2
    leftover = path.with_name(f".{path.name}.123-abcd.tmp")  # a write a kill interrupted
    leftover.write_text("{", encoding="utf-8")
    with CostLedger(path) as second:
        assert second.earlier == runs and not leftover.exists()
    assert read_runs(path)[:1] == runs and len(read_runs(path)) == 2


def test_a_running_ledger_rewrites_its_entry_each_period(tmp_path):
    """What a run that is killed leaves: its entry as of the last period, not its start."""
    path = stage_ledger(tmp_path / "cost", "gate")
    with CostLedger(path, period_s=0.05):
        _burn(0.2)
        deadline = time.monotonic() + 30
        while read_runs(path)[-1].cpu_seconds < 0.2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert read_runs(path)[-1].cpu_seconds >= 0.2


def test_each_process_is_counted_once():
    stage = [RunCost(pid=10, cpu_seconds=5.0, wall_seconds=8.0),
             RunCost(pid=11, cpu_seconds=1.0, wall_seconds=2.0)]
    shares = [RunCost(pid=10, cpu_seconds=2.0, wall_seconds=7.0),  # in the stage's process
              RunCost(pid=11, cpu_seconds=1.5, wall_seconds=2.0),  # written after its stage's
              RunCost(pid=11, cpu_seconds=0.5, wall_seconds=2.0),  # last period
              RunCost(pid=20, cpu_seconds=4.0, wall_seconds=8.0)]  # a Dask worker's share
    assert earlier_cost(stage, shares) == {"runs": 2, "cpu_seconds": 5.0 + 2.0 + 4.0,
                                           "wall_seconds": 10.0}
    assert earlier_cost([], []) == {"runs": 0, "cpu_seconds": 0, "wall_seconds": 0}
    # one process that ran the stage twice (a retry in-process) counts both runs
    twice = [RunCost(pid=10, cpu_seconds=5.0, wall_seconds=8.0)] * 2
    assert earlier_cost(twice, shares[:1])["cpu_seconds"] == 10.0


def test_an_unreadable_ledger_counts_nothing_and_says_so(tmp_path, caplog):
    path = share_ledger(tmp_path, "it0000-s00")
    path.write_text("{not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert read_runs(path) == []
    assert "unreadable" in caplog.text
    path.write_text(json.dumps({"runs": [{"pid": 1}]}), encoding="utf-8")
    assert read_runs(path) == []
    with pytest.raises(ValueError, match="period"):
        CostLedger(path, period_s=0)


def test_a_ledger_that_cannot_be_written_does_not_stop_the_work(tmp_path, caplog):
    blocker = tmp_path / "cost"
    blocker.write_text("a file where the ledger's folder should be", encoding="utf-8")
    with caplog.at_level(logging.WARNING), CostLedger(stage_ledger(blocker, "ingest")) as ledger:
        _burn(0.01)
    assert ledger.now().cpu_seconds > 0 and "not written" in caplog.text
