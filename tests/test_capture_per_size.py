"""One Capture Game network per board size, served as one model: the per-size weights file
(`write_per_size` / `read_weights`), the `PerSize` module, and its publication
(`python -m services.trainer.publish --weights-per-size`), whose TorchScript file must play each
size 5..9 exactly as the in-process network trained for it (small random-weight networks, no
training), a real Triton serving it, and the search service over that Triton (Predict and
GenMove answered with each size's own network)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from services.games.capture.game import CAPTURE
from services.models.configs import spec
from services.models.per_size import PerSize
from services.models.weights import load_weights, network, read_weights, write_per_size
from services.search import mcts
from services.search.client import SearchClient, game_position
from services.search.server import build_service
from services.trainer.publish import main, publish_model
from services.triton.client import PolicyClient
from services.triton.launcher import TritonServer
from tests.triton_fixtures import make_repository, require_tritonserver

CONFIG = "capture_mdlstm_k2"
TRAINED = {5: 11, 7: 12, 9: 13}  # size -> the seed of its random network


def _best_networks(folder: Path) -> dict[int, Path]:
    """One policy-search `best_network.pt` per trained size, as the flow writes them."""
    files = {}
    for size, seed in TRAINED.items():
        files[size] = folder / f"best_{size}.pt"
        torch.save({"config": CONFIG, "model": network(CONFIG, seed).state_dict(),
                    "board_size": size, "fitness": 0.1 * size, "run": f"run-{size}"},
                   files[size])
    return files


def _plays(size: int) -> int:
    """The trained size whose network plays `size`: the largest at or below it, else the
    smallest."""
    return max([s for s in TRAINED if s <= size], default=min(TRAINED))


def _logits(model: torch.nn.Module, boards: np.ndarray) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.from_numpy(boards))


def test_the_per_size_file_keeps_each_network_and_what_it_records(tmp_path: Path) -> None:
    combined = write_per_size(_best_networks(tmp_path), tmp_path / "per_size.pt")
    found = read_weights(combined)
    assert found.config == CONFIG and sorted(found.sizes) == [5, 7, 9]
    assert found.metrics["policy_search_7x7"] == {"fitness": pytest.approx(0.7),
                                                 "board_size": 7, "run": "run-7"}
    net = network(CONFIG, 0, found)
    assert isinstance(net, PerSize) and net.sizes == [5, 7, 9]
    for i, size in enumerate(net.sizes):
        expected = network(CONFIG, TRAINED[size]).state_dict()
        got = net.nets[i].state_dict()
        assert all(torch.equal(got[k], expected[k]) for k in expected)
    with pytest.raises(ValueError, match="one network per board size"):
        load_weights(spec(CONFIG).network(0), found)


def test_a_per_size_file_that_does_not_fit_is_refused_in_words(tmp_path: Path) -> None:
    files = _best_networks(tmp_path)
    with pytest.raises(ValueError, match="trained on 7x7, given for 9x9"):
        write_per_size({5: files[5], 9: files[7]}, tmp_path / "bad.pt")
    big = tmp_path / "big.pt"
    torch.save({"config": CONFIG, "sizes": {"11": network(CONFIG, 0).state_dict()}}, big)
    with pytest.raises(ValueError, match="a 11x11 network"):
        network(CONFIG, 0, big)


def test_the_published_per_size_model_plays_each_size_with_its_network(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    files = _best_networks(tmp_path)
    repo, combined = tmp_path / "repo", tmp_path / "per_size.pt"
    pairs = [f"{size}={file}" for size, file in files.items()]
    assert main(["--repository", str(repo), "--game", "capture", "--weights", str(combined),
                 "--weights-per-size", *pairs]) == 0
    assert "published capture_policy v1 (capture_mdlstm_k2)" in capsys.readouterr().out
    folder = repo / "capture_policy" / "1"
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["per_size"] == [5, 7, 9]
    assert meta["metrics"]["policy_search_9x9"]["run"] == "run-9"
    served = torch.jit.load(str(folder / "model.pt"))
    wrap = spec(CONFIG).served
    for size in CAPTURE.sizes:
        boards = np.concatenate([CAPTURE.random_inputs(8, size, size),
                                 CAPTURE.sample_inputs(8, size, size)])
        own = _logits(wrap(network(CONFIG, TRAINED[_plays(size)])), boards)
        got = _logits(served, boards)
        assert got.shape == (16, size * size)
        assert torch.allclose(got, own, atol=1e-5), size
        assert torch.equal(got.argmax(1), own.argmax(1)), size
        # and not another size's network (the random networks differ on every size)
        other = _logits(wrap(network(CONFIG, TRAINED[9 if _plays(size) != 9 else 5])), boards)
        assert not torch.allclose(got, other, atol=1e-3), size


@pytest.fixture(scope="module")
def triton_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Triton serving the published per-size version (the tracked ``capture_policy``
    config): yields its gRPC url."""
    require_tritonserver()
    root = tmp_path_factory.mktemp("per-size-triton")
    repo = make_repository(root, CAPTURE.default_model)
    combined = write_per_size(_best_networks(root), root / "per_size.pt")
    assert publish_model(repo, game=CAPTURE.name, weights=combined) == 1
    server = TritonServer(repo, models=(CAPTURE.default_model,),
                          log_path=root / "tritonserver.log", startup_timeout_s=120)
    with server:
        yield server.grpc_url


