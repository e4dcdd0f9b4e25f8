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

CLI (foreground until Ctrl-C)::

    python -m services.triton.server --repository model_repository \
        [--grpc-port 8001 --http-port 8000]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
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
from collections.abc import Sequence
from pathlib import Path
from typing import IO

REPO_ROOT = Path(__file__).resolve().parents[2]
# Project-owned, gitignored home of the assembled backend dir ($MOVEPRED_TRITON_HOME overrides).
TRITON_HOME_ENV = "MOVEPRED_TRITON_HOME"
DEFAULT_TRITON_HOME = REPO_ROOT / ".triton"
DEFAULT_MODELS = ("gomoku_policy",)
TRITONSERVER_ENV = "MOVEPRED_TRITONSERVER"

_PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
_STUB_NAME = "triton_python_backend_stub"
_LOG_TAIL_LINES = 25


class TritonServerError(RuntimeError):
    """The Triton server could not be prepared, started or made ready."""


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
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    shutil.copy2(src, tmp)  # keeps mode (the stub must stay executable) and mtime
    os.replace(tmp, dst)  # atomic: a running server keeps its old inode


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


def _kill_group(proc: subprocess.Popen, log_file: IO[bytes] | None) -> None:
    """Last-resort cleanup (garbage collection / interpreter exit): kill the server's group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    if log_file is not None:
        log_file.close()


class TritonServer:
    """A ``tritonserver`` child process in explicit model-control mode.

    ``with TritonServer(Path("model_repository")) as server: PolicyClient(server.grpc_url)``

    Ports left as None are picked free on loopback. The server and its python stubs run in their
    own process group, which `stop` (or, as a last resort, interpreter exit) tears down.
    """

    def __init__(
        self,
        repository: Path,
        models: Sequence[str] = DEFAULT_MODELS,
        host: str = "127.0.0.1",
        http_port: int | None = None,
        grpc_port: int | None = None,
        log_path: Path | None = None,
        startup_timeout_s: float = 60.0,
    ) -> None:
        self.repository = Path(repository).resolve()
        self.models = tuple(models)
        self.host = host
        self._fixed_http_port = http_port
        self._fixed_grpc_port = grpc_port
        self.http_port = http_port
        self.grpc_port = grpc_port
        self.metrics_port: int | None = None
        self._requested_log_path = Path(log_path) if log_path is not None else None
        self.log_path: Path | None = self._requested_log_path
        self.startup_timeout_s = float(startup_timeout_s)
        self.startup_time_s: float | None = None
        self.tritonserver: Path | None = None
        self.backend_dir: Path | None = None
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
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ------------------------------------------------------------------ lifecycle
    def _check_repository(self) -> None:
        if not self.repository.is_dir():
            raise TritonServerError(f"model repository {self.repository} is not a directory")
        for model in self.models:
            config = self.repository / model / "config.pbtxt"
            if not config.is_file():
                raise TritonServerError(
                    f"model {model!r}: {config} missing (the server runs with "
                    "--disable-auto-complete-config, every model needs a complete config)"
                )

    def _command(self) -> list[str]:
        assert self.tritonserver is not None and self.backend_dir is not None
        cmd = [
            str(self.tritonserver),
            f"--model-repository={self.repository}",
            f"--backend-directory={self.backend_dir}",
            "--model-control-mode=explicit",
            *(f"--load-model={m}" for m in self.models),
            f"--http-address={self.host}",
            f"--grpc-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--allow-metrics=false",
            "--disable-auto-complete-config",
            "--exit-timeout-secs=5",
            "--strict-readiness=true",
        ]
        return cmd

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
        self.metrics_port = pick(None)

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
        self._finalizer = weakref.finalize(self, _kill_group, self._proc, self._log_file)

    def start(self) -> TritonServer:
        """Start the server and block until it and every model in `models` are ready."""
        if self.is_running():
            raise TritonServerError(f"tritonserver already running (pid {self.pid})")
        self._check_repository()
        self.tritonserver = find_tritonserver()
        home = Path(os.environ.get(TRITON_HOME_ENV) or DEFAULT_TRITON_HOME)
        self.backend_dir = prepare_backend_dir(home, self.tritonserver)
        check_stub_numpy(stub_numpy_version())
        env = server_environment(self.tritonserver)
        auto_ports = self._fixed_http_port is None or self._fixed_grpc_port is None
        attempts = 3 if auto_ports else 1
        for attempt in range(1, attempts + 1):
            self._spawn(env)
            try:
                self.wait_ready()
                return self
            except TritonServerError:
                log = _tail(self.log_path)
                self.stop(grace_s=3.0)
                # A freshly picked port can be grabbed by someone else before the server binds it.
                if attempt < attempts and "already in use" in log.lower():
                    continue
                raise
        raise AssertionError("unreachable")

    def wait_ready(self, timeout_s: float | None = None) -> float:
        """Poll until the server and its models are ready; return seconds since start.

        Raises TritonServerError when the process exits or the timeout passes (the process may
        hang not-ready, e.g. when the stub cannot load ``libpython``), with the log tail.
        """
        if self._proc is None:
            raise TritonServerError("server not started")
        timeout_s = self.startup_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
        base = f"http://{self.http_url}"
        paths = ["/v2/health/ready", *(f"/v2/models/{m}/ready" for m in self.models)]
        while True:
            code = self._proc.poll()
            if code is not None:
                tail = _tail(self.log_path)
                hint = ""
                if "at least one version must be available" in tail:
                    hint = (
                        " No version folder to serve: publish a model first "
                        "(services.triton.publisher.publish)."
                    )
                raise TritonServerError(
                    f"tritonserver exited with code {code} during start-up "
                    f"(repository {self.repository}, models {list(self.models)}).{hint} "
                    f"Last lines of {self.log_path}:\n{tail}"
                )
            if all(self._http_ok(opener, base + p) for p in paths):
                self.startup_time_s = time.monotonic() - self._started_at
                return self.startup_time_s
            if time.monotonic() >= deadline:
                raise TritonServerError(
                    f"tritonserver (pid {self._proc.pid}) still not ready after {timeout_s:.1f} s "
                    f"(models {list(self.models)}). A server that hangs here usually cannot load "
                    "the python stub's libraries (LD_LIBRARY_PATH must contain "
                    "nvidia_pytriton.libs and Python's LIBDIR) or a model's initialize() is "
                    f"stuck. Last lines of {self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(0.05)

    @staticmethod
    def _http_ok(opener: urllib.request.OpenerDirector, url: str) -> bool:
        try:
            with opener.open(url, timeout=1.0) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the server (it drains in-flight requests), SIGKILL its group after `grace_s`.

        Returns the exit code (None if never started). Idempotent.
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
    parser = argparse.ArgumentParser(
        prog="python -m services.triton.server",
        description="Run Triton (explicit model control) on a model repository until Ctrl-C.",
    )
    parser.add_argument("--repository", type=Path, default=REPO_ROOT / "model_repository")
    parser.add_argument(
        "--model", action="append", dest="models", help="model to load (repeatable)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--grpc-port", type=int, default=None)
    parser.add_argument("--http-port", type=int, default=None)
    parser.add_argument("--log-path", type=Path, default=None)
    parser.add_argument("--startup-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)

    server = TritonServer(
        args.repository,
        models=args.models or DEFAULT_MODELS,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        log_path=args.log_path,
        startup_timeout_s=args.startup_timeout,
    )
    try:
        server.start()
    except (TritonServerError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"tritonserver ready in {server.startup_time_s:.2f} s (pid {server.pid})", flush=True)
    print(f"  gRPC: {server.grpc_url}", flush=True)
    print(f"  HTTP: http://{server.http_url}", flush=True)
    print(f"  log:  {server.log_path}", flush=True)
    print("Ctrl-C to stop.", flush=True)
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
            print(f"tritonserver exited; last log lines:\n{server.log_tail()}", file=sys.stderr)
            return server.stop() or 1
        print("stopping tritonserver ...", flush=True)
        code = server.stop()
        print(f"tritonserver stopped (exit code {code})", flush=True)
        return 0
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
