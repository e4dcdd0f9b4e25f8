"""What the platform runs on this machine, from the launchers' pid files: see it, stop it.

Every long-running piece started locally leaves a JSON pid file in `run_dir()`
(``<triton home>/run``: `triton_home`, the platform's local state folder, ``.triton`` in the
checkout or ``$MOVEPRED_TRITON_HOME``) while it runs:

* Triton: ``tritonserver-<grpc port>.pid``, written by `services.triton.launcher.TritonServer`;
* the search service: ``search-<port>.pid``, written by `services.search.server.main`;
* anything else (the Prefect server, the scheduled flows' worker, a web app): started through
  ``python -m services.processes exec --name NAME [--port P] [--health URL] -- COMMAND ...``,
  which writes ``NAME-<port or pid>.pid`` for its own pid and then *execs* the command (same pid,
  so the file names the real process; ``make prefect-server`` and ``make schedule`` do this).

Each file records the pid and that process's start time (``/proc/<pid>/stat``, field 22), the
identity check: a file whose pid is dead, or now belongs to another process (start time or owner
differ, or for Triton the program is not ``tritonserver``), is stale; `status` reports and
removes it, and `stop` never signals such a pid.

``movepred status`` lists each entry with pid, ports, uptime and health (Triton's models'
readiness from its repository index, the search service's gRPC health, a file's ``--health``
URL); ``movepred stop [NAME ...]`` stops them, dependants first (web, search, the worker,
Prefect, Triton): SIGTERM (the process group when the process leads its own, as Triton does),
then SIGKILL to the process and the descendants it had after `timeout_s`. A Triton started by
``python -m services.triton.server`` is stopped through that launcher, which shuts its server down.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.atomic_files import atomic_write_text
from services.defaults import CANDIDATE_SUFFIX

log = logging.getLogger(__name__)

# stopped in this order: who talks to whom (a web app to the search service, the search service
# and the flows to Triton, the worker to Prefect); names not listed go first
STOP_ORDER = ("web", "search", "schedules", "prefect", "triton")
DEFAULT_STOP_TIMEOUT_S = 10.0
HEALTH_TIMEOUT_S = 1.0
SEARCH_SERVICE = "movepred.v1.SearchService"  # the search service's readiness name
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
ROOT = Path(__file__).resolve().parents[1]
# The platform's local state on this machine (gitignored): the Triton launcher's python backend
# folder and every launcher's pid files; $MOVEPRED_TRITON_HOME moves it.
TRITON_HOME_ENV = "MOVEPRED_TRITON_HOME"
DEFAULT_TRITON_HOME = ROOT / ".triton"


def triton_home() -> Path:
    """The platform's local state folder: ``$MOVEPRED_TRITON_HOME``, else ``.triton`` in the
    checkout."""
    return Path(os.environ.get(TRITON_HOME_ENV) or DEFAULT_TRITON_HOME)


def run_dir() -> Path:
    """Where the launchers keep their pid files: ``<triton home>/run``."""
    return triton_home() / "run"


# --------------------------------------------------------------------------- /proc
def proc_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22);
    None when there is no such (live or zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[19])  # fields after "(comm)" start at field 3


def alive(pid: int) -> bool:
    """A running (not zombie) process with this pid exists (where /proc cannot be read, a
    signal 0 answers)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = stat.rsplit(")", 1)[-1].split()[:1]  # the state follows "(comm)"
    return bool(state) and state[0] not in ("Z", "X")


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def started_epoch(ticks: int) -> float:
    """Unix time of a process start given in clock ticks since boot."""
    return _boot_time() + ticks / os.sysconf("SC_CLK_TCK")


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _owner(pid: int) -> int | None:
    try:
        return Path(f"/proc/{pid}").stat().st_uid
    except OSError:
        return None


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start ticks) of every live descendant of `pid`, children first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[-1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[tuple[int, int]] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        ticks = proc_start_ticks(child)
        if ticks is not None:
            out.append((child, ticks))
        todo.extend(children.get(child, []))
    return out


# --------------------------------------------------------------------------- records
@dataclass
class Entry:
    """One pid file: what runs, where, and how to tell it is still the same process."""

    name: str  # triton, search, prefect, schedules, web, ...
    pid: int
    path: Path
    ports: dict[str, int] = field(default_factory=dict)
    start_ticks: int | None = None  # the identity check (None: an older file, program checked)
    program: str | None = None  # basename argv[0] must have (Triton: tritonserver)
    health: dict[str, str] = field(default_factory=dict)  # {"http": url} | {"grpc": target}
    launcher_pid: int | None = None  # Triton: the process that started it
    details: dict[str, Any] = field(default_factory=dict)  # metrics URL, repository, log

    def identity(self) -> str | None:
        """None when the pid is the recorded process and ours; else why it is not."""
        if not alive(self.pid):
            return f"pid {self.pid} is not running"
        ticks = proc_start_ticks(self.pid)
        if self.start_ticks is not None and ticks != self.start_ticks:
            return (f"pid {self.pid} now belongs to another process (started at tick {ticks}, "
                    f"the pid file says {self.start_ticks})")
        argv = cmdline(self.pid)
        if self.program is not None and (not argv or os.path.basename(argv[0]) != self.program):
            return f"pid {self.pid} runs {argv[:1] or 'nothing'}, not {self.program}"
        if _owner(self.pid) != os.getuid():
            return f"pid {self.pid} belongs to another user"
        return None

    def uptime_s(self) -> float | None:
        ticks = proc_start_ticks(self.pid)
        return None if ticks is None else max(time.time() - started_epoch(ticks), 0.0)


def write_entry(name: str, pid: int, ports: dict[str, int] | None = None,
                health: dict[str, str] | None = None, key: str | int | None = None,
                **details: Any) -> Path:
    """Write ``<run dir>/<name>-<key>.pid`` (key: the first port, else the pid) for `pid`."""
    ports = dict(ports or {})
    key = key if key is not None else (next(iter(ports.values())) if ports else pid)
    path = run_dir() / f"{name}-{key}.pid"
    record = {"name": name, "pid": pid, "start_ticks": proc_start_ticks(pid), "ports": ports,
              "health": dict(health or {}), "started_at": time.time(), **details}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(json.dumps(record) + "\n", path)
    return path


def remove_entry(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def _triton_entry(path: Path, data: dict) -> Entry:
    ports = [int(p) for p in data["ports"]]
    names = ("grpc", "http", "metrics")
    host = data.get("host") or "127.0.0.1"
    host = "127.0.0.1" if host == "0.0.0.0" else host
    details = {k: data[k] for k in ("repository", "log", "metrics_url") if data.get(k)}
    return Entry("triton", int(data["pid"]), path, dict(zip(names, ports, strict=False)),
                 data.get("start_ticks"), "tritonserver",
                 {"triton": f"http://{host}:{ports[1]}"} if len(ports) > 1 else {},
                 int(data["launcher_pid"]), details)


def read_entries(directory: Path | None = None) -> list[Entry]:
    """Every readable pid file under `directory` (default `run_dir()`)."""
    directory = run_dir() if directory is None else Path(directory)
    out: list[Entry] = []
    for path in sorted(directory.glob("*.pid")) if directory.is_dir() else []:
        try:
            data = json.loads(path.read_text())
            if path.name.startswith("tritonserver-"):
                out.append(_triton_entry(path, data))
                continue
            known = {"name", "pid", "start_ticks", "ports", "health", "started_at"}
            out.append(Entry(str(data["name"]), int(data["pid"]), path,
                             {k: int(v) for k, v in data.get("ports", {}).items()},
                             data.get("start_ticks"), None, dict(data.get("health", {})),
                             None, {k: v for k, v in data.items() if k not in known}))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            log.debug("ignoring unreadable pid file %s", path)
    return out


# --------------------------------------------------------------------------- health
def _http_health(url: str) -> str:
    try:
        with _OPENER.open(url, timeout=HEALTH_TIMEOUT_S) as response:
            return "ready" if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"not ready (HTTP {exc.code})"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"down ({getattr(exc, 'reason', exc)})"


def _triton_health(base_url: str) -> str:
    """Triton runs with strict readiness off (a rolled-out model's unloaded ``__candidate`` would
    keep ``/v2/health/ready`` failing for good), so that endpoint only says the server is up.
    The repository index says what serves: ready when every model but the rollout's side models
    is READY, else which are not and why."""
    server = _http_health(f"{base_url}/v2/health/ready")
    if server != "ready":
        return server
    request = urllib.request.Request(f"{base_url}/v2/repository/index", data=b"{}",
                                     headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(request, timeout=HEALTH_TIMEOUT_S) as response:
            index = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"up, repository index unreadable ({getattr(exc, 'reason', exc)})"
    models = [m for m in index if isinstance(m, dict)
              and not str(m.get("name", "")).endswith(CANDIDATE_SUFFIX)]
    if not models:
        return "up, no model in the repository"
    not_ready = [f"{m.get('name')} ({m.get('state') or 'not loaded'}"
                 + (f": {m['reason']})" if m.get("reason") else ")")
                 for m in models if m.get("state") != "READY"]
    return "ready" if not not_ready else "up, not ready: " + ", ".join(not_ready)


def _grpc_health(target: str, service: str) -> str:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            process = stub.Check(health_pb2.HealthCheckRequest(service=""),
                                 timeout=HEALTH_TIMEOUT_S)
            if process.status != health_pb2.HealthCheckResponse.SERVING:
                return "not serving"
            if not service:
                return "serving"
            ready = stub.Check(health_pb2.HealthCheckRequest(service=service),
                               timeout=HEALTH_TIMEOUT_S)
        except grpc.RpcError as exc:
            return f"down ({exc.code().name})"  # type: ignore[attr-defined]
    if ready.status == health_pb2.HealthCheckResponse.SERVING:
        return "ready"
    return "up, models not ready"


def _tcp_health(port: int) -> str:
    with socket.socket() as s:
        s.settimeout(HEALTH_TIMEOUT_S)
        return "listening" if s.connect_ex(("127.0.0.1", port)) == 0 else "not listening"


def health(entry: Entry) -> str:
    """One word or phrase: ready, up but models not ready, down (why), listening, unknown."""
    if "triton" in entry.health:
        return _triton_health(entry.health["triton"])
    if "http" in entry.health:
        return _http_health(entry.health["http"])
    if "grpc" in entry.health:
        return _grpc_health(entry.health["grpc"], entry.health.get("service", ""))
    if "tcp" in entry.health:
        return _tcp_health(int(entry.health["tcp"]))
    return "unknown"


# --------------------------------------------------------------------------- status / stop
def status(directory: Path | None = None, clean: bool = True) -> list[dict[str, Any]]:
    """One dict per pid file: name, pid, ports, uptime_s, health, state (running, or why the
    file is stale), details; stale files are removed when `clean`."""
    rows = []
    for entry in read_entries(directory):
        why = entry.identity()
        row = {"name": entry.name, "pid": entry.pid, "ports": entry.ports,
               "pid_file": str(entry.path), **entry.details}
        if why is None:
            row.update(state="running", uptime_s=entry.uptime_s(), health=health(entry))
        else:
            row.update(state=f"stale: {why}", uptime_s=None, health=None)
            if clean:
                remove_entry(entry.path)
        rows.append(row)
    return rows


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:  # it leads its own group (Triton): its children too
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _wait_gone(pids: Sequence[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _launcher_cli(entry: Entry) -> int | None:
    """The pid of the ``python -m services.triton.server`` that runs this Triton, if any."""
    pid = entry.launcher_pid
    if pid is None or not alive(pid) or _owner(pid) != os.getuid():
        return None
    return pid if "services.triton.server" in cmdline(pid) else None


def stop_entry(entry: Entry, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> str:
    """Stop one entry gracefully; returns what happened. Raises `NotOurs` (nothing signalled)
    when the pid is not the recorded process."""
    why = entry.identity()
    if why is not None:
        remove_entry(entry.path)
        raise NotOurs(f"{entry.name}: {why}; not signalled, pid file {entry.path} removed")
    family = descendants(entry.pid)
    launcher = _launcher_cli(entry)
    target = launcher if launcher is not None else entry.pid
    _signal(target, signal.SIGTERM)
    waited = [entry.pid, *([launcher] if launcher else [])]
    how = "SIGTERM" + (f" to its launcher (pid {launcher})" if launcher else "")
    if not _wait_gone(waited, timeout_s):
        _signal(entry.pid, signal.SIGKILL)
        for pid, ticks in family:  # children it had, unless they are gone or pids reused
            if proc_start_ticks(pid) == ticks:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if not _wait_gone([entry.pid], 10.0):
            raise StopFailed(f"{entry.name} (pid {entry.pid}) does not stop even after SIGKILL")
        how += f", SIGKILL after {timeout_s:g} s"
    remove_entry(entry.path)
    return f"stopped {entry.name} (pid {entry.pid}): {how}"


class NotOurs(RuntimeError):
    """The pid file names a process that is not the one it recorded."""


class StopFailed(RuntimeError):
    """The process survived SIGKILL."""


def stop(names: Sequence[str] = (), timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
         directory: Path | None = None) -> tuple[list[str], list[str]]:
    """Stop the entries named (all when empty), dependants first; (done, refused or failed)."""
    entries = [e for e in read_entries(directory) if not names or e.name in names]
    order = {name: i for i, name in enumerate(STOP_ORDER)}
    entries.sort(key=lambda e: order.get(e.name, -1))
    done, failed = [], []
    for entry in entries:
        try:
            done.append(stop_entry(entry, timeout_s))
        except (NotOurs, StopFailed) as exc:
            failed.append(str(exc))
    return done, failed


# --------------------------------------------------------------------------- CLI
def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def cmd_status(args: argparse.Namespace) -> int:
    rows = status()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    if not rows:
        print(f"nothing runs (no pid file in {run_dir()})")
        return 0
    table = Table("name", "pid", "ports", "uptime", "health", "notes")
    for row in rows:
        ports = ", ".join(f"{k} {v}" for k, v in row["ports"].items())
        notes = row["state"] if row["state"] != "running" else row.get("metrics_url", "")
        table.add_row(row["name"], str(row["pid"]), ports, _uptime(row["uptime_s"]),
                      row["health"] or "-", notes)
    Console(highlight=False, width=160).print(table)
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    done, failed = stop(args.names, args.timeout)
    for line in done:
        print(line)
    for line in failed:
        print(f"refused: {line}", file=sys.stderr)
    if not done and not failed:
        print("nothing to stop" + (f" named {', '.join(args.names)}" if args.names else ""))
    return 1 if failed else 0


def add_process_commands(subparsers: argparse._SubParsersAction) -> dict:
    """Register `status` and `stop`: what the platform runs locally."""
    s = subparsers.add_parser("status", help="what the platform runs here: pid, ports, uptime, "
                                             "health")
    s.add_argument("--json", action="store_true", help="print the list as JSON")
    t = subparsers.add_parser("stop", help="stop what the platform runs here (SIGTERM, then "
                                           "SIGKILL after --timeout)")
    t.add_argument("names", nargs="*", help=f"which to stop (default all: {', '.join(STOP_ORDER)})")
    t.add_argument("--timeout", type=float, default=DEFAULT_STOP_TIMEOUT_S,
                   help="seconds between SIGTERM and SIGKILL (default %(default)s)")
    return {"status": cmd_status, "stop": cmd_stop}


def _port(text: str) -> tuple[str, int]:
    name, _, port = text.rpartition("=")
    return name or "port", int(port)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m services.processes",
        description="exec a command under a pid file that `movepred status/stop` reads")
    sub = p.add_subparsers(dest="action", required=True)
    e = sub.add_parser("exec", help="write the pid file, then exec COMMAND (same pid)")
    e.add_argument("--name", required=True, help="its name in `movepred status` (prefect, web)")
    e.add_argument("--port", action="append", type=_port, default=[],
                   help="NAME=PORT (or PORT) it listens on; repeatable")
    e.add_argument("--health", default=None,
                   help="HTTP URL answering 200 when healthy (default: the first port accepts)")
    e.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS ...")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command after --")
    ports = dict(args.port)
    checks = ({"http": args.health} if args.health else
              {"tcp": str(next(iter(ports.values())))} if ports else {})
    path = write_entry(args.name, os.getpid(), ports, checks, command=command[0])
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        remove_entry(path)
        print(f"error: cannot run {command[0]}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())

