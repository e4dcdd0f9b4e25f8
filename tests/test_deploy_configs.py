"""Static checks of the deployment files: Triton model configs, compose, Dockerfile, Kubernetes.

No Docker engine or cluster is needed. What is checked:

* every ``config.pbtxt`` under ``model_repository/`` and ``deploy/`` parses into Triton's
  ``ModelConfig`` protobuf and describes the policy the trainer exports (int8 boards [15,15] ->
  fp32 logits [225], batching up to 256, newest version only; for ``go_policy``: compact Go
  inputs int8 [4,-1,-1] -> fp32 logits [-1], any board size, in the embedded config, and
  [4,19,19] -> [362] in the stock one); every config declares the value head's output too
  (fp32 ``value`` [1]: the default networks have one; the stock ones reshape the model's [N]),
  and a policy-only variant of the stock ones parses; the embedded
  and stock (PyTorch backend) configs of each model otherwise agree (the stock dims being one
  of the sizes the embedded -1 dims take);
* the stock config's tensor names bind to the exported TorchScript the way the PyTorch backend
  binds them, and the embedded ``tritonserver`` (Triton 2.51, no PyTorch backend inside)
  accepts the whole config and stops only at the missing backend library;
* every YAML file under ``deploy/`` loads; the Kubernetes objects carry the GPU request, probes,
  selectors and autoscaler they need; compose refers to files that exist; every command-line
  flag the manifests pass to the search service (or to tritonserver, when the binary is
  installed) is one the program accepts;
* who reaches what: Triton publishes no port in compose (an internal network shared with the
  search service and the jobs) and a NetworkPolicy lets only the search pods and the labelled
  job pods reach its HTTP/gRPC APIs in Kubernetes; compose publishes on 127.0.0.1 by default;
  the search service runs with TLS and a token everywhere (its command lines pass its own
  argument check, which refuses 0.0.0.0 without them), and the probes ask the health-only port
  for "" (liveness) and the SearchService name (readiness).
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose.yaml"
MODEL_NAME = "gomoku_policy"
EMBEDDED_CONFIG = ROOT / "model_repository" / MODEL_NAME / "config.pbtxt"
STOCK_CONFIG = DEPLOY / "triton-stock" / MODEL_NAME / "config.pbtxt"
GO_MODEL_NAME = "go_policy"
GO_EMBEDDED_CONFIG = ROOT / "model_repository" / GO_MODEL_NAME / "config.pbtxt"
GO_STOCK_CONFIG = DEPLOY / "triton-stock" / GO_MODEL_NAME / "config.pbtxt"
# per model: (input dims of one board, logits per board) at the model's default size
CAPTURE_EMBEDDED_CONFIG = ROOT / "model_repository" / "capture_policy" / "config.pbtxt"
MODEL_IO = {MODEL_NAME: ([15, 15], 225), GO_MODEL_NAME: ([4, 19, 19], 362),
            "capture_policy": ([5, 5], 25)}
# configs with variable dims (-1): the embedded go_policy takes every board size, its logits
# follow the board (S * S + 1); the stock one stays 19x19
VARIABLE_IO = {GO_EMBEDDED_CONFIG: ([4, -1, -1], -1), CAPTURE_EMBEDDED_CONFIG: ([-1, -1], -1)}
CONFIG_FILES = sorted(
    [*(ROOT / "model_repository").rglob("config.pbtxt"), *DEPLOY.rglob("config.pbtxt")]
)
YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])

BOARD_SIZE = 15
MAX_BATCH_SIZE = 256
SEARCH_PORT = 50051
SEARCH_HEALTH_PORT = 50052
SEARCH_METRICS_PORT = 50053
SEARCH_SERVICE_NAME = "movepred.v1.SearchService"
TOKEN_ENV = "MOVEPRED_TOKEN"
TRITON_CLIENT_LABEL = ("movepred.io/triton-client", "true")
TRITON_HTTP_PORT = 8000
TRITON_GRPC_PORT = 8001


# ---------------------------------------------------------------------------------- helpers
def parse_config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def load_yaml_docs(path: Path) -> list[Any]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def flag_names(argv: list[str]) -> list[str]:
    """``--name`` of every flag in an argv list (``--a=1`` and ``--a 1`` forms)."""
    return [tok.split("=", 1)[0] for tok in map(str, argv) if tok.startswith("--")]


def flag_value(argv: list[str], name: str) -> str | None:
    argv = [str(a) for a in argv]
    for i, tok in enumerate(argv):
        if tok == name and i + 1 < len(argv):
            return argv[i + 1]
        if tok.startswith(name + "="):
            return tok.split("=", 1)[1]
    return None


@functools.cache
def search_server_help() -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "services.search.server", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def assert_search_argv_is_accepted(argv: list[str], where: str,
                                   monkeypatch: pytest.MonkeyPatch) -> Any:
    """The search service's own argument check passes on `argv` (python -m ... dropped): with
    --host 0.0.0.0 that means TLS and a token are given (no --insecure)."""
    from services.search import auth, server

    assert argv[:3] == ["python", "-m", "services.search.server"], where
    assert "--insecure" not in argv, f"{where}: runs without TLS/token protection"
    monkeypatch.setenv(TOKEN_ENV, "test-token")
    # the secret files exist in the container only: a token file reads as a token
    monkeypatch.setattr(auth, "read_token_file", lambda path: "test-token")
    args = server._parse_args([str(a) for a in argv[3:]])
    assert args.tls is not None and args.token, where
    return args


def assert_search_models_are_loaded(args: Any, triton_argv: list[str], where: str) -> None:
    """Every model the search service asks for is one Triton loads: readiness
    (movepred.v1.SearchService) waits for every configured game's model, so a game whose model
    Triton never loads would keep the service out of rotation for good."""
    loaded = {a.split("=", 1)[1] for a in triton_argv if str(a).startswith("--load-model=")}
    wanted = {m for m in (args.model, args.go_model) if m}
    assert wanted <= loaded, f"{where}: asks Triton for {sorted(wanted - loaded)}, not loaded"


def assert_search_flags_exist(argv: list[str], where: str) -> None:
    help_text = search_server_help()
    flags = flag_names(argv)
    assert flags, f"{where}: no flags passed to the search service"
    for flag in flags:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), (
            f"{where}: {flag} is not a flag of services.search.server"
        )


@functools.cache
def readiness_urls(probe: str) -> list[str]:
    """The URLs a Triton readiness command checks: ``curl -fsS -o /dev/null URL`` parts joined
    by ``&&`` (so one failing URL fails the probe: -f turns an HTTP 400 into exit 22)."""
    urls = []
    for part in probe.split("&&"):
        words = shlex.split(part)
        assert words[:-1] == ["curl", "-fsS", "-o", "/dev/null"], part
        urls.append(words[-1])
    return urls


def k8s_objects() -> dict[tuple[str, str], dict]:
    kustomization = load_yaml_docs(K8S / "kustomization.yaml")[0]
    objects: dict[tuple[str, str], dict] = {}
    for resource in kustomization["resources"]:
        for doc in load_yaml_docs(K8S / resource):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{key} defined twice"
            objects[key] = doc
    return objects


def k8s_object(kind: str, name: str) -> dict:
    objects = k8s_objects()
    assert (kind, name) in objects, f"no {kind}/{name} in deploy/k8s (have {sorted(objects)})"
    return objects[(kind, name)]


def only_container(deployment: dict) -> dict:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def container_port(container: dict, port: int | str) -> int:
    """Resolve a probe's or Service's (possibly named) port to the container's number."""
    if isinstance(port, int):
        assert port in [p["containerPort"] for p in container["ports"]], port
        return port
    for p in container["ports"]:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise AssertionError(f"container {container['name']} has no port named {port!r}")


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        op, _, args = (pending + line).strip().partition(" ")
        instructions.append((op.upper(), args.strip()))
        pending = ""
    return instructions


