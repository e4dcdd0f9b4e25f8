"""Real Triton (tritonserver from nvidia-pytriton + python backend), no mocks.

Tests share one module-scoped server (`triton_server`); they run in file order and the hot-swap
test (which moves the served version to 2) comes after those that expect version 1.
"""

from __future__ import annotations

import json
import re
import sysconfig
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from services.games.go.game import GO
from services.games.gomoku.game import GOMOKU
from services.repository.publish import publish
from services.repository.versions import latest_version, list_versions
from services.triton import health_wait, installation, launcher, ports
from services.triton.client import (
    PolicyClient,
    PolicyResult,
    TritonRequestError,
    TritonUnavailableError,
)
from services.triton.installation import prepare_backend_dir
from services.triton.launcher import TritonServer
from services.triton.server_errors import TritonLoadError, TritonServerError
from tests.triton_fixtures import (
    MODEL_NAME,
    TritonSetup,
    build_tiny_policy,
    build_value_model,
    make_repository,
    random_boards,
    require_tritonserver,
    run_in_threads,
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
        def worker(i: int) -> None:
            for _ in range(15):
                np.testing.assert_allclose(
                    client.infer(boards[i]).logits, expected[i], rtol=1e-5, atol=1e-5
                )

        errors = run_in_threads(worker, 8, timeout_s=60)
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
    from services.repository.publish import BACKEND_SOURCE
    from services.triton.rollout import config_json, read_model_config

    config = read_model_config(triton_server.repository, MODEL_NAME)
    assert [o.name for o in config.output] == ["logits", "value"]
    del config.output[1]
    name = f"{MODEL_NAME}__logits_only"
    model = triton_server.models_dir / "value-seed0.pt"  # made by the test above
    if not model.is_file():
        build_value_model(model, seed=0)
    files = {"file:1/model.pt": model.read_bytes(), "file:1/model.py": BACKEND_SOURCE.read_bytes()}
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
        PolicyClient(f"127.0.0.1:{ports.free_port()}", timeout_s=1.0) as nobody,
        pytest.raises(TritonUnavailableError),
    ):
        nobody.infer(random_boards(1))


def test_a_loaded_version_slow_to_answer_ready_is_still_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded machine the readiness probe after a load can time out once (1 s) though
    Triton loaded the version: it is asked again, not refused. A version that never answers
    ready is refused after `READY_AFTER_LOAD_S`, with the reason."""
    require_tritonserver()
    repository = make_repository(tmp_path)
    publish(build_tiny_policy(tmp_path / "m.pt"), repository)
    real_ok = health_wait.http_ok
    misses = {"left": 0}

    def slow_ready(opener, url: str) -> bool:
        if url.endswith("/versions/1/ready") and misses["left"] > 0:
            misses["left"] -= 1
            return False  # what a probe that timed out answers
        return real_ok(opener, url)

    monkeypatch.setattr(health_wait, "http_ok", slow_ready)
    with TritonServer(repository, startup_timeout_s=60) as server:
        misses["left"] = 3
        server.load_version(MODEL_NAME, 1)
        assert misses["left"] == 0
        with PolicyClient(server.grpc_url, timeout_s=10.0) as client:
            assert client.infer(random_boards(1)).model_version == "1"
        misses["left"] = 10**6
        monkeypatch.setattr(launcher, "READY_AFTER_LOAD_S", 0.3)
        with pytest.raises(TritonLoadError, match=r"not ready 0\.3 s after its load"):
            server.load_version(MODEL_NAME, 1)


def test_start_errors_are_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_tritonserver()
    # A repository that does not exist: refused before anything is spawned.
    with pytest.raises(TritonServerError, match="not a directory"):
        TritonServer(tmp_path / "nope").start()

    # A model with a config but no version, even named: Triton starts without it, and the
    # skip says what to run to publish one.
    repository = make_repository(tmp_path / "empty")
    with TritonServer(repository, models=[MODEL_NAME], startup_timeout_s=30) as server:
        assert server.served == {}
        [skipped] = server.skipped
        assert skipped.model == MODEL_NAME and "make ingest && make train" in skipped.reason
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


def test_stub_numpy_2_is_refused_before_start(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy >= 2 in the stub's environment makes every output empty: refused up front."""
    version = installation.stub_numpy_version()
    assert version is not None and version.startswith("1.")  # the pinned 1.26.4 here
    installation.check_stub_numpy(version)  # accepted
    installation.check_stub_numpy(None)  # no numpy: the stub's own import error says so
    monkeypatch.setattr(installation, "stub_numpy_version", lambda: "2.5.2")
    server = TritonServer(make_repository(tmp_path))
    with pytest.raises(TritonServerError, match=r"numpy 2\.5\.2"):
        server.start()
    assert not server.is_running()


