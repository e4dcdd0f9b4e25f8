"""A TorchScript network in this process as a search evaluator, without Triton.

Why: a match between versions, the gate's match and the benchmarks play thousands of moves
with small batches; a round trip to Triton per leaf batch would cost more than the network on
one CPU core, and a match must not depend on what Triton happens to serve. `LocalEvaluator`
loads a ``model.pt`` (a published version's, `from_version_folder`, or any TorchScript file)
and answers `infer(boards)` as `services.evaluator.PolicyEvaluator` asks: logits, and values
when the network has a value head (`use_value=False` hides it, the A/B of a value head).

Repeated boards: `infer` answers a board it has evaluated before from a bounded cache of its
answers (`services.evaluator_cache`, `cache_mb`, 0: none): a match's or self-play's search on
a fresh tree every move asks again for many of the previous move's positions, and one search
reaches a position by several move orders. `evaluate` is the network alone; `calls` and
`boards` count its work, `cache.hits` / `cache.misses` the boards asked.

Threads: torch's intra-op thread count is process-wide; a match plays games in several
processes, each with one core, so the evaluator sets it to `threads` (1 by default; None leaves
it as the caller set it).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from services.defaults import METADATA_FILE, MODEL_FILE
from services.evaluator_cache import DEFAULT_CACHE_MB, CachedOutput, CachingEvaluator, EvalCache
from services.games.base import BASIC_ENCODER, Game
from services.games.registry import get_game
from services.models.value import split_outputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalOutput:
    """One answer (`services.evaluator.PolicyOutput`)."""

    logits: np.ndarray  # float32 [N, policy size]
    model_name: str
    model_version: str
    values: np.ndarray | None = None  # float32 [N] for the side to move; None: no value head


class LocalEvaluator:
    """A TorchScript policy (int8 inputs -> logits, or (logits, value)) evaluated in this
    process. `encoder` (with `game`): the input the network takes when it is not the game's
    basic one; the boards a search sends (basic inputs) are encoded here first. `model`: an
    already loaded module to share (two evaluators of one network, one hiding its value).
    `cache_mb`: the bound of its cache of answers (0: every board is evaluated)."""

    def __init__(self, path: str | Path | None = None, name: str = "local", *,
                 version: str = "", use_value: bool = True,
                 model: torch.jit.ScriptModule | None = None, threads: int | None = 1,
                 game: Game | None = None, encoder: str = BASIC_ENCODER,
                 cache_mb: float = DEFAULT_CACHE_MB) -> None:
        if threads is not None:
            torch.set_num_threads(threads)
        if model is None:
            if path is None:
                raise ValueError("give the TorchScript file or a loaded model")
            model = torch.jit.load(str(path), map_location="cpu").eval()
        if encoder != BASIC_ENCODER:
            if game is None:
                raise ValueError(f"a network taking the {encoder!r} input needs its game")
            game.check_encoder(encoder)
        self.model = model
        self.name = name
        self.version = version
        self.use_value = use_value
        self.game = game
        self.encoder = encoder
        self.calls = 0
        self.boards = 0
        self.cache = EvalCache.of_mb(cache_mb)
        self._cached = CachingEvaluator(_Network(self), self.cache)

    @classmethod
    def from_version_folder(cls, folder: str | Path, *, threads: int | None = 1,
                            use_value: bool = True, cache_mb: float = DEFAULT_CACHE_MB
                            ) -> LocalEvaluator:
        """The network of a published version folder (``<repo>/<model>/<version>/``): its
        ``model.pt``, named and numbered, its game and input encoder as its ``metadata.json``
        records them (the folder's names where it has none)."""
        folder = Path(folder)
        try:
            meta = json.loads((folder / METADATA_FILE).read_text())
        except (OSError, ValueError):
            meta = {}
        meta = meta if isinstance(meta, dict) else {}
        game = get_game(meta["game"]) if isinstance(meta.get("game"), str) else None
        encoder = meta.get("encoder") or BASIC_ENCODER
        return cls(folder / MODEL_FILE, str(meta.get("model_name") or folder.parent.name),
                   version=str(meta.get("version") or folder.name), use_value=use_value,
                   threads=threads, game=game, encoder=encoder, cache_mb=cache_mb)

    def infer(self, boards: np.ndarray) -> LocalOutput | CachedOutput:
        """The answer for `boards`, boards evaluated before answered from the cache."""
        if not self.cache.enabled:
            return self.evaluate(boards)
        return self._cached.infer(boards)

    def evaluate(self, boards: np.ndarray) -> LocalOutput:
        """The network's answer for every board (no cache)."""
        inputs = np.ascontiguousarray(boards, dtype=np.int8)
        if self.encoder != BASIC_ENCODER and self.game is not None:
            inputs = np.ascontiguousarray(self.game.encode_inputs(inputs, self.encoder),
                                          dtype=np.int8)
        with torch.inference_mode():
            logits, values = split_outputs(self.model(torch.from_numpy(inputs)))
        self.calls += 1
        self.boards += len(boards)
        out = (values.to(torch.float32).numpy()
               if values is not None and self.use_value else None)
        return LocalOutput(logits.to(torch.float32).numpy(), self.name, self.version, out)


class _Network:
    """The evaluator's network alone, as the evaluator its cache sends its misses to."""

    def __init__(self, owner: LocalEvaluator) -> None:
        self.owner = owner

    def infer(self, boards: np.ndarray) -> LocalOutput:
        return self.owner.evaluate(boards)


__all__ = ["LocalEvaluator", "LocalOutput"]
