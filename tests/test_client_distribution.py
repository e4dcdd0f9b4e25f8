"""The thin client distribution (clients/python, `movepred-client`) as a user gets it.

Unit: the client's coordinate rules are the platform's, name by name (the client copies them
so that it needs nothing of the platform); its sources import nothing but grpcio, protobuf and
the standard library; its dependency floors fit the platform's pins.

Integration: the wheel is built (as `make client` does), installed into a fresh virtualenv with
grpcio and protobuf alone (no system site-packages, so nothing of the platform's environment
leaks in), and that venv's Python calls a running search service: over Triton (the suite's
`service` fixture), and over TLS with a bearer token. The wheel and the venv are made once per
module.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import types
import zipfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from services import coords as platform_coords
from services.search import auth
from services.search.client import SearchClient
from services.search.server import build_service
from tests.evaluators import UniformEvaluator
from tests.triton_fixtures import search_service, triton_server  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[1]
CLIENT_DIR = ROOT / "clients" / "python"
CLIENT_SRC = CLIENT_DIR / "src" / "movepred_client"
REQUIREMENTS = ROOT / "requirements.txt"
HEAVY = ("torch", "numba", "pyarrow", "numpy", "tritonclient", "pytriton", "services", "flows")
TOKEN = "client-distribution-token"


def _load_client_coords() -> types.ModuleType:
    """The client's coords.py loaded from its file (the package's __init__ needs the stubs,
    which exist only in a built wheel)."""
    spec = importlib.util.spec_from_file_location("movepred_client_coords", CLIENT_SRC /
                                                  "coords.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


client_coords = _load_client_coords()


def _outcome(function: Any, *args: Any) -> tuple[str, Any]:
    """("ok", result) or (exception class name, message) of function(*args)."""
    try:
        return "ok", function(*args)
    except ValueError as exc:
        return type(exc).__name__, str(exc)


BAD_NAMES = ["", " ", "h0", "h16", "z1", "h8x", "hh", "8h", "h-1", "h08", "h 8", "pass",
             "h\uff18", "\u212a8", "\u017f4", "a" * 100, "i" * 3, "p1", "T20", "I5", "J100"]


# ---------------------------------------------------------------------------------- unit
@pytest.mark.parametrize("size", [9, 13, 15, 19])
def test_gomoku_names_are_the_platforms(size: int) -> None:
    names = [platform_coords.point_name(x, y) for y in range(size) for x in range(size)]
    assert names == [client_coords.point_name(x, y) for y in range(size) for x in range(size)]
    assert [client_coords.index_name(i, size) for i in range(size * size)] == \
        [platform_coords.index_name(i, size) for i in range(size * size)]
    for text in [*names, *(n.upper() for n in names), *(f" {n}\t" for n in names), *BAD_NAMES]:
        assert _outcome(client_coords.parse_point, text, size) == \
            _outcome(platform_coords.parse_point, text, size), text
    assert client_coords.parse_point("h8", 15) == (7, 7)
    with pytest.raises(client_coords.CoordinateError, match="'z1'"):
        client_coords.parse_point("z1", size)


@pytest.mark.parametrize("size", [9, 13, 19, 25])
def test_gtp_vertices_are_the_platforms(size: int) -> None:
    moves = [None, *range(size * size + 1)]  # the pass as None and as size * size
    vertices = [platform_coords.gtp_vertex(m, size) for m in moves]
    assert vertices == [client_coords.gtp_vertex(m, size) for m in moves]
    assert [client_coords.gtp_name(m, size) for m in moves[:-1]] == \
        [platform_coords.gtp_name(m, size) for m in moves[:-1]]
    for text in [*vertices, *(v.lower() for v in vertices), "PASS", " Pass ", *BAD_NAMES]:
        assert _outcome(client_coords.parse_gtp_vertex, text, size) == \
            _outcome(platform_coords.parse_gtp_vertex, text, size), text
    assert client_coords.gtp_vertex(3 * 19 + 15, 19) == "Q4"
    assert issubclass(client_coords.VertexError, client_coords.CoordinateError)


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_client_sources_import_only_grpc_protobuf_and_the_standard_library() -> None:
    sources = sorted(CLIENT_SRC.rglob("*.py"))
    assert len(sources) >= 4
    allowed = {"grpc", "google", "movepred_client", *sys.stdlib_module_names}
    for path in sources:
        assert _imported_roots(path) <= allowed, (path, _imported_roots(path) - allowed)


def _pins() -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", REQUIREMENTS.read_text(), re.M))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_client_dependency_floors_fit_the_platforms_pins() -> None:
    """The wheel's floors are what the pinned grpcio-tools generates, and the platform's own
    grpcio and protobuf satisfy them: one environment can hold both."""
    constants = {node.targets[0].id: node.value.value
                 for node in ast.parse((CLIENT_DIR / "setup.py").read_text()).body
                 if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                 and isinstance(node.value, ast.Constant)}
    pins = _pins()
    build_requires = (CLIENT_DIR / "pyproject.toml").read_text()
    assert f'"grpcio-tools=={pins["grpcio-tools"]}"' in build_requires
    assert constants["GRPCIO_FLOOR"] == pins["grpcio-tools"]
    assert _version(constants["GRPCIO_FLOOR"]) <= _version(pins["grpcio"])
    assert _version(constants["PROTOBUF_FLOOR"]) <= _version(pins["protobuf"])
    assert _version(pins["protobuf"])[0] == 6  # the wheel says protobuf<7


# --------------------------------------------------------------------------- integration
@pytest.fixture(scope="module")
def client_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built as `make client` builds it, from a copy of clients/python and proto/
    (the build writes build/ and egg-info next to its sources)."""
    root = tmp_path_factory.mktemp("client-build")
    shutil.copytree(CLIENT_DIR, root / "clients" / "python",
                    ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "*_pb2*.py*",
                                                  "__pycache__"))
    shutil.copytree(ROOT / "proto", root / "proto")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(root / "dist"), str(root / "clients" / "python")],
                   check=True, timeout=120)
    (wheel,) = (root / "dist").glob("movepred_client-*.whl")
    return wheel


