"""One `Game` abstraction: a game defined only in tests/ is served, and no service dispatches on
a game by `isinstance` or by its name.

The first tests publish a tiny TorchScript tic-tac-toe policy (`tests/tictactoe_game.py`, the
game's only module) with its `config.pbtxt` into a temporary repository, start a real Triton
and the real search service for that game, and call Predict and GenMove through gRPC. Nothing
outside that module and the config knows about tic-tac-toe. The last test reads the source of
`services/` and `flows/`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch

from services.api.movepred.v1 import search_pb2
from services.games.registry import get_game, registered_games
from services.repository.publish import publish
from services.search.client import SearchClient
from services.triton.launcher import TritonServer
from tests.tictactoe_game import CONFIG_PBTXT, TICTACTOE, TinyTicTacToePolicy
from tests.triton_fixtures import (
    game_search_service,
    require_tritonserver,
    run_local,
    save_scripted,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def _position(*moves: tuple[int, int]) -> search_pb2.Position:
    return search_pb2.Position(game_name=TICTACTOE.name,
                               moves=[search_pb2.Point(x=x, y=y) for x, y in moves])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(target of the search service serving tic-tac-toe alone, the published model.pt)."""
    require_tritonserver()
    root = tmp_path_factory.mktemp("tictactoe")
    repository = root / "model_repository"
    (repository / TICTACTOE.default_model).mkdir(parents=True)
    (repository / TICTACTOE.default_model / "config.pbtxt").write_text(CONFIG_PBTXT)
    torch.manual_seed(0)
    model_pt = save_scripted(TinyTicTacToePolicy(), root / "tictactoe.pt")
    publish(model_pt, repository, TICTACTOE.default_model)
    server = TritonServer(repository, log_path=root / "tritonserver.log", startup_timeout_s=60)
    with server, game_search_service(server.grpc_url, TICTACTOE, _position()) as target:
        yield target, model_pt

def test_predict_answers_the_test_game_with_its_own_model(served: tuple[str, Path]) -> None:
    target, model_pt = served
    with SearchClient(target) as client:
        empty = client.predict(_position(), top_k=3)
        later = client.predict(_position((1, 1), (0, 0)), top_k=9)
    assert (empty.model_name, empty.model_version) == (TICTACTOE.default_model, "1")
    logits = run_local(model_pt, np.zeros((1, 3, 3), np.int8))[0].astype(np.float64)
    expected = np.exp(logits - logits.max())
    expected /= expected.sum()
    assert len(empty.policy) == 9
    np.testing.assert_allclose(empty.policy, expected, rtol=1e-4, atol=1e-6)
    best = int(np.argmax(expected))
    assert empty.top_moves[0].name == TICTACTOE.move_name(best, 3)
    assert (empty.top_moves[0].point.x, empty.top_moves[0].point.y) == (best % 3, best // 3)
    policy = np.array(later.policy)
    assert policy[4] == 0 and policy[0] == 0  # b2 and a1 are taken
    assert abs(policy.sum() - 1) < 1e-5 and len(later.top_moves) == 7
    assert later.to_move == search_pb2.COLOR_BLACK


def test_genmove_searches_the_test_game_by_its_rules(served: tuple[str, Path]) -> None:
    target, _ = served
    with SearchClient(target) as client:
        # X a1 b1, O a2 b2, X to move: c1 makes three in a row
        win = client.genmove(_position((0, 0), (0, 1), (1, 0), (1, 1)), max_visits=64)
        # X a1 b1, O b2, O to move: c1 blocks, anything else loses at once
        block = client.genmove(_position((0, 0), (1, 1), (1, 0)), max_visits=400)
    assert (win.name, win.move.x, win.move.y) == ("c1", 2, 0)
    assert win.candidates[0].name == "c1" and win.candidates[0].value == 1.0  # a won game
    assert block.name == "c1"
    assert block.model_name == TICTACTOE.default_model and block.total_visits >= 400


def test_requests_of_the_test_game_are_validated_by_it(served: tuple[str, Path]) -> None:
    target, _ = served
    cases = [
        (_position((0, 0), (0, 0)), "position.moves[1]: a1: occupied"),
        (_position((0, 0), (3, 0)), "position.moves[1]: (3, 0) is off the 3x3 board"),
        (_position((0, 0), (1, 0), (0, 1), (1, 1), (0, 2)), "position: the game is over"),
        (search_pb2.Position(game_name="tic-tac-no"), "position.game_name: unknown game"),
        (search_pb2.Position(game_name="x" * 20_000),  # quoted cut short, not echoed whole
         f"position.game_name: unknown game {'x' * 24!r}... (20000 chars) (registered: "),
        (search_pb2.Position(), "position.game: GOMOKU is not served by this server"),
    ]
    with SearchClient(target) as client:
        for position, message in cases:
            with pytest.raises(grpc.RpcError) as info:
                client.predict(position)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert info.value.details().startswith(message), info.value.details()


def test_the_cli_plays_the_test_game_by_its_name(served: tuple[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from services import cli

    target, _ = served
    common = ["--target", target, "--game", TICTACTOE.name]
    assert cli.main(["genmove", *common, "--visits", "64", "a1", "a2", "b1", "b2"]) == 0
    out = capsys.readouterr().out
    assert " 2 O o .\n 1 X X ." in out  # the board, the last move (b2) in lower case
    assert "black plays c1" in out
    assert cli.main(["predict", *common, "d4"]) == cli.EXIT_USAGE  # not a 3x3 point
    assert "unknown coordinate 'd4' on a 3x3 board" in capsys.readouterr().err


def test_the_registry_finds_every_game_by_name() -> None:
    assert get_game(TICTACTOE.name) is TICTACTOE
    assert {"gomoku", "go", "tictactoe"} <= {g.name for g in registered_games()}
    with pytest.raises(KeyError, match="unknown game 'chess'"):
        get_game("chess")


# --------------------------------------------------------------------------- no game dispatch

# Strings that are game vocabulary of a record format, not a decision about the game.
ALLOWED = {("services/records/rif.py", "gomoku")}  # RenjuNet rule names: "gomoku", "renju"


def game_dispatch(roots: tuple[str, ...] = ("services", "flows"),
                  base: Path = REPO_ROOT) -> list[str]:
    """Every place outside the game modules and the registry (services/games/) that names a
    game or its default model in a string, or asks `isinstance` about a game's position class:
    "path:line: what". Docstrings may name games."""
    games = registered_games()
    names = {g.name for g in games} | {g.default_model for g in games if g.default_model}
    classes = {type(g.start()).__name__ for g in games} | {"GoState"}
    found = []
    for root in roots:
        for path in sorted((base / root).rglob("*.py")):
            rel = path.relative_to(base).as_posix()
            if rel.startswith(("services/games/", "services/api/")):
                continue
            tree = ast.parse(path.read_text())
            docs = {id(node.body[0].value) for node in ast.walk(tree)
                    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                         ast.AsyncFunctionDef))
                    and node.body and isinstance(node.body[0], ast.Expr)}
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and node.value in names
                        and id(node) not in docs and (rel, node.value) not in ALLOWED):
                    found.append(f"{rel}:{node.lineno}: the string {node.value!r}")
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "isinstance" and len(node.args) == 2):
                    named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                    named |= {n.attr for n in ast.walk(node.args[1])
                              if isinstance(n, ast.Attribute)}
                    if named & classes:
                        what = sorted(named & classes)
                        found.append(f"{rel}:{node.lineno}: isinstance of {what}")
    return sorted(found)


