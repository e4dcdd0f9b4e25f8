"""Go networks on the extended input (`GoGame.encoders["extended"]`: the basic planes and the
tactical channels) through the trainer, its evaluation, export and publication: the stored
shards hold the basic [4, S, S] planes, and every model is handed its own input, made from
them by its game (`Game.encode_inputs`) by the encoder its configuration names
(`ModelSpec.encoder`). A basic configuration's batches are never converted; a configuration
naming an encoder its game does not have is refused before any step.

The dataset is the synthetic 9x9 one of tests/test_go_training.py (random legal games, the
project's own Go ingest); the published repository is a temporary one, with the generated
config of Go's extended model (`Game.model_name`), and no Triton (serving it:
tests/test_go_extended_serving.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from services.games.base import BASIC_ENCODER
from services.games.go.encoders import EXTENDED_CHANNELS
from services.games.go.game import GO, GoGame
from services.games.gomoku.game import GOMOKU
from services.games.triton_config import config_text
from services.models.configs import CONFIGS, ModelSpec, spec
from services.trainer.train import TrainConfig, batch_encoder, train
from tests.test_go_training import random_games_sgf, write_go_dataset

S = 9
EXTENDED = "extended"
EXTENDED_MODEL = GO.model_name(EXTENDED)  # go_policy_extended: its config takes that input


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One intra-op thread: two OpenMP threads on the shared 2-core machine spin-wait."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def go_dataset(tmp_path_factory) -> Path:
    """~3,000 unique 9x9 pairs from 60 random games, row groups of 200 rows."""
    base = tmp_path_factory.mktemp("go-extended")
    sgf = base / "random.sgf"
    sgf.write_text(random_games_sgf(60, S, seed=0))
    out = base / "ds"
    write_go_dataset([sgf], out, S, row_group_rows=200)
    return out


def config(**kw) -> TrainConfig:
    base = {"model": "go_res_b2c32_x", "batch_size": 32, "max_steps": 12,
            "train_eval_rows": 256, "shuffle_buffer": 400, "learning_rate": 0.002,
            "num_threads": 1}
    return TrainConfig(**{**base, **kw})


class Conversions:
    """Counts `GoGame.encode_inputs` calls by encoder and the shapes it was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, forbid: bool = False) -> None:
        self.shapes: list[tuple[str, tuple[int, ...]]] = []
        real = GoGame.encode_inputs

        def spy(game: GoGame, compact: np.ndarray, encoder: str) -> np.ndarray:
            if forbid:
                raise AssertionError(f"a basic run converted a batch ({encoder!r})")
            self.shapes.append((encoder, tuple(compact.shape)))
            return real(game, compact, encoder)

        monkeypatch.setattr(GoGame, "encode_inputs", spy)


def extended_repository(root: Path) -> Path:
    """A repository with Go's extended model's generated config (the trainer's publish check
    looks for a config before the publisher writes one)."""
    text = config_text(GO, EXTENDED)
    assert f"dims: [ {EXTENDED_CHANNELS}, -1, -1 ]" in text
    (root / EXTENDED_MODEL).mkdir(parents=True)
    (root / EXTENDED_MODEL / "config.pbtxt").write_text(text)
    return root


# ---------------------------------------------------------------------------- the game's side


def test_games_encode_stored_inputs_by_encoder_name() -> None:
    basic = GO.random_inputs(5, S, seed=3)
    assert GO.encode_inputs(basic, BASIC_ENCODER) is basic  # the stored input as it is
    extended = GO.encode_inputs(basic, EXTENDED)
    assert extended.dtype == np.int8 and extended.shape == (5, *GO.encoder_input_shape(
        EXTENDED, S)) == (5, EXTENDED_CHANNELS, S, S)
    np.testing.assert_array_equal(extended[:, :4], basic)  # the basic planes come first
    assert np.array_equal(extended, GO.random_inputs(5, S, seed=3, encoder=EXTENDED))
    assert int(extended.max()) <= GO.encoder_max_value(EXTENDED)
    assert GO.encoder_input_shape(BASIC_ENCODER, S) == GO.input_shape(S)
    io = GO.model_io(EXTENDED)
    assert io.board_shape == (EXTENDED_CHANNELS, 19, 19) and io.accepts((EXTENDED_CHANNELS, S, S))
    assert GO.model_io() == GO.model_io(BASIC_ENCODER)
    with pytest.raises(ValueError, match=r"Go has no input encoder 'zigzag' \(encoders: basic, "
                                         r"extended\)"):
        GO.encode_inputs(basic, "zigzag")
    with pytest.raises(ValueError, match=r"Gomoku has no input encoder 'extended' \(encoders: "
                                         r"basic\)"):
        GOMOKU.encode_inputs(GOMOKU.random_inputs(2), EXTENDED)
    board = GOMOKU.random_inputs(2)
    assert GOMOKU.encode_inputs(board, BASIC_ENCODER) is board


