"""Reusable Triton test helpers: a tiny TorchScript policy and a running server fixture.

Use from a test module::

    from tests.triton_fixtures import triton_server  # noqa: F401  (pytest fixture)

`triton_server` is module-scoped: it copies the tracked ``config.pbtxt`` into a fresh temporary
repository, publishes `TinyPolicy` (seed 0) as version 1 and starts `TritonServer`. Tests are
skipped when no ``tritonserver`` binary is installed.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from services.repository.publish import publish
from services.triton.installation import find_tritonserver
from services.triton.launcher import TritonServer

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACKED_REPOSITORY = REPO_ROOT / "model_repository"
MODEL_NAME = "gomoku_policy"
BOARD_SIZE = 15


class TinyPolicy(torch.nn.Module):
    """int8 boards [N,15,15] -> float32 logits [N,225]: one-hot planes, 3x3 conv, 1x1 conv."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, kernel_size=3, padding=1)
        self.head = torch.nn.Conv2d(channels, 1, kernel_size=1)

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        b = boards.long()
        planes = torch.stack([b == 1, b == 2, b == 0], dim=1).float()
        x = torch.relu(self.conv(planes))
        return self.head(x).flatten(1)


class TacticalPolicy(torch.nn.Module):
    """int8 boards [N,15,15] -> (logits [N,225], value [N]) that takes a five and blocks a four:
    a scripted stand-in for a trained network, for tests whose versions must pass the
    rollout's smoke test (tactics, finite value). Each point scores the five-windows through it
    (window sums by a convolution per direction, spread back to the window's cells): own four
    1000, opponent's four 100, own three 10, opponent's three 5; a small `TinyPolicy` term (its
    weights from the seed) makes versions differ, and a pull towards the centre decides the
    empty board."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.noise = TinyPolicy(channels)
        kernels = torch.zeros(4, 1, 5, 5)
        for i in range(5):
            kernels[0, 0, 2, i] = 1.0  # row
            kernels[1, 0, i, 2] = 1.0  # column
            kernels[2, 0, i, i] = 1.0  # diagonal
            kernels[3, 0, i, 4 - i] = 1.0  # anti-diagonal
        self.register_buffer("kernels", kernels)
        ys, xs = torch.meshgrid(torch.arange(BOARD_SIZE), torch.arange(BOARD_SIZE), indexing="ij")
        centre = -((xs - BOARD_SIZE // 2).abs() + (ys - BOARD_SIZE // 2).abs()).float() * 0.05
        self.register_buffer("centre", centre.reshape(1, -1))

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = boards.long()
        black = (b == 1).float()
        white = (b == 2).float()
        black_moves = (black.sum(dim=(1, 2)) <= white.sum(dim=(1, 2))).float()[:, None, None]
        mine = (black * black_moves + white * (1 - black_moves)).unsqueeze(1)
        theirs = (white * black_moves + black * (1 - black_moves)).unsqueeze(1)
        own = torch.nn.functional.conv2d(mine, self.kernels, padding=2)  # [N, 4, 15, 15]
        opp = torch.nn.functional.conv2d(theirs, self.kernels, padding=2)
        cells = torch.nn.functional.conv2d(torch.ones_like(mine), self.kernels, padding=2)
        valid = (cells == 5).float()  # windows wholly on the board
        clean_own = (opp == 0).float()
        clean_opp = (own == 0).float()
        score = valid * (clean_own * (1000.0 * (own == 4).float() + 10.0 * (own == 3).float()
                                      + (own == 2).float())
                         + clean_opp * (100.0 * (opp == 4).float() + 5.0 * (opp == 3).float()))
        # each window's score back onto its five cells (the convolution's adjoint)
        spread = torch.nn.functional.conv_transpose2d(score, self.kernels, padding=2,
                                                      groups=4).sum(dim=1)
        logits = spread.flatten(1) + 0.05 * self.noise(boards) + self.centre
        value = torch.tanh(0.001 * (score * clean_own).sum(dim=(1, 2, 3))
                           - 0.001 * (score * clean_opp).sum(dim=(1, 2, 3)))
        return logits, value


class GarbagePolicy(torch.nn.Module):
    """The model the smoke test must stop: logits equal to the board cells (a uniform policy
    over the empty points once stones are masked) and a NaN value (or `value`, to see the
    checks on what the model knows refuse it even with a finite value)."""

    def __init__(self, value: float = float("nan")) -> None:
        super().__init__()
        self.value = value

    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = boards.float().flatten(1)
        return logits, torch.full((boards.shape[0],), self.value)


def build_tactical_policy(path: Path, seed: int = 0) -> Path:
    """Script a `TacticalPolicy` (its noise weights from `seed`) and save it to `path`."""
    torch.manual_seed(seed)
    return save_scripted(TacticalPolicy(), path)


def build_garbage_policy(path: Path, value: float = float("nan")) -> Path:
    """Script a `GarbagePolicy` (its value: `value`) and save it to `path`."""
    return save_scripted(GarbagePolicy(value), path)


def four_positions(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` boards (int8 [n, 15, 15]) each with one four to complete or block and a few scattered
    stones, and the completing point (int64 [n]): stored positions on which a network that
    takes fives and blocks fours scores top-1 near 1 and a uniform policy near 0."""
    rng = np.random.default_rng(seed)
    steps = ((1, 0), (0, 1), (1, 1), (1, -1))
    boards = np.zeros((n, BOARD_SIZE, BOARD_SIZE), np.int8)
    moves = np.zeros(n, np.int64)
    for i in range(n):
        while True:
            board = np.zeros((BOARD_SIZE, BOARD_SIZE), np.int8)
            dx, dy = steps[rng.integers(4)]
            x0, y0 = int(rng.integers(2, 11)), int(rng.integers(4, 11))
            cells = [(x0 + k * dx, y0 + k * dy) for k in range(5)]
            if not all(0 <= x < BOARD_SIZE and 0 <= y < BOARD_SIZE for x, y in cells):
                continue
            gap = int(rng.integers(5))
            color = int(rng.integers(1, 3))  # the four's colour
            for k, (x, y) in enumerate(cells):
                if k != gap:
                    board[y, x] = color
            other = 3 - color
            # the other side gets 4 (to move after a black four: 4 black vs 4 white means
            # black moves) or 3-4 stones so that either side may be the one to move
            count = 4 if color == 1 else int(rng.integers(4, 6))
            free = [(x, y) for y in range(BOARD_SIZE) for x in range(BOARD_SIZE)
                    if min(max(abs(x - cx), abs(y - cy)) for cx, cy in cells) > 2]
            for j in rng.choice(len(free), size=count, replace=False):
                board[free[j][1], free[j][0]] = other
            blacks, whites = int((board == 1).sum()), int((board == 2).sum())
            if blacks in (whites, whites + 1):
                break
        boards[i] = board
        moves[i] = cells[gap][1] * BOARD_SIZE + cells[gap][0]
    return boards, moves


