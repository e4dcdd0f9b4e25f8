"""Run a real Triton Inference Server (the ``tritonserver`` binary shipped in nvidia-pytriton).

The pytriton wheel carries the server, the python backend library and one python stub per Python
version, but no stub inside ``backends/python``. `prepare_backend_dir` assembles a backend folder
the project owns (``<repo>/.triton/backends/python/``, gitignored) and `TritonServer` starts the
server on it with the environment the stub needs:

* ``LD_LIBRARY_PATH`` holds ``<site-packages>/nvidia_pytriton.libs`` and the running Python's
  ``LIBDIR`` (the stub links ``libpython3.X.so``; Python must be built with
  ``--enable-shared``). Without them the server hangs not-ready instead of exiting, so start-up
  is polled with a hard timeout *and* a liveness check, and failures carry the server log tail.
* the venv's ``bin`` comes first on ``PATH`` so the embedded interpreter finds the venv (and its
  numpy/torch).

What serves is decided here, not by Triton's ``latest`` policy: the server starts in explicit
mode with no model, then each model (by default every folder with a ``config.pbtxt``) is loaded
through the repository API with its config pinned to one version (``version_policy: specific``):
the rollout record's ``current``, else its ``previous``, else the newest published version
(`version_candidates`). A version whose files fail `services.triton.rollout.check_version_files`
(truncated or corrupt ``model.pt``, sha256 mismatch) or that Triton refuses is skipped, logged and
listed in `TritonServer.skipped`, and the next candidate is tried, so one bad folder never stops
the server nor takes another model down. A model with nothing published is skipped with the
command to run; the server starts anyway and ``make train`` loads what it publishes.

The launcher never reports a server it did not start: fixed ports must be free before the
spawn, readiness only counts while its own child runs, and each launcher keeps
``<triton home>/run/tritonserver-<grpc port>.pid`` (pid, process group, launcher pid, ports,
repository) while its server runs. A server whose launcher was killed (an orphan) holding the
ports is named with the command that stops it (``kill -- -<pgid>``), or stopped first with
``--replace-orphan``; pid files of dead servers are removed silently.

Triton's Prometheus metrics (``nv_inference_*``, ``nv_cpu_*``; ``nv_gpu_*`` on a GPU; and the
latency summaries ``nv_inference_request_summary_us`` and friends, quantiles 0.5/0.9/0.95/0.99)
are on, on ``http://127.0.0.1:<metrics port>/metrics`` (loopback whatever `host` is: the
endpoint has no authentication; `metrics_url`). The port is picked free unless given
(``--metrics-port``; ``make triton`` uses 8002, Triton's own default, which
``deploy/prometheus/prometheus.yml`` scrapes).

CLI (foreground until Ctrl-C)::

    python -m services.triton.server --repository model_repository \
        [--grpc-port 8001 --http-port 8000] [--model gomoku_policy] [--replace-orphan]
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import importlib.util
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from services.atomic_files import atomic_path, atomic_write_text
from services.processes import alive, cmdline, proc_start_ticks
from services.settings import MAX_PORT, bounded

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
# Project-owned, gitignored home of the assembled backend dir ($MOVEPRED_TRITON_HOME overrides).
TRITON_HOME_ENV = "MOVEPRED_TRITON_HOME"
DEFAULT_TRITON_HOME = REPO_ROOT / ".triton"
TRITONSERVER_ENV = "MOVEPRED_TRITONSERVER"

_PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
_STUB_NAME = "triton_python_backend_stub"
_LOG_TAIL_LINES = 25
# What to run when a model has nothing to serve.
NEXT_STEP = ("run `make ingest && make train` (or publish with services.repository.publish and "
             "`movepred rollout`)")


class TritonServerError(RuntimeError):
    """The Triton server could not be prepared, started or made ready."""


class TritonLoadError(TritonServerError):
    """Triton refused to load one model version (its reason is the message)."""


def find_tritonserver() -> Path:
    """Path of the ``tritonserver`` binary.

    Order: ``$MOVEPRED_TRITONSERVER``, the binary inside the installed nvidia-pytriton wheel,
    ``tritonserver`` on ``PATH``. Raises FileNotFoundError when none exists.
    """
    override = os.environ.get(TRITONSERVER_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise FileNotFoundError(f"${TRITONSERVER_ENV}={override} is not a file")
        return path
    spec = importlib.util.find_spec("pytriton")  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "tritonserver" / "bin" / "tritonserver"
            if candidate.is_file():
                return candidate
    which = shutil.which("tritonserver")
    if which:
        return Path(which)
    raise FileNotFoundError(
        "tritonserver binary not found: install nvidia-pytriton (it ships the server) or set "
        f"${TRITONSERVER_ENV} to the binary"
    )


def _tritonserver_home(binary: Path) -> Path:
    """The folder holding ``bin/``, ``backends/`` and ``python_backend_stubs/``."""
    return binary.resolve().parent.parent


def _python_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _copy_if_changed(src: Path, dst: Path) -> None:
    if dst.is_file():
        s, d = src.stat(), dst.stat()
        if s.st_size == d.st_size and s.st_mtime_ns == d.st_mtime_ns:
            return
    with atomic_path(dst) as tmp:  # atomic: a running server keeps its old inode
        shutil.copy2(src, tmp)  # keeps mode (the stub must stay executable) and mtime


def prepare_backend_dir(root: Path, tritonserver: Path | None = None) -> Path:
    """Assemble ``<root>/backends/python/`` and return ``<root>/backends``.

    Copies ``libtriton_python.so`` and ``triton_python_backend_utils.py`` from the server
    installation and the python stub built for the running interpreter (``X.Y``). Safe to call
    repeatedly and from concurrent processes; unchanged files are not copied again.
    """
    home = _tritonserver_home(tritonserver or find_tritonserver())
    src_backend = home / "backends" / "python"
    stub_root = home / "python_backend_stubs"
    stub = stub_root / _python_tag() / _STUB_NAME
    if not stub.is_file():
        available = sorted(p.name for p in stub_root.iterdir()) if stub_root.is_dir() else []
        raise TritonServerError(
            f"no python backend stub for Python {_python_tag()} under {stub_root} "
            f"(available: {available or 'none'})"
        )
    missing = [name for name in _PYTHON_BACKEND_FILES if not (src_backend / name).is_file()]
    if missing:
        raise TritonServerError(f"python backend files {missing} missing in {src_backend}")

    backends = Path(root) / "backends"
    target = backends / "python"
    target.mkdir(parents=True, exist_ok=True)
    for name in _PYTHON_BACKEND_FILES:
        _copy_if_changed(src_backend / name, target / name)
    _copy_if_changed(stub, target / _STUB_NAME)
    return backends


def _python_libdir() -> str:
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        raise TritonServerError(
            f"Python {sys.version.split()[0]} at {sys.executable} was built without "
            "--enable-shared (Py_ENABLE_SHARED=0): Triton's python backend stub needs "
            f"libpython{_python_tag()}.so. Use a shared-library build (pyenv: "
            "PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install ...)."
        )
    libdir = sysconfig.get_config_var("LIBDIR")
    if not libdir or not Path(libdir).is_dir():
        raise TritonServerError(f"Python LIBDIR {libdir!r} does not exist")
    return str(libdir)


@functools.cache
def stub_numpy_version(python: str = sys.executable) -> str | None:
    """The numpy version the python backend stub will import, or None if it has none.

    The stub embeds the interpreter of the environment first on PATH (this one, see
    `server_environment`) and does not read PYTHONPATH, so the question goes to this interpreter
    in isolated mode (-I), which sees what the stub sees. Asked once per interpreter: a server
    start (tests start many) should not pay a Python start-up and a numpy import each time."""
    probe = subprocess.run([python, "-I", "-c", "import numpy; print(numpy.__version__)"],
                           capture_output=True, text=True, timeout=120)
    return probe.stdout.strip() or None if probe.returncode == 0 else None


def check_stub_numpy(version: str | None) -> None:
    """Refuse numpy >= 2 for the stub: the pybind11 inside nvidia-pytriton 0.7.0's stub reads
    numpy 1 array descriptors, and with numpy 2 every output tensor it builds is empty (seen on
    an H100 with numpy 2.5.2: clients got 0 logits per board, no error)."""
    if version and int(version.split(".")[0]) >= 2:
        raise TritonServerError(
            f"the python backend stub would run with numpy {version} ({sys.executable}); its "
            "outputs are empty with numpy >= 2. Run Triton from an environment with numpy<2 "
            "(requirements.txt pins 1.26.4).")


def server_environment(tritonserver: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the server process (library path for the stub, venv first on PATH)."""
    env = dict(os.environ if base is None else base)
    libs = [_python_libdir()]
    site_packages = tritonserver.resolve().parents[3]
    pytriton_libs = site_packages / "nvidia_pytriton.libs"
    if pytriton_libs.is_dir():
        libs.insert(0, str(pytriton_libs))
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, *([old] if old else [])])
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", os.defpath)])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0") else host


