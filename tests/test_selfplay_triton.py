"""Self-play evaluated through a real Triton (`LoopSettings.selfplay_triton_url`).

One module-scoped Triton (`tests.triton_fixtures.triton_server`: ``gomoku_policy`` v1, the
tiny policy, loaded) serves every test here. Budgets are tiny (a few games at a few visits):
the games say nothing about strength, only that they are played by the pinned version on
Triton, written as an in-process share writes them, and that what Triton cannot serve stops
the share with an error naming it."""

from __future__ import annotations

import dataclasses
import json
import pickle
import time
from pathlib import Path

import pytest
import torch

from flows.selfplay import build_parser
from services import settings as settings_module
from services.selfplay.records import finished_ids, read_game
from services.selfplay_loop.stages import (
    SERVING_FILE,
    LoopSettings,
    SelfPlayStages,
    folder_stats,
    play_share,
)
from services.triton.client import PolicyClient, TritonError
from services.triton.pinned import VersionNotReadyError
from tests.test_selfplay_stages import TINY
from tests.triton_fixtures import MODEL_NAME, TritonSetup, triton_server  # noqa: F401

torch.set_num_threads(1)
GAMES = 4


def _settings(repository: Path, url: str | None, **changes) -> LoopSettings:
    return LoopSettings(**{
        "game": "gomoku", "games": GAMES, "concurrency": 2, "openings": 4, "opening_plies": 4,
        "repository": str(repository), "model_name": MODEL_NAME, "resign_fp_target": 0.0,
        "selfplay": TINY, "selfplay_triton_url": url, **changes})


def _stages(setup: TritonSetup, run: Path, url: str | None, **changes) -> SelfPlayStages:
    return SelfPlayStages(_settings(setup.repository, url, **changes), run,
                          ingest=lambda **_: {})


def _play(stages: SelfPlayStages, iteration: int = 0) -> dict:
    folder = stages.run_dir / f"iter-{iteration:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    return stages.selfplay(iteration, folder, [])


def _records(folder: Path) -> list:
    return [read_game(p) for p in sorted((folder / "games").glob("*.json"))]


def _triton_inferences(url: str) -> int:
    """Successful inferences v1 of the model has answered on the Triton at `url`."""
    client = PolicyClient(url, MODEL_NAME)
    try:
        stats = client._grpc().get_inference_statistics(MODEL_NAME, "1")
    finally:
        client.close()
    return sum(int(s.inference_stats.success.count) for s in stats.model_stats)


# ---------------------------------------------------------------------------- unit
def test_the_setting_flows_from_the_command_line_into_every_share(tmp_path: Path) -> None:
    """``--selfplay-triton-url`` is a `LoopSettings` flag, off by default and not taken
    from ``--triton-url``; each share carries it with the
    model and the iteration's pinned version, as plain data that pickles."""
    parser = build_parser()
    args = parser.parse_args(["--triton-url", "10.0.0.1:8001"])
    assert settings_module.from_args(LoopSettings, args).selfplay_triton_url is None
    args = parser.parse_args(["--selfplay-triton-url", "10.0.0.2:8001"])
    loop = settings_module.from_args(LoopSettings, args)
    assert loop.selfplay_triton_url == "10.0.0.2:8001" and loop.triton_url is None

    run = tmp_path / "run"
    (run / "iter-0003").mkdir(parents=True)
    (run / "iter-0003" / SERVING_FILE).write_text(json.dumps({"version": 7}))
    config = dataclasses.replace(_settings(tmp_path / "repo", "10.0.0.2:8001"), games=5)
    stages = SelfPlayStages(config, run, ingest=lambda **_: {}, play_shares=lambda t: [],
                            shares=2)
    tasks = stages._share_tasks(3, stages.serving(3), TINY)
    assert [t.games for t in tasks] == [3, 2]
    for task in tasks:
        assert (task.triton_url, task.model_name, task.version) == \
            ("10.0.0.2:8001", MODEL_NAME, 7)
        assert task.evaluator == "triton" and pickle.loads(pickle.dumps(task)) == task
    local = SelfPlayStages(_settings(tmp_path / "repo", None), tmp_path / "b",
                           ingest=lambda **_: {})._share_tasks(0, 1, TINY)
    assert [(t.triton_url, t.version, t.evaluator) for t in local] == [(None, 1, "local")]


