"""The one masked softmax (services.numerics) and the search service's finite-logits guard."""

from __future__ import annotations

import numpy as np
import pytest

from services.numerics import masked_softmax
from services.search import mcts


def test_a_row_is_a_distribution_over_its_legal_entries_only() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 10)) * 30
    legal = rng.random((5, 10)) < 0.5
    legal[:, 0] = True
    p = masked_softmax(logits, legal)
    assert p.dtype == np.float64 and p.shape == (5, 10)
    assert np.all(p[~legal] == 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    for row, mask, probs in zip(logits, legal, p, strict=True):
        z = row[mask] - row[mask].max()
        np.testing.assert_allclose(probs[mask], np.exp(z) / np.exp(z).sum(), rtol=1e-12)


def test_huge_logits_do_not_overflow_and_rows_without_legal_entries_are_zero() -> None:
    logits = np.array([[1000.0, 999.0, -5.0], [3.0, 2.0, 1.0]])
    legal = np.array([[True, True, False], [False, False, False]])
    p = masked_softmax(logits, legal)
    np.testing.assert_allclose(p[0], [1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1)), 0])
    assert np.all(p[1] == 0)


def test_flat_logits_take_the_mask_shape() -> None:
    legal = np.zeros((3, 3), bool)
    legal[1, 1] = legal[0, 2] = legal[2, 2] = True
    rows = masked_softmax(np.zeros(9, np.float32), legal)  # one distribution per row
    assert rows.shape == (3, 3) and rows[0, 2] == rows[1, 1] == rows[2, 2] == 1.0
    board = mcts.masked_softmax(np.zeros(9, np.float32), legal)  # one over the whole board
    assert board.shape == (3, 3) and board[0, 2] == board[1, 1] == board[2, 2] == 1 / 3
    assert board.sum() == 1.0


def test_non_finite_legal_logits_give_nan_rows_and_the_search_refuses_them() -> None:
    legal = np.array([[True, True], [True, False]])
    logits = np.array([[np.nan, 0.0], [0.0, np.inf]])  # the Inf is on an illegal entry
    p = masked_softmax(logits, legal)
    assert np.isnan(p[0]).all()
    assert p[1].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="must be finite"):
        mcts.masked_softmax(logits[0], legal[0])
    assert mcts.masked_softmax(logits[1], legal[1]).tolist() == [1.0, 0.0]
    assert mcts.masked_softmax(np.ones(2), np.zeros(2, bool)).tolist() == [0.0, 0.0]
