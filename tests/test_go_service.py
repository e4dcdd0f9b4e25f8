"""Go in the search service: positions, rules, Go MCTS, and Predict/GenMove/Analyze over real
gRPC against a real Triton serving the ``go_policy`` model. No mocks of Triton or gRPC.

First part (always runs): `GoSearchState` (vertices, eyes, the candidates the search considers,
terminal values by area score), the Go PUCT search on a deterministic in-process evaluator
(passing ends the game when it wins and is avoided when it loses), and request validation over
gRPC with Triton down (INVALID_ARGUMENT naming the move: occupied, ko retake, suicide, wrong
size, wrong rule; UNAVAILABLE for a valid Go request; a server without a Go model refuses Go).

Second part (skipped without a ``tritonserver`` binary): one Triton serving the tiny Gomoku
policy and an untrained ``go_res_b2c32`` as ``go_policy`` v1; Predict (against the same
TorchScript file run here), batches in one Triton call, GenMove (legal moves and lines, tree
reuse), Analyze, Gomoku still served next to Go, board sizes 9..19 from the same version (Triton
directly, also two sizes at once; Predict, GenMove and Analyze on 9x9 and 13x13), and a rollout
of a Go version (smoke-tested on Go positions).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest

from services.api.movepred.v1 import search_pb2, search_pb2_grpc
from services.games.go.game import (
    GoSearchState,
    VertexError,
    own_eyes,
    parse_vertex,
    vertex,
)
from services.games.go.rules import BLACK, WHITE, GoState
from services.search import mcts
from services.search.client import SearchClient, go_position
from services.search.server import build_service
from services.triton.client import PolicyClient
from tests.triton_fixtures import go_triton_setup, require_tritonserver

KO = ["D4", "E4", "C5", "F5", "D6", "E6", "A1", "D5", "E5"]  # black E5 takes the ko at D5


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replay(vertices: list[str], komi: float = 7.5, size: int = 19) -> GoSearchState:
    pos = GoSearchState(GoState(size), komi)
    for v in vertices:
        p = parse_vertex(v, size)
        pos = pos.play(pos.pass_move if p is None else p)
    return pos


# --------------------------------------------------------------------------- positions


def test_vertices() -> None:
    assert parse_vertex("A1") == 0 and parse_vertex("t19") == 360
    assert parse_vertex("J1") == 8  # no I: J is the ninth column
    assert parse_vertex("pass") is None and parse_vertex("PASS") is None
    for p in (0, 8, 72, 360):
        assert parse_vertex(vertex(p)) == p
    assert vertex(361) == vertex(None) == "pass"
    for bad in ("I5", "A0", "A20", "U1", "", "D"):
        with pytest.raises(VertexError):
            parse_vertex(bad)


def test_eyes_are_never_searched_but_stay_legal() -> None:
    state = GoState.from_ascii(
        """
        . X . O .
        X X . O O
        . . . . .
        O O . X X
        . O O X .
        """
    )
    assert sorted(vertex(int(p), 5) for p in own_eyes(state, BLACK)) == ["A5", "E1"]
    assert sorted(vertex(int(p), 5) for p in own_eyes(state, WHITE)) == ["A1", "E5"]
    pos = GoSearchState(state)
    legal = pos.legal_mask()
    assert legal.shape == (26,) and legal[-1]  # 25 points, then the pass
    candidates = pos.search_candidates(legal)
    assert candidates[-1] == 25  # the pass, always
    assert parse_vertex("A5", 5) not in candidates and parse_vertex("E1", 5) not in candidates
    assert legal[parse_vertex("A5", 5)] and legal[parse_vertex("E1", 5)]
    # a false eye (two opponent diagonals in the middle) is searched
    false_eye = GoState.from_ascii(
        """
        . . . . .
        . O X O .
        . X . X .
        . O X O .
        . . . . .
        """
    )
    assert own_eyes(false_eye, BLACK).size == 0


def test_terminal_value_by_area_with_komi() -> None:
    ahead = GoSearchState(GoState.from_ascii(
        """
        . X O . .
        . X O . .
        . X O . .
        . X O . .
        . X O . .
        """
    ), komi=0.5)  # black 10, white 15: white is ahead by 5.5
    assert ahead.score() == -5.5
    over = ahead.play(25).play(25)  # black passes, white passes
    assert over.is_over and over.winner() == WHITE
    assert over.terminal_value() == 1.0  # white passed last and wins
    tie = GoSearchState(ahead.state, komi=-5.0).play(25).play(25)
    assert tie.terminal_value() == 0.0


@dataclass(frozen=True)
class Out:
    logits: np.ndarray
    model_name: str = "uniform"
    model_version: str = "0"


class UniformGo:
    """Equal logits for every move of a Go position (compact inputs [N, 4, S, S])."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    def infer(self, boards: np.ndarray) -> Out:
        self.shapes.append(boards.shape)
        n, _, s, _ = boards.shape
        return Out(np.zeros((n, s * s + 1), dtype=np.float32))


