"""`TritonServer`: a ``tritonserver`` child process on a model repository, each model pinned to
its version.

``with TritonServer(Path("model_repository")) as server: PolicyClient(server.grpc_url)``

What serves is decided by the launcher, not by Triton's ``latest`` policy: the server starts
in explicit mode with no model, then each model is loaded through the repository API with its
config pinned to one version (`services.triton.version_choice`). A version whose files fail the
check or that Triton refuses is skipped, logged and listed in `TritonServer.skipped`, and the
next candidate is tried, so one bad folder never stops the server nor takes another model down.
A model with nothing published is skipped with the command to run; the server starts anyway.

The launcher never reports a server it did not start: fixed ports must be free before the spawn
(`services.triton.ports`; an orphan of a killed launcher on them is named, or stopped with
`replace_orphan`: `services.triton.pid_files`), readiness only counts while its own child runs
(`services.triton.health_wait`), and it keeps a pid file while its server runs. The binary, its
python backend folder and environment come from `services.triton.installation`.

Triton's Prometheus metrics (``nv_inference_*``, ``nv_cpu_*``; ``nv_gpu_*`` on a GPU; and the
latency summaries ``nv_inference_request_summary_us`` and friends, quantiles 0.5/0.9/0.95/0.99)
are on, on ``http://127.0.0.1:<metrics port>/metrics`` (loopback whatever `host` is: the
endpoint has no authentication; `metrics_url`). The port is picked free unless given.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from services.processes import triton_home
from services.repository.configs import CONFIG_FILE
from services.repository.rollout_state import rollout_lock
from services.triton import health_wait, installation, pid_files, ports, version_choice
from services.triton.server_errors import TritonLoadError, TritonServerError
from services.triton.version_choice import NEXT_STEP, SkippedVersion

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 25
READY_AFTER_LOAD_S = 10.0  # how long a loaded version may take to answer ready


def log_tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a server log, without Triton's start-up tables, and the
    error lines before them."""
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


METRICS_HOST = "127.0.0.1"  # Triton's metrics endpoint has no authentication: loopback only
# Triton's latency summaries (nv_inference_request_summary_us{quantile=...} and the queue and
# compute ones), quantiles 0.5/0.9/0.95/0.99 over its sliding window: the dashboard's latency
# quantiles on the Triton side
METRICS_CONFIG = ("summary_latencies=true",)


def metrics_flags(host: str, port: int | None) -> list[str]:
    """tritonserver's flags turning its Prometheus metrics on, bound to `host`:`port`."""
    return ["--allow-metrics=true", f"--metrics-address={host}", f"--metrics-port={port}",
            *(f"--metrics-config={setting}" for setting in METRICS_CONFIG)]


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
        return f"{ports.connect_host(self.host)}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        if self.http_port is None:
            raise TritonServerError("server not started: no HTTP port yet")
        return f"{ports.connect_host(self.host)}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        """Triton's Prometheus endpoint (loopback by default)."""
        if self.metrics_port is None:
            raise TritonServerError("server not started: no metrics port yet")
        return f"http://{ports.connect_host(self.metrics_host)}:{self.metrics_port}/metrics"

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
            config = self.repository / model / CONFIG_FILE
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
        connect = ports.connect_host(self.host)
        taken: set[int] = set()

        def pick(fixed: int | None) -> int:
            if fixed is not None:
                taken.add(fixed)
                return fixed
            while True:
                port = ports.free_port(connect)
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
        for record in pid_files.read_pid_records():
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
                pid_files.stop_process_group(record.pgid, record.pid)
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
            if port is not None and ports.port_in_use(where, port):
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
        self._finalizer = weakref.finalize(self, pid_files.kill_group, self._proc, self._log_file,
                                           self.pid_file)

    def _write_pid_file(self) -> Path | None:
        """``<run dir>/tritonserver-<grpc port>.pid``: lets a later launcher tell an orphaned
        server (this launcher killed) from a stranger on the same ports."""
        assert self._proc is not None and self.grpc_port is not None
        return pid_files.write_pid_file(self._proc.pid, self.grpc_port, {
            "ports": [self.grpc_port, self.http_port, self.metrics_port], "host": self.host,
            "repository": str(self.repository), "metrics_url": self.metrics_url,
            "log": str(self.log_path)})

    def start(self) -> TritonServer:
        """Start the server, load each model on its chosen version, return once they are ready.

        Versions whose files fail the check, or that Triton cannot load, are skipped (logged and
        listed in `skipped`) and the next candidate is tried (`version_candidates`)."""
        if self.is_running():
            raise TritonServerError(f"tritonserver already running (pid {self.pid})")
        self._check_repository()
        self.models = (self.requested_models if self.requested_models is not None
                       else version_choice.discover_models(self.repository))
        self.served, self.skipped = {}, []
        self.tritonserver = installation.find_tritonserver()
        self.backend_dir = installation.prepare_backend_dir(triton_home(), self.tritonserver)
        installation.check_stub_numpy(installation.stub_numpy_version())
        env = installation.server_environment(self.tritonserver)
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
                tail = log_tail(self.log_path)
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
                f"{reasons}. Last lines of {self.log_path}:\n{log_tail(self.log_path)}")
        return bool(refused)

    def _load_model(self, model: str, deadline: float
                    ) -> tuple[int | None, list[SkippedVersion], bool]:
        """`_load_model_locked` under the model's rollout lock: a rollout under way (its smoke
        test, its switch, its record) finishes before the record is read, so the launcher
        never loads what a rollout is about to refuse or to replace. A lock still held at the
        start-up deadline (a stuck rollout) is logged, and the model loaded without it."""
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
        candidates = version_choice.version_candidates(self.repository, model)
        if not candidates:
            skipped.append(SkippedVersion(model, None, f"no version published yet; {NEXT_STEP}"))
            log.warning("%s", skipped[-1])
            return None, skipped, False
        triton_refused = False
        for version, why in candidates:
            folder = self.repository / model / str(version)
            try:
                version_choice.check_files(self.repository, model, version)
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
        body = json.dumps({"parameters": {"config": version_choice.pinned_config_json(
            self.repository / model / CONFIG_FILE, version)}}).encode()
        request = urllib.request.Request(
            f"http://{self.http_url}/v2/repository/models/{model}/load", data=body,
            headers={"Content-Type": "application/json"}, method="POST")
        try:
            with health_wait.OPENER.open(request, timeout=timeout_s) as response:
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
        `timeout_s` (`services.triton.health_wait`)."""
        health_wait.await_ready(urls, timeout_s, self.is_running, self._exited_error, timed_out)

    def _exited_error(self) -> TritonServerError:
        assert self._proc is not None
        return TritonServerError(
            f"tritonserver exited with code {self._proc.poll()} during start-up "
            f"(repository {self.repository}, models {list(self.models)}). "
            f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}")

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
            f"stuck. Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
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

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, lines)

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
