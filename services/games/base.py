"""The game abstraction: what the platform asks of a board game.

Search, request validation, the Triton client, publisher and rollout smoke test, the dataset
build, the trainer and the front-ends ask a `Game` (found with `services.games.registry`) for
the rules, shapes and names of its game; no other module decides by `isinstance` or by a
compared game name. A new game is one module: a `Game` subclass, the `Position` class its
states are, and `registry.register(...)`. The search service serves it once it is given an
evaluator for it (a Triton model whose `config.pbtxt` takes `Game.input_shape`).

A `Game` answers:

* shapes: `default_size` and `sizes` (the board sizes served), `policy_size(size)` (the
  points, plus the pass last when `has_pass`), `input_shape(size)` and `input_max_value` (the
  int8 network input of one position: the board [S, S], or [C, S, S] planes), and batches of
  such inputs an exported network is checked on: `random_inputs` (any values in range) and
  `sample_inputs` (positions of random legal games);
* input encoders: `encoder_names()` (the inputs a network of the game may take, by name;
  "basic", the input above, is what shards and requests hold), `encode_inputs` (stored basic
  inputs -> an encoder's), `encoder_input_shape` and `encoder_max_value`;
* names: `move_name` / `parse_move` in the game's notation (`services.coords`);
* rules: `position_from_request` (a validated position from a search API `Position`),
  `expand` (what a search node is: terminal, a proven win, the moves to search),
  `require_playable`, `base_key` (what a game is besides its moves: the tree cache's key);
* rollouts: `rollouts(rule)`, its compiled fast rollouts, if it has them;
* defaults: `default_model` (the Triton model name; `model_name(encoder)` that of a network
  taking another input encoder), `default_config` (the network config
  trained by default; `selfplay_config` the one the self-play loop starts from where that one
  is not trained by gradient), `record_formats` (file suffixes of its game records),
  `written_formats` (those `record_text` writes; self-play needs one in both), `stages`
  (move-number bands of the trainer's per-stage metrics).

A `Position` is an immutable state with `game`, `size`, `to_move`, `moves`, `board`,
`is_over`, `play(move)` and `legal_mask()` (over the policy's entries).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import numpy as np

from services import coords
from services.api.movepred.v1 import search_pb2
from services.games.search_kernels import SearchKernels, SearchPosition

if TYPE_CHECKING:
    from services.games.rollout import Rollouts

EMPTY, BLACK, WHITE = 0, 1, 2  # the cell values of every game; BLACK, WHITE the API's Colors
# the input encoder every game has: `Game.input_shape`, what shards and requests hold
BASIC_ENCODER = "basic"
COLOR_NAMES = {BLACK: "black", WHITE: "white"}


class InvalidRequest(ValueError):
    """A request field the service cannot accept; str() is "<field>: <message>"."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class RequestTooLarge(InvalidRequest):
    """A field over one of the service's fixed limits (answered INVALID_ARGUMENT, BadRequest
    reason OVER_LIMIT: the same request never passes, so no retry)."""


class Position(Protocol):
    """An immutable game state as the search plays it."""

    @property
    def game(self) -> Game: ...

    @property
    def size(self) -> int: ...

    @property
    def to_move(self) -> int: ...

    @property
    def moves(self) -> tuple[int, ...]: ...

    @property
    def board(self) -> np.ndarray: ...

    @property
    def is_over(self) -> bool: ...

    def play(self, move: int) -> Position: ...

    def legal_mask(self) -> np.ndarray: ...


class Expansion(NamedTuple):
    """What the rules say about a search node.

    `terminal_value`: the game is over, worth this to the player who moved into the node (+1
    win, -1 loss, 0 draw); None while it goes on. `proven_win`: the side to move wins at once
    with any of `candidates` (no network call needed). Otherwise `candidates` are the moves
    the search considers (ascending), and `legal` the legal mask when the caller computed it.
    """

    terminal_value: float | None = None
    candidates: Sequence[int] = ()
    proven_win: bool = False
    legal: np.ndarray | None = None