def _after_white_pass(black_ahead: bool) -> GoSearchState:
    # 9x9: a wall on column E splits the board; the wide side wins by far more than komi
    rows = []
    for _ in range(9):
        rows.append(". . . . X O . . ." if black_ahead else ". . . X O . . . .")
    state = GoState.from_ascii("\n".join(rows), to_move=WHITE)
    return GoSearchState(state, komi=7.5).play(81)  # white passes: black to move


@pytest.mark.parametrize("black_ahead", [True, False])
def test_search_passes_to_win_and_never_to_lose(black_ahead: bool) -> None:
    pos = _after_white_pass(black_ahead)
    assert (pos.score() > 0) == black_ahead and pos.to_move == BLACK
    evaluator = UniformGo()
    r = mcts.search(pos, evaluator, max_visits=300, batch_size=8)
    assert evaluator.shapes[0][1:] == (4, 9, 9)  # compact Go inputs
    children = {c.move: c for c in r.children}
    if black_ahead:
        assert r.move == 81 and children[81].value == 1.0  # pass: the game ends, black wins
    else:
        assert r.move != 81
        assert 81 not in children or children[81].value == -1.0  # passing loses


def test_only_the_pass_is_left_when_every_point_is_an_own_eye() -> None:
    rows = [". X . X . X . X .", "X X X X X X X X X"] * 4 + [". X . X . X . X ."]
    pos = GoSearchState(GoState.from_ascii("\n".join(rows)), komi=7.5)
    assert pos.search_candidates() == [81]
    r = mcts.search(pos, UniformGo(), max_visits=20)
    assert r.move == 81


@dataclass(frozen=True)
class ValueOut:
    logits: np.ndarray
    values: np.ndarray
    model_name: str = "holder"
    model_version: str = "0"


class HolderWinsGo(UniformGo):
    """Uniform policy; the value head is sure whoever holds `point` wins (compact plane 0 is
    seen from the side to move: 1 own stone, 2 the opponent's)."""

    def __init__(self, point: int) -> None:
        super().__init__()
        self.point = point

    def infer(self, boards: np.ndarray) -> ValueOut:
        logits = super().infer(boards).logits
        holder = boards[:, 0].reshape(len(boards), -1)[:, self.point]
        values = np.select([holder == 1, holder == 2], [0.8, -0.8], 0.0).astype(np.float32)
        return ValueOut(logits, values)


def test_go_leaves_get_the_value_head() -> None:
    pos = GoSearchState(GoState(9), komi=7.5)  # black to move on an empty 9x9 board
    target = 2 * 9 + 2  # C3
    r = mcts.search(pos, HolderWinsGo(target), max_visits=300, top_children=82)
    children = {c.move: c for c in r.children}
    assert r.move == target and r.visits > 150
    assert children[target].value == pytest.approx(0.8)
    assert all(c.value == 0.0 for c in r.children if c.move != target)  # the pass too


