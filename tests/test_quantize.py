"""int8 copies of published versions (`services.repository.quantize`, ``movepred quantize``):
published beside their source with what they are, close to it, refused when they cannot be
made or agree too little, served by Triton on the CPU, and searched like any version.

The thresholds hold with a wide margin: on seeded random weights the int8 network's best move
is the float one's on 95-97% of the positions and its logits differ by under 0.01."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from services import cli
from services.games.registry import get_game
from services.models.local_evaluator import LocalEvaluator
from services.repository.quantize import QuantizeError, publish_int8, quantize_version
from services.repository.versions import version_dir
from services.search import mcts
from services.trainer.publish import publish_model
from services.triton.client import PolicyClient
from services.triton.launcher import TritonServer
from tests.triton_fixtures import TRACKED_REPOSITORY, require_tritonserver

torch.set_num_threads(1)
GOMOKU = get_game("gomoku")
MODEL = "gomoku_policy"


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, int]:
    repository = tmp_path / "repo"
    return repository, publish_model(repository, game="gomoku", config="shao_f32_n2_v", seed=3)


def test_an_int8_copy_is_published_beside_its_source_and_answers_alike(repo) -> None:
    repository, source = repo
    new, report = publish_int8(repository, MODEL, source)
    assert new == source + 1
    meta = json.loads((version_dir(repository, MODEL, new) / "metadata.json").read_text())
    assert meta["precision"] == "int8" and meta["quantized_from"] == source
    assert meta["quantization"]["top1_agreement"] == report.top1_agreement >= 0.8
    assert meta["model_config"]["name"] == "shao_f32_n2_v" and meta["game"] == "gomoku"
    assert report.checked_on == "sampled" and report.max_abs_logit_diff < 0.1
    assert report.max_abs_value_diff is not None and report.max_abs_value_diff < 0.1
    boards = GOMOKU.sample_inputs(40, seed=9)
    floats = LocalEvaluator.from_version_folder(version_dir(repository, MODEL, source))
    ints = LocalEvaluator.from_version_folder(version_dir(repository, MODEL, new))
    a, b = floats.evaluate(boards), ints.evaluate(boards)
    assert b.logits.shape == a.logits.shape and b.values.shape == a.values.shape
    assert np.corrcoef(a.logits.ravel(), b.logits.ravel())[0, 1] > 0.99
    state = GOMOKU.start().play(112).play(113)
    result = mcts.search(state, ints, max_visits=32)
    assert result.total_visits == 32 and state.legal_mask().reshape(-1)[result.move]


def test_what_cannot_be_quantized_is_refused(repo, tmp_path: Path) -> None:
    repository, source = repo
    with pytest.raises(QuantizeError, match="under 101%"):
        quantize_version(version_dir(repository, MODEL, source), min_agreement=1.01)
    new, _ = publish_int8(repository, MODEL, source)
    with pytest.raises(QuantizeError, match="already int8"):
        quantize_version(version_dir(repository, MODEL, new))
    with pytest.raises(QuantizeError, match="v9 is not published"):
        publish_int8(repository, MODEL, 9)
    folder = version_dir(repository, MODEL, source)
    meta = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps({**meta, "model_config": {}}))
    with pytest.raises(QuantizeError, match="no model configuration"):
        quantize_version(folder)


def test_the_command_publishes_and_says_what_it_made(repo, capsys) -> None:
    repository, source = repo
    code = cli.main(["quantize", "--repository", str(repository), "--version", str(source)])
    out = capsys.readouterr().out
    assert code == 0 and f"published {MODEL} v{source + 1}: int8 of v{source}" in out
    assert "sampled positions" in out
    with pytest.raises(SystemExit) as exited:
        sys.exit(cli.main(["quantize", "--repository", str(repository), "--version", "7"]))
    assert exited.value.code == 2 and "v7 is not published" in capsys.readouterr().err


@pytest.mark.integration
def test_triton_serves_an_int8_version_on_the_cpu(repo, tmp_path: Path) -> None:
    """The int8 file runs in Triton's python backend (`policy_model.py`, which keeps an int8
    version on the CPU even where a GPU is seen) and answers as it does in-process."""
    require_tritonserver()
    repository, source = repo
    shutil.copy(TRACKED_REPOSITORY / MODEL / "config.pbtxt", repository / MODEL / "config.pbtxt")
    new, _ = publish_int8(repository, MODEL, source)
    boards = GOMOKU.sample_inputs(8, seed=4)
    local = LocalEvaluator.from_version_folder(version_dir(repository, MODEL, new))
    log = tmp_path / "tritonserver.log"
    with TritonServer(repository, log_path=log, startup_timeout_s=60) as server:
        client = PolicyClient(server.grpc_url, MODEL, game=GOMOKU)
        try:
            served = client.infer(boards, model_version=new)
        finally:
            client.close()
    np.testing.assert_allclose(served.logits, local.evaluate(boards).logits, atol=1e-4)
    assert f"{MODEL} v{new}: TorchScript policy on cpu" in log.read_text()