@dataclass(frozen=True)
class BoardNotes:
    """What a board GUI marks on a position besides its stones (`Game.board_notes`).

    `forbidden`: empty points a rule forbids to one side, with the reason (renju's forbidden
    points for black); `captures`: stones each colour has taken
    (None for a game without captures); `result`: "" while the game goes on, else why it
    ended, in words."""

    forbidden: dict[int, str] = field(default_factory=dict)
    captures: dict[int, int] | None = None
    result: str = ""


@dataclass(frozen=True)
class ModelIO:
    """What one board of a game's network input and one row of its output look like.

    `board_shape` / `n_moves` are those of the default size; `sizes` lists every board size
    the model takes (the last two dims of a board, square), and a board of size S has S * S
    logits, plus one (the pass, last) when `pass_move`."""

    game: str  # the registered name of the game
    board_shape: tuple[int, ...]  # one input board at the default size (no batch dimension)
    n_moves: int  # logits per board at the default size
    max_value: int  # largest cell value of the input
    sizes: tuple[int, ...] = ()  # accepted board sizes; () means the default one only
    pass_move: bool = False  # one logit more than the points: the pass

    @property
    def board_sizes(self) -> tuple[int, ...]:
        return self.sizes or (self.board_shape[-1],)

    def accepts(self, board_shape: tuple[int, ...]) -> bool:
        """Whether one board of shape `board_shape` (no batch dimension) is a valid input."""
        shape = tuple(int(d) for d in board_shape)
        return (len(shape) == len(self.board_shape)
                and shape[:-2] == self.board_shape[:-2]
                and shape[-1] == shape[-2] and shape[-1] in self.board_sizes)

    def n_moves_for(self, board_shape: tuple[int, ...]) -> int:
        """Logits per board of shape `board_shape`: the points (and the pass)."""
        return int(board_shape[-1]) * int(board_shape[-2]) + int(self.pass_move)

    def describe(self) -> str:
        sizes = self.board_sizes
        if len(sizes) == 1:
            return "int8 [N, " + ", ".join(str(d) for d in self.board_shape) + "]"
        lead = "".join(f"{d}, " for d in self.board_shape[:-2])
        return f"int8 [N, {lead}S, S] with S in {sizes[0]}..{sizes[-1]}"


def quarantine_row(source: str, record_id: str, reason: str, snippet: str = "") -> dict:
    """One row of a dataset's quarantine table: a record not ingested (or kept with a note),
    why, and the start of its moves."""
    return {"source": source, "record_id": record_id, "reason": reason, "snippet": snippet[:200]}


@dataclass
class SourceResult:
    """What replaying one source (a record file) produced: its raw pairs (when kept in memory;
    a table of the intermediate layout) and the bookkeeping that must reconcile,
    `read = ingested + quarantined`.

    `notes`: games kept up to a point that also have a row in `quarantine` (by kind, the keys
    of the game's `kept_notes`): they count as ingested, not as quarantined. `rows` and
    `sha256` describe the intermediate file when the pairs were written instead of held."""

    source: str
    pairs: Any = None
    quarantine: list[dict] = field(default_factory=list)
    read: int = 0
    ingested: int = 0
    notes: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    sha256: str = ""

    @property
    def quarantined(self) -> int:
        return len(self.quarantine) - sum(self.notes.values())

    def note(self, kind: str) -> None:
        self.notes[kind] = self.notes.get(kind, 0) + 1