def test_the_basic_path_has_no_conversion() -> None:
    assert batch_encoder(GO, BASIC_ENCODER) is None
    encode = batch_encoder(GO, EXTENDED)
    assert encode is not None
    boards = torch.from_numpy(GO.random_inputs(4, S, seed=1))
    assert encode(boards).shape == (4, EXTENDED_CHANNELS, S, S)
    with pytest.raises(ValueError, match="no input encoder 'zigzag'"):
        batch_encoder(GO, "zigzag")


# ---------------------------------------------------------------------------- the trainer


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_an_extended_network_trains_evaluates_and_exports(go_dataset: Path, tmp_path: Path,
                                                         monkeypatch) -> None:
    from services.trainer.metrics import evaluate_dataset
    from services.trainer.publish import export_checked, smoke_rows

    assert spec("go_res_b2c32_x").encoder == EXTENDED
    seen = Conversions(monkeypatch)
    result = train(go_dataset, config(), progress=False)
    m = result.metrics
    assert m["game"] == "go" and m["steps"] == 12 and m["stopped"] == "max_steps"
    for split in ("train", "validation", "test"):
        assert m[split]["finite"] and m[split]["n"] > 0, split
        assert np.isfinite(m[split]["loss"]) and 0 <= m[split]["top1"] <= m[split]["top5"] <= 1
    # every training batch went through the encoder, on the CPU, as the loader made it
    batches = [shape for encoder, shape in seen.shapes if shape[0] == 32]
    assert len(batches) >= 12 and {e for e, _ in seen.shapes} == {EXTENDED}
    assert all(shape == (32, 4, S, S) for shape in batches)

    # the export check runs on the extended input: random inputs and real positions
    diff = export_checked(result, tmp_path / "model.pt", go_dataset)
    assert diff <= 1e-4
    boards, moves = smoke_rows(go_dataset, encoder=EXTENDED)
    assert boards.shape[1:] == (EXTENDED_CHANNELS, S, S) and len(boards) == len(moves)
    scripted = torch.jit.load(str(tmp_path / "model.pt"))
    with torch.no_grad():
        x = torch.from_numpy(boards[:16])
        assert torch.allclose(scripted(x), result.model(x), atol=1e-4)
    # the dataset evaluation hands the model its input too, and agrees with the trainer's
    again = evaluate_dataset(result.model, go_dataset, splits=("validation",), encoder=EXTENDED)
    assert again["validation"]["top1"] == pytest.approx(m["validation"]["top1"])


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_a_basic_network_trains_without_any_conversion(go_dataset: Path, monkeypatch) -> None:
    Conversions(monkeypatch, forbid=True)
    result = train(go_dataset, config(model="go_res_b2c32"), progress=False)
    assert result.metrics["steps"] == 12
    assert all(result.metrics[s]["finite"] for s in ("train", "validation", "test"))


def test_an_encoder_the_game_lacks_is_refused_before_training(go_dataset: Path,
                                                              monkeypatch) -> None:
    base = CONFIGS["go_res_b2c32"]
    monkeypatch.setitem(CONFIGS, "go_res_b2c32_zigzag",
                        ModelSpec(base.game, base.make, encoder="zigzag"))
    with pytest.raises(ValueError, match=r"model config 'go_res_b2c32_zigzag' takes an input "
                                         r"its game does not have: Go has no input encoder "
                                         r"'zigzag' \(encoders: basic, extended\)"):
        train(go_dataset, config(model="go_res_b2c32_zigzag"), progress=False)


