"""A Go network on the extended input (the basic planes and tactical channels) served end to
end: published as Go's extended model (`Game.model_name("extended")`, whose generated config
declares the encoder), rolled out through the smoke test, and asked through the gRPC search
service, which computes each position's extended input and sends it. Refusals: a version whose
recorded encoder is not its model's (publisher, launcher, rollout).

First part (no Triton): the publisher writes the extended model's config and refuses a network
under the model of another encoder; the launcher's file check refuses a version of another
encoder. Second part (skipped without a ``tritonserver`` binary): a real Triton serving
``go_policy_extended`` v1 (an untrained ``go_res_b2c32_x``), Predict and GenMove through the
search service against the same TorchScript file run here on the extended input of the same
positions, a rollout of v2 (smoke-tested on the extended input, its stored positions sent as
stored), and a rollout refused for a version of the basic encoder.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from services.games.base import BASIC_ENCODER
from services.games.go.encoders import EXTENDED_CHANNELS
from services.games.go.game import GO, GoSearchState, parse_vertex
from services.games.go.rules import GoState
from services.games.triton_config import config_text
from services.numerics import masked_softmax
from services.repository.configs import config_encoder, model_encoder, parse_config
from tests.triton_fixtures import require_tritonserver

EXTENDED = "extended"
MODEL = GO.model_name(EXTENDED)  # go_policy_extended
CONFIG = "go_res_b2c32_x"  # the small Go network on the extended input
BASIC_CONFIG = "go_res_b2c32"
KO = ["D4", "E4", "C5", "F5", "D6", "E6", "A1", "D5", "E5"]  # black E5 takes the ko at D5
# a white stone in atari (C3), a black ladder-ish shape: tactical channels that are not zero
ATARI = ["C3", "C4", "Q16", "B3", "Q4", "D3", "D16", "C2"]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One intra-op thread: two OpenMP threads on the shared 2-core machine spin-wait."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def replay(vertices: list[str], komi: float = 7.5) -> GoSearchState:
    pos = GoSearchState(GoState(GO.default_size), komi)
    for v in vertices:
        p = parse_vertex(v, GO.default_size)
        pos = pos.play(pos.pass_move if p is None else p)
    return pos


def extended_inputs(positions: list[GoSearchState]) -> np.ndarray:
    """The extended input of `positions`, made here the way the client makes it."""
    return GO.encode_inputs(np.stack([GO.network_input(p) for p in positions]), EXTENDED)


def run_here(model: Path, boards: np.ndarray) -> np.ndarray:
    """The logits of the TorchScript file run in this process on `boards`."""
    scripted = torch.jit.load(str(model), map_location="cpu").eval()
    with torch.inference_mode():
        out = scripted(torch.from_numpy(np.ascontiguousarray(boards)))
    return (out[0] if isinstance(out, tuple) else out).numpy()


def publish_extended(repository: Path, seed: int) -> Path:
    """An untrained `CONFIG` network (weights from `seed`) published as the next version of
    `MODEL`; its model.pt."""
    from services.trainer.publish import publish_model

    version = publish_model(repository, config=CONFIG, seed=seed, model_name=MODEL)
    return repository / MODEL / str(version) / "model.pt"


def basic_version_under_extended(repository: Path, scratch: Path) -> int:
    """A basic Go network's version folder copied, files intact, as the next version of
    `MODEL` (what a hand copy would do; the publisher refuses it): its version number."""
    from services.repository.versions import next_version
    from services.trainer.publish import publish_model

    basic = publish_model(scratch, config=BASIC_CONFIG, seed=0)
    version = next_version(repository, MODEL)
    shutil.copytree(scratch / GO.default_model / str(basic), repository / MODEL / str(version))
    return version


# --------------------------------------------------------------------------- no Triton


def test_the_publisher_writes_the_extended_config_and_refuses_other_encoders(
        tmp_path: Path) -> None:
    from services.repository.publish import publish
    from services.repository.version_files import check_version_files, require_served_input
    from services.triton.version_choice import check_files

    repository = tmp_path / "repo"
    model = publish_extended(repository, seed=0)
    # the model's config is generated for its encoder (the name says which)
    config = repository / MODEL / "config.pbtxt"
    assert config.read_text() == config_text(GO, EXTENDED)
    assert config_encoder(parse_config(config)) == EXTENDED == model_encoder(repository, MODEL)
    assert list(parse_config(config).input[0].dims) == [EXTENDED_CHANNELS, -1, -1]
    meta = json.loads((model.parent / "metadata.json").read_text())
    assert meta["encoder"] == EXTENDED
    files, _ = check_version_files(repository, MODEL, 1)
    require_served_input(files, 1, EXTENDED)
    check_files(repository, MODEL, 1)  # the launcher serves it

    # the network under the basic model: refused with the model it belongs under
    with pytest.raises(ValueError, match=r"the config of 'go_policy' declares the 'basic' input "
                                         r"encoder, this Go network takes the 'extended' input: "
                                         r"publish it under 'go_policy_extended'"):
        publish(model, repository, GO.default_model, game=GO, encoder=EXTENDED)
    # a basic network under the extended model: refused too
    with pytest.raises(ValueError, match=r"the config of 'go_policy_extended' declares the "
                                         r"'extended' input encoder, this Go network takes the "
                                         r"'basic' input: publish it under 'go_policy'"):
        publish(model, repository, MODEL, game=GO, encoder=BASIC_ENCODER)

    # a basic version copied in by hand: the launcher skips it, saying why
    version = basic_version_under_extended(repository, tmp_path / "scratch")
    with pytest.raises(ValueError, match=rf"version {version} takes the 'basic' input encoder "
                                         r"\(its metadata.json\), its model's config.pbtxt "
                                         r"declares the 'extended' encoder"):
        check_files(repository, MODEL, version)


def test_a_config_without_an_encoder_declares_the_basic_one(tmp_path: Path) -> None:
    """Configs written before encoders were declared (an older repository's) serve the basic
    input, and refuse an extended version."""
    from services.repository.version_files import require_served_input

    text = config_text(GO)
    start = text.index('parameters: {\n  key: "encoder"')
    old = text[:start] + text[text.index("}\n}\n", start) + 4:]
    assert "encoder" not in old.split("name:")[1]
    path = tmp_path / "config.pbtxt"
    path.write_text(old)
    assert config_encoder(parse_config(path)) == BASIC_ENCODER
    files = {"metadata.json": json.dumps({"encoder": EXTENDED}).encode()}
    with pytest.raises(ValueError, match=r"version 3 takes the 'extended' input encoder"):
        require_served_input(files, 3, config_encoder(parse_config(path)))
    require_served_input({}, 3, BASIC_ENCODER)  # no metadata: the basic input, as before


# --------------------------------------------------------------------------- real Triton


@dataclass
class Live:
    target: str  # the search service
    grpc_url: str  # Triton
    repository: Path
    v1_model: Path
    scratch: Path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    from services.search.client import SearchClient, go_position
    from services.search.server import build_service
    from services.triton.client import PolicyClient
    from services.triton.launcher import TritonServer
    from tests.triton_fixtures import wait_for_predict

    require_tritonserver()
    root = tmp_path_factory.mktemp("go-extended")
    repository = root / "model_repository"
    v1 = publish_extended(repository, seed=0)
    server = TritonServer(repository, models=(MODEL,), log_path=root / "tritonserver.log",
                          startup_timeout_s=120)
    with server:
        policy = PolicyClient(server.grpc_url, MODEL, timeout_s=30.0, game=GO)
        service = build_service({GO.name: policy}).start()
        target = f"127.0.0.1:{service.port}"
        try:
            with SearchClient(target) as client:
                wait_for_predict(client, go_position(["D4"]))
            yield Live(target, server.grpc_url, repository, v1, root / "scratch")
        finally:
            service.stop(0)
            policy.close()


@pytest.mark.timeout(300)
def test_predict_and_genmove_send_the_extended_input(live: Live) -> None:
    from services.search.client import SearchClient, go_position
    from services.triton.client import PolicyClient

    games = [KO, ATARI, []]
    positions = [replay(g) for g in games]
    boards = extended_inputs(positions)
    assert boards.shape == (3, EXTENDED_CHANNELS, 19, 19)
    assert boards[:2, 4:].any()  # the tactical channels hold something (captures, ataris)
    expected = [masked_softmax(row, p.legal_mask())
                for row, p in zip(run_here(live.v1_model, boards), positions, strict=True)]
    with PolicyClient(live.grpc_url, MODEL, timeout_s=30.0) as admin:
        assert admin.encoder_of() == EXTENDED  # read from Triton's own config

    with SearchClient(live.target) as client:
        one = client.predict(go_position(KO), top_k=3)
        many = client.predict_many([go_position(g) for g in games], top_k=3)
        move = client.genmove(go_position(ATARI), max_visits=32, reuse_tree=False)
    assert (one.model_name, one.model_version) == (MODEL, "1")
    # the same policy as the network run here on the extended input of the same position
    np.testing.assert_allclose(np.array(one.policy), expected[0], rtol=1e-4, atol=1e-5)
    assert len(many.results) == 3
    for result, want in zip(many.results, expected, strict=True):
        np.testing.assert_allclose(np.array(result.policy), want, rtol=1e-4, atol=1e-5)
    assert (move.model_name, move.model_version) == (MODEL, "1")
    assert move.total_visits == 32
    size = GO.default_size
    point = size * size if move.move.is_pass else move.move.y * size + move.move.x
    assert replay(ATARI).legal_mask()[point]


@pytest.mark.timeout(600)
def test_rollout_smoke_tests_the_extended_input_and_refuses_a_basic_version(
        live: Live) -> None:
    """v2 rolls out: its smoke test sends the game's positions in the extended input and its
    stored positions (stored in that input, each with the move v2 itself ranks first, so its
    top-1 there is 1 by construction) as they are. A basic network's version under the
    extended model is refused, and v2 keeps serving."""
    from services.models.configs import build
    from services.repository.publish import publish
    from services.repository.smoke_positions import SMOKE_POSITIONS_FILE, write_smoke_positions
    from services.search.client import SearchClient, go_position
    from services.trainer.publish import export_served
    from services.triton.client import PolicyClient
    from services.triton.rollout import RolloutError, rollout

    exported = live.scratch / "v2" / "model.pt"
    exported.parent.mkdir(parents=True)
    torch.manual_seed(1)
    export_served(build(CONFIG), CONFIG, exported)
    positions = [replay(g) for g in (KO, ATARI, ["D4"], ["Q16", "D4", "C3"])]
    boards = extended_inputs(positions)
    logits = run_here(exported, boards)
    occupied = np.pad(GO.stone_cells(boards).reshape(len(boards), -1) != 0, ((0, 0), (0, 1)))
    scores = np.where(occupied, -np.inf, logits.astype(np.float64))
    moves = np.argmax(scores, axis=1)
    top_two = np.sort(scores, axis=1)[:, -2:]
    assert (top_two[:, 1] - top_two[:, 0] > 1e-3).all()  # no float path can reorder them
    write_smoke_positions(live.scratch / SMOKE_POSITIONS_FILE, boards, moves)
    version = publish(exported, live.repository, MODEL, game=GO, encoder=EXTENDED,
                      metadata={"smoke_positions": {"top1": 1.0}},
                      extra_files={SMOKE_POSITIONS_FILE: live.scratch / SMOKE_POSITIONS_FILE})

    with PolicyClient(live.grpc_url, MODEL, timeout_s=30.0) as client:
        report = rollout(client, live.repository, version, MODEL)
        assert report.current == version and report.smoke_passed, report.to_markdown()
        checks = {c.name: c for c in report.smoke}
        stored = checks["top-1 (stored positions)"]
        assert stored.passed and not stored.skipped, stored.detail
        assert "1.000" in stored.detail or "100" in stored.detail, stored.detail
        assert checks["serving"].passed

        refused = basic_version_under_extended(live.repository, live.scratch / "basic")
        with pytest.raises(RolloutError, match=rf"version {refused} takes the 'basic' input "
                                               r"encoder .* declares the 'extended' encoder"):
            rollout(client, live.repository, refused, MODEL)

    with SearchClient(live.target) as search:
        r = search.predict(go_position(KO), top_k=362)
    assert r.model_version == str(version)
    expected = masked_softmax(run_here(exported, boards[:1])[0], positions[0].legal_mask())
    np.testing.assert_allclose(np.array(r.policy), expected, rtol=1e-4, atol=1e-5)