class Game(ABC):
    """One board game, as every service sees it (see the module docstring)."""

    name: ClassVar[str]  # registry key, health service suffix, the shards' `game` column
    title: ClassVar[str]  # for people: "Gomoku", "Go"
    proto_game: ClassVar[int] = search_pb2.GAME_UNSPECIFIED  # its API `Game` value, if any
    default_size: ClassVar[int]
    sizes: ClassVar[tuple[int, ...]]  # the board sizes served, ascending
    has_pass: ClassVar[bool] = False
    input_planes: ClassVar[int] = 0  # 0: the network takes the board [S, S]; C: [C, S, S]
    input_max_value: ClassVar[int] = 2  # largest int8 value of the network input
    # True: the input is seen from the side to move (own / opponent stones); False: its cells
    # are colours (black, white), so a value head's output is Black's and is turned to the
    # mover's by the model
    input_from_mover: ClassVar[bool] = False
    default_model: ClassVar[str]  # Triton model name
    default_config: ClassVar[str] = ""  # network config trained by default
    # the network config the self-play loop starts a new model from, where `default_config`
    # is one its trainer cannot train by gradient ("": `default_config`)
    selfplay_config: ClassVar[str] = ""
    record_formats: ClassVar[tuple[str, ...]] = ()  # file suffixes of its game records (lower case)
    written_formats: ClassVar[tuple[str, ...]] = ()  # suffixes `write_record` writes
    # move-number bands of the trainer's per-stage metrics: (band width, last band start)
    stages: ClassVar[tuple[int, int]] = (10, 60)
    # what a board GUI offers besides the size (the web board asks, never a game's name):
    rule_names: ClassVar[tuple[str, ...]] = ()  # rule options a request may name, default first
    default_komi: ClassVar[float | None] = None  # None: the game has no komi
    sgf_game_type: ClassVar[str] = "1"  # its SGF GM[] value (1: Go stones)
    # games the replay keeps up to a point with a note in the quarantine table, by kind:
    # {kind: the note's reason prefix} (`SourceResult.notes`; the ingest's counts name them)
    kept_notes: ClassVar[dict[str, str]] = {}

    # ---- shapes -------------------------------------------------------------------------
    def policy_size(self, size: int | None = None) -> int:
        """Entries of a policy on a `size` board (default: `default_size`)."""
        s = self.default_size if size is None else size
        return s * s + int(self.has_pass)

    def input_shape(self, size: int | None = None) -> tuple[int, ...]:
        """The network input of one position (no batch dimension)."""
        s = self.default_size if size is None else size
        return (self.input_planes, s, s) if self.input_planes else (s, s)

    def random_inputs(self, n: int, size: int | None = None, seed: int = 0,
                      encoder: str = BASIC_ENCODER) -> np.ndarray:
        """`n` random network inputs (int8, `input_shape(size)`) within the input's value
        range: what an exported network is checked on besides real positions; for another of
        `encoder_names()`, that encoder's input computed from them."""
        rng = np.random.default_rng(seed)
        shape = (n, *self.input_shape(size))
        basic = rng.integers(0, self.input_max_value + 1, shape).astype(np.int8)
        return basic if encoder == BASIC_ENCODER else self.encode_inputs(basic, encoder)

    def sample_inputs(self, n: int, size: int | None = None, seed: int = 0,
                      encoder: str = BASIC_ENCODER) -> np.ndarray:
        """The network inputs (int8, `input_shape(size)`; for another of `encoder_names()`,
        that encoder's) of `n` positions that occur: one game of random legal moves played
        on from `start(size)`, up to 11 moves between two positions, a new game where one
        ends. What an exported network is checked on besides `random_inputs`, whose boards
        set features in combinations no game reaches (and may miss those a game does)."""
        rng = np.random.default_rng(seed)
        state = self.start(size)
        out = []
        for _ in range(n):
            for _ in range(int(rng.integers(0, 12))):
                legal = np.flatnonzero(state.legal_mask())
                if state.is_over or legal.size == 0:
                    state = self.start(size)
                    continue
                state = state.play(int(rng.choice(legal)))
            out.append(self.network_input(state))
        basic = (np.stack(out).astype(np.int8) if out
                 else np.zeros((0, *self.input_shape(size)), np.int8))
        return basic if encoder == BASIC_ENCODER else self.encode_inputs(basic, encoder)

    def model_io(self, encoder: str = BASIC_ENCODER) -> ModelIO:
        """The input/output of the game's Triton model (of a model taking `encoder`)."""
        return ModelIO(self.name, self.encoder_input_shape(encoder), self.policy_size(),
                       self.encoder_max_value(encoder),
                       sizes=self.sizes if len(self.sizes) > 1 else (),
                       pass_move=self.has_pass)

    # ---- input encoders: what a network takes, by name ----------------------------------
    # A game may offer networks more than one input (Go: the basic planes, or those with
    # tactical channels computed from them). Shards and requests hold the basic input; a
    # model configuration names the encoder it was built for (`ModelSpec.encoder`), and the
    # trainer, the export check and the publisher turn the stored inputs into that one here.
    def encoder_names(self) -> tuple[str, ...]:
        """The input encoders a network of this game may take, "basic" first."""
        return (BASIC_ENCODER,)

    def check_encoder(self, encoder: str) -> None:
        """ValueError naming the game's encoders when `encoder` is not one of them."""
        if encoder not in self.encoder_names():
            raise ValueError(f"{self.title} has no input encoder {encoder!r} (encoders: "
                             f"{', '.join(self.encoder_names())})")

    def encode_inputs(self, compact: np.ndarray, encoder: str) -> np.ndarray:
        """Basic int8 network inputs of a batch ([N, *input_shape], as shards store them) ->
        the input of a network taking `encoder` ([N, *encoder_input_shape]); "basic" gives
        `compact` itself. ValueError for a name not in `encoder_names()`."""
        self.check_encoder(encoder)
        return compact

    def encoder_input_shape(self, encoder: str, size: int | None = None) -> tuple[int, ...]:
        """One position's input to a network taking `encoder` (no batch dimension)."""
        self.check_encoder(encoder)
        return self.input_shape(size)

    def encoder_max_value(self, encoder: str) -> int:
        """The largest int8 value of `encoder`'s input."""
        self.check_encoder(encoder)
        return self.input_max_value

    def model_name(self, encoder: str = BASIC_ENCODER) -> str:
        """The Triton model that serves this game's networks taking `encoder`: the default
        model for the basic input, ``<default model>_<encoder>`` for another. A model's
        config applies to every version of it, so each input is a model of its own (its
        config declares the input's dims and the encoder: `services.games.triton_config`)."""
        self.check_encoder(encoder)
        return self.default_model if encoder == BASIC_ENCODER else (
            f"{self.default_model}_{encoder}")

    def pass_move(self, size: int) -> int | None:
        """The policy index of the pass (the last entry), None for a game without one."""
        return size * size if self.has_pass else None

    def request_size(self, board_size: int) -> int:
        """A request's board size (0: the default)."""
        return board_size or self.default_size

    # ---- names --------------------------------------------------------------------------
    def move_name(self, move: int, size: int) -> str:
        """A move in the game's notation (default: RenjuNet names, "h8")."""
        if move == self.pass_move(size):
            return "pass"
        return coords.index_name(move, size)

    def parse_move(self, name: str, size: int) -> int:
        """`move_name`'s inverse; raises `coords.CoordinateError`."""
        if self.has_pass and name.strip().lower() == "pass":
            return size * size
        x, y = coords.parse_point(name, size)
        return y * size + x

    def move_point(self, move: int, size: int) -> search_pb2.Point:
        """A move as the API's Point."""
        if move == self.pass_move(size):
            return search_pb2.Point(is_pass=True)
        return search_pb2.Point(x=move % size, y=move // size)

    def board_text(self, state: Position) -> str:
        """The board as text for people, top row first, with RenjuNet coordinates (X black,
        O white, the last move in lower case)."""
        glyph = {0: ".", BLACK: "X", WHITE: "O"}
        size = state.size
        board = state.board
        last = state.moves[-1] if state.moves else -1
        lines = []
        for y in range(size - 1, -1, -1):
            cells = [glyph[int(board[y, x])] for x in range(size)]
            if 0 <= last < size * size and last // size == y:
                cells[last % size] = cells[last % size].lower()
            lines.append(f"{y + 1:>2} " + " ".join(cells))
        lines.append("   " + " ".join(coords.LETTERS[:size]))
        return "\n".join(lines)

    # ---- what a board GUI asks -----------------------------------------------------------
    def proto_rule(self, name: str) -> int:
        """The API `Rule` of one of `rule_names` ("" : RULE_UNSPECIFIED, the game's
        default); InvalidRequest naming `rule` for another name."""
        if not name:
            return search_pb2.RULE_UNSPECIFIED
        raise InvalidRequest("rule", f"{self.title} has no rule {name!r}"
                             + (f" (rules: {', '.join(self.rule_names)})"
                                if self.rule_names else ""))

    def board_notes(self, state: Position) -> BoardNotes:
        """What a board shows besides the stones: by default the game's end, in words (why
        `require_playable` refuses it)."""
        return BoardNotes(result=self.result_text(state))

    def result_text(self, state: Position) -> str:
        """Why the game is over (`require_playable`'s words), or an empty text while it goes on."""
        try:
            self.require_playable(state, "position")
        except InvalidRequest as exc:
            return exc.message
        return ""

    # ---- network input: compact boards -> the float planes a network sees ----------------
    def expand_planes(self, boards: Any) -> Any:
        """Compact int8 network inputs of a batch (torch [N, *input_shape]) -> the float
        feature planes its networks see, on the boards' device. Built models do this
        themselves; this is for code that feeds a bare network (tests, benchmarks)."""
        raise NotImplementedError(f"{self.title} has no plane encoder")

    def stone_cells(self, inputs: Any) -> Any:
        """The stones of a batch of network inputs ([N, S, S]; numpy or torch): the board
        itself, or the first plane of a game whose input is planes (that plane holds the
        stones)."""
        return inputs[:, 0] if self.input_planes else inputs

    # ---- what the search asks -----------------------------------------------------------
    def network_input(self, state: Position) -> np.ndarray:
        """The int8 network input of `state` (`input_shape(state.size)`)."""
        return state.board

    def expand(self, state: Position) -> Expansion:
        """A search node: over (`terminal_value` from `terminal_value`), or every legal move."""
        if state.is_over:
            return Expansion(terminal_value=self.terminal_value(state))
        legal = state.legal_mask()
        return Expansion(candidates=np.flatnonzero(legal).tolist(), legal=legal)

    def terminal_value(self, state: Position) -> float:
        """A finished game's worth to the player who made the last move (+1, -1, 0)."""
        return 0.0

    def search_kernels(self) -> SearchKernels | None:
        """The game's rules as numba kernels for the compiled search tree
        (`services.games.search_kernels`); None: the game has none (it cannot be searched)."""
        return None

    def search_position(self, state: Position) -> SearchPosition:
        """`state` as the compiled search tree holds it (`search_kernels` reads it)."""
        raise NotImplementedError(f"{self.title} has no compiled search kernels")

    def transposition_key(self, state: Position) -> Any:
        """A key under which positions reached by different orders of the same moves are one
        position: two states after the same number of moves with equal keys have the same
        legal moves, the same outcome of every move from there on and the same network input,
        so what follows them (legality, policies) is computed once. None (the default): the
        game does not say so, and every order of the moves is its own position (Go's network
        input holds the last moves, say)."""
        return None

    def base_key(self, state: Position) -> tuple[Any, ...]:
        """What a game is besides its moves (the tree cache's key, with `moves`): by default
        the size and the board without the moves (set-up stones)."""
        board = state.board.reshape(-1).copy()
        board[[m for m in state.moves if m < board.size]] = 0
        return (state.size, board.tobytes())

    def replay_cost(self, position: search_pb2.Position) -> int:
        """The replay work of a request's position, in moves (moves and set-up stones)."""
        return len(position.moves) + len(position.setup_black) + len(position.setup_white)

    def replay_cost_note(self) -> str:
        """How `replay_cost` weighs a move unlike the others, in words for the message of a
        request over the limit ("a renju move counts 3"); "" when every move counts one."""
        return ""

    # ---- records --------------------------------------------------------------------------
    def write_record(self, path: str | Path, moves: Sequence[int], size: int, *,
                     rule: str | None = None, comments: Sequence[str] = (),
                     summary: str = "") -> Path:
        """Write one game (`moves` from the empty board, black first, alternating) as a record
        file whose suffix names the format (one of `written_formats`), each move's comment
        from `comments` and `summary` as the game comment. ValueError for another suffix.
        The longest of `written_formats` the name ends with is the format (a game's
        ``.ttt.sgf`` before ``.sgf``)."""
        name = Path(path).name.lower()
        suffix = max((s for s in self.written_formats if name.endswith(s)), key=len,
                     default=Path(path).suffix.lower())
        if suffix not in self.written_formats:
            raise ValueError(f"{path}: {self.title} games are written as "
                             f"{', '.join(self.written_formats) or 'no record format'}")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.record_text(suffix, moves, size, rule=rule, comments=comments,
                                         summary=summary), encoding="utf-8")
        return path

    def record_text(self, suffix: str, moves: Sequence[int], size: int, *,
                    rule: str | None = None, comments: Sequence[str] = (),
                    summary: str = "", komi: float | None = None, players: str = "",
                    result: str | None = None) -> str:
        """The text of `write_record`'s file for `suffix` (one of `written_formats`);
        `komi` for a game that has one (None: its default); `players` names both sides and
        `result` is the record's result (SGF RE: "B+", "W+", "0", "?") where the format has a
        place for them, so that a game the service played itself says who played and how it
        ended."""
        raise ValueError(f"{self.title} games have no {suffix} writer")

    def replay_source(self, path: Path, result: SourceResult, *,
                      board_size: int | None = None, packed: bool = True) -> Iterator[Any]:
        """The raw training pairs of every game in the record file `path` (one of
        `record_formats`), replayed under the rules: pyarrow tables of the intermediate
        layout (the shards' columns but `split`, one row per occurrence, each board in its
        canonical symmetry image), a batch at a time, at least one (empty when no game gave a
        pair). Records read, ingested and quarantined (with reasons) are counted into
        `result` on the way. `board_size`: the only size kept (others quarantined; None: the
        game's sizes); `packed`: boards as the shards store them (the game's packed encoding,
        where it has one) rather than as network inputs."""
        raise NotImplementedError(f"{self.title} has no record replay")

    # ---- new positions and the rollout smoke test ----------------------------------------
    @abstractmethod
    def start(self, size: int | None = None) -> Position:
        """The position a game starts from (an empty board; default size: `default_size`)."""

    def warm_up(self, moves: int = 4) -> None:
        """Play `moves` moves from the start through what a search asks of a position (its
        legal mask, network input, expansion, a move), so that rules compiled on first use
        (numba kernels, compiled per process where no cache directory is writable) are
        compiled before the first request instead of during it."""
        state = self.start()
        for _ in range(moves):
            legal = np.flatnonzero(state.legal_mask())
            self.network_input(state)
            self.expand(state)
            if state.is_over or legal.size == 0:
                return
            state = state.play(int(legal[legal.size // 2]))  # a central point: groups form

    def smoke_positions(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Fixed positions the rollout smoke test asks a new model version about: {name:
        (network input, legal mask over the policy)}; at least "empty" (the start)."""
        s = self.start()
        return {"empty": (self.network_input(s), s.legal_mask())}

    def tactical_positions(self) -> dict[str, tuple[np.ndarray, tuple[int, ...]]]:
        """Positions with a forced answer: {name: (network input, the right moves)}; a new
        version must rank a right one high (the rollout's blocking "tactics" check). None by
        default."""
        return {}

    def opponent(self, seed: int = 0) -> Callable[[Position], int] | None:
        """A fixed reference player the served network plays against (`movepred play
        --game`): state -> its move, ties drawn from `seed`. None: the game has none, and
        the network plays itself."""
        return None

    def rollouts(self, rule: str = "") -> Rollouts | None:
        """The game's compiled fast rollouts (`services.games.rollout`) under `rule` (one of
        `rule_names`; "": the default), which play positions out for leaf values mixed with
        the value network's; None (the default): the game has none."""
        return None

    # ---- requests -----------------------------------------------------------------------
    @abstractmethod
    def position_from_request(self, position: search_pb2.Position, field: str) -> Position:
        """A validated position for an API `Position` (which may be a finished game);
        InvalidRequest / RequestTooLarge naming the field that is wrong."""

    def require_playable(self, state: Position, field: str) -> None:
        """InvalidRequest naming `field` when the side to move has no legal move."""
        if state.is_over or not state.legal_mask().any():
            raise InvalidRequest(field, "the game is over")


def check_size(game: Game, position: search_pb2.Position, field: str) -> int:
    """The request's board size, one of `game.sizes` (else InvalidRequest naming it)."""
    size = game.request_size(position.board_size)
    if size not in game.sizes:
        raise InvalidRequest(f"{field}.board_size",
                             f"{game.title} is served on {served_sizes(game)}, got {size}")
    return size


def served_sizes(game: Game) -> str:
    """The game's board sizes in words: "15x15 only", "sizes 9..19"."""
    low, high = game.sizes[0], game.sizes[-1]
    return f"{low}x{low} only" if low == high else f"sizes {low}..{high}"


def setup_points(points: Iterable[search_pb2.Point], size: int, taken: set[int], field: str,
                 name: Callable[[int], str]) -> list[int]:
    """Set-up stones: on the board, not a pass, not on a taken point (`taken` grows with
    them); flat indices. `name(index)` spells a point in the game's own notation."""
    out: list[int] = []
    for i, p in enumerate(points):
        where = f"{field}[{i}]"
        if p.is_pass:
            raise InvalidRequest(where, "a pass cannot be a set-up stone")
        if not (0 <= p.x < size and 0 <= p.y < size):
            raise InvalidRequest(where, f"({p.x}, {p.y}) is off the {size}x{size} board")
        index = p.y * size + p.x
        if index in taken:
            raise InvalidRequest(where, f"{name(index)} is occupied")
        taken.add(index)
        out.append(index)
    return out


def request_moves(game: Game, position: search_pb2.Position, size: int,
                  field: str) -> list[int]:
    """The flat moves of a request (the pass as `pass_move`), each on the board."""
    out = []
    for i, p in enumerate(position.moves):
        where = f"{field}.moves[{i}]"
        if p.is_pass:
            move = game.pass_move(size)
            if move is None:
                raise InvalidRequest(where, f"{game.title} has no pass")
            out.append(move)
        elif not (0 <= p.x < size and 0 <= p.y < size):
            raise InvalidRequest(where, f"({p.x}, {p.y}) is off the {size}x{size} board")
        else:
            out.append(p.y * size + p.x)
    return out


def simple_position(game: Game, position: search_pb2.Position, field: str,
                    start: Position) -> Position:
    """A request's position for a game without rules options, komi or set-up stones: its
    moves played from `start` (its empty board), an illegal one named by its index."""
    if position.rule != search_pb2.RULE_UNSPECIFIED:
        raise InvalidRequest(f"{field}.rule", f"{game.title} has no rule options")
    if position.HasField("komi"):
        raise InvalidRequest(f"{field}.komi", f"{game.title} has no komi")
    if position.setup_black or position.setup_white:
        raise InvalidRequest(f"{field}.setup_black", f"{game.title} has no set-up stones")
    if position.first_to_move not in (search_pb2.COLOR_UNSPECIFIED, search_pb2.COLOR_BLACK):
        raise InvalidRequest(f"{field}.first_to_move", f"black moves first in {game.title}")
    size = start.size
    if len(position.moves) > game.policy_size(size):
        raise RequestTooLarge(f"{field}.moves",
                              f"at most {game.policy_size(size)} moves, got {len(position.moves)}")
    state = start
    for i, move in enumerate(request_moves(game, position, size, field)):
        where = f"{field}.moves[{i}]"
        if state.is_over:
            raise InvalidRequest(where, f"the game ended at moves[{i - 1}]")
        try:
            state = state.play(move)
        except ValueError as exc:
            raise InvalidRequest(where, f"{game.move_name(move, size)}: {exc}") from exc
    return state
