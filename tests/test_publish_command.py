"""One publish path for every game: `python -m services.trainer.publish` (its `main`) publishes a
network of each registered game (tic-tac-toe, `tests/tictactoe_game.py`, included: nothing in
services/ names it) the same way. The configuration and the game say what differs (the module
served, the input, the sizes); the export check, the metadata and the version numbering are
the same, and an unknown configuration, one of another game or an unknown game is refused in
words before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import tests.tictactoe_game  # noqa: F401  (registers the test game before the parametrisation)
from services.games.base import Game
from services.games.registry import registered_games
from services.models.configs import spec
from services.models.value import split_outputs
from services.models.weights import network
from services.repository.model_check import check_sizes_for
from services.repository.versions import list_versions
from services.trainer.publish import main

GAMES = registered_games()


def _logits(model: torch.nn.Module, boards: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return split_outputs(model(boards))[0]


@pytest.mark.parametrize("game", GAMES, ids=[g.name for g in GAMES])
def test_the_command_publishes_a_network_of_every_game(game: Game, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    config = game.default_config
    repo = tmp_path / "repo"
    assert main(["--repository", str(repo), "--game", game.name, "--seed", "3"]) == 0
    assert f"published {game.default_model} v1 ({config})" in capsys.readouterr().out
    # v2: a checkpoint, which names its configuration (and so the game)
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save({"model": network(config, seed=5).state_dict(), "config": config}, checkpoint)
    assert main(["--repository", str(repo), "--checkpoint", str(checkpoint)]) == 0
    assert f"published {game.default_model} v2 ({config})" in capsys.readouterr().out
    assert list_versions(repo, game.default_model) == [1, 2]

    found = spec(config)
    for version, seed, source in ((1, 3, f"untrained {config}, seed 3"),
                                  (2, 5, str(checkpoint.resolve()))):
        folder = repo / game.default_model / str(version)
        meta = json.loads((folder / "metadata.json").read_text())
        # the same metadata for every game
        assert (meta["version"], meta["game"], meta["encoder"]) == (version, game.name,
                                                                    found.encoder)
        assert meta["model_config"]["name"] == config
        assert meta["model_config"]["game"] == game.name
        assert meta["pass_move"] is game.has_pass and meta["value_head"] is found.value
        assert 0 <= meta["export_max_abs_diff"] <= 1e-4
        assert meta["source"] == source and meta["gate"]["passed"] is None
        assert meta["metrics"] is None and meta["dataset"] is None
        assert "smoke_positions" not in meta  # stored only with a dataset
        # the file answers the game's input at each size it was checked at, as the module
        # the configuration serves with those weights does
        scripted = torch.jit.load(str(folder / "model.pt"))
        served = found.served(network(config, seed=seed))
        for size in check_sizes_for(game):
            boards = torch.from_numpy(game.sample_inputs(4, size, seed=size,
                                                         encoder=found.encoder))
            logits = _logits(scripted, boards)
            assert tuple(logits.shape) == (4, game.policy_size(size))
            torch.testing.assert_close(logits, _logits(served, boards))


@pytest.mark.parametrize(("args", "message"), [
    (["--config", "no_such_net"], "unknown model config 'no_such_net'; known: "),
    (["--game", "capture", "--config", "go_res_b2c32"],
     "'go_res_b2c32' is a go configuration, not a Capture Game one (Capture Game "
     "configurations: capture_mdlstm_k2, capture_mdrnn_k2, capture_res_b2c32, "
     "capture_res_b2c32_v)"),
    (["--game", "go", "--config", "tictactoe_tiny"],
     "'tictactoe_tiny' is a tictactoe configuration, not a Go one"),
    (["--game", "chess"], "unknown game"),
    ([], "name the network: --config NAME, or --game GAME"),
], ids=["unknown config", "another game's", "a test game's", "unknown game", "none named"])
def test_a_config_the_command_cannot_publish_is_refused_in_words(
        args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    repo = tmp_path / "repo"
    assert main(["--repository", str(repo), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert not repo.exists()  # refused before anything was written


def test_a_network_of_another_input_is_published_under_its_model(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The default model name comes from the game for the configuration's input encoder
    (`Game.model_name`), whose generated config declares that input."""
    from services.games.go.game import GO

    config = "go_res_b2c32_x"
    encoder = spec(config).encoder
    model = GO.model_name(encoder)
    assert encoder != "basic" and model != GO.default_model
    assert main(["--repository", str(tmp_path), "--config", config]) == 0
    assert f"published {model} v1 ({config})" in capsys.readouterr().out
    meta = json.loads((tmp_path / model / "1" / "metadata.json").read_text())
    assert (meta["encoder"], meta["game"]) == (encoder, GO.name)
