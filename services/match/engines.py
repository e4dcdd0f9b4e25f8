"""Players of a match behind one small interface: `Engine.genmove(state) -> move`.

Why one interface: a match, the gate and the ratings treat every player alike: a network
version searched at a visit budget, the raw policy, GNU Go, any GTP program or Gomocup brain.
An engine is asked for a move in a position (`services.games.base.Position`) and answers a
policy index of the position's game, or None when it resigns; it keeps whatever state it needs
(an outside program's board) and brings it in line with the position it is asked about, so the
referee (`services.match.runner`) never talks protocol.

* `SearchEngine`: the PUCT search (`services.search.mcts.search`) on a fresh tree every move
  (as GenMove with tree reuse off), `visits` visits and/or `time_ms` a move, its leaf values
  optionally mixed with fast rollouts (`rollout_lambda`), over any evaluator
  (`services.models.local_evaluator.LocalEvaluator` in-process, a Triton client pinned to a
  version);
* `PolicyEngine`: the legal move with the highest logit (ties: the lowest index);
* `GtpProgramEngine`: a GTP program (GNU Go: `gnugo_argv`); moves in the game's notation
  (`Game.move_name`: GTP vertices for Go), colours alternate from black; the program's board is
  replayed from ``clear_board`` whenever the position is not its board plus new moves;
* `GomocupBrainEngine`: a Piskvork-protocol brain; the first move of a game goes as ``BEGIN``
  (empty board) or ``BOARD`` (an opening), later ones as ``TURN x,y`` while the brain's board is
  the position but for the opponent's last move, else ``RESTART`` and ``BOARD`` again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from services.evaluator import PolicyEvaluator
from services.games.base import BLACK, COLOR_NAMES, WHITE, Game, Position
from services.match.gtp_process import GtpProcess, GtpProcessError
from services.match.piskvork_process import PiskvorkError, PiskvorkProcess
from services.protocols.gomocup import from_index, to_index
from services.search import mcts
from services.search.puct import DEFAULT_BATCH_SIZE, DEFAULT_C_PUCT
from services.search.rollout_value import RolloutSource, RolloutValueEvaluator, check_lambda

log = logging.getLogger(__name__)


class EngineError(RuntimeError):
    """An engine could not give a move (its program died, answered nonsense)."""


class Engine(Protocol):
    """A player: `genmove(state)` -> a policy index of `state`'s game, None to resign."""

    @property
    def name(self) -> str: ...

    def genmove(self, state: Position) -> int | None: ...

    def close(self) -> None: ...


def colour_of_move(index: int) -> int:
    """The colour of the `index`-th move of a game from the empty board (black first)."""
    return BLACK if index % 2 == 0 else WHITE


class SearchEngine:
    """The PUCT search over `evaluator`, `visits` root visits and/or `time_ms` a move; with
    `rollout_lambda` > 0 its leaf values are mixed with fast rollouts of `rollouts`
    (`services.search.rollout_value`, a wrapper built for each move's root: its rule and Go's
    komi; the search gives it each leaf's colour), seeded from `seed` and the move number, so
    a game replays alike. `batch_size`: leaves a network call (the search's batch); `c_puct`:
    PUCT's exploration constant."""

    def __init__(self, evaluator: PolicyEvaluator, name: str, *, visits: int = 0,
                 time_ms: int = 0, rollout_lambda: float = 0.0,
                 rollouts: RolloutSource | None = None, seed: int = 0,
                 batch_size: int = DEFAULT_BATCH_SIZE, c_puct: float = DEFAULT_C_PUCT) -> None:
        if visits <= 0 and time_ms <= 0:
            raise ValueError("a search engine needs visits or time_ms > 0")
        self.rollout_lambda = check_lambda(rollout_lambda)
        if self.rollout_lambda > 0 and rollouts is None:
            raise ValueError("rollout_lambda > 0 needs a rollout policy")
        self.evaluator = evaluator
        self.name = name
        self.visits = visits
        self.time_ms = time_ms
        self.rollouts = rollouts
        self.seed = int(seed)
        self.batch_size = batch_size
        self.c_puct = c_puct

    def _evaluator(self, state: Position) -> PolicyEvaluator:
        if self.rollout_lambda == 0 or self.rollouts is None:
            return self.evaluator
        return RolloutValueEvaluator.for_search(
            self.evaluator, state, self.rollouts, self.rollout_lambda,
            seed=self.seed * 1_000 + len(state.moves))

    def genmove(self, state: Position) -> int | None:
        return int(mcts.search(state, self._evaluator(state), max_visits=self.visits,
                               max_time_ms=self.time_ms, batch_size=self.batch_size,
                               c_puct=self.c_puct).move)

    def close(self) -> None:
        close = getattr(self.evaluator, "close", None)
        if callable(close):
            close()


class PolicyEngine:
    """The raw policy: the legal move with the highest logit."""

    def __init__(self, evaluator: PolicyEvaluator, name: str) -> None:
        self.evaluator = evaluator
        self.name = name

    def genmove(self, state: Position) -> int | None:
        legal = np.asarray(state.legal_mask(), dtype=bool).reshape(-1)
        inputs = state.game.network_input(state)[None]
        logits = np.asarray(self.evaluator.infer(inputs).logits[0], np.float64).reshape(-1)
        if logits.shape != legal.shape:
            raise EngineError(f"{self.name}: {logits.size} logits for a policy of "
                              f"{legal.size} moves")
        return int(np.argmax(np.where(legal, logits, -np.inf)))

    def close(self) -> None:
        close = getattr(self.evaluator, "close", None)
        if callable(close):
            close()