def test_the_served_go_config_does_not_take_the_extended_input(go_dataset: Path,
                                                               tmp_path: Path) -> None:
    from services.trainer.publish import unservable_reason

    repo = str(tmp_path / "empty-repo")  # the tracked go_policy template: [4, -1, -1]
    assert unservable_reason(repo, "go_policy", str(go_dataset)) is None
    reason = unservable_reason(repo, "go_policy", str(go_dataset), encoder=EXTENDED)
    assert reason is not None and "[4, -1, -1]" in reason and "[10, 9, 9]" in reason
    assert "'extended' input" in reason
    repo = str(extended_repository(tmp_path / "repo"))
    assert unservable_reason(repo, EXTENDED_MODEL, str(go_dataset), encoder=EXTENDED) is None


# ---------------------------------------------------------------------------- publication


@pytest.mark.integration  # trains, then publishes through a Prefect flow run
def test_train_flow_publishes_an_extended_network_that_says_so(go_dataset: Path,
                                                               tmp_path: Path,
                                                               prefect_harness) -> None:
    from flows.train import train_flow
    from services.repository.publish import publish
    from services.repository.smoke_positions import read_smoke_positions
    from services.repository.version_files import check_version_files, require_served_input
    from services.trainer.publish import check_gate, version_encoder
    from services.triton.version_choice import check_files

    repo = extended_repository(tmp_path / "repo")
    out = train_flow(dataset_dir=str(go_dataset), repository=str(repo),
                     config=config(model="go_res_b2c32_x_v", max_steps=8),
                     run_dir=str(tmp_path / "run"), model_name=EXTENDED_MODEL)
    assert out["published"] and out["version"] == 1, out["gate"]
    assert all(np.isfinite(out["metrics"][s]["loss"]) for s in ("train", "validation", "test"))
    folder = repo / EXTENDED_MODEL / "1"
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["encoder"] == EXTENDED and meta["game"] == "go" and meta["value_head"] is True
    boards, _ = read_smoke_positions(folder / "smoke_positions.npz")
    assert boards.shape[1:] == (EXTENDED_CHANNELS, S, S)
    assert version_encoder(repo, EXTENDED_MODEL, 1) == EXTENDED

    # the gate measures the serving version in its own input (a basic batch would not run)
    decision = check_gate(out["metrics"], repo, EXTENDED_MODEL, go_dataset)
    assert decision.serving_version == 1 and 0 <= decision.serving_top1 <= 1

    # its model's config declares its encoder: the launcher and the rollout serve it; a
    # model declaring the basic one would not
    files, _ = check_version_files(repo, EXTENDED_MODEL, 1)
    require_served_input(files, 1, EXTENDED)
    check_files(repo, EXTENDED_MODEL, 1)
    with pytest.raises(ValueError, match=r"version 1 takes the 'extended' input encoder"):
        require_served_input(files, 1, BASIC_ENCODER)

    # the go_policy config declares the basic input: the publisher refuses the network
    with pytest.raises(ValueError, match=r"the config of 'go_policy' declares the 'basic' input "
                                         r"encoder, this Go network takes the 'extended' input: "
                                         r"publish it under 'go_policy_extended'"):
        publish(folder / "model.pt", repo, GO.default_model, game=GO, encoder=EXTENDED)


@pytest.mark.integration  # trains a network for seconds: too heavy for the unit tier
def test_a_basic_version_records_the_basic_encoder(go_dataset: Path, tmp_path: Path) -> None:
    from services.repository.version_files import check_version_files, require_served_input
    from services.trainer.publish import export_and_publish

    result = train(go_dataset, config(model="go_res_b2c32", max_steps=4), progress=False)
    repo = tmp_path / "repo"
    version = export_and_publish(result, str(repo), GO.default_model, str(go_dataset))
    meta = json.loads((repo / GO.default_model / str(version) / "metadata.json").read_text())
    assert meta["encoder"] == BASIC_ENCODER
    files, _ = check_version_files(repo, GO.default_model, version)
    require_served_input(files, version, BASIC_ENCODER)  # served as before
