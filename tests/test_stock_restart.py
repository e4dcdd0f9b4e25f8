"""A stock deployment serves what the rollout decided, across restarts.

Triton is started with the flags compose ships (explicit model control, ``--load-model``,
``--model-config-name``) on a repository holding the stock config, as the deploy runs it; the
embedded server has no PyTorch backend, so the config is the stock one run by the python backend
(`python_backend_variant`: only what names the backend changes; the version policy and the rest
stay as shipped). After a rollout and a rollback, a restart must serve the rolled-back version,
not the newest folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from services.repository.configs import parse_config
from services.repository.publish import publish
from services.repository.rollout_state import (
    PINNED_CONFIG_ENV,
    pinned_config_is_current,
    pinned_config_path,
    pinned_config_text,
    read_state,
    write_pinned_config,
    write_state,
)
from services.triton.client import PolicyClient, TritonError
from services.triton.installation import find_tritonserver, prepare_backend_dir, server_environment
from services.triton.rollout import rollback, rollout
from tests.test_deploy_configs import (
    DEPLOY,
    MODEL_NAME,
    STOCK_CONFIG,
    compose,
    flag_value,
    free_port,
    k8s_object,
    load_yaml_docs,
    only_container,
)
from tests.triton_fixtures import build_tactical_policy, require_tritonserver

# the flags a test server replaces: its own repository and loopback ports, no metrics
REPLACED = ("--model-repository", "--http-port", "--grpc-port", "--metrics-port",
            "--allow-metrics", "--metrics-config")


PINNED = "serving"  # the --model-config-name the deploy starts Triton with


def test_compose_and_kubernetes_start_triton_on_the_configs_their_rollouts_pin() -> None:
    triton = only_container(k8s_object("Deployment", "triton"))
    for argv in (compose()["services"]["triton"]["command"],
                 [*triton.get("command", []), *triton.get("args", [])]):
        assert flag_value(argv, "--model-config-name") == PINNED
        assert flag_value(argv, "--model-control-mode") == "explicit"
    # the jobs that roll versions out pin that name
    assert compose()["services"]["jobs"]["environment"][PINNED_CONFIG_ENV] == PINNED
    (job,) = load_yaml_docs(DEPLOY / "k8s" / "jobs" / "rollout-job.yaml")
    rollout_job = job["spec"]["template"]["spec"]["containers"][0]
    assert rollout_job["command"][:2] == ["movepred", "rollout"]
    assert {e["name"]: e["value"] for e in rollout_job["env"]}[PINNED_CONFIG_ENV] == PINNED
    # compose's rollouts read the config Triton loads, so they pin the stock config
    jobs = {v["target"]: v for v in compose()["services"]["jobs"]["volumes"]}
    stock = jobs[f"/models/{MODEL_NAME}/config.pbtxt"]
    assert (DEPLOY / stock["source"]).resolve() == STOCK_CONFIG and stock["read_only"]


def test_the_pinned_stock_config_differs_only_in_its_version_policy(tmp_path: Path) -> None:
    pinned = text_format.Parse(pinned_config_text(STOCK_CONFIG, 7, PINNED),
                               model_config_pb2.ModelConfig())
    assert list(pinned.version_policy.specific.versions) == [7]
    shipped = parse_config(STOCK_CONFIG)
    pinned.version_policy.Clear()
    shipped.version_policy.Clear()
    assert pinned == shipped


def test_every_record_write_keeps_the_pinned_config(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / MODEL_NAME
    model.mkdir()
    (model / "config.pbtxt").write_text(STOCK_CONFIG.read_text())
    state = read_state(tmp_path, MODEL_NAME)
    path = pinned_config_path(tmp_path, MODEL_NAME, PINNED)
    write_state(tmp_path, MODEL_NAME, {**state, "current": 2})
    assert not path.exists()  # no stock Triton named: nothing pinned (the launcher pins)
    monkeypatch.setenv(PINNED_CONFIG_ENV, PINNED)
    write_state(tmp_path, MODEL_NAME, {**state, "current": 3, "previous": 2})
    assert list(parse_config(path).version_policy.specific.versions) == [3]
    assert pinned_config_is_current(tmp_path, MODEL_NAME, PINNED)
    # a new stock config (a changed ConfigMap): the pin is out of date until re-pinned
    (model / "config.pbtxt").write_text(STOCK_CONFIG.read_text().replace(
        "max_queue_delay_microseconds: 100", "max_queue_delay_microseconds: 200"))
    assert not pinned_config_is_current(tmp_path, MODEL_NAME, PINNED)
    write_pinned_config(tmp_path, MODEL_NAME, 3, PINNED)
    assert pinned_config_is_current(tmp_path, MODEL_NAME, PINNED)
    assert parse_config(path).dynamic_batching.max_queue_delay_microseconds == 200
    # nothing serves now: the last pin stays (not the newest folder, maybe a refused version)
    write_state(tmp_path, MODEL_NAME, {**state, "current": None})
    assert list(parse_config(path).version_policy.specific.versions) == [3]
    # a pin that cannot be written is logged; the record is written all the same
    (model / "config.pbtxt").write_text("not a config {")
    write_state(tmp_path, MODEL_NAME, {**state, "current": 4})
    assert read_state(tmp_path, MODEL_NAME)["current"] == 4


def python_backend_variant(stock: Path) -> str:
    """The stock config as the embedded server can run it: the python backend (CPU, no
    warm-up, no PyTorch parameters, the value as the python model answers it); the version
    policy, names, shapes and batching as shipped."""
    config = parse_config(stock)
    config.platform = ""
    config.backend = "python"
    config.ClearField("default_model_filename")
    config.ClearField("model_warmup")
    config.ClearField("parameters")
    for group in config.instance_group:
        group.kind = model_config_pb2.ModelInstanceGroup.KIND_CPU
    for output in config.output:
        output.ClearField("reshape")
    assert config.version_policy.WhichOneof("policy_choice") == "latest"
    return text_format.MessageToString(config)


class StockTriton:
    """tritonserver started with compose's flags (ports and repository replaced)."""

    def __init__(self, repository: Path, home: Path) -> None:
        self.binary = find_tritonserver()
        self.backends = prepare_backend_dir(home, self.binary)
        self.repository, self.home = repository, home
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> StockTriton:
        argv = compose()["services"]["triton"]["command"]
        kept = [a for a in argv[1:] if a.split("=", 1)[0] not in REPLACED
                and a != "--load-model=go_policy"]  # this repository holds Gomoku only
        grpc_port, http_port = free_port(), free_port()
        self.url = f"127.0.0.1:{grpc_port}"
        log = (self.home / "triton.log").open("a")
        self.proc = subprocess.Popen(
            [str(self.binary), *kept, f"--model-repository={self.repository}",
             f"--backend-directory={self.backends}", "--http-address=127.0.0.1",
             "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}",
             f"--http-port={http_port}", "--allow-metrics=false"],
            env=server_environment(self.binary), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 120
        while not self.ready():
            assert time.monotonic() < deadline, (self.home / "triton.log").read_text()[-3000:]
            time.sleep(0.5)
        return self

    def ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, \
            (self.home / "triton.log").read_text()[-3000:]
        try:
            with PolicyClient(self.url, MODEL_NAME) as client:
                return bool(client.ready_versions(MODEL_NAME))
        except TritonError:
            return False

    def served(self) -> tuple[list[str], str]:
        """The READY versions and the version an unversioned request is answered by."""
        with PolicyClient(self.url, MODEL_NAME) as client:
            return (client.ready_versions(MODEL_NAME),
                    client.infer(np.zeros((1, 15, 15), np.int8)).model_version)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@pytest.mark.timeout(600)
def test_a_restarted_stock_triton_serves_the_rolled_back_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_tritonserver()
    monkeypatch.setenv(PINNED_CONFIG_ENV, PINNED)  # as compose's jobs and the rollout Job
    repository = tmp_path / "models"
    (repository / MODEL_NAME).mkdir(parents=True)
    (repository / MODEL_NAME / "config.pbtxt").write_text(python_backend_variant(STOCK_CONFIG))
    publish(build_tactical_policy(tmp_path / "v1.pt", seed=1), repository)
    triton = StockTriton(repository, tmp_path).start()
    try:
        assert triton.served() == (["1"], "1")
        with PolicyClient(triton.url, MODEL_NAME) as client:
            assert rollout(client, repository, 1).smoke_passed  # serving: recorded
            assert publish(build_tactical_policy(tmp_path / "v2.pt", seed=2), repository) == 2
            assert rollout(client, repository, 2).changed
            assert triton.served() == (["2"], "2")
            report = rollback(client, repository)
        assert report.changed and read_state(repository, MODEL_NAME)["current"] == 1
        assert triton.served() == (["1"], "1")

        triton.stop()  # the container restarts: the newest folder is v2, the record says v1
        triton.start()
        assert triton.served() == (["1"], "1")
        pinned = parse_config(pinned_config_path(repository, MODEL_NAME, PINNED))
        assert list(pinned.version_policy.specific.versions) == [1]
    finally:
        triton.stop()


def test_serving_pin_rewrites_a_stale_pin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from services.cli import main

    model = tmp_path / MODEL_NAME
    model.mkdir()
    (model / "config.pbtxt").write_text(STOCK_CONFIG.read_text())
    write_state(tmp_path, MODEL_NAME, {**read_state(tmp_path, MODEL_NAME), "current": 5})
    argv = ["serving", "--triton-url", f"127.0.0.1:{free_port()}", "--repository",
            str(tmp_path), "--model-name", MODEL_NAME]
    monkeypatch.delenv(PINNED_CONFIG_ENV, raising=False)
    assert main([*argv, "--pin"]) == 2  # which name Triton loads is the deployment's to say
    assert PINNED_CONFIG_ENV in capsys.readouterr().err
    monkeypatch.setenv(PINNED_CONFIG_ENV, PINNED)
    main(argv)  # Triton is not there: exit 1, the pin still reported
    assert "--pin` rewrites it" in capsys.readouterr().out
    main([*argv, "--pin"])
    assert "--pin` rewrites it" not in capsys.readouterr().out
    pinned = parse_config(pinned_config_path(tmp_path, MODEL_NAME, PINNED))
    assert list(pinned.version_policy.specific.versions) == [5]
