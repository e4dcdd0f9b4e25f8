"""The local stack in the background: `make up` starts Triton, the search service and the web
board, `make down` stops them.

    python scripts/stack.py up [--log-dir runs/log] [--no-web] [--timeout 300]
    python scripts/stack.py down [--timeout 10]

`up` starts each piece as `make triton`, `make serve` and `make web` do, but detached from the
terminal (its own session, stdin closed), its output in ``<log dir>/<name>.log``, and waits for
each to answer its health check before it starts the next (the search service needs Triton, the
board the search service). A piece that already runs (`movepred status` lists it running) is
left alone. A piece that exits or stays unhealthy past `--timeout` ends `up` with its log's
tail, after the pieces this run started are stopped again: nothing half-started stays behind.

What runs is found and stopped through the process registry (`services.processes`: the pid
files the launchers write), so `make status` lists the three and `make down` (or `make stop`)
stops exactly them, dependants first. Triton with nothing published yet starts anyway (it says
what to run), and so does the stack: its health then reads "up, no model in the repository".

Why a script rather than three `&` in the Makefile: the wait for health, the clean-up of a
half-started stack and the log files need a program, and one that a test can run.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services import processes  # noqa: E402

PY = sys.executable
DEFAULT_LOG_DIR = ROOT / "runs" / "log"
DEFAULT_UP_TIMEOUT_S = 300.0  # Triton's first start copies its backend and loads every model
POLL_S = 0.5
STACK = ("triton", "search", "web")  # start order; `down` stops them in reverse


@dataclass(frozen=True)
class Piece:
    """One process of the stack: its registry name, its command, and when it counts as up
    (a test of `movepred status`'s health words)."""

    name: str
    command: list[str]
    healthy: Callable[[str], bool]


def _triton_up(health: str) -> bool:
    # "ready", or up with a model not ready / no model published: Triton answers either way
    return health == "ready" or health.startswith("up")


def _search_up(health: str) -> bool:
    return health in ("ready", "up, models not ready")


def pieces(args: argparse.Namespace) -> list[Piece]:
    """The stack's commands, the Make targets' own (`make triton`, `make serve`, `make web`)."""
    triton_grpc = f"127.0.0.1:{args.triton_grpc_port}"
    search = f"127.0.0.1:{args.search_port}"
    out = [
        Piece("triton", [PY, "-m", "services.triton.server", "--repository", str(args.repository),
                         "--grpc-port", str(args.triton_grpc_port),
                         "--http-port", str(args.triton_http_port),
                         "--metrics-port", str(args.triton_metrics_port),
                         *shlex.split(args.triton_args)], _triton_up),
        Piece("search", [PY, "-m", "services.search.server", "--port", str(args.search_port),
                         "--triton-url", triton_grpc,
                         "--metrics-port", str(args.search_metrics_port),
                         *shlex.split(args.search_args)], _search_up),
    ]
    if not args.no_web:
        out.append(Piece("web", [
            PY, "-m", "services.processes", "exec", "--name", "web",
            "--port", f"web={args.web_port}",
            "--health", f"http://127.0.0.1:{args.web_port}/api/status", "--",
            PY, "-m", "services.web", "--port", str(args.web_port), "--target", search,
            *shlex.split(args.web_args)], lambda health: health == "ready"))
    return out


def running(name: str) -> dict | None:
    """The registry's row of a running process called `name` (stale files are cleaned)."""
    return next((row for row in processes.status() if row["name"] == name
                 and row["state"] == "running"), None)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(piece: Piece, log_dir: Path, timeout_s: float) -> str:
    """Start `piece` detached, its output in its log; wait until the registry lists it healthy.
    Its health words; RuntimeError (with the log's tail) when it exits or stays unhealthy."""
    log = log_dir / f"{piece.name}.log"
    with log.open("ab") as out:
        out.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(piece.command)}\n"
                  .encode())
        out.flush()
        proc = subprocess.Popen(piece.command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    health = "not started"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{piece.name} exited with code {proc.returncode}; the end of "
                               f"{log}:\n{_tail(log)}")
        row = running(piece.name)
        health = (row or {}).get("health") or "no pid file yet"
        if row is not None and piece.healthy(health):
            return health
        time.sleep(POLL_S)
    raise RuntimeError(f"{piece.name} not up after {timeout_s:g} s ({health}); the end of "
                       f"{log}:\n{_tail(log)}")


def up(args: argparse.Namespace) -> int:
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    started: list[str] = []
    for piece in pieces(args):
        row = running(piece.name)
        if row is not None:
            print(f"{piece.name}: already runs (pid {row['pid']}, {row['health']})")
            continue
        print(f"{piece.name}: starting, log {log_dir / (piece.name + '.log')}", flush=True)
        try:
            health = start(piece, log_dir, args.timeout)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            if started:
                print(f"stopping what this run started: {', '.join(started)}", file=sys.stderr)
                done, failed = processes.stop(started)
                for line in done + failed:
                    print(line, file=sys.stderr)
            return 1
        started.append(piece.name)
        print(f"{piece.name}: {health}", flush=True)
    web = "" if args.no_web else f"; the board on http://127.0.0.1:{args.web_port}/"
    print(f"up{web}. `make status` lists them, `make down` stops them.")
    return 0


def down(args: argparse.Namespace) -> int:
    done, failed = processes.stop(STACK, args.timeout)
    for line in done:
        print(line)
    for line in failed:
        print(f"refused: {line}", file=sys.stderr)
    if not done and not failed:
        print("nothing of the stack runs")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python scripts/stack.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    u = sub.add_parser("up", help="start Triton, the search service and the web board")
    u.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    u.add_argument("--triton-grpc-port", type=int, default=8001)
    u.add_argument("--triton-http-port", type=int, default=8000)
    u.add_argument("--triton-metrics-port", type=int, default=8002)
    u.add_argument("--search-port", type=int, default=50051)
    u.add_argument("--search-metrics-port", type=int, default=50053)
    u.add_argument("--web-port", type=int, default=8080)
    u.add_argument("--triton-args", default="", help="more arguments of the Triton launcher")
    u.add_argument("--search-args", default="", help="more arguments of the search service")
    u.add_argument("--web-args", default="", help="more arguments of the web board")
    u.add_argument("--no-web", action="store_true", help="Triton and the search service only")
    u.add_argument("--log-dir", default=str(DEFAULT_LOG_DIR),
                   help="where each piece's output goes (default runs/log)")
    u.add_argument("--timeout", type=float, default=DEFAULT_UP_TIMEOUT_S,
                   help="seconds each piece may take to answer its health check")
    d = sub.add_parser("down", help="stop the web board, the search service and Triton")
    d.add_argument("--timeout", type=float, default=processes.DEFAULT_STOP_TIMEOUT_S,
                   help="seconds between SIGTERM and SIGKILL")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return up(args) if args.action == "up" else down(args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")  # the pieces' logs as they happen
    sys.exit(main())