def build_tiny_policy(path: Path, seed: int = 0) -> Path:
    """Script a `TinyPolicy` with weights from `seed` and save it to `path`."""
    torch.manual_seed(seed)
    return save_scripted(TinyPolicy(), path)


def save_scripted(module: torch.nn.Module, path: Path) -> Path:
    """Script `module` (in eval mode) and save the TorchScript file to `path`."""
    model = torch.jit.script(module.eval())
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(str(path))
    return path


def run_local(model_path: Path, boards: np.ndarray) -> np.ndarray:
    """The reference answer: the same TorchScript file run in this process on CPU."""
    model = torch.jit.load(str(model_path), map_location="cpu").eval()
    with torch.inference_mode():
        return model(torch.from_numpy(np.ascontiguousarray(boards))).numpy()


def run_local_outputs(model_path: Path, boards: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(logits, value or None) of the TorchScript file run here on CPU: the reference answer
    for a model with or without a value head."""
    model = torch.jit.load(str(model_path), map_location="cpu").eval()
    with torch.inference_mode():
        out = model(torch.from_numpy(np.ascontiguousarray(boards)))
    if isinstance(out, tuple):
        return out[0].numpy(), out[1].numpy()
    return out.numpy(), None


# --------------------------------------------------------------------------- value head
VALUE_CONFIG = "shao_f32_n2_v"  # a small Gomoku network with a value head
GO_VALUE_CONFIG = "go_res_b2c32_v"  # the small Go network with a value head


def value_network(config: str, seed: int = 0) -> torch.nn.Module:
    """A `config` network (`_v`: with a value head) with weights from `seed`; the value head,
    which starts at 0 everywhere, gets random weights too, so values differ between boards."""
    from services.models.configs import build

    torch.manual_seed(seed)
    model = build(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.value_head.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    return model.eval()


def build_value_model(path: Path, seed: int = 0, config: str = VALUE_CONFIG) -> Path:
    """Export a Gomoku network with a value head (`value_network`) to `path` with
    `services.models.export.export_torchscript`; its forward returns (logits [N, 225],
    value [N])."""
    from services.models.export import export_torchscript

    export_torchscript(value_network(config, seed), path, board_size=BOARD_SIZE, n_check=8)
    return path


def random_boards(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.choice(
        np.array([0, 1, 2], dtype=np.int8), size=(n, BOARD_SIZE, BOARD_SIZE), p=[0.6, 0.2, 0.2]
    )


def make_repository(root: Path, model_name: str = MODEL_NAME) -> Path:
    """A fresh model repository holding only the tracked config of `model_name`."""
    repository = root / "model_repository"
    (repository / model_name).mkdir(parents=True)
    shutil.copyfile(
        TRACKED_REPOSITORY / model_name / "config.pbtxt", repository / model_name / "config.pbtxt"
    )
    return repository


def wait_for_predict(client: Any, position: Any, within_s: float = 60.0) -> None:
    """Return once the model answers Predict of `position` through the search service (the
    first load of a model on Triton takes seconds); its last error after `within_s`."""
    import grpc

    deadline = time.monotonic() + within_s
    while True:
        try:
            client.predict(position, timeout=5)
            return
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextmanager
def game_search_service(grpc_url: str, game: Any, first: Any) -> Iterator[str]:
    """The search service in this process serving `game` alone from the Triton at `grpc_url`,
    once its model answers Predict for the request position `first` (a search_pb2.Position):
    yields its target "127.0.0.1:port"."""

    from services.search.client import SearchClient
    from services.search.server import build_service
    from services.triton.client import PolicyClient

    policy = PolicyClient(grpc_url, game=game.name, timeout_s=10.0)
    service = build_service({game.name: policy}).start()
    target = f"127.0.0.1:{service.port}"
    try:
        with SearchClient(target) as client:
            wait_for_predict(client, first)
        yield target
    finally:
        service.stop(0)
        policy.close()


@contextmanager
def gomoku_and_go_service(grpc_url: str, **overrides: Any) -> Iterator[Any]:
    """The search service in this process (`services.search.server.Service`, started) over
    the Triton at `grpc_url` serving `gomoku_policy` and `go_policy` (`go_triton_setup`), with
    `build_service`'s `overrides`; stopped, and its Triton clients closed, on the way out."""

    from services.search.server import build_service
    from services.triton.client import PolicyClient

    gomoku = PolicyClient(grpc_url, "gomoku_policy", timeout_s=30.0)
    go = PolicyClient(grpc_url, "go_policy", timeout_s=30.0)
    service = build_service(gomoku, go_evaluator=go, **overrides).start()
    try:
        yield service
    finally:
        service.stop()
        gomoku.close()
        go.close()


def go_service_target(root: Path, with_gomoku: bool = True) -> Iterator[str]:
    """A Triton under `root` with the Go model v1 (and the tiny Gomoku policy v1 unless
    `with_gomoku` is false: `go_triton_setup`) and the search service over it
    (`gomoku_and_go_service`): the whole stack a protocol front end's tests talk to. Yields the
    service's target "127.0.0.1:port"; skips the test without a tritonserver binary.

    A plain generator for a module fixture to `yield from`, not a context manager: the tier
    classifier of tests/conftest.py follows a helper of the suite into its body, which it
    cannot do through contextlib's wrapper, and this body is what makes the fixture's tests
    integration tests."""
    require_tritonserver()
    server, _ = go_triton_setup(root, with_gomoku)
    with server, gomoku_and_go_service(server.grpc_url) as service:
        yield f"127.0.0.1:{service.port}"


@pytest.fixture(scope="module", name="service")
def search_service(triton_server: TritonSetup) -> Iterator[str]:
    """The search service in this process over `triton_server`, once the model answers
    through it: yields its target "127.0.0.1:port"."""

    from services.search.client import SearchClient
    from services.search.server import build_server
    from services.triton.client import PolicyClient

    policy = PolicyClient(triton_server.server.grpc_url, timeout_s=10.0)
    server, port = build_server(policy, port=0)
    server.start()
    target = f"127.0.0.1:{port}"
    try:
        with SearchClient(target) as client:
            wait_for_predict(client, ["h8"])
            # one untimed search first: the model's first batches of leaves (new batch shapes
            # for TorchScript, first calls through the batcher) are not paid by a test that
            # times its first move, as the Gomocup session does within its turn
            client.genmove([], max_visits=64, reuse_tree=False, timeout=120)
        yield target
    finally:
        server.stop(0).wait()
        policy.close()


def run_in_threads(work: Callable[[int], None], count: int,
                   timeout_s: float) -> list[BaseException]:
    """Run work(0), ..., work(count - 1) in threads at once, as concurrent clients; returns the
    exceptions they raised (assertion failures included), for the test to assert on."""
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    return errors


def require_tritonserver() -> Path:
    try:
        return find_tritonserver()
    except FileNotFoundError as exc:
        pytest.skip(f"no tritonserver: {exc}")


@dataclass
class TritonSetup:
    server: TritonServer
    repository: Path
    models_dir: Path  # where the fixture keeps its TorchScript files
    v1_model: Path


@pytest.fixture(scope="module")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonSetup]:
    require_tritonserver()
    root = tmp_path_factory.mktemp("triton")
    repository = make_repository(root)
    models_dir = root / "torchscript"
    v1_model = build_tiny_policy(models_dir / "tiny-seed0.pt", seed=0)
    publish(v1_model, repository, MODEL_NAME, metadata={"seed": 0})
    server = TritonServer(repository, log_path=root / "tritonserver.log", startup_timeout_s=60)
    with server:
        yield TritonSetup(server, repository, models_dir, v1_model)


