"""`movepred play`: the search service playing itself, or a game's reference player; the
games are written as records (the writers are codecs: `services.records.sgf_writer`).

`movepred play [--game NAME] [--size S] --target HOST:PORT --visits N --out game.sgf`, for a
game without a reference player (Gomoku, Go, ...), asks GenMove for both sides until the game
is over (a five, a full board, two passes) or `--max-moves` is reached, and writes the game as
the Game writes records (`Game.record_text`: Gomoku GM[4], Go GM[1]) with each move's search
statistics as a comment, the player and the result in the root; every move goes through the
game's rules (`play_game`). `result_of` gives the SGF result of a Gomoku position.

`movepred play --game NAME [--size S] [--games N] [--seed K] [--out DIR]`, for a game with a
reference player (`Game.opponent`: the Capture Game's greedy player), plays the served network
(GenMove) against that player instead, colours alternated (the network is black in the odd-
numbered games), writes each game where the Game writes records (`Game.write_record`, its first
`written_formats`: SGF) and prints the network's wins and losses.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from services.defaults import SEARCH_TARGET
from services.games.base import Game, InvalidRequest, Position
from services.games.gomoku.rules import BLACK, WHITE, GomokuState
from services.games.registry import default_game, get_game, registered_games
from services.records.sgf_writer import APP_NAME, write_sgf_text

PlayResult = TypeVar("PlayResult")

DEFAULT_PLAY_VISITS = 200


def result_of(state: GomokuState) -> str | None:
    """"B+" / "W+" once somebody made five, "0" for a full board, None while the game goes on."""
    if state.winner == BLACK:
        return "B+"
    if state.winner == WHITE:
        return "W+"
    if state.is_over:
        return "0"
    return None


# ---- self-play through the search service ------------------------------------------------------
@dataclass
class PlayedGame:
    """A game the search service played against itself: the moves from `game`'s start on a
    `size` board under `rule` (one of the game's `rule_names`, "" its default)."""

    game: Game
    size: int
    rule: str
    moves: list[int]
    result: str  # "B+", "W+", "0" (a draw) or "?" when the move limit stopped the game
    comments: list[str] = field(default_factory=list)
    player: str = APP_NAME  # "movepred (gomoku_policy v1, 200 visits)"

    def record_text(self, suffix: str = ".sgf") -> str:
        """The game as a record of `suffix` (one of the game's `written_formats`), each move's
        search as its comment, the player on both sides and the result where the format has a
        place for them."""
        return self.game.record_text(
            suffix, self.moves, self.size, rule=self.rule or None, comments=self.comments,
            summary=f"movepred self-play: {self.player}", players=self.player,
            result=self.result)


def result_code(game: Game, state: Position) -> str:
    """The record's result of `state`: "B+" / "W+" for a finished game's winner, "0" for a
    draw, "?" while the game goes on."""
    if not state.is_over:
        return "?"
    winner = winner_of(game, state)
    return {BLACK: "B+", WHITE: "W+"}.get(winner, "0")


def self_play_limit(game: Game, size: int) -> int:
    """Moves a self-play game may last unless told: the board's points, three times them for a
    game with passes (captures free points again)."""
    return game.policy_size(size) * (3 if game.has_pass else 1)


def play_game(
    client: Any,
    game: Game | None = None,
    size: int | None = None,
    rule: str = "",
    max_visits: int = DEFAULT_PLAY_VISITS,
    max_time_ms: int = 0,
    max_moves: int | None = None,
    on_move: Callable[[int, Any], None] | None = None,
) -> PlayedGame:
    """The search service (a `SearchClient`) against itself from the empty board of `game`
    (default: the default game) on a `size` board under `rule`, until the game is over or
    `max_moves` moves (default `self_play_limit`) are played.

    Every move goes through the game's rules (`Position.play`), so a move they refuse raises;
    a rule the game does not have raises InvalidRequest before any call; gRPC failures raise
    `grpc.RpcError`. `on_move(index, response)` is called after each move.
    """
    from services.api.movepred.v1 import search_pb2

    game = game or default_game()
    size = size or game.default_size
    request = search_pb2.Position(game=game.proto_game, game_name=game.name, board_size=size,
                                  rule=game.proto_rule(rule))
    state = game.position_from_request(request, "position")  # the rule applied
    limit = max_moves or self_play_limit(game, size)
    comments: list[str] = []
    player = APP_NAME
    while not state.is_over and len(state.moves) < limit:
        del request.moves[:]
        request.moves.extend(game.move_point(m, size) for m in state.moves)
        r = client.genmove(request, max_visits=max_visits, max_time_ms=max_time_ms)
        state = state.play(game.parse_move(r.name, size))
        index = len(state.moves) - 1
        comments.append(f"{r.name}: visits {r.visits}/{r.total_visits}, value {r.value:+.3f}, "
                        f"prior {r.prior:.3f}, pv {' '.join(r.principal_variation_names)}")
        if index == 0:
            plural = "" if max_visits == 1 else "s"
            budget = f"{max_visits} visit{plural}" if max_visits else f"{max_time_ms} ms"
            player = f"{APP_NAME} ({r.model_name} v{r.model_version}, {budget})"
        if on_move is not None:
            on_move(index, r)
    return PlayedGame(game, size, rule, list(state.moves), result_code(game, state), comments,
                      player)


# ---- the served network against a game's reference player ------------------------------------
@dataclass
class MatchGame:
    """One game of `play_match`: the moves, the network's colour, who won (BLACK, WHITE, or
    0 for a draw or a game cut short) and the file it was written to."""

    moves: list[int]
    network: int
    winner: int
    path: Path


def winner_of(game: Game, state: Position) -> int:
    """BLACK or WHITE once `state` is over (asked of the game's `terminal_value`, worth to
    the last mover), 0 for a draw or a game that goes on."""
    if not state.is_over or not state.moves:
        return 0
    value = game.terminal_value(state)
    last = BLACK if len(state.moves) % 2 == 1 else WHITE
    if value == 0:
        return 0
    return last if value > 0 else BLACK + WHITE - last


def play_match(
    client: Any,
    game: Game,
    opponent: Callable[[Position], int],
    out_dir: Path,
    *,
    size: int | None = None,
    games: int = 2,
    max_visits: int = DEFAULT_PLAY_VISITS,
    max_time_ms: int = 0,
    opponent_name: str = "reference player",
    on_game: Callable[[int, MatchGame], None] | None = None,
) -> list[MatchGame]:
    """`games` games of the served network (GenMove of `client`, a `SearchClient`) against
    `opponent` (state -> move) on `size` boards, the network black in the even games (from
    0), each written to ``out_dir/game-NNN<suffix>`` (the game's first `written_formats`).
    Every move goes through the game's rules (`Position.play`)."""
    from services.api.movepred.v1 import search_pb2

    size = size or game.default_size
    if not game.written_formats:
        raise ValueError(f"{game.title} games cannot be written (no record format)")
    suffix = game.written_formats[0]
    played: list[MatchGame] = []
    for index in range(games):
        network = BLACK if index % 2 == 0 else WHITE
        state: Position = game.start(size)
        comments: list[str] = []
        player = APP_NAME
        while not state.is_over and len(state.moves) < game.policy_size(size):
            if state.to_move == network:
                position = search_pb2.Position(
                    game=game.proto_game, game_name=game.name, board_size=size,
                    moves=[game.move_point(m, size) for m in state.moves])
                r = client.genmove(position, max_visits=max_visits, max_time_ms=max_time_ms)
                move = game.parse_move(r.name, size)
                comments.append(f"{r.name}: visits {r.visits}/{r.total_visits}, "
                                f"value {r.value:+.3f}, prior {r.prior:.3f}")
                plural = "" if max_visits == 1 else "s"
                budget = f"{max_visits} visit{plural}" if max_visits else f"{max_time_ms} ms"
                player = f"{APP_NAME} ({r.model_name} v{r.model_version}, {budget})"
            else:
                move = opponent(state)
                comments.append(opponent_name)
            state = state.play(move)
        winner = winner_of(game, state)
        colour = "black" if network == BLACK else "white"
        outcome = ("the network won" if winner == network else
                   "a draw" if winner == 0 else f"the {opponent_name} won")
        summary = (f"{player} as {colour} against the {opponent_name}, {size}x{size}: "
                   f"{outcome} after {len(state.moves)} moves")
        path = game.write_record(Path(out_dir) / f"game-{index + 1:03d}{suffix}",
                                 list(state.moves), size, comments=comments, summary=summary)
        result = MatchGame(list(state.moves), network, winner, path)
        played.append(result)
        if on_game is not None:
            on_game(index, result)
    return played


def player_name(opponent: Callable[[Position], int]) -> str:
    """The reference player's name for people: its function's name ("greedy_player" ->
    "greedy player")."""
    return getattr(opponent, "__name__", "reference_player").replace("_", " ")


def _error(message: str) -> None:
    """An error for people on stderr, so that stdout holds only what the command made."""
    print(f"error: {message}", file=sys.stderr)


def _with_search_client(args: argparse.Namespace,
                        work: Callable[[Any], PlayResult]) -> tuple[PlayResult | None, int]:
    """(work(client), 0) on a search client made from the command's target, TLS and token
    options; (None, exit code) after printing why not: 2 for bad client options, 1 for a
    failed RPC (callers test the code: `work` may return None)."""
    import grpc

    from services.search import auth
    from services.search.client import search_client_factory

    try:
        make_client = search_client_factory(args)
    except auth.AuthConfigError as exc:
        _error(str(exc))
        return None, 2
    try:
        with make_client() as client:
            return work(client), 0
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        _error(f"{code.name if code else 'RPC failed'}: {details}")
        return None, 1


def cmd_match(args: argparse.Namespace, game: Game,
              opponent: Callable[[Position], int]) -> int:
    """`movepred play --game NAME` for a game with a reference player (see the docstring)."""
    size = args.size or game.default_size
    if size not in game.sizes or args.games < 1:
        _error(f"--size must be one of {list(game.sizes)} and --games >= 1")
        return 2
    out_dir = args.out or Path("runs") / "play" / game.name

    def show(index: int, g: MatchGame) -> None:
        if not args.quiet:
            colour = "black" if g.network == BLACK else "white"
            who = "win" if g.winner == g.network else "draw" if g.winner == 0 else "loss"
            print(f"game {index + 1}: network {colour}, {len(g.moves)} moves, {who}: {g.path}")

    played, code = _with_search_client(args, lambda client: play_match(
        client, game, opponent, out_dir, size=size, games=args.games, max_visits=args.visits,
        max_time_ms=args.time_ms, opponent_name=f"{player_name(opponent)} (seed {args.seed})",
        on_game=show))
    if code:
        return code
    wins = sum(g.winner == g.network for g in played)
    draws = sum(g.winner == 0 for g in played)
    print(f"{game.title} {size}x{size}, network vs {player_name(opponent)}: {wins} wins, "
          f"{len(played) - wins - draws} losses, {draws} draws in {len(played)} games "
          f"(written to {out_dir})")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    if args.visits < 0 or args.time_ms < 0 or args.max_moves < 0:
        _error("--visits, --time-ms and --max-moves must be >= 0")
        return 2
    game = get_game(args.game)
    opponent = game.opponent(args.seed)
    if opponent is not None:
        return cmd_match(args, game, opponent)
    size = args.size or game.default_size
    if size not in game.sizes:
        _error(f"--size: {game.title} is played on {', '.join(map(str, game.sizes))}")
        return 2
    if args.out is None:
        _error("--out (the record file to write) is required for self-play")
        return 2
    if args.out.suffix.lower() not in game.written_formats:
        _error(f"--out {args.out}: {game.title} games are written as "
               f"{', '.join(game.written_formats) or 'no record format'}")
        return 2
    try:
        game.proto_rule(args.rule)
    except InvalidRequest as exc:
        _error(f"--rule: {exc.message}")
        return 2

    def show(index: int, r: Any) -> None:
        if not args.quiet:
            color = "black" if index % 2 == 0 else "white"
            print(f"{index + 1:>3}. {color} {r.name} ({r.visits}/{r.total_visits} visits)")

    played, code = _with_search_client(args, lambda client: play_game(
        client, game, size, args.rule, max_visits=args.visits, max_time_ms=args.time_ms,
        max_moves=args.max_moves or None, on_move=show))
    if code:
        return code
    path = write_sgf_text(args.out, played.record_text(args.out.suffix.lower()))
    print(f"wrote {path}: {len(played.moves)} moves, result {played.result}")
    return 0


def add_play_command(subparsers: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Register `movepred play` (a registrar for `services.cli.REGISTRARS`)."""
    p = subparsers.add_parser(
        "play",
        help="the search service plays itself; the game is written as SGF",
        epilog="With --visits 0 and --time-ms 0 the server searches 200 visits per move.",
    )
    from services.search.auth import add_client_arguments

    p.add_argument("--target", default=SEARCH_TARGET, help="search service host:port")
    add_client_arguments(p)  # TLS, token: the same options as every client
    p.add_argument("--rule", default="",
                   choices=sorted({r for g in registered_games() for r in g.rule_names}),
                   help="the game's rule (default: its first, Gomoku's freestyle)")
    p.add_argument(
        "--visits", type=int, default=DEFAULT_PLAY_VISITS, help="visits per move (default 200)"
    )
    p.add_argument("--time-ms", type=int, default=0, help="time per move (0: visits only)")
    p.add_argument(
        "--max-moves",
        type=int,
        default=0,
        help="stop after this many moves (result '?'; 0, the default: the board's points, "
             "three times them for a game with passes)",
    )
    p.add_argument("--out", type=Path, default=None,
                   help="record file to write (self-play: .sgf, or a format the game writes); "
                        "with a reference player, the folder "
                        "of the games (default runs/play/<game>)")
    p.add_argument("--game", choices=[g.name for g in registered_games()],
                   default=default_game().name,
                   help="the game; one with a reference player (the Capture Game's greedy "
                        "player) plays the network against it, colours alternated; any other "
                        "plays itself (Go: moves in GTP vertices)")
    p.add_argument("--size", type=int, default=0, help="board size (0: the game's default)")
    p.add_argument("--games", type=int, default=2, help="games against the reference player")
    p.add_argument("--seed", type=int, default=0, help="the reference player's tie-break seed")
    p.add_argument("--quiet", action="store_true", help="do not print every move")
    return {"play": cmd_play}