def _tail(path: Path | None, lines: int = _LOG_TAIL_LINES) -> str:
    if path is None:
        return "(no log)"
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(log {path} unreadable: {exc})"
    # Drop the ASCII tables Triton prints at start-up; keep error lines even if they are older.
    kept = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(("|", "+"))]
    tail = kept[-lines:]
    errors = [ln for ln in kept[:-lines] if _is_error_line(ln)][-10:]
    if not tail:
        return "(log is empty)"
    head = ["(earlier errors)", *errors, "(last lines)"] if errors else []
    return "\n".join([*head, *tail])


def _is_error_line(line: str) -> bool:
    s = line.lstrip()
    return (len(s) > 1 and s[0] == "E" and s[1].isdigit()) or "error" in s.lower()


# --------------------------------------------------------------------------- what to serve


@dataclass(frozen=True)
class SkippedVersion:
    """A model version the launcher did not serve, or a model it served nothing of.

    `version` is None when the model had no version to try at all (nothing published)."""

    model: str
    version: int | None
    reason: str
    folder: Path | None = None

    def __str__(self) -> str:
        if self.version is None:
            return f"{self.model}: {self.reason}"
        return f"{self.model} v{self.version} ({self.folder}): {self.reason}"


def discover_models(repository: Path) -> tuple[str, ...]:
    """Every model folder of `repository` that has a ``config.pbtxt``, sorted by name."""
    repository = Path(repository)
    if not repository.is_dir():
        return ()
    return tuple(sorted(
        p.name for p in repository.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / "config.pbtxt").is_file()
    ))


