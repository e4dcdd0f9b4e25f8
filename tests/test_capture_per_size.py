"""One Capture Game network per board size, served as one model: the per-size weights file
(`write_per_size` / `read_weights`), the `PerSize` module, and its publication
(`python -m services.trainer.publish --weights-per-size`), whose TorchScript file must play each
size 5..9 exactly as the in-process network trained for it (small random-weight networks, no
training), and a real Triton serving it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from services.games.capture.game import CAPTURE
from services.models.configs import spec
from services.models.per_size import PerSize
from services.models.weights import load_weights, network, read_weights, write_per_size
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


@pytest.mark.timeout(300)
def test_triton_serves_the_per_size_model_on_every_size(tmp_path: Path) -> None:
    """The published per-size version loads in a real Triton (the tracked ``capture_policy``
    config, any size) and answers each size 5..9 with the logits of that size's network."""
    require_tritonserver()
    repo = make_repository(tmp_path, CAPTURE.default_model)
    combined = write_per_size(_best_networks(tmp_path), tmp_path / "per_size.pt")
    assert publish_model(repo, game=CAPTURE.name, weights=combined) == 1
    wrap = spec(CONFIG).served
    server = TritonServer(repo, models=(CAPTURE.default_model,),
                          log_path=tmp_path / "tritonserver.log", startup_timeout_s=120)
    with server, PolicyClient(server.grpc_url, CAPTURE.default_model, timeout_s=30.0) as client:
        for size in CAPTURE.sizes:
            boards = CAPTURE.sample_inputs(6, size, size)
            got = torch.tensor(client.infer(boards).logits)
            own = _logits(wrap(network(CONFIG, TRAINED[_plays(size)])), boards)
            assert got.shape == (6, size * size)
            assert torch.allclose(got, own, atol=1e-5), size
