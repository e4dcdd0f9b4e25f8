"""The Triton launcher (services/triton/launcher.py) against a real tritonserver: which version of
which model it serves (pinned from the rollout record, bad folders skipped), and that it never
reports a server it did not start (busy ports, orphans of a killed launcher, pid files)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from services import processes
from services.processes import TRITON_HOME_ENV
from services.repository.publish import publish
from services.triton import pid_files, ports, version_choice
from services.triton.client import PolicyClient
from services.triton.launcher import TritonServer
from services.triton.server_errors import TritonServerError
from tests.triton_fixtures import (
    GO_MODEL_NAME,
    MODEL_NAME,
    REPO_ROOT,
    TRACKED_REPOSITORY,
    add_go_model,
    build_tiny_policy,
    make_repository,
    random_boards,
    require_tritonserver,
    run_local,
)

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"),
]

NEXT_STEP = "make ingest && make train"


@pytest.fixture(autouse=True)
def triton_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Triton home of the test's own, so its pid files meet no other launcher's."""
    home = tmp_path / "triton-home"
    monkeypatch.setenv(TRITON_HOME_ENV, str(home))
    return home


def _publish_tiny(repository: Path, models_dir: Path, seeds: list[int]) -> list[Path]:
    """Publish one tiny Gomoku policy per seed as versions 1, 2, ...; their TorchScript files."""
    files = []
    for seed in seeds:
        files.append(build_tiny_policy(models_dir / f"tiny-{seed}.pt", seed=seed))
        publish(files[-1], repository, MODEL_NAME, metadata={"seed": seed})
    return files


def _write_record(repository: Path, current: int | None, previous: int | None,
                  history: list[dict] | None = None) -> None:
    (repository / MODEL_NAME / "rollout.json").write_text(json.dumps(
        {"current": current, "previous": previous, "history": history or []}))


def _ready_versions(server: TritonServer, model: str) -> list[str]:
    with PolicyClient(server.grpc_url, model_name=model) as client:
        return sorted(client.ready_versions(model))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# --------------------------------------------------------------------------- what serves


def test_version_candidates_follow_the_rollout_record(tmp_path: Path) -> None:
    """No record: newest first. A record: current, previous, then the rest newest first less
    the versions its history refused. An unreadable record counts as none."""
    repository = make_repository(tmp_path)
    for version in (1, 2, 3, 4):
        (repository / MODEL_NAME / str(version)).mkdir()
    (repository / MODEL_NAME / "quarantine" / "5").mkdir(parents=True)
    assert [v for v, _ in version_choice.version_candidates(repository, MODEL_NAME)] == [4, 3, 2, 1]
    _write_record(repository, current=2, previous=1, history=[
        {"action": "rollout", "version": 4, "outcome": "refused", "reason": "smoke test"}])
    candidates = version_choice.version_candidates(repository, MODEL_NAME)
    assert [v for v, _ in candidates] == [2, 1, 3]
    assert candidates[0][1] == "the rollout record's current"
    # no current or previous recorded (every rollout refused): refused versions still never
    # serve; a version refused once and served since is a candidate again
    _write_record(repository, current=None, previous=None, history=[
        {"action": "rollout", "version": 4, "outcome": "refused", "reason": "hung"},
        {"action": "rollout", "version": 3, "outcome": "refused", "reason": "hung"},
        {"action": "rollout", "version": 3, "outcome": "serving"}])
    assert [v for v, _ in version_choice.version_candidates(repository, MODEL_NAME)] == [3, 2, 1]
    (repository / MODEL_NAME / "rollout.json").write_text("{not json")
    assert [v for v, _ in version_choice.version_candidates(repository, MODEL_NAME)] == [4, 3, 2, 1]
    assert version_choice.discover_models(repository) == (MODEL_NAME,)
    config = json.loads(version_choice.pinned_config_json(
        repository / MODEL_NAME / "config.pbtxt", 3))
    assert [int(v) for v in config["version_policy"]["specific"]["versions"]] == [3]
    assert config["name"] == MODEL_NAME and config["backend"] == "python"



