"""Real Triton (tritonserver from nvidia-pytriton + python backend), no mocks.

Tests share one module-scoped server (`triton_server`); they run in file order and the hot-swap
test (which moves the served version to 2) comes after those that expect version 1.
"""

from __future__ import annotations

import json
import sysconfig
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import services.triton.server as server_mod
from services.triton.client import (
    PolicyClient,
    PolicyResult,
    TritonRequestError,
    TritonUnavailableError,
)
from services.triton.publisher import latest_version, list_versions, publish
from services.triton.server import TritonServer, TritonServerError, prepare_backend_dir
from tests.triton_fixtures import (
    MODEL_NAME,
    TritonSetup,
    build_tiny_policy,
    build_value_model,
    make_repository,
    random_boards,
    require_tritonserver,
    run_local,
    run_local_outputs,
    triton_server,  # noqa: F401  (pytest fixture)
)

pytestmark = [
    pytest.mark.timeout(120),
    # torch 2.13 deprecates TorchScript, which stays the serving format for now.
    pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"),
]


# --------------------------------------------------------------------------- serving


def test_infer_matches_local_torchscript(triton_server: TritonSetup) -> None:  # noqa: F811
    boards = random_boards(8, seed=1)
    with PolicyClient(triton_server.server.grpc_url) as client:
        assert client.is_ready()
        result = client.infer(boards)
    assert isinstance(result, PolicyResult)
    assert result.model_name == MODEL_NAME
    assert result.model_version == "1"
    assert result.logits.dtype == np.float32
    assert result.logits.shape == (8, 225)
    np.testing.assert_allclose(
        result.logits, run_local(triton_server.v1_model, boards), rtol=1e-5, atol=1e-5
    )
    # the config declares `value`; a policy-only model answers NaN ("no value head")
    assert result.values is not None and result.values.shape == (8,)
    assert result.values.dtype == np.float32 and np.isnan(result.values).all()


def test_batch_sizes_and_concurrent_clients(triton_server: TritonSetup) -> None:  # noqa: F811
    client = PolicyClient(triton_server.server.grpc_url)
    try:
        for n in (1, 2, 7, 64, 256):
            boards = random_boards(n, seed=n)
            got = client.infer(boards).logits
            np.testing.assert_allclose(
                got, run_local(triton_server.v1_model, boards), rtol=1e-5, atol=1e-5
            )
        # Several threads on one client: the dynamic batcher merges their requests into one
        # forward pass, and every answer must still come back to the right caller.
        boards = {i: random_boards(1 + i % 3, seed=100 + i) for i in range(8)}
        expected = {i: run_local(triton_server.v1_model, b) for i, b in boards.items()}
        errors: list[BaseException] = []

        def worker(i: int) -> None:
            try:
                for _ in range(15):
                    np.testing.assert_allclose(
                        client.infer(boards[i]).logits, expected[i], rtol=1e-5, atol=1e-5
                    )
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors[0]

        # Triton itself rejects a batch over max_batch_size (256).
        with pytest.raises(TritonRequestError, match="INVALID_ARGUMENT"):
            client.infer(random_boards(257))
        # Malformed input never leaves the client.
        with pytest.raises(TritonRequestError):
            client.infer(np.zeros((2, 9, 9), dtype=np.int8))
        with pytest.raises(TritonRequestError):
            client.infer(np.zeros((2, 15, 15), dtype=np.float32))
    finally:
        client.close()


