"""The real positions stored with a version (``smoke_positions.npz``) and what its metadata says
about them.

The train flow stores up to a few hundred validation positions with each version, as the
network takes them (Gomoku int8 [N, 15, 15], Go [N, 4, S, S]) with the moves played there, and
records the version's own top-1 on them in ``metadata.json``; the rollout's smoke test asks the
version about them and compares (`services.repository.gate`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from services.games.base import Game
from services.repository.configs import dims_accept
from services.repository.version_files import version_metadata

SMOKE_POSITIONS_FILE = "smoke_positions.npz"  # boards (network input) and moves, by row


def write_smoke_positions(path: Path, boards: np.ndarray, moves: np.ndarray) -> None:
    """Store `boards` (as the network input takes them: int8 [N, 15, 15], Go [N, 4, S, S]) and
    the `moves` played there (int64 [N]) as ``smoke_positions.npz``."""
    boards = np.ascontiguousarray(boards, dtype=np.int8)
    moves = np.asarray(moves, dtype=np.int64)
    if not _board_rows(boards) or len(boards) != len(moves) or not len(moves):
        raise ValueError(f"smoke positions need int8 boards [N, ...] and N moves, got boards "
                         f"{boards.shape} and moves {moves.shape}")
    with open(path, "wb") as f:
        np.savez(f, boards=boards, moves=moves)


def _board_rows(boards: np.ndarray) -> bool:
    """Rows of boards of at least two dims each, whatever the game."""
    return boards.ndim >= 3  # layout: N rows of boards, each at least [S, S]


def read_smoke_positions(source: Path | bytes) -> tuple[np.ndarray, np.ndarray]:
    """(boards int8, moves int64) of a ``smoke_positions.npz`` (a path or its bytes);
    ValueError saying what is wrong with it."""
    try:
        with np.load(io.BytesIO(source) if isinstance(source, bytes) else source,
                     allow_pickle=False) as data:
            boards, moves = data["boards"], data["moves"]
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise ValueError(f"{SMOKE_POSITIONS_FILE} is unreadable: {exc}") from exc
    if (boards.dtype != np.int8 or not _board_rows(boards) or moves.shape != (len(boards),)
            or not len(boards)):
        raise ValueError(f"{SMOKE_POSITIONS_FILE} holds boards {boards.dtype} {boards.shape} and "
                         f"moves {moves.shape}, expected int8 [N, ...] and [N]")
    if moves.min() < 0:
        raise ValueError(f"{SMOKE_POSITIONS_FILE} holds negative moves")
    return boards, moves.astype(np.int64)


@dataclass(frozen=True)
class StoredPositions:
    """The real positions stored with a version (``smoke_positions.npz``) and what its
    metadata says about them."""

    boards: np.ndarray  # as the network takes them (Gomoku int8 [N, 15, 15], Go [N, 4, S, S])
    moves: np.ndarray  # int64 [N]: the move played
    top1: float | None = None  # the version's own top-1 on these rows, measured at publish time
    validation_top1: float | None = None  # its top-1 on the whole validation split


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None


def stored_positions(files: dict[str, bytes], config: Any, version: int, game: Game
                     ) -> StoredPositions | None:
    """The version's stored positions (None when it has none); ValueError when the file is
    there but unusable (unreadable, boards the config does not take, moves beyond the policy
    of `game`, the model's game, on those boards)."""
    if SMOKE_POSITIONS_FILE not in files:
        return None
    try:
        boards, moves = read_smoke_positions(files[SMOKE_POSITIONS_FILE])
    except ValueError as exc:
        raise ValueError(f"version {version}: {exc}") from exc
    dims = tuple(int(d) for d in config.input[0].dims)
    if not dims_accept(dims, boards.shape[1:]):
        raise ValueError(f"version {version}: {SMOKE_POSITIONS_FILE} holds boards "
                         f"{list(boards.shape[1:])}, the model takes {list(dims)}")
    points = game.model_io().n_moves_for(boards.shape[1:])
    if int(moves.max()) >= points:
        raise ValueError(f"version {version}: {SMOKE_POSITIONS_FILE} holds move "
                         f"{int(moves.max())}, boards have {points} moves")
    meta = version_metadata(files)
    recorded = meta.get("smoke_positions")
    top1 = _number(recorded.get("top1")) if isinstance(recorded, dict) else None
    metrics = meta.get("metrics")
    validation = metrics.get("validation") if isinstance(metrics, dict) else None
    validation_top1 = _number(validation.get("top1")) if isinstance(validation, dict) else None
    return StoredPositions(boards, moves, top1, validation_top1)