def test_truncated_newest_version_is_skipped_and_every_model_serves(tmp_path: Path) -> None:
    """No record: the newest version whose files check out serves; a truncated newest
    model.pt is reported (folder and reason) instead of stopping Triton, and go_policy (not
    named: found by its config) serves too."""
    require_tritonserver()
    repository = make_repository(tmp_path)
    _, v2, _ = _publish_tiny(repository, tmp_path / "ts", [0, 1, 2])
    _truncate(repository / MODEL_NAME / "3" / "model.pt")
    add_go_model(repository)
    (repository / "notes").mkdir()  # a folder without a config is no model

    with TritonServer(repository, log_path=tmp_path / "triton.log",
                      startup_timeout_s=120) as server:
        assert server.served == {MODEL_NAME: 2, GO_MODEL_NAME: 1}
        assert server.models == (GO_MODEL_NAME, MODEL_NAME)
        [bad] = server.skipped
        assert (bad.model, bad.version) == (MODEL_NAME, 3)
        assert bad.folder == repository / MODEL_NAME / "3" and "model.pt" in bad.reason
        assert _ready_versions(server, MODEL_NAME) == ["2"]
        boards = random_boards(4, seed=3)
        with PolicyClient(server.grpc_url) as client:
            result = client.infer(boards)
        assert result.model_version == "2"
        np.testing.assert_allclose(result.logits, run_local(v2, boards), rtol=1e-5, atol=1e-5)
        with PolicyClient(server.grpc_url, model_name=GO_MODEL_NAME) as go:
            assert go.is_ready()
            assert go.infer(np.zeros((1, 4, 9, 9), np.int8)).model_version == "1"


def test_restart_serves_the_rollout_record_not_the_newest_folder(tmp_path: Path) -> None:
    """A version newer than the record's `current` (refused or rolled back) does not come back
    on a restart; a `current` whose files fail the check gives way to `previous`, not to the
    newest folder. A model with nothing published is skipped with the command to run."""
    require_tritonserver()
    repository = make_repository(tmp_path)
    v1, _, _ = _publish_tiny(repository, tmp_path / "ts", [0, 1, 2])
    shutil.copytree(TRACKED_REPOSITORY / GO_MODEL_NAME, repository / GO_MODEL_NAME)
    _write_record(repository, current=1, previous=None, history=[
        {"action": "rollout", "version": 3, "outcome": "refused", "reason": "NaN logits"}])
    boards = random_boards(2, seed=5)

    with TritonServer(repository, log_path=tmp_path / "triton.log") as server:
        assert server.served == {MODEL_NAME: 1}
        assert _ready_versions(server, MODEL_NAME) == ["1"]
        with PolicyClient(server.grpc_url) as client:
            result = client.infer(boards)
        assert result.model_version == "1"
        np.testing.assert_allclose(result.logits, run_local(v1, boards), rtol=1e-5, atol=1e-5)
        [go] = server.skipped
        assert go.model == GO_MODEL_NAME and go.version is None and NEXT_STEP in go.reason

    # current v2 is corrupt (a flipped byte fails the zip CRC): previous v1 serves, not v3
    model_pt = repository / MODEL_NAME / "2" / "model.pt"
    data = bytearray(model_pt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model_pt.write_bytes(bytes(data))
    _write_record(repository, current=2, previous=1)
    with TritonServer(repository, models=[MODEL_NAME], log_path=tmp_path / "triton.log") as server:
        assert server.served == {MODEL_NAME: 1}
        assert [(s.model, s.version) for s in server.skipped] == [(MODEL_NAME, 2)]
        with PolicyClient(server.grpc_url) as client:
            assert client.infer(boards).model_version == "1"


def test_a_version_triton_refuses_falls_back_and_a_named_model_must_load(
    tmp_path: Path,
) -> None:
    """Files that check out but fail in Triton (initialize raises): the previous version
    serves and Triton's reason is reported; a named model with nothing Triton can load is an
    error."""
    require_tritonserver()
    repository = make_repository(tmp_path)
    _publish_tiny(repository, tmp_path / "ts", [0, 1])
    (repository / MODEL_NAME / "2" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        raise RuntimeError('this version cannot start')\n")
    with TritonServer(repository, log_path=tmp_path / "triton.log") as server:
        assert server.served == {MODEL_NAME: 1}
        [bad] = server.skipped
        assert bad.version == 2 and "this version cannot start" in bad.reason

    shutil.rmtree(repository / MODEL_NAME / "1")
    server = TritonServer(repository, models=[MODEL_NAME], log_path=tmp_path / "triton2.log")
    with pytest.raises(TritonServerError, match="this version cannot start"):
        server.start()
    assert not server.is_running()
    assert not list(pid_files.pid_dir().glob("*.pid"))


def test_fresh_repository_starts_and_says_what_to_run(tmp_path: Path) -> None:
    """The tracked repository on a fresh clone (configs, no version): Triton starts, serves
    nothing, and each model's skip line says what to run next."""
    require_tritonserver()
    repository = tmp_path / "model_repository"
    shutil.copytree(TRACKED_REPOSITORY, repository,
                    ignore=lambda d, names: [n for n in names if n.isdigit()
                                             or n.startswith(("rollout", "."))])
    with TritonServer(repository, log_path=tmp_path / "triton.log") as server:
        assert server.served == {}
        tracked = {p.name for p in TRACKED_REPOSITORY.iterdir() if (p / "config.pbtxt").is_file()}
        assert {MODEL_NAME, GO_MODEL_NAME} <= tracked
        assert {s.model for s in server.skipped} == tracked
        assert all(NEXT_STEP in str(s) for s in server.skipped)
        with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready",
                                    timeout=5) as answer:
            assert answer.status == 200
        # what the deployed probes ask: each model's readiness, 400 until a version loads
        for model in (MODEL_NAME, GO_MODEL_NAME):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/ready",
                                       timeout=5)
            assert refused.value.code == 400, model


