"""Load a version's TorchScript network, and test-run one before it is published.

`load_model` is where a served network is loaded outside Triton (the trainer's gate measures
the serving version with it; the smoke test asks it whether a version has a value head).
`validate_model_file` is the publisher's test run, on CPU: the file must load, take int8 boards
of every shape its config allows and answer float32 logits of its game's width, or the tuple
(logits, value [N]) of a network with a value head, both finite.

The shapes come from the model's config and its game, never from a tensor's rank: a config's
fixed dims are run as they are; a free (-1) spatial dim is run at each of `check_sizes_for` (the
game's largest, smallest and default served size: Go [4, -1, -1] at 19x19 and 9x9), and a free
logits width is the game's for that board (`ModelIO.n_moves_for`: the points, plus the pass
for a game that has one). Besides zeros the network runs on real boards: its game's known smoke
positions (`Game.smoke_positions`) at the default size and, when given, the positions stored
with the version. NaN or Inf in the logits, or in the value of a network with a value head,
refuses the file: a network that answers NaN would otherwise reach Triton and serve a uniform
policy.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from services.games.base import BASIC_ENCODER, Game
from services.games.registry import default_game
from services.repository.configs import dims_accept


def load_model(source: Path | bytes, device: str = "cpu") -> Any:
    """A TorchScript network from a file (or its bytes), on `device`, in eval mode."""
    import torch  # lazy: listing or checking versions must not need torch

    where = io.BytesIO(source) if isinstance(source, bytes) else str(source)
    return torch.jit.load(where, map_location=device).eval()


def check_sizes_for(game: Game) -> tuple[int, ...]:
    """The sizes a free (-1) spatial dim of `game`'s model is test-run at: the largest, the
    smallest and the default size the game serves (duplicates once)."""
    return tuple(dict.fromkeys((game.sizes[-1], game.sizes[0], game.default_size)))


def check_shapes(game: Game, board_dims: tuple[int, ...], n_moves: int,
                 sizes: tuple[int, ...] | None = None) -> list[tuple[tuple[int, ...], int]]:
    """The concrete (board shape, logits per board) pairs to test-run a model of `game` on:
    `board_dims` itself when every dim is fixed; else each free (-1) dim set to each of `sizes`
    (default `check_sizes_for`). A free logits width (`n_moves` -1) is the game's width for
    that board."""
    board_dims = tuple(int(d) for d in board_dims)
    if -1 not in board_dims:
        shapes = [board_dims]
    else:
        sizes = check_sizes_for(game) if sizes is None else sizes
        shapes = [tuple(s if d == -1 else d for d in board_dims) for s in sizes]
    return [(shape, _width(game, shape, n_moves)) for shape in shapes]


def _width(game: Game, shape: tuple[int, ...], n_moves: int) -> int:
    """Logits per board of `shape`: the config's fixed width, else the game's for the board."""
    return int(n_moves) if int(n_moves) != -1 else game.model_io().n_moves_for(shape)


def validate_model_file(
    model_file: Path,
    game: Game | None = None,
    board_dims: tuple[int, ...] | None = None,
    n_moves: int | None = None,
    *,
    positions: np.ndarray | None = None,
    sizes: tuple[int, ...] | None = None,
    encoder: str = BASIC_ENCODER,
) -> bool:
    """Load the TorchScript file on CPU and check int8 [2, *board_dims] -> float32
    [2, n_moves], or, for a network with a value head, the tuple (logits float32 [2, n_moves],
    value float32 [2]). `game` defaults to the default game (Gomoku), `board_dims` and
    `n_moves` to its default input and policy ([15, 15] -> 225); a model's config gives them
    otherwise (`services.repository.configs.model_io`). Dims of -1 are checked at each of
    `sizes` (`check_shapes`: Go [4, -1, -1] -> -1 runs [2, 4, 19, 19] -> [2, 362] and
    [2, 4, 9, 9] -> [2, 82]).

    Then the model runs on real boards: its game's known smoke positions where the checked
    shape is the game's default input, and `positions` (boards as the network takes them, e.g.
    the train flow's stored validation positions): non-finite logits, or non-finite values
    from a network with a value head, refuse it (ValueError naming the boards). `encoder`: the
    input the network takes (one of the game's `Game.encoder_names`): the default input shape
    is its, and the known smoke positions are turned into it. Returns whether the model has a
    value head."""
    game = default_game() if game is None else game
    board_dims = tuple(game.encoder_input_shape(encoder) if board_dims is None else board_dims)
    n_moves = game.policy_size() if n_moves is None else int(n_moves)
    try:
        model = load_model(model_file)
    except Exception as exc:
        raise ValueError(f"{model_file} is not a usable TorchScript policy: {exc}") from exc
    runs: list[tuple[str, list[str] | None, np.ndarray, int]] = []
    for shape, width in check_shapes(game, board_dims, n_moves, sizes):
        shape_text = ",".join(str(d) for d in (2, *shape))
        runs.append((f"int8 [{shape_text}]", None, np.zeros((2, *shape), np.int8), width))
        if shape == game.encoder_input_shape(encoder):
            known = game.smoke_positions()
            boards = np.stack([b for b, _ in known.values()])
            if encoder != BASIC_ENCODER:
                boards = game.encode_inputs(boards, encoder)
            runs.append(("the known smoke positions", list(known), boards, width))
    if positions is not None:
        positions = np.asarray(positions)
        shape = tuple(int(d) for d in positions.shape[1:])
        if positions.dtype != np.int8 or not dims_accept(board_dims, shape):
            raise ValueError(f"stored positions are {positions.dtype} {list(shape)} per board; "
                             f"{model_file} takes int8 {list(board_dims)}")
        runs.append((f"the {len(positions)} stored positions", None, positions,
                     _width(game, shape, n_moves)))
    heads = {_check_outputs(model, model_file, what, names, boards, width)
             for what, names, boards, width in runs}
    if len(heads) != 1:
        raise ValueError(f"{model_file}: answers a value on some boards only")
    return heads.pop()


def _check_outputs(model: Any, model_file: Path, what: str, names: list[str] | None,
                   boards: np.ndarray, n_moves: int) -> bool:
    """One test run of `validate_model_file` on `boards` (`what` names them in errors, `names`
    each board when known); returns whether the answer carries a value."""
    import torch

    n = len(boards)
    try:
        with torch.inference_mode():
            out = model(torch.from_numpy(np.ascontiguousarray(boards)))
    except Exception as exc:
        raise ValueError(f"{model_file} is not a usable TorchScript policy on {what}: "
                         f"{exc}") from exc
    value = None
    if isinstance(out, (tuple, list)):
        if len(out) != 2 or not all(isinstance(t, torch.Tensor) for t in out):
            kinds = ", ".join(type(t).__name__ for t in out)
            raise ValueError(f"{model_file}: {what} gave ({kinds}), expected "
                             "logits or (logits, value) tensors")
        y, value = out
    else:
        y = out
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != (n, n_moves):
        shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ValueError(f"{model_file}: {what} gave {shape}, expected ({n}, {n_moves})")
    if y.dtype != torch.float32:
        raise ValueError(f"{model_file}: logits are {y.dtype}, expected torch.float32")
    if value is not None:
        if tuple(value.shape) != (n,):
            raise ValueError(f"{model_file}: {what} gave value of shape "
                             f"{tuple(value.shape)}, expected ({n},): one value per board")
        if value.dtype != torch.float32:
            raise ValueError(f"{model_file}: value is {value.dtype}, expected torch.float32")
    for output, tensor in (("logits", y), ("value", value)):
        if tensor is None:
            continue
        bad = ~torch.isfinite(tensor.reshape(n, -1)).all(dim=1)
        if bool(bad.any()):
            rows = torch.nonzero(bad).flatten().tolist()
            which = ", ".join(names[i] for i in rows[:5]) if names else (
                "rows " + ", ".join(str(i) for i in rows[:5]))
            more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
            raise ValueError(f"{model_file}: NaN or Inf {output} on {what} ({which}{more}): "
                             "a model must answer finite numbers")
    return value is not None