def test_hot_swap_to_new_version_without_failed_requests(
    triton_server: TritonSetup,  # noqa: F811
) -> None:
    url = triton_server.server.grpc_url
    repository = triton_server.repository
    boards = random_boards(3, seed=7)
    v2_model = build_tiny_policy(triton_server.models_dir / "tiny-seed1.pt", seed=1)
    expected = {"1": run_local(triton_server.v1_model, boards), "2": run_local(v2_model, boards)}
    assert not np.allclose(expected["1"], expected["2"])

    client = PolicyClient(url, timeout_s=5.0)
    stop = threading.Event()
    answers: list[tuple[float, str]] = []
    failures: list[BaseException] = []

    def hammer() -> None:
        while not stop.is_set():
            try:
                sent = time.monotonic()
                result = client.infer(boards)
                np.testing.assert_allclose(
                    result.logits, expected[result.model_version], rtol=1e-5, atol=1e-5
                )
                answers.append((sent, result.model_version))
            except BaseException as exc:
                failures.append(exc)

    threads = [threading.Thread(target=hammer, daemon=True)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 10
        while len(answers) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert publish(v2_model, repository, MODEL_NAME, metadata={"seed": 1}) == 2
        client.load_model()
        loaded_at = time.monotonic()
        deadline = time.monotonic() + 10
        while sum(v == "2" for _, v in answers) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)

    assert not failures, f"{len(failures)} failed requests, first: {failures[0]!r}"
    versions = [v for _, v in answers]
    assert versions[0] == "1" and versions.count("1") >= 20
    assert versions.count("2") >= 20
    # Once load_model has returned, requests sent afterwards are answered by the new version.
    late = [round(t - loaded_at, 4) for t, v in answers if t > loaded_at and v != "2"]
    assert not late, f"v1 answered {len(late)} requests sent after load_model returned: {late[:5]}"
    # version_policy latest(1): v1 was unloaded.
    assert client.ready_versions() == ["2"]
    assert client.infer(boards).model_version == "2"
    client.close()


def test_value_model_serves_logits_and_value(triton_server: TritonSetup) -> None:  # noqa: F811
    """A network with a value head (TorchScript answering (logits, value)) published into the
    same model: Triton's `value` output is the local TorchScript's value, per request even when
    the dynamic batcher merges requests."""
    model = build_value_model(triton_server.models_dir / "value-seed0.pt", seed=0)
    version = publish(model, triton_server.repository, MODEL_NAME, metadata={"value": True})
    boards = random_boards(16, seed=3)
    logits, values = run_local_outputs(model, boards)
    assert values is not None and values.shape == (16,) and np.ptp(values) > 0
    with PolicyClient(triton_server.server.grpc_url, timeout_s=30.0) as client:
        client.load_model()
        result = client.infer(boards)
        assert result.model_version == str(version)
        np.testing.assert_allclose(result.logits, logits, rtol=1e-5, atol=1e-5)
        assert result.values is not None and result.values.shape == (16,)
        assert result.values.dtype == np.float32
        np.testing.assert_allclose(result.values, values, rtol=1e-5, atol=1e-6)
        assert (np.abs(result.values) <= 1).all()
        # concurrent requests of different sizes: each gets its own rows of both outputs
        parts = {i: random_boards(1 + i, seed=200 + i) for i in range(6)}
        expected = {i: run_local_outputs(model, b) for i, b in parts.items()}
        got: dict[int, PolicyResult] = {}
        threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, client.infer(parts[i])))
                   for i in parts]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        for i, (want_logits, want_values) in expected.items():
            np.testing.assert_allclose(got[i].logits, want_logits, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got[i].values, want_values, rtol=1e-5, atol=1e-6)


