"""MDRNN / MDLSTM: the paper's weight counts, the batched anti-diagonal sweep against a plain
point-by-point reference, TorchScript, flat vectors, per-board weights and the board's
symmetries."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from services.games.capture.game import CAPTURE
from services.models.configs import build, spec
from services.models.mdrnn import MDLSTM, MDRNN, _diagonals


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + np.exp(-x))


def _reference_sweep(x: np.ndarray, net: MDRNN | MDLSTM) -> np.ndarray:
    """One board's hidden activations [S, S, k] of the sweep from the top left, point by point
    in row-major order, straight from the equations in the module docstring."""
    p = {name: t.detach().numpy().astype(np.float64) for name, t in net.named_parameters()}
    size, k = x.shape[1], p["w_b"].shape[0]
    lstm = "w_peep" in p
    h = np.zeros((size, size, k))
    c = np.zeros((size, size, k))
    for i in range(size):
        for j in range(size):
            h_up = h[i - 1, j] if i > 0 else p["w_b"]
            h_left = h[i, j - 1] if j > 0 else p["w_b"]
            drive = p["w_in"] @ x[:, i, j] + p["w_h"] @ h_up + p["w_h"] @ h_left
            if not lstm:
                h[i, j] = np.tanh(drive)
                continue
            c_up = c[i - 1, j] if i > 0 else np.zeros(k)
            c_left = c[i, j - 1] if j > 0 else np.zeros(k)
            z, g_in, g_f1, g_f2, g_out = np.split(drive, 5)
            peep = p["w_peep"]
            cell = (_sigmoid(g_in + peep[0] * (c_up + c_left)) * np.tanh(z)
                    + _sigmoid(g_f1 + peep[1] * c_up) * c_up
                    + _sigmoid(g_f2 + peep[2] * c_left) * c_left)
            c[i, j] = cell
            h[i, j] = _sigmoid(g_out + peep[3] * cell) * np.tanh(cell)
    return h


def _reference_scores(x: np.ndarray, net: MDRNN | MDLSTM) -> np.ndarray:
    """Scores [S, S] of one board: the four corner sweeps (each the top-left sweep of the
    mirrored board, mirrored back) combined by the output weights through a sigmoid."""
    total = 0
    for axes in ((), (1,), (2,), (1, 2)):
        mirrored = np.flip(x, axes) if axes else x
        h = _reference_sweep(np.ascontiguousarray(mirrored), net)
        total = total + (np.flip(h, tuple(a - 1 for a in axes)) if axes else h)
    w_out = net.w_out.detach().numpy().astype(np.float64)
    return 1.0 / (1.0 + np.exp(-(total @ w_out)))


def _random_planes(n: int, size: int, seed: int) -> torch.Tensor:
    """Random positions as the networks' input: (own, opponent) planes, never both set."""
    cells = torch.from_numpy(np.random.default_rng(seed).integers(0, 3, (n, size, size)))
    return torch.stack([cells == 1, cells == 2], dim=1).float()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_weight_counts_are_the_papers(k: int) -> None:
    assert MDRNN(k).n_weights() == 4 * k + k * k
    assert MDLSTM(k).n_weights() == 16 * k + 5 * k * k
    shapes = {name: tuple(t.shape) for name, t in MDLSTM(k).named_parameters()}
    assert shapes == {"w_in": (5 * k, 2), "w_h": (5 * k, k), "w_peep": (4, k), "w_out": (k,),
                      "w_b": (k,)}


def test_k2_has_12_and_52_weights() -> None:
    assert (MDRNN(2).n_weights(), MDLSTM(2).n_weights()) == (12, 52)


@pytest.mark.parametrize("size", [5, 7])
@pytest.mark.parametrize("cls", [MDRNN, MDLSTM])
def test_batched_sweep_matches_the_point_by_point_reference(cls, size: int) -> None:
    net = cls(2, seed=size)
    x = _random_planes(4, size, seed=1)
    with torch.no_grad():
        got = net(x).numpy()
    for b in range(len(x)):
        want = _reference_scores(x[b].numpy().astype(np.float64), net)
        np.testing.assert_allclose(got[b], want, atol=1e-5)


