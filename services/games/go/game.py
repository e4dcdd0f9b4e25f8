"""Go as a `Game` (services.games.base), and `GoSearchState`, the Go position the services play on.

`GoState` (services.games.go.rules) is the rules on a board: stones, ko, whose turn, what a move
does; ingest replays records on it. `GoSearchState` is a `GoState` with what a played game adds:
the komi (so it can be scored), the moves as played (flat points, the pass is `size * size`) and
the set-up it started from; it is immutable, and it is what the search, request validation and the
front-ends play on, in the shape every `Position` has (`size`, `to_move`, `moves`, `board`,
`play(move)`, `legal_mask()` over the points *and* the pass, so a Go policy has `size * size + 1`
entries), plus what only Go has:

* `features()`: the compact int8 [4, S, S] network input (`services.games.go.features`), which
  is what the `go_policy` model on Triton takes (any served size S, `GO_SIZES`: 9..19);
* `terminal_value()`: after two consecutive passes the game is over and scored by area
  (stones plus empty regions bordered by one colour only, dead stones are *not* removed) with
  komi: +1 for the player who made the last pass when that player wins, -1 when it loses,
  0 for a tie (jigo);
* `search_candidates(legal)`: the moves the tree search considers: every legal point except
  the ones that fill one of the mover's own single-point eyes (the classic eye rule of
  Monte-Carlo Go programs: all orthogonal neighbours are own stones and the diagonals hold at
  most one opponent stone, none on the edge), plus the pass, which is always a candidate.
  Filling an own eye is legal (the policy shows it) but never searched.

The rules are `services.games.go.rules` (captures, suicide illegal, simple ko, two passes end the
game); this module adds the bookkeeping and `GoGame`, what the services ask of Go.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from services import coords
from services.api.movepred.v1 import search_pb2
from services.coords import VertexError  # noqa: F401 (what parse_vertex raises)
from services.games.base import (
    BASIC_ENCODER,
    COLOR_NAMES,
    BoardNotes,
    Expansion,
    Game,
    InvalidRequest,
    Position,
    RequestTooLarge,
    SourceResult,
    setup_points,
)
from services.games.go import encoders as go_encoders
from services.games.go import features as go_features
from services.games.go import rules as go
from services.games.go.rollout import GoRollouts
from services.games.go.rules import (
    BLACK,
    EMPTY,
    SERVED_MAX_SIZE,
    SERVED_MIN_SIZE,
    WHITE,
    GoState,
    opponent,
)
from services.games.registry import register
from services.games.search_kernels import SearchKernels, SearchPosition
from services.records.sgf import ARCHIVE_SUFFIXES
from services.records.sgf_writer import go_sgf

GO_SIZE = 19  # the default size (board_size 0 in a request, GTP before any boardsize)
# The sizes served (requests, GTP `boardsize`): 9..19, see services/games/go/rules.py for why.
GO_MIN_SIZE, GO_MAX_SIZE = SERVED_MIN_SIZE, SERVED_MAX_SIZE
GO_SIZES = range(GO_MIN_SIZE, GO_MAX_SIZE + 1)
DEFAULT_KOMI = 7.5


def parse_vertex(text: str, size: int = GO_SIZE) -> int | None:
    """GTP vertex ("D4", "q16", "pass") -> flat point y * size + x, or None for a pass."""
    return coords.parse_gtp_vertex(text, size)


def vertex(move: int | None, size: int = GO_SIZE) -> str:
    """Flat point (or None / size * size for a pass) -> GTP vertex ("D4", "pass")."""
    return coords.gtp_vertex(move, size)


@cache
def _geometry(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(orthogonal [N, 4], diagonal [N, 4], on-edge [N]) neighbour indices of every point;
    missing neighbours (off the board) are the sentinel N."""
    n = size * size
    orth = np.full((n, 4), n, dtype=np.intp)
    diag = np.full((n, 4), n, dtype=np.intp)
    for p in range(n):
        y, x = divmod(p, size)
        for k, (dx, dy) in enumerate(((-1, 0), (1, 0), (0, -1), (0, 1))):
            if 0 <= x + dx < size and 0 <= y + dy < size:
                orth[p, k] = (y + dy) * size + x + dx
        for k, (dx, dy) in enumerate(((-1, -1), (1, -1), (-1, 1), (1, 1))):
            if 0 <= x + dx < size and 0 <= y + dy < size:
                diag[p, k] = (y + dy) * size + x + dx
    return orth, diag, (diag == n).any(axis=1)


