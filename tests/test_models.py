"""Model configurations: every one builds; small ones script and match eager; Go features."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from services.games.go.features import N_GO_PLANES, compact
from services.games.go.planes import planes_torch
from services.games.go.rules import BLACK, WHITE, GoState
from services.games.registry import get_game
from services.models.configs import CONFIGS, build, spec
from services.models.export import ExportError, export_torchscript


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_named_config_builds(name: str) -> None:
    model = build(name)
    assert sum(p.numel() for p in model.parameters()) > 0
    assert get_game(spec(name).game).name == spec(name).game  # a registered game


@pytest.mark.parametrize("name", ["shao_f32_n2", "res_b2c32", "go_res_b2c32"])
def test_small_configs_script_and_match_eager(name: str) -> None:
    model = build(name).eval()
    scripted = torch.jit.script(model)
    if spec(name).game == "go":
        x = torch.randint(0, 3, (3, 4, 19, 19), dtype=torch.int8)
        expected = 19 * 19 + 1
    else:
        x = torch.randint(0, 3, (3, 15, 15), dtype=torch.int8)
        expected = 15 * 15
    with torch.no_grad():
        out = scripted(x)
        assert out.shape == (3, expected)
        assert torch.allclose(out, model(x), atol=1e-5)


# Shao et al. 2016, Table I: parameters of the fully connected and the 1x1 conv top, N = 2, 4, 6
SHAO_TABLE_I_PARAMS = {2: (6_785_121, 305_025), 4: (7_080_289, 600_193),
                       6: (7_375_457, 895_361)}


@pytest.mark.parametrize("n", sorted(SHAO_TABLE_I_PARAMS))
def test_shao_table_i_and_ii_configs_differ_only_in_their_top_or_batch_norm(n: int) -> None:
    def params(name: str) -> int:
        return sum(p.numel() for p in build(name).parameters())

    fc, conv = SHAO_TABLE_I_PARAMS[n]
    assert (params(f"shao_f128_n{n}_fc"), params(f"shao_f128_n{n}")) == (fc, conv)
    batch_norms = [m for m in build(f"shao_f128_n{n}_bn").modules()
                   if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(batch_norms) == n + 1  # after the 5x5 conv and every 3x3 one
    assert params(f"shao_f128_n{n}_bn") == conv + 2 * 128 * (n + 1)


def test_unknown_config_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="shao_f128_n4"):
        build("nope")


def test_go_compact_features_from_an_ascii_position() -> None:
    state = GoState.from_ascii(
        """
        . . . . .
        . X O . .
        X O . O .
        . X O . .
        . . . . .
        """,
        to_move=BLACK,
    ).play(12)  # black plays the centre (x=2, y=2), capturing the white stone at x=1, y=2
    c = compact(state)
    assert c.shape == (4, 5, 5)
    assert state.board.flat[11] == 0  # captured
    # side to move is now white: own stones are white (1), black is opponent (2)
    board = state.board
    assert np.array_equal(c[0] == 1, board == WHITE)
    assert np.array_equal(c[0] == 2, board == BLACK)
    libs = state.liberties()
    assert np.array_equal(c[1], np.minimum(libs, 4))
    assert c[2].flat[12] == 1  # the last move has age 1
    planes = planes_torch(torch.from_numpy(c[None]))
    assert planes.shape == (1, N_GO_PLANES, 5, 5)
    assert torch.equal(planes[0, 0:3].sum(0), torch.ones(5, 5))  # own/opp/empty one-hot
    assert torch.equal(planes[0, -1], torch.ones(5, 5))


def test_go_ko_point_is_marked() -> None:
    # White captures at the ko; black may not retake immediately.
    state = GoState.from_ascii(
        """
        . . . . .
        . X O . .
        X . X O .
        . X O . .
        . . . . .
        """,
        to_move=WHITE,
    ).play(11)  # white plays x=1,y=2 capturing black at x=2,y=2
    assert state.ko is not None
    c = compact(state)
    assert c[3].flat[state.ko] == 1 and c[3].sum() == 1


def test_models_package_imports_neither_trainer_nor_triton() -> None:
    """The export lives in services.models so that services.triton can use it: the models
    package must not pull in services.trainer (which imports triton) or services.triton."""
    code = ("import sys, services.models.configs, services.models.export, services.models.value\n"
            "bad = sorted(m for m in sys.modules\n"
            "             if m.startswith(('services.trainer', 'services.triton')))\n"
            "assert not bad, bad\n")
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_export_checks_the_output_sizes_it_is_given(tmp_path: Path) -> None:
    model = build("shao_f32_n2")
    assert export_torchscript(model, tmp_path / "ok.pt", n_check=4, n_moves=225) <= 1e-4
    with pytest.raises(ExportError, match=r"logits \(4, 225\), expected \(4, 362\)"):
        export_torchscript(model, tmp_path / "bad.pt", n_check=4, n_moves=362)
    assert not (tmp_path / "bad.pt").exists()


class _WrongValue(torch.nn.Module):
    def forward(self, boards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = boards.shape[0]
        return torch.zeros((n, 225)), torch.zeros((n, 1))


def test_export_refuses_a_value_of_the_wrong_shape(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"value head gave \(4, 1\), expected \(4,\)"):
        export_torchscript(_WrongValue(), tmp_path / "m.pt", n_check=4, n_moves=225)