def test_the_sweep_is_one_step_per_anti_diagonal() -> None:
    size, p = 5, 6
    steps = _diagonals(size, torch.device("cpu"))
    assert len(steps) == 2 * size - 1  # 9 steps on 5x5, not 25
    seen: set[int] = set()
    for cell, pos, up, left in steps:
        i, j = cell // size, cell % size
        assert torch.equal(pos, (i + 1) * p + j + 1)
        assert set((i + j).tolist()) == {int(i[0] + j[0])}  # one anti-diagonal
        for pred in (up, left):  # the border, or a point of the previous diagonal
            pi, pj = pred // p - 1, pred % p - 1
            inner = (pi >= 0) & (pj >= 0)
            assert torch.all((pi + pj)[inner] == i[inner] + j[inner] - 1)
        seen.update(cell.tolist())
    assert seen == set(range(size * size))


@pytest.mark.parametrize("size", [5, 7, 9])
@pytest.mark.parametrize("cls", [MDRNN, MDLSTM])
def test_scripted_equals_eager_on_any_board_size(cls, size: int) -> None:
    net = cls(2, seed=3).eval()
    scripted = torch.jit.script(net)
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    x = _random_planes(6, size, seed=size)
    with torch.no_grad():
        eager = net(x)
        assert eager.shape == (6, size, size)
        assert torch.all((eager > 0) & (eager < 1))
        torch.testing.assert_close(scripted(x), eager, atol=1e-6, rtol=0)
        torch.testing.assert_close(loaded(x), eager, atol=1e-6, rtol=0)


@pytest.mark.parametrize("cls", [MDRNN, MDLSTM])
def test_scores_follow_the_boards_symmetries(cls) -> None:
    """The four sweeps share their weights, so mirroring the board mirrors the scores; in the
    MDRNN a point's two predecessors also share W_h, so transposing transposes them (the
    MDLSTM's forget gates differ per predecessor: not so)."""
    net = cls(2, seed=5)
    x = _random_planes(3, 7, seed=2)
    with torch.no_grad():
        base = net(x)
        torch.testing.assert_close(net(x.flip(2)), base.flip(1))
        torch.testing.assert_close(net(x.flip(3)), base.flip(2))
        transposed = net(x.transpose(2, 3)).transpose(1, 2)
        assert torch.allclose(transposed, base, atol=1e-5) == (cls is MDRNN)


@pytest.mark.parametrize("cls", [MDRNN, MDLSTM])
def test_flat_vector_round_trip_and_per_board_weights(cls) -> None:
    net, other = cls(2, seed=1), cls(2, seed=2)
    x = _random_planes(4, 5, seed=3)
    flat = other.get_flat()
    assert flat.shape == (net.n_weights(),)
    with torch.no_grad():
        before = net(x)
        net.set_flat(flat)
        torch.testing.assert_close(net(x), other(x))
        assert not torch.allclose(before, net(x))
        torch.testing.assert_close(net.get_flat(), flat)
        # per-board weights: boards 0 and 2 played by `net` at seed 1, 1 and 3 by `other`
        mine = cls(2, seed=1).get_flat()
        per_board = torch.stack([mine, flat, mine, flat])
        got = net.scores_per_board(x, per_board)
        torch.testing.assert_close(got[0::2], cls(2, seed=1)(x[0::2]))
        torch.testing.assert_close(got[1::2], other(x[1::2]))
    with pytest.raises(ValueError, match="flat vector"):
        net.set_flat(torch.zeros(net.n_weights() + 1))


@pytest.mark.parametrize("cls", [MDRNN, MDLSTM])
def test_a_boards_scores_are_the_same_bits_alone_or_anywhere_in_a_batch(cls) -> None:
    """Policy search plays a run's games in batches of any composition (runs in lock step, a
    run resumed beside others): a board's scores must not depend on the batch, or a near tie
    could be played differently. torch.sigmoid failed this (its vector body and scalar tail
    round differently); the sweeps' own sigmoid does not."""
    rng = np.random.default_rng(0)
    net = cls(2)
    n = 413
    cells = rng.integers(0, 3, (n, 5, 5))
    x = torch.from_numpy(np.stack([cells == 1, cells == 2], 1).astype(np.float32))
    w = torch.from_numpy(rng.standard_normal((n, net.n_weights())).astype(np.float32))
    with torch.no_grad():
        full = net.scores_per_board(x, w)
        for start, end in [(0, 1), (5, 6), (3, 20), (100, 137), (0, 250), (7, n)]:
            assert torch.equal(net.scores_per_board(x[start:end], w[start:end]),
                               full[start:end]), (start, end)


def test_capture_configs_build_the_papers_networks() -> None:
    assert spec("capture_mdrnn_k2").game == CAPTURE.name
    assert spec("capture_mdlstm_k2").game == CAPTURE.name
    assert build("capture_mdrnn_k2").n_weights() == 12
    assert build("capture_mdlstm_k2").n_weights() == 52
