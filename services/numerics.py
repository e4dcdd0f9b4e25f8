"""Numerical helpers shared by the search service and the model rollout checks (numpy only)."""

from __future__ import annotations

import numpy as np


def masked_softmax(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Softmax of `logits` over the entries where `legal` holds, along the last axis (a policy
    row per board); exactly 0 elsewhere, float64. `logits` is reshaped to `legal`'s shape.

    A row with no legal entry is all 0. A NaN or infinite legal logit makes its row NaN, not
    a plausible-looking policy: callers that serve the policy refuse such logits first
    (`services.search.mcts.masked_softmax`), the rollout's smoke test reports the row.
    """
    legal = np.asarray(legal, dtype=bool)
    z = np.where(legal, np.asarray(logits, dtype=np.float64).reshape(legal.shape), -np.inf)
    top = z.max(axis=-1, keepdims=True)
    top[np.isneginf(top)] = 0.0  # no legal entry: every exp below is 0
    e = np.exp(z - top)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total != 0)
