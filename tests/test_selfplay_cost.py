"""The loop's cost ledgers: a stage's run that is killed keeps what it cost so far, and the
rerun's summary adds it, counting each process's CPU once."""

from __future__ import annotations

import json
import logging
import threading
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
    """By process, the union of its runs' intervals on its own CPU clock."""
    stage = [RunCost("h:10:a", 100.0, 105.0, 8.0),  # a killed stage run, last written at 105
             RunCost("h:11:b", 0.0, 1.0, 2.0)]
    shares = [RunCost("h:10:a", 101.0, 107.0, 7.0),  # in the stage's process, written later
              RunCost("h:11:b", 0.2, 1.5, 2.0),  # two shares on threads of one process
              RunCost("h:11:b", 0.4, 1.4, 2.0),
              RunCost("h:20:c", 3.0, 7.0, 8.0),  # a Dask worker's share
              RunCost("h:10:d", 0.0, 2.0, 2.0)]  # another process that reused pid 10
    assert earlier_cost(stage, shares) == {"runs": 2, "cpu_seconds": 7.0 + 1.5 + 4.0 + 2.0,
                                           "wall_seconds": 10.0}
    assert earlier_cost([], []) == {"runs": 0, "cpu_seconds": 0, "wall_seconds": 0}
    # one process that ran the stage twice (a retry in-process) counts both runs
    twice = [RunCost("h:10:a", 0.0, 5.0, 5.0), RunCost("h:10:a", 9.0, 14.0, 5.0)]
    assert earlier_cost(twice, [])["cpu_seconds"] == 10.0


def test_shares_on_threads_of_one_process_are_counted_once(tmp_path):
    """Several ledgers open at once in one process each measure that whole process."""
    barrier = threading.Barrier(3)

    def share(worker: str) -> None:
        with CostLedger(share_ledger(tmp_path, worker)):
            barrier.wait()
            _burn(0.1)
            barrier.wait()

    threads = [threading.Thread(target=share, args=(f"s{k}",)) for k in range(3)]
    with CostLedger(stage_ledger(tmp_path, "selfplay")) as stage:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    runs = [r for k in range(3) for r in read_runs(share_ledger(tmp_path, f"s{k}"))]
    total = earlier_cost(read_runs(stage_ledger(tmp_path, "selfplay")), runs)["cpu_seconds"]
    assert total == pytest.approx(stage.now().cpu_seconds, abs=0.05) and total >= 0.1
    # each share's entry saw the whole burn between the barriers: summed, about thrice it
    assert sum(r.cpu_seconds for r in runs) > 2 * total


def test_an_unreadable_ledger_counts_nothing_and_says_so(tmp_path, caplog):
    path = share_ledger(tmp_path, "it0000-s00")
    path.write_text("{not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert read_runs(path) == []
    assert "unreadable" in caplog.text
    path.write_text(json.dumps({"runs": [{"process": "h:1:a"}]}), encoding="utf-8")
    assert read_runs(path) == []
    with pytest.raises(ValueError, match="period"):
        CostLedger(path, period_s=0)


def test_a_ledger_that_cannot_be_written_does_not_stop_the_work(tmp_path, caplog):
    blocker = tmp_path / "cost"
    blocker.write_text("a file where the ledger's folder should be", encoding="utf-8")
    with caplog.at_level(logging.WARNING), CostLedger(stage_ledger(blocker, "ingest")) as ledger:
        _burn(0.01)
    assert ledger.now().cpu_seconds > 0 and "not written" in caplog.text