def own_eyes(state: GoState, color: int) -> np.ndarray:
    """Empty points that are single-point eyes of `color` (see the module docstring)."""
    size = state.size
    n = size * size
    orth, diag, edge = _geometry(size)
    cells = np.empty(n + 1, dtype=np.uint8)
    cells[:n] = state.cell_values()
    cells[n] = color  # off the board counts as own for the orthogonal neighbours
    surrounded = (cells[:n] == EMPTY) & (cells[orth] == color).all(axis=1)
    if not surrounded.any():
        return np.empty(0, dtype=np.intp)
    cells[n] = EMPTY  # ... and as no opponent for the diagonals
    bad = (cells[diag] == opponent(color)).sum(axis=1)
    return np.flatnonzero(surrounded & ((bad == 0) | ((bad == 1) & ~edge)))


class GoSearchState:
    """An immutable Go position with its komi, its move sequence and its set-up.

    `moves` are flat points in play order (`size * size` is a pass); `setup` identifies what
    the moves started from (the set-up board and who moved first), so two positions with equal
    `setup` and `moves` are the same game state (the tree cache relies on it).
    """

    __slots__ = ("komi", "moves", "setup", "state")

    def __init__(
        self,
        state: GoState,
        komi: float = DEFAULT_KOMI,
        moves: tuple[int, ...] = (),
        setup: bytes | None = None,
    ) -> None:
        self.state = state
        self.komi = float(komi)
        self.moves = moves
        self.setup = setup if setup is not None else bytes([state.to_move]) + state.cells

    # ---- what every Position has -------------------------------------------------------------
    @property
    def game(self) -> GoGame:
        return GO

    @property
    def size(self) -> int:
        return self.state.size

    @property
    def to_move(self) -> int:
        return self.state.to_move

    @property
    def pass_move(self) -> int:
        return self.state.size * self.state.size

    @property
    def policy_size(self) -> int:
        """Entries of a policy: every point, then the pass."""
        return self.state.size * self.state.size + 1

    @property
    def board(self) -> np.ndarray:
        return self.state.board

    @property
    def is_over(self) -> bool:
        return self.state.is_over

    @property
    def rule(self) -> str:
        return f"go-area komi {self.komi:g}"

    def play(self, move: int) -> GoSearchState:
        """Play flat point `move` (`size * size`: pass); raises `IllegalMove` as GoState does."""
        point = None if move == self.pass_move else int(move)
        return GoSearchState(self.state.play(point), self.komi, (*self.moves, int(move)),
                             self.setup)

    def legal_mask(self) -> np.ndarray:
        """Boolean [size * size + 1]: the legal points, then the pass (all False once over)."""
        return self.state.legal_mask(include_pass=True)

    def features(self) -> np.ndarray:
        """The network input: compact int8 [4, size, size] seen from the side to move."""
        return go_features.compact(self.state)

    def base_key(self) -> tuple[str, float, int, bytes]:
        """What the game is besides its moves (the tree cache's key, with `moves`): the komi
        exactly (`rule` prints it to 6 digits, and a tree searched under komi 7 must not
        answer for 7.0000005, where a tie is a loss)."""
        return ("go-area", float(self.komi), self.size, self.setup)

    # ---- Go only ----------------------------------------------------------------------------
    def score(self) -> float:
        """Area score from Black's side minus komi (> 0: Black is ahead), no dead stones."""
        return self.state.score(self.komi)

    def winner(self) -> int:
        """BLACK, WHITE or EMPTY (a tie) by `score`."""
        s = self.score()
        return BLACK if s > 0 else WHITE if s < 0 else EMPTY

    def terminal_value(self) -> float:
        """The score's verdict for the player who made the last move: +1 win, -1 loss, 0 tie."""
        w = self.winner()
        if w == EMPTY:
            return 0.0
        return 1.0 if w == opponent(self.to_move) else -1.0

    def search_candidates(self, legal: np.ndarray | None = None) -> list[int]:
        """Legal moves the search considers (ascending, the pass last): no own-eye fills."""
        if legal is None:
            legal = self.legal_mask()
        points = legal[: self.pass_move].copy()
        eyes = own_eyes(self.state, self.to_move)
        if len(eyes):
            points[eyes] = False
        return [*np.flatnonzero(points).tolist(), self.pass_move]

    def move_name(self, move: int) -> str:
        return vertex(move, self.size)

    def __repr__(self) -> str:
        return (f"GoSearchState(size={self.size}, moves={len(self.moves)}, komi={self.komi:g}, "
                f"to_move={'black' if self.to_move == BLACK else 'white'})")