# --------------------------------------------------------------------------- Go
GO_MODEL_NAME = "go_policy"
GO_CONFIG = "go_res_b2c32"  # the small Go network of services/models/configs.py


def add_go_model(repository: Path, seed: int = 0) -> Path:
    """Copy the tracked go_policy config into `repository` and publish an untrained
    `GO_CONFIG` network (weights from `seed`) as its next version; returns its model.pt."""
    from services.trainer.publish import publish_model

    (repository / GO_MODEL_NAME).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(
        TRACKED_REPOSITORY / GO_MODEL_NAME / "config.pbtxt",
        repository / GO_MODEL_NAME / "config.pbtxt",
    )
    version = publish_model(repository, config=GO_CONFIG, seed=seed)
    return repository / GO_MODEL_NAME / str(version) / "model.pt"


def add_go_value_model(repository: Path, seed: int = 0) -> Path:
    """Publish a `GO_VALUE_CONFIG` network (`value_network`) as the next version of the Go
    model in `repository` (its config already there); returns its model.pt."""
    from services.trainer.publish import publish_network

    version = publish_network(value_network(GO_VALUE_CONFIG, seed), GO_VALUE_CONFIG, repository,
                              GO_MODEL_NAME, source=f"value_network({GO_VALUE_CONFIG!r}, {seed})")
    return repository / GO_MODEL_NAME / str(version) / "model.pt"


def go_triton_setup(root: Path, with_gomoku: bool = True) -> tuple[TritonServer, TritonSetup]:
    """A repository with the Go model v1 (and the tiny Gomoku policy v1) and a not yet
    started server loading both; `TritonSetup.v1_model` is the Go model's model.pt."""
    repository = make_repository(root) if with_gomoku else root / "model_repository"
    models: tuple[str, ...] = (GO_MODEL_NAME,)
    models_dir = root / "torchscript"
    if with_gomoku:
        publish(build_tiny_policy(models_dir / "tiny-seed0.pt", seed=0), repository, MODEL_NAME)
        models = (MODEL_NAME, GO_MODEL_NAME)
    go_model = add_go_model(repository)
    server = TritonServer(
        repository, models=models, log_path=root / "tritonserver.log", startup_timeout_s=120
    )
    return server, TritonSetup(server, repository, models_dir, go_model)