def dockerignore_admits(ignore: Path, relative: str) -> bool:
    """Whether the build context keeps `relative` (a file path) under the dockerignore rules:
    the last pattern matching the file or one of its parent folders decides, ``!`` keeps
    (Docker's rules: ``**`` any number of folders, ``*`` within one)."""

    def matches(pattern: str, path: str) -> bool:
        regex = "".join(
            ".*" if part == "**" else "[^/]*" if part == "*" else re.escape(part)
            for part in re.split(r"(\*\*|\*)", pattern.strip("/")))
        parts = path.split("/")
        return any(re.fullmatch(regex, "/".join(parts[:i])) for i in range(1, len(parts) + 1))

    keep = True
    for line in ignore.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if matches(line[1:] if negated else line, relative):
            keep = negated
    return keep


def compose() -> dict:
    return load_yaml_docs(COMPOSE)[0]


def compose_default(value: str) -> str:
    """``${VAR:-default}`` -> default (what compose uses when VAR is unset)."""
    m = re.fullmatch(r"\$\{\w+:-(.*)\}", value)
    return m.group(1) if m else value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------ Triton configs
def test_config_files_found() -> None:
    assert EMBEDDED_CONFIG in CONFIG_FILES
    assert STOCK_CONFIG in CONFIG_FILES
    assert GO_EMBEDDED_CONFIG in CONFIG_FILES
    assert GO_STOCK_CONFIG in CONFIG_FILES


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_config_parses_and_describes_the_policy(path: Path) -> None:
    config = parse_config(path)
    assert config.name == path.parent.name
    assert config.name in MODEL_IO, f"{path}: no expected shapes for model {config.name!r}"
    dims, n_moves = VARIABLE_IO.get(path, MODEL_IO[config.name])
    assert config.max_batch_size == MAX_BATCH_SIZE

    assert len(config.input) == 1
    (boards,) = config.input
    assert boards.name == "boards"
    assert boards.data_type == model_config_pb2.TYPE_INT8
    assert list(boards.dims) == dims
    # both servers declare logits and value: the default networks have a value head
    assert [o.name for o in config.output] == ["logits", "value"]
    logits = config.output[0]
    assert logits.name == "logits"
    assert logits.data_type == model_config_pb2.TYPE_FP32
    assert list(logits.dims) == [n_moves]
    for value in config.output[1:]:
        assert value.name == "value"
        assert value.data_type == model_config_pb2.TYPE_FP32
        assert list(value.dims) == [1]

    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert all(0 < b <= MAX_BATCH_SIZE for b in config.dynamic_batching.preferred_batch_size)
    assert config.version_policy.WhichOneof("policy_choice") == "latest"
    assert config.version_policy.latest.num_versions == 1
    assert len(config.instance_group) >= 1


@pytest.mark.parametrize(
    ("embedded_path", "stock_path"),
    [(EMBEDDED_CONFIG, STOCK_CONFIG), (GO_EMBEDDED_CONFIG, GO_STOCK_CONFIG)],
    ids=[MODEL_NAME, GO_MODEL_NAME],
)
def test_embedded_and_stock_configs_agree(embedded_path: Path, stock_path: Path) -> None:
    from services.repository.configs import dims_accept

    def agree(embedded_tensors, stock_tensors) -> bool:
        """Same names and dtypes; the stock dims are the embedded ones, or one of the sizes
        the embedded variable (-1) dims take."""
        return len(embedded_tensors) == len(stock_tensors) and all(
            (e.name, e.data_type) == (s.name, s.data_type) and dims_accept(e.dims, s.dims)
            for e, s in zip(embedded_tensors, stock_tensors, strict=True))

    embedded, stock = parse_config(embedded_path), parse_config(stock_path)
    assert embedded.name == stock.name
    assert embedded.max_batch_size == stock.max_batch_size
    assert agree(list(embedded.input), list(stock.input))  # names, dtypes, dims
    assert [o.name for o in embedded.output] == ["logits", "value"]
    # the stock value output reshapes the model's [N] into the API's [N, 1]
    stock_value = stock.output[1]
    assert stock_value.HasField("reshape") and list(stock_value.reshape.shape) == []
    stock_value.ClearField("reshape")
    assert agree(list(embedded.output), list(stock.output))
    assert embedded.output[1] == stock_value
    # the same batching but for the queue delay, which was measured per device: 500 us for the
    # embedded server on CPU, 100 us for the stock GPU server (docs/benchmarks.md)
    delays = [c.dynamic_batching.max_queue_delay_microseconds for c in (embedded, stock)]
    assert all(0 < d <= 1000 for d in delays)
    for config in (embedded, stock):
        config.dynamic_batching.ClearField("max_queue_delay_microseconds")
    assert embedded.dynamic_batching == stock.dynamic_batching
    assert embedded.version_policy == stock.version_policy
    assert embedded.backend == "python"


@pytest.mark.parametrize("path", [STOCK_CONFIG, GO_STOCK_CONFIG], ids=[MODEL_NAME, GO_MODEL_NAME])
def test_stock_config_uses_the_pytorch_backend_on_gpu(path: Path) -> None:
    config = parse_config(path)
    assert config.platform == "pytorch_libtorch"
    assert config.backend in ("", "pytorch")
    assert config.default_model_filename in ("", "model.pt")  # what the publisher writes
    assert config.instance_group
    gpu = model_config_pb2.ModelInstanceGroup.KIND_GPU
    assert all(group.kind == gpu for group in config.instance_group)
    inputs = {i.name: i for i in config.input}
    for warmup in config.model_warmup:
        assert 0 < warmup.batch_size <= config.max_batch_size
        assert set(warmup.inputs) == set(inputs)
        for name, data in warmup.inputs.items():
            assert data.data_type == inputs[name].data_type
            assert list(data.dims) == list(inputs[name].dims)


def test_stock_tensor_names_bind_to_the_exported_torchscript(tmp_path: Path) -> None:
    """The PyTorch backend binds inputs named like forward()'s arguments, and outputs without
    the <name>__<index> form by config order; clients use the same names on both servers."""
    torch = pytest.importorskip("torch")
    from services.games.registry import game_for_model
    from services.models.configs import build
    from services.models.export import export_torchscript
    from services.triton import client

    path = tmp_path / "model.pt"
    game = game_for_model(MODEL_NAME)
    assert game is not None
    export_torchscript(build(game.default_config), path, n_check=4)  # the default network
    scripted = torch.jit.load(str(path))
    arguments = [a.name for a in scripted.forward.schema.arguments][1:]  # drop self
    config = parse_config(STOCK_CONFIG)
    assert [i.name for i in config.input] == arguments == [client.INPUT_NAME]
    assert [o.name for o in config.output] == [client.OUTPUT_NAME, client.VALUE_NAME]
    assert all("__" not in o.name for o in config.output)  # no index form: config order binds
    # the tuple it returns has one tensor per declared output, in config order
    logits, value = scripted(torch.zeros((3, *MODEL_IO[MODEL_NAME][0]), dtype=torch.int8))
    assert tuple(logits.shape) == (3, MODEL_IO[MODEL_NAME][1]) and tuple(value.shape) == (3,)


def test_go_stock_tensor_names_bind_to_the_exported_go_torchscript(tmp_path: Path) -> None:
    """The Go export (services.trainer.publish's, every game's) names forward()'s argument
    `boards` too."""
    torch = pytest.importorskip("torch")
    from services.models.weights import network
    from services.trainer.publish import export_served

    path = tmp_path / "model.pt"
    export_served(network("go_res_b2c32"), "go_res_b2c32", path)  # policy-only
    scripted = torch.jit.load(str(path))
    arguments = [a.name for a in scripted.forward.schema.arguments][1:]
    config = parse_config(GO_STOCK_CONFIG)
    assert [i.name for i in config.input] == arguments == ["boards"]
    assert [o.name for o in config.output] == ["logits", "value"]  # the default: value head
    y = scripted(torch.zeros((3, *MODEL_IO[GO_MODEL_NAME][0]), dtype=torch.int8))
    assert tuple(y.shape) == (3, MODEL_IO[GO_MODEL_NAME][1])


def test_go_value_export_names_its_argument_boards(tmp_path: Path) -> None:
    """A Go network with a value head (`PolicyValue`, scripted as it is, no wrapper) binds by
    the same input name and answers (logits [N, 362], value [N])."""
    torch = pytest.importorskip("torch")
    from services.models.weights import network
    from services.trainer.publish import export_served

    path = tmp_path / "model.pt"
    export_served(network("go_res_b2c32_v"), "go_res_b2c32_v", path)
    scripted = torch.jit.load(str(path))
    assert [a.name for a in scripted.forward.schema.arguments][1:] == ["boards"]
    logits, value = scripted(torch.zeros((3, *MODEL_IO[GO_MODEL_NAME][0]), dtype=torch.int8))
    assert tuple(logits.shape) == (3, MODEL_IO[GO_MODEL_NAME][1])
    assert tuple(value.shape) == (3,)