def test_no_game_dispatch_outside_the_game_modules() -> None:
    assert game_dispatch() == []


def test_the_dispatch_check_finds_dispatch(tmp_path: Path) -> None:
    """The check is not blind: it finds both kinds of dispatch in a module written for it."""
    module = tmp_path / "probe" / "dispatch.py"
    module.parent.mkdir()
    module.write_text('"""Names "go" in a docstring, which is fine."""\n'
                      'def f(state, game):\n'
                      '    if isinstance(state, GomokuState):\n'
                      '        return game == "go"\n'
                      '    return {"gomoku_policy": 1}\n')
    assert game_dispatch(("probe",), tmp_path) == [
        "probe/dispatch.py:3: isinstance of ['GomokuState']",
        "probe/dispatch.py:4: the string 'go'",
        "probe/dispatch.py:5: the string 'gomoku_policy'",
    ]


def test_the_search_service_imports_no_torch() -> None:
    """Go's network input is built with numpy (`go_features`); torch (`go_planes`) stays out of
    the search service's process."""
    import subprocess
    import sys

    code = ("import sys, services.search.server, services.games.go.game; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"


def _imports(package: str) -> dict[str, set[str]]:
    """Module path -> the `services.*` modules it imports (at the top or in a function)."""
    out = {}
    for path in sorted((REPO_ROOT / package).glob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
        out[path.relative_to(REPO_ROOT).as_posix()] = {n for n in names
                                                      if n.startswith("services.")}
    return out


def test_games_and_triton_import_no_service_above_them() -> None:
    """The games know no service, and Triton's modules know no search: the dependencies point
    one way (search -> triton -> games), so neither can form an import cycle with the search."""
    above = {"services/games": ("services.search", "services.triton", "services.dataset",
                                "services.trainer", "services.models"),
             "services/triton": ("services.search",)}
    found = [f"{module} imports {name}"
             for package, banned in above.items()
             for module, names in _imports(package).items()
             for name in sorted(names) if name.startswith(banned)]
    assert found == []
