"""The self-play loop operated: the replay window, one whole iteration per game through the
`selfplay` flow (play, ingest, train from the serving weights, publish, gate by match, roll out
or keep), a resume after SIGKILL in every stage and a stop on request.

Budgets are tiny (a few games at a few visits, a few steps, a gate of two games): the figures
are not meant to say anything about strength, only that every stage's work is done once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from services.dataset.shards import read_manifest
from services.games.registry import get_game
from services.match.results import read_log
from services.repository.rollout_state import read_state
from services.repository.version_files import read_version_metadata
from services.repository.versions import list_versions, quarantined_versions
from services.selfplay.loop import STAGES, STOP_FILE, Budget, LoopState, run_loop
from services.selfplay.openings import OpeningSuite, save_suite
from services.selfplay.pairs import write_selfplay_pairs
from services.selfplay.records import finished_ids
from services.selfplay.settings import SelfPlaySettings
from services.selfplay_loop.stages import (
    LINEAGE_KEY,
    LoopSettings,
    SelfPlayStages,
    folder_stats,
    match_elo,
)
from services.selfplay_loop.window import window_iterations, window_rows
from services.trainer.train import EXPERT_GAME_SPLIT
from tests.test_selfplay_training import built_dataset, expert_dataset
from tests.tictactoe_game import TICTACTOE

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
TINY = SelfPlaySettings(full_visits=6, fast_visits=2, batch_size=4, temperature_moves=4,
                        max_moves=24)
# game: (board size, opening plies, games, openings), for every registered game, the test game
# of tests/tictactoe_game.py (imported above: it registers itself) included. The short games
# (the Capture Game on 5x5, tic-tac-toe) play more of them, so that the ingest's validation
# split, a few per cent of the rows by position hash, is not empty
GAMES = {"gomoku": (None, 4, 4, 4), "go": (9, 0, 4, 4), "capture": (5, 2, 32, 8),
         TICTACTOE.name: (None, 2, 32, 12)}


def _settings(tmp_path: Path, game: str, **changes) -> LoopSettings:
    size, plies, games, openings = GAMES[game]
    return LoopSettings(**{
        "game": game, "board_size": size, "games": games, "concurrency": 2,
        "openings": openings, "opening_plies": plies, "repository": str(tmp_path / "repo"),
        "train_steps": 4,
        "batch_size": 16, "gate_visits": 2, "gate_max_games": 2, "selfplay": TINY, **changes})


def test_the_window_is_katagos_rule_in_whole_iterations():
    assert window_rows(5_000) == 5_000 and window_rows(10_000) == 10_000
    n, c = 1_000_000, 10_000
    assert window_rows(n) == int(c + 0.4 * (n ** 0.65 - c ** 0.65) / (0.65 * c ** -0.35))
    assert window_rows(20_000, min_rows=10_000) < 20_000
    # newest first until the window is held; the newest iteration always
    assert window_iterations([100] * 5, min_rows=1_000) == (0, 500)
    first, want = window_iterations([4_000] * 10)
    assert sum([4_000] * 10) > want and 4_000 * (10 - first) >= want > 4_000 * (9 - first)
    assert window_iterations([0]) == (0, 0)


def test_match_elo_is_the_scores_logistic_difference():
    assert match_elo(0, 0, 0) is None and match_elo(2, 0, 0) is None
    assert match_elo(1, 0, 1) == 0.0
    assert match_elo(3, 0, 1) == pytest.approx(190.8, abs=0.1)


def test_every_registered_game_is_one_the_loop_runs():
    """Each game writes a record format its ingest reads back: the loop refuses none."""
    from services.games.registry import registered_games
    from services.selfplay.records import record_suffix

    assert {g.name for g in registered_games()} <= set(GAMES)
    for game in registered_games():
        assert record_suffix(game) in game.record_formats, game.name


def test_a_game_whose_selfplay_cannot_be_ingested_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(TICTACTOE, "record_formats", ())  # it writes records it cannot read
    with pytest.raises(ValueError, match="cannot become training rows"):
        SelfPlayStages(LoopSettings(game=TICTACTOE.name, repository=str(tmp_path)), tmp_path,
                       ingest=lambda **_: {})


def test_a_network_the_trainer_cannot_train_is_refused_before_it_plays(tmp_path):
    """The Capture Game's sweep networks (the game's default, trained by the policy search)
    are not the loop's: it starts from `Game.selfplay_config` and refuses one of them, named
    or serving, before a game is played."""
    from services.trainer.publish import publish_model

    repo = tmp_path / "repo"
    fresh = SelfPlayStages(LoopSettings(game="capture", repository=str(repo)), tmp_path / "a",
                           ingest=lambda **_: {})
    assert fresh.first_config == "capture_res_b2c32_v" and fresh.model == "capture_policy"
    with pytest.raises(ValueError, match="'capture_mdlstm_k2' network, which takes other "):
        SelfPlayStages(LoopSettings(game="capture", config="capture_mdlstm_k2",
                                    repository=str(repo)), tmp_path / "b",
                       ingest=lambda **_: {})
    publish_model(repo, game="capture", config="capture_mdlstm_k2", seed=0)
    with pytest.raises(ValueError, match="capture_policy v1 is a 'capture_mdlstm_k2'"):
        fresh.serving(0)
    assert not (tmp_path / "a" / "iter-0000" / "selfplay-0000").exists()


def _check_iteration(run: Path, settings: LoopSettings, model: str) -> dict:
    """One finished iteration: every stage's work done once and agreeing with the others."""
    state = LoopState.load(run)
    assert [h["iteration"] for h in state.history] == [0] and state.done == []
    record = state.history[0]
    assert state.games == settings.games == record["selfplay"]["games"]
    games = run / "iter-0000" / "selfplay-0000"
    assert sorted(finished_ids(games)) == [f"it0000-{i:06d}" for i in range(settings.games)]
    dataset = run / "iter-0000" / "dataset"
    manifest = read_manifest(dataset)
    assert manifest["rows"] == folder_stats(games)["rows"] == record["ingest"]["rows"]
    assert [s["path"] for s in manifest["sources"]] == ["selfplay-0000"]
    rows = pa.concat_tables([pq.read_table(dataset / f["path"]) for f in manifest["files"]])
    targets = rows["policy_target"].to_pylist()  # a full search's visits: a policy target
    assert sum(t is not None for t in targets) == record["selfplay"]["full_rows"] > 0
    assert set(rows["model_name"].to_pylist()) == {model}  # each row's lineage
    repo = Path(settings.repository)
    assert record["selfplay"]["serving_version"] == 1  # the seeded first version
    # the first version has no games of its own to calibrate from: every game played out,
    # the setting pinned and recorded
    resign = record["selfplay"]["resign_calibration"]
    assert record["selfplay"]["resign_threshold"] == settings.selfplay.resign_threshold
    assert resign["rule"] == "played out" and resign["no_resign_share"] == 1.0
    assert record["selfplay"]["resigned"] == 0
    assert json.loads((run / "iter-0000" / "resign.json").read_text()) == resign
    fit = record["train"]
    assert fit["parent_version"] == 1 and 1 <= fit["steps"] <= settings.train_steps
    candidate = fit["candidate_version"]
    both = list_versions(repo, model) + quarantined_versions(repo, model)
    assert sorted(both) == [1, candidate] == [1, 2]  # published once
    gate, roll = record["gate"], record["rollout"]
    assert gate["candidate_version"] == candidate and gate["serving_version"] == 1
    assert 1 <= gate["match_games"] <= settings.gate_max_games
    serving = read_state(repo, model)["current"]
    if gate["passed"]:
        assert roll["rolled_out"] and serving == candidate == roll["serving"]
    else:
        assert candidate in quarantined_versions(repo, model)
        assert not roll["rolled_out"] and serving == 1 == roll["serving"]
    return record


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("game", sorted(GAMES))
def test_one_iteration_end_to_end(game, tmp_path):
    from flows.selfplay import iteration_markdown, selfplay_flow

    settings = _settings(tmp_path, game)
    run = tmp_path / "run"
    out = selfplay_flow(config=settings, run_dir=str(run), iterations=1)
    assert out["why"] == "1 iterations" and out["finished_iterations"] == 1
    model = SelfPlayStages(settings, run, ingest=lambda **_: {}).model
    record = _check_iteration(run, settings, model)
    candidate = record["train"]["candidate_version"]
    meta = read_version_metadata(Path(settings.repository), model, candidate) or json.loads(
        (Path(settings.repository) / model / "quarantine" / str(candidate) /
         "metadata.json").read_text())
    assert meta[LINEAGE_KEY]["run"] == str(run.resolve()) and meta[LINEAGE_KEY]["parent"] == 1
    text = iteration_markdown(0, record)
    assert f"candidate **v{candidate}**" in text and record["gate"]["verdict"] in text
    assert "0 resigned below -0.9000 (played out)" in text
    # the candidate started from the serving network's weights, not from random ones
    assert (run / "iter-0000" / "serving-weights.pt").is_file()