@pytest.fixture(scope="module")
def client_python(client_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Python of a fresh virtualenv holding the wheel, grpcio and protobuf (the platform's
    pinned versions, from the package registry or pip's cache) and nothing else."""
    venv = tmp_path_factory.mktemp("client-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    python = venv / "bin" / "python"
    pins = _pins()
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-input", str(client_wheel), f"grpcio=={pins['grpcio']}",
                    f"protobuf=={pins['protobuf']}"], check=True, timeout=300)
    return python


def run_client(python: Path, script: str, tmp_path: Path, **arguments: Any) -> dict[str, Any]:
    """Run `script` in the client venv (from a folder outside the checkout, no PYTHONPATH), with
    `arguments` as the JSON `ARGS`; returns the JSON it prints last."""
    path = tmp_path / "client_script.py"
    path.write_text("import json, sys\nARGS = json.loads(sys.argv[1])\n" + script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run([str(python), str(path), json.dumps(arguments)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_the_wheel_holds_the_client_and_its_stubs_only(client_wheel: Path) -> None:
    names = zipfile.ZipFile(client_wheel).namelist()
    assert client_wheel.name.endswith("-py3-none-any.whl")  # pure Python: any platform
    for module in ("__init__.py", "client.py", "coords.py", "py.typed", "v1/search_pb2.py",
                   "v1/search_pb2.pyi", "v1/search_pb2_grpc.py"):
        assert f"movepred_client/{module}" in names
    assert {n.split("/")[0] for n in names} == {"movepred_client",
                                                client_wheel.name.split("-py3")[0] + ".dist-info"}
    metadata = zipfile.ZipFile(client_wheel).read(
        next(n for n in names if n.endswith("/METADATA"))).decode()
    requires = sorted(re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)", metadata, re.M))
    assert requires == ["grpcio", "protobuf"]
    stubs = zipfile.ZipFile(client_wheel).read("movepred_client/v1/search_pb2_grpc.py").decode()
    assert "from movepred_client.v1 import search_pb2" in stubs
    assert not re.search(r"^from movepred\.", stubs, re.M)


BESIDE_SCRIPT = """
from services.api.movepred.v1 import search_pb2 as platform_pb2
from services.search import client as platform
import movepred_client as thin
gomoku = [(["h8", "h9", "i8"], "freestyle"), (["h8", (8, 8)], "renju"), ([], "standard")]
go = [(["D4", "pass", "Q16"], 19, 7.5, (), (), "black"),
      (["C3"], 9, 0.5, ("D4",), ("E5",), "white")]
same = [platform.position(m, r, 15).SerializeToString()
        == thin.gomoku_position(m, r, 15).SerializeToString() for m, r in gomoku]
same += [platform.go_position(m, komi, size, sb, sw,
                              thin.enum_value(platform_pb2.Color, first)).SerializeToString()
         == thin.go_position(m, size, komi, sb, sw, first).SerializeToString()
         for m, size, komi, sb, sw, first in go]
print(json.dumps({
    "files": [platform_pb2.DESCRIPTOR.name, thin.search_pb2.DESCRIPTOR.name],
    "one_class": platform_pb2.Position is thin.search_pb2.Position,
    "same_positions": same,
    "renju": thin.enum_value(thin.search_pb2.Rule, "renju") == platform_pb2.RULE_RENJU,
}))
"""


@pytest.mark.integration
def test_the_client_loads_beside_the_platform_in_one_process(client_wheel: Path,
                                                             tmp_path: Path) -> None:
    """The platform's stubs and the client's register the same file, movepred/v1/search.proto,
    so one process can import both (the wheel on sys.path of the platform's Python), and the
    client builds byte for byte the positions the platform's own client builds."""
    path = tmp_path / "beside.py"
    path.write_text("import json\n" + BESIDE_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(client_wheel), str(ROOT)])}
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["files"] == ["movepred/v1/search.proto"] * 2
    assert out["one_class"] and out["renju"]
    assert out["same_positions"] == [True] * 5


IMPORT_SCRIPT = """
import importlib.metadata, sys
import movepred_client
from movepred_client import search_pb2
heavy = [m for m in ARGS["heavy"] if m in sys.modules]
from movepred_client import ClientConfigError, SearchClient, enum_value
refusals = {}
for label, options in [("retries", {"retries": 9}), ("token_file", {"token_file": ARGS["empty"]}),
                       ("both_tokens", {"token": "t", "token_file": ARGS["empty"]}),
                       ("half_mtls", {"client_cert": ARGS["empty"]})]:
    try:
        SearchClient("127.0.0.1:1", **options).close()
        refusals[label] = "accepted"
    except ClientConfigError as exc:
        refusals[label] = str(exc)
try:
    enum_value(search_pb2.Rule, "go-moku")
except ClientConfigError as exc:
    refusals["rule"] = str(exc)
try:
    import torch  # noqa
    torch_importable = True
except ModuleNotFoundError:
    torch_importable = False
print(json.dumps({
    "heavy": heavy, "torch_importable": torch_importable,
    "proto_file": search_pb2.DESCRIPTOR.name,
    "service": movepred_client.client.SERVICE_NAME,
    "distributions": sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions()),
    "h8": movepred_client.parse_point("h8"), "q16": movepred_client.gtp_vertex(15 * 19 + 15),
    "refusals": refusals,
}))
"""


@pytest.mark.integration
def test_a_fresh_venv_imports_the_client_without_the_platform(client_python: Path,
                                                              tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    out = run_client(client_python, IMPORT_SCRIPT, tmp_path, heavy=HEAVY,
                     empty=str(tmp_path / "empty"))
    assert out["heavy"] == [] and not out["torch_importable"]
    assert out["proto_file"] == "movepred/v1/search.proto"
    assert out["service"] == "movepred.v1.SearchService"
    # grpcio's own dependency, typing-extensions, is the only other distribution there
    assert {"grpcio", "movepred-client", "protobuf"} <= set(out["distributions"]) <= {
        "grpcio", "movepred-client", "protobuf", "typing-extensions", "typing_extensions"}
    assert out["h8"] == [7, 7] and out["q16"] == "Q16"
    refusals = out["refusals"]  # bad options: a clear error before any call
    assert "retries must be 0..4" in refusals["retries"]
    assert "is empty" in refusals["token_file"]
    assert "not both" in refusals["both_tokens"]
    assert "go together" in refusals["half_mtls"]
    assert "'go-moku'" in refusals["rule"] and "renju" in refusals["rule"]


PREDICT_SCRIPT = """
import grpc
from movepred_client import CoordinateError, SearchClient, gomoku_position, search_pb2
with SearchClient(ARGS["target"], wait_for_ready=True) as client:
    reply = client.predict(ARGS["moves"], top_k=5)
    many = client.predict_many([ARGS["moves"], ["h8"]], rule="freestyle", top_k=3)
    renju = client.predict(gomoku_position(ARGS["moves"], rule="renju"), top_k=5)
    move = client.genmove(ARGS["moves"], max_visits=16, reuse_tree=False)
    reports = list(client.analyze(ARGS["moves"], max_visits=32, report_every_visits=16,
                                  reuse_tree=False))
    try:
        client.predict(["h8", "h8"])
        occupied = "answered"
    except grpc.RpcError as exc:
        occupied = exc.code().name
    try:
        client.predict(["z99"])
        bad_name = "sent"
    except CoordinateError as exc:
        bad_name = str(exc)
    import time
    operation = client.start_infer_sequence(["h8", "i9"], ["h9"], iterations=5, restarts=1,
                                            seed=1)
    polled = client.get_infer_sequence(operation.operation_id)
    for _ in range(600):
        if polled.state != search_pb2.OPERATION_STATE_RUNNING:
            break
        time.sleep(0.1)
        polled = client.get_infer_sequence(operation.operation_id)
    after_cancel = client.cancel_infer_sequence(operation.operation_id)
print(json.dumps({
    "operation": [search_pb2.OperationState.Name(polled.state),
                  [m.name for m in polled.result.moves], polled.steps_done,
                  search_pb2.OperationState.Name(after_cancel.state)],
    "top": [[m.name, m.probability] for m in reply.top_moves],
    "policy_len": len(reply.policy), "model": reply.model_name, "to_move": reply.to_move,
    "many": [[m.name for m in r.top_moves] for r in many.results],
    "renju_top": [m.name for m in renju.top_moves],
    "occupied": occupied, "bad_name": bad_name,
    "genmove": [move.name, move.total_visits, move.model_name],
    "analyze": [[r.final, r.total_visits] for r in reports],
}))
"""


@pytest.mark.integration
def test_a_fresh_venv_calls_predict_on_the_running_service(client_python: Path, service: str,
                                                           tmp_path: Path) -> None:
    """The venv's client against the search service over Triton answers as the platform's own
    client does, position by position."""
    moves = ["h8", "h9", "i8"]
    out = run_client(client_python, PREDICT_SCRIPT, tmp_path, target=service, moves=moves)
    with SearchClient(service) as platform_client:
        expected = platform_client.predict(moves, top_k=5)
        expected_one = platform_client.predict(["h8"], top_k=3)
    assert [name for name, _ in out["top"]] == [m.name for m in expected.top_moves]
    assert [p for _, p in out["top"]] == pytest.approx(
        [m.probability for m in expected.top_moves], abs=1e-6)
    assert out["policy_len"] == 225 and out["model"] == expected.model_name
    assert out["to_move"] == expected.to_move  # white, after three moves
    assert out["many"] == [[m.name for m in expected.top_moves][:3],
                           [m.name for m in expected_one.top_moves]]
    assert len(out["renju_top"]) == 5
    assert out["occupied"] == "INVALID_ARGUMENT"
    name, visits, model = out["genmove"]  # a searched move: a free point, the budget spent
    assert name not in moves and client_coords.parse_point(name, 15) and visits >= 16
    assert model == expected.model_name
    assert out["analyze"][-1][0] and out["analyze"][-1][1] >= 32
    assert not any(final for final, _ in out["analyze"][:-1])
    assert "'z99'" in out["bad_name"]
    # an InferSequence operation: started, polled to its end, then left as it ended
    state, moves_inferred, steps, after_cancel = out["operation"]
    assert state == "OPERATION_STATE_DONE" and after_cancel == "OPERATION_STATE_DONE"
    assert sorted(moves_inferred) == ["h8", "h9", "i9"] and steps == 5


class _Unavailable(grpc.GenericRpcHandler):
    """Answers every Predict UNAVAILABLE and counts the attempts: what a client's retry policy
    does is seen from the server side."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        if not details.method.endswith("/Predict"):
            return None

        def refuse(request: bytes, context: grpc.ServicerContext) -> None:
            with self._lock:
                self.calls += 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "refused by the test")

        return grpc.unary_unary_rpc_method_handler(refuse)


@pytest.fixture
def unavailable_server() -> Iterator[tuple[_Unavailable, int]]:
    handler = _Unavailable()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield handler, port
    server.stop(0).wait()


SECURE_SCRIPT = """
import grpc
from movepred_client import SearchClient
def code(**options):
    try:
        with SearchClient(ARGS["target"], **options) as client:
            return client.predict(["h8"], top_k=2).model_name
    except grpc.RpcError as exc:
        return exc.code().name
tls = {"tls_ca": ARGS["ca"], "tls_server_name": "localhost"}
print(json.dumps({
    "tls_token_file": code(token_file=ARGS["token_file"], **tls),
    "tls_token": code(token=ARGS["token"], **tls),
    "tls_no_token": code(**tls),
    "tls_wrong_token": code(token="wrong", **tls),
    "plaintext": code(token=ARGS["token"]),
}))
"""

RETRY_SCRIPT = """
import grpc
from movepred_client import SearchClient
with SearchClient(ARGS["target"], retries=ARGS["retries"]) as client:
    try:
        client.predict(["h8"], timeout=20)
        print(json.dumps({"code": "OK"}))
    except grpc.RpcError as exc:
        print(json.dumps({"code": exc.code().name}))
"""


@pytest.mark.integration
def test_a_fresh_venv_client_speaks_tls_with_a_token(client_python: Path, tmp_path: Path
                                                     ) -> None:
    pki = auth.generate_pki(tmp_path / "pki", ("localhost", "127.0.0.1"))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    secure = build_service(UniformEvaluator(), tls=auth.ServerTLS(pki.server_cert,
                                                                  pki.server_key),
                           token=TOKEN).start()
    try:
        out = run_client(client_python, SECURE_SCRIPT, tmp_path,
                         target=f"127.0.0.1:{secure.port}", ca=str(pki.ca_cert),
                         token_file=str(token_file), token=TOKEN)
    finally:
        secure.stop()
    assert out["tls_token_file"] == "uniform" and out["tls_token"] == "uniform"
    assert out["tls_no_token"] == "UNAUTHENTICATED"
    assert out["tls_wrong_token"] == "UNAUTHENTICATED"
    assert out["plaintext"] == "UNAVAILABLE"  # no TLS handshake, no answer


@pytest.mark.integration
def test_a_fresh_venv_client_retries_unavailable(client_python: Path, unavailable_server,
                                                 tmp_path: Path) -> None:
    handler, port = unavailable_server
    target = f"127.0.0.1:{port}"
    assert run_client(client_python, RETRY_SCRIPT, tmp_path, target=target,
                      retries=0) == {"code": "UNAVAILABLE"}
    assert handler.calls == 1
    assert run_client(client_python, RETRY_SCRIPT, tmp_path, target=target,
                      retries=2) == {"code": "UNAVAILABLE"}
    assert handler.calls == 1 + 3  # the first attempt and two retries