# ---------------------------------------------------------------------------- real Triton
@pytest.mark.integration
def test_a_share_played_through_triton_writes_the_games_a_local_one_does(
        triton_server: TritonSetup, tmp_path: Path) -> None:  # noqa: F811
    """The same iteration played in-process and through Triton: the same game ids, each a
    whole game with its targets, its lineage naming the model and v1, and the summary says
    which evaluator played (the moves may differ: two runtimes' float paths)."""
    url = triton_server.server.grpc_url
    before = _triton_inferences(url)
    local = _play(_stages(triton_server, tmp_path / "local", None))
    assert _triton_inferences(url) == before  # in-process: Triton was not asked
    remote = _play(_stages(triton_server, tmp_path / "triton", url))
    assert _triton_inferences(url) > before  # v1 on Triton answered the searches
    assert local["evaluator"] == "local" and "triton_url" not in local
    assert remote["evaluator"] == "triton" and remote["triton_url"] == url
    assert remote["serving_version"] == local["serving_version"] == 1
    assert remote["games"] == remote["played_now"] == GAMES and remote["finished_before"] == 0
    games = {name: tmp_path / name / "iter-0000" / "selfplay-0000"
             for name in ("local", "triton")}
    ids = {name: sorted(finished_ids(folder)) for name, folder in games.items()}
    assert ids["triton"] == ids["local"] == [f"it0000-{i:06d}" for i in range(GAMES)]
    stats = folder_stats(games["triton"])
    assert stats["rows"] > 0 and stats["full_rows"] > 0 and stats["visits"] > 0
    for name, folder in games.items():
        records = _records(folder)
        assert len(records) == GAMES
        for record in records:
            assert (record.model_name, record.model_version) == (MODEL_NAME, "1"), name
            assert record.moves and sum(m.visits for m in record.moves) > 0
    assert set(local) == set(remote) - {"triton_url"}


@pytest.mark.integration
def test_a_version_triton_does_not_serve_is_refused_before_a_game(
        triton_server: TritonSetup, tmp_path: Path) -> None:  # noqa: F811
    """The iteration's pinned version (v9) is not loaded on the Triton: the stage fails at
    once with an error naming the url, the model and the version and what serves there, and
    no game file is written; a share sent elsewhere (a Dask worker) refuses the same way."""
    url = triton_server.server.grpc_url
    stages = _stages(triton_server, tmp_path / "run", url)
    (stages.run_dir / "iter-0000").mkdir(parents=True)
    (stages.run_dir / "iter-0000" / SERVING_FILE).write_text(json.dumps({"version": 9}))
    with pytest.raises(VersionNotReadyError) as refused:
        _play(stages)
    message = str(refused.value)
    assert f"{MODEL_NAME} v9 is not ready on Triton at {url}" in message
    assert "versions ready there: 1" in message
    task = stages._share_tasks(0, 9, TINY)[0]
    with pytest.raises(VersionNotReadyError, match=f"{MODEL_NAME} v9 .* at {url}"):
        play_share(task)
    folder = stages.run_dir / "iter-0000" / "selfplay-0000"
    assert not folder.exists() or not list(folder.rglob("*.json"))
    closed = dataclasses.replace(task, version=1, triton_url="127.0.0.1:1")
    with pytest.raises(VersionNotReadyError, match=r"127\.0\.0\.1:1 .*unreachable"):
        play_share(closed)


@pytest.mark.integration
def test_a_version_unloaded_mid_share_fails_it_and_a_rerun_plays_the_rest(
        triton_server: TritonSetup, tmp_path: Path) -> None:  # noqa: F811
    """v1 is unloaded from Triton after the share's first game: the Triton error reaches the
    caller (the stage fails, nothing swallowed), the finished game stays, and once v1 serves
    again a rerun plays only the missing games."""
    url = triton_server.server.grpc_url
    stages = _stages(triton_server, tmp_path / "run", url, concurrency=1, games=3)
    task = stages._share_tasks(0, 1, TINY)[0]
    admin = PolicyClient(url, MODEL_NAME)

    def unload_after_the_first(game_id: str, record) -> None:
        if game_id.endswith("-000000"):
            admin.unload_model()
            for _ in range(200):
                if not admin.is_version_ready(1):
                    break
                time.sleep(0.05)

    try:
        with pytest.raises(TritonError, match=f"{MODEL_NAME} v1 on Triton at {url}"):
            play_share(task, unload_after_the_first)
    finally:
        triton_server.server.load_version(MODEL_NAME, 1)
        admin.close()
    out = Path(task.out_dir)
    assert sorted(finished_ids(out)) == ["it0000-000000"]
    report = play_share(task)
    assert (report["skipped"], report["played"], report["evaluator"]) == (1, 2, "triton")
    assert sorted(finished_ids(out)) == [f"it0000-{i:06d}" for i in range(3)]
