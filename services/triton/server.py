"""``python -m services.triton.server``: run a real Triton Inference Server (the
``tritonserver`` binary shipped in nvidia-pytriton) on a model repository until Ctrl-C or
SIGTERM.

It starts `services.triton.launcher.TritonServer` (every model folder with a ``config.pbtxt``,
or the ``--model`` ones, each pinned to the version its rollout record says), logs what serves
and what was skipped, and stops the server when stopped itself (SIGTERM while the models load
too: the server is never left orphaned). ``movepred stop`` stops a Triton started this way
through this process (`services.processes`).

    python -m services.triton.server --repository model_repository \
        [--grpc-port 8001 --http-port 8000] [--model gomoku_policy] [--replace-orphan]
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from services.settings import DEFAULT_REPOSITORY, MAX_PORT, bounded
from services.triton.launcher import TritonServer
from services.triton.server_errors import TritonServerError
from services.triton.version_choice import NEXT_STEP

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    from services import logs

    parser = argparse.ArgumentParser(
        prog="python -m services.triton.server",
        description="Run Triton (explicit model control) on a model repository until Ctrl-C.",
    )
    parser.add_argument("--repository", type=Path, default=Path(DEFAULT_REPOSITORY))
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
