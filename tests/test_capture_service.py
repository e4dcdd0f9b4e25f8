"""The Capture Game served: the exported MDRNN/MDLSTM behind `CapturePolicy` (its configurations'
serving wrapper, published by `services.trainer.publish` as every game's networks are), its SGF
records and greedy opponent, and Predict/GenMove/Analyze and ``movepred play --game
capture`` over real gRPC against a real Triton serving ``capture_policy``. No mocks.

First part (always runs): the served module against the policy search's own encoding
(`services.policy_search.fitness.planes`), the export and the file at every size 5..9, the
weight files, the SGF text and the seeded greedy player.

Second part (skipped without a ``tritonserver`` binary): one Triton serving an MDRNN with
seeded random weights as ``capture_policy`` v1, the search service serving the Capture Game
alone; Predict (against the TorchScript file run here), GenMove, Analyze, INVALID_ARGUMENT for
a finished game, a suicide and a wrong size, the rollout's smoke test, and the play command.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch

from services.api.movepred.v1 import search_pb2
from services.games.base import BLACK, WHITE
from services.games.capture.game import CAPTURE
from services.models.configs import build, spec
from services.models.mdrnn import EPS
from services.models.weights import load_weights, network, read_weights
from services.policy_search.fitness import planes
from services.records.sgf import read_sgf
from services.search import mcts
from services.search.client import SearchClient, game_position
from services.search.server import build_service
from services.trainer.publish import export_served, publish_model, resolve_config
from services.triton.client import PolicyClient
from services.triton.launcher import TritonServer
from tests.triton_fixtures import make_repository, require_tritonserver

CONFIG = "capture_mdrnn_k2"  # the paper's 12-weight network
CAPTURE_IN_ONE = ["b1", "b2", "a2", "e5", "c2", "e4"]  # black to move captures at b3
SUICIDE_FOR_WHITE = ["b1", "e5", "a2"]  # white to move; a1 is suicide for white


def served_network(config: str | None = None, seed: int = 0,
                   weights: Path | None = None) -> torch.nn.Module:
    """The module Triton serves for a Capture Game network, as the publisher builds it: the
    configuration (`config`, else the weights file's, else the game's default), seeded random
    weights or those of `weights`, behind the configuration's serving wrapper."""
    found = read_weights(weights) if weights is not None else None
    config = resolve_config(CAPTURE.name, config, found)
    return spec(config).served(network(config, seed, found))


def state_of(moves: list[str], size: int = 5):
    s = CAPTURE.start(size)
    for name in moves:
        s = s.play(CAPTURE.parse_move(name, size))
    return s


def random_positions(n: int, size: int, seed: int = 0) -> list:
    """Positions of random games that go on (both colours to move)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        s = CAPTURE.start(size)
        for _ in range(int(rng.integers(0, size * size // 2))):
            nxt = s.play(int(rng.choice(np.flatnonzero(s.legal_mask()))))
            if nxt.is_over:
                break
            s = nxt
        out.append(s)
    return out


# --------------------------------------------------------------------------- the served module
@pytest.mark.parametrize("size", [5, 7, 9])
def test_served_logits_are_the_trained_players_preferences(size: int) -> None:
    """The board alone gives the planes the policy search played with, from the side to move;
    the logits are the preferences' log-odds (the same order of points)."""
    model = served_network(CONFIG, seed=3)
    positions = random_positions(24, size, seed=size)
    assert {p.to_move for p in positions} == {BLACK, WHITE}
    boards = np.stack([CAPTURE.network_input(p) for p in positions])
    to_move = np.array([p.to_move for p in positions], np.int8)
    with torch.no_grad():
        logits = model(torch.from_numpy(boards)).numpy()
        scores = model.net(planes(boards, to_move)).reshape(len(boards), -1).numpy()
    assert logits.shape == (24, size * size)
    clamped = np.clip(scores.astype(np.float64), EPS, 1 - EPS)
    np.testing.assert_allclose(logits, np.log(clamped / (1 - clamped)), atol=2e-3)
    assert (np.argmax(logits, 1) == np.argmax(scores, 1)).all()