def gomoku_ingest(*, sources: list[str], out_dir: str, work_dir: str,
                  board_size: int | None) -> dict:
    """The ingest's own read and build of Gomoku self-play folders, a third of the games held
    out (8 games at the ingest's 5% would hold out none)."""
    from flows.ingest import parse_source

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pairs = []
    for source in map(parse_source, sources):
        pairs.append(Path(work_dir) / f"{source.name}.pairs.parquet")
        pairs[-1].parent.mkdir(parents=True, exist_ok=True)
        write_selfplay_pairs(get_game("gomoku"), source.path, pairs[-1], source.name)
    return built_dataset(pairs, out, 0.3)


def test_a_saved_suite_gives_the_openings_of_self_play_and_of_the_gate(tmp_path):
    suite = OpeningSuite("gomoku", 15, ((112, 113, 97), (112, 96), (98, 112, 126, 97)),
                         (0.1, -0.05, 0.0), "test", 0.2, 9)
    save_suite(suite, tmp_path / "suite.json")
    settings = _settings(tmp_path, "gomoku", games=6, opening_file=str(tmp_path / "suite.json"),
                         gate_max_games=6)
    run = tmp_path / "run"
    state, _ = run_loop(run, SelfPlayStages(settings, run, ingest=gomoku_ingest), Budget(1))
    games = [json.loads(p.read_text())
             for p in sorted((run / "iter-0000").rglob("games/*.json"))]
    assert len(games) == 6
    assert {tuple(g["opening"]) for g in games} == set(suite.openings)
    gate = state.history[0]["gate"]
    if gate["match_games"]:  # a candidate that met a serving version played the suite
        entries = read_log(Path(gate["log"]))
        assert {tuple(e["opening"]) for e in entries} <= set(suite.openings)
    wrong = _settings(tmp_path, "go", opening_file=str(tmp_path / "suite.json"))
    with pytest.raises(ValueError, match="holds gomoku 15 openings, not go 9"):  # no stage ran
        SelfPlayStages(wrong, tmp_path / "w", ingest=gomoku_ingest)