def gnugo_argv(binary: str, level: int, seed: int = 0) -> list[str]:
    """GNU Go as a GTP engine at `level` (0..10), scoring by area as the Go rules here do,
    and capturing every dead stone before it passes (``--capture-all-dead``): a match ends
    at two passes and counts every stone on the board as alive, so GNU Go's habit of passing
    with its opponent's dead stones in its territory (expecting them removed at scoring) would
    hand those points to the opponent; the seed comes last (`open_engine` sets it)."""
    return [binary, "--mode", "gtp", "--level", str(level), "--chinese-rules",
            "--capture-all-dead", "--seed", str(seed)]


class GtpProgramEngine:
    """A GTP program in a subprocess (see the module docstring)."""

    def __init__(self, argv: Sequence[str], name: str) -> None:
        self.name = name
        self.process = GtpProcess(argv)
        self._size: int | None = None
        self._board: tuple[int, ...] = ()  # the moves the program's board holds

    def _reset(self, game: Game, size: int) -> None:
        self.process.send(f"boardsize {size}")
        self.process.send("clear_board")
        if game.default_komi is not None:
            self.process.send(f"komi {game.default_komi:g}")
        self._size, self._board = size, ()

    def genmove(self, state: Position) -> int | None:
        game, size, moves = state.game, state.size, tuple(state.moves)
        try:
            if self._size != size or moves[:len(self._board)] != self._board:
                self._reset(game, size)
            for i in range(len(self._board), len(moves)):
                self.process.send(f"play {COLOR_NAMES[colour_of_move(i)]} "
                                  f"{game.move_name(moves[i], size)}")
            self._board = moves
            reply = self.process.send(f"genmove {COLOR_NAMES[state.to_move]}").strip()
        except GtpProcessError as exc:
            raise EngineError(f"{self.name}: {exc}") from exc
        if reply.lower() == "resign":
            self._size = None  # the program's board no longer follows the game
            return None
        try:
            move = game.parse_move(reply, size)
        except ValueError as exc:
            raise EngineError(f"{self.name} answered genmove with {reply!r}: {exc}") from exc
        self._board = (*moves, move)
        return move

    def close(self) -> None:
        self.process.close()


class GomocupBrainEngine:
    """A Piskvork-protocol brain in a subprocess (see the module docstring). `info`: the INFO
    keys sent after START (timeout_turn, timeout_match, rule, ...)."""

    def __init__(self, argv: Sequence[str], name: str, info: dict[str, int] | None = None,
                 answer_timeout_s: float = 60.0) -> None:
        self.name = name
        self.info = dict(info or {})
        self.process = PiskvorkProcess(argv, answer_timeout_s=answer_timeout_s)
        self._size: int | None = None
        self._board: tuple[int, ...] | None = None  # moves on the brain's board; None: unknown

    def _start(self, size: int) -> None:
        answer = self.process.command(f"START {size}")
        if answer.upper() != "OK":
            raise PiskvorkError(f"{self.name} answered START {size} with {answer!r}")
        self.process.send(*(f"INFO {k} {v}" for k, v in self.info.items()))
        self._size, self._board = size, ()

    def _point(self, answer: str, size: int) -> int:
        try:
            px, py = (int(v) for v in answer.split(","))
        except ValueError:
            raise EngineError(f"{self.name} answered {answer!r}, not a move x,y") from None
        if not (0 <= px < size and 0 <= py < size):
            raise EngineError(f"{self.name} answered {answer!r}, off the {size}x{size} board")
        return to_index(px, py, size)

    def genmove(self, state: Position) -> int | None:
        size, moves = state.size, tuple(state.moves)
        try:
            if self._size != size:
                self._start(size)
            board = self._board
            if board is not None and len(moves) == len(board) + 1 \
                    and moves[:len(board)] == board:
                px, py = from_index(moves[-1], size)
                answer = self.process.command(f"TURN {px},{py}")
            elif not moves and board == ():
                answer = self.process.command("BEGIN")
            else:
                if board != () and self.process.command("RESTART").upper() != "OK":
                    raise PiskvorkError(f"{self.name} refused RESTART")
                me = state.to_move
                records = []
                for i, m in enumerate(moves):
                    px, py = from_index(m, size)
                    records.append(f"{px},{py},{1 if colour_of_move(i) == me else 2}")
                answer = (self.process.command("BEGIN") if not records else
                          self.process.command("BOARD", *records, "DONE"))
        except PiskvorkError as exc:
            self._board = None
            raise EngineError(f"{self.name}: {exc}") from exc
        move = self._point(answer, size)
        self._board = (*moves, move)
        return move

    def close(self) -> None:
        self.process.close()


__all__ = ["Engine", "EngineError", "GomocupBrainEngine", "GtpProgramEngine", "PolicyEngine",
           "SearchEngine", "colour_of_move", "gnugo_argv"]