# --------------------------------------------------------------------------- validation


@pytest.fixture(scope="module")
def offline() -> Iterator[search_pb2_grpc.SearchServiceStub]:
    """A search service whose Gomoku and Go models are behind a port nobody listens on."""
    gomoku = PolicyClient(f"127.0.0.1:{closed_port()}", timeout_s=2.0)
    go = PolicyClient(f"127.0.0.1:{closed_port()}", "go_policy", timeout_s=2.0)
    service = build_service(gomoku, go_evaluator=go).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            yield search_pb2_grpc.SearchServiceStub(channel)
    finally:
        service.stop()
        gomoku.close()
        go.close()


def _go(*moves: str, **fields: object) -> search_pb2.Position:
    position = go_position(list(moves))
    for k, v in fields.items():
        setattr(position, k, v)
    return position


INVALID = [
    ("Predict", dict(position=_go("D4", "D4")), "position.moves[1]: D4 is occupied"),
    ("GenMove", dict(position=_go(*KO, "D5")),
     "position.moves[9]: D5 retakes the ko at once: white must play elsewhere first"),
    ("GenMove", dict(position=_go("A2", "T19", "B1", "A1")),
     "position.moves[3]: A1 is suicide for white"),
    ("Predict", dict(position=_go("D4", board_size=7)),
     "position.board_size: Go is served on sizes 9..19 (9x9 to 19x19), got 7"),
    ("GenMove", dict(position=_go("D4", board_size=21)),
     "position.board_size: Go is served on sizes 9..19 (9x9 to 19x19), got 21"),
    ("Analyze", dict(position=_go(board_size=25)),
     "position.board_size: Go is served on sizes 9..19 (9x9 to 19x19), got 25"),
    ("Predict", dict(positions=[_go("D4", board_size=9), _go("D4", board_size=21)]),
     "positions[1].board_size: Go is served on sizes 9..19"),
    ("Predict", dict(positions=[_go("D4", board_size=9), _go("D4")]),
     "positions[1].board_size: all positions of one request must be on one board size "
     "(positions[0] is 9x9, this one 19x19)"),
    ("Predict", dict(position=_go("D4", board_size=9), top_k=83), "top_k: must be in 0..82"),
    ("GenMove", dict(position=_go("D4", board_size=13), max_candidates=171),
     "max_candidates: must be in 0..170"),
    ("Predict", dict(position=_go("K10", board_size=9)), "position.moves[0]: (9, 9) is off the "
     "9x9 board"),
    ("Predict", dict(position=_go("D4", rule=search_pb2.RULE_RENJU)),
     "position.rule: RULE_RENJU is a Gomoku rule"),
    ("Predict", dict(position=_go("D4", komi=float("nan"))), "position.komi: must be finite"),
    ("GenMove", dict(position=_go("D4", "pass", "pass")),
     "position: the game is over (two consecutive passes)"),
    ("Predict", dict(position=_go("pass", "pass", "D4")),
     "position.moves[2]: the game ended at moves[1] (two consecutive passes)"),
    ("Predict", dict(position=search_pb2.Position(
        game=search_pb2.GAME_GO, setup_black=[search_pb2.Point(is_pass=True)])),
     "position.setup_black[0]: a pass cannot be a set-up stone"),
    ("Predict", dict(position=search_pb2.Position(
        game=search_pb2.GAME_GO,
        setup_black=[search_pb2.Point(x=0, y=1), search_pb2.Point(x=1, y=0)],
        setup_white=[search_pb2.Point(x=0, y=0)])),
     "position.setup_white: the white set-up stone at A1 has no liberty"),
    ("Predict", dict(position=search_pb2.Position(moves=[search_pb2.Point(is_pass=True)])),
     "position.moves[0]: a pass is a Go move"),
    ("Predict", dict(position=search_pb2.Position(komi=6.5)),
     "position.komi: only Go positions have a komi"),
    ("Predict", dict(position=_go("D4"), top_k=363), "top_k: must be in 0..362"),
    ("GenMove", dict(position=_go("D4"), max_candidates=363), "max_candidates: must be in 0..362"),
    ("Predict", dict(positions=[_go("D4"), search_pb2.Position()]),
     "positions[1].game: all positions of one request must be of one game (positions[0] is GO)"),
    ("Analyze", dict(position=_go("D4", "D4")), "position.moves[1]: D4 is occupied"),
]