def _stock_repository(root: Path, config_text: str) -> Path:
    from services.repository.publish import publish
    from tests.triton_fixtures import build_tiny_policy

    repository = root / "model_repository"
    (repository / MODEL_NAME).mkdir(parents=True)
    (repository / MODEL_NAME / "config.pbtxt").write_text(config_text)
    publish(build_tiny_policy(root / "tiny.pt"), repository)  # 1/model.pt (+ model.py, ignored)
    # The publisher keeps an existing config: publishing into a stock repository is safe.
    assert (repository / MODEL_NAME / "config.pbtxt").read_text() == config_text
    return repository


def stock_config_without_value(path: Path) -> str:
    """The stock config for a policy-only network: its value output deleted, as its comment
    says."""
    text = path.read_text()
    start = text.index("{", text.index('name: "logits"') - 40)
    logits_end = text.index("}", text.index('name: "logits"'))
    value_end = text.index("}", text.index("reshape", logits_end)) + 1
    value_end = text.index("}", value_end)  # the value output's own brace
    out = text[: logits_end + 1] + text[value_end + 1 :]
    assert start < logits_end and 'name: "value"' not in out
    return out


@pytest.mark.parametrize(
    ("stock_path", "embedded_path"),
    [(STOCK_CONFIG, EMBEDDED_CONFIG), (GO_STOCK_CONFIG, GO_EMBEDDED_CONFIG)],
    ids=[MODEL_NAME, GO_MODEL_NAME],
)
def test_stock_config_for_a_policy_only_network_parses(stock_path: Path,
                                                       embedded_path: Path) -> None:
    config = text_format.Parse(stock_config_without_value(stock_path),
                               model_config_pb2.ModelConfig())
    assert [o.name for o in config.output] == ["logits"]
    assert config.output[0] == parse_config(stock_path).output[0]
    assert config.output[0].name == parse_config(embedded_path).output[0].name


def test_default_networks_have_the_value_head_the_stock_configs_declare() -> None:
    """The value output is declared because the default configurations have a value head;
    this fails if a default becomes policy-only and the stock configs were not changed."""
    from services.games.registry import game_for_model
    from services.models.configs import spec

    for path in (STOCK_CONFIG, GO_STOCK_CONFIG):
        game = game_for_model(parse_config(path).name)
        assert game is not None
        assert spec(game.default_config).value, (game.name, game.default_config)
        assert [o.name for o in parse_config(path).output] == ["logits", "value"]


def test_triton_core_accepts_the_stock_config(tmp_path: Path) -> None:
    """The embedded Triton has no PyTorch backend, but its core parses, normalises and
    validates the model config before it looks the backend up: the stock config must get
    exactly that far, and a broken config must be stopped earlier (control)."""
    from services.triton.launcher import TritonServer
    from services.triton.server_errors import TritonServerError
    from tests.triton_fixtures import require_tritonserver

    require_tritonserver()
    missing_backend = "unable to find backend library for backend 'pytorch'"

    repository = _stock_repository(tmp_path / "ok", STOCK_CONFIG.read_text())
    with pytest.raises(TritonServerError) as info:
        TritonServer(repository, models=[MODEL_NAME], startup_timeout_s=60).start()
    assert missing_backend in str(info.value)
    # the policy-only variant (value output deleted, as its comment says): just as far
    repository = _stock_repository(tmp_path / "logits", stock_config_without_value(STOCK_CONFIG))
    with pytest.raises(TritonServerError) as info:
        TritonServer(repository, models=[MODEL_NAME], startup_timeout_s=60).start()
    assert missing_backend in str(info.value)

    delay = "max_queue_delay_microseconds:"
    broken = STOCK_CONFIG.read_text().replace(delay, f"preferred_batch_size: [ 512 ] {delay}")
    assert broken != STOCK_CONFIG.read_text()
    repository = _stock_repository(tmp_path / "broken", broken)
    with pytest.raises(TritonServerError) as info:
        TritonServer(repository, models=[MODEL_NAME], startup_timeout_s=60).start()
    assert missing_backend not in str(info.value)
    assert "preferred size must be <= max batch size" in str(info.value)


def test_tritonserver_flags_exist() -> None:
    """Every flag compose and Kubernetes pass to tritonserver exists in Triton 2.51's CLI."""
    from services.triton.installation import find_tritonserver, server_environment

    try:
        binary = find_tritonserver()
    except FileNotFoundError as exc:
        pytest.skip(f"no tritonserver: {exc}")
    proc = subprocess.run(
        [str(binary), "--help"],
        env=server_environment(binary),
        capture_output=True,
        text=True,
        timeout=60,
    )
    help_text = proc.stdout + proc.stderr
    assert "--model-repository" in help_text, help_text[-2000:]
    triton = only_container(k8s_object("Deployment", "triton"))
    for where, argv in (
        ("compose triton", compose()["services"]["triton"]["command"]),
        ("k8s triton", [*triton.get("command", []), *triton.get("args", [])]),
    ):
        for flag in flag_names(argv):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), (
                f"{where}: tritonserver has no {flag}"
            )


# ------------------------------------------------------------------------------- YAML
@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_file_loads(path: Path) -> None:
    docs = load_yaml_docs(path)
    assert docs and all(isinstance(doc, dict) for doc in docs)


# ------------------------------------------------------------------------- Kubernetes
def test_kustomization_lists_every_manifest() -> None:
    kustomization = load_yaml_docs(K8S / "kustomization.yaml")[0]
    assert kustomization["kind"] == "Kustomization"
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    kinds = {kind for kind, _ in k8s_objects()}
    assert {
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "ConfigMap",
        "PersistentVolumeClaim",
        "NetworkPolicy",
    } <= kinds


def test_triton_deployment() -> None:
    deployment = k8s_object("Deployment", "triton")
    pod = deployment["spec"]["template"]["spec"]
    triton = only_container(deployment)
    for section in ("requests", "limits"):
        assert str(triton["resources"][section]["nvidia.com/gpu"]) == "1", section

    # readiness: each loaded model's own readiness URL, strict readiness off (a rollout's
    # unloaded candidate would keep the server's /v2/health/ready at 400 for good)
    loaded = [a.split("=", 1)[1] for a in triton["args"] if a.startswith("--load-model=")]
    assert sorted(loaded) == sorted([MODEL_NAME, GO_MODEL_NAME])
    assert readiness_urls(triton["readinessProbe"]["exec"]["command"][-1]) == [
        f"http://localhost:{TRITON_HTTP_PORT}/v2/models/{m}/ready" for m in loaded]
    liveness = triton["livenessProbe"]["httpGet"]
    assert liveness["path"] == "/v2/health/live"
    assert container_port(triton, liveness["port"]) == TRITON_HTTP_PORT

    argv = [*triton.get("command", []), *triton.get("args", [])]
    assert flag_value(argv, "--model-control-mode") == "explicit"
    assert flag_value(argv, "--load-model") == MODEL_NAME
    assert flag_value(argv, "--strict-readiness") == "false"
    assert int(flag_value(argv, "--grpc-port") or 8001) == TRITON_GRPC_PORT
    assert container_port(triton, "grpc") == TRITON_GRPC_PORT
    repository = flag_value(argv, "--model-repository")

    # The repository volume is a PVC defined here, mounted (read-only) where Triton reads it.
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in triton["volumeMounts"]}
    assert repository in mounts
    repo_volume = volumes[mounts[repository]["name"]]
    claim = repo_volume["persistentVolumeClaim"]["claimName"]
    k8s_object("PersistentVolumeClaim", claim)
    assert mounts[repository].get("readOnly") is True

    # The init container installs the stock configs (from the ConfigMap) into that volume,
    # one per model Triton loads: Gomoku and Go are both served.
    loaded = [a.split("=", 1)[1] for a in argv if a.startswith("--load-model=")]
    assert loaded == [MODEL_NAME, GO_MODEL_NAME]
    (init,) = pod["initContainers"]
    init_mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert init_mounts[repo_volume["name"]] == repository
    config_volume = next(v for v in pod["volumes"] if "configMap" in v)
    script = "\n".join(map(str, init["command"] + init.get("args", [])))
    config_map = k8s_object("ConfigMap", config_volume["configMap"]["name"])
    stock = {MODEL_NAME: STOCK_CONFIG, GO_MODEL_NAME: GO_STOCK_CONFIG}
    assert set(config_map["data"]) == {f"{m}.pbtxt" for m in loaded}
    for model in loaded:
        assert model in script.split("for model in", 1)[1].split(";", 1)[0]
        assert config_map["data"][f"{model}.pbtxt"] == stock[model].read_text(), (
            f"deploy/k8s/triton-config.yaml has drifted from {stock[model]}")
    assert f'{init_mounts[config_volume["name"]]}/$model.pbtxt' in script
    assert f"{repository}/$model" in script and "config.pbtxt" in script

    # Metrics on, scraped through the pod's annotations (and the ServiceMonitor)
    assert flag_value(argv, "--allow-metrics") == "true"
    metrics_port = int(flag_value(argv, "--metrics-port") or 8002)
    assert container_port(triton, "metrics") == metrics_port
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == metrics_port