# --------------------------------------------------------------------------- ports, orphans


class _AlwaysReady(http.server.BaseHTTPRequestHandler):
    """Somebody else's server: answers 200 to every readiness probe."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def foreign_http_server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AlwaysReady)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_ports_held_by_another_listener_are_a_clear_error(
    tmp_path: Path, foreign_http_server: int
) -> None:
    """Another process answering "ready" on our HTTP port must not pass for our server: the
    start is refused before anything is spawned, naming the port."""
    require_tritonserver()
    repository = make_repository(tmp_path)
    _publish_tiny(repository, tmp_path / "ts", [0])
    server = TritonServer(repository, http_port=foreign_http_server,
                          grpc_port=ports.free_port(), startup_timeout_s=60)
    with pytest.raises(TritonServerError,
                       match=f"HTTP port {foreign_http_server} .* already in use"):
        server.start()
    assert not server.is_running() and server.pid is None

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        grpc_port = holder.getsockname()[1]
        server = TritonServer(repository, grpc_port=grpc_port, http_port=ports.free_port())
        with pytest.raises(TritonServerError, match=f"gRPC port {grpc_port} .* already in use"):
            server.start()
        assert server.pid is None


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _http_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready",
                                    timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


def test_orphan_of_a_killed_launcher_is_named_and_can_be_replaced(
    tmp_path: Path, triton_home: Path
) -> None:
    """SIGKILL a launcher (`python -m services.triton.server`): its tritonserver lives on. The
    next launcher on the same ports says so with the command that stops it, and with
    `replace_orphan` stops it and starts its own. Pid files: written at start, removed at stop,
    a stale one removed silently."""
    require_tritonserver()
    repository = tmp_path / "model_repository"
    shutil.copytree(TRACKED_REPOSITORY / MODEL_NAME, repository / MODEL_NAME,
                    ignore=lambda d, names: [n for n in names if n != "config.pbtxt"])
    grpc_port, http_port = ports.free_port(), ports.free_port()
    pid_file = triton_home / "run" / f"tritonserver-{grpc_port}.pid"
    launcher_log = tmp_path / "launcher.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    orphan_pgid = None
    with launcher_log.open("wb") as out:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "services.triton.server", "--repository", str(repository),
             "--grpc-port", str(grpc_port), "--http-port", str(http_port),
             "--log-path", str(tmp_path / "orphan-triton.log")],
            cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: "Ctrl-C to stop" in launcher_log.read_text() or
                  launcher.poll() is not None, 120, "the launcher to report ready")
        assert launcher.poll() is None, launcher_log.read_text()
        text = launcher_log.read_text()
        assert f"{MODEL_NAME}: no version published yet" in text and NEXT_STEP in text
        record = json.loads(pid_file.read_text())
        orphan_pid, orphan_pgid = record["pid"], record["pgid"]
        assert record["launcher_pid"] == launcher.pid
        assert {grpc_port, http_port} <= set(record["ports"])
        assert record["repository"] == str(repository.resolve())

        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        assert pid_files.is_tritonserver(orphan_pid) and _http_ready(http_port)

        server = TritonServer(repository, grpc_port=grpc_port, http_port=http_port,
                              log_path=tmp_path / "triton.log")
        with pytest.raises(TritonServerError) as info:
            server.start()
        message = str(info.value)
        assert "orphaned tritonserver" in message and f"port {grpc_port}" in message
        assert f"kill -- -{orphan_pgid}" in message and "--replace-orphan" in message
        assert server.pid is None and pid_files.is_tritonserver(orphan_pid)

        server = TritonServer(repository, grpc_port=grpc_port, http_port=http_port,
                              log_path=tmp_path / "triton.log", replace_orphan=True)
        with server:
            assert not processes.alive(orphan_pid)
            assert server.pid != orphan_pid and _http_ready(http_port)
            assert json.loads(pid_file.read_text())["pid"] == server.pid
        assert not pid_file.exists()

        # a pid file whose process is gone is stale: removed without a word
        dead = subprocess.Popen(["true"])
        dead.wait()
        stale = triton_home / "run" / f"tritonserver-{grpc_port}.pid"
        stale.write_text(json.dumps({"pid": dead.pid, "pgid": dead.pid,
                                     "launcher_pid": dead.pid,
                                     "ports": [grpc_port, http_port], "repository": "x"}))
        with TritonServer(repository, grpc_port=grpc_port, http_port=http_port,
                          log_path=tmp_path / "triton.log") as server:
            assert json.loads(stale.read_text())["pid"] == server.pid
        assert not stale.exists()
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if orphan_pgid is not None:  # normally stopped by the replacing launcher already
            with contextlib.suppress(ProcessLookupError):
                os.killpg(orphan_pgid, signal.SIGKILL)


def test_a_start_waits_for_a_rollout_under_way_before_reading_its_record(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The launcher read rollout.json and loaded while a rollout held the model's lock: it
    could load what the rollout was about to refuse or replace. Now it waits for the lock, and
    serves what the record says once the rollout is done."""
    import logging

    from services.repository.rollout_state import rollout_lock

    require_tritonserver()
    repository = make_repository(tmp_path)
    _publish_tiny(repository, tmp_path / "ts", [0, 1])
    _write_record(repository, current=1, previous=None)
    server = TritonServer(repository, models=[MODEL_NAME], log_path=tmp_path / "triton.log")
    started = threading.Event()
    errors: list[BaseException] = []

    def start() -> None:
        try:
            server.start()
        except BaseException as exc:  # reported by the assertions below
            errors.append(exc)
        started.set()

    caplog.set_level(logging.INFO, logger="services.triton.server")
    try:
        with rollout_lock(repository, MODEL_NAME, 5.0):  # a rollout of v2 under way
            threading.Thread(target=start, daemon=True).start()
            _wait_for(lambda: "waiting for the rollout under way" in caplog.text, 120,
                      "the launcher to wait for the rollout lock")
            assert not started.is_set()  # nothing loaded while the lock is held
            _write_record(repository, current=2, previous=1)  # the rollout's record
        assert started.wait(120) and not errors, errors
        assert server.served == {MODEL_NAME: 2}  # the record as the rollout left it
        assert _ready_versions(server, MODEL_NAME) == ["2"]
    finally:
        server.stop()