@pytest.mark.parametrize(("method", "fields", "message"), INVALID)
def test_invalid_go_requests_name_the_move(offline, method: str, fields: dict, message: str):
    request = getattr(search_pb2, f"{method}Request")(**fields)
    with pytest.raises(grpc.RpcError) as info:
        reply = getattr(offline, method)(request, timeout=10)
        if method == "Analyze":
            list(reply)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert info.value.details().startswith(message), info.value.details()


def test_valid_go_request_without_triton_is_unavailable(offline) -> None:
    request = search_pb2.GenMoveRequest(position=_go("D4", "pass"), max_visits=20)
    with pytest.raises(grpc.RpcError) as info:
        offline.GenMove(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "Triton is unreachable" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:  # top_k 362 (every move, the pass too) is valid
        offline.Predict(search_pb2.PredictRequest(position=_go(), top_k=362), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    for size in (9, 13):  # so is every move of a smaller board
        request = search_pb2.PredictRequest(position=_go("D4", board_size=size),
                                            top_k=size * size + 1)
        with pytest.raises(grpc.RpcError) as info:
            offline.Predict(request, timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()


def test_server_without_a_go_model_refuses_go() -> None:
    gomoku = PolicyClient(f"127.0.0.1:{closed_port()}", timeout_s=2.0)
    service = build_service(gomoku).start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client, \
                pytest.raises(grpc.RpcError) as info:
            client.genmove(go_position(["D4"]), max_visits=10)
    finally:
        service.stop()
        gomoku.close()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("position.game: GO is not served by this server")


# --------------------------------------------------------------------------- with real Triton


@dataclass
class Live:
    target: str
    triton: object
    repository: Path
    go_model: Path
    metrics: object


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:

    require_tritonserver()
    server, setup = go_triton_setup(tmp_path_factory.mktemp("go-triton"))
    with server:
        gomoku = PolicyClient(server.grpc_url, "gomoku_policy", timeout_s=30.0)
        go = PolicyClient(server.grpc_url, "go_policy", timeout_s=30.0)
        service = build_service(gomoku, go_evaluator=go).start()
        try:
            yield Live(f"127.0.0.1:{service.port}", server, setup.repository, setup.v1_model,
                       service.metrics)
        finally:
            service.stop()
            gomoku.close()
            go.close()


def local_logits(model: Path, positions: list[GoSearchState]) -> np.ndarray:
    import torch

    scripted = torch.jit.load(str(model), map_location="cpu").eval()
    boards = np.stack([p.features() for p in positions])
    with torch.inference_mode():
        return scripted(torch.from_numpy(boards)).numpy()


@pytest.mark.timeout(300)
def test_go_predict_end_to_end(live: Live) -> None:
    pos = replay(KO)  # white to move; D5 is the ko point
    with SearchClient(live.target) as client:
        r = client.predict(go_position(KO), top_k=362)
    assert (r.model_name, r.model_version) == ("go_policy", "1")
    assert r.to_move == search_pb2.COLOR_WHITE
    policy = np.array(r.policy)
    assert policy.shape == (362,) and abs(policy.sum() - 1) < 1e-5
    legal = pos.legal_mask()
    assert not legal[parse_vertex("D5")] and legal[361]
    assert (policy[~legal] == 0).all() and (policy[legal] > 0).all()  # ko, stones: 0
    expected = mcts.masked_softmax(local_logits(live.go_model, [pos])[0], legal)
    np.testing.assert_allclose(policy, expected, rtol=1e-4, atol=1e-6)
    assert not r.HasField("value") and not r.results[0].HasField("value")  # no value head
    assert len(r.top_moves) == legal.sum() == 353  # top_k 362 lists every legal move
    assert r.top_moves[0].name == vertex(int(np.argmax(expected)))
    passes = [m for m in r.top_moves if m.name == "pass"]
    assert len(passes) == 1 and passes[0].point.is_pass
    assert abs(passes[0].probability - expected[361]) < 1e-5


@pytest.mark.timeout(300)
def test_go_predict_batch_is_one_triton_call_and_gomoku_still_works(live: Live) -> None:
    games = [[], ["D4"], KO, ["Q16", "pass"]]
    m = live.metrics
    calls = m.value("movepred_triton_batch_boards_count")
    boards = m.value("movepred_triton_batch_boards_sum")
    with SearchClient(live.target) as client:
        r = client.predict_many([go_position(g) for g in games], top_k=3)
        assert m.value("movepred_triton_batch_boards_count") == calls + 1
        assert m.value("movepred_triton_batch_boards_sum") == boards + len(games)
        positions = [replay(g) for g in games]
        expected = local_logits(live.go_model, positions)
        for pos, row, result in zip(positions, expected, r.results, strict=True):
            np.testing.assert_allclose(
                np.array(result.policy), mcts.masked_softmax(row, pos.legal_mask()),
                rtol=1e-4, atol=1e-6)
        assert [x.to_move for x in r.results] == [search_pb2.COLOR_BLACK, search_pb2.COLOR_WHITE,
                                                   search_pb2.COLOR_WHITE, search_pb2.COLOR_BLACK]
        gomoku = client.predict(["h8", "h9"], top_k=2)  # the same service serves Gomoku
    assert (gomoku.model_name, len(gomoku.policy)) == ("gomoku_policy", 225)


@pytest.mark.timeout(300)
def test_go_genmove_end_to_end(live: Live) -> None:
    moves = ["Q16", "D4", "Q4"]
    with SearchClient(live.target) as client:
        r = client.genmove(go_position(moves), max_visits=96, max_candidates=4)
        assert r.color == search_pb2.COLOR_WHITE and r.total_visits == 96
        assert (r.model_name, r.model_version) == ("go_policy", "1")
        assert len(r.candidates) == 4 and r.candidates[0].name == r.name
        pos = replay(moves)
        for name in r.principal_variation_names:  # a legal line
            p = parse_vertex(name)
            pos = pos.play(pos.pass_move if p is None else p)
        r2 = client.genmove(go_position([*moves, r.name]), max_visits=96)
        # the subtree below the move played keeps its visits (all but the one that made it)
        assert r2.color == search_pb2.COLOR_BLACK and r2.reused_visits == r.visits - 1
        assert r2.total_visits == max(96, r2.reused_visits)
        # ko: white may not retake at D5, and the service never proposes it
        k = client.genmove(go_position(KO), max_visits=64, max_candidates=362)
        assert "D5" not in {c.name for c in k.candidates} and k.name != "D5"
        reports = list(client.analyze(go_position(moves), max_visits=64,
                                      report_every_visits=32, reuse_tree=False))
    assert [x.final for x in reports] == [False] * (len(reports) - 1) + [True]
    assert reports[-1].total_visits == 64 and reports[-1].to_move == search_pb2.COLOR_WHITE


@pytest.mark.timeout(300)
def test_triton_answers_every_go_size_from_one_version(live: Live) -> None:
    """9x9, 13x13 and 19x19 boards to the same go_policy version: logits [N, S*S+1] equal to
    the TorchScript file run here; also two sizes at once from several threads (Triton's
    dynamic batcher may hand both to one execute call: one forward pass per size)."""
    from services.games.go.game import GO
    from services.triton.client import TritonRequestError
    from tests.triton_fixtures import run_in_threads, run_local

    inputs = {s: GO.sample_inputs(6, s, seed=s) for s in (9, 13, 19)}
    expected = {s: run_local(live.go_model, b) for s, b in inputs.items()}
    with PolicyClient(live.triton.grpc_url, "go_policy", timeout_s=60.0) as client:
        for s, boards in inputs.items():
            r = client.infer(boards)
            assert (r.model_name, r.model_version) == ("go_policy", "1")
            assert r.logits.shape == (6, s * s + 1)
            np.testing.assert_allclose(r.logits, expected[s], rtol=1e-5, atol=1e-5)
        with pytest.raises(TritonRequestError, match=r"S in 9\.\.19"):  # refused before Triton
            client.infer(np.zeros((1, 4, 21, 21), np.int8))

        versions: set[str] = set()
        barrier = threading.Barrier(6)

        def worker(k: int) -> None:
            s = (9, 19, 13)[k % 3]
            barrier.wait(timeout=30)
            for i in range(6):
                rows = slice(i % 6, i % 6 + 1 + k % 2)
                r = client.infer(inputs[s][rows])
                versions.add(r.model_version)
                np.testing.assert_allclose(r.logits, expected[s][rows], rtol=1e-5, atol=1e-5)

        errors = run_in_threads(worker, 6, timeout_s=120)
    assert not errors, errors[0]
    assert versions == {"1"}


@pytest.mark.timeout(300)
def test_go_predict_genmove_analyze_on_small_boards(live: Live) -> None:
    ko = replay(KO, size=9)  # the ko fits on 9x9: white to move, D5 is the ko point
    with SearchClient(live.target) as client:
        r = client.predict(go_position(KO, board_size=9), top_k=82)
        assert (r.model_name, r.model_version) == ("go_policy", "1")
        policy = np.array(r.policy)
        assert policy.shape == (82,) and abs(policy.sum() - 1) < 1e-5
        legal = ko.legal_mask()
        assert legal.shape == (82,) and not legal[parse_vertex("D5", 9)] and legal[81]
        assert (policy[~legal] == 0).all() and (policy[legal] > 0).all()  # stones, ko: 0
        expected = mcts.masked_softmax(local_logits(live.go_model, [ko])[0], legal)
        np.testing.assert_allclose(policy, expected, rtol=1e-4, atol=1e-6)
        assert len(r.top_moves) == legal.sum() and r.top_moves[0].name == vertex(
            int(np.argmax(expected)), 9)

        # a 13x13 batch in one Triton call
        games = [[], ["G7"], ["N13", "pass"]]
        many = client.predict_many([go_position(g, board_size=13) for g in games], top_k=3)
        positions = [replay(g, size=13) for g in games]
        for pos, row, result in zip(positions, local_logits(live.go_model, positions),
                                    many.results, strict=True):
            assert len(result.policy) == 170
            np.testing.assert_allclose(np.array(result.policy),
                                       mcts.masked_softmax(row, pos.legal_mask()),
                                       rtol=1e-4, atol=1e-6)

        moves = ["E5", "C3"]
        g = client.genmove(go_position(moves, board_size=9), max_visits=48, max_candidates=82)
        assert g.color == search_pb2.COLOR_BLACK and g.total_visits == 48
        assert g.move.is_pass or (0 <= g.move.x < 9 and 0 <= g.move.y < 9)
        pos = replay(moves, size=9)
        assert pos.legal_mask()[parse_vertex(g.name, 9) if g.name != "pass" else 81]
        for name in g.principal_variation_names:  # a legal 9x9 line
            p = parse_vertex(name, 9)
            pos = pos.play(pos.pass_move if p is None else p)
        assert {c.name for c in g.candidates} <= {vertex(m, 9) for m in range(82)}
        # the same moves on 19x19 are another game: no tree of the 9x9 search is reused
        big = client.genmove(go_position(moves), max_visits=16)
        assert big.reused_visits == 0 and big.total_visits == 16
        reports = list(client.analyze(go_position(["G7"], board_size=13), max_visits=32,
                                      report_every_visits=16, reuse_tree=False))
    assert reports[-1].final and reports[-1].total_visits == 32
    assert reports[-1].to_move == search_pb2.COLOR_WHITE
    assert all(0 <= c.move.x < 13 and 0 <= c.move.y < 13 for c in reports[-1].candidates
               if not c.move.is_pass)


@pytest.mark.timeout(300)
def test_concurrent_searches_on_two_board_sizes(live: Live) -> None:
    """GenMove on 9x9 and on 19x19 at the same time: the service's Go batcher never merges
    boards of different sizes into one Triton call, and both searches finish."""
    results: dict[int, search_pb2.GenMoveResponse] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(size: int) -> None:
        try:
            with SearchClient(live.target) as client:
                barrier.wait(timeout=30)
                results[size] = client.genmove(go_position(["D4"], board_size=size),
                                               max_visits=64, reuse_tree=False)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in (9, 19)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not errors, errors[0]
    for size, r in results.items():
        assert r.total_visits == 64 and r.color == search_pb2.COLOR_WHITE
        pos = replay(["D4"], size=size)
        assert pos.legal_mask()[size * size if r.move.is_pass else r.move.y * size + r.move.x]


@pytest.mark.timeout(600)
def test_go_rollout_smoke_tests_go_positions(live: Live) -> None:
    from services.trainer.publish import publish_model
    from services.triton.rollout import rollout
    from tests.triton_fixtures import GO_CONFIG

    version = publish_model(live.repository, config=GO_CONFIG, seed=1)
    with PolicyClient(live.triton.grpc_url, "go_policy", timeout_s=30.0) as client:
        report = rollout(client, live.repository, version, "go_policy")
    assert report.current == version and report.smoke_passed, report.to_markdown()
    names = {c.name for c in report.smoke}
    assert {"shape", "finite", "masked policy", "batch consistency", "serving"} <= names
    with SearchClient(live.target) as client:
        r = client.predict(go_position(["D4"]))
    assert r.model_version == str(version)


@pytest.mark.timeout(600)
def test_go_value_model_end_to_end(live: Live) -> None:
    """Runs last: a `go_res_b2c32_v` network (value head) published as the next go_policy
    version. Triton's value is the local TorchScript's, Predict reports it for the side to
    move, and GenMove searches with it."""
    from tests.triton_fixtures import add_go_value_model, run_local_outputs

    model = add_go_value_model(live.repository, seed=0)
    version = model.parent.name
    games = [["D4"], KO, []]
    positions = [replay(g) for g in games]
    boards = np.stack([p.features() for p in positions])
    logits, values = run_local_outputs(model, boards)
    assert values is not None and values.shape == (3,)
    with PolicyClient(live.triton.grpc_url, "go_policy", timeout_s=60.0) as admin:
        admin.load_model()  # the newest version, per the on-disk config
        direct = admin.infer(boards)
    assert direct.model_version == version
    np.testing.assert_allclose(direct.logits, logits, rtol=1e-5, atol=1e-5)
    assert direct.values is not None
    np.testing.assert_allclose(direct.values, values, rtol=1e-5, atol=1e-6)
    with SearchClient(live.target) as client:
        r = client.predict(go_position(KO), top_k=3)
        assert r.model_version == version and r.to_move == search_pb2.COLOR_WHITE
        assert r.HasField("value") and -1.0 <= r.value <= 1.0
        assert r.value == pytest.approx(float(values[1]), abs=1e-5)
        many = client.predict_many([go_position(g) for g in games], top_k=2)
        got = [x.value for x in many.results if x.HasField("value")]
        np.testing.assert_allclose(got, values, rtol=0, atol=1e-5)
        g = client.genmove(go_position(["Q16", "D4"]), max_visits=48, reuse_tree=False)
        assert g.model_version == version and g.total_visits == 48
        assert g.value != 0.0 and -1.0 <= g.value <= 1.0