def test_search_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    deployment = k8s_object("Deployment", "movepred-search")
    assert deployment["spec"]["replicas"] == 2
    search = only_container(deployment)
    assert search["resources"]["requests"]["cpu"]  # the HPA's utilisation base
    argv = [*search.get("command", []), *search.get("args", [])]
    assert argv[:3] == ["python", "-m", "services.search.server"]
    assert_search_flags_exist(argv, "k8s movepred-search")
    args = assert_search_argv_is_accepted(argv, "k8s movepred-search", monkeypatch)
    triton = only_container(k8s_object("Deployment", "triton"))
    assert_search_models_are_loaded(
        args, [*triton.get("command", []), *triton.get("args", [])], "k8s movepred-search")

    # Probes: the plaintext health-only port (kubelet probes speak no TLS): liveness on "",
    # readiness on the SearchService's name (NOT_SERVING while Triton or the model is down).
    assert args.health_port == SEARCH_HEALTH_PORT
    assert container_port(search, "health") == SEARCH_HEALTH_PORT
    readiness, liveness = search["readinessProbe"]["grpc"], search["livenessProbe"]["grpc"]
    assert container_port(search, readiness["port"]) == SEARCH_HEALTH_PORT
    assert container_port(search, liveness["port"]) == SEARCH_HEALTH_PORT
    assert readiness.get("service") == SEARCH_SERVICE_NAME
    assert liveness.get("service", "") == ""

    # TLS files from a Secret volume, the token from a Secret through the environment.
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in search["volumeMounts"]}
    for path in (args.tls.cert, args.tls.key):
        mount = next(m for p, m in mounts.items() if str(path).startswith(p + "/"))
        assert mount.get("readOnly") is True
        assert volumes[mount["name"]]["secret"]["secretName"]
    assert args.token_env == TOKEN_ENV
    env = {e["name"]: e for e in search["env"]}
    assert env[TOKEN_ENV]["valueFrom"]["secretKeyRef"]["name"]
    # the Service exposes the API port and the metrics port, not the health port
    service = k8s_object("Service", "movepred-search")
    assert [p["port"] for p in service["spec"]["ports"]] == [SEARCH_PORT, SEARCH_METRICS_PORT]
    # metrics: on, on every interface of the pod (plaintext), named for the ServiceMonitor,
    # announced to annotation-based scraping
    assert args.metrics_port == SEARCH_METRICS_PORT and args.metrics_host == "0.0.0.0"
    assert container_port(search, "metrics") == SEARCH_METRICS_PORT
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == SEARCH_METRICS_PORT
    assert args.go_model == GO_MODEL_NAME  # Go is served
    assert flag_value(argv, "--host") == "0.0.0.0"
    assert int(flag_value(argv, "--port") or 0) == SEARCH_PORT
    assert container_port(search, "grpc") == SEARCH_PORT
    host, port = (flag_value(argv, "--triton-url") or "").rsplit(":", 1)
    service = k8s_object("Service", host)
    assert int(port) in [p["port"] for p in service["spec"]["ports"]]
    assert int(port) == TRITON_GRPC_PORT


def _selects(selector: dict, labels: dict) -> bool:
    return selector.get("matchLabels", {}).items() <= labels.items() and not selector.get(
        "matchExpressions")


def test_only_the_platform_reaches_triton() -> None:
    """Triton's HTTP and gRPC ports (model control: load, unload) admit the search pods and
    the labelled job pods only; nothing else in or outside the cluster."""
    policy = k8s_object("NetworkPolicy", "triton-ingress")
    spec = policy["spec"]
    triton = k8s_object("Deployment", "triton")
    assert _selects(spec["podSelector"], triton["spec"]["template"]["metadata"]["labels"])
    assert "Ingress" in spec["policyTypes"]
    search_labels = k8s_object("Deployment", "movepred-search")["spec"]["template"]["metadata"][
        "labels"]
    job = load_yaml_docs(K8S / "jobs" / "rollout-job.yaml")[0]
    job_labels = job["spec"]["template"]["metadata"]["labels"]
    assert dict([TRITON_CLIENT_LABEL]).items() <= job_labels.items()
    assert search_labels.get(TRITON_CLIENT_LABEL[0]) is None  # allowed by its own name

    control_ports = {TRITON_HTTP_PORT, TRITON_GRPC_PORT}
    reaches_control = []
    for rule in spec["ingress"]:
        ports = {int(p["port"]) for p in rule.get("ports", [])}
        if ports and not ports & control_ports:
            continue  # e.g. metrics only
        # a rule naming no ports opens every port: it must be as narrow as the others
        sources = rule.get("from")
        assert sources, f"a rule opens Triton's control ports to everyone: {rule}"
        for source in sources:
            assert set(source) == {"podSelector"}, f"not a pod of this namespace: {source}"
            reaches_control.append(source["podSelector"])
    assert reaches_control
    assert any(_selects(s, search_labels) for s in reaches_control)
    assert any(_selects(s, job_labels) for s in reaches_control)
    # nobody else: every selector matches the search pods or carries the client label
    for selector in reaches_control:
        labels = selector["matchLabels"]
        assert labels == {"app.kubernetes.io/name": "movepred-search"} or labels == dict(
            [TRITON_CLIENT_LABEL]), selector
    # the job runs the rollout against the repository Service with the repository mounted
    container = only_container(job)
    assert container["command"][:2] == ["movepred", "rollout"]
    host = (flag_value(container["command"], "--triton-url") or "").rsplit(":", 1)[0]
    k8s_object("Service", host)


def test_services_select_deployments_and_ports() -> None:
    deployments = [d for (kind, _), d in k8s_objects().items() if kind == "Deployment"]
    services = [s for (kind, _), s in k8s_objects().items() if kind == "Service"]
    assert services
    for service in services:
        selector = service["spec"]["selector"]
        matched = [
            d
            for d in deployments
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matched) == 1, f"Service {service['metadata']['name']} selects {matched}"
        (deployment,) = matched
        assert deployment["spec"]["selector"]["matchLabels"].items() <= (
            deployment["spec"]["template"]["metadata"]["labels"].items()
        )
        container = only_container(deployment)
        for port in service["spec"]["ports"]:
            container_port(container, port.get("targetPort", port["port"]))
    names = {s["metadata"]["name"] for s in services}
    assert {"triton", "movepred-search"} <= names