def test_the_train_summary_reports_the_value_loss_on_held_out_games(tmp_path):
    """The loop trains with an expert share and records, at every evaluation, the value head
    on the self-play games held out whole and on the expert dataset's held-out games."""
    expert = expert_dataset(tmp_path / "expert")
    settings = _settings(tmp_path, "gomoku", games=8, expert_dataset=str(expert),
                         expert_share=0.25)
    run = tmp_path / "run"
    state, _ = run_loop(run, SelfPlayStages(settings, run, ingest=gomoku_ingest), Budget(1))
    fit = state.history[0]["train"]
    assert fit["expert_share"] == 0.25 and fit["value_per_game"] == 1.0
    for split in ("game_test", EXPERT_GAME_SPLIT):
        m = fit["losses"][split]
        assert m["value_n"] > 0 and 0 <= m["value_mse"] <= 4 and "value_sign" in m
    assert 0 <= fit["losses"][EXPERT_GAME_SPLIT]["value_sign"] <= 1  # decisive games there
    assert fit["held_out_value"] and fit["held_out_value"][-1]["step"] == fit["steps"]
    assert {"game_test", EXPERT_GAME_SPLIT} <= set(fit["held_out_value"][-1])
    # the loop's record says it (loop.json), as does the iteration's artifact
    saved = json.loads((run / "loop.json").read_text())
    assert saved["history"][0]["train"]["losses"][EXPERT_GAME_SPLIT] == \
        fit["losses"][EXPERT_GAME_SPLIT]