def _refused_versions(history: list[dict[str, Any]]) -> set[int]:
    """Versions whose last outcome in the rollout history is a refusal (never to be served
    as a fallback; a version refused once and rolled out since is not one)."""
    refused: set[int] = set()
    for entry in history:
        if not isinstance(entry, dict):
            continue
        with contextlib.suppress(TypeError, ValueError):
            version = int(entry.get("version"))
            if entry.get("outcome") == "refused":
                refused.add(version)
            elif entry.get("outcome") == "serving":
                refused.discard(version)
    return refused


def version_candidates(repository: Path, model: str) -> list[tuple[int, str]]:
    """The versions of `model` to try, best first, each with why it is a candidate.

    With a rollout record (``rollout.json``): its ``current``, then its ``previous``, then the
    other published versions newest first; never a version the record's history refused last
    (with or without a current). Without a record: the published versions newest first.
    Serving follows what rollout decided, so a version published later but never rolled out
    (or rolled back) does not serve after a restart. An unreadable record is reported and
    treated as none.
    """
    from services.repository.rollout_state import read_state
    from services.repository.versions import list_versions

    newest_first = sorted(list_versions(repository, model), reverse=True)
    try:
        state = read_state(repository, model)
    except ValueError as exc:
        log.warning("%s: %s; serving the newest good version instead", model, exc)
        state = {"current": None, "previous": None, "history": []}
    ordered: dict[int, str] = {}
    for key in ("current", "previous"):
        version = state.get(key)
        if isinstance(version, int) and version not in ordered:
            ordered[version] = f"the rollout record's {key}"
    recorded = bool(ordered)
    # with or without a recorded current: a refused version never serves after a restart
    refused = _refused_versions(state.get("history") or [])
    fallback = ("a published version, the recorded ones failing" if recorded
                else "the newest published version whose files check out")
    for version in newest_first:
        if version not in ordered and version not in refused:
            ordered[version] = fallback
    return list(ordered.items())


def pinned_config_json(config_path: Path, version: int) -> str:
    """The on-disk ``config.pbtxt`` as JSON with ``version_policy: {specific: [version]}``:
    the config override of a repository-API load that serves exactly `version`."""
    from google.protobuf import json_format

    from services.repository.configs import parse_config

    config = parse_config(config_path)
    config.version_policy.Clear()
    config.version_policy.specific.versions.append(int(version))
    return json_format.MessageToJson(config, preserving_proto_field_name=True)


def _check_files(repository: Path, model: str, version: int) -> None:
    """Raise ValueError with the reason when a version folder cannot be served."""
    from services.repository.version_files import check_version_files

    check_version_files(repository, model, version)


# --------------------------------------------------------------------------- metrics

METRICS_HOST = "127.0.0.1"  # Triton's metrics endpoint has no authentication: loopback only
# Triton's latency summaries (nv_inference_request_summary_us{quantile=...} and the queue and
# compute ones), quantiles 0.5/0.9/0.95/0.99 over its sliding window: the dashboard's latency
# quantiles on the Triton side
METRICS_CONFIG = ("summary_latencies=true",)


def metrics_flags(host: str, port: int | None) -> list[str]:
    """tritonserver's flags turning its Prometheus metrics on, bound to `host`:`port`."""
    return ["--allow-metrics=true", f"--metrics-address={host}", f"--metrics-port={port}",
            *(f"--metrics-config={setting}" for setting in METRICS_CONFIG)]


# --------------------------------------------------------------------------- processes, pid files


