"""The committed Triton configs are the games' generated output (services/games/triton_config.py):
a game's shapes are stated once, in its `model_io()`."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.games.registry import BUILTIN_MODULES, registered_games
from services.games.triton_config import config_path, config_text, io_dims

ROOT = Path(__file__).resolve().parents[1]
# the games whose configs are committed (a test game registered by another test has none)
BUILTIN = [g for g in registered_games() if type(g).__module__ in BUILTIN_MODULES]


@pytest.mark.parametrize("game", BUILTIN, ids=lambda g: g.name)
def test_the_committed_config_is_the_generated_one(game) -> None:
    committed = config_path(game, ROOT / "model_repository").read_text(encoding="utf-8")
    assert committed == config_text(game), (
        f"model_repository/{game.default_model}/config.pbtxt differs from what its game "
        "generates: run `python -m services.games.triton_config --write`")


@pytest.mark.parametrize("game", BUILTIN, ids=lambda g: g.name)
def test_the_config_states_the_games_shapes(game) -> None:
    dims, n_moves = io_dims(game)
    size = game.default_size
    if len(game.sizes) > 1:  # one version for every size: the spatial dims follow the board
        assert dims[-2:] == (-1, -1) and n_moves == -1
        assert dims[:-2] == game.input_shape(size)[:-2]
    else:
        assert dims == game.input_shape(size) and n_moves == game.policy_size(size)
    text = config_text(game)
    assert f'name: "{game.default_model}"' in text
    assert "dims: [ " + ", ".join(map(str, dims)) + " ]" in text
