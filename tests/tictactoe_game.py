"""Tic-tac-toe as a registered game, defined here only: the proof that a game is one module.

Nothing outside this module (and the `config.pbtxt` its test writes next to its model,
generated from this game by `services.games.triton_config`) knows about it: the search service
validates its requests, searches it and names its moves by asking this `Game`, and the Triton
client takes its shapes from it. Three in a row wins; a full board without one is a draw. The
network input is the int8 board [3, 3] (0 empty, 1 X, 2 O), the policy has 9 entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.api.movepred.v1 import search_pb2
from services.games.base import BLACK, WHITE, Game, check_size, simple_position
from services.games.registry import register
from services.games.triton_config import config_text

SIZE = 3
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
# its Triton config, generated from its model I/O as every game's is: int8 boards [N, 3, 3] ->
# logits [N, 9] and a value (NaN for a policy-only network)
CONFIG_PBTXT = config_text(TICTACTOE, max_batch_size=64)