def port_in_use(host: str, port: int) -> bool:
    """True when `port` on `host` cannot be bound because something holds it.

    ``SO_REUSEADDR`` as servers set it: connections in TIME_WAIT do not count, a listener does."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def _is_tritonserver(pid: int) -> bool:
    argv = cmdline(pid)
    return bool(argv) and os.path.basename(argv[0]) == "tritonserver" and alive(pid)


def pid_dir() -> Path:
    """Where launchers keep their pid files: ``<triton home>/run``."""
    return Path(os.environ.get(TRITON_HOME_ENV) or DEFAULT_TRITON_HOME) / "run"


@dataclass(frozen=True)
class PidRecord:
    """One launcher's ``tritonserver-<grpc port>.pid``: who runs which server on which ports."""

    path: Path
    pid: int
    pgid: int
    launcher_pid: int
    ports: tuple[int, ...]
    host: str
    repository: str

    @property
    def server_alive(self) -> bool:
        return _is_tritonserver(self.pid)

    @property
    def orphaned(self) -> bool:
        """The server runs but the launcher that started it is gone (killed)."""
        return self.server_alive and not alive(self.launcher_pid)

    @property
    def stop_command(self) -> str:
        return f"kill -- -{self.pgid}"

    def describe(self) -> str:
        owner = ("an orphaned tritonserver (its launcher, pid "
                 f"{self.launcher_pid}, is gone)" if self.orphaned else
                 f"tritonserver pid {self.pid} of launcher pid {self.launcher_pid}")
        return (f"{owner}: pid {self.pid}, process group {self.pgid}, ports "
                f"{', '.join(map(str, self.ports))}, repository {self.repository} "
                f"(pid file {self.path})")


def read_pid_records(directory: Path | None = None) -> list[PidRecord]:
    """The launchers' pid files under `directory` (default `pid_dir`); unreadable ones skipped."""
    directory = pid_dir() if directory is None else Path(directory)
    records = []
    for path in sorted(directory.glob("tritonserver-*.pid")) if directory.is_dir() else []:
        try:
            data = json.loads(path.read_text())
            records.append(PidRecord(
                path, int(data["pid"]), int(data["pgid"]), int(data["launcher_pid"]),
                tuple(int(p) for p in data["ports"]), str(data.get("host", "")),
                str(data.get("repository", ""))))
        except (OSError, ValueError, KeyError, TypeError):
            log.debug("ignoring unreadable pid file %s", path)
    return records


