"""The typical session of docs/reference.md, in its order, on a fresh copy of the repository.

`make triton` (terminal 1), `make ingest && make train` (terminal 2), `make serve` (terminal 3),
then `make genmove MOVES="h8 h9"`. The commands are the Make targets' own (`make -n` in the
copy, with free ports given as Make variables, and the reference's training defaults), run in a
copy of the working tree that holds no dataset, no published version and no Prefect database,
as a fresh clone after `make setup`. The session runs twice: on torch's `default` kernels and on
this machine's native ones (torch's, oneDNN's and MKL's instruction sets capped or not), since
the kernels steer training and the trained network must pass the rollout's smoke test on either
(`tests/training_recipes.py`: the defaults lead it by several logits on every float path).
Also: the session's errors before their step has run are one line that names the command to run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.training_recipes import NATIVE, float_path_environment

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
START_TIMEOUT_S = 240.0

pytestmark = [
    pytest.mark.integration,  # make triton/ingest/train/serve in subprocesses
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_copy(dest: Path) -> Path:
    """The working tree's files as a clone has them (tracked and not ignored), plus the gRPC
    code `make setup` generates; no dataset, versions, runs, .prefect or .triton."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    shutil.copytree(ROOT / "services" / "api" / "movepred", dest / "services" / "api" / "movepred")
    return dest


class Session:
    """Make targets run in the copy, with this machine's ports and the test's interpreter."""

    def __init__(self, repo: Path, tmp: Path, float_path: str) -> None:
        self.repo, self.tmp = repo, tmp
        self.grpc_port, self.http_port, self.search_port = free_port(), free_port(), free_port()
        self.make_vars = [f"PY={PY}", f"TRITON_GRPC_PORT={self.grpc_port}",
                          f"TRITON_HTTP_PORT={self.http_port}",
                          f"SEARCH_PORT={self.search_port}", "VISITS=64"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        # a Prefect home of the session's own (a user's ~/.prefect); one torch/OpenMP thread on
        # this shared machine; the float path torch's kernels take
        self.env = {**float_path_environment(float_path, env),
                    "PREFECT_HOME": str(tmp / "prefect-home"), "OMP_NUM_THREADS": "1"}
        self.background: list[subprocess.Popen] = []

    def command(self, target: str, *extra: str) -> str:
        """The shell command `make TARGET` runs, without its `setup` prerequisite. The ports
        are set through the Make variables; if the target spells a port out, it is replaced
        with this session's (loopback ports are shared with other test runs)."""
        out = subprocess.run(["make", "-s", "-n", "--no-print-directory", target,
                              *self.make_vars, *extra], cwd=self.repo, capture_output=True,
                             text=True, check=True, env=self.env).stdout
        lines = [line for line in out.replace("\\\n", " ").splitlines()
                 if line.strip() and "setup_env.sh" not in line]
        cmd = " && ".join(lines)
        cmd = re.sub(r"--grpc-port \d+", f"--grpc-port {self.grpc_port}", cmd)
        cmd = re.sub(r"--http-port \d+", f"--http-port {self.http_port}", cmd)
        return cmd

    def run(self, target: str, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", self.command(target, *extra)], cwd=self.repo,
                              env=self.env, capture_output=True, text=True, timeout=timeout)

    def start(self, target: str) -> tuple[subprocess.Popen, Path]:
        log = self.tmp / f"{target}.log"
        proc = subprocess.Popen(["bash", "-c", "exec " + self.command(target)], cwd=self.repo,
                                env=self.env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.background.append(proc)
        return proc, log

    def stop_all(self) -> None:
        for proc in reversed(self.background):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)


def wait_for(what: str, ready, proc: subprocess.Popen, log: Path,
             timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not ready after {timeout:.0f} s:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)


def triton_live(port: int) -> bool:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    try:
        client = grpcclient.InferenceServerClient(url=f"127.0.0.1:{port}")
        try:
            return bool(client.is_server_ready(client_timeout=1.0))
        finally:
            client.close()
    except InferenceServerException:
        return False


def search_serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            # the Gomoku model's name: a fresh clone has no Go version, so the service's
            # all-games name stays NOT_SERVING
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="movepred.v1.SearchService/gomoku"),
                timeout=1.0)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(scope="module", params=["default", NATIVE])
def session(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[Session]:
    tmp = tmp_path_factory.mktemp("session")
    s = Session(fresh_copy(tmp / "movepred"), tmp, request.param)
    try:
        yield s
    finally:
        s.stop_all()


def test_make_train_before_make_ingest_says_what_to_run(session: Session) -> None:
    run = session.run("train")
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        "error: no dataset at artifacts/dataset: run `make ingest` first "
        "(or `python -m flows.ingest SOURCES --out artifacts/dataset`)")
    assert "Traceback" not in run.stderr


@pytest.mark.timeout(900)
def test_typical_session_in_the_readme_order(session: Session) -> None:
    # terminal 1: make triton, on a repository where nothing is published yet
    triton, triton_log = session.start("triton")
    wait_for("make triton", lambda: triton_live(session.grpc_port), triton, triton_log)

    # terminal 2: make ingest && make train (the new version is rolled out on that Triton)
    ingest = session.run("ingest")
    assert ingest.returncode == 0, ingest.stderr[-4000:]
    assert (session.repo / "artifacts" / "dataset" / "manifest.json").is_file()
    train = session.run("train")
    assert train.returncode == 0, train.stderr[-4000:]
    assert "Traceback" not in train.stderr
    assert '"published": true' in train.stdout and '"served": true' in train.stdout, (
        train.stdout[-3000:] + train.stderr[-3000:])
    assert (session.repo / "model_repository" / "gomoku_policy" / "1" / "model.pt").is_file()
    assert (session.repo / "artifacts" / "train" / "report.md").is_file()

    # terminal 3: make serve
    serve, serve_log = session.start("serve")
    wait_for("make serve", lambda: search_serving(session.search_port), serve, serve_log)

    # make genmove MOVES="h8 h9"
    genmove = session.run("genmove", "MOVES=h8 h9")
    assert genmove.returncode == 0, genmove.stdout[-3000:] + genmove.stderr[-3000:]
    assert "error" not in genmove.stdout.lower(), genmove.stdout
    assert re.search(r"\b[a-o]1?[0-9]\b", genmove.stdout), genmove.stdout

    # Ctrl-C in terminals 3 and 1 stops both cleanly
    session.stop_all()
    assert serve.returncode in (0, -signal.SIGINT, 130), serve_log.read_text()[-3000:]
    assert triton.returncode == 0, triton_log.read_text()[-3000:]


def test_session_commands_are_the_make_targets(session: Session) -> None:
    """The module commands above are what the reference's targets run."""
    commands = {t: session.command(t) for t in ("triton", "ingest", "train", "serve", "genmove")}
    assert "-m services.triton.server --repository model_repository" in commands["triton"]
    assert "-m flows.ingest" in commands["ingest"] and "--out artifacts/dataset" in commands[
        "ingest"]
    train = shlex.split(commands["train"])
    assert train[1:3] == ["-m", "flows.train"]
    assert f"127.0.0.1:{session.grpc_port}" in commands["train"]
    assert f"--port {session.search_port}" in commands["serve"]
    assert f"--target 127.0.0.1:{session.search_port}" in commands["genmove"]