def test_search_autoscaler() -> None:
    hpa = k8s_object("HorizontalPodAutoscaler", "movepred-search")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["apiVersion"]) == ("Deployment", "apps/v1")
    deployment = k8s_object("Deployment", target["name"])
    replicas = deployment["spec"]["replicas"]
    assert hpa["spec"]["minReplicas"] <= replicas <= hpa["spec"]["maxReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource"
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    assert 0 < metric["resource"]["target"]["averageUtilization"] <= 100


def test_kustomize_renders_the_same_objects() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    proc = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    rendered = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    assert {(d["kind"], d["metadata"]["name"]) for d in rendered} == set(k8s_objects())


# ---------------------------------------------------------------------------- compose
def test_compose_services_and_files() -> None:
    services = compose()["services"]
    assert {"triton", "search", "prefect"} <= set(services)

    # Every build refers to a context and Dockerfile that exist, and the Dockerfile's COPY
    # sources exist in that context and pass its dockerignore allow-list.
    builds = [s["build"] for s in services.values() if "build" in s]
    assert builds
    for build in builds:
        context = (DEPLOY / build["context"]).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert context.is_dir() and dockerfile.is_file(), build
        ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
        allowed = {
            line[1:].rstrip("/")
            for line in ignore.read_text().splitlines()
            if line.startswith("!")
        }
        instructions = dockerfile_instructions(dockerfile)
        copies = [args.split() for op, args in instructions if op == "COPY"]
        assert copies
        for *sources, _dest in copies:
            for src in sources:
                assert (context / src).exists(), f"{dockerfile}: COPY {src}: not in context"
                assert any(a == src or a.startswith(src + "/") for a in allowed), (
                    f"{ignore.name} does not let {src} into the build context"
                )
        (base,) = [args for op, args in instructions if op == "FROM"]
        assert base.startswith("python:3.11")  # pyproject: requires-python >=3.11,<3.12
        # what the flows need inside the image: every model's config template (the publisher
        # copies it into a fresh repository: Go publishing needs go_policy's) and the ingest
        # flow's default source; generated code and caches stay out
        from flows.ingest import DEFAULT_SOURCES

        needed = [*(c.relative_to(ROOT) for c in (ROOT / "model_repository").glob(
            "*/config.pbtxt")), *(Path(s).relative_to(ROOT) for s in DEFAULT_SOURCES)]
        assert len(needed) >= 4
        for path in needed:
            assert (context / path).is_file(), path
            assert dockerignore_admits(ignore, str(path)), f"{ignore.name} leaves out {path}"
            assert any(str(path) == src or str(path).startswith(src.rstrip("/") + "/")
                       for *sources, _ in copies for src in sources), f"no COPY takes {path}"
        for left_out in ("services/api/movepred/v1/search_pb2.py", ".venv/bin/python",
                         "model_repository/gomoku_policy/1/model.pt", "services/__pycache__/x.pyc"):
            assert not dockerignore_admits(ignore, left_out), left_out

    # Bind mounts refer to files/folders that exist (with the variables at their defaults).
    for name, service in services.items():
        for volume in service.get("volumes", []):
            if isinstance(volume, dict) and volume.get("type") == "bind":
                if volume.get("bind", {}).get("create_host_path"):
                    continue  # made by compose when missing (e.g. the jobs' dataset folder)
                source = (DEPLOY / compose_default(volume["source"])).resolve()
                assert source.exists(), f"{name}: bind source {source} missing"


def test_compose_triton() -> None:
    triton = compose()["services"]["triton"]
    assert "tritonserver" in compose_default(triton["image"])
    argv = triton["command"]
    assert argv[0] == "tritonserver"
    assert flag_value(argv, "--model-control-mode") == "explicit"
    assert flag_value(argv, "--load-model") == MODEL_NAME
    assert int(flag_value(argv, "--grpc-port") or 8001) == TRITON_GRPC_PORT
    repository = flag_value(argv, "--model-repository")

    binds = {v["target"]: v for v in triton["volumes"] if v.get("type") == "bind"}
    assert compose_default(binds[repository]["source"]) == "../model_repository"
    stock = binds[f"{repository}/{MODEL_NAME}/config.pbtxt"]
    assert (DEPLOY / stock["source"]).resolve() == STOCK_CONFIG
    assert all(v.get("read_only") for v in binds.values())
    # Mounted over an existing file: the tracked config is there in a fresh clone.
    assert EMBEDDED_CONFIG.is_file()

    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices)
    test = triton["healthcheck"]["test"]
    loaded = [a.split("=", 1)[1] for a in argv if a.startswith("--load-model=")]
    assert test[0] == "CMD-SHELL" and readiness_urls(test[1]) == [
        f"http://localhost:{TRITON_HTTP_PORT}/v2/models/{m}/ready" for m in loaded]
    assert flag_value(argv, "--strict-readiness") == "false"


def test_compose_triton_is_reachable_by_the_platform_only() -> None:
    """No published Triton port; its networks are internal ones, shared only with the search
    service and the jobs (train, rollout)."""
    spec = compose()
    services, networks = spec["services"], spec.get("networks", {})
    triton = services["triton"]
    assert not triton.get("ports"), "Triton's model-control API must not be published"
    assert not triton.get("network_mode"), "host networking would expose Triton's ports"
    triton_networks = list(triton.get("networks", []))
    assert triton_networks, "Triton on the default network shares it with every service"
    for name in triton_networks:
        assert networks[name].get("internal") is True, f"network {name} is not internal"
    peers = {other for other, service in services.items() if other != "triton"
             and set(service.get("networks", [])) & set(triton_networks)}
    # Prometheus scrapes Triton's metrics port (8002): the only peer that is not the platform
    assert peers == {"search", "jobs", "prometheus"}
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    triton_targets = [t for job in scrape["scrape_configs"] for c in job["static_configs"]
                      for t in c["targets"] if t.startswith("triton:")]
    assert triton_targets == ["triton:8002"]
    jobs = services["jobs"]
    assert jobs.get("profiles"), "the jobs run on demand, not with `up`"
    assert not jobs.get("ports")
    assert flag_value(jobs["command"], "--triton-url") == f"triton:{TRITON_GRPC_PORT}"


def _published(port: Any) -> tuple[str, str]:
    """(host address, host port) of a compose `ports` entry, variables at their defaults;
    no address: "" (every interface)."""
    if isinstance(port, dict):
        return compose_default(str(port.get("host_ip", ""))), str(port.get("published", ""))
    text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(port))
    parts = text.rsplit(":", 2)
    if len(parts) == 3:
        return parts[0].strip("[]"), parts[1]
    return "", parts[0] if len(parts) == 2 else ""


def test_compose_publishes_on_loopback_only_by_default() -> None:
    from services.search.auth import is_loopback

    published = []
    for name, service in compose()["services"].items():
        assert service.get("network_mode") != "host", name
        for port in service.get("ports", []):
            host, number = _published(port)
            assert host and is_loopback(host), f"{name} publishes {port} beyond this host"
            published.append((name, int(number)))
    assert sorted(published) == [("grafana", 3000), ("prefect", 4200), ("prometheus", 9090),
                                 ("search", SEARCH_PORT)]
    # ... and the address is one variable away (set it to publish further)
    search_port = compose()["services"]["search"]["ports"][0]
    assert re.match(r"\$\{MOVEPRED_PUBLISH_ADDRESS:-127\.0\.0\.1\}:", search_port)


def test_compose_search_and_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = compose()
    services = spec["services"]
    search = services["search"]
    argv = search["command"]
    assert argv[:3] == ["python", "-m", "services.search.server"]
    assert_search_flags_exist(argv, "compose search")
    args = assert_search_argv_is_accepted(argv, "compose search", monkeypatch)
    assert_search_models_are_loaded(args, services["triton"]["command"], "compose search")
    # TLS files and token are compose secrets, mounted at /run/secrets/<name>
    for path in (args.tls.cert, args.tls.key, args.token_file):
        name = Path(path).name
        assert str(path) == f"/run/secrets/{name}" and name in search["secrets"], path
        assert name in spec["secrets"]
    assert args.health_port == SEARCH_HEALTH_PORT
    assert flag_value(argv, "--host") == "0.0.0.0"
    assert int(flag_value(argv, "--port") or 0) == SEARCH_PORT
    assert flag_value(argv, "--triton-url") == f"triton:{TRITON_GRPC_PORT}"
    assert "triton" in search["depends_on"]

    dockerfile = (DEPLOY / search["build"]["context"] / search["build"]["dockerfile"]).resolve()
    (cmd,) = [args for op, args in dockerfile_instructions(dockerfile) if op == "CMD"]
    cmd_argv = json.loads(cmd)  # exec form
    assert cmd_argv[:3] == ["python", "-m", "services.search.server"]
    assert_search_flags_exist(cmd_argv, "Dockerfile CMD")
    assert_search_argv_is_accepted(cmd_argv, "Dockerfile CMD", monkeypatch)
    assert flag_value(cmd_argv, "--host") == "0.0.0.0"

    prefect = services["prefect"]
    command = prefect["command"]
    command = command.split() if isinstance(command, str) else command
    assert command[:3] == ["prefect", "server", "start"]
    assert flag_value(command, "--host") == "0.0.0.0"