def stop_process_group(pgid: int, pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM a server's process group, SIGKILL it after `grace_s`; waits until `pid` is gone."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + wait_s
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not alive(pid):
            return
    raise TritonServerError(f"tritonserver pid {pid} (group {pgid}) does not stop")


def _kill_group(proc: subprocess.Popen, log_file: IO[bytes] | None,
                pid_file: Path | None) -> None:
    """Last-resort cleanup (garbage collection / interpreter exit): kill the server's group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    if log_file is not None:
        log_file.close()
    if pid_file is not None:
        with contextlib.suppress(OSError):
            pid_file.unlink()


READY_AFTER_LOAD_S = 10.0  # how long a loaded version may take to answer ready


def _http_ok(opener: urllib.request.OpenerDirector, url: str) -> bool:
    try:
        with opener.open(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


class TritonServer:
    """A ``tritonserver`` child process in explicit model-control mode, models pinned.

    ``with TritonServer(Path("model_repository")) as server: PolicyClient(server.grpc_url)``

    `models` None serves every model folder with a ``config.pbtxt``; a model with nothing
    servable is skipped (`skipped`) and the server starts anyway. Named models that have a
    version whose files check out must load, else `start` fails. `served` maps each loaded
    model to its version. Ports left as None are picked free on loopback; fixed ports must be
    free (an orphaned server of a killed launcher on them is reported, or stopped first with
    `replace_orphan`). The server and its python stubs run in their own process group, which
    `stop` (or, as a last resort, interpreter exit) tears down.
    """

    def __init__(
        self,
        repository: Path,
        models: Sequence[str] | None = None,
        host: str = "127.0.0.1",
        http_port: int | None = None,
        grpc_port: int | None = None,
        log_path: Path | None = None,
        startup_timeout_s: float = 60.0,
        replace_orphan: bool = False,
        metrics_port: int | None = None,
        metrics_host: str = METRICS_HOST,
    ) -> None:
        self.repository = Path(repository).resolve()
        self.requested_models = None if models is None else tuple(models)
        self.models: tuple[str, ...] = self.requested_models or ()
        self.host = host
        self._fixed_http_port = http_port
        self._fixed_grpc_port = grpc_port
        self.http_port = http_port
        self.grpc_port = grpc_port
        self._fixed_metrics_port = metrics_port
        self.metrics_port: int | None = metrics_port
        self.metrics_host = metrics_host
        self._requested_log_path = Path(log_path) if log_path is not None else None
        self.log_path: Path | None = self._requested_log_path
        self.startup_timeout_s = float(startup_timeout_s)
        self.replace_orphan = replace_orphan
        self.startup_time_s: float | None = None
        self.tritonserver: Path | None = None
        self.backend_dir: Path | None = None
        self.pid_file: Path | None = None
        self.served: dict[str, int] = {}  # model -> the version loaded
        self.skipped: list[SkippedVersion] = []
        self._proc: subprocess.Popen | None = None
        self._log_file: IO[bytes] | None = None
        self._finalizer: weakref.finalize | None = None
        self._started_at = 0.0

    # ------------------------------------------------------------------ properties
    @property
    def grpc_url(self) -> str:
        if self.grpc_port is None:
            raise TritonServerError("server not started: no gRPC port yet")
        return f"{_connect_host(self.host)}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        if self.http_port is None:
            raise TritonServerError("server not started: no HTTP port yet")
        return f"{_connect_host(self.host)}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        """Triton's Prometheus endpoint (loopback by default)."""
        if self.metrics_port is None:
            raise TritonServerError("server not started: no metrics port yet")
        return f"http://{_connect_host(self.metrics_host)}:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ------------------------------------------------------------------ lifecycle
    def _check_repository(self) -> None:
        if not self.repository.is_dir():
            raise TritonServerError(f"model repository {self.repository} is not a directory")
        for model in self.requested_models or ():
            config = self.repository / model / "config.pbtxt"
            if not config.is_file():
                raise TritonServerError(
                    f"model {model!r}: {config} missing (the server runs with "
                    "--disable-auto-complete-config, every model needs a complete config)"
                )

    def _command(self) -> list[str]:
        assert self.tritonserver is not None and self.backend_dir is not None
        return [
            str(self.tritonserver),
            f"--model-repository={self.repository}",
            f"--backend-directory={self.backend_dir}",
            # no --load-model: every model is loaded through the repository API, pinned to the
            # version chosen here, so Triton's own `latest` policy never picks what serves
            "--model-control-mode=explicit",
            f"--http-address={self.host}",
            f"--grpc-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            *metrics_flags(self.metrics_host, self.metrics_port),
            "--disable-auto-complete-config",
            "--exit-timeout-secs=5",
            # what serves is asked per model version (`wait_ready`, `load_version`, the search
            # service's health): strict readiness reads not-ready for good once any model was
            # unloaded or failed a load, which every rollout's candidate is
            "--strict-readiness=false",
        ]

    def _pick_ports(self) -> None:
        connect = _connect_host(self.host)
        taken: set[int] = set()

        def pick(fixed: int | None) -> int:
            if fixed is not None:
                taken.add(fixed)
                return fixed
            while True:
                port = free_port(connect)
                if port not in taken:
                    taken.add(port)
                    return port

        self.http_port = pick(self._fixed_http_port)
        self.grpc_port = pick(self._fixed_grpc_port)
        self.metrics_port = pick(self._fixed_metrics_port)

    def _check_ports(self) -> None:
        """Refuse fixed ports somebody holds, naming the holder when it is one of our servers.

        Without this a server answering on the port (an orphan, a second ``make triton``) would
        pass our readiness checks while our own child fails to bind and exits."""
        fixed = [p for p in (self._fixed_grpc_port, self._fixed_http_port,
                             self._fixed_metrics_port) if p is not None]
        for record in read_pid_records():
            if not record.server_alive:
                with contextlib.suppress(OSError):
                    record.path.unlink()  # stale: its server is gone
                log.debug("removed stale pid file %s", record.path)
                continue
            clash = [p for p in fixed if p in record.ports]  # gRPC first
            if not clash:
                if record.orphaned:
                    log.warning("%s still runs; stop it with `%s`", record.describe(),
                                record.stop_command)
                continue
            if record.orphaned and self.replace_orphan:
                log.warning("stopping %s (--replace-orphan)", record.describe())
                stop_process_group(record.pgid, record.pid)
                with contextlib.suppress(OSError):
                    record.path.unlink()
                continue
            hint = (f"; stop it with `{record.stop_command}` or start with --replace-orphan "
                    "(replace_orphan=True)" if record.orphaned else
                    "; stop that launcher first (Ctrl-C) or pick other ports")
            raise TritonServerError(
                f"port {' and '.join(map(str, clash))} on {self.host} is in use by "
                f"{record.describe()}{hint}")
        connect = self.host or "0.0.0.0"
        for name, port, where in (("gRPC", self._fixed_grpc_port, connect),
                                  ("HTTP", self._fixed_http_port, connect),
                                  ("metrics", self._fixed_metrics_port, self.metrics_host)):
            if port is not None and port_in_use(where, port):
                raise TritonServerError(
                    f"{name} port {port} on {self.host} is already in use by another process "
                    f"(see `ss -ltnp 'sport = :{port}'`); stop it or pick another port "
                    "(--grpc-port / --http-port / --metrics-port)")

    def _spawn(self, env: dict[str, str]) -> None:
        self._pick_ports()
        if self._requested_log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"tritonserver-{self.grpc_port}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        else:
            self.log_path = self._requested_log_path
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the server
        self._started_at = time.monotonic()
        self._proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(self.repository),
            start_new_session=True,  # own process group: stubs are torn down with the server
        )
        self.pid_file = self._write_pid_file()
        self._finalizer = weakref.finalize(self, _kill_group, self._proc, self._log_file,
                                           self.pid_file)

    def _write_pid_file(self) -> Path | None:
        """``<triton home>/run/tritonserver-<grpc port>.pid``: lets a later launcher tell an
        orphaned server (this launcher killed) from a stranger on the same ports."""
        assert self._proc is not None
        path = pid_dir() / f"tritonserver-{self.grpc_port}.pid"
        record = {"pid": self._proc.pid, "pgid": self._proc.pid, "launcher_pid": os.getpid(),
                  "start_ticks": proc_start_ticks(self._proc.pid),
                  "ports": [self.grpc_port, self.http_port, self.metrics_port],
                  "host": self.host, "repository": str(self.repository),
                  "metrics_url": self.metrics_url,
                  "log": str(self.log_path), "started_at": time.time()}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(json.dumps(record) + "\n", path)
        except OSError as exc:
            log.warning("cannot write the pid file %s: %s", path, exc)
            return None
        return path

    def start(self) -> TritonServer:
        """Start the server, load each model on its chosen version, return once they are ready.

        Versions whose files fail the check, or that Triton cannot load, are skipped (logged and
        listed in `skipped`) and the next candidate is tried (`version_candidates`)."""
        if self.is_running():
            raise TritonServerError(f"tritonserver already running (pid {self.pid})")
        self._check_repository()
        self.models = (self.requested_models if self.requested_models is not None
                       else discover_models(self.repository))
        self.served, self.skipped = {}, []
        self.tritonserver = find_tritonserver()
        home = Path(os.environ.get(TRITON_HOME_ENV) or DEFAULT_TRITON_HOME)
        self.backend_dir = prepare_backend_dir(home, self.tritonserver)
        check_stub_numpy(stub_numpy_version())
        env = server_environment(self.tritonserver)
        self._check_ports()
        t0 = time.monotonic()
        self._spawn_ready(env)
        try:
            if self._load_models():
                # Triton keeps a version that failed to load listed UNAVAILABLE for good (in
                # its repository index and model readiness): start afresh on the versions
                # that loaded.
                served, self.served = self.served, {}
                log.info("restarting tritonserver without the versions it refused")
                self.stop(grace_s=3.0)
                self._spawn_ready(env)
                deadline = time.monotonic() + self.startup_timeout_s
                for model, version in served.items():
                    self.load_version(model, version,
                                      timeout_s=max(deadline - time.monotonic(), 1.0))
                    self.served[model] = version
            self.wait_ready()
        except BaseException:
            self.stop(grace_s=3.0)
            raise
        self.startup_time_s = time.monotonic() - t0
        return self

    def _spawn_ready(self, env: dict[str, str]) -> None:
        """Spawn the server (no model loaded) and wait until it answers ready."""
        auto_ports = None in (self._fixed_http_port, self._fixed_grpc_port,
                              self._fixed_metrics_port)
        attempts = 3 if auto_ports else 1
        for attempt in range(1, attempts + 1):
            self._spawn(env)
            try:
                self.wait_ready()
                return
            except TritonServerError:
                tail = _tail(self.log_path)
                self.stop(grace_s=3.0)
                # A freshly picked port can be grabbed by someone else before the server binds it.
                if attempt < attempts and "already in use" in tail.lower():
                    continue
                raise

    # ------------------------------------------------------------------ models
    def _load_models(self) -> bool:
        """Load every model on its version, models in parallel (each one's loads in turn);
        True when Triton refused a version on the way."""
        if not self.models:
            return False
        deadline = self._started_at + self.startup_timeout_s
        with ThreadPoolExecutor(max_workers=len(self.models),
                                thread_name_prefix="triton-load") as pool:
            results = list(pool.map(lambda m: self._load_model(m, deadline), self.models))
        refused: set[str] = set()  # models Triton refused a version of
        for model, (version, skipped, triton_refused) in zip(self.models, results, strict=True):
            self.skipped.extend(skipped)
            if version is not None:
                self.served[model] = version
            if triton_refused:
                refused.add(model)
        # a named model with good files must serve: Triton refusing all of them is an error
        failed = [m for m in self.requested_models or () if m in refused and m not in self.served]
        if failed:
            reasons = "; ".join(str(s) for s in self.skipped if s.model in failed)
            raise TritonServerError(
                f"tritonserver could not load {failed} (repository {self.repository}): "
                f"{reasons}. Last lines of {self.log_path}:\n{_tail(self.log_path)}")
        return bool(refused)

    def _load_model(self, model: str, deadline: float
                    ) -> tuple[int | None, list[SkippedVersion], bool]:
        """`_load_model_locked` under the model's rollout lock: a rollout under way (its smoke
        test, its switch, its record) finishes before the record is read, so the launcher
        never loads what a rollout is about to refuse or to replace. A lock still held at the
        start-up deadline (a stuck rollout) is logged, and the model loaded without it."""
        from services.repository.rollout_state import rollout_lock

        if not (self.repository / model).is_dir():
            return self._load_model_locked(model, deadline)
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(rollout_lock(
                    self.repository, model, max(deadline - time.monotonic(), 1.0),
                    on_wait=lambda: log.info("%s: waiting for the rollout under way to finish",
                                             model)))
            except TimeoutError as exc:
                log.warning("%s: %s; loading what its record says now", model, exc)
            except OSError as exc:  # a read-only repository: no rollout can run there either
                log.debug("%s: no rollout lock (%s)", model, exc)
            return self._load_model_locked(model, deadline)

    def _load_model_locked(self, model: str, deadline: float
                           ) -> tuple[int | None, list[SkippedVersion], bool]:
        """(version now serving or None, what was skipped, whether Triton refused a version
        whose files checked out) for one model."""
        skipped: list[SkippedVersion] = []
        candidates = version_candidates(self.repository, model)
        if not candidates:
            skipped.append(SkippedVersion(model, None, f"no version published yet; {NEXT_STEP}"))
            log.warning("%s", skipped[-1])
            return None, skipped, False
        triton_refused = False
        for version, why in candidates:
            folder = self.repository / model / str(version)
            try:
                _check_files(self.repository, model, version)
            except ValueError as exc:
                skipped.append(SkippedVersion(model, version, str(exc), folder))
                log.warning("not serving %s", skipped[-1])
                continue
            try:
                self.load_version(model, version, timeout_s=max(deadline - time.monotonic(), 1.0))
            except TritonLoadError as exc:
                skipped.append(SkippedVersion(model, version, f"Triton refused it: {exc}",
                                              folder))
                log.warning("not serving %s", skipped[-1])
                triton_refused = True
                continue
            log.info("%s v%s loaded (%s)", model, version, why)
            return version, skipped, triton_refused
        skipped.append(SkippedVersion(
            model, None, f"no servable version among {[v for v, _ in candidates]}; {NEXT_STEP}"))
        log.warning("%s", skipped[-1])
        return None, skipped, triton_refused

    def load_version(self, model: str, version: int, timeout_s: float = 60.0) -> None:
        """Load `model` serving exactly `version` (repository API, pinned config override);
        returns once it is ready. Raises TritonLoadError with Triton's reason, TritonServerError
        when our server died."""
        if not self.is_running():
            raise TritonServerError("server not running")
        body = json.dumps({"parameters": {"config": pinned_config_json(
            self.repository / model / "config.pbtxt", version)}}).encode()
        request = urllib.request.Request(
            f"http://{self.http_url}/v2/repository/models/{model}/load", data=body,
            headers={"Content-Type": "application/json"}, method="POST")
        try:
            with _OPENER.open(request, timeout=timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                text = json.loads(text).get("error", text)
            if not self.is_running():
                raise self._exited_error() from exc
            raise TritonLoadError(text.strip() or f"HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError) as exc:
            if not self.is_running():
                raise self._exited_error() from exc
            if isinstance(exc, TimeoutError) or isinstance(
                    getattr(exc, "reason", None), TimeoutError):
                raise self._not_ready_error(self.startup_timeout_s) from exc
            raise TritonServerError(f"loading {model} v{version} failed: {exc}") from exc
        # Triton answered the load: the version is loaded. Its readiness is asked for a few
        # seconds, not once: on a loaded machine one answer can take longer than a probe's
        # timeout, and a single slow answer must not refuse a model that loaded.
        self._await_ready(
            [f"http://{self.http_url}/v2/models/{model}/versions/{version}/ready"],
            READY_AFTER_LOAD_S,
            lambda: TritonLoadError(f"{model} v{version} not ready {READY_AFTER_LOAD_S:g} s "
                                    f"after its load"))

    def _await_ready(self, urls: list[str], timeout_s: float,
                     timed_out: Callable[[], Exception]) -> None:
        """Poll until every url answers ready while our child runs (an answer from another
        process on the port is not ours); `_exited_error` when it exits, `timed_out()` after
        `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.is_running():
                raise self._exited_error()
            if all(_http_ok(_OPENER, url) for url in urls) and self.is_running():
                return
            if time.monotonic() >= deadline:
                raise timed_out()
            time.sleep(0.05)

    def _exited_error(self) -> TritonServerError:
        assert self._proc is not None
        return TritonServerError(
            f"tritonserver exited with code {self._proc.poll()} during start-up "
            f"(repository {self.repository}, models {list(self.models)}). "
            f"Last lines of {self.log_path}:\n{_tail(self.log_path)}")

    def wait_ready(self, timeout_s: float | None = None) -> float:
        """Poll until our server and the models it serves are ready; return seconds since start.

        Readiness only counts while our child runs: an answer from another process on the port
        is not ours. Raises TritonServerError when the process exits or the timeout passes (the
        process may hang not-ready, e.g. when the stub cannot load ``libpython``), with the log
        tail.
        """
        if self._proc is None:
            raise TritonServerError("server not started")
        timeout_s = self.startup_timeout_s if timeout_s is None else timeout_s
        base = f"http://{self.http_url}"
        paths = ["/v2/health/ready",
                 *(f"/v2/models/{m}/versions/{v}/ready" for m, v in self.served.items())]
        self._await_ready([base + p for p in paths], timeout_s,
                          lambda: self._not_ready_error(timeout_s))
        return time.monotonic() - self._started_at

    def _not_ready_error(self, waited_s: float) -> TritonServerError:
        assert self._proc is not None
        return TritonServerError(
            f"tritonserver (pid {self._proc.pid}) still not ready after {waited_s:.1f} s "
            f"(models {list(self.models)}). A server that hangs here usually cannot load "
            "the python stub's libraries (LD_LIBRARY_PATH must contain "
            "nvidia_pytriton.libs and Python's LIBDIR) or a model's initialize() is "
            f"stuck. Last lines of {self.log_path}:\n{_tail(self.log_path)}"
        )

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the server (it drains in-flight requests), SIGKILL its group after `grace_s`.

        Returns the exit code (None if never started). Removes the pid file. Idempotent.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # Stubs left behind by a crashed or killed server share its process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self.pid_file is not None:
            with contextlib.suppress(OSError):
                self.pid_file.unlink()
            self.pid_file = None
        return proc.returncode

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        return _tail(self.log_path, lines)

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return (
            f"TritonServer({self.repository}, models={list(self.models)}, "
            f"grpc={self.grpc_port}, {state})"
        )


def main(argv: Sequence[str] | None = None) -> int:
    from services import logs

    parser = argparse.ArgumentParser(
        prog="python -m services.triton.server",
        description="Run Triton (explicit model control) on a model repository until Ctrl-C.",
    )
    parser.add_argument("--repository", type=Path, default=REPO_ROOT / "model_repository")
    parser.add_argument(
        "--model", action="append", dest="models",
        help="model to load (repeatable; default: every model folder with a config.pbtxt)")
    parser.add_argument("--host", default="127.0.0.1")
    port = bounded(int, 1, MAX_PORT)  # default: a free one
    parser.add_argument("--grpc-port", type=port, default=None)
    parser.add_argument("--http-port", type=port, default=None)
    parser.add_argument("--metrics-port", type=port, default=None,
                        help="Prometheus metrics port, on 127.0.0.1 (default: a free one)")
    parser.add_argument("--log-path", type=Path, default=None, help="tritonserver's own log")
    parser.add_argument("--startup-timeout", type=bounded(float, 1, 3600), default=60.0)
    parser.add_argument(
        "--replace-orphan", action="store_true",
        help="stop an orphaned tritonserver (its launcher was killed) holding the ports first")
    logs.add_arguments(parser)
    args = parser.parse_args(argv)
    logs.configure_from(args)

    server = TritonServer(
        args.repository,
        models=args.models,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        log_path=args.log_path,
        startup_timeout_s=args.startup_timeout,
        replace_orphan=args.replace_orphan,
        metrics_port=args.metrics_port,
    )
    def interrupt_start(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    # SIGTERM while the models load (`movepred stop`, docker stop) must stop the server too:
    # the default action would end this process and leave its tritonserver orphaned
    starting = {sig: signal.signal(sig, interrupt_start) for sig in (signal.SIGINT,
                                                                     signal.SIGTERM)}
    try:
        server.start()
    except (TritonServerError, OSError) as exc:  # OSError: a missing binary, a bad --host
        server.stop(grace_s=3.0)  # whatever had started; idempotent
        log.error("%s", exc)
        return 1
    except KeyboardInterrupt as exc:
        server.stop(grace_s=3.0)  # start() stopped it already; idempotent
        log.info("stopped during start-up (%s)", exc or "SIGINT")
        return 1
    finally:
        for sig, handler in starting.items():
            signal.signal(sig, handler)
    log.info("tritonserver ready in %.2f s (pid %s, process group %s): gRPC %s, HTTP "
             "http://%s, metrics %s, log %s", server.startup_time_s or 0.0, server.pid,
             server.pid, server.grpc_url, server.http_url, server.metrics_url, server.log_path)
    for model, version in server.served.items():
        log.info("serving %s v%s", model, version)
    for skipped in server.skipped:
        log.warning("skipped %s", skipped)
    if not server.served:
        log.warning("no model serves yet: %s; Triton keeps running and `make train` loads the "
                    "version it publishes", NEXT_STEP)
    log.info("Ctrl-C to stop.")
    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        stop_requested.set()

    # Explicit handlers: SIGINT may be inherited as ignored (background job), and SIGTERM
    # (docker stop, systemd) must also take the server down instead of orphaning it.
    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while server.is_running() and not stop_requested.wait(0.5):
            pass
        if not stop_requested.is_set():
            log.error("tritonserver exited; last log lines:\n%s", server.log_tail())
            return server.stop() or 1
        log.info("stopping tritonserver ...")
        code = server.stop()
        log.info("tritonserver stopped (exit code %s)", code)
        return 0
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