def test_the_export_is_checked_and_the_file_answers_every_size(tmp_path: Path) -> None:
    model = served_network("capture_mdlstm_k2", seed=1)
    path = tmp_path / "model.pt"
    assert export_served(model.net, "capture_mdlstm_k2", path) <= 1e-4
    scripted = torch.jit.load(str(path))
    for size in CAPTURE.sizes:
        boards = torch.from_numpy(CAPTURE.random_inputs(5, size, seed=size))
        with torch.no_grad():
            out = scripted(boards)
            assert tuple(out.shape) == (5, size * size)
            assert torch.equal(out, model(boards))


def test_weights_from_a_flat_vector_or_a_state_dict(tmp_path: Path) -> None:
    net = build(CONFIG)
    flat = np.random.default_rng(5).normal(size=net.n_weights()).astype(np.float32)
    np.save(tmp_path / "best.npy", flat)
    np.savez(tmp_path / "best.npz", weights=flat, fitness=np.array([0.4]))
    boards = torch.from_numpy(CAPTURE.random_inputs(8, 5))
    with torch.no_grad():
        answers = [served_network(CONFIG, weights=tmp_path / "best.npy")(boards),
                   served_network(CONFIG, weights=tmp_path / "best.npz")(boards)]
        reference = build(CONFIG)
        reference.set_flat(torch.from_numpy(flat))
        torch.save(reference.state_dict(), tmp_path / "best.pt")
        answers.append(served_network(CONFIG, weights=tmp_path / "best.pt")(boards))
        checkpoint = {"config": CONFIG, "model": reference.state_dict(), "fitness": 0.4}
        torch.save(checkpoint, tmp_path / "best_network.pt")  # the policy search's
        answers.append(served_network(weights=tmp_path / "best_network.pt")(boards))
        other = served_network(CONFIG, seed=9)(boards)
    for a in answers[1:]:
        assert torch.equal(a, answers[0])
    assert not torch.equal(other, answers[0])
    np.save(tmp_path / "short.npy", flat[:-1])
    with pytest.raises(ValueError, match="12 weights"):
        load_weights(build(CONFIG), tmp_path / "short.npy")
    with pytest.raises(ValueError, match="not a Capture Game one"):
        served_network("go_res_b2c32")
    with pytest.raises(ValueError, match=f"holds a {CONFIG} network, not capture_mdlstm_k2"):
        served_network("capture_mdlstm_k2", weights=tmp_path / "best_network.pt")
    with pytest.raises(ValueError, match="w_peep"):  # an MDRNN state_dict for the MDLSTM
        served_network("capture_mdlstm_k2", weights=tmp_path / "best.pt")


class BigBoardsOnly(torch.nn.Module):
    """Logits of the right shape for boards of 6x6 and up; refuses a smaller board."""

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        if boards.shape[-1] < 6:
            raise ValueError("board too small")
        return torch.zeros(boards.shape[0], boards.shape[-1] * boards.shape[-2])


def test_publishing_runs_the_model_at_the_games_sizes(tmp_path: Path) -> None:
    """A free-size model is test-run at its game's largest, smallest and default size: a
    Capture Game model that cannot answer 5x5 boards is refused (19x19 and 9x9 alone would
    pass it)."""
    from services.games.go.game import GO
    from services.repository.model_check import check_sizes_for, validate_model_file
    from services.repository.publish import publish
    from services.repository.versions import list_versions

    assert check_sizes_for(CAPTURE) == (9, 5)
    assert check_sizes_for(GO) == (19, 9)
    path = tmp_path / "big.pt"
    torch.jit.script(BigBoardsOnly()).save(str(path))
    assert validate_model_file(path, CAPTURE, (-1, -1), -1, sizes=(19, 9)) is False  # it answers
    repository = make_repository(tmp_path, CAPTURE.default_model)
    with pytest.raises(ValueError, match=r"int8 \[2,5,5\]"):
        publish(path, repository, CAPTURE.default_model)
    assert list_versions(repository, CAPTURE.default_model) == []