@pytest.mark.integration  # starts the search service in a subprocess
def test_compose_search_healthcheck_runs_against_the_server(tmp_path: Path) -> None:
    """The compose health check of the search service is valid Python and passes against a
    real search server started with compose's own command line (TLS and token files made here,
    loopback instead of 0.0.0.0): it asks the plaintext health-only port, which answers without
    TLS or token (and SERVING for "" even without Triton)."""
    from services.search.auth import generate_pki, write_token

    spec = compose()
    search = spec["services"]["search"]
    test = search["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    assert f"127.0.0.1:{SEARCH_HEALTH_PORT}" in test[3]
    port, health_port = free_port(), free_port()
    code = test[3].replace(f"127.0.0.1:{SEARCH_HEALTH_PORT}", f"127.0.0.1:{health_port}")
    pki = generate_pki(tmp_path / "pki")
    files = {"search_tls_cert": pki.server_cert, "search_tls_key": pki.server_key,
             "search_token": tmp_path / "token"}
    write_token(files["search_token"])
    replace = {"0.0.0.0": "127.0.0.1", str(SEARCH_PORT): str(port),
               str(SEARCH_HEALTH_PORT): str(health_port),
               "triton:8001": f"127.0.0.1:{free_port()}",
               **{f"/run/secrets/{name}": str(path) for name, path in files.items()}}
    argv = [replace.get(str(a), str(a)) for a in search["command"]]
    assert set(files) <= set(search["secrets"]) and "--health-port" in argv
    server = subprocess.Popen(
        [sys.executable, *argv[1:]],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            check = subprocess.run(
                [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30
            )
            if check.returncode == 0:
                break
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            assert time.monotonic() < deadline, check.stderr
            time.sleep(0.2)
        # the API port itself speaks TLS only: the same check there fails
        plain = code.replace(f"127.0.0.1:{health_port}", f"127.0.0.1:{port}")
        check = subprocess.run([sys.executable, "-c", plain], cwd=ROOT, capture_output=True,
                               text=True, timeout=30)
        assert check.returncode != 0
    finally:
        server.terminate()
        server.wait(timeout=15)


# ------------------------------------------------- training Job, nightly ingest, Dask
TRAIN_JOB = K8S / "jobs" / "train-job.yaml"
DATA_CLAIM = "movepred-data"
DASK_CLIENT_LABEL = ("movepred.io/dask-client", "true")
COMPLETION_INDEX = "$(JOB_COMPLETION_INDEX)"


def pod_mounts(workload: dict) -> dict[str, str]:
    """{mount path: claim name} of the persistent volumes of a workload's only container."""
    pod = workload["spec"]["template"]["spec"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
              if "persistentVolumeClaim" in v}
    return {m["mountPath"]: claims[m["name"]] for m in only_container(workload)["volumeMounts"]
            if m["name"] in claims}


def claim_of(path: str, mounts: dict[str, str]) -> str:
    """The claim a path lives on, given a container's mounts."""
    for mount, claim in mounts.items():
        if path == mount or path.startswith(mount.rstrip("/") + "/"):
            return claim
    raise AssertionError(f"{path} is on no persistent volume (mounts: {mounts})")


def ingest_argv(cron: dict) -> tuple[list[str], dict[str, str]]:
    """The ingest CronJob's `python -m flows.ingest ...` argv as its shell runs it (the
    container's environment substituted), and that environment."""
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    command = container["command"]
    assert command[:2] == ["sh", "-c"] and len(command) == 3, command
    tokens = shlex.split(command[2])
    assert tokens[0] == "exec", "the shell must hand its signals to the flow (exec)"
    return [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], t) for t in tokens[1:]], env


def test_training_job_runs_torchrun_over_indexed_pods() -> None:
    """An Indexed Job of NNODES pods, each `torchrun --nproc-per-node GPUS`: the node rank is
    the pod's completion index, the master address is pod 0 through the headless Service, every
    pod's torchrun line parses with torchrun's own parser and the script's line with the entry's
    parser, and the GPU request is one GPU per process."""
    from torch.distributed.run import get_args_parser

    from services.trainer.distributed import build_parser
    from services.trainer.train import rank_batch

    docs = {d["kind"]: d for d in load_yaml_docs(TRAIN_JOB)}
    assert set(docs) == {"Service", "Job"}
    job, service = docs["Job"], docs["Service"]
    assert job["apiVersion"] == "batch/v1"
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["completionMode"] == "Indexed"
    nodes = spec["completions"]
    assert spec["parallelism"] == nodes >= 1
    assert pod["restartPolicy"] == "Never"
    container = only_container(job)
    argv = [str(a) for a in [*container["command"], *container.get("args", [])]]
    assert argv[0] == "torchrun" and COMPLETION_INDEX in " ".join(argv)
    # the index reaches the command line through the container's environment
    env = {e["name"]: e for e in container["env"]}
    assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']")
    for index in range(nodes):
        launch = get_args_parser().parse_args(
            [a.replace(COMPLETION_INDEX, str(index)) for a in argv[1:]])
        assert launch.node_rank == index
    assert launch.nnodes == str(nodes) and launch.rdzv_backend == "static"
    assert launch.module and launch.training_script == "services.trainer.distributed"
    gpus = int(launch.nproc_per_node)
    for section in ("requests", "limits"):
        assert int(container["resources"][section]["nvidia.com/gpu"]) == gpus, section
    # pod 0 by name: <job>-0.<subdomain>, the subdomain a headless Service over the job's pods
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"].get("publishNotReadyAddresses") is True
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"][
        "labels"].items()
    assert launch.master_addr == f"{job['metadata']['name']}-0.{pod['subdomain']}"
    assert launch.master_port in [p["port"] for p in service["spec"]["ports"]]

    args = build_parser().parse_args(launch.training_script_args)
    assert args.device == "cuda"  # NCCL, one GPU per process
    rank_batch(args.batch_size, nodes * gpus)  # the global batch splits over every rank
    mounts = pod_mounts(job)
    assert claim_of(args.dataset, mounts) == claim_of(args.run_dir, mounts) == DATA_CLAIM
    k8s_object("PersistentVolumeClaim", DATA_CLAIM)
    assert args.repository and claim_of(args.repository, mounts) == "model-repository"
    shm = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}["/dev/shm"]
    assert {v["name"]: v for v in pod["volumes"]}[shm]["emptyDir"]["medium"] == "Memory"
    # it trains on what the nightly ingest writes
    ingest, _ = ingest_argv(k8s_object("CronJob", "movepred-ingest"))
    assert flag_value(ingest, "--out") == args.dataset
    # a one-off run, like the rollout Job: not applied with the manifests
    assert "jobs/train-job.yaml" not in load_yaml_docs(K8S / "kustomization.yaml")[0][
        "resources"]