@pytest.mark.timeout(300)
def test_triton_serves_the_per_size_model_on_every_size(triton_url: str) -> None:
    """The published per-size version loads in a real Triton (the tracked ``capture_policy``
    config, any size) and answers each size 5..9 with the logits of that size's network."""
    wrap = spec(CONFIG).served
    with PolicyClient(triton_url, CAPTURE.default_model, timeout_s=30.0) as client:
        for size in CAPTURE.sizes:
            boards = CAPTURE.sample_inputs(6, size, size)
            got = torch.tensor(client.infer(boards).logits)
            own = _logits(wrap(network(CONFIG, TRAINED[_plays(size)])), boards)
            assert got.shape == (6, size * size)
            assert torch.allclose(got, own, atol=1e-5), size


@pytest.mark.timeout(300)
def test_the_search_service_answers_each_size_with_its_own_network(triton_url: str) -> None:
    """Through the search service (what GenMove and ``movepred play`` use): on 5x5 and 9x9,
    Predict's policy and every GenMove candidate's prior are the masked softmax of that size's
    own network (not of the other one), and the move is legal."""
    wrap = spec(CONFIG).served
    nets = {size: wrap(network(CONFIG, TRAINED[size])) for size in (5, 9)}
    with PolicyClient(triton_url, CAPTURE.default_model, timeout_s=30.0) as policy:
        service = build_service({CAPTURE.name: policy}).start()
        try:
            with SearchClient(f"127.0.0.1:{service.port}") as client:
                for size, moves in ((5, ["c3", "b2"]), (9, ["e5", "d4", "f6"])):
                    state = CAPTURE.start(size)
                    for name in moves:
                        state = state.play(CAPTURE.parse_move(name, size))
                    legal = state.legal_mask()
                    board = CAPTURE.network_input(state)[None].copy()
                    own, other = (mcts.masked_softmax(_logits(nets[s], board)[0].numpy(), legal)
                                  for s in (size, 14 - size))
                    position = game_position(CAPTURE, moves, size)
                    r = client.predict(position, top_k=1, timeout=60)
                    assert r.model_version == "1"
                    np.testing.assert_allclose(np.array(r.policy), own, rtol=1e-4, atol=1e-6)
                    assert np.abs(np.array(r.policy) - other).max() > 1e-3, size
                    g = client.genmove(position, max_visits=32, max_candidates=size * size,
                                       reuse_tree=False, timeout=120)
                    assert legal[CAPTURE.parse_move(g.name, size)], (size, g.name)
                    priors = {c.name: c.prior for c in g.candidates}
                    assert len(priors) == legal.sum(), size  # no suicide on these boards
                    for name, prior in priors.items():
                        assert prior == pytest.approx(own[CAPTURE.parse_move(name, size)],
                                                      rel=1e-4, abs=1e-6), (size, name)
        finally:
            service.stop()