# --------------------------------------------------------------------------- records, opponent
def test_games_are_written_as_sgf(tmp_path: Path) -> None:
    moves = [CAPTURE.parse_move(m, 5) for m in [*CAPTURE_IN_ONE, "b3"]]
    assert CAPTURE.written_formats == (".sgf", ".capture.sgf")
    path = CAPTURE.write_record(tmp_path / "g.sgf", moves, 5, comments=["first"],
                                summary="a test")
    text = path.read_text()
    for prop in ("GM[1]", "SZ[5]", "RU[Capture]", "RE[B+]", "GC[a test]", "B[be]C[first]",
                 ";W[bd]"):
        assert prop in text
    # the same text under the name the ingest gives this game (Go reads plain .sgf)
    own = CAPTURE.write_record(tmp_path / "g.capture.sgf", moves, 5, comments=["first"],
                               summary="a test")
    assert own.read_text() == text and CAPTURE.record_formats == (".capture.sgf",)
    (game,) = list(read_sgf(path))  # Go's reader takes it: the same stones and points
    assert game.size == 5 and [m for _, m in game.moves] == moves
    unfinished = CAPTURE.record_text(".sgf", moves[:3], 7)
    assert "SZ[7]" in unfinished and "RE[" not in unfinished
    with pytest.raises(ValueError, match="moves\\[1\\]: b1: occupied"):
        CAPTURE.record_text(".sgf", [moves[0], moves[0]], 5)
    with pytest.raises(ValueError, match=r"written as \.sgf"):
        CAPTURE.write_record(tmp_path / "g.rif", moves, 5)


def test_greedy_opponent_is_seeded_and_captures() -> None:
    assert CAPTURE.opponent(0)(state_of(CAPTURE_IN_ONE)) == CAPTURE.parse_move("b3", 5)

    def game(seed: int) -> list[int]:
        greedy = CAPTURE.opponent(seed)
        s = CAPTURE.start(5)
        while not s.is_over:
            s = s.play(greedy(s))
        return list(s.moves)

    assert game(1) == game(1)
    assert len({tuple(game(seed)) for seed in range(6)}) > 1  # ties are drawn from the seed


def test_play_refuses_what_it_cannot_play(capsys: pytest.CaptureFixture[str]) -> None:
    """Self-play (any game without a reference player) needs --out; a size the game does not
    serve is refused before any call; errors go to stderr, nothing to stdout."""
    from services.cli import main

    assert main(["play", "--game", "go", "--target", "127.0.0.1:1"]) == 2
    out = capsys.readouterr()
    assert "--out (the record file to write) is required" in out.err and out.out == ""
    assert main(["play", "--target", "127.0.0.1:1"]) == 2
    assert "--out (the record file to write) is required" in capsys.readouterr().err
    assert main(["play", "--game", CAPTURE.name, "--size", "10", "--target", "127.0.0.1:1"]) == 2
    out = capsys.readouterr()
    assert "--size must be one of [5, 6, 7, 8, 9]" in out.err and out.out == ""


# --------------------------------------------------------------------------- over Triton
@dataclass
class Live:
    target: str
    triton_url: str
    repository: Path
    model: Path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    require_tritonserver()
    root = tmp_path_factory.mktemp("capture-triton")
    repository = make_repository(root, CAPTURE.default_model)
    version = publish_model(repository, config=CONFIG, seed=2)
    model = repository / CAPTURE.default_model / str(version) / "model.pt"
    server = TritonServer(repository, models=(CAPTURE.default_model,),
                          log_path=root / "tritonserver.log", startup_timeout_s=120)
    with server:
        client = PolicyClient(server.grpc_url, CAPTURE.default_model, timeout_s=30.0)
        service = build_service({CAPTURE.name: client}).start()
        try:
            yield Live(f"127.0.0.1:{service.port}", server.grpc_url, repository, model)
        finally:
            service.stop()
            client.close()