def test_a_config_without_value_still_serves_logits(triton_server: TritonSetup) -> None:  # noqa: F811
    """An older repository's config (or deploy/triton-stock's) declares `logits` only: the
    client asks for no output by name, so it works, and `values` is None."""
    from services.triton.publisher import POLICY_MODEL_PY
    from services.triton.rollout import config_json, read_model_config

    config = read_model_config(triton_server.repository, MODEL_NAME)
    assert [o.name for o in config.output] == ["logits", "value"]
    del config.output[1]
    name = f"{MODEL_NAME}__logits_only"
    model = triton_server.models_dir / "value-seed0.pt"  # made by the test above
    if not model.is_file():
        build_value_model(model, seed=0)
    files = {"file:1/model.pt": model.read_bytes(), "file:1/model.py": POLICY_MODEL_PY.read_bytes()}
    boards = random_boards(4, seed=9)
    with PolicyClient(triton_server.server.grpc_url, timeout_s=30.0) as client:
        client.load_model(name, config=config_json(config, [1], name=name), files=files)
        try:
            result = client.infer(boards, model_name=name)
        finally:
            client.unload_model(name)
    assert result.values is None
    np.testing.assert_allclose(result.logits, run_local_outputs(model, boards)[0],
                               rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- failures


def test_stopped_server_raises_unavailable(tmp_path: Path) -> None:
    require_tritonserver()
    repository = make_repository(tmp_path)
    publish(build_tiny_policy(tmp_path / "m.pt"), repository)
    server = TritonServer(repository, startup_timeout_s=60)
    with server:
        client = PolicyClient(server.grpc_url, timeout_s=2.0)
        assert client.infer(random_boards(1)).model_version == "1"
    assert not server.is_running()
    t0 = time.monotonic()
    with pytest.raises(TritonUnavailableError, match=r"UNAVAILABLE|DEADLINE"):
        client.infer(random_boards(1))
    assert time.monotonic() - t0 < 2.0 + 1.0
    assert not client.is_ready()
    client.close()
    # Nothing listens there at all: same error class.
    with (
        PolicyClient(f"127.0.0.1:{server_mod.free_port()}", timeout_s=1.0) as nobody,
        pytest.raises(TritonUnavailableError),
    ):
        nobody.infer(random_boards(1))


def test_start_errors_are_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_tritonserver()
    # A repository that does not exist: refused before anything is spawned.
    with pytest.raises(TritonServerError, match="not a directory"):
        TritonServer(tmp_path / "nope").start()

    # A model with a config but no version: tritonserver exits; the error carries its log.
    repository = make_repository(tmp_path / "empty")
    server = TritonServer(repository, startup_timeout_s=30)
    t0 = time.monotonic()
    with pytest.raises(TritonServerError) as info:
        server.start()
    assert time.monotonic() - t0 < 30
    message = str(info.value)
    assert "exited with code" in message and MODEL_NAME in message
    assert "version" in message.lower()  # Triton's own reason, from the log tail
    assert not server.is_running()

    # Python without a shared libpython cannot host the stub.
    real = sysconfig.get_config_var
    monkeypatch.setattr(
        sysconfig,
        "get_config_var",
        lambda name: 0 if name == "Py_ENABLE_SHARED" else real(name),
    )
    with pytest.raises(TritonServerError, match="enable-shared"):
        TritonServer(repository).start()


def test_missing_library_path_times_out_with_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without LD_LIBRARY_PATH the stub cannot start and the server hangs not-ready."""
    require_tritonserver()
    repository = make_repository(tmp_path)
    publish(build_tiny_policy(tmp_path / "m.pt"), repository)
    real_env = server_mod.server_environment

    def without_libs(binary: Path, base: dict[str, str] | None = None) -> dict[str, str]:
        env = real_env(binary, base)
        env.pop("LD_LIBRARY_PATH", None)
        return env

    monkeypatch.setattr(server_mod, "server_environment", without_libs)
    server = TritonServer(repository, startup_timeout_s=4.0)
    t0 = time.monotonic()
    with pytest.raises(TritonServerError) as info:
        server.start()
    elapsed = time.monotonic() - t0
    assert elapsed < 4.0 + 10.0  # timeout + bounded stop
    message = str(info.value)
    assert "not ready after 4.0 s" in message and "LD_LIBRARY_PATH" in message
    # The stub's own complaint comes from the server log tail.
    assert "cannot open shared object file" in message
    assert not server.is_running()


# --------------------------------------------------------------------------- publishing


def test_publish_is_atomic_and_numbered(tmp_path: Path) -> None:
    repository = tmp_path / "repo"  # no config yet: publish copies the tracked one
    model = build_tiny_policy(tmp_path / "m.pt")
    assert list_versions(repository) == []
    assert latest_version(repository) is None

    # A watcher checks that a version folder is complete whenever it is visible.
    incomplete: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        model_dir = repository / MODEL_NAME
        while not stop.is_set():
            for v in list_versions(repository):
                names = {p.name for p in (model_dir / str(v)).iterdir()}
                if not {"model.pt", "model.py", "metadata.json"} <= names:
                    incomplete.append(f"{v}: {sorted(names)}")
            time.sleep(0.001)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert publish(model, repository, metadata={"run": "a"}) == 1
        # Concurrent publishers get distinct, consecutive versions.
        got: list[int] = []
        workers = [
            threading.Thread(target=lambda: got.append(publish(model, repository)))
            for _ in range(4)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=60)
        assert sorted(got) == [2, 3, 4, 5]
    finally:
        stop.set()
        watcher.join(timeout=10)
    assert not incomplete, incomplete
    # Gaps and stray folders: the next version follows the highest numeric folder.
    (repository / MODEL_NAME / "9").mkdir()
    (repository / MODEL_NAME / "notes").mkdir()
    assert publish(model, repository) == 10

    model_dir = repository / MODEL_NAME
    assert (model_dir / "config.pbtxt").is_file()
    assert list_versions(repository) == [1, 2, 3, 4, 5, 9, 10]
    assert latest_version(repository) == 10
    meta = json.loads((model_dir / "1" / "metadata.json").read_text())
    assert meta["version"] == 1 and meta["run"] == "a" and meta["model_name"] == MODEL_NAME
    assert (model_dir / "1" / "model.pt").read_bytes() == model.read_bytes()
    assert "class TritonPythonModel" in (model_dir / "1" / "model.py").read_text()

    # A broken model is refused and leaves nothing behind.
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not torchscript")
    with pytest.raises(ValueError, match="TorchScript"):
        publish(bad, repository)
    assert latest_version(repository) == 10
    assert not list(model_dir.glob(".tmp-*"))


class _BadValue(torch.nn.Module):
    """Logits of the right shape, and a value of `width` per board (1-D when `width` is 0)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = boards.shape[0]
        logits = torch.zeros((n, 225))
        if self.width == 0:
            return logits, torch.zeros((n,), dtype=torch.float64)
        return logits, torch.zeros((n, self.width))


def test_validate_model_file_checks_the_value_head(tmp_path: Path) -> None:
    from services.triton.publisher import model_io, validate_model_file

    policy = build_tiny_policy(tmp_path / "tiny.pt")
    assert validate_model_file(policy) is False  # no value head
    assert validate_model_file(build_value_model(tmp_path / "value.pt")) is True
    # the tracked configs declare `value`, but the logits stay what model_io reports
    assert model_io(tmp_path, MODEL_NAME) == ((15, 15), 225)
    assert model_io(tmp_path, "go_policy") == ((4, 19, 19), 362)
    for width, message in ((2, r"value of shape \(2, 2\), expected \(2,\)"),
                           (0, "value is torch.float64")):
        bad = tmp_path / f"bad-value-{width}.pt"
        torch.jit.script(_BadValue(width)).save(str(bad))
        with pytest.raises(ValueError, match=message):
            validate_model_file(bad)
        repository = make_repository(tmp_path / f"r{width}")
        with pytest.raises(ValueError, match="value"):
            publish(bad, repository)
        assert list_versions(repository) == []


def test_prepare_backend_dir_is_idempotent(tmp_path: Path) -> None:
    require_tritonserver()
    backends = prepare_backend_dir(tmp_path / "triton")
    python = backends / "python"
    names = {p.name for p in python.iterdir()}
    assert names == {
        "libtriton_python.so",
        "triton_python_backend_utils.py",
        "triton_python_backend_stub",
    }
    stub = python / "triton_python_backend_stub"
    assert stub.stat().st_mode & 0o111
    before = stub.stat().st_ino
    assert prepare_backend_dir(tmp_path / "triton") == backends
    assert stub.stat().st_ino == before  # unchanged files are not copied again
