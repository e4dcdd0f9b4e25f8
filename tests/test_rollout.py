"""Rollout and rollback on a real Triton under continuous load (no mocks).

One module-scoped server (`env`: v1 = `TacticalPolicy` seed 0 serving, a scripted network that
takes fives and blocks fours, published with stored positions as the train flow does; v2 the
same with seed 1). Tests run in file order and build on each other: the rollout flow moves
serving to v2, broken versions (v3 truncated, v4 a zip Triton cannot load, v5 NaN on the empty
board, v6 the garbage model: logits = board cells, NaN value) are refused and quarantined while
v2 keeps serving, a restarted Triton serves v2 again, then the rollback flow goes back to v1 and
a restart after it serves v1. Each version load starts a python stub that imports torch (2-5 s
idle, 15-30 s on a busy 2-core machine), so the file makes as few as it can. During every
rollout a `LoadProbe` thread sends unversioned requests in a tight loop and counts failures; the
figures are printed (``pytest -s``) as ``ROLLOUT-FIGURES {...}``.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.request
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from services import cli
from services.games.gomoku.game import GOMOKU, known_positions
from services.repository.publish import publish
from services.repository.quarantine import QUARANTINE_REASON
from services.repository.rollout_state import read_state, state_path
from services.repository.smoke_positions import SMOKE_POSITIONS_FILE, write_smoke_positions
from services.repository.version_files import check_version_files
from services.repository.versions import QUARANTINE_DIR, list_versions, quarantined_versions
from services.triton.client import PolicyClient, TritonError
from services.triton.launcher import TritonServer
from services.triton.rollout import (
    CANDIDATE_SUFFIX,
    RolloutError,
    config_json,
    current_version,
    read_model_config,
    rollout,
)
from services.triton.smoke import masked_policy, smoke_test, top1_hits
from tests.test_deploy_configs import (
    TRITON_HTTP_PORT,
    k8s_object,
    only_container,
    readiness_urls,
)
from tests.triton_fixtures import (
    MODEL_NAME,
    TinyPolicy,
    build_garbage_policy,
    build_tactical_policy,
    four_positions,
    make_repository,
    random_boards,
    require_tritonserver,
    run_local_outputs,
)

pytestmark = [
    pytest.mark.timeout(180),  # a version load is 2-5 s idle, 15-30 s on a busy 2-core box
    pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"),
]

BOARDS = random_boards(2, seed=11)


class LoadProbe:
    """Unversioned requests in a tight loop from one thread; every answer is checked against
    the local reference of the version that gave it (an unknown version is a failure)."""

    def __init__(self, url: str, expected: dict[str, np.ndarray]) -> None:
        self.client = PolicyClient(url, timeout_s=10.0)
        self.expected = expected
        self.answers: list[tuple[float, str]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                result = self.client.infer(BOARDS)
                want = self.expected.get(result.model_version)
                if want is None:
                    raise AssertionError(f"answered by unexpected v{result.model_version}")
                np.testing.assert_allclose(result.logits, want, rtol=1e-5, atol=1e-5)
                self.answers.append((sent, result.model_version))
            except Exception as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")

    def wait_for(self, version: str, n: int, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while sum(v == version for _, v in self.answers) < n:
            assert time.monotonic() < deadline, f"fewer than {n} answers from v{version}"
            assert self._thread.is_alive()
            time.sleep(0.01)

    def versions(self) -> list[str]:
        """The answering versions in order, runs collapsed: ["1", "2"] for a clean switch."""
        runs: list[str] = []
        for _, v in self.answers:
            if not runs or runs[-1] != v:
                runs.append(v)
        return runs

    def figures(self, what: str, seconds: float, report: dict | None = None) -> dict:
        by_version = dict(Counter(v for _, v in self.answers))
        out = {"what": what, "requests": len(self.answers) + len(self.failures),
               "failed": len(self.failures), "by_version": by_version, "order": self.versions(),
               "call_seconds": round(seconds, 2)}
        if report is not None:
            out["rollout_seconds"] = report["seconds"]
            out["phases"] = report["phases"]
        print(f"ROLLOUT-FIGURES {json.dumps(out)}")
        return out

    def __enter__(self) -> LoadProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        self.client.close()


STORED = four_positions(64, seed=0)  # the positions stored with the good versions


def _publish_tactical(path: Path, repo: Path, seed: int) -> int:
    """Publish a `TacticalPolicy` as the train flow would: stored positions, and the model's
    own top-1 on them in the metadata."""
    model = build_tactical_policy(path, seed=seed)
    positions = path.with_name(SMOKE_POSITIONS_FILE)
    write_smoke_positions(positions, *STORED)
    top1 = float(top1_hits(run_local_outputs(model, STORED[0])[0], *STORED, GOMOKU).mean())
    assert top1 > 0.7  # the scripted network completes and blocks most fours
    metadata = {"seed": seed, "smoke_positions": {"rows": len(STORED[1]), "top1": top1},
                "metrics": {"validation": {"top1": top1}}}
    return publish(model, repo, MODEL_NAME, metadata=metadata,
                   extra_files={SMOKE_POSITIONS_FILE: positions})


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict:
    require_tritonserver()
    root = tmp_path_factory.mktemp("rollout")
    repo = make_repository(root)
    models = root / "torchscript"
    assert _publish_tactical(models / "tactical-seed0.pt", repo, 0) == 1
    server = TritonServer(repo, log_path=root / "tritonserver.log", startup_timeout_s=120)
    env = {"url": None, "repo": repo, "root": root, "server": server.start()}
    try:
        # v2 is published once v1 serves (a start with no record serves the newest version)
        assert _publish_tactical(models / "tactical-seed1.pt", repo, 1) == 2
        env["expected"] = {v: run_local_outputs(repo / MODEL_NAME / v / "model.pt", BOARDS)[0]
                           for v in ("1", "2")}
        assert not np.allclose(env["expected"]["1"], env["expected"]["2"])
        env["url"] = server.grpc_url
        with PolicyClient(server.grpc_url) as client:
            env["client"] = client
            yield env
    finally:
        env["server"].stop()  # the one running now (`_restart` replaces it)


def _assert_only_serving(client: PolicyClient, version: int) -> None:
    assert client.ready_versions() == [str(version)]
    assert current_version(client) == version
    for other in range(1, 9):
        assert client.is_version_ready(other) == (other == version), other
    assert not client.is_version_ready(version, MODEL_NAME + CANDIDATE_SUFFIX)


# --------------------------------------------------------------------------- no server needed


def test_config_override_changes_only_the_version_policy(env: dict) -> None:
    on_disk = read_model_config(env["repo"], MODEL_NAME)
    assert on_disk.version_policy.WhichOneof("policy_choice") == "latest"
    for versions, name in (([2], None), ([3, 5], "other")):
        parsed = json_format.Parse(config_json(on_disk, versions, name),
                                   model_config_pb2.ModelConfig())
        assert list(parsed.version_policy.specific.versions) == versions
        assert parsed.name == (name or MODEL_NAME)
        parsed.ClearField("version_policy")
        parsed.name = on_disk.name
        reference = model_config_pb2.ModelConfig()
        reference.CopyFrom(on_disk)
        reference.ClearField("version_policy")
        assert parsed == reference  # max_batch_size, io, batching, instances: all unchanged


def test_known_positions_and_masked_policy() -> None:
    positions = known_positions()
    boards = np.stack(list(positions.values()))
    assert boards.dtype == np.int8 and boards.shape[1:] == (15, 15)
    logits = np.random.default_rng(0).normal(size=(len(boards), 225)).astype(np.float32)
    policy = masked_policy(logits, boards)
    np.testing.assert_allclose(policy.sum(axis=1), 1.0, atol=1e-9)
    assert not policy[boards.reshape(len(boards), -1) != 0].any()
    # black to move (4 stones each) in the open-four position
    four = positions["open four"]
    assert (four == 1).sum() == (four == 2).sum() == 4


def test_file_checks_name_the_file(tmp_path: Path, env: dict) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(env["repo"] / MODEL_NAME / "2", repo / MODEL_NAME / "2")
    files, notes = check_version_files(repo, MODEL_NAME, 2)
    assert set(files) == {"model.pt", "model.py", "metadata.json", SMOKE_POSITIONS_FILE}
    assert not notes
    with pytest.raises(ValueError, match="version 7 is not published"):
        check_version_files(repo, MODEL_NAME, 7)
    pt = repo / MODEL_NAME / "2" / "model.pt"
    data = bytearray(pt.read_bytes())
    data[len(data) // 3] ^= 0xFF  # one flipped byte inside a member
    pt.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"version 2: .*2/model\.pt (is corrupt|is not a Tor"
                                         r"chScript|does not match the sha256)"):
        check_version_files(repo, MODEL_NAME, 2)
    (repo / MODEL_NAME / "2" / "model.py").unlink()
    with pytest.raises(ValueError, match=r"2/model\.py missing"):
        check_version_files(repo, MODEL_NAME, 2)


# --------------------------------------------------------------------------- rollout, rollback


def _flow_artifact(state) -> str:
    """The markdown artifact of a flow run (Prefect's own result records left out)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as pc:
        found = pc.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
    markdown = [a for a in found if a.type == "markdown"]
    assert len(markdown) == 1, found
    return str(markdown[0].data)


@pytest.mark.timeout(300)  # the session's Prefect test server may start here (slow: migration)
@pytest.mark.usefixtures("prefect_harness")
def test_rollout_flow_switches_traffic_with_zero_failed_requests(env: dict) -> None:
    from flows.rollout import rollout_flow

    client, repo = env["client"], env["repo"]
    assert current_version(client) == 1
    with LoadProbe(env["url"], env["expected"]) as probe:
        probe.wait_for("1", 30)
        t0 = time.monotonic()
        # version None: the newest published version, v2
        state = rollout_flow(triton_url=env["url"], repository=str(repo), return_state=True)
        done = time.monotonic()
        probe.wait_for("2", 30)
    out = state.result()
    figures = probe.figures("rollout v1 -> v2 (rollout flow)", done - t0, out)
    assert not probe.failures, f"{len(probe.failures)} failed, first: {probe.failures[0]}"
    assert figures["order"] == ["1", "2"]  # switched once, never back
    assert not [t for t, v in probe.answers if t > done and v != "2"]
    assert (out["action"], out["previous"], out["current"]) == ("rollout", 1, 2)
    assert out["changed"] and out["smoke_passed"] and out["unloaded"] == [1]
    checks = {c["name"]: c for c in out["smoke"]}
    assert {"model version", "finite", "masked policy", "batch consistency", "serving"} <= set(
        checks)
    # what the model knows, blocking and passed: tactics, value, stored top-1, agreement
    for name in ("tactics", "value", "top-1 (stored positions)", "agreement with serving"):
        assert checks[name]["blocking"] and checks[name]["passed"], checks[name]
        assert not checks[name]["skipped"]
    assert "vs serving v1's" in checks["agreement with serving"]["detail"]
    text = _flow_artifact(state)
    assert "Rollout: gomoku_policy v1 -> v2" in text and "| finite | pass |" in text
    _assert_only_serving(client, 2)
    record = read_state(repo)
    assert (record["current"], record["previous"]) == (2, 1)
    assert record["history"][-1]["outcome"] == "serving"
    assert not list(state_path(repo).parent.glob(".rollout.json.*"))  # atomic write, no leftovers

    # A refused version fails the flow run, says why in the artifact, and changes nothing.
    refused = rollout_flow(triton_url=env["url"], repository=str(repo), version=9,
                           return_state=True)
    assert refused.is_failed()
    text = _flow_artifact(refused)
    assert "v9 refused" in text and "not published" in text and "Still serving: **v2**" in text
    _assert_only_serving(client, 2)


def _assert_quarantined(repo: Path, version: int, reason: str) -> dict:
    """`version` left the numeric folders for quarantine/<version>/ with its reason."""
    folder = repo / MODEL_NAME / QUARANTINE_DIR / str(version)
    assert not (repo / MODEL_NAME / str(version)).exists()
    assert version not in list_versions(repo, MODEL_NAME)
    assert (folder / "model.pt").is_file()
    record = json.loads((folder / QUARANTINE_REASON).read_text())
    assert reason in record["reason"] and record["version"] == version and record["at"]
    event = [e for e in read_state(repo)["history"] if e["version"] == version][-1]
    assert event["outcome"] == "refused" and event["quarantined"] == f"quarantine/{version}"
    return record


def test_corrupt_versions_are_refused_while_v2_serves(env: dict) -> None:
    client, repo = env["client"], env["repo"]
    good = repo / MODEL_NAME / "2"
    # v3: written by hand (no publisher), model.pt truncated -> refused before any load
    v3 = repo / MODEL_NAME / "3"
    v3.mkdir()
    shutil.copyfile(good / "model.py", v3 / "model.py")
    data = (good / "model.pt").read_bytes()
    (v3 / "model.pt").write_bytes(data[: len(data) // 2])
    # v4: an intact zip whose metadata matches, but no TorchScript -> refused by Triton's load
    v4 = repo / MODEL_NAME / "4"
    v4.mkdir()
    shutil.copyfile(good / "model.py", v4 / "model.py")
    with zipfile.ZipFile(v4 / "model.pt", "w") as z:
        z.writestr("archive/data.pkl", b"not a pickle")
    import hashlib

    sha = hashlib.sha256((v4 / "model.pt").read_bytes()).hexdigest()
    (v4 / "metadata.json").write_text(json.dumps({"version": 4, "sha256": sha}))

    with LoadProbe(env["url"], env["expected"]) as probe:
        probe.wait_for("2", 20)
        t0 = time.monotonic()
        with pytest.raises(RolloutError) as info3:
            rollout(client, repo, 3)
        t3 = time.monotonic() - t0
        t0 = time.monotonic()
        with pytest.raises(RolloutError) as info4:
            rollout(client, repo, 4)
        t4 = time.monotonic() - t0
        with pytest.raises(RolloutError, match="version 9 is not published"):
            rollout(client, repo, 9)
        probe.wait_for("2", len(probe.answers) + 20)
    probe.figures("refused v3 (truncated) and v4 (not TorchScript)", t3 + t4)
    assert not probe.failures, probe.failures[0]
    assert probe.versions() == ["2"]
    message3 = str(info3.value)
    assert "v3 refused" in message3 and "3/model.pt" in message3
    assert "truncated or corrupt" in message3
    message4 = str(info4.value)
    assert "v4 refused" in message4 and "Triton cannot load" in message4
    assert f"{MODEL_NAME}/4" in message4 and "UNAVAILABLE" in message4
    assert info4.value.serving == 2
    _assert_only_serving(client, 2)
    # refused and accepted candidates (loaded, failed, unloaded) leave the server ready by
    # what the Kubernetes and compose probes ask: the served model's readiness URL, and the
    # launcher's /v2/health/ready (strict readiness would read 400 here for good)
    probe = only_container(k8s_object("Deployment", "triton"))["readinessProbe"]["exec"]
    urls = [u.replace(f"localhost:{TRITON_HTTP_PORT}", env["server"].http_url)
            for u in readiness_urls(probe["command"][-1])]
    ours = [u for u in urls if u.endswith(f"/v2/models/{MODEL_NAME}/ready")]
    assert len(ours) == 1
    for url in [*ours, f"http://{env['server'].http_url}/v2/health/ready"]:
        with urllib.request.urlopen(url, timeout=5) as answer:
            assert answer.status == 200, url
    state = read_state(repo)
    assert (state["current"], state["previous"]) == (2, 1)
    refused = [e for e in state["history"] if e["outcome"] == "refused"]
    assert [e["version"] for e in refused] == [9, 3, 4, 9]
    # the version's own faults: quarantined; "not published" moves nothing
    _assert_quarantined(repo, 3, "truncated or corrupt")
    _assert_quarantined(repo, 4, "Triton cannot load")
    assert "quarantined" not in refused[0] and "quarantined" not in refused[-1]
    assert info3.value.quarantined == "quarantine/3"
    assert "moved to `quarantine/3`" in info3.value.to_markdown()
    with pytest.raises(RolloutError, match=r"version 3 is quarantined: version 3: .*truncated"):
        rollout(client, repo, 3)


class NaNOnEmptyBoard(torch.nn.Module):
    """A TinyPolicy whose logits are NaN for the empty board only (0 stones / 0 stones)."""

    def __init__(self) -> None:
        super().__init__()
        self.policy = TinyPolicy()

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        stones = (boards != 0).sum(dim=(1, 2)).float().unsqueeze(1)
        return self.policy(boards) * (stones / stones)


def test_nan_version_is_refused_by_the_smoke_test(env: dict, tmp_path: Path) -> None:
    client = env["client"]
    path = tmp_path / "nan.pt"
    torch.jit.script(NaNOnEmptyBoard().eval()).save(str(path))
    # The publisher runs it on the empty board and refuses it; published unchecked it is v5.
    with pytest.raises(ValueError, match="NaN or Inf logits"):
        publish(path, env["repo"], MODEL_NAME)
    assert publish(path, env["repo"], MODEL_NAME, validate=False) == 5
    with LoadProbe(env["url"], env["expected"]) as probe:  # v5 answering would be a failure
        probe.wait_for("2", 20)
        t0 = time.monotonic()
        with pytest.raises(RolloutError) as info:
            rollout(client, env["repo"], 5)
        seconds = time.monotonic() - t0
        probe.wait_for("2", len(probe.answers) + 20)
    probe.figures("refused v5 (NaN)", seconds)
    assert not probe.failures, probe.failures[0]
    assert probe.versions() == ["2"]
    error = info.value
    assert "v5 refused" in str(error) and "smoke test failed" in str(error)
    assert "NaN" in str(error) and "empty" in str(error)
    failed = {c.name for c in error.smoke if not c.passed}
    # the python model refuses to answer NaN ("answers"; an older model.py copy answers it
    # and "finite" fails): refused either way, with the board named
    assert failed & {"finite", "answers"}
    assert "Still serving: **v2**" in error.to_markdown()
    _assert_only_serving(client, 2)
    _assert_quarantined(env["repo"], 5, "smoke test failed")


def test_garbage_version_is_refused_by_what_the_model_knows(env: dict, tmp_path: Path) -> None:
    """Logits equal to the board cells (uniform over the empty points) and a NaN value (v6):
    refused. The same logits with a finite value (v7) pass every shape, finiteness and
    consistency check; tactics, stored top-1 and the agreement with v2 refuse it."""
    client, repo = env["client"], env["repo"]
    garbage = build_garbage_policy(tmp_path / "garbage.pt")
    with pytest.raises(ValueError, match="NaN or Inf value"):  # the publisher refuses it
        publish(garbage, repo, MODEL_NAME)
    positions = tmp_path / SMOKE_POSITIONS_FILE
    write_smoke_positions(positions, *STORED)
    claimed = json.loads((repo / MODEL_NAME / "2" / "metadata.json").read_text())
    claimed = {k: claimed[k] for k in ("smoke_positions", "metrics")}
    assert publish(garbage, repo, MODEL_NAME, validate=False, metadata=claimed,
                   extra_files={SMOKE_POSITIONS_FILE: positions}) == 6
    finite = build_garbage_policy(tmp_path / "garbage-finite.pt", value=0.0)
    assert publish(finite, repo, MODEL_NAME, metadata=claimed,
                   extra_files={SMOKE_POSITIONS_FILE: positions}) == 7  # validated: passes
    with LoadProbe(env["url"], env["expected"]) as probe:
        probe.wait_for("2", 20)
        t0 = time.monotonic()
        with pytest.raises(RolloutError) as info6:
            rollout(client, repo, 6)
        with pytest.raises(RolloutError) as info7:
            rollout(client, repo, 7)
        seconds = time.monotonic() - t0
        probe.wait_for("2", len(probe.answers) + 20)
    probe.figures("refused v6 and v7 (garbage: logits = cells; NaN / finite value)", seconds)
    assert not probe.failures, probe.failures[0]
    assert probe.versions() == ["2"]
    failed6 = {c.name for c in info6.value.smoke if c.blocking and not c.passed}
    assert failed6 & {"answers", "value"}, info6.value.reason  # NaN: not answered, or refused
    checks = {c.name: c for c in info7.value.smoke}
    failed = {name for name, c in checks.items() if c.blocking and not c.passed}
    assert failed == {"tactics", "top-1 (stored positions)", "agreement with serving"}
    for name in ("model version", "shape", "finite", "masked policy", "batch consistency",
                 "deterministic", "value"):
        assert checks[name].passed, checks[name]
    assert "not in the top 5" in checks["tactics"].detail
    _assert_only_serving(client, 2)
    _assert_quarantined(repo, 6, "smoke test failed")
    record = _assert_quarantined(repo, 7, "smoke test failed")
    assert {c["name"] for c in record["smoke"]} >= {"tactics", "agreement with serving"}


def test_versions_without_stored_positions_get_those_checks_as_not_checked(env: dict) -> None:
    checks, _ = smoke_test(env["client"], MODEL_NAME, 2, stored=None,
                           serving_model=MODEL_NAME, serving_version=1)
    by_name = {c.name: c for c in checks}
    for name in ("top-1 (stored positions)", "agreement with serving"):
        check = by_name[name]
        assert check.skipped and not check.blocking
        assert f"no {SMOKE_POSITIONS_FILE} in the version folder" in check.detail
    assert by_name["tactics"].passed and by_name["tactics"].blocking


def _restart(env: dict) -> None:
    """Stop Triton and start it again on the same ports and repository."""
    old = env["server"]
    grpc_port, http_port = old.grpc_port, old.http_port
    old.stop()
    env["server"] = TritonServer(env["repo"], grpc_port=grpc_port, http_port=http_port,
                                 log_path=env["root"] / "tritonserver-restart.log",
                                 startup_timeout_s=120).start()


@pytest.mark.timeout(300)
def test_refused_versions_never_serve_after_a_restart(env: dict) -> None:
    repo = env["repo"]
    assert quarantined_versions(repo, MODEL_NAME) == [3, 4, 5, 6, 7]
    assert list_versions(repo, MODEL_NAME) == [1, 2]
    _restart(env)
    _assert_only_serving(env["client"], 2)
    result = env["client"].infer(BOARDS)
    assert result.model_version == "2"
    np.testing.assert_allclose(result.logits, env["expected"]["2"], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- CLI and flows


def test_cli_refuses_and_reports(env: dict, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--triton-url", env["url"], "--repository", str(env["repo"])]
    assert cli.main(["rollout", *common, "--version", "3"]) == 1
    refused = capsys.readouterr()
    assert "version 3 is quarantined" in refused.err and "truncated or corrupt" in refused.err
    assert refused.out == ""  # the refusal is an error: stderr only
    # the serving version: smoke-tested, nothing changes
    assert cli.main(["rollout", *common, "--version", "3", "--json"]) == 1
    assert capsys.readouterr().out == ""  # with --json, stdout is JSON or nothing
    assert cli.main(["rollout", *common, "--version", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] is False and report["smoke_passed"] and report["current"] == 2
    assert cli.main(["serving", *common, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["serving"] == 2 and status["recorded_current"] == 2
    assert status["recorded_previous"] == 1 and status["published"] == [1, 2]
    assert status["quarantined"] == [3, 4, 5, 6, 7]
    assert cli.main(["serving", *common]) == 0
    text = capsys.readouterr().out
    assert "None" not in text
    assert "gomoku_policy: Triton serves v2; recorded current v2, previous v1" in text
    assert "quarantined: v3, v4, v5, v6, v7" in text
    assert "v5 refused (smoke test failed: " in text and "v2 kept serving; moved to " \
        "quarantine/5" in text
    assert "v7 refused (smoke test failed: tactics: " in text
    _assert_only_serving(env["client"], 2)


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("prefect_harness")
def test_rollback_flow_restores_previous_with_zero_failed_requests(env: dict) -> None:
    from flows.rollout import rollback_flow

    client, repo = env["client"], env["repo"]
    with LoadProbe(env["url"], env["expected"]) as probe:
        probe.wait_for("2", 30)
        t0 = time.monotonic()
        state = rollback_flow(triton_url=env["url"], repository=str(repo), return_state=True)
        done = time.monotonic()
        probe.wait_for("1", 30)
    out = state.result()
    figures = probe.figures("rollback v2 -> v1 (rollback flow)", done - t0, out)
    assert not probe.failures, f"{len(probe.failures)} failed, first: {probe.failures[0]}"
    assert figures["order"] == ["2", "1"]  # switched once, never back
    assert not [t for t, v in probe.answers if t > done and v != "1"]
    assert (out["action"], out["previous"], out["current"]) == ("rollback", 2, 1)
    assert out["smoke_passed"] and out["unloaded"] == [2]
    assert "Rollback: gomoku_policy v2 -> v1" in _flow_artifact(state)
    _assert_only_serving(client, 1)
    record = read_state(repo)
    assert (record["current"], record["previous"]) == (1, 2)  # a second rollback goes back to 2
    outcomes = [(e["action"], e["version"], e["outcome"]) for e in record["history"]]
    assert outcomes[0] == ("rollout", 2, "serving") and outcomes[-1] == ("rollback", 1, "serving")
    assert {o for _, _, o in outcomes[1:-1]} == {"refused"}
    checks = {c["name"]: c for c in out["smoke"]}
    assert not checks["agreement with serving"]["blocking"]  # going back is on purpose
    assert list_versions(repo, MODEL_NAME) == [1, 2]  # v2 rolled back, not quarantined


@pytest.mark.timeout(300)
def test_rolled_back_version_stays_out_after_a_restart(env: dict,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """v2 is the newest published folder, but the record says v1: a restart serves v1."""
    _restart(env)
    _assert_only_serving(env["client"], 1)
    assert cli.main(["serving", "--triton-url", env["url"], "--repository",
                     str(env["repo"])]) == 0
    assert "rolled back v2 -> v1" in capsys.readouterr().out


def test_publish_never_reuses_a_quarantined_number(env: dict, tmp_path: Path) -> None:
    assert _publish_tactical(tmp_path / "tactical-seed2.pt", env["repo"], 2) == 8


def test_a_serving_version_that_fails_its_check_is_unloaded_and_never_current(
        env: dict, tmp_path: Path) -> None:
    """A version loaded outside `rollout` (the launcher serves the newest published one when
    nothing is recorded) and then rolled out was refused but kept serving, and was recorded
    as current, so a restart served it again."""
    client, repo = env["client"], env["repo"]
    restore = current_version(client)
    path = tmp_path / "nan-serving.pt"
    torch.jit.script(NaNOnEmptyBoard().eval()).save(str(path))
    bad = publish(path, repo, MODEL_NAME, validate=False)
    client.load_model(MODEL_NAME,
                      config=config_json(read_model_config(repo, MODEL_NAME), [bad]))
    assert current_version(client) == bad  # serving, never checked
    with pytest.raises(RolloutError, match="already serves but fails the smoke test") as info:
        rollout(client, repo, bad)
    assert "unloaded, nothing serves" in str(info.value)
    assert current_version(client) is None  # a refused model never serves
    assert read_state(repo, MODEL_NAME)["current"] != bad
    _assert_quarantined(repo, bad, "already serves but fails the smoke test")
    rollout(client, repo, restore)  # back to what served, for the tests after this one
    _assert_only_serving(client, restore)


def test_a_version_whose_model_py_changes_during_the_rollout_is_refused(
        env: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-read before the switch compared only model.pt, but Triton loads the whole
    folder from disk, model.py included."""
    import services.triton.rollout as rollout_mod

    client, repo = env["client"], env["repo"]
    serving = current_version(client)
    version = _publish_tactical(tmp_path / "tactical-seed3.pt", repo, 3)
    reads = []
    real_check = rollout_mod.check_version_files

    def model_py_edited_after_the_smoke_test(*args, **kwargs):
        files, notes = real_check(*args, **kwargs)
        reads.append(files)
        if len(reads) == 2:  # the re-read just before the switch
            files = {**files, "model.py": files["model.py"] + b"\n# edited\n"}
        return files, notes

    monkeypatch.setattr(rollout_mod, "check_version_files", model_py_edited_after_the_smoke_test)
    with pytest.raises(RolloutError, match=r"model\.py changed during the rollout"):
        rollout(client, repo, version)
    assert len(reads) == 2
    _assert_only_serving(client, serving)


class _SwitchLandsLateThenNoRestore:
    """The real client, except that the switch to the candidate loads it and still fails (a
    load that finished after its deadline), and every later load of the model fails outright
    (Triton will not restore what served)."""

    def __init__(self, client: PolicyClient) -> None:
        self._client = client
        self.switch_loads = 0

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def load_model(self, model_name: str, config: str | None = None, **kwargs) -> None:
        if model_name != MODEL_NAME:  # the candidate's own name: the smoke test's load
            return self._client.load_model(model_name, config=config, **kwargs)
        self.switch_loads += 1
        if self.switch_loads == 1:
            self._client.load_model(model_name, config=config, **kwargs)
            raise TritonError("load of the switch: deadline exceeded")
        raise TritonError("repository unavailable")


def test_a_switch_that_lands_after_its_deadline_and_cannot_be_undone_leaves_nothing_serving(
        env: dict, tmp_path: Path) -> None:
    """The refused version must not answer: when the version before it cannot be restored,
    the refused one is unloaded (nothing serves) and the record keeps what it said."""
    client, repo = env["client"], env["repo"]
    serving = current_version(client)
    recorded = read_state(repo, MODEL_NAME)["current"]
    version = _publish_tactical(tmp_path / "tactical-seed4.pt", repo, 4)
    late = _SwitchLandsLateThenNoRestore(client)
    with pytest.raises(RolloutError, match=rf"could not switch to v{version}") as info:
        rollout(late, repo, version)  # type: ignore[arg-type]
    assert late.switch_loads == 2  # the switch, then the failed restore of v{serving}
    assert f"v{serving} could not be restored: unloaded, nothing serves" in str(info.value)
    assert current_version(client) is None  # a refused model never serves
    state = read_state(repo, MODEL_NAME)
    assert state["current"] == recorded and state["history"][-1]["outcome"] == "refused"
    rollout(client, repo, serving)  # back to what served, for the tests after this one
    _assert_only_serving(client, serving)
