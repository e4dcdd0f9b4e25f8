"""Shared fixtures: paths to ../shared data and a `.rif` built from the real RenjuNet games.

RenjuNet-derived games are never copied into the repository (their licence forbids online
use); tests build fixtures from ../shared at run time and skip clearly when it is absent.
"""

from __future__ import annotations

import atexit
import csv
import functools
import importlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

# The suite's Prefect is its own, never the developer's: a fresh Prefect home and no API or
# profile of theirs (flows run on a temporary local server, or the session's test harness),
# for every test and every process a test starts. Set before Prefect is first imported.
for _variable in ("PREFECT_API_URL", "PREFECT_API_KEY", "PREFECT_PROFILE",
                  "PREFECT_PROFILES_PATH"):
    os.environ.pop(_variable, None)
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="movepred-tests-prefect-")
atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], ignore_errors=True)

import flows  # noqa: E402, F401  (sets Prefect defaults before anything imports Prefect)
from services.coords import parse_point  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
RENJUNET_TSV = SHARED_DATA / "renjunet" / "renjunet-derived-games-dev.tsv"
SAMPLE_RIF = ROOT / "data" / "sample" / "selfplay.rif"


@dataclass(frozen=True)
class TsvGame:
    game_id: str
    moves: tuple[int, ...]
    bresult: float
    black: str
    white: str
    opening: str
    rule: str = "RIF"


def split_rows(dataset_dir: Path, split: str = "train") -> list[tuple[bytes, int]]:
    """(board bytes, move) of every row of one split, read straight from the shards the
    manifest lists: the reference the loaders' output is checked against."""
    manifest = json.loads((dataset_dir / "manifest.json").read_text())
    rows = []
    for entry in manifest["files"]:
        if entry["split"] == split:
            t = pq.read_table(dataset_dir / entry["path"], columns=["board", "move"])
            rows += zip(t["board"].to_pylist(), t["move"].to_pylist(), strict=True)
    return rows