def test_a_candidate_config_trains_a_fresh_network_of_that_size_on_the_window(tmp_path):
    """--candidate-config: the candidate is a new network of the named configuration (not the
    serving one's, nor its weights), trained with --samples-per-row counted over the window's
    train rows, and gated against the serving version like any candidate."""
    settings = _settings(tmp_path, "gomoku", games=8, candidate_config="res_b2c32_v",
                         samples_per_row=0.5, train_steps=1000, lr_schedule="cosine")
    run = tmp_path / "run"
    state, _ = run_loop(run, SelfPlayStages(settings, run, ingest=gomoku_ingest), Budget(1))
    record = state.history[0]
    fit, train_rows = record["train"], record["ingest"]["splits"]["train"]
    assert fit["init"] == "fresh" and fit["config"] == "res_b2c32_v"
    assert fit["steps"] == max(1, int(0.5 * train_rows // fit["batch_size"]))
    assert not (run / "iter-0000" / "serving-weights.pt").exists()
    repo, candidate = Path(settings.repository), fit["candidate_version"]
    meta = read_version_metadata(repo, "gomoku_policy", candidate) or json.loads(
        (repo / "gomoku_policy" / "quarantine" / str(candidate) / "metadata.json").read_text())
    assert meta["model_config"]["name"] == "res_b2c32_v"
    assert read_version_metadata(repo, "gomoku_policy", 1)["model_config"]["name"] == \
        "shao_f32_n2_v"
    assert record["gate"]["candidate_version"] == candidate
    assert record["gate"]["match_games"] >= 1  # the two sizes met in the gate


def test_prior_games_join_the_window_as_older_than_iteration_zero(tmp_path):
    from flows.selfplay import stage_line

    """--prior-games: an earlier run's self-play folders are ingested beside the new run's
    own, each under its own label (both runs name their first folder selfplay-0000); a window
    too small for them leaves them out, the newest iteration always in."""
    first = tmp_path / "first"
    run_loop(first, SelfPlayStages(_settings(tmp_path, "gomoku", games=6), first,
                                   ingest=gomoku_ingest), Budget(1))
    earlier = folder_stats(first / "iter-0000" / "selfplay-0000")["rows"]
    for window, held in ((100_000, 1), (1, 0)):
        run = tmp_path / f"second-{window}"
        settings = _settings(tmp_path, "gomoku", games=4, prior_games=str(first),
                             window_min_rows=window, seed=1)
        stages = SelfPlayStages(settings, run, ingest=gomoku_ingest)
        assert stages.prior_sources == (("prior-iter-0000-selfplay-0000",
                                         (first / "iter-0000" / "selfplay-0000").resolve()),)
        state, _ = run_loop(run, stages, Budget(1))
        ingested = state.history[0]["ingest"]
        own = folder_stats(run / "iter-0000" / "selfplay-0000")["rows"]
        assert ingested["prior_sources"] == held and ingested["total_rows"] == earlier + own
        assert ingested["prior_rows"] == earlier * held
        dataset = run / "iter-0000" / "dataset"
        manifest = read_manifest(dataset)
        labels = pa.concat_tables([pq.read_table(dataset / f["path"], columns=["source"])
                                   for f in manifest["files"]])["source"].to_pylist()
        assert sorted(set(labels)) == ["prior-iter-0000-selfplay-0000"] * held + [
            "selfplay-0000"]
        assert manifest["rows"] == len(labels) == own + earlier * held
        assert labels.count("selfplay-0000") == own
        assert ("earlier folder(s)" in stage_line(0, "ingest", ingested)) == bool(held)


def test_the_train_stage_trains_on_train_threads_and_gives_the_process_its_own_back(
        tmp_path, monkeypatch):
    import services.selfplay_loop.stages as stages_module

    seen, trainer = [], stages_module.train

    def train_watched(*args, **kwargs):
        result = trainer(*args, **kwargs)
        seen.append((args[1].num_threads, torch.get_num_threads()))  # as training left it
        return result

    monkeypatch.setattr(stages_module, "train", train_watched)
    before = torch.get_num_threads()
    run = tmp_path / "run"
    settings = _settings(tmp_path, "gomoku", games=4, train_threads=before + 1)
    run_loop(run, SelfPlayStages(settings, run, ingest=gomoku_ingest), Budget(1))
    assert seen == [(before + 1, before + 1)]
    assert torch.get_num_threads() == before


def test_prior_games_that_are_no_selfplay_of_this_game_are_refused(tmp_path):
    def stages(folder: Path) -> SelfPlayStages:
        return SelfPlayStages(_settings(tmp_path, "gomoku", prior_games=str(folder)),
                              tmp_path / "run", ingest=gomoku_ingest)

    with pytest.raises(ValueError, match="no such folder"):
        stages(tmp_path / "missing")
    (tmp_path / "empty" / "x").mkdir(parents=True)
    with pytest.raises(ValueError, match="no self-play folder"):
        stages(tmp_path / "empty")
    own = tmp_path / "run" / "iter-0000" / "selfplay-0000" / "games"
    own.mkdir(parents=True)
    (own / "g.json").write_text(json.dumps({"game": "gomoku", "moves": []}))
    with pytest.raises(ValueError, match="holds this run's own self-play folders"):
        stages(tmp_path / "run")
    games = tmp_path / "other" / "selfplay-0000" / "games"
    games.mkdir(parents=True)
    (games / "g.json").write_text(json.dumps({"game": "go", "moves": []}))
    with pytest.raises(ValueError, match=r"not Gomoku games: .*selfplay-0000"):
        stages(tmp_path / "other")


@pytest.mark.parametrize("config, why", [
    ("go_res_b2c32_v", "is a go network, not a Gomoku"),
    ("capture_mdlstm_k2", "not trained by gradient"),
])
def test_a_candidate_config_of_another_game_or_untrainable_is_refused(tmp_path, config, why):
    with pytest.raises(ValueError, match=why):
        SelfPlayStages(_settings(tmp_path, "gomoku", candidate_config=config), tmp_path / "r",
                       ingest=gomoku_ingest)


def _flow_command(run: Path, settings: LoopSettings) -> list[str]:
    s = settings
    return [sys.executable, "-m", "flows.selfplay", "--run-dir", str(run), "--iterations", "1",
            "--game", s.game, "--repository", s.repository, "--games", str(s.games),
            "--concurrency", "1", "--openings", str(s.openings), "--train-steps",
            str(s.train_steps), "--batch-size", str(s.batch_size), "--gate-visits",
            str(s.gate_visits), "--gate-max-games", str(s.gate_max_games),
            "--selfplay-full-visits", str(s.selfplay.full_visits), "--selfplay-fast-visits",
            str(s.selfplay.fast_visits), "--selfplay-max-moves", str(s.selfplay.max_moves),
            "--selfplay-batch-size", str(s.selfplay.batch_size)]


def _run_until(command: list[str], env: dict, marker: str | None, action: str,
               run: Path) -> int:
    """Run the flow; when a line holds `marker`, SIGKILL it ("kill") or ask it to stop
    ("stop", the STOP file). Returns its exit status."""
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if marker is not None and marker in line:
                if action == "kill":
                    os.killpg(process.pid, signal.SIGKILL)
                    break
                (run / STOP_FILE).touch()
                marker = None
        status = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert action == "kill" or status == 0, "".join(lines[-30:])
    return status


@pytest.mark.usefixtures("prefect_harness")
def test_the_flow_resumes_after_a_kill_in_every_stage_and_stops_on_request(tmp_path):
    from prefect.settings import PREFECT_API_URL

    settings = _settings(tmp_path, "gomoku")
    run = tmp_path / "run"
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = _flow_command(run, settings)
    stage_line = "services.selfplay.loop: iteration 0: {}"
    # a kill in the middle of self-play (its first game written) and of the gate (its first
    # game), at the start of the other stages; a stop asked during the gate
    plan = [("iteration 0 self-play: it0000-", "kill"), (stage_line.format("ingest"), "kill"),
            ("model initialised from", "kill"), ("iteration 0 gate: game 1/", "stop"),
            (stage_line.format("rollout"), "kill"), (None, "kill")]
    for marker, action in plan:
        status = _run_until(command, env, marker, action, run)
        state = LoopState.load(run)
        if action == "stop":
            assert status == 0 and state.done == ["selfplay", "ingest", "train", "gate"]
            (run / STOP_FILE).unlink()
        elif marker is not None:
            assert status == -signal.SIGKILL and state.iteration == 0
    assert status == 0
    record = _check_iteration(run, settings, "gomoku_policy")
    assert set(record) == {"iteration", *STAGES}
    # the runs killed inside self-play and training are in their stages' cost (those killed
    # as the loop named the stage may have died before the stage began); the gate (stopped,
    # not killed) ran once; the killed self-play had written a game, whose CPU its share's
    # ledger kept
    earlier = {stage: record[stage].get("earlier_runs", {"runs": 0}) for stage in STAGES}
    assert earlier["selfplay"]["runs"] == earlier["train"]["runs"] == 1, earlier
    assert earlier["ingest"]["runs"] <= 1 and earlier["rollout"]["runs"] <= 1, earlier
    assert earlier["gate"]["runs"] == 0, earlier
    for stage in ("selfplay", "train"):
        assert record[stage]["cpu_seconds"] >= earlier[stage]["cpu_seconds"]
    assert record["selfplay"]["earlier_runs"]["cpu_seconds"] > 0


def test_a_stop_file_before_the_start_runs_nothing(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / STOP_FILE).touch()
    stages = SelfPlayStages(_settings(tmp_path, "gomoku"), run, ingest=lambda **_: {})
    started = time.perf_counter()
    state, why = run_loop(run, stages, Budget(iterations=1))
    assert why == "stop requested" and state.done == [] and not (run / "iter-0000").exists()
    assert time.perf_counter() - started < 5


def test_folder_stats_count_resignations_and_wrong_ones(tmp_path):
    """The false-positive rate of resignation, from the games played out regardless."""
    from services.games.base import BLACK, WHITE
    from services.games.registry import get_game
    from services.selfplay.play import END_RESIGNED, END_RULES, MoveRecord, SelfPlayGame
    from services.selfplay.records import write_game

    def game(no_resign: bool, would: tuple[int, int] | None, winner: int, end: str):
        record = SelfPlayGame("gomoku", 15, 0, (), no_resign)
        record.moves = [MoveRecord(112, True, 8, 0.0, ((112, 8),)),
                        MoveRecord(113, False, 2, 0.0)]
        record.would_resign, record.winner, record.end = would, winner, end
        return record

    played = [game(False, (1, BLACK), WHITE, END_RESIGNED),  # resigned: not a check
              game(True, (1, BLACK), WHITE, END_RULES),  # right: black did lose
              game(True, (1, BLACK), BLACK, END_RULES),  # wrong: black won after all
              game(True, (1, WHITE), 0, END_RULES),  # wrong: a draw is no loss
              game(True, None, BLACK, END_RULES)]  # never wanted to resign
    for i, record in enumerate(played):
        write_game(tmp_path, f"w0-{i:06d}", record, get_game("gomoku"))
    stats = folder_stats(tmp_path)
    assert stats["games"] == 5 and stats["rows"] == 10 and stats["full_rows"] == 5
    assert stats["resigned"] == 1 and stats["resign_checked"] == 3
    assert stats["resign_wrong"] == 2 and stats["resign_false_positive_rate"] == 0.667


def _played_out(black_value: float, winner: int) -> dict:
    """A played-out tic-tac-toe game dict whose Black root values sit at `black_value`."""
    from services.selfplay.play import END_RULES, MoveRecord, SelfPlayGame
    from services.selfplay.records import to_json

    record = SelfPlayGame(TICTACTOE.name, 3, 0, (), True, winner=winner, end=END_RULES)
    record.moves = [MoveRecord(i, False, 2, black_value if i % 2 == 0 else 0.5)
                    for i in range(7)]
    return to_json(record, "x")


def _write_games(folder: Path, games: list[dict], first: int = 0) -> None:
    (folder / "games").mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(games, first):
        (folder / "games" / f"it0000-{i:06d}.json").write_text(json.dumps(data))


def test_the_resign_threshold_is_calibrated_and_pinned_across_a_resume(tmp_path):
    """Iteration 1 calibrates from iteration 0's played-out games (4 right resignations at
    -0.99, 2 wrong at -0.95: 33% at the fixed 0.9, none at 0.95), pins the threshold in its
    ``resign.json``, and a rerun after the stage died mid-way plays the rest of its games at
    the pinned threshold although iteration 0's games now say otherwise."""
    from dataclasses import replace

    from services.games.base import BLACK, WHITE
    from services.selfplay.resign import calibrate
    from services.selfplay_loop.stages import RESIGN_FILE, play_share
    from services.trainer.publish import publish_model

    settings = _settings(tmp_path, TICTACTOE.name, games=6, resign_fp_target=0.25)
    run = tmp_path / "run"
    before = run / "iter-0000" / "selfplay-0000"
    _write_games(before, [_played_out(-0.99, WHITE)] * 4 + [_played_out(-0.95, BLACK)] * 2)
    publish_model(Path(settings.repository), game=TICTACTOE.name, config="tictactoe_tiny",
                  seed=0)
    history = [{"iteration": 0, "selfplay": {"resign_threshold": 0.9, "serving_version": 1}}]
    folder = run / "iter-0001"
    folder.mkdir(parents=True)
    seen: list = []

    def die_after_a_game(tasks):
        seen.extend(tasks)
        play_share(replace(tasks[0], games=1))
        raise RuntimeError("killed mid-stage")

    with pytest.raises(RuntimeError, match="killed mid-stage"):
        SelfPlayStages(settings, run, ingest=lambda **_: {}, play_shares=die_after_a_game,
                       shares=1).selfplay(1, folder, history)
    pinned = json.loads((folder / RESIGN_FILE).read_text())
    assert pinned["rule"] == "calibrated" and pinned["threshold"] == pytest.approx(0.95)
    assert (pinned["checked"], pinned["wrong"], pinned["games"]) == (4, 0, 6)
    assert (pinned["previous"], pinned["previous_checked"], pinned["previous_wrong"]) == \
        (0.9, 6, 2) and pinned["iterations"] == [0]
    assert [t.settings.resign_threshold for t in seen] == [pinned["threshold"]]

    # iteration 0 now holds 6 more right resignations at -0.8 (2 wrong of 12 from 0.5 up):
    # calibrated afresh, the threshold would be the floor; the resumed stage keeps its pin
    _write_games(before, [_played_out(-0.8, WHITE)] * 6, first=6)
    games = [json.loads(p.read_text()) for p in sorted((before / "games").glob("*.json"))]
    assert calibrate(games, target=0.25, after=3, previous=0.9).threshold == 0.5
    seen.clear()

    def play_all(tasks):
        seen.extend(tasks)
        return [play_share(t) for t in tasks]

    summary = SelfPlayStages(settings, run, ingest=lambda **_: {}, play_shares=play_all,
                             shares=1).selfplay(1, folder, history)
    assert [t.settings.resign_threshold for t in seen] == [pinned["threshold"]]
    assert summary["resign_threshold"] == pinned["threshold"]
    assert summary["resign_calibration"] == pinned
    assert summary["finished_before"] == 1 and summary["played_now"] == 5
    assert summary["games"] == 6


def test_a_fixed_threshold_and_a_self_play_begun_before_a_pin_keep_the_setting(tmp_path):
    from services.games.base import WHITE

    history = [{"iteration": 0, "selfplay": {"resign_threshold": 0.99}}]
    fixed = SelfPlayStages(_settings(tmp_path, "gomoku", resign_fp_target=0.0), tmp_path / "a",
                           ingest=lambda **_: {})
    got = fixed.resign_threshold(1, 1, history)
    assert got == {"threshold": 0.9, "rule": "fixed", "why": "--resign-fp-target 0"}
    # a self-play folder with games and no pin: played with the setting before, kept
    run = tmp_path / "b"
    _write_games(run / "iter-0001" / "selfplay-0001", [_played_out(-0.99, WHITE)])
    begun = SelfPlayStages(_settings(tmp_path, "gomoku"), run, ingest=lambda **_: {})
    got = begun.resign_threshold(1, 1, history)
    assert got["rule"] == "fixed" and got["threshold"] == 0.9 and "began before" in got["why"]
    # without games: calibrated from the history the serving version played, from its last
    # threshold (too few: kept)
    fresh = SelfPlayStages(_settings(tmp_path, "gomoku"), tmp_path / "c", ingest=lambda **_: {})
    own = [{"iteration": 0, "selfplay": {"resign_threshold": 0.99, "serving_version": 1}}]
    got = fresh.resign_threshold(1, 1, own)
    assert got["rule"] == "kept" and got["threshold"] == 0.99 and got["games"] == 0
    assert got["iterations"] == [0]


def test_a_new_serving_version_plays_its_first_iteration_out(tmp_path):
    """Its parent's games do not calibrate it: every game of its first iteration is played out
    (and checks the threshold it inherited), the next one calibrates from them."""
    from services.selfplay.records import read_game
    from services.selfplay_loop.stages import PLAYED_OUT
    from services.trainer.publish import publish_model

    settings = _settings(tmp_path, TICTACTOE.name, games=6)
    publish_model(Path(settings.repository), game=TICTACTOE.name, config="tictactoe_tiny",
                  seed=0)
    run = tmp_path / "run"
    stages = SelfPlayStages(settings, run, ingest=lambda **_: {})
    # the parent, v7, played iteration 0; v1 serves iteration 1
    parent = [{"iteration": 0, "selfplay": {"resign_threshold": 0.8, "serving_version": 7}}]
    folder = run / "iter-0001"
    summary = stages.selfplay(1, folder, parent)
    assert summary["serving_version"] == 1
    assert summary["resign_calibration"] == {
        "threshold": 0.8, "rule": PLAYED_OUT, "no_resign_share": 1.0,
        "why": "v1 has no finished iteration yet"}
    games = [read_game(p) for p in (folder / "selfplay-0001" / "games").glob("*.json")]
    assert len(games) == 6 and all(g.no_resign for g in games)
    assert summary["resigned"] == 0
    # its second iteration calibrates from its own played-out games
    mine = [*parent, {"iteration": 1, "selfplay": {**summary, "serving_version": 1}}]
    got = stages.resign_threshold(2, 1, mine)
    assert got["rule"] != PLAYED_OUT and got["iterations"] == [1] and got["games"] == 6
