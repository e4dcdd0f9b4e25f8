"""A game defined only in tests/ goes the platform's whole path: its records (SGF files this test
writes) -> the ingest flow -> the train flow -> a published version -> a rollout on a real
Triton -> Predict and GenMove through the real search service.

Tic-tac-toe (`tests/tictactoe_game.py`) brings, in its one module, what a game owns: its rules,
its record format and replay (`replay_source`), its network (a model configuration registered
beside it) and its model I/O, from which its Triton config is generated. Nothing in
`services/` or `flows/` names it. What is checked is the path, not strength: the records are
random legal games, and the tactical answers below come from the search's exact rules.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from services.api.movepred.v1 import search_pb2
from services.games.triton_config import config_text
from services.search.client import SearchClient
from services.trainer.train import TrainConfig
from services.triton.launcher import TritonServer
from tests.tictactoe_game import RECORD_SUFFIX, SIZE, TICTACTOE
from tests.triton_fixtures import game_search_service, require_tritonserver

pytestmark = pytest.mark.timeout(900)

GAMES_PER_FILE = 150
TRAINING = TrainConfig(max_steps=60, batch_size=32, seed=0, num_threads=1)


def random_games(n: int, seed: int) -> list[list[int]]:
    """`n` games of random legal moves, played to their end by the game's own rules."""
    rng = np.random.default_rng(seed)
    games = []
    for _ in range(n):
        state, moves = TICTACTOE.start(), []
        while not state.is_over:
            move = int(rng.choice(np.flatnonzero(state.legal_mask())))
            moves.append(move)
            state = state.play(move)
        games.append(moves)
    return games


def sgf_record(moves: list[int]) -> str:
    """One game as SGF (GM[40], SZ[3]; points as SGF letters, rows counted from the top)."""
    state = TICTACTOE.start()
    for move in moves:
        state = state.play(move)
    winner = {1: "B+", 2: "W+"}.get(state.winner, "0") if state.is_over else "?"
    nodes = "".join(f";{'BW'[i % 2]}[{'abc'[m % SIZE]}{'abc'[SIZE - 1 - m // SIZE]}]"
                    for i, m in enumerate(moves))
    return f"(;FF[4]GM[40]SZ[{SIZE}]RE[{winner}]{nodes})"


def write_records(folder: Path) -> list[Path]:
    """Two files of random games, plus a bad record of each kind the replay quarantines."""
    folder.mkdir(parents=True)
    paths = []
    for i in range(2):
        path = folder / f"games-{i}{RECORD_SUFFIX}"
        path.write_text("\n".join(sgf_record(g) for g in random_games(GAMES_PER_FILE, i)))
        paths.append(path)
    bad = folder / f"bad{RECORD_SUFFIX}"
    bad.write_text("(;FF[4]GM[40]SZ[3];B[aa];W[aa])"  # a move on an occupied point
                   "(;FF[4]GM[40]SZ[4];B[aa])"  # another board size
                   "(;FF[4]GM[40]SZ[3];B[aa]")  # cut off: the reader rejects it
    return [*paths, bad]


def _position(*moves: tuple[int, int]) -> search_pb2.Position:
    return search_pb2.Position(game_name=TICTACTOE.name,
                               moves=[search_pb2.Point(x=x, y=y) for x, y in moves])


@pytest.fixture(scope="module")
def path_run(tmp_path_factory: pytest.TempPathFactory, prefect_harness) -> dict:
    """Ingest, train v1 (published), start Triton, train v2 and roll it out on it."""
    from flows.ingest import ingest
    from flows.train import train_flow

    require_tritonserver()
    work = tmp_path_factory.mktemp("game-path")
    sources = write_records(work / "records")
    dataset, repository = work / "dataset", work / "model_repository"
    manifest = ingest(sources=[str(p) for p in sources], out_dir=str(dataset))
    first = train_flow(dataset_dir=str(dataset), repository=str(repository), config=TRAINING,
                       run_dir=str(work / "run1"))
    with TritonServer(repository, log_path=work / "triton.log", startup_timeout_s=120) as triton:
        second = train_flow(dataset_dir=str(dataset), repository=str(repository),
                            config=TRAINING, gate_tolerance=1.0, run_dir=str(work / "run2"),
                            triton_url=triton.grpc_url)
        with game_search_service(triton.grpc_url, TICTACTOE, _position()) as target:
            yield {"manifest": manifest, "first": first, "second": second, "target": target,
                   "repository": repository, "dataset": dataset}

def test_the_records_are_ingested_by_the_games_own_replay(path_run: dict) -> None:
    manifest = path_run["manifest"]
    assert manifest["game"] == TICTACTOE.name and manifest["rows"] > 0
    counts = {c["source"]: c for c in manifest["counts"]}
    for i in range(2):
        row = counts[f"games-{i}{RECORD_SUFFIX}"]
        assert row["read"] == row["ingested"] == GAMES_PER_FILE and row["quarantined"] == 0
    bad = counts[f"bad{RECORD_SUFFIX}"]
    assert (bad["read"], bad["ingested"], bad["quarantined"]) == (3, 0, 3)
    assert set(manifest["splits"]) >= {"train", "validation", "test"}


def test_each_version_is_published_with_the_games_generated_config(path_run: dict) -> None:
    first, second = path_run["first"], path_run["second"]
    assert (first["version"], first["game"], first["model_name"]) == (
        1, TICTACTOE.name, TICTACTOE.default_model)
    model = path_run["repository"] / TICTACTOE.default_model
    assert (model / "config.pbtxt").read_text() == config_text(TICTACTOE)
    meta = json.loads((model / "2" / "metadata.json").read_text())
    assert meta["game"] == TICTACTOE.name and meta["pass_move"] is False
    assert second["version"] == 2 and second["served"] is True, second["next"]


def test_predict_and_genmove_answer_from_the_rolled_out_version(path_run: dict) -> None:
    with SearchClient(path_run["target"]) as client:
        empty = client.predict(_position(), top_k=9)
        # X a1 b1, O a2 b2, X to move: c1 makes three in a row
        win = client.genmove(_position((0, 0), (0, 1), (1, 0), (1, 1)), max_visits=64)
        # X a1 b1, O b2, O to move: c1 blocks, anything else loses at once
        block = client.genmove(_position((0, 0), (1, 1), (1, 0)), max_visits=400)
    assert (empty.model_name, empty.model_version) == (TICTACTOE.default_model, "2")
    assert len(empty.policy) == SIZE * SIZE and abs(sum(empty.policy) - 1) < 1e-5
    assert (win.name, win.move.x, win.move.y) == ("c1", 2, 0)
    assert block.name == "c1" and block.model_version == "2"