MAX_GO_MOVES = 4 * GO_MAX_SIZE * GO_MAX_SIZE  # moves of a request, whatever the size


class GoGame(Game):
    name = go.GAME_NAME
    title = "Go"
    proto_game = search_pb2.GAME_GO
    default_size = GO_SIZE
    sizes = tuple(GO_SIZES)
    has_pass = True
    input_planes = go_features.COMPACT_CHANNELS
    input_max_value = go_features.MAX_LIBERTIES  # liberties 0..4, move age 0..4
    input_from_mover = True  # plane 0: own and opponent stones
    default_model = "go_policy"
    default_config = "go_res_b2c32_v"
    record_formats = (".sgf", *ARCHIVE_SUFFIXES)  # SGF files and archives of them
    # games cut short by an illegal move keep their pairs up to it, with a note
    kept_notes: ClassVar[dict[str, str]] = {go.TRUNCATED_NOTE: go.TRUNCATED}
    written_formats = (".sgf",)
    stages = (50, 300)  # Go games run to 200-300 moves
    default_komi = DEFAULT_KOMI
    # the network inputs a Go model may take, by name (`services.games.go.encoders`); "basic"
    # is the one above (`input_planes`, `expand_planes`, `network_input`, `features()`)
    encoders: ClassVar[Mapping[str, go_encoders.GoEncoder]] = MappingProxyType(
        go_encoders.ENCODERS)

    def record_text(self, suffix: str, moves: Sequence[int], size: int, *,
                    rule: str | None = None, comments: Sequence[str] = (),
                    summary: str = "", komi: float | None = None, players: str = "",
                    result: str | None = None) -> str:
        """SGF (GM[1], KM the komi); `rule` is not used: Go records here are scored with the
        Chinese rules the GTP front-end plays. A pass (`size * size`) is written B[] / W[]."""
        if suffix != ".sgf":
            return super().record_text(suffix, moves, size)
        colours = (BLACK, WHITE)
        return go_sgf([(colours[i % 2], None if p == size * size else p)
                       for i, p in enumerate(moves)], size=size, comments=list(comments),
                      event=summary or None, komi=DEFAULT_KOMI if komi is None else komi,
                      black=players, white=players, result=result)

    def board_notes(self, state: Position) -> BoardNotes:
        """The stones each side has captured, and after two passes the area score with komi
        (dead stones are not removed, as the search scores it)."""
        s: Any = state
        captures = {BLACK: s.state.captures[BLACK], WHITE: s.state.captures[WHITE]}
        result = ""
        if s.is_over:
            score = s.score()
            result = (f"two passes: {'B' if score > 0 else 'W'}+{abs(score):g} by area "
                      f"with komi {s.komi:g}" if score else "two passes: a tie (jigo)")
        return BoardNotes(captures=captures, result=result)

    def random_inputs(self, n: int, size: int | None = None, seed: int = 0,
                      encoder: str = BASIC_ENCODER) -> np.ndarray:
        """Random compact planes every feature plane is exercised by: stones 0..2, liberties
        1..4 on stones only, a few move ages 1..4, at most one ko point; for another of
        `encoders`, its input computed from those."""
        rng = np.random.default_rng(seed)
        s = size or GO_SIZE
        stones = rng.integers(0, 3, (n, s, s))
        libs = rng.integers(1, go_features.MAX_LIBERTIES + 1, (n, s, s)) * (stones > 0)
        age = rng.integers(1, go_features.RECENT_MOVES + 1, (n, s, s))
        age = age * (rng.random((n, s, s)) < 0.02) * (stones > 0)
        ko = np.zeros((n, s * s), dtype=np.int64)
        has_ko = rng.random(n) < 0.5
        ko[has_ko, rng.integers(0, s * s, int(has_ko.sum()))] = 1
        basic = np.stack([stones, libs, age, ko.reshape(n, s, s)], axis=1).astype(np.int8)
        return basic if encoder == BASIC_ENCODER else self.encode_inputs(basic, encoder)

    def encoder_names(self) -> tuple[str, ...]:
        return tuple(self.encoders)

    def input_encoder(self, name: str) -> go_encoders.GoEncoder:
        """The encoder called `name`; ValueError naming Go's encoders for another name."""
        self.check_encoder(name)
        return self.encoders[name]

    def encode_inputs(self, compact: np.ndarray, encoder: str) -> np.ndarray:
        """Basic compact planes int8 [N, 4, S, S] -> the encoder's int8 [N, C, S, S]
        (`GoEncoder.compact_batch`: for "extended", the tactical channels computed from the
        stones and ko planes)."""
        return self.input_encoder(encoder).compact_batch(compact)

    def encoder_input_shape(self, encoder: str, size: int | None = None) -> tuple[int, ...]:
        return self.input_encoder(encoder).input_shape(size or self.default_size)

    def encoder_max_value(self, encoder: str) -> int:
        return self.input_encoder(encoder).max_value

    def move_name(self, move: int, size: int) -> str:
        return vertex(move, size)

    def parse_move(self, name: str, size: int) -> int:
        point = parse_vertex(name, size)
        return size * size if point is None else point

    def board_text(self, state: Position) -> str:
        """The board with GTP letters (`GoState.ascii`)."""
        s: Any = state
        return s.state.ascii()

    def replay_source(self, path: Path, result: SourceResult, *,
                      board_size: int | None = None, packed: bool = True) -> Iterator[Any]:
        """SGF files and archives of them, each game replayed under Go's rules into compact
        planes seen from the mover, packed (`go_replay.pack_planes`) as the shards store them
        unless `packed` is False: `services.games.go.replay`."""
        from services.games.go import replay as go_replay  # pyarrow: ingest only, not the rules

        return go_replay.replay_source(Path(path), result, board_size, packed)

    def expand_planes(self, boards):
        """[N, 4, S, S] compact planes -> the 17 float planes (`go_planes`)."""
        from services.games.go import (
            planes as go_planes,  # torch: imported by the trainers, not the rules
        )

        return go_planes.planes_torch(boards)

    def network_input(self, state: Position) -> np.ndarray:
        s: Any = state
        return s.features()

    def expand(self, state: Position) -> Expansion:
        """Two consecutive passes: scored by area with komi; otherwise the legal points that
        fill no own eye, and the pass (never empty)."""
        s: Any = state
        if s.is_over:
            return Expansion(terminal_value=s.terminal_value())
        legal = s.legal_mask()
        return Expansion(candidates=s.search_candidates(legal), legal=legal)

    def terminal_value(self, state: Position) -> float:
        s: Any = state
        return float(s.terminal_value())

    def search_kernels(self) -> SearchKernels:
        """`services.games.go.search_kernels`."""
        from services.games.go import search_kernels

        return search_kernels.KERNELS

    def search_position(self, state: Position) -> SearchPosition:
        from services.games.go import search_kernels

        s: Any = state
        return search_kernels.position(s)

    def start(self, size: int | None = None) -> GoSearchState:
        return GoSearchState(GoState(size or GO_SIZE))

    def rollouts(self, rule: str = "") -> GoRollouts:
        """Area-scored rollouts (Go has one rule here: `rule` is not used)."""
        return GoRollouts()

    def smoke_positions(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return known_go_positions()

    def transposition_key(self, state: Position) -> tuple[Any, ...]:
        """The rules' state with the last moves the network input holds (`GoState.key` with
        `go_features.RECENT_MOVES`), the komi and the set-up stones: two orders of the same
        moves meet under it once their last RECENT_MOVES moves agree again."""
        s: Any = state
        return (s.state.key(go_features.RECENT_MOVES), s.komi, s.setup)

    def base_key(self, state: Position) -> tuple[Any, ...]:
        s: Any = state
        return s.base_key()

    def require_playable(self, state: Position, field: str) -> None:
        if state.is_over:
            raise InvalidRequest(field, "the game is over (two consecutive passes)")

    def position_from_request(self, position: search_pb2.Position, field: str) -> GoSearchState:
        """A validated GoSearchState (which may be a game that is already over)."""
        if position.rule not in (search_pb2.RULE_UNSPECIFIED, search_pb2.RULE_GO_AREA):
            if position.rule not in search_pb2.Rule.values():
                raise InvalidRequest(f"{field}.rule", f"unknown rule {position.rule}")
            name = search_pb2.Rule.Name(position.rule)
            raise InvalidRequest(
                f"{field}.rule",
                f"{name} is a Gomoku rule; Go is played under RULE_GO_AREA (or unset)",
            )
        size = position.board_size or GO_SIZE
        if size not in GO_SIZES:
            raise InvalidRequest(
                f"{field}.board_size",
                f"Go is served on sizes {GO_MIN_SIZE}..{GO_MAX_SIZE} ({GO_MIN_SIZE}x{GO_MIN_SIZE} "
                f"to {GO_MAX_SIZE}x{GO_MAX_SIZE}), got {size}",
            )
        points = size * size
        komi = position.komi if position.HasField("komi") else DEFAULT_KOMI
        if not math.isfinite(komi) or abs(komi) > points:
            raise InvalidRequest(f"{field}.komi",
                                 f"must be finite and within +-{points}, got {komi}")
        first = position.first_to_move
        if first not in (search_pb2.COLOR_UNSPECIFIED, search_pb2.COLOR_BLACK,
                         search_pb2.COLOR_WHITE):
            raise InvalidRequest(f"{field}.first_to_move", f"unknown color {first}")
        first_color = WHITE if first == search_pb2.COLOR_WHITE else BLACK
        for what in ("setup_black", "setup_white"):
            n = len(getattr(position, what))
            if n > points:
                raise RequestTooLarge(
                    f"{field}.{what}", f"at most {points} points on a {size}x{size} board, got {n}"
                )
        if len(position.moves) > MAX_GO_MOVES:
            raise RequestTooLarge(
                f"{field}.moves", f"at most {MAX_GO_MOVES} Go moves, got {len(position.moves)}"
            )
        taken: set[int] = set()

        def name_of(index: int) -> str:
            return coords.gtp_name(index, size)

        black = setup_points(position.setup_black, size, taken, f"{field}.setup_black", name_of)
        white = setup_points(position.setup_white, size, taken, f"{field}.setup_white", name_of)
        state = GoState(size, first_color)
        if black or white:
            state = state.add_stones(black, white, to_move=first_color)
            libs = state.liberties().reshape(-1)
            for color, stones, what in ((BLACK, black, "setup_black"),
                                        (WHITE, white, "setup_white")):
                dead = [p for p in stones if libs[p] == 0]
                if dead:
                    raise InvalidRequest(
                        f"{field}.{what}",
                        f"the {COLOR_NAMES[color]} set-up stone at "
                        f"{coords.gtp_name(dead[0], size)} has no liberty",
                    )
        pos = GoSearchState(state, komi)
        for i, p in enumerate(position.moves):
            where = f"{field}.moves[{i}]"
            if pos.is_over:
                raise InvalidRequest(
                    where, f"the game ended at moves[{i - 1}] (two consecutive passes)"
                )
            if p.is_pass:
                move = pos.pass_move
            elif not (0 <= p.x < size and 0 <= p.y < size):
                raise InvalidRequest(where, f"({p.x}, {p.y}) is off the {size}x{size} board")
            else:
                move = p.y * size + p.x
            try:
                pos = pos.play(move)
            except go.IllegalMove as exc:
                raise InvalidRequest(where, _illegal(exc, pos)) from exc
        return pos


def _illegal(exc: go.IllegalMove, pos: GoSearchState) -> str:
    name = coords.gtp_name(exc.point, pos.size)
    color = COLOR_NAMES[pos.to_move]
    if exc.reason == go.OCCUPIED:
        return f"{name} is occupied"
    if exc.reason == go.KO:
        return (f"{name} retakes the ko at once: {color} must play elsewhere first "
                "(simple ko)")
    if exc.reason == go.SUICIDE:
        return f"{name} is suicide for {color} (it would leave its own group without liberties)"
    return f"{name} is illegal ({exc})"


def known_go_positions() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Fixed Go positions the rollout smoke test asks a new version about: {name: (compact
    int8 [4, 19, 19], legal mask [362], pass last)}."""
    def at(name: str) -> int:
        point = parse_vertex(name)
        assert point is not None
        return point

    states = {"empty": GoState(19)}
    s = GoState(19)
    for v in ("Q16", "D4", "Q4", "D16", "R14"):
        s = s.play(at(v))
    states["opening"] = s
    # black E5 captures D5 and takes a ko: white may not retake at D5 at once
    s = GoState(19)
    for v in ("D4", "E4", "C5", "F5", "D6", "E6", "A1", "D5", "E5"):
        s = s.play(at(v))
    assert s.ko == at("D5")
    states["ko"] = s
    crowded = GoState(19)
    rng = np.random.default_rng(7)
    for _ in range(200):
        legal = np.flatnonzero(crowded.legal_mask())
        crowded = crowded.play(int(rng.choice(legal)))
    states["crowded"] = crowded
    states["after a pass"] = states["opening"].play(None)
    return {
        name: (go_features.compact(st), st.legal_mask(include_pass=True))
        for name, st in states.items()
    }


GO = register(GoGame())
