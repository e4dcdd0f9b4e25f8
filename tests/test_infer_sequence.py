"""InferSequence and `movepred infer` over real gRPC; no mocks of Triton or gRPC.

First part (always runs): the service's PolicyClients point at a loopback port nobody listens
on. Validation answers INVALID_ARGUMENT naming the field before any inference (counts, a point
given twice or off the board, budgets over the limits, unknown neighbours); a valid request
gets UNAVAILABLE; with a token configured, a call without it is UNAUTHENTICATED.

Second part (skipped without a ``tritonserver`` binary): one Triton serving the tiny Gomoku
policy and an untrained Go network; a Gomoku and a 9x9 Go position are answered with a legal
order of exactly their stones whose per-move probabilities are the served policy's (checked
against Predict) and whose geometric mean is at least the greedy order's; a Go group without
liberties has no legal order (INVALID_ARGUMENT); a time budget answers the best order so far
while the call holds a search slot, and a second call then gets RESOURCE_EXHAUSTED (both
counted in the metrics); a cancelled call gives its slot back at once; the CLI writes an SGF
that the project's SGF reader reads back to the same stones, and reads such a record, or a RIF
game cut after some moves, as its input.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest

from services import cli
from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.games.go.rules import replay as go_replay
from services.games.registry import get_game
from services.move_order.annealing import AnnealingParams, infer_order
from services.move_order.problem import problem_from_stones, stones_from_board
from services.records.rif import RifGame
from services.records.rif_writer import write_rif
from services.records.sgf import SgfGame, read_sgf
from services.search.client import SearchClient
from services.search.server import build_service
from services.search.servicer import (
    MAX_INFER_RESTARTS,
    MAX_INFER_STEPS,
    MAX_INFER_TIME_MS,
    StopWhen,
    WatchedEvaluator,
    run_inference,
)
from services.triton.client import PolicyClient
from tests.triton_fixtures import go_triton_setup, gomoku_and_go_service, require_tritonserver

TOKEN = "infer-sequence-test-token"
GOMOKU_BLACK = ["h8", "i9", "g9", "j7", "h10"]
GOMOKU_WHITE = ["h9", "i8", "g8", "j9"]
GO_SIZE = 9
GO_BLACK = ["C3", "E5", "G7", "C7", "G3"]
GO_WHITE = ["D4", "F6", "D6", "F4"]
SMALL = dict(iterations=30, restarts=2, seed=7)  # a few steps: these tests check plumbing


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rpc_error(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kwargs)
    return info.value


# --------------------------------------------------------------------------- Triton down
@pytest.fixture(scope="module")
def down() -> Iterator[str]:
    gomoku = PolicyClient(f"127.0.0.1:{closed_port()}", timeout_s=2.0)
    go = PolicyClient(f"127.0.0.1:{closed_port()}", "go_policy", timeout_s=2.0)
    service = build_service(gomoku, go_evaluator=go).start()
    try:
        yield f"127.0.0.1:{service.port}"
    finally:
        service.stop()
        gomoku.close()
        go.close()


INVALID = [
    (dict(black=["h8", "i9", "j10"], white=["h9"]), "black: black has 3 stones and white 1"),
    (dict(black=["h8"], white=["h9", "i9"]), "black: black has 1 stones and white 2"),
    (dict(black=[], white=[]), "black: no stones to order"),
    (dict(black=["h8", "i9"], white=["h8"]), "white[0]: h8 is given twice"),
    (dict(black=[(15, 3)], white=[]), "black[0]: (15, 3) is off the 15x15 board"),
    (dict(black=["h8"], white=[(-1, 0)]), "white[0]: (-1, 0) is off the 15x15 board"),
    (dict(game="go", board_size=9, black=["J9", (9, 0)], white=["A1"]),
     "black[1]: (9, 0) is off the 9x9 board"),
    (dict(black=["h8"], white=[], iterations=MAX_INFER_STEPS, restarts=2),
     f"iterations: restarts * iterations must be at most {MAX_INFER_STEPS}"),
    (dict(black=["h8"], white=[], iterations=-1), "iterations: must be >= 0"),
    (dict(black=["h8"], white=[], restarts=MAX_INFER_RESTARTS + 1),
     f"restarts: must be in 0..{MAX_INFER_RESTARTS}"),
    (dict(black=["h8"], white=[], max_time_ms=MAX_INFER_TIME_MS + 1),
     f"max_time_ms: must be in 0..{MAX_INFER_TIME_MS}"),
    (dict(black=["h8"], white=[], neighbour="swap"), "neighbour: unknown neighbour 'swap'"),
    (dict(black=["h8"], white=[], init="best"), "init: unknown init 'best'"),
    (dict(black=["h8"], white=[], init="neighbour"), "init: unknown init 'neighbour'"),
    # a long name is quoted cut short: echoed whole it overflowed the status metadata (16 KiB)
    # and the client got RESOURCE_EXHAUSTED "stream removed" instead
    (dict(black=["h8"], white=[], neighbour="y" * 200_000),
     f"neighbour: unknown neighbour {'y' * 24!r}... (200000 chars) (one of"),
    (dict(black=["h8"], white=[], board_size=19), "board_size:"),
    (dict(black=["h8"], white=[], rule=9), "rule: unknown rule 9"),
]


@pytest.mark.parametrize(("fields", "message"), INVALID, ids=[m for _, m in INVALID])
def test_invalid_requests_name_the_field_before_any_inference(down: str, fields: dict,
                                                               message: str) -> None:
    with SearchClient(down) as client:
        error = rpc_error(client.infer_sequence, timeout=10, **fields)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert error.details().startswith(message), error.details()


@pytest.mark.parametrize("game", ["gomoku", "go"])
def test_valid_request_with_triton_down_is_unavailable(down: str, game: str) -> None:
    stones = (GOMOKU_BLACK, GOMOKU_WHITE) if game == "gomoku" else (GO_BLACK, GO_WHITE)
    with SearchClient(down) as client:
        error = rpc_error(client.infer_sequence, *stones, game=game,
                          board_size=GO_SIZE if game == "go" else 0, timeout=10, **SMALL)
    assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
    assert "Triton is unreachable" in error.details()


def test_without_the_token_is_unauthenticated() -> None:
    policy = PolicyClient(f"127.0.0.1:{closed_port()}", timeout_s=2.0)
    service = build_service(policy, token=TOKEN).start()
    target = f"127.0.0.1:{service.port}"
    try:
        with SearchClient(target) as client:
            error = rpc_error(client.infer_sequence, GOMOKU_BLACK, GOMOKU_WHITE, timeout=10,
                              **SMALL)
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED, error.details()
        with SearchClient(target, token=TOKEN) as client:  # with it, the call gets through
            error = rpc_error(client.infer_sequence, GOMOKU_BLACK, GOMOKU_WHITE, timeout=10,
                              **SMALL)
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
    finally:
        service.stop()
        policy.close()


# --------------------------------------------------------------------------- in-process
@dataclass(frozen=True)
class Out:
    logits: np.ndarray
    model_name: str = "hashed"
    model_version: str = "1"


class HashedEvaluator:
    """Fixed pseudo-random logits per board: a policy with preferences but no meaning."""

    def __init__(self, width: int) -> None:
        self.width = width

    def infer(self, boards: np.ndarray) -> Out:
        rows = [np.random.default_rng(list(b.tobytes())).normal(0, 2, self.width)
                for b in boards]
        return Out(np.asarray(rows, dtype=np.float32))


def test_a_budget_spent_before_any_step_answers_the_greedy_order() -> None:
    game = get_game("gomoku")
    black = [game.parse_move(m, 15) for m in GOMOKU_BLACK]
    white = [game.parse_move(m, 15) for m in GOMOKU_WHITE]
    problem = problem_from_stones(game, black, white)
    evaluator = HashedEvaluator(game.policy_size(15))
    params = AnnealingParams(iterations=40, restarts=3, seed=11)
    reference = infer_order(problem, evaluator, params)
    watched = WatchedEvaluator(evaluator)
    stop = StopWhen(time.monotonic(), lambda: False)  # the budget is already spent
    stopped = run_inference(problem, params, watched, 256, stop)
    assert stopped.stopped_early and stopped.restarts == () and stop.stopped
    assert stopped.best.order == stopped.greedy.order == reference.greedy.order
    assert stopped.calls == watched.calls == problem.n  # the greedy order's calls alone
    never = StopWhen(math.inf, lambda: False)
    running = run_inference(problem, params, WatchedEvaluator(evaluator), 256, never)
    assert not running.stopped_early and not never.stopped
    assert running.best.order == reference.best.order
    assert [r.order for r in running.restarts] == [r.best.order for r in reference.restarts]


def test_a_cancelled_call_stops_before_the_first_annealing_step() -> None:
    game = get_game("gomoku")
    black = [game.parse_move(m, 15) for m in GOMOKU_BLACK]
    white = [game.parse_move(m, 15) for m in GOMOKU_WHITE]
    problem = problem_from_stones(game, black, white)
    watched = WatchedEvaluator(HashedEvaluator(game.policy_size(15)))
    cancelled = StopWhen(math.inf, lambda: True)
    result = run_inference(problem, AnnealingParams(iterations=500, restarts=2), watched, 256,
                           cancelled)
    assert result.stopped_early and cancelled.stopped
    assert watched.calls == problem.n  # the greedy order's, none of the 1,000 steps


# --------------------------------------------------------------------------- Triton up
@pytest.fixture(scope="module")
def triton_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gRPC address of a Triton serving gomoku_policy and go_policy v1."""
    require_tritonserver()
    server, _ = go_triton_setup(tmp_path_factory.mktemp("infer-triton"))
    with server:
        yield server.grpc_url


