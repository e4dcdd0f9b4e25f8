"""What a network evaluator is: the interface between every search and the network it asks.

A search (the service's PUCT, move-order inference, self-play) sends a batch of network
inputs to a `PolicyEvaluator` (the Triton client, the batcher in front of it, an in-process
TorchScript network in benchmarks) and gets a `PolicyOutput` back. The errors here are how an
evaluator says its answer cannot be used; `finite_outputs` is the one check of an answer that
every caller runs before a NaN can look like a policy. This module sits below every search and
every evaluator so that both import it and neither imports the other.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class PolicyOutput(Protocol):
    """What an evaluator returns (`services.triton.client.PolicyResult` fits).

    It may also carry ``values``: float32 [N], the expected result in [-1, 1] for the side to
    move of each board (NaN for every board: the network has no value head; see
    `finite_outputs` for what else is refused). That attribute is optional (read with
    ``getattr``; None or absent: the network has no value head), so a policy-only evaluator
    needs only the three properties below.
    """

    @property
    def logits(self) -> np.ndarray: ...  # float32 [N, size*size], unmasked

    @property
    def model_name(self) -> str: ...

    @property
    def model_version(self) -> str: ...


class PolicyEvaluator(Protocol):
    """A policy network: int8 boards [N, size, size] (0 empty, 1 black, 2 white) -> logits
    (Go: compact int8 [N, 4, size, size] -> logits [N, size * size + 1]), and values [N] when
    it has a value head."""

    def infer(self, boards: np.ndarray) -> PolicyOutput: ...


class EvaluatorError(RuntimeError):
    """The evaluator answered with something the search cannot use (e.g. a wrong shape)."""


class EvaluatorTimeout(EvaluatorError):
    """No answer came before the caller's deadline (the batcher's wait gave up): the network
    is hung or overloaded; the caller ends DEADLINE_EXCEEDED at once and frees its thread."""


class NonFiniteOutputError(EvaluatorError):
    """The network answered NaN or infinite logits, or a non-finite value from a value head.

    A broken model (diverged training, a bad export) must fail its requests, never be turned
    into an answer: a uniform policy from all-NaN logits looks like a real one. Names the model
    and version that answered, so an operator knows what to roll back."""

    def __init__(self, model_name: str, model_version: str, what: str) -> None:
        version = f" version {model_version}" if model_version else ""
        super().__init__(f"model {model_name or '?'}{version} returned non-finite {what}")
        self.model_name = model_name
        self.model_version = model_version


def finite_outputs(
    logits: np.ndarray, values: np.ndarray | None, model_name: str, model_version: str
) -> np.ndarray | None:
    """Check an evaluator's answer for `len(logits)` boards; returns its values as [N] (None:
    no value).

    Any NaN or infinite logit is a `NonFiniteOutputError`. Values: a network without a value
    head answers NaN for every board (the convention of services/triton/policy_model.py), so
    values that are NaN for *every* board of the answer mean "no value" (None); a NaN next to
    finite values, or an infinite value, is a `NonFiniteOutputError`."""
    n = len(logits)
    if not np.isfinite(logits).all():
        bad = int((~np.isfinite(np.asarray(logits).reshape(n, -1))).any(axis=1).sum())
        raise NonFiniteOutputError(model_name, model_version,
                                   f"logits (NaN or Inf) for {bad} of {n} boards")
    rows = value_rows(values, n)
    if rows is None:
        return None
    finite = np.isfinite(rows)
    if finite.all():
        return rows
    if np.isnan(rows).all():
        return None  # a policy-only network: no value head
    bad = int((~finite).sum())
    raise NonFiniteOutputError(model_name, model_version,
                               f"values (NaN or Inf) for {bad} of {n} boards")


def value_rows(values: np.ndarray | None, n: int) -> np.ndarray | None:
    """An evaluator's values for `n` boards (`PolicyOutput.values`, [n] or [n, 1]) as [n], in
    their own dtype; None when it sent none. Any other shape is an EvaluatorError."""
    if values is None:
        return None
    v = np.asarray(values)
    if v.shape not in ((n,), (n, 1)):
        raise EvaluatorError(f"evaluator returned values {v.shape} for {n} boards")
    return v.reshape(n)