def test_missing_library_path_times_out_with_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without LD_LIBRARY_PATH the stub cannot start and the server hangs not-ready."""
    require_tritonserver()
    repository = make_repository(tmp_path)
    publish(build_tiny_policy(tmp_path / "m.pt"), repository)
    real_env = installation.server_environment

    def without_libs(binary: Path, base: dict[str, str] | None = None) -> dict[str, str]:
        env = real_env(binary, base)
        env.pop("LD_LIBRARY_PATH", None)
        return env

    monkeypatch.setattr(installation, "server_environment", without_libs)
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
    from services.repository.configs import model_io
    from services.repository.model_check import validate_model_file

    policy = build_tiny_policy(tmp_path / "tiny.pt")
    assert validate_model_file(policy) is False  # no value head
    assert validate_model_file(build_value_model(tmp_path / "value.pt")) is True
    # the tracked configs declare `value`, but the logits stay what model_io reports
    assert model_io(tmp_path, MODEL_NAME) == ((15, 15), 225)
    assert model_io(tmp_path, "go_policy") == ((4, -1, -1), -1)  # any board size
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


# --------------------------------------------------------------------------- Go board sizes


def test_go_io_takes_every_served_size_and_gomoku_stays_15x15() -> None:
    from services.triton.client import _as_boards, io_for, io_of_game

    go, gomoku = io_of_game("go"), io_of_game("gomoku")
    assert tuple(range(9, 20)) == go.board_sizes
    assert io_for("go_policy") == go and io_for("gomoku_policy__candidate") == gomoku
    for s in (9, 13, 19):
        assert go.accepts((4, s, s)) and go.n_moves_for((4, s, s)) == s * s + 1
        assert _as_boards(np.zeros((2, 4, s, s), np.int8), go).shape == (2, 4, s, s)
    assert (go.board_shape, go.n_moves) == ((4, 19, 19), 362)  # the default size
    for shape in ((4, 7, 7), (4, 21, 21), (4, 9, 13), (3, 9, 9), (9, 9)):
        assert not go.accepts(shape)
    with pytest.raises(TritonRequestError, match=r"S in 9\.\.19.*\(1, 4, 21, 21\)"):
        _as_boards(np.zeros((1, 4, 21, 21), np.int8), go)
    assert gomoku.accepts((15, 15)) and not gomoku.accepts((9, 9))
    assert gomoku.n_moves_for((15, 15)) == 225
    with pytest.raises(TritonRequestError, match=r"int8 \[N, 15, 15\]"):
        _as_boards(np.zeros((1, 9, 9), np.int8), gomoku)


class _Only19(torch.nn.Module):
    """A "Go policy" that is not fully convolutional: right on 19x19 only."""

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        return boards.float().flatten(1)[:, :362]


def test_validate_model_file_runs_variable_dims_at_19_and_9(tmp_path: Path) -> None:
    from services.models.weights import network
    from services.repository.configs import dims_accept, model_io
    from services.repository.model_check import check_shapes, validate_model_file
    from services.trainer.publish import export_served

    dims, n_moves = model_io(tmp_path, "go_policy")
    assert check_shapes(GO, dims, n_moves) == [((4, 19, 19), 362), ((4, 9, 9), 82)]
    assert check_shapes(GOMOKU, (15, 15), 225) == [((15, 15), 225)]
    assert dims_accept(dims, (4, 13, 13)) and not dims_accept(dims, (3, 13, 13))
    assert not dims_accept((4, 19, 19), (4, 9, 9))
    good = tmp_path / "go.pt"
    export_served(network("go_res_b2c32"), "go_res_b2c32", good)
    assert validate_model_file(good, GO, dims, n_moves) is False
    only19 = tmp_path / "only19.pt"
    torch.jit.script(_Only19()).save(str(only19))
    assert validate_model_file(only19, GO, (4, 19, 19), 362) is False  # a fixed 19x19 config
    with pytest.raises(ValueError, match=r"int8 \[2,4,9,9\] gave \(2, 324\), expected \(2, 82\)"):
        validate_model_file(only19, GO, dims, n_moves)
    repository = tmp_path / "repo"
    (repository / "go_policy").mkdir(parents=True)
    with pytest.raises(ValueError, match="expected"):  # publish checks both sizes too
        publish(only19, repository, "go_policy")
    assert list_versions(repository, "go_policy") == []
    assert publish(good, repository, "go_policy") == 1


class _FakeTensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class _FakeResponse:
    def __init__(self, output_tensors: list, error: str | None = None) -> None:
        self.outputs = {t.name(): t.as_numpy() for t in output_tensors}
        self.error = error


def _policy_model_in_process(monkeypatch: pytest.MonkeyPatch, version_dir: Path,
                             config_text: str):
    """services/triton/policy_model.py initialised here, as Triton's python stub would, with a
    stand-in for `triton_python_backend_utils` (tensors, responses, errors)."""
    import importlib.util
    import sys
    import types

    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    utils = types.ModuleType("triton_python_backend_utils")
    utils.Tensor = _FakeTensor
    utils.InferenceResponse = _FakeResponse
    utils.TritonError = str
    utils.get_input_tensor_by_name = lambda request, name: request.get(name)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", utils)
    source = Path(__file__).resolve().parents[1] / "services" / "triton" / "policy_model.py"
    spec = importlib.util.spec_from_file_location("policy_model_under_test", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    model = module.TritonPythonModel()
    model.initialize({
        "model_repository": str(version_dir.parent), "model_version": version_dir.name,
        "model_name": config.name, "model_config": json.dumps(
            json_format.MessageToDict(config, preserving_proto_field_name=True)),
    })
    return model


def test_policy_model_makes_one_forward_per_board_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One `execute` call holding 9x9 and 19x19 Go requests (as the dynamic batcher may hand
    them over): one forward pass per shape, every request answered with its own rows, equal
    to the TorchScript run here; a bad shape fails alone."""
    from services.models.weights import network
    from services.trainer.publish import export_served

    version_dir = tmp_path / "go_policy" / "1"
    version_dir.mkdir(parents=True)
    model_pt = version_dir / "model.pt"
    export_served(network("go_res_b2c32"), "go_res_b2c32", model_pt)
    served = (Path(__file__).resolve().parents[1] / "model_repository" / "go_policy"
              / "config.pbtxt").read_text()
    assert _policy_model_in_process(monkeypatch, version_dir, served).pass_move is True
    # without the generated config's declaration, logits that follow the board need the
    # game's pass from what the publisher records in the version's metadata, never guessed
    # from the shape
    config_text = re.sub(r"parameters: \{.*?\n\}\n", "", served, flags=re.S)
    assert "pass_move" not in config_text
    with pytest.raises(ValueError, match="pass_move"):
        _policy_model_in_process(monkeypatch, version_dir, config_text)
    (version_dir / "metadata.json").write_text(json.dumps({"pass_move": True}))
    model = _policy_model_in_process(monkeypatch, version_dir, config_text)
    assert model.board_shape == (4, -1, -1) and model.n_moves == -1 and model.send_value
    assert model.pass_move is True
    declared = config_text + 'parameters { key: "pass_move" value: { string_value: "false" } }\n'
    assert _policy_model_in_process(monkeypatch, version_dir, declared).pass_move is False

    forward, shapes = model.model, []

    def counting(x: torch.Tensor):
        shapes.append(tuple(x.shape))
        return forward(x)

    model.model = counting
    boards = [GO.sample_inputs(2, 9, seed=1), GO.sample_inputs(1, 19, seed=2),
              GO.sample_inputs(3, 9, seed=3), np.zeros((1, 3, 9, 9), np.int8),
              GO.sample_inputs(2, 13, seed=4)]
    responses = model.execute([{"boards": _FakeTensor("boards", b)} for b in boards])
    assert shapes == [(5, 4, 9, 9), (1, 4, 19, 19), (2, 4, 13, 13)]  # first-seen order
    for b, r in zip(boards, responses, strict=True):
        if b.shape[1] == 3:
            assert r.error is not None and "must be int8 [N, 4, ?, ?]" in r.error
            continue
        assert r.error is None
        s = b.shape[-1]
        assert r.outputs["logits"].shape == (len(b), s * s + 1)
        np.testing.assert_allclose(r.outputs["logits"], run_local(model_pt, b),
                                   rtol=1e-5, atol=1e-5)
        assert r.outputs["value"].shape == (len(b), 1) and np.isnan(r.outputs["value"]).all()

    # a config with a fixed logits width: boards whose network answer differs fail, alone
    fixed = config_text.replace("dims: [ -1 ]", "dims: [ 362 ]")
    model = _policy_model_in_process(monkeypatch, version_dir, fixed)
    nine, nineteen = model.execute([{"boards": _FakeTensor("boards", b)} for b in boards[:2]])
    assert nine.error is not None and "expected (2, 362)" in nine.error
    assert nineteen.error is None and nineteen.outputs["logits"].shape == (1, 362)
