"""TorchScript export with a check that the scripted model matches the eager one.

The served file must compute what was trained: a mismatch, NaN or Inf refuses the export, so a
broken model never reaches the repository. One export for every game and both output forms
(logits, or (logits, value) with a value head): `export_for_serving` is the publisher's
(`services.trainer.publish`, every game's one publish path): scripted == eager, and the logits'
shape, at each of the sizes it is given, on the game's random inputs and positions of random
legal games (`Game.random_inputs`, `Game.sample_inputs`) in the model's input encoder, plus real
positions where given; `export_torchscript` is the same check at one size. It lives in the
models package, which depends only on torch, numpy and `services.games`, so that
`services.triton` can use it without importing `services.trainer` (which imports triton).

The scripted file keeps the model's forward argument name, ``boards`` for every network here
(`BoardPolicy`, `GoPolicy`, `PolicyValue`): the stock PyTorch backend binds
its inputs by that name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from services.games.base import BASIC_ENCODER, Game
from services.games.registry import default_game, get_game
from services.models.value import split_outputs

DEFAULT_GAME = default_game().name


class ExportError(RuntimeError):
    """The scripted model does not reproduce the eager model (or gives the wrong shapes)."""


def check_inputs(game: str, board_size: int, n: int, seed: int = 0) -> torch.Tensor:
    """Random inputs of the game within each plane's value range (`Game.random_inputs`: Gomoku
    cells int8 [n, s, s]; Go planes int8 [n, 4, s, s] with liberties on stones only, a few
    move ages, at most one ko point), so every feature plane gets exercised."""
    return torch.from_numpy(get_game(game).random_inputs(n, board_size, seed))


def export_torchscript(model: nn.Module, path: Path, board_size: int | None = None,
                       n_check: int = 64, atol: float = 1e-4, seed: int = 0,
                       game: str = DEFAULT_GAME,
                       boards: np.ndarray | torch.Tensor | None = None,
                       n_moves: int | None = None,
                       inputs: np.ndarray | torch.Tensor | None = None) -> float:
    """Script `model` (int8 boards -> logits, or (logits, value) with a value head), verify
    it, save it; return the max abs diff over its outputs.

    The check runs on `n_check` random inputs of `game` (see `check_inputs`) plus `boards`,
    real positions (e.g. a slice of the validation split) where given: random Go planes are
    not positions that occur, and a difference could hide in the features they never set.
    With `n_moves`, the logits must be [N, n_moves] and a value [N]. `inputs`: the random
    check inputs to use instead of `check_inputs`' (a network that takes another of the game's
    encoders, e.g. `GoGame.random_inputs(..., encoder="extended")`).
    """
    board_size = board_size or get_game(game).default_size
    if inputs is None:
        inputs = check_inputs(game, board_size, n_check, seed)
    else:
        inputs = torch.as_tensor(np.asarray(inputs), dtype=torch.int8)
    if boards is not None:
        real = torch.as_tensor(np.asarray(boards), dtype=torch.int8)
        if real.shape[1:] != inputs.shape[1:]:
            raise ExportError(f"check boards are {tuple(real.shape[1:])}, a {game} "
                              f"{board_size}x{board_size} input is {tuple(inputs.shape[1:])}")
        inputs = torch.cat([inputs, real])
    return _export(model, Path(path), [(inputs, n_moves)], atol, game)


def export_for_serving(model: nn.Module, path: Path, game: Game, sizes: tuple[int, ...], *,
                       encoder: str = BASIC_ENCODER, n_check: int = 16, seed: int = 0,
                       boards: np.ndarray | None = None, atol: float = 1e-4) -> float:
    """Script `model` (the module Triton serves: the game's input in `encoder` -> logits, or
    (logits, value)), check it, save it to `path`; return the max abs diff over its outputs.

    At each of `sizes` the check runs on `n_check` random inputs and `n_check` positions of
    random legal games (`Game.random_inputs`, `Game.sample_inputs`, in `encoder`'s input), and
    on `boards` (real positions in the model's input, of one size, e.g. validation rows)
    where given: scripted == eager within `atol`, finite, logits [N, the game's policy size
    at that size] and a value [N]. Raises `ExportError`."""
    batches = []
    for size in sizes:
        checks = np.concatenate([game.random_inputs(n_check, size, seed + size, encoder),
                                 game.sample_inputs(n_check, size, seed + size, encoder)])
        batches.append((torch.from_numpy(checks), game.policy_size(size)))
    if boards is not None and len(boards):
        boards = np.asarray(boards)
        size = int(boards.shape[-1])
        shape = game.encoder_input_shape(encoder, size)
        if tuple(boards.shape[1:]) != tuple(shape):
            raise ExportError(f"check boards are {tuple(boards.shape[1:])}, a {game.title} "
                              f"network on the {encoder!r} input takes {tuple(shape)}")
        batches.append((torch.as_tensor(boards, dtype=torch.int8),
                        game.policy_size(size)))
    return _export(model, Path(path), batches, atol, game.name)


def _export(model: nn.Module, path: Path,
            batches: list[tuple[torch.Tensor, int | None]], atol: float, game: str) -> float:
    """Script `model`, check it on each batch of inputs (logits [N, n_moves] where n_moves is
    given), save it, check the reloaded file gives the same outputs; the max abs diff."""
    model = model.to("cpu").eval()
    scripted = torch.jit.script(model)
    diff, answers = 0.0, []
    for inputs, n_moves in batches:
        with torch.no_grad():
            eager = _outputs(model(inputs))
            script_out = _outputs(scripted(inputs))
        if n_moves is not None:
            _check_shapes(script_out, len(inputs), n_moves, game)
        if not all(torch.isfinite(t).all() for t in script_out):
            raise ExportError("scripted model produced NaN or Inf on the check inputs")
        diff = max(diff, *((e - s).abs().max().item()
                           for e, s in zip(eager, script_out, strict=True)))
        answers.append(script_out)
    if diff > atol:
        raise ExportError(f"scripted model differs from eager by {diff:.3g} (> {atol})")
    path.parent.mkdir(parents=True, exist_ok=True)
    scripted.save(str(path))
    reloaded = torch.jit.load(str(path))
    for (inputs, _), script_out in zip(batches, answers, strict=True):
        with torch.no_grad():
            again = _outputs(reloaded(inputs))
        if not all(torch.equal(a, b) for a, b in zip(again, script_out, strict=True)):
            raise ExportError(f"{path}: reloaded TorchScript file gives different outputs")
    return diff


def _check_shapes(outputs: list[torch.Tensor], n: int, n_moves: int, game: str) -> None:
    if tuple(outputs[0].shape) != (n, n_moves):
        raise ExportError(f"{game} policy gave logits {tuple(outputs[0].shape)}, expected "
                          f"({n}, {n_moves})")
    if len(outputs) > 1 and tuple(outputs[1].shape) != (n,):
        raise ExportError(f"{game} value head gave {tuple(outputs[1].shape)}, expected ({n},)")


def _outputs(out) -> list[torch.Tensor]:
    logits, value = split_outputs(out)
    return [logits] if value is None else [logits, value]