@pytest.fixture(scope="module")
def live(triton_url: str) -> Iterator[str]:
    with gomoku_and_go_service(triton_url) as service:
        yield f"127.0.0.1:{service.port}"


def check_order(reply: search_pb2.InferSequenceResponse, game_name: str, size: int,
                black: list[str], white: list[str]) -> list[int]:
    """The reply's order is exactly the stones, black on even plies, legal in every prefix
    with no capture; returns its points."""
    game = get_game(game_name)
    points = [game.parse_move(m.name, size) for m in reply.moves]
    assert [game.move_point(p, size) for p in points] == list(m.point for m in reply.moves)
    assert sorted(points[0::2]) == sorted(game.parse_move(b, size) for b in black)
    assert sorted(points[1::2]) == sorted(game.parse_move(w, size) for w in white)
    assert [m.color for m in reply.moves] == [
        search_pb2.COLOR_BLACK if i % 2 == 0 else search_pb2.COLOR_WHITE
        for i in range(len(points))]
    request = search_pb2.Position(game=game.proto_game, board_size=size,
                                  moves=[game.move_point(p, size) for p in points])
    state = game.position_from_request(request, "position")  # raises on an illegal move
    assert np.count_nonzero(state.board) == len(points)  # nothing was captured
    return points


def check_likelihoods(reply: search_pb2.InferSequenceResponse) -> None:
    probabilities = np.array([m.probability for m in reply.moves], dtype=np.float64)
    assert np.all(probabilities > 0)
    assert reply.geometric_mean == pytest.approx(math.exp(np.log(probabilities).mean()),
                                                 rel=1e-5)
    greedy = np.array([m.probability for m in reply.greedy_moves], dtype=np.float64)
    assert reply.greedy_geometric_mean == pytest.approx(math.exp(np.log(greedy).mean()),
                                                        rel=1e-5)
    # every restart starts from the greedy order and keeps its best: none is worse than it
    assert reply.geometric_mean >= reply.greedy_geometric_mean
    assert len(reply.restart_geometric_means) == SMALL["restarts"]
    assert reply.restarts_max == pytest.approx(reply.geometric_mean)
    assert reply.restarts_min == pytest.approx(min(reply.restart_geometric_means))
    assert reply.restarts_min >= reply.greedy_geometric_mean * (1 - 1e-9)
    assert reply.restarts_std == pytest.approx(np.std(reply.restart_geometric_means))
    assert reply.iterations == SMALL["iterations"] and not reply.stopped_early
    assert reply.evaluator_calls > 0 and reply.boards >= reply.evaluator_calls