def local_logits(model: Path, positions: list) -> np.ndarray:
    scripted = torch.jit.load(str(model), map_location="cpu").eval()
    boards = np.stack([CAPTURE.network_input(p) for p in positions])
    with torch.inference_mode():
        return scripted(torch.from_numpy(boards)).numpy()


@pytest.mark.timeout(300)
def test_predict_covers_every_empty_point_suicide_included(live: Live) -> None:
    with SearchClient(live.target) as client:
        for moves, size in ((SUICIDE_FOR_WHITE, 5), (["d4", "c3"], 7), ([], 9)):
            r = client.predict(game_position(CAPTURE, moves, size), top_k=size * size)
            state = state_of(moves, size)
            assert (r.model_name, r.model_version) == (CAPTURE.default_model, "1")
            policy = np.array(r.policy)
            legal = state.legal_mask()
            assert policy.shape == (size * size,) and abs(policy.sum() - 1) < 1e-5
            assert (policy[~legal] == 0).all() and (policy[legal] > 0).all()
            expected = mcts.masked_softmax(local_logits(live.model, [state])[0], legal)
            np.testing.assert_allclose(policy, expected, rtol=1e-4, atol=1e-6)
            assert len(r.top_moves) == legal.sum()
            if moves == SUICIDE_FOR_WHITE:  # a legal (losing) move: the policy gives it a share
                assert policy[CAPTURE.parse_move("a1", size)] > 0


@pytest.mark.timeout(300)
def test_genmove_plays_legal_moves_takes_a_capture_never_a_suicide(live: Live) -> None:
    with SearchClient(live.target) as client:
        r = client.genmove(game_position(CAPTURE, CAPTURE_IN_ONE), max_visits=32)
        assert r.name == "b3" and r.color == search_pb2.COLOR_BLACK  # the capture wins at once
        for moves, size in ((SUICIDE_FOR_WHITE, 5), (["d4"], 7), ([], 9)):
            r = client.genmove(game_position(CAPTURE, moves, size), max_visits=48,
                               max_candidates=size * size)
            state = state_of(moves, size)
            assert state.legal_mask()[CAPTURE.parse_move(r.name, size)]
            assert r.total_visits >= 48 and r.candidates[0].name == r.name
            if moves == SUICIDE_FOR_WHITE:
                assert "a1" not in {c.name for c in r.candidates}
                assert len(r.candidates) == 21  # every empty point but the suicide
        reports = list(client.analyze(game_position(CAPTURE, ["c3"]), max_visits=64,
                                      report_every_visits=16, reuse_tree=False))
    assert [x.final for x in reports] == [False] * (len(reports) - 1) + [True]
    assert len(reports) >= 2 and reports[-1].total_visits == 64
    assert reports[-1].to_move == search_pb2.COLOR_WHITE


INVALID = [
    ([*CAPTURE_IN_ONE, "b3"], 5,
     r"position: the game is over: black won \(black captured at b3\)"),
    ([*SUICIDE_FOR_WHITE, "a1"], 5, r"position.moves\[3\]: a1 is suicide for white"),
    ([], 10, r"position.board_size: Capture Game is served on sizes 5..9, got 10"),
    ([], 4, r"position.board_size: Capture Game is served on sizes 5..9, got 4"),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("moves", "size", "message"), INVALID,
                         ids=["finished", "suicide", "10x10", "4x4"])
def test_invalid_positions_are_refused_naming_the_field(live: Live, moves: list[str],
                                                        size: int, message: str) -> None:
    position = search_pb2.Position(
        game_name=CAPTURE.name, board_size=size,
        moves=[search_pb2.Point(x=ord(m[0]) - ord("a"), y=int(m[1:]) - 1) for m in moves])
    with SearchClient(live.target) as client:
        for call in (lambda: client.predict(position),
                     lambda: client.genmove(position, max_visits=8),
                     lambda: list(client.analyze(position, max_visits=8))):
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert re.search(message, info.value.details()), info.value.details()