def renjunet_games(limit: int | None = None) -> list[TsvGame]:
    """The real RenjuNet-derived games from ../shared, or skip the test if absent."""
    if not RENJUNET_TSV.exists():
        pytest.skip(f"real RenjuNet games not found at {RENJUNET_TSV} (../shared absent)")
    games = []
    with RENJUNET_TSV.open(encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            moves = []
            for token in row["moves"].split():
                x, y = parse_point(token, 15)
                moves.append(y * 15 + x)
            games.append(TsvGame(row["game_no"], tuple(moves), float(row["bresult"]),
                                 row["black_first_name"], row["white_first_name"], row["opening"]))
            if limit and len(games) >= limit:
                break
    return games


@pytest.fixture(scope="session")
def renjunet_rif(tmp_path_factory) -> Path:
    """A `.rif` file holding every real game of the dev TSV."""
    from services.records.rif_writer import write_rif

    path = tmp_path_factory.mktemp("renjunet") / "renjunet-dev.rif"
    return write_rif(renjunet_games(), path)


@pytest.fixture(scope="session")
def prefect_harness():
    """Prefect's test harness: a throwaway API server and database for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


# ---------------------------------------------------------------------------- test tiers
# Every test is `unit` or `integration`; `make test-fast` runs `-m unit`, `make test` both.
# A test is integration when it needs a Triton server, a Prefect flow run, a service in a
# subprocess, GNU Go, a browser or the data in ../shared. This is decided from what the test
# uses, so that a new test lands in its tier without a decision: the fixtures in its closure,
# and the names its function and its fixtures (and the test-suite helpers they call) refer to.
# Where neither shows it, mark the test `@pytest.mark.integration`, as also the few tests too
# heavy for a quick unit run (training runs of several seconds). A unit test that starts
# Triton, a Prefect flow or a Python service anyway fails with a message saying so.

SHARED_ROOT = ROOT.parent / "shared"
TESTS_DIR = ROOT / "tests"

# fixtures that start Triton or Prefect or read ../shared
INTEGRATION_FIXTURES = frozenset({"triton_server", "prefect_harness", "renjunet_rif"})

# (module, name) of what a test needs Triton, Prefect's server or GNU Go for
INTEGRATION_NAMES = {
    ("services.triton.launcher", "TritonServer"): "starts Triton",
    ("services.triton.installation", "find_tritonserver"): "needs the tritonserver binary",
    ("prefect.testing.utilities", "prefect_test_harness"): "starts a Prefect server",
    ("services.match.gtp_process", "find_gnugo"): "plays GNU Go",
    ("torch.multiprocessing.spawn", "spawn"): "spawns a process group",
    ("tests.service_pipe", "ServicePipe"): "starts a project module in a subprocess",
}


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


PROJECT_PACKAGES = ("tests.", "services.", "flows.", "benchmarks.")


def _project_module(name: str) -> types.ModuleType | None:
    """The module called `name`, imported now if it is one of the project's (a test's local
    `from tests.triton_fixtures import ...` must classify it whether or not another collected
    file imported that module first); None for any other name."""
    if name in sys.modules:
        return sys.modules[name]
    if not name.startswith(PROJECT_PACKAGES):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _referenced(func: types.FunctionType) -> Iterator[object]:
    """The objects `func` (nested functions included) names: its globals, the attributes it
    names of the modules it names (`mp.spawn`), and what it imports inside its body
    (`from m import x` leaves both `m` and `x` among the code's names)."""
    names = [name for code in _code_objects(func.__code__) for name in code.co_names]
    modules = [m for m in map(_project_module, names) if m is not None]
    for name in names:
        if name in func.__globals__:
            value = func.__globals__[name]
            yield value
            if isinstance(value, types.ModuleType):
                modules.append(value)
    for module in modules:
        for name in names:
            if name in vars(module):
                yield vars(module)[name]


SUBPROCESS_CALLS = frozenset({"Popen", "run", "check_output", "check_call", "call"})
SERVICE_PACKAGES = ("services.", "flows.", "torch.distributed.")


def _python_module_started(func: types.FunctionType) -> str | None:
    """The module `func` starts as `python -m module` through `subprocess`, not for `--help`:
    a service (or a process group) in a subprocess."""
    for code in _code_objects(func.__code__):
        consts = {c for c in code.co_consts if isinstance(c, str)}
        if ("-m" in consts and "--help" not in consts and "subprocess" in code.co_names
                and SUBPROCESS_CALLS.intersection(code.co_names)):
            started = sorted(c for c in consts if c.startswith(SERVICE_PACKAGES))
            if started:
                return started[0]
    return None


def _in_tests(obj: object) -> bool:
    """Whether `obj` (a function or class) is defined in a module of the test suite."""
    try:
        path = os.path.normpath(inspect.getfile(obj))  # type: ignore[arg-type]
    except TypeError:
        return False
    return path.startswith(f"{TESTS_DIR}{os.sep}")


def _under_shared(value: object) -> bool:
    return isinstance(value, Path) and Path(os.path.normpath(value)).is_relative_to(SHARED_ROOT)


_IN_PROGRESS: set[types.FunctionType] = set()


@functools.cache
def _function_reason(func: types.FunctionType) -> str | None:
    """`integration_reason` of one function (memoised: fixtures and helpers recur across
    hundreds of tests; a helper met again inside its own call chain adds nothing)."""
    started = _python_module_started(func)
    if started:
        return f"starts `python -m {started}` ({func.__qualname__})"
    _IN_PROGRESS.add(func)
    try:
        for obj in _referenced(func):
            values = obj if isinstance(obj, tuple | list | frozenset) else (obj,)
            shared = next((v for v in values if _under_shared(v)), None)
            if shared is not None:
                return f"reads ../shared ({func.__qualname__} names {shared})"
            # a class is what it inherits too (a test's `GtpPipe(ServicePipe)`)
            classes = obj.__mro__ if isinstance(obj, type) else (obj,)
            for key in ((getattr(c, "__module__", None), getattr(c, "__qualname__", None))
                        for c in classes):
                if key in INTEGRATION_NAMES:
                    return f"{INTEGRATION_NAMES[key]} ({func.__qualname__} names {key[1]})"
            if isinstance(obj, type | types.FunctionType) and _in_tests(obj):
                members = vars(obj).values() if isinstance(obj, type) else (obj,)
                reason = integration_reason(members)
                if reason:
                    return reason
        return None
    finally:
        _IN_PROGRESS.discard(func)


def integration_reason(functions: Iterable[object]) -> str | None:
    """Why code that runs `functions` is an integration test, or None: it names a path under
    ../shared, Triton's server or binary, Prefect's test server, GNU Go or a process group, or
    starts a project module in a subprocess, itself or through a function or class of the test
    suite that it names. (Naming a Prefect flow is not enough: tests read flows' parameters
    without running them; running one trips the guard below.)"""
    for func in functions:
        func = inspect.unwrap(func) if callable(func) else func
        if isinstance(func, types.FunctionType) and func not in _IN_PROGRESS:
            reason = _function_reason(func)
            if reason:
                return reason
    return None


def item_integration_reason(item: pytest.Item) -> str | None:
    """Why the test `item` is an integration test, or None when it is a unit test."""
    if item.get_closest_marker("integration"):
        return "marked integration"
    used = INTEGRATION_FIXTURES.intersection(item.fixturenames)
    if used:
        return f"uses the fixture {sorted(used)[0]}"
    fixtures = [fixturedef.func
                for defs in item._fixtureinfo.name2fixturedefs.values()  # pytest's own record
                for fixturedef in defs if _in_tests(fixturedef.func)]
    return integration_reason([getattr(item, "function", None), *fixtures])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test `unit` or `integration(why=...)`."""
    for item in items:
        if item.get_closest_marker("unit"):
            raise pytest.UsageError(f"{item.nodeid}: `unit` is given by tests/conftest.py, "
                                    "not by hand; mark a test integration or nothing")
        reason = item_integration_reason(item)
        item.add_marker(pytest.mark.integration(why=reason) if reason else pytest.mark.unit)


class UnitTierViolation(AssertionError):
    """A test classified unit reached for something only integration tests may use."""


def _tripwire(what: str) -> Callable:
    def refuse(*args, **kwargs):
        raise UnitTierViolation(
            f"a unit test {what}: mark it @pytest.mark.integration (tests/conftest.py)")
    return refuse


def _is_python_service(args: object) -> bool:
    """`python -m package.module ...` other than `--help`: a service run as a subprocess."""
    argv = [str(a) for a in args] if isinstance(args, list | tuple) else str(args).split()
    return (bool(argv) and Path(argv[0]).name.startswith("python") and "-m" in argv
            and "--help" not in argv)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Around a unit test (its fixtures included): starting Triton, running a Prefect flow or
    starting a Python module in a subprocess fails, so a misclassified test shows itself."""
    if not item.get_closest_marker("unit"):
        yield
        return
    import prefect.flows

    from services.triton import installation as triton_installation
    from services.triton.launcher import TritonServer

    popen_init = subprocess.Popen.__init__

    def guarded_popen(self, args, *rest, **kwargs):
        if _is_python_service(args):
            _tripwire(f"starts a service in a subprocess ({args})")()
        popen_init(self, args, *rest, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(TritonServer, "start", _tripwire("starts Triton"))
    patch.setattr(triton_installation, "find_tritonserver",
                  _tripwire("looks for the tritonserver binary"))
    if "tests.triton_fixtures" in sys.modules:
        patch.setattr(sys.modules["tests.triton_fixtures"], "find_tritonserver",
                      _tripwire("looks for the tritonserver binary"))
    patch.setattr(prefect.flows.Flow, "__call__", _tripwire("runs a Prefect flow"))
    patch.setattr(subprocess.Popen, "__init__", guarded_popen)
    try:
        yield
    finally:
        patch.undo()
