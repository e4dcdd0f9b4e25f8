"""`python -m services.search.server --processes N`: N server processes on one port, supervised.

Real processes, a real Triton (the tiny policy of tests.triton_fixtures) and real connections:
the kernel spreads connections over the processes (SO_REUSEPORT), so work sent over many
channels must reach every child, and a child that dies is replaced while the port keeps
answering.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc

from services.search.client import SearchClient
from services.search.server import MIN_UPTIME_S
from services.triton.ports import free_port
from tests.triton_fixtures import triton_server  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(entry))
    return kids


def servers_of(pid: int) -> list[int]:
    """The supervisor's server children (spawn also starts a resource tracker, which is not
    one: it never imports grpc)."""
    out = []
    for kid in children_of(pid):
        try:
            cmd = Path(f"/proc/{kid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker" not in cmd:
            out.append(kid)
    return out


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def predict_over_clients(target: str, clients: int, each: int) -> None:
    """`clients` clients open at once, as concurrent users hold them; each SearchClient has its
    own connection, which the kernel hands to one of the processes."""
    opened = [SearchClient(target) for _ in range(clients)]
    try:
        for _ in range(each):
            for client in opened:
                assert client.predict(["h8", "h9"], timeout=10).top_moves
    finally:
        for client in opened:
            client.close()


def wait_serving(target: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    with SearchClient(target) as client:
        while True:
            try:
                client.predict(["h8"], timeout=5)
                return
            except grpc.RpcError:
                assert time.monotonic() < deadline, "the service did not answer"
                time.sleep(0.2)


def test_processes_share_the_port_and_are_replaced(triton_server) -> None:  # noqa: F811
    port = free_port()
    target = f"127.0.0.1:{port}"
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "services.search.server", "--processes", "2", "--port", str(port),
         "--triton-url", triton_server.server.grpc_url, "--go-model", ""],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started = time.monotonic()
    try:
        deadline = started + 60
        while len(servers_of(supervisor.pid)) < 2:
            assert supervisor.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        first = sorted(servers_of(supervisor.pid))
        for _ in first:  # both children listen before any load is sent
            wait_serving(target)
        time.sleep(1.0)  # start-up CPU settles
        before = {pid: cpu_ticks(pid) for pid in first}
        predict_over_clients(target, clients=24, each=15)
        used = {pid: cpu_ticks(pid) - before[pid] for pid in first}
        assert all(ticks > 0 for ticks in used.values()), used  # both served connections

        # a child killed after start-up is replaced; the port answers throughout
        time.sleep(max(0.0, started + MIN_UPTIME_S + 0.5 - time.monotonic()))
        os.kill(first[0], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:
            now = sorted(servers_of(supervisor.pid))
            if len(now) == 2 and first[0] not in now:
                break
            assert supervisor.poll() is None and time.monotonic() < deadline, now
            time.sleep(0.1)
        assert first[1] in now
        predict_over_clients(target, clients=4, each=3)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        out, _ = supervisor.communicate(timeout=30)
    assert supervisor.returncode == 0, out
    assert "2 processes on 127.0.0.1" in out and "restarting" in out
    assert servers_of(supervisor.pid) == []
