"""TCP ports for a Triton server: a free one to bind, whether one is taken, the address a client
connects to.

A fixed port somebody holds must be refused before the server is spawned: our child would fail
to bind and exit while whatever holds the port answered our readiness checks.
"""

from __future__ import annotations

import errno
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host` now (the kernel's pick)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def connect_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to `host` (all interfaces:
    loopback)."""
    return "127.0.0.1" if host in ("", "0.0.0.0") else host


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
