"""Tic-tac-toe as a registered game, defined here only: the proof that a game is one module.

Nothing outside this module (and the `config.pbtxt` its test writes next to its model,
generated from this game by `services.games.triton_config`) knows about it: the search service
validates its requests, searches it and names its moves by asking this `Game`, and the Triton
client takes its shapes from it. Three in a row wins; a full board without one is a draw. The
network input is the int8 board [3, 3] (0 empty, 1 X, 2 O), the policy has 9 entries.

Its records are its own codec, here too: SGF with the game type GM[40] in ``*.ttt.sgf`` files
(`RECORD_SUFFIX`), written by `record_text` and read back by `replay_source`, so the ingest
takes its record files and the self-play loop its self-play games.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from services.api.movepred.v1 import search_pb2
from services.games.base import (
    BLACK,
    WHITE,
    Game,
    SourceResult,
    check_size,
    quarantine_row,
    simple_position,
)
from services.games.pair_tables import pairs_table
from services.games.registry import register
from services.games.triton_config import config_text
from services.models.configs import ModelSpec, register_config
from services.records.sgf import SgfRejected, read_sgf
from services.records.sgf_writer import APP_NAME, sgf_point, sgf_record

SIZE = 3
RECORD_SUFFIX = ".ttt.sgf"  # SGF records of the game (longer than Go's .sgf, so they are ours)
SGF_GAME_TYPE = "40"  # the GM[] value its records carry
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


@dataclass(frozen=True)
class TicTacToeState:
    cells: tuple[int, ...] = (0,) * (SIZE * SIZE)
    moves: tuple[int, ...] = ()

    @property
    def game(self) -> TicTacToe:
        return TICTACTOE

    @property
    def size(self) -> int:
        return SIZE

    @property
    def to_move(self) -> int:
        return BLACK if len(self.moves) % 2 == 0 else WHITE

    @property
    def board(self) -> np.ndarray:
        return np.array(self.cells, dtype=np.int8).reshape(SIZE, SIZE)

    @property
    def winner(self) -> int:
        for a, b, c in LINES:
            if self.cells[a] and self.cells[a] == self.cells[b] == self.cells[c]:
                return self.cells[a]
        return 0

    @property
    def is_over(self) -> bool:
        return bool(self.winner) or all(self.cells)

    def play(self, move: int) -> TicTacToeState:
        if self.is_over:
            raise ValueError("the game is over")
        if self.cells[move]:
            raise ValueError("occupied")
        cells = list(self.cells)
        cells[move] = self.to_move
        return TicTacToeState(tuple(cells), (*self.moves, move))

    def legal_mask(self) -> np.ndarray:
        if self.is_over:
            return np.zeros(SIZE * SIZE, dtype=bool)
        return np.array(self.cells) == 0


class TicTacToe(Game):
    name = "tictactoe"
    title = "Tic-tac-toe"
    default_size = SIZE
    sizes = (SIZE,)
    default_model = "tictactoe_policy"
    default_config = "tictactoe_tiny"  # registered below, beside the game
    record_formats = (RECORD_SUFFIX,)
    written_formats = (RECORD_SUFFIX,)
    sgf_game_type = SGF_GAME_TYPE

    def replay_source(self, path: Path, result: SourceResult, *,
                      board_size: int | None = None, packed: bool = True) -> Iterator[pa.Table]:
        """SGF records (GM[40], SZ[3]) replayed by the rules: a record the reader rejects, of
        another size (or not `board_size`), with set-up stones, a pass, colours that do not
        alternate from X or an illegal move is quarantined with its reason; every position
        before a move is a pair, with the mover's result from RE. No packed encoding."""
        boards, moves, to_move, plies, results, ids = [], [], [], [], [], []
        for record in read_sgf(path, source=result.source,
                               game_types=frozenset({SGF_GAME_TYPE})):
            result.read += 1
            if isinstance(record, SgfRejected):
                result.quarantine.append(quarantine_row(result.source, record.record_id,
                                                        record.reason, record.snippet))
                continue
            record_id = f"game {record.game_index}"
            if record.size != SIZE or board_size not in (None, SIZE):
                result.quarantine.append(quarantine_row(result.source, record_id,
                                                        f"board size {record.size}"))
                continue
            if record.setup_black or record.setup_white:
                result.quarantine.append(quarantine_row(result.source, record_id,
                                                        "set-up stones (AB/AW)"))
                continue
            state, rows = self.start(), []
            try:
                for ply, (colour, point) in enumerate(record.moves):
                    if point is None:
                        raise ValueError(f"move {ply + 1} is a pass")
                    if colour != state.to_move:
                        raise ValueError(f"move {ply + 1} is not {'XO'[ply % 2]}'s")
                    rows.append((state.board.copy(), point, state.to_move, ply))
                    state = state.play(point)
            except (ValueError, TypeError, IndexError) as exc:
                result.quarantine.append(quarantine_row(result.source, record_id,
                                                        f"illegal move: {exc}"))
                continue
            result.ingested += 1
            black = {BLACK: 1.0, WHITE: 0.0}.get(
                record.winner, 0.5 if record.result_kind == "draw" else np.nan)
            for board, point, mover, ply in rows:
                boards.append(board)
                moves.append(point)
                to_move.append(mover)
                plies.append(ply)
                results.append(black if mover == BLACK else 1.0 - black)
                ids.append(f"{result.source}#{record.game_index}")
        yield pairs_table(np.array(boards, np.int8).reshape(-1, SIZE, SIZE),
                          np.array(moves, np.int64), np.array(to_move, np.int8),
                          np.array(plies, np.int64), ids, result.source,
                          np.array(results, np.float32), size=SIZE).append_column(
            "rule", pa.array([""] * len(ids), pa.string()))

    def record_text(self, suffix: str, moves: Sequence[int], size: int, *,
                    rule: str | None = None, comments: Sequence[str] = (),
                    summary: str = "", komi: float | None = None, players: str = "",
                    result: str | None = None) -> str:
        """SGF (GM[40], SZ[3]): the moves replayed by the rules (ValueError for one they
        refuse), RE the rules' result of a finished game (B+, W+, 0 a draw), else `result`
        or "?"; each move's comment and `summary` as GC."""
        if suffix not in self.written_formats:
            return super().record_text(suffix, moves, size)
        state = self.start()
        for i, move in enumerate(moves):
            try:
                state = state.play(int(move))
            except (ValueError, IndexError) as exc:
                raise ValueError(f"moves[{i}]: {move}: {exc}") from exc
        outcome = ({BLACK: "B+", WHITE: "W+"}.get(state.winner, "0") if state.is_over
                   else result or "?")
        root = [("FF", "4"), ("GM", SGF_GAME_TYPE), ("AP", APP_NAME), ("SZ", str(SIZE)),
                ("RE", outcome)]
        root += [(key, players) for key in ("PB", "PW") if players]
        if summary:
            root.append(("GC", summary))
        return sgf_record(root, [("B" if i % 2 == 0 else "W", sgf_point(int(m), SIZE),
                                  comments[i] if i < len(comments) else None)
                                 for i, m in enumerate(moves)])

    def start(self, size: int | None = None) -> TicTacToeState:
        return TicTacToeState()

    def terminal_value(self, state: object) -> float:
        """A line is always made by the last mover: +1 to it; a full board is a draw."""
        assert isinstance(state, TicTacToeState)
        return 1.0 if state.winner else 0.0

    def position_from_request(self, position: search_pb2.Position,
                              field: str) -> TicTacToeState:
        check_size(self, position, field)
        state = simple_position(self, position, field, self.start())
        assert isinstance(state, TicTacToeState)
        return state


TICTACTOE = register(TicTacToe())


class TinyTicTacToePolicy(torch.nn.Module):
    """int8 boards [N, 3, 3] -> logits [N, 9]: one-hot planes, a 3x3 and a 1x1 convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.head = torch.nn.Conv2d(8, 1, kernel_size=1)

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        b = boards.long()
        planes = torch.stack([b == 1, b == 2, b == 0], dim=1).float()
        return self.head(torch.relu(self.conv(planes))).flatten(1)


# the game's network, registered beside it as every game's are
register_config(TICTACTOE.default_config, ModelSpec(TICTACTOE.name, TinyTicTacToePolicy))
# its Triton config, generated from its model I/O as every game's is: int8 boards [N, 3, 3] ->
# logits [N, 9] and a value (NaN for a policy-only network)
CONFIG_PBTXT = config_text(TICTACTOE, max_batch_size=64)