def test_nightly_ingest_cronjob(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The CronJob's command line passes the ingest flow's own argument parsing (the shell's
    glob standing for archive names), runs on the Dask scheduler's Service, one run at a time,
    with the data volume where the Dask workers have it."""
    import flows.ingest

    cron = k8s_object("CronJob", "movepred-ingest")
    assert cron["apiVersion"] == "batch/v1"
    spec = cron["spec"]
    assert len(spec["schedule"].split()) == 5
    assert spec["concurrencyPolicy"] == "Forbid"  # one writer of the dataset at a time
    argv, env = ingest_argv(cron)
    assert argv[:3] == ["python", "-m", "flows.ingest"]
    pattern = next(a for a in argv if "*" in a)
    # the files the glob finds, here (the command line checks that its sources exist)
    archives = [str(tmp_path / Path(pattern).name.replace("*", name))
                for name in ("kgs-2026-01.tar.gz", "extra.sgf")]
    for archive in archives:
        Path(archive).touch()
    called: dict = {}

    def ingest_on(**options: Any):
        called.update(options)

        def run(**kwargs: Any) -> dict:
            called.update(kwargs)
            return {"rows": 0, "splits": {}, "counts": []}
        return run

    monkeypatch.setattr(flows.ingest, "ingest_on", ingest_on)
    monkeypatch.setattr(flows.ingest, "configure_logging", lambda args: None)
    at = argv.index(pattern)
    flows.ingest.main([*argv[3:at], *archives, *argv[at + 1:]])
    assert called["sources"] == archives and called["out_dir"] == "/data/dataset"
    host, port = called["dask_address"].removeprefix("tcp://").rsplit(":", 1)
    scheduler = k8s_object("Service", host)
    assert int(port) in [p["port"] for p in scheduler["spec"]["ports"]]
    assert env["DASK_ADDRESS"] == called["dask_address"]
    # the flow and the workers see the archives and the work folder at the same paths
    job = cron["spec"]["jobTemplate"]
    mounts = pod_mounts(job)
    worker_mounts = pod_mounts(k8s_object("Deployment", "dask-worker"))
    for path in (pattern, called["out_dir"]):
        assert claim_of(path, mounts) == claim_of(path, worker_mounts) == DATA_CLAIM
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert dict([DASK_CLIENT_LABEL]).items() <= labels.items()


def test_dask_cluster_commands_and_who_reaches_it() -> None:
    """Scheduler and worker command lines parse with Dask's own CLI; the workers run the
    project's image (the ingest's tasks are the project's code) and find the scheduler through
    its Service; only Dask pods and pods labelled as Dask clients reach either (Dask runs the
    pickles a peer sends)."""
    from distributed.cli import dask_scheduler, dask_worker

    scheduler = k8s_object("Deployment", "dask-scheduler")
    worker = k8s_object("Deployment", "dask-worker")
    s_argv = only_container(scheduler)["command"]
    w_argv = only_container(worker)["command"]
    assert s_argv[:2] == ["dask", "scheduler"] and w_argv[:2] == ["dask", "worker"]
    s_params = dask_scheduler.main.make_context("dask scheduler", s_argv[2:]).params
    w_params = dask_worker.main.make_context("dask worker", w_argv[2:]).params
    service = k8s_object("Service", "dask-scheduler")
    ports = {p["port"] for p in service["spec"]["ports"]}
    assert int(s_params["port"]) in ports
    assert container_port(only_container(scheduler), "scheduler") == int(s_params["port"])
    assert w_params["scheduler"] == f"tcp://dask-scheduler:{s_params['port']}"
    assert w_params["nthreads"] == 1
    assert only_container(worker)["image"] == only_container(
        k8s_object("Deployment", "movepred-search"))["image"]

    policy = k8s_object("NetworkPolicy", "dask-ingress")["spec"]
    for deployment in (scheduler, worker):
        assert _selects(policy["podSelector"], deployment["spec"]["template"]["metadata"][
            "labels"])
    assert policy["policyTypes"] == ["Ingress"]
    sources = [s for rule in policy["ingress"] for s in rule["from"]]
    assert sources and all(set(s) == {"podSelector"} for s in sources)
    allowed = [s["podSelector"]["matchLabels"] for s in sources]
    assert dict([DASK_CLIENT_LABEL]) in allowed
    assert all(labels == dict([DASK_CLIENT_LABEL]) or labels == policy["podSelector"][
        "matchLabels"] for labels in allowed)


def test_deployments_restate_no_setting_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """A training or service flag in deploy/ sets a value other than its field's default
    (`TrainConfig`, `ServiceConfig`): a restated default would drift when the default moves.
    The search service's --port stays, next to the containerPort it must equal."""
    from torch.distributed.run import get_args_parser

    from services import settings
    from services.search.server import ServiceConfig
    from services.trainer.distributed import build_parser
    from services.trainer.train import TrainConfig

    container = only_container(next(d for d in load_yaml_docs(TRAIN_JOB) if d["kind"] == "Job"))
    argv = [str(a).replace(COMPLETION_INDEX, "0")
            for a in [*container["command"], *container.get("args", [])]]
    script_argv = get_args_parser().parse_args(argv[1:]).training_script_args
    parser = build_parser()
    given = parser.parse_args(script_argv)
    defaults = parser.parse_args(["--dataset", "d", "--run-dir", "r"])
    for field in settings.cli_fields(TrainConfig):
        if settings.flag_of(field) in script_argv:
            assert getattr(given, field.name) != getattr(defaults, field.name), (
                f"{TRAIN_JOB.name} restates the default of {settings.flag_of(field)}")

    search = only_container(k8s_object("Deployment", "movepred-search"))
    dockerfile = DEPLOY / "Dockerfile"
    (cmd,) = [args for op, args in dockerfile_instructions(dockerfile) if op == "CMD"]
    for where, search_argv in (
            ("k8s movepred-search", [*search.get("command", []), *search.get("args", [])]),
            ("compose search", compose()["services"]["search"]["command"]),
            ("Dockerfile CMD", json.loads(cmd))):
        args = assert_search_argv_is_accepted([str(a) for a in search_argv], where, monkeypatch)
        for field in settings.cli_fields(ServiceConfig):
            if field.name != "port" and settings.flag_of(field) in search_argv:
                assert getattr(args, field.name) != field.default, (
                    f"{where} restates the default of {settings.flag_of(field)}")


# ------------------------------------------------------------- Prefect server and worker
def _schedules_args(argv: list[str], where: str) -> Any:
    """The worker's command line, parsed by flows.schedules' own parser (a shell's glob stands
    for archive names)."""
    from flows.schedules import build_parser

    if argv[:2] == ["sh", "-c"]:
        argv = shlex.split(argv[2].replace("/data/archives/*", "/data/archives/a.tar.gz"))
        argv = argv[1:] if argv[0] == "exec" else argv
    assert argv[:3] == ["python", "-m", "flows.schedules"], where
    argv = [a.replace('"$DASK_ADDRESS"', "tcp://dask-scheduler:8786").replace(
        "$DASK_ADDRESS", "tcp://dask-scheduler:8786") for a in argv[3:]]
    return build_parser().parse_args(argv)


def test_compose_prefect_server_and_schedules_worker() -> None:
    services = compose()["services"]
    prefect, worker = services["prefect"], services["schedules"]
    assert prefect["command"][:3] == ["prefect", "server", "start"]
    args = _schedules_args(worker["command"], "compose schedules")
    assert args.train_cron and args.out == "/data/dataset" and args.repository == "/models"
    assert worker["environment"]["PREFECT_API_URL"] == "http://prefect:4200/api"
    assert worker["depends_on"]["prefect"]["condition"] == "service_healthy"
    assert worker["image"] == services["search"]["image"]  # the movepred image
    targets = {v["target"] for v in worker["volumes"]}
    assert {args.out, args.repository} <= targets
    assert not worker.get("ports")


def test_k8s_prefect_server_and_schedules_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    server = k8s_object("Deployment", "prefect")
    container = only_container(server)
    assert container["command"][:3] == ["prefect", "server", "start"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/api/health"
    service = k8s_object("Service", "prefect")
    assert _selects({"matchLabels": service["spec"]["selector"]},
                    server["spec"]["template"]["metadata"]["labels"])
    assert [p["port"] for p in service["spec"]["ports"]] == [4200]
    k8s_object("PersistentVolumeClaim", "prefect-data")

    worker = k8s_object("Deployment", "movepred-schedules")
    assert worker["spec"]["replicas"] == 1
    container = only_container(worker)
    args = _schedules_args(container["command"], "k8s movepred-schedules")
    assert args.train_cron and args.dask_address == "tcp://dask-scheduler:8786"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PREFECT_API_URL"] == "http://prefect:4200/api"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in worker["spec"]["template"]["spec"]["volumes"]}
    assert claims[mounts["/data"]] == "movepred-data"
    assert claims[mounts[args.repository]] == "model-repository"
    assert args.out.startswith("/data/")
    # the CronJob doing the same ingest is suspended: never two ingests into one dataset
    assert k8s_object("CronJob", "movepred-ingest")["spec"]["suspend"] is True
    labels = worker["spec"]["template"]["metadata"]["labels"]
    assert labels.get("movepred.io/dask-client") == "true"


def test_servicemonitors_select_the_metrics_ports() -> None:
    monitors = load_yaml_docs(K8S / "monitoring" / "servicemonitors.yaml")
    assert {m["metadata"]["name"] for m in monitors} == {"triton", "movepred-search",
                                                         "selfplay-loop"}
    for monitor in monitors:
        assert monitor["kind"] == "ServiceMonitor"
        service = k8s_object("Service", monitor["metadata"]["name"])
        assert _selects(monitor["spec"]["selector"], service["metadata"]["labels"])
        names = {p["name"] for p in service["spec"]["ports"]}
        assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
        assert "metrics" in names


# ------------------------------------------------------------------ the self-play loop
SELFPLAY_JOBS = K8S / "selfplay-jobs.yaml"


def selfplay_loop_args() -> tuple[dict, Any]:
    """The loop Deployment and its command line, parsed by flows.selfplay's own parser."""
    from flows.selfplay import build_parser

    loop = k8s_object("Deployment", "selfplay-loop")
    argv = [str(a) for a in only_container(loop)["command"]]
    assert argv[:3] == ["python", "-m", "flows.selfplay"]
    return loop, build_parser().parse_args(argv[3:])


def test_selfplay_loop_and_its_workers_follow_the_serving_version() -> None:
    """The loop (one pod, never two: one writer of the run folder) sends its shares to the
    self-play Dask cluster, whose workers see the run folder and the repository at the loop's
    paths (a share names the version folder the loop pinned from the rollout record there);
    the workers' command lines parse with Dask's CLI, and only the loop reaches the cluster."""
    from distributed.cli import dask_scheduler, dask_worker

    from services import settings
    from services.selfplay.settings import SelfPlaySettings
    from services.selfplay_loop.stages import LoopSettings

    loop, args = selfplay_loop_args()
    assert loop["spec"]["replicas"] == 1 and loop["spec"]["strategy"]["type"] == "Recreate"
    played = settings.from_args(SelfPlaySettings, args, prefix="selfplay-")
    config = settings.from_args(LoopSettings, args, selfplay=played)
    assert args.dask_address and args.shares and args.shares >= 1
    host, port = args.dask_address.removeprefix("tcp://").rsplit(":", 1)
    scheduler_service = k8s_object("Service", host)
    assert int(port) in [p["port"] for p in scheduler_service["spec"]["ports"]]
    scheduler = k8s_object("Deployment", host)
    assert _selects({"matchLabels": scheduler_service["spec"]["selector"]},
                    scheduler["spec"]["template"]["metadata"]["labels"])
    s_argv = only_container(scheduler)["command"]
    assert s_argv[:2] == ["dask", "scheduler"]
    s_params = dask_scheduler.main.make_context("dask scheduler", s_argv[2:]).params
    assert int(s_params["port"]) == int(port)
    worker = k8s_object("Deployment", "selfplay-worker")
    w_argv = only_container(worker)["command"]
    assert w_argv[:2] == ["dask", "worker"]
    w_params = dask_worker.main.make_context("dask worker", w_argv[2:]).params
    assert w_params["scheduler"] == args.dask_address and w_params["nthreads"] == 1
    image = only_container(k8s_object("Deployment", "movepred-search"))["image"]
    assert only_container(loop)["image"] == only_container(worker)["image"] == image

    # the same files at the same paths: the run folder and the repository
    loop_mounts, worker_mounts = pod_mounts(loop), pod_mounts(worker)
    assert claim_of(args.run_dir, loop_mounts) == claim_of(args.run_dir, worker_mounts) == (
        DATA_CLAIM)
    assert claim_of(config.repository, loop_mounts) == claim_of(
        config.repository, worker_mounts) == "model-repository"
    read_only = {m["mountPath"]: m.get("readOnly", False)
                 for m in only_container(worker)["volumeMounts"]}
    assert read_only[config.repository]  # the workers only read versions
    assert not only_container(loop)["volumeMounts"][0].get("readOnly", False)
    assert config.triton_url is None  # passed versions go to the rollout record on the PVC

    # only the loop (a labelled Dask client) and the Dask pods reach the cluster
    policy = k8s_object("NetworkPolicy", "dask-ingress")["spec"]
    for deployment in (scheduler, worker):
        assert _selects(policy["podSelector"], deployment["spec"]["template"]["metadata"][
            "labels"])
    labels = loop["spec"]["template"]["metadata"]["labels"]
    assert dict([DASK_CLIENT_LABEL]).items() <= labels.items()
    assert not _selects(policy["podSelector"], labels)


def test_selfplay_loop_metrics_port() -> None:
    """The loop serves its metrics on all interfaces of the pod, on the port its Service, the
    ServiceMonitor and the scrape annotations name."""
    loop, args = selfplay_loop_args()
    container = only_container(loop)
    assert args.metrics_host == "0.0.0.0" and args.metrics_port
    assert container_port(container, "metrics") == args.metrics_port
    service = k8s_object("Service", "selfplay-loop")
    assert _selects({"matchLabels": service["spec"]["selector"]},
                    loop["spec"]["template"]["metadata"]["labels"])
    (port,) = service["spec"]["ports"]
    assert port["name"] == "metrics" and container_port(container, port["targetPort"]) == (
        args.metrics_port)
    notes = loop["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert int(notes["prometheus.io/port"]) == args.metrics_port


def test_selfplay_trainer_and_match_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Job templates that never run on their own (suspended CronJobs, started with
    `kubectl create job --from=cronjob/...`): the trainer's command line passes flows.train's
    parser and trains on an iteration's dataset of the loop's run folder, publishing into the
    loop's repository; the match's passes `movepred match`'s parser and rates the serving
    version against the first one into a ratings log of the run folder."""
    from flows.train import build_parser as train_parser
    from services.cli import build_parser as cli_parser

    _, loop_args = selfplay_loop_args()
    docs = {d["metadata"]["name"]: d for d in load_yaml_docs(SELFPLAY_JOBS)}
    assert set(docs) == {"selfplay-train", "selfplay-match"}
    for cron in docs.values():
        assert cron["kind"] == "CronJob" and cron["spec"]["suspend"] is True
        assert cron["spec"]["concurrencyPolicy"] == "Forbid"
        k8s_object("CronJob", cron["metadata"]["name"])  # in the kustomization

    train = docs["selfplay-train"]["spec"]["jobTemplate"]
    container = only_container(train)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["RUN_DIR"] == loop_args.run_dir
    command = container["command"]
    assert command[:2] == ["sh", "-c"] and len(command) == 3
    newest = re.search(r'"\$\(ls -d (\S+) \| tail -n 1\)"', command[2])
    assert newest, command[2]
    run = loop_args.run_dir
    assert newest.group(1).replace("$RUN_DIR", env["RUN_DIR"]) == f"{run}/iter-*/dataset"
    tokens = shlex.split(command[2].replace(newest.group(0), f"{run}/iter-0003/dataset"))
    assert tokens[0] == "exec", "the shell must hand its signals to the flow (exec)"
    argv = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], t) for t in tokens[1:]]
    assert argv[:3] == ["python", "-m", "flows.train"]
    args = train_parser().parse_args(argv[3:])
    assert args.dataset_dir.startswith(loop_args.run_dir + "/iter-")
    assert args.run_dir.startswith(loop_args.run_dir + "/")
    mounts = pod_mounts(train)
    assert claim_of(args.dataset_dir, mounts) == claim_of(args.run_dir, mounts) == DATA_CLAIM
    assert args.repository == loop_args.repository
    assert claim_of(args.repository, mounts) == "model-repository"

    match = docs["selfplay-match"]["spec"]["jobTemplate"]
    container = only_container(match)
    argv = [str(a) for a in container["command"]]
    assert argv[0] == "movepred"
    parser, _ = cli_parser()
    args = parser.parse_args(argv[1:])
    assert args.command == "match"
    assert args.repository == loop_args.repository and args.game == loop_args.game
    engines = [str(e) for e in argv[argv.index("--engine") + 1::2][:2]]
    assert engines[1].startswith("version:serving") and engines[0].startswith("version:1")
    assert args.out.startswith(loop_args.run_dir + "/")
    mounts = pod_mounts(match)
    assert claim_of(args.out, mounts) == DATA_CLAIM
    assert claim_of(args.repository, mounts) == "model-repository"
