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


ENCODED = [(g, e) for g in registered_games() for e in g.encoder_names()]


@pytest.mark.parametrize("game, encoder", ENCODED, ids=lambda x: getattr(x, "name", x))
def test_each_encoders_model_declares_its_input_and_encoder(game, encoder, tmp_path) -> None:
    """A network of another input encoder (Go's "extended") is a model of its own: its config
    takes that encoder's input and names the encoder, which is what the client reads."""
    from services.games.registry import game_for_model, model_of
    from services.repository.configs import config_encoder, parse_config

    text = config_text(game, encoder)
    path = tmp_path / "config.pbtxt"
    path.write_text(text, encoding="utf-8")
    parsed = parse_config(path)
    name = game.model_name(encoder)
    assert parsed.name == name
    assert config_encoder(parsed) == encoder
    dims, n_moves = io_dims(game, encoder)
    assert tuple(parsed.input[0].dims) == dims and parsed.output[0].dims[-1] == n_moves
    size = game.default_size
    assert dims[:-2] == game.encoder_input_shape(encoder, size)[:-2]
    assert model_of(name) == (game, encoder) == model_of(name + "__candidate")
    assert game_for_model(name) is game


def test_go_extended_config_text() -> None:
    from services.games.go.encoders import EXTENDED_CHANNELS
    from services.games.registry import get_game

    go = get_game("go")
    text = config_text(go, "extended")
    assert 'name: "go_policy_extended"' in text
    assert f"dims: [ {EXTENDED_CHANNELS}, -1, -1 ]" in text
    assert 'key: "encoder"\n  value: { string_value: "extended" }' in text
    assert 'key: "pass_move"\n  value: { string_value: "true" }' in text
    assert 'value: { string_value: "basic" }' in config_text(go)
    assert go.model_name("extended") == "go_policy_extended" and go.model_name() == "go_policy"