@pytest.mark.timeout(300)
def test_rollout_smoke_test_asks_the_capture_positions(live: Live) -> None:
    from services.triton import smoke

    with PolicyClient(live.triton_url, CAPTURE.default_model, timeout_s=30.0) as client:
        checks, logits = smoke.smoke_test(client, CAPTURE.default_model, 1)
    by_name = {c.name: c for c in checks}
    for name in ("answers", "model version", "shape", "finite", "masked policy",
                 "batch consistency", "deterministic"):
        if name in by_name:
            assert by_name[name].passed, (name, by_name[name].detail)
    assert "answers" not in by_name and logits.shape == (1, 25)
    # the capture in one is asked (blocking); a network with random weights may miss it
    tactics = by_name["tactics"]
    assert ("ranks" in tactics.detail) if tactics.passed else ("b3 ranked" in tactics.detail)


@pytest.mark.timeout(600)
def test_play_against_the_greedy_player_writes_sgf(live: Live, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from services.cli import main

    out = tmp_path / "games"
    code = main(["play", "--target", live.target, "--game", CAPTURE.name, "--size", "5",
                 "--games", "3", "--visits", "16", "--seed", "4", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    files = sorted(out.glob("*.sgf"))
    assert [f.name for f in files] == ["game-001.sgf", "game-002.sgf", "game-003.sgf"]
    wins = 0
    for index, path in enumerate(files):
        text = path.read_text()
        (game,) = list(read_sgf(path))
        state = CAPTURE.start(5)
        for _, move in game.moves:
            state = state.play(move)
        assert state.is_over and "GM[1]" in text and "SZ[5]" in text
        network = BLACK if index % 2 == 0 else WHITE
        network_moves = [c for i, c in enumerate(game.moves) if (i % 2 == 0) == (network == BLACK)]
        assert network_moves and "greedy player" in text
        last = BLACK if len(state.moves) % 2 == 1 else WHITE
        winner = last if CAPTURE.terminal_value(state) > 0 else BLACK + WHITE - last
        assert f"RE[{'B' if winner == BLACK else 'W'}+]" in text
        wins += winner == network
        colour = "black" if network == BLACK else "white"
        assert f"as {colour} against the greedy player (seed 4)" in text
    assert f"network vs greedy player: {wins} wins, {3 - wins} losses, 0 draws in 3 games" \
        in printed


def tactics_rank(model: torch.nn.Module) -> int:
    """The rank of the capture in one (b3) among the legal points of the tactical position."""
    ((board, (answer,)),) = CAPTURE.tactical_positions().values()
    with torch.no_grad():
        row = model(torch.from_numpy(board[None].copy()))[0].numpy().astype(np.float64)
    order = np.argsort(-np.where(board.reshape(-1) == 0, row, -np.inf), kind="stable")
    return int(np.flatnonzero(order == answer)[0]) + 1


@pytest.mark.timeout(600)
def test_rollout_serves_a_network_that_sees_the_capture(live: Live) -> None:
    """Runs last: the first seed whose network ranks the capture in one within the smoke
    test's top 5 is published as v2 and rolled out; the service then answers with it."""
    from services.triton.rollout import rollout
    from services.triton.smoke import TACTICAL_TOP_K

    seed = next(s for s in range(100)
                if tactics_rank(served_network(CONFIG, seed=s)) <= TACTICAL_TOP_K)
    version = publish_model(live.repository, config=CONFIG, seed=seed)
    with PolicyClient(live.triton_url, CAPTURE.default_model, timeout_s=30.0) as client:
        report = rollout(client, live.repository, version, CAPTURE.default_model)
    assert report.current == version == 2 and report.smoke_passed, report.to_markdown()
    assert {"shape", "finite", "masked policy", "tactics"} <= {c.name for c in report.smoke}
    with SearchClient(live.target) as client:
        r = client.predict(game_position(CAPTURE, ["c3"]))
    assert r.model_version == "2"
