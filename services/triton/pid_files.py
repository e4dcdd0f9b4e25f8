"""The Triton launchers' pid files: which server runs on which ports for whom.

Each launcher keeps ``<run dir>/tritonserver-<grpc port>.pid`` (`services.processes.run_dir`:
pid, process group, launcher pid, ports, repository, log) while its server runs, so a later
launcher tells an orphaned server (its launcher was killed) from a stranger on the same ports,
and names the command that stops it (``kill -- -<pgid>``); `movepred status` reads the same
files (`services.processes`). Pid files of dead servers are removed by whoever reads them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from services.atomic_files import atomic_write_text
from services.processes import alive, cmdline, proc_start_ticks, run_dir
from services.triton.server_errors import TritonServerError

log = logging.getLogger(__name__)
PROGRAM = "tritonserver"


def pid_dir() -> Path:
    """Where launchers keep their pid files: ``<triton home>/run`` (`services.processes`)."""
    return run_dir()


def pid_file_path(grpc_port: int) -> Path:
    return pid_dir() / f"{PROGRAM}-{grpc_port}.pid"


def is_tritonserver(pid: int) -> bool:
    """`pid` is a live ``tritonserver`` process."""
    argv = cmdline(pid)
    return bool(argv) and os.path.basename(argv[0]) == PROGRAM and alive(pid)


def write_pid_file(pid: int, grpc_port: int, record: dict[str, Any]) -> Path | None:
    """``tritonserver-<grpc port>.pid`` for the server `pid` this process launched (its process
    group is its pid), with `record` (ports, host, repository, log, ...); None, logged, when it
    cannot be written (the server runs anyway)."""
    path = pid_file_path(grpc_port)
    data = {"pid": pid, "pgid": pid, "launcher_pid": os.getpid(),
            "start_ticks": proc_start_ticks(pid), **record, "started_at": time.time()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(json.dumps(data) + "\n", path)
    except OSError as exc:
        log.warning("cannot write the pid file %s: %s", path, exc)
        return None
    return path


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
        return is_tritonserver(self.pid)

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
    for path in sorted(directory.glob(f"{PROGRAM}-*.pid")) if directory.is_dir() else []:
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


def kill_group(proc: subprocess.Popen, log_file: IO[bytes] | None,
               pid_file: Path | None) -> None:
    """Last-resort cleanup (garbage collection / interpreter exit): kill the server's group,
    close its log, remove its pid file."""
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
