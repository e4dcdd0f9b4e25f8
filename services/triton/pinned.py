"""A Triton client that asks one version of a model, never "whatever serves now".

Why: a match between versions, and an iteration of self-play, must be played by the network
they name. Without a version Triton answers with the highest READY version of the model, so a
rollout in the middle of a match or a self-play share would quietly change the network of the
games still to come. `PinnedTriton.infer` names its version in every request: Triton answers
with exactly that version or fails the request (`TritonUnavailableError` when it was unloaded),
and the failure reaches the caller instead of an answer from another network.

`check_ready` asks before the first request whether the version is loaded and ready, so that a
caller can refuse to start (before a game is written) with a sentence naming the url, the model
and the version, instead of failing its first game's first evaluation.

This module sits in the Triton layer so that `services.match` and `services.selfplay_loop`
both import it and neither imports the other.
"""

from __future__ import annotations

import logging

import numpy as np

from services.games.base import Game
from services.triton.client import PolicyClient, PolicyResult, TritonError, TritonUnavailableError

log = logging.getLogger(__name__)

# a self-play or match request waits this long for its answer: a Triton busy with other
# clients answers late, not never; one that does not answer in this time fails the games
PINNED_TIMEOUT_S = 60.0


class VersionNotReadyError(TritonUnavailableError):
    """The pinned version is not loaded and ready on that Triton (the message names the url,
    the model and the version, and what Triton holds instead)."""


class PinnedTriton:
    """A `services.evaluator.PolicyEvaluator` on `url` answering with `version` of
    `model_name` only (see the module). `game` fixes the model's input/output."""

    def __init__(self, url: str, model_name: str, version: int, game: Game | None = None,
                 timeout_s: float = PINNED_TIMEOUT_S) -> None:
        self.url = url
        self.model_name = model_name
        self.version = int(version)
        self.client = PolicyClient(url, model_name, timeout_s=timeout_s, game=game)

    def infer(self, boards: np.ndarray) -> PolicyResult:
        return self.client.infer(boards, model_version=self.version)

    def check_ready(self) -> None:
        """Nothing when the version is loaded and ready on the Triton; `VersionNotReadyError`
        saying what is wrong (Triton unreachable, the model unknown or not ready, or the
        versions it serves instead) otherwise."""
        if self.client.is_version_ready(self.version):
            return
        ready, why = self.client.model_readiness()
        if ready:
            try:
                versions = self.client.ready_versions()
            except TritonError:
                versions = []
            why = (f"the versions ready there: {', '.join(versions)}" if versions
                   else "another version of the model is ready there")
        raise VersionNotReadyError(
            f"{self.model_name} v{self.version} is not ready on Triton at {self.url} ({why}); "
            "load it there (movepred rollout), or play in-process without the Triton url")

    def close(self) -> None:
        self.client.close()


def open_pinned(url: str, model_name: str, version: int, game: Game | None = None,
                timeout_s: float = PINNED_TIMEOUT_S) -> PinnedTriton:
    """A `PinnedTriton` whose version was found ready (`check_ready`; closed when it was
    not)."""
    pinned = PinnedTriton(url, model_name, version, game, timeout_s=timeout_s)
    try:
        pinned.check_ready()
    except BaseException:
        pinned.close()
        raise
    log.info("evaluating with %s v%d on Triton at %s", model_name, pinned.version, url)
    return pinned


__all__ = ["PINNED_TIMEOUT_S", "PinnedTriton", "VersionNotReadyError", "open_pinned"]