def test_gomoku_order_is_legal_and_scored_by_the_served_policy(live: str) -> None:
    with SearchClient(live) as client:
        reply = client.infer_sequence(GOMOKU_BLACK, GOMOKU_WHITE, timeout=120, **SMALL)
        points = check_order(reply, "gomoku", 15, GOMOKU_BLACK, GOMOKU_WHITE)
        check_likelihoods(reply)
        assert (reply.model_name, reply.model_version) == ("gomoku_policy", "1")
        # each move's probability is the served policy's in the position before it
        prefixes = [search_pb2.Position(moves=[search_pb2.Point(x=p % 15, y=p // 15)
                                               for p in points[:i]])
                    for i in range(len(points))]
        policies = client.predict_many(prefixes, timeout=30).results
        for i, (move, policy) in enumerate(zip(reply.moves, policies, strict=True)):
            assert move.probability == pytest.approx(policy.policy[points[i]], rel=1e-4), i
        again = client.infer_sequence(GOMOKU_BLACK, GOMOKU_WHITE, timeout=120, **SMALL)
    assert [m.name for m in again.moves] == [m.name for m in reply.moves]  # one seed, one answer


def test_go_order_is_legal_and_at_least_the_greedy(live: str) -> None:
    with SearchClient(live) as client:
        reply = client.infer_sequence(GO_BLACK, GO_WHITE, game="go", board_size=GO_SIZE,
                                      timeout=120, **SMALL)
    check_order(reply, "go", GO_SIZE, GO_BLACK, GO_WHITE)
    check_likelihoods(reply)
    assert (reply.model_name, reply.model_version) == ("go_policy", "1")


def test_tempering_and_polish_are_request_options(live: str) -> None:
    with SearchClient(live) as client:
        plain = client.infer_sequence(GOMOKU_BLACK, GOMOKU_WHITE, timeout=120, **SMALL)
        tempered = client.infer_sequence(GOMOKU_BLACK, GOMOKU_WHITE, timeout=120,
                                         tempering=True, **SMALL)
        polished = client.infer_sequence(GOMOKU_BLACK, GOMOKU_WHITE, timeout=120, polish=True,
                                         **SMALL)
    check_order(tempered, "gomoku", 15, GOMOKU_BLACK, GOMOKU_WHITE)
    check_likelihoods(tempered)
    # other chains (fixed temperatures, exchanges): another search of the same orders
    assert [m.name for m in tempered.moves] != [m.name for m in plain.moves] \
        or tempered.boards != plain.boards
    check_order(polished, "gomoku", 15, GOMOKU_BLACK, GOMOKU_WHITE)
    # the same annealing, then a descent from its best: never less likely, more boards
    assert list(polished.restart_geometric_means) == list(plain.restart_geometric_means)
    assert polished.geometric_mean >= plain.geometric_mean * (1 - 1e-6)
    assert polished.boards > plain.boards


def test_go_group_without_liberties_has_no_legal_order(live: str) -> None:
    # A1 is black, surrounded by white A2 and B1: whichever comes last captures or is suicide
    with SearchClient(live) as client:
        error = rpc_error(client.infer_sequence, ["A1", "E5"], ["A2", "B1"], game="go",
                          board_size=GO_SIZE, timeout=120, **SMALL)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "no legal order found" in error.details()


def test_a_time_budget_answers_the_best_order_so_far_holding_a_search_slot(
        triton_url: str) -> None:
    budget = dict(iterations=40_000, restarts=1, seed=3, max_time_ms=1500)
    with gomoku_and_go_service(triton_url, max_searches=1) as service:
        target = f"127.0.0.1:{service.port}"
        replies: list[search_pb2.InferSequenceResponse] = []

        def long_inference() -> None:
            with SearchClient(target) as client:
                replies.append(client.infer_sequence(GO_BLACK, GO_WHITE, game="go",
                                                     board_size=GO_SIZE, timeout=60, **budget))

        thread = threading.Thread(target=long_inference)
        thread.start()
        deadline = time.monotonic() + 30
        while service.metrics.value("movepred_searches_active") < 1:
            assert time.monotonic() < deadline and thread.is_alive(), "never started"
            time.sleep(0.01)
        with SearchClient(target) as client:  # the only search slot is taken
            error = rpc_error(client.infer_sequence, GOMOKU_BLACK, GOMOKU_WHITE, timeout=10,
                              **SMALL)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
        assert "at most 1 searches" in error.details()
        thread.join(timeout=60)
        m = service.metrics
        assert m.value("movepred_requests_total", rpc="InferSequence", code="OK") == 1
        assert m.value("movepred_requests_total", rpc="InferSequence",
                       code="RESOURCE_EXHAUSTED") == 1
    (reply,) = replies
    assert reply.stopped_early and reply.iterations == budget["iterations"]
    check_order(reply, "go", GO_SIZE, GO_BLACK, GO_WHITE)
    assert reply.geometric_mean >= reply.greedy_geometric_mean
    assert not reply.restart_geometric_means and reply.restarts_std == 0  # none finished
    # far fewer calls than the 40,000 asked for: the budget stopped it
    assert reply.evaluator_calls < budget["iterations"]


def test_a_deadline_shorter_than_the_run_answers_the_best_order_so_far(live: str) -> None:
    budget = dict(iterations=40_000, restarts=2, seed=5)  # minutes of work
    timeout = 2.0
    with SearchClient(live) as client:
        started = time.monotonic()
        reply = client.infer_sequence(GOMOKU_BLACK, GOMOKU_WHITE, timeout=timeout, **budget)
        elapsed = time.monotonic() - started
    # answered before the deadline, with the margin kept for the reply
    assert elapsed < timeout
    assert reply.stopped_early and not reply.restart_geometric_means
    check_order(reply, "gomoku", 15, GOMOKU_BLACK, GOMOKU_WHITE)
    assert reply.geometric_mean >= reply.greedy_geometric_mean
    assert 0 < reply.evaluator_calls < budget["iterations"]


def test_a_cancelled_inference_gives_its_search_slot_back(triton_url: str) -> None:
    with gomoku_and_go_service(triton_url, max_searches=1) as service:
        target = f"127.0.0.1:{service.port}"
        m = service.metrics
        with grpc.insecure_channel(target) as channel:
            stub = search_pb2_grpc.SearchServiceStub(channel)
            request = search_pb2.InferSequenceRequest(
                game=search_pb2.GAME_GO, board_size=GO_SIZE, iterations=40_000, restarts=1,
                black=[get_game("go").move_point(get_game("go").parse_move(v, GO_SIZE),
                                                 GO_SIZE) for v in GO_BLACK],
                white=[get_game("go").move_point(get_game("go").parse_move(v, GO_SIZE),
                                                 GO_SIZE) for v in GO_WHITE])
            future = stub.InferSequence.future(request, timeout=60)
            deadline = time.monotonic() + 30
            while m.value("movepred_searches_active") < 1:
                assert time.monotonic() < deadline and not future.done(), "never started"
                time.sleep(0.01)
            future.cancel()
            cancelled = time.monotonic()
            # the annealing stops before its next step, not at the 60 s time limit
            while m.value("movepred_searches_active") > 0:
                assert time.monotonic() < cancelled + 10, "the slot was not given back"
                time.sleep(0.01)
        assert m.value("movepred_requests_total", rpc="InferSequence", code="CANCELLED") == 1


def record_stones(path: Path) -> tuple[set[int], set[int], int]:
    """(black, white, size) of a written Go SGF's final position, by the project's reader."""
    (game,) = read_sgf(path)
    assert isinstance(game, SgfGame), game
    replayed = go_replay(game, keep_states=False)
    assert replayed.error is None, replayed.error
    black, white = stones_from_board(replayed.states[-1].board)
    return set(black), set(white), game.size


def test_cli_writes_the_inferred_go_game_as_sgf(live: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "inferred.sgf"
    code = cli.main(["infer", "--target", live, "--game", "go", "--size", str(GO_SIZE),
                     "--black", *GO_BLACK, "--white", *GO_WHITE, "--iterations", "20",
                     "--restarts", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    go = get_game("go")
    black, white, size = record_stones(out)
    assert size == GO_SIZE
    assert black == {go.parse_move(v, GO_SIZE) for v in GO_BLACK}
    assert white == {go.parse_move(v, GO_SIZE) for v in GO_WHITE}
    # the record is an input too: its final position has the same stones
    again = tmp_path / "again.sgf"
    assert cli.main(["infer", "--target", live, "--record", str(out), "--iterations", "20",
                     "--restarts", "1", "--out", str(again)]) == 0, capsys.readouterr().out
    assert record_stones(again) == (black, white, GO_SIZE)


def test_cli_writes_the_inferred_gomoku_game_as_sgf(live: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "inferred.sgf"
    code = cli.main(["infer", "--target", live, "--black", *GOMOKU_BLACK,
                     "--white", *GOMOKU_WHITE, "--iterations", "20", "--restarts", "1",
                     "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    text = out.read_text(encoding="utf-8")
    assert "GM[4]" in text and "RU[freestyle]" in text
    # the project's reader takes Go records only (GM[1]); the moves are read the same way
    (game,) = read_sgf(text.replace("GM[4]", "GM[1]"), source="inferred.sgf")
    assert isinstance(game, SgfGame), game
    gomoku = get_game("gomoku")
    assert [c for c, _ in game.moves] == [1 if i % 2 == 0 else 2 for i in range(9)]
    assert {p for c, p in game.moves if c == 1} == {gomoku.parse_move(m, 15)
                                                    for m in GOMOKU_BLACK}
    assert {p for c, p in game.moves if c == 2} == {gomoku.parse_move(m, 15)
                                                    for m in GOMOKU_WHITE}
    order = " ".join(gomoku.move_name(p, 15) for _, p in game.moves)
    assert order in " ".join(printed.split())  # the printed order is the written one


def test_cli_reads_a_rif_position_after_some_moves(live: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    gomoku = get_game("gomoku")
    played = [gomoku.parse_move(m, 15) for m in
              ["h8", "h9", "i9", "i8", "g9", "g8", "j7", "j9", "h10", "k10", "k6"]]
    record = write_rif([RifGame(source="t", game_id="1", moves=tuple(played))],
                       tmp_path / "games.rif")
    out = tmp_path / "inferred.sgf"
    code = cli.main(["infer", "--target", live, "--record", str(record), "--moves", "9",
                     "--iterations", "20", "--restarts", "2", "--tempering", "--polish",
                     "--out", str(out)])
    assert code == 0, capsys.readouterr().out
    (game,) = read_sgf(out.read_text(encoding="utf-8").replace("GM[4]", "GM[1]"))
    assert isinstance(game, SgfGame), game
    assert {p for c, p in game.moves if c == 1} == set(played[:9:2])  # the first 9 moves
    assert {p for c, p in game.moves if c == 2} == set(played[1:9:2])
