"""The self-play loop operated: its games split over Dask workers, its Prometheus endpoint,
its share plan's pinning and its metrics' counting.

Budgets are tiny (a few games at a few visits, a few steps, a gate of two games): the figures
say nothing about strength, only that the games land once each and the metrics are served."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from services.atomic_files import locked
from services.selfplay.game_record import MoveRecord, SelfPlayGame
from services.selfplay.loop import STAGES, STOP_FILE, LoopState
from services.selfplay.records import (
    GAMES_DIR,
    RECORDS_DIR,
    finished_ids,
    read_game,
    record_suffix,
)
from services.selfplay_loop.cost import COST_DIR, read_runs, share_ledger
from services.selfplay_loop.metrics import LoopMetrics
from services.selfplay_loop.stages import SHARES_FILE, LoopSettings, share_plan
from tests.test_selfplay_stages import TINY

torch.set_num_threads(1)


def _settings(tmp_path: Path, games: int) -> LoopSettings:
    return LoopSettings(game="gomoku", games=games, concurrency=2, openings=4,
                        opening_plies=4, repository=str(tmp_path / "repo"), train_steps=4,
                        batch_size=16, gate_visits=2, gate_max_games=2, selfplay=TINY)


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of a Prometheus text exposition."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _series_names(text: str) -> set[str]:
    """The series names Prometheus stores from an exposition: each sample line's name as
    written, and each declared family's name."""
    names = {line.split("{")[0].split()[0] for line in text.splitlines()
             if line and not line.startswith("#")}
    return names | {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_a_share_plan_is_pinned_and_keeps_an_in_process_start(tmp_path):
    run = tmp_path / "run"
    plan = share_plan(run, 0, games=5, shares=2)
    assert plan == [{"worker": "it0000-s00", "games": 3}, {"worker": "it0000-s01", "games": 2}]
    # pinned: a rerun on another number of workers plays the same shares
    assert share_plan(run, 0, games=5, shares=7) == plan
    assert json.loads((run / "iter-0000" / SHARES_FILE).read_text())["shares"] == plan
    # more shares than games: one game each
    assert [p["games"] for p in share_plan(run, 1, games=2, shares=4)] == [1, 1]
    # an iteration whose games began in this process (worker itN, no plan) keeps that worker
    games = run / "iter-0002" / "selfplay-0002" / "games"
    games.mkdir(parents=True)
    (games / "it0002-000000.json").write_text("{}")
    assert share_plan(run, 2, games=4, shares=3) == [{"worker": "it0002", "games": 4}]


def test_metrics_count_each_game_once_and_chain_the_gates_elo():
    metrics = LoopMetrics("gomoku")
    record = SelfPlayGame("gomoku", 15, 0, (), False)
    record.moves = [MoveRecord(112, True, 8, 0.0), MoveRecord(113, False, 3, 0.0)]
    metrics.game_played("it0000-000000", record)  # played here: counted as it finishes
    summary = {"serving_version": 1, "played_now": 3, "moves_now": 7, "visits_now": 30,
               "seconds": 6.0, "mean_moves": 2.3, "resign_checked": 4, "resign_wrong": 1,
               "resign_threshold": 0.975, "wall_seconds": 6.5, "cpu_seconds": 5.0}
    metrics.stage_finished(0, "selfplay", summary)  # the other 2 games played elsewhere
    metrics.stage_finished(0, "gate", {"candidate_version": 2, "serving_version": 1,
                                       "passed": True, "elo": 40.0})
    metrics.stage_finished(1, "gate", {"candidate_version": 3, "serving_version": 2,
                                       "passed": False, "elo": -10.0})
    got = _samples(_exposition(metrics))
    game = (("game", "gomoku"),)
    assert got[("movepred_selfplay_games_total", game)] == 3
    assert got[("movepred_selfplay_moves_total", game)] == 7
    assert got[("movepred_selfplay_visits_total", game)] == 30
    assert got[("movepred_selfplay_games_per_hour", game)] == pytest.approx(1800)
    assert got[("movepred_selfplay_visits_per_second", game)] == pytest.approx(5)
    assert got[("movepred_selfplay_resign_false_positive_rate", game)] == 0.25
    assert got[("movepred_selfplay_resign_threshold", game)] == 0.975
    assert got[("movepred_loop_stage_cpu_seconds_total", (*game, ("stage", "selfplay")))] == 5
    elo = {dict(k[1])["version"]: v for k, v in got.items()
           if k[0] == "movepred_loop_version_elo"}
    assert elo == {"1": 0.0, "2": 40.0, "3": 30.0}


def _exposition(metrics: LoopMetrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


@pytest.mark.usefixtures("prefect_harness")
def test_the_loop_on_a_local_dask_cluster_serves_its_metrics(tmp_path, monkeypatch):
    """`--dask`'s flow (a local cluster of 2 worker processes, 1 thread each): the iteration's
    games are played as 2 shares on the workers, each game once; the metrics endpoint of the
    flow process, scraped over HTTP when the iteration's last stage has finished, names every
    series with plausible values."""
    import flows.selfplay as selfplay

    scraped: list[str] = []
    original = LoopMetrics.stage_finished

    def stage_finished(self, iteration, stage, summary, *, count=True):
        original(self, iteration, stage, summary, count=count)
        if stage == STAGES[-1] and count:  # the flow still runs: its endpoint is up
            with urllib.request.urlopen(self.endpoint.url, timeout=10) as answer:
                scraped.append(answer.read().decode())

    monkeypatch.setattr(LoopMetrics, "stage_finished", stage_finished)
    settings = _settings(tmp_path, games=5)
    run = tmp_path / "run"
    flow = selfplay.selfplay_on(dask_workers=2)
    out = flow(config=settings, run_dir=str(run), iterations=1, shares=2, metrics_port=0)
    assert out["finished_iterations"] == 1

    # the games: two shares of 3 and 2, each game once, none lost
    folder = run / "iter-0000" / "selfplay-0000"
    ids = sorted(finished_ids(folder))
    assert ids == [f"it0000-s00-{i:06d}" for i in range(3)] + [
        f"it0000-s01-{i:06d}" for i in range(2)]
    assert len(list((folder / "games").glob("*.json"))) == 5
    play = LoopState.load(run).history[0]["selfplay"]
    assert play["games"] == play["played_now"] == 5 and play["finished_before"] == 0
    assert sorted(s["worker"] for s in play["shares"]) == ["it0000-s00", "it0000-s01"]
    assert all(s["cpu_seconds"] > 0 for s in play["shares"])
    # the shares ran in the workers' processes: their CPU is added to the stage's
    assert play["cpu_seconds"] >= sum(s["cpu_seconds"] for s in play["shares"])

    # the endpoint
    assert len(scraped) == 1
    got = _samples(scraped[0])
    names = {name for name, _ in got}
    assert {"movepred_selfplay_games_total", "movepred_selfplay_visits_total",
            "movepred_selfplay_games_per_hour", "movepred_selfplay_visits_per_second",
            "movepred_selfplay_game_moves", "movepred_selfplay_resign_false_positive_rate",
            "movepred_train_policy_loss", "movepred_train_value_mse",
            "movepred_loop_version_elo", "movepred_loop_serving_version",
            "movepred_loop_stage_cpu_seconds_total"} <= names
    game = (("game", "gomoku"),)
    assert got[("movepred_selfplay_games_total", game)] == 5
    assert got[("movepred_selfplay_visits_total", game)] == play["visits_now"] > 0
    assert got[("movepred_selfplay_visits_total", game)] >= 5 * TINY.fast_visits
    assert got[("movepred_selfplay_games_per_hour", game)] > 0
    assert got[("movepred_selfplay_visits_per_second", game)] > 0
    assert 1 <= got[("movepred_selfplay_game_moves", game)] <= TINY.max_moves
    rate = got[("movepred_selfplay_resign_false_positive_rate", game)]
    assert math.isnan(rate) or 0 <= rate <= 1
    assert got[("movepred_selfplay_resign_threshold", game)] == play["resign_threshold"]
    loss = got[("movepred_train_policy_loss", (*game, ("split", "train")))]
    assert 0 < loss < 20 and math.isfinite(loss)
    assert 0 <= got[("movepred_train_value_mse", (*game, ("split", "train")))] <= 4
    record = LoopState.load(run).history[0]
    elo = {dict(k[1])["version"]: v for k, v in got.items()
           if k[0] == "movepred_loop_version_elo"}
    assert elo["1"] == 0.0
    if record["gate"]["elo"] is not None:
        assert elo["2"] == record["gate"]["elo"]
    assert got[("movepred_loop_serving_version", game)] == record["rollout"]["serving"]
    for stage in STAGES:
        assert got[("movepred_loop_stage_cpu_seconds_total",
                    (*game, ("stage", stage)))] == record[stage]["cpu_seconds"]
    # every metric the self-play dashboard asks for is served
    from tests.test_monitoring import METRIC, SELFPLAY_DASHBOARD, dashboard, exprs

    used = {m for e in exprs(dashboard(SELFPLAY_DASHBOARD)) for m in METRIC.findall(e)}
    assert used and not used - _series_names(scraped[0]), sorted(used - _series_names(
        scraped[0]))


HELD_SHARE = "it0000-s00"  # the share whose worker process is killed mid-share


def _kill_the_held_worker(run: Path, marker: Path, seen: dict, flow_done: threading.Event) -> None:
    """Wait until the held share's worker waits in the middle of a game's write
    (`tests.dask_share_hold`), note what the share has on disk, ask the loop to stop after
    this stage, SIGKILL that worker process (a child of this one), and lift the hold once it
    is dead, so that Dask's retry of the share can write its games."""
    import psutil

    folder = run / "iter-0000" / "selfplay-0000"
    pid_file = marker.with_name(marker.name + ".pid")
    try:
        while not pid_file.exists():
            if flow_done.is_set():
                return
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        children = {p.pid for p in psutil.Process().children(recursive=True)}
        assert pid in children, f"{pid} is not a worker process of this test's cluster"
        seen["temporary"] = sorted(p.name for p in (folder / GAMES_DIR).glob(
            f".{HELD_SHARE}-*.tmp"))
        try:
            with locked(folder / f".{HELD_SHARE}.lock", timeout_s=0):
                seen["locked_while_playing"] = False
        except TimeoutError:
            seen["locked_while_playing"] = True
        (run / STOP_FILE).touch()  # the loop stops after the self-play stage
        # the worker and any process it started, as a lost machine or container goes
        doomed = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        os.kill(pid, signal.SIGKILL)
        for process in doomed[1:]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(doomed, timeout=60)
        assert not any(process.is_running() for process in doomed)
        # dead: what the killed worker finished; the retry places none while the hold lasts
        seen["finished"] = sorted(i for i in finished_ids(folder) if i.startswith(HELD_SHARE))
        seen["pid"] = pid
    except BaseException as exc:  # the test reports it
        seen["error"] = exc
    finally:
        marker.unlink(missing_ok=True)


@pytest.mark.integration
@pytest.mark.usefixtures("prefect_harness")
def test_a_dask_worker_killed_mid_share_loses_no_game_and_counts_none_twice(tmp_path,
                                                                          monkeypatch):
    """The flow's self-play on a local Dask cluster of 2 worker processes, 2 shares of 4
    tic-tac-toe games: the worker playing share 0 is SIGKILLed after a game of it is written
    and while the next one's file is half-placed (its temporary file written, its JSON not yet
    renamed: `tests/dask_share_hold.py` holds it there, so the moment does not depend on the
    machine's speed). Dask runs the share again on a worker; the lock the dead worker held
    does not stop it, it removes the temporary file and plays only the missing games. Every
    planned game is on disk once, whole, with its record, and the stage counts each once."""
    import dask
    from prefect.settings import get_current_settings

    import flows.selfplay as selfplay
    from tests.dask_share_hold import HOLD_ENV
    from tests.tictactoe_game import TICTACTOE

    settings = LoopSettings(game=TICTACTOE.name, games=8, concurrency=2, openings=4,
                            opening_plies=2, repository=str(tmp_path / "repo"), selfplay=TINY)
    run = tmp_path / "run"
    marker = tmp_path / "hold"
    marker.write_text(HELD_SHARE)
    monkeypatch.setenv(HOLD_ENV, str(marker))
    # the workers' Prefect talks to the test's API server; without it in their environment,
    # each worker process starts an API server of its own for its log lines, which the
    # cluster's close (a SIGKILL after 4 s) leaves running
    monkeypatch.setenv("PREFECT_API_URL", str(get_current_settings().api.url))
    seen: dict = {}
    flow_done = threading.Event()
    tasks_before = {task.id for task in _share_task_runs()}
    killer = threading.Thread(target=_kill_the_held_worker,
                              args=(run, marker, seen, flow_done), daemon=True)
    killer.start()
    try:
        with dask.config.set({"distributed.worker.preload": ["tests.dask_share_hold"]}):
            out = selfplay.selfplay_on(dask_workers=2)(config=settings, run_dir=str(run),
                                                       iterations=1, shares=2)
    finally:
        flow_done.set()
        killer.join(timeout=60)
    assert "error" not in seen, seen.get("error")
    assert "pid" in seen, "the held share's worker never waited mid-write"
    # killed mid-share: with a game written, another half-placed, the lock still held
    assert 1 <= len(seen["finished"]) < 4 and len(seen["temporary"]) >= 1
    assert seen["locked_while_playing"]
    assert out["why"] == "stop requested" and out["done"] == ["selfplay"]

    folder = run / "iter-0000" / "selfplay-0000"
    planned = [f"it0000-s00-{i:06d}" for i in range(4)] + [f"it0000-s01-{i:06d}"
                                                            for i in range(4)]
    assert sorted(finished_ids(folder)) == planned
    suffix = record_suffix(TICTACTOE)
    records = sorted(p.name[:-len(suffix)] for p in (folder / RECORDS_DIR).iterdir())
    assert records == planned  # a record per game, none without its game
    seeds = set()
    for game_id in planned:
        data = json.loads((folder / GAMES_DIR / f"{game_id}.json").read_text())
        record = read_game(folder / GAMES_DIR / f"{game_id}.json")
        assert data["game_id"] == game_id and record.moves and record.end
        assert len(record.opening) + len(record.moves) <= 9
        assert (folder / RECORDS_DIR / f"{game_id}{suffix}").stat().st_size > 0
        seeds.add(record.seed)
    assert len(seeds) == len(planned)  # eight games, not one played twice under two names
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")]
    # the dead worker's lock file is there, and free
    with locked(folder / f".{HELD_SHARE}.lock", timeout_s=0):
        pass

    # counted once: the killed worker's games as finished before the share's retry
    state = LoopState.load(run)
    play = state.current["selfplay"]
    assert play["games"] == 8 and state.games == 8
    assert play["played_now"] + play["finished_before"] == 8
    shares = {s["worker"]: s for s in play["shares"]}
    assert sorted(shares) == ["it0000-s00", "it0000-s01"]
    assert shares[HELD_SHARE]["skipped"] == len(seen["finished"])
    assert shares[HELD_SHARE]["played"] == 4 - len(seen["finished"])
    assert shares["it0000-s01"]["played"] + shares["it0000-s01"]["skipped"] == 4
    # and the CPU the killed worker's ledger holds for it is in the stage's cost
    held = read_runs(share_ledger(run / "iter-0000" / COST_DIR, HELD_SHARE))
    assert held[0].process.split(":")[1] == str(seen["pid"]) and len(held) == 2
    assert play["earlier_runs"] == {"runs": 0, "wall_seconds": 0,
                                    "cpu_seconds": pytest.approx(held[0].cpu_seconds, abs=1e-3)}
    # and in Prefect: one task run per share, the killed one's rerun by Dask under its id
    tasks = [task for task in _share_task_runs() if task.id not in tasks_before]
    assert sorted((task.name, task.state_name) for task in tasks) == [
        ("self-play it0000-s00", "Completed"), ("self-play it0000-s01", "Completed")]


def _share_task_runs() -> list:
    """The task runs of iteration 0's two self-play shares that the Prefect API (the test
    harness's server, shared by the session's tests) knows."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    names = [f"self-play it0000-s{k:02d}" for k in range(2)]
    with get_client(sync_client=True) as client:
        return client.read_task_runs(task_run_filter=TaskRunFilter(
            name=TaskRunFilterName(any_=names)))


def _loop_record(cpu: dict[int, float | None]) -> dict:
    """A loop.json of iterations whose every stage took `cpu[i]` CPU seconds; iteration i made
    version i + 2 from the first version 1."""
    return {"history": [
        {"iteration": i, "selfplay": {"serving_version": 1, "cpu_seconds": c},
         "train": {"candidate_version": i + 2, "cpu_seconds": c},
         **{s: {"cpu_seconds": c} for s in ("ingest", "gate", "rollout")}}
        for i, c in cpu.items()]}


def test_loop_cpu_hours_add_every_stage_up_to_the_versions_iteration():
    from services.match.ratings import loop_cpu_hours

    hours = loop_cpu_hours(_loop_record({0: 360.0, 1: 720.0}))
    assert hours == {1: 0.0, 2: pytest.approx(0.5), 3: pytest.approx(1.5)}
    # a run recorded before the loop counted CPU: refused, unless measured figures are given
    old = _loop_record({0: None, 1: 720.0})
    with pytest.raises(ValueError, match="iteration 0 selfplay: no CPU time"):
        loop_cpu_hours(old)
    given = {0: {s: 72.0 for s in STAGES}}
    assert loop_cpu_hours(old, given)[3] == pytest.approx(0.1 + 1.0)


def test_elo_against_cpu_command_draws_the_rated_versions(tmp_path, capsys):
    from services.match.ratings import main

    players = {f"version:m/{v}:visits=10": {"kind": "version", "model_name": "m", "version": v,
                                             "visits": 10} for v in (1, 2, 3)}
    entries = []
    for n, (a, b, score) in enumerate([(1, 2, 0.0), (2, 1, 1.0), (1, 2, 1.0), (1, 3, 0.0),
                                       (3, 1, 1.0), (3, 1, 0.0), (2, 3, 0.5), (1, 3, 0.0)]):
        black, white = f"version:m/{a}:visits=10", f"version:m/{b}:visits=10"
        entries.append({"format": 1, "id": f"{n:04d}", "black": black, "white": white,
                        "score": score, "opening_index": n, "opening": [n],
                        "players": {black: players[black], white: players[white]}})
    log = tmp_path / "ratings" / "games.jsonl"
    log.parent.mkdir()
    log.write_text("".join(json.dumps(e) + "\n" for e in entries))
    run = tmp_path / "loop"
    run.mkdir()
    (run / "loop.json").write_text(json.dumps(_loop_record({0: 360.0, 1: 720.0})))
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"iterations": {"0": {s: 36.0 for s in STAGES}},
                               "estimated": [0]}))
    assert main(["--log", str(log), "--loop", str(run), "--cpu", str(cpu)]) == 0
    out = capsys.readouterr().out
    assert "v2: 0.050 CPU-hours" in out and "v3: 1.050 CPU-hours" in out
    assert out.count("estimated") == 1  # v2's iteration only
    png = log.with_name("elo_cpu.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    # a loop record without CPU figures: one line, no picture
    (run / "loop.json").write_text(json.dumps(_loop_record({0: None})))
    with pytest.raises(SystemExit) as stopped:
        main(["--log", str(log), "--loop", str(run), "--out", str(tmp_path / "x.png")])
    assert stopped.value.code == 2 and "no CPU time" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(("flags", "cluster", "shares"), [
    ([], {"dask_address": None, "dask_workers": 0}, None),
    (["--dask"], {"dask_address": None, "dask_workers": 2}, 2),
    (["--dask", "--dask-workers", "3"], {"dask_address": None, "dask_workers": 3}, 3),
    (["--dask-address", "tcp://s:8786"], {"dask_address": "tcp://s:8786", "dask_workers": 0},
     4),
    (["--dask-address", "tcp://s:8786", "--shares", "9"],
     {"dask_address": "tcp://s:8786", "dask_workers": 0}, 9),
])
def test_the_command_line_puts_the_flow_on_dask(monkeypatch, flags, cluster, shares):
    """`--dask` is a local cluster of 2 worker processes and as many shares; an address keeps
    its workers' count to itself, so 4 shares unless told; without either, no shares."""
    import flows.selfplay as selfplay

    called: dict = {}

    def selfplay_on(**options):
        called.update(options)
        return lambda **kwargs: called.update(kwargs) or {"why": "test"}

    monkeypatch.setattr(selfplay, "selfplay_on", selfplay_on)
    monkeypatch.setattr(selfplay, "configure_logging", lambda args: None)
    monkeypatch.setattr(selfplay, "announce_prefect_api", lambda: None)
    assert selfplay.main(["--iterations", "1", "--metrics-port", "9108", *flags]) == 0
    assert {k: called[k] for k in cluster} == cluster
    assert called["shares"] == shares and called["metrics_port"] == 9108
    assert called["metrics_host"] == "127.0.0.1"
