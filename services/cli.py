"""The `movepred` command line.

Subcommands are registered by "registrar" functions: each takes the argparse subparsers object,
adds its parsers and returns {command name: handler(args) -> exit code}. `main` collects them
all in one dict and dispatches; add a registrar to `REGISTRARS` to add commands.

    movepred predict --target 127.0.0.1:50051 h8 h9 i8
    movepred predict --position "h8 h9" --position "h8 i9 j10"     (one request, one batch)
    movepred genmove --visits 400 h8 h9 i8
    movepred analyze --visits 2000 --every 200 h8 h9 i8            (streams; Ctrl-C stops it)
    movepred predict --png heat.png h8 h9 i8                        (and the policy as a picture)
    movepred genmove --game go --size 9 --visits 200 E5 C3          (Go, on any size 9..19)
    movepred gtp --target 127.0.0.1:50051 --visits 200             (a Go engine on stdin/out)
    movepred infer --black h8 i9 --white h9 --out game.sgf         (the stones' likeliest order)
    movepred infer --record games.rif --moves 20 --out game.sgf     (a record's position)
    movepred status                                                (what runs: pid, ports, health)
    movepred stop [search triton prefect ...]                      (SIGTERM, then SIGKILL)
    movepred match --engine version:3:visits=200 --engine gnugo     (a rated match: docs/matches.md)
    movepred gate --candidate 4                                    (the candidate's match gate)
    movepred selfplay --game gomoku --iterations 3 --games 200     (the self-play loop flow)
    movepred quantize --version 4                                  (an int8 copy for CPU serving)

Every client of the search service takes the same security options
(`services.search.auth.add_client_arguments`): --tls-ca / --tls (TLS), --tls-client-cert and
--tls-client-key (mutual TLS), --token-file or --token-env (bearer token; $MOVEPRED_TOKEN when
set), --wait-for-ready.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
from rich.console import Console
from rich.table import Table
from rich.text import Text

from services.api.movepred.v1 import search_pb2
from services.coords import CoordinateError
from services.defaults import SEARCH_TARGET
from services.games.base import COLOR_NAMES, Game, InvalidRequest
from services.games.go.rules import replay as go_replay
from services.games.gomoku.rules import Rule
from services.games.registry import default_game, game_of_source, get_game, registered_games
from services.match.cli import add_match_commands
from services.move_order.annealing import INITS
from services.move_order.neighbours import NAMES as NEIGHBOURS
from services.move_order.problem import stones_from_board
from services.processes import add_process_commands
from services.protocols.gtp import add_gtp_command
from services.protocols.katago_analysis import add_analysis_engine_command
from services.protocols.sgf_export import add_play_command
from services.records.rif import RIF_SUFFIXES, RifGame, read_rif
from services.records.sgf import SgfGame, read_sgf
from services.records.sgf_writer import app_version
from services.repository.quantize_cli import add_quantize_command
from services.search import auth
from services.search.advice import next_step
from services.search.client import game_position, proto_rule, search_client_factory
from services.selfplay_loop.cli import add_selfplay_command
from services.settings import DEADLINE_S, MAX_INT32, bounded
from services.triton.cli import add_rollout_commands

Handler = Callable[[argparse.Namespace], int]
Subparsers = argparse._SubParsersAction  # what ArgumentParser.add_subparsers returns
Registrar = Callable[[Subparsers], dict[str, Handler]]

PNG_CANDIDATES = 40  # analyze --png: candidates asked for when --candidates does not say
EXIT_RPC_ERROR = 1
EXIT_USAGE = 2
# argparse types of the numbers a request carries: within the API's int32 / uint64 (protobuf
# raises a bare ValueError beyond them; the service's own limits it explains itself)
COUNT = bounded(int, 0, MAX_INT32)
SEED = bounded(int, 0, 2**64 - 1)


def output_file(*suffixes: str) -> Callable[[str], Path]:
    """An argparse type for a file a command writes after its call: checked before the call
    (a search can take a minute), so a wrong path costs nothing."""
    def parse(text: str) -> Path:
        path = Path(text)
        if suffixes and path.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(f"{text}: must end in {', '.join(suffixes)}")
        if path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a folder")
        if not path.parent.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: no folder {path.parent}")
        return path

    return parse


def _console() -> Console:
    return Console(highlight=False)


def _error(message: str) -> None:
    """An error for people, on stderr: stdout keeps only what the command produced, so a
    script reading it (or a `--json` report) never gets the complaint mixed in."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"error: {message}",
                                                                markup=False)


def _add_position_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=SEARCH_TARGET, help="search service host:port")
    p.add_argument("--game", choices=[g.name for g in registered_games()],
                   default=default_game().name,
                   help="the game (default %(default)s); moves are in its notation")
    p.add_argument("--rule", choices=[r.value for r in Rule], default=None,
                   help="Gomoku's rule (default: freestyle)")
    p.add_argument("--size", type=COUNT, default=0,
                   help="board size (default: the game's, 15 for Gomoku, 19 for Go; Go takes "
                        "9..19)")
    p.add_argument("moves", nargs="*",
                   help='moves in order, black first, e.g. h8 h9 i8 (Go: D4 Q16 pass)')
    auth.add_client_arguments(p)


def _client_factory(console: Console, args: argparse.Namespace) -> Callable[[], Any] | None:
    """What makes the search client from the target and security options; None (after
    printing why) when those options cannot be used."""
    try:
        return search_client_factory(args)
    except auth.AuthConfigError as exc:
        _error(str(exc))
        return None


def _position(console: Console, args: argparse.Namespace,
              moves: Sequence[str]) -> search_pb2.Position | None:
    """The request's position of `args.game` (with `args.rule`), its board printed; None
    (after printing why) when a move name is not a point of the board."""
    try:
        position = game_position(args.game, moves, args.size)
    except CoordinateError as exc:
        _error(str(exc))
        return None
    if args.rule:
        position.rule = proto_rule(args.rule)
    game = get_game(args.game)
    try:
        state = game.position_from_request(position, "position")
    except InvalidRequest as exc:  # the service explains it too; show it anyway
        console.print(f"note: {exc}")
        return position
    console.print(Text(game.board_text(state)))
    return position


def _write_png(console: Console, args: argparse.Namespace, position: search_pb2.Position,
               values: Sequence[float], title: str, percent: bool) -> None:
    """--png: the position with `values` as a heatmap (`services.board_image`)."""
    from services.board_image import draw_board

    game = get_game(args.game)
    try:
        state = game.position_from_request(position, "position")
    except InvalidRequest as exc:  # the service accepted it, so this is not expected
        _error(f"no picture: {exc}")
        return
    path = draw_board(game, state, values, args.png, title=title, percent=percent)
    console.print(f"wrote {path}")


def _rpc_error(console: Console, exc: grpc.RpcError) -> int:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    details = " ".join(str(details).split())  # one line, whatever the server sent
    hint = next_step(code, details)
    _error(f"{code.name if code else 'RPC failed'}: {details}" + (f"; {hint}" if hint else ""))
    return EXIT_RPC_ERROR


Reply = TypeVar("Reply")


def _unary(console: Console, make_client: Callable[[], Any],
           call: Callable[[Any], Reply]) -> Reply | None:
    """`call(client)` on a fresh client: its reply, or None after printing the failed call's
    status and what to do about it."""
    try:
        with make_client() as client:
            return call(client)
    except grpc.RpcError as exc:
        _rpc_error(console, exc)
        return None


def _policy_table(top_moves: Sequence) -> Table:
    table = Table()
    table.add_column("#", justify="right")
    table.add_column("move")
    table.add_column("probability", justify="right")
    for i, m in enumerate(top_moves, 1):
        table.add_row(str(i), m.name, f"{m.probability:.4f}")
    return table


def _print_prediction(console: Console, result: Any, served_by: Any, heading: str = "") -> str:
    """Print one position's answer (the side to move, the model, the top moves, the value
    where the network has a value head); return the side to move's colour name."""
    color = COLOR_NAMES.get(result.to_move, "white")
    console.print(f"{heading}{color} to move; "
                  f"policy of {served_by.model_name} v{served_by.model_version}:")
    console.print(_policy_table(result.top_moves))
    if result.HasField("value"):  # only from a network with a value head
        console.print(f"value {result.value:+.3f} for {color}")
    return color


def cmd_predict(args: argparse.Namespace) -> int:
    console = _console()
    make_client = _client_factory(console, args)
    if make_client is None:
        return EXIT_USAGE
    extra = [p.split() for p in (args.position or [])]
    if extra:  # several positions: one request, answered by one inference call
        games = ([args.moves] if args.moves else []) + extra
        positions = []
        for moves in games:
            console.print(f"position: {' '.join(moves) or '(empty board)'}")
            position = _position(console, args, moves)
            if position is None:
                return EXIT_USAGE
            positions.append(position)
        many = _unary(console, make_client, lambda client: client.predict_many(
            positions, top_k=args.top_k, timeout=args.timeout))
        if many is None:
            return EXIT_RPC_ERROR
        for moves, result in zip(games, many.results, strict=True):
            _print_prediction(console, result, many, f"{' '.join(moves) or '(empty board)'}: ")
        return 0
    position = _position(console, args, args.moves)
    if position is None:
        return EXIT_USAGE
    r = _unary(console, make_client,
               lambda client: client.predict(position, top_k=args.top_k, timeout=args.timeout))
    if r is None:
        return EXIT_RPC_ERROR
    color = _print_prediction(console, r, r)
    if args.png:
        _write_png(console, args, position, list(r.policy),
                   f"policy (%) of {r.model_name} v{r.model_version}, {color} to move",
                   percent=True)
    return 0


def _candidates_table(candidates: Sequence, title: str | None = None) -> Table:
    table = Table(title=title)
    table.add_column("move")
    table.add_column("visits", justify="right")
    table.add_column("Q", justify="right")
    table.add_column("prior", justify="right")
    table.add_column("principal variation")
    for c in candidates:
        table.add_row(c.name, str(c.visits), f"{c.value:+.3f}", f"{c.prior:.4f}",
                      " ".join(c.principal_variation_names))
    return table


def cmd_genmove(args: argparse.Namespace) -> int:
    console = _console()
    make_client = _client_factory(console, args)
    if make_client is None:
        return EXIT_USAGE
    position = _position(console, args, args.moves)
    if position is None:
        return EXIT_USAGE
    r = _unary(console, make_client, lambda client: client.genmove(
        position,
        max_visits=args.visits,
        max_time_ms=args.time_ms,
        timeout=args.timeout,
        max_candidates=args.candidates,
        reuse_tree=not args.no_reuse,
    ))
    if r is None:
        return EXIT_RPC_ERROR
    color = "black" if r.color == 1 else "white"
    table = Table(title=f"{color} plays {r.name}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    table.add_row("move", f"{r.name} ({r.move.x}, {r.move.y})")
    table.add_row("visits", f"{r.visits} of {r.total_visits}")
    table.add_row("reused visits", str(r.reused_visits))
    table.add_row("prior", f"{r.prior:.4f}")
    table.add_row("value", f"{r.value:+.3f} (for {color})")
    table.add_row("principal variation", " ".join(r.principal_variation_names))
    table.add_row("model", f"{r.model_name} v{r.model_version}")
    console.print(table)
    if r.candidates:
        console.print(_candidates_table(r.candidates, title="candidates"))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    console = _console()
    make_client = _client_factory(console, args)
    if make_client is None:
        return EXIT_USAGE
    position = _position(console, args, args.moves)
    if position is None:
        return EXIT_USAGE
    candidates = args.candidates or (PNG_CANDIDATES if args.png else 0)
    last = None
    with make_client() as client:
        call = client.analyze(
            position,
            max_visits=args.visits,
            max_time_ms=args.time_ms,
            report_every_visits=args.every,
            max_candidates=candidates,
            timeout=args.timeout,
            reuse_tree=not args.no_reuse,
        )
        try:
            for r in call:
                last = r
                color = "black" if r.to_move == 1 else "white"
                best = r.candidates[0] if r.candidates else None
                head = "final" if r.final else "visits"
                console.print(
                    f"{head} {r.total_visits} (reused {r.reused_visits}) {r.elapsed_ms:.0f} ms  "
                    f"value {r.value:+.3f} for {color}  best {best.name if best else '-'}  "
                    f"[{r.model_name} v{r.model_version}]"
                )
                if r.final or args.tables:
                    console.print(_candidates_table(r.candidates))
        except KeyboardInterrupt:
            call.cancel()  # stops the search on the server
            console.print("cancelled")
            return 130
        except grpc.RpcError as exc:
            return _rpc_error(console, exc)
    if args.png and last is not None:
        size = position.board_size or get_game(args.game).default_size
        visits = [0.0] * get_game(args.game).policy_size(size)
        for c in last.candidates:
            visits[size * size if c.move.is_pass else c.move.y * size + c.move.x] = c.visits
        color = "black" if last.to_move == 1 else "white"
        _write_png(console, args, position, visits,
                   f"visits of {last.total_visits} ({last.model_name} v{last.model_version}), "
                   f"{color} to move", percent=False)
    return 0


def add_search_commands(subparsers: Subparsers) -> dict[str, Handler]:
    """Register `predict`, `genmove` and `analyze` (clients of the search service)."""
    p = subparsers.add_parser("predict", help="policy network's move probabilities")
    _add_position_args(p)
    p.add_argument("--top-k", type=COUNT, default=5, help="moves to list (default 5)")
    p.add_argument(
        "-p",
        "--position",
        action="append",
        metavar="MOVES",
        help='another position, quoted: "h8 h9 i8" (repeatable; all go in one request)',
    )
    p.add_argument("--timeout", type=DEADLINE_S, default=10.0, help="seconds (default 10)")
    p.add_argument("--png", type=output_file(".png"), default=None,
                   help="also draw the board with the policy as a heatmap into this PNG")

    g = subparsers.add_parser(
        "genmove",
        help="a move chosen by tree search",
        epilog="With neither --visits nor --time-ms the server searches 200 visits.",
    )
    _add_position_args(g)
    g.add_argument("--visits", type=COUNT, default=0, help="simulations (0: limited by time)")
    g.add_argument("--time-ms", type=COUNT, default=0, help="time budget (0: limited by visits)")
    g.add_argument(
        "--timeout",
        type=DEADLINE_S,
        default=None,
        help="seconds (default: time budget + 10 s, or 300 s)",
    )
    _add_search_args(g)

    a = subparsers.add_parser(
        "analyze",
        help="stream a search's best moves as it runs",
        epilog="Prints a line every --every visits and the candidates at the end; Ctrl-C "
        "cancels the search on the server.",
    )
    _add_position_args(a)
    a.add_argument("--visits", type=COUNT, default=0, help="simulations (0: limited by time)")
    a.add_argument("--time-ms", type=COUNT, default=0, help="time budget (0: limited by visits)")
    a.add_argument("--every", type=COUNT, default=0, help="visits between reports (0: 100)")
    a.add_argument("--tables", action="store_true", help="print the candidates at every report")
    a.add_argument("--png", type=output_file(".png"), default=None,
                   help="draw the final position with the candidates' visits as a heatmap "
                        f"into this PNG (with --candidates 0: the {PNG_CANDIDATES} most visited)")
    a.add_argument(
        "--timeout",
        type=DEADLINE_S,
        default=None,
        help="seconds (default: time budget + 10 s, or 300 s)",
    )
    _add_search_args(a)
    return {"predict": cmd_predict, "genmove": cmd_genmove, "analyze": cmd_analyze}


def _add_search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--candidates", type=COUNT, default=0, help="candidate moves to list (0: 5)")
    p.add_argument("--no-reuse", action="store_true", help="do not reuse the tree of an "
                   "earlier request of this game")


# ---------------------------------------------------------------------- infer
def record_stones(path: Path, index: int, moves: int | None) -> tuple[Game, int, list[int],
                                                                       list[int]]:
    """(game, board size, black points, white points) of the position of game `index` of a
    record file (.sgf: Go, .rif: Gomoku) after its first `moves` moves (None: all): the stones
    on its board. ValueError naming what could not be read."""
    game = game_of_source(str(path))
    if game is None:
        raise ValueError(f"{path}: not a record file of any game (.sgf, .rif)")
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if str(path).lower().endswith(RIF_SUFFIXES):
        records = _readable(path, list(read_rif(path)), RifGame, index)
        played = list(records[index].moves[:moves])
        return game, game.default_size, played[0::2], played[1::2]
    record = _readable(path, list(read_sgf(path)), SgfGame, index)[index]
    cut = dataclasses.replace(record, moves=record.moves[:moves])
    replayed = go_replay(cut, keep_states=False)
    if replayed.error:
        raise ValueError(f"{path}: game {index}: {replayed.error}")
    black, white = stones_from_board(replayed.states[-1].board)
    return game, record.size, black, white


def _readable(path: Path, records: list, kind: type, index: int) -> list:
    """The records of `kind` read from `path`; ValueError when there is no game `index`,
    with the first rejection's reason (a file that is not a record at all says why)."""
    games = [r for r in records if isinstance(r, kind)]
    if index < len(games):
        return games
    rejected = next((r for r in records if not isinstance(r, kind)), None)
    why = f"; {rejected.reason}" if rejected is not None else ""
    raise ValueError(f"{path}: no game {index} ({len(games)} readable{why})")


def write_inferred(game: Game, path: Path, size: int, rule: str | None,
                   reply: search_pb2.InferSequenceResponse) -> Path:
    """The inferred order as a record file of the format `path`'s suffix names (the game's
    `written_formats`), each move's probability as its comment."""
    points = [game.parse_move(m.name, size) for m in reply.moves]
    comments = [f"p={m.probability:.4g}" for m in reply.moves]
    summary = (f"Move order inferred by {reply.model_name} v{reply.model_version}: geometric "
               f"mean {reply.geometric_mean:.4g} (greedy {reply.greedy_geometric_mean:.4g})")
    return game.write_record(path, points, size, rule=rule, comments=comments, summary=summary)


def _order_table(moves: Sequence) -> Table:
    table = Table()
    table.add_column("#", justify="right")
    table.add_column("colour")
    table.add_column("move")
    table.add_column("probability", justify="right")
    for i, m in enumerate(moves, 1):
        colour = search_pb2.Color.Name(m.color).removeprefix("COLOR_").lower()
        table.add_row(str(i), colour, m.name, f"{m.probability:.4f}")
    return table


def cmd_infer(args: argparse.Namespace) -> int:
    console = _console()
    make_client = _client_factory(console, args)
    if make_client is None:
        return EXIT_USAGE
    if args.record:
        try:
            game, size, black, white = record_stones(args.record, args.game_index, args.moves)
        except (ValueError, OSError, EOFError) as exc:  # OSError, EOFError: a broken .gz
            _error(str(exc))
            return EXIT_USAGE
        black_stones: list = [game.move_name(p, size) for p in black]
        white_stones: list = [game.move_name(p, size) for p in white]
    else:
        game = get_game(args.game)
        size = args.size or game.default_size
        black_stones, white_stones = args.black, args.white
    if args.out and args.out.suffix.lower() not in game.written_formats:
        _error(f"--out {args.out}: {game.title} games are written as "
               f"{', '.join(game.written_formats)}")
        return EXIT_USAGE
    rule = 0 if args.rule is None else proto_rule(args.rule)
    try:
        reply = _unary(console, make_client, lambda client: client.infer_sequence(
            black_stones, white_stones, game=game, rule=rule, board_size=size,
            iterations=args.iterations, restarts=args.restarts, seed=args.seed,
            max_time_ms=args.time_ms, neighbour=args.neighbour, init=args.init,
            timeout=args.timeout, tempering=args.tempering, polish=args.polish))
    except CoordinateError as exc:
        _error(str(exc))
        return EXIT_USAGE
    if reply is None:
        return EXIT_RPC_ERROR
    console.print(_order_table(reply.moves))
    console.print(" ".join(m.name for m in reply.moves))
    console.print(
        f"geometric mean {reply.geometric_mean:.4f} (greedy {reply.greedy_geometric_mean:.4f});"
        f" restarts {reply.restarts_min:.4f}..{reply.restarts_max:.4f} "
        f"(std {reply.restarts_std:.4f}); {reply.iterations} iterations per restart"
        f"{', stopped by the time budget' if reply.stopped_early else ''}; "
        f"{reply.evaluator_calls} calls, {reply.boards} boards; model {reply.model_name} "
        f"v{reply.model_version}")
    if args.out:
        write_inferred(game, args.out, size, args.rule, reply)
        console.print(f"wrote {args.out}")
    return 0


class _RenamedTo(argparse.Action):
    """An option's old name, still accepted (scripts written for it keep working) with a
    note on stderr naming the new one, the option that shares its `dest`."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        new = "--" + self.dest.replace("_", "-")
        print(f"{parser.prog}: note: {option_string} is deprecated; use {new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_infer_command(subparsers: Subparsers) -> dict[str, Handler]:
    """Register `infer` (InferSequence: the likeliest order of a position's stones)."""
    p = subparsers.add_parser(
        "infer",
        help="the most likely order in which a position's stones were played",
        epilog="The stones come from --black/--white (names in the game's notation) or from "
        "a record (--record: .sgf Go, .rif Gomoku; its final position, or after --moves). "
        "Unset budgets are the paper's recipe (5 restarts, 5000 * (stones/20)^2 iterations), "
        "within the server's limits.")
    p.add_argument("--target", default=SEARCH_TARGET, help="search service host:port")
    p.add_argument("--game", choices=[g.name for g in registered_games()],
                   default=default_game().name,
                   help="the game of --black/--white (default %(default)s)")
    p.add_argument("--rule", choices=[r.value for r in Rule], default=None,
                   help="Gomoku's rule (default: freestyle)")
    p.add_argument("--size", type=COUNT, default=0,
                   help="board size of --black/--white (0: the game's default)")
    p.add_argument("--board-size", type=COUNT, dest="size", action=_RenamedTo,
                   help=argparse.SUPPRESS)
    p.add_argument("--black", nargs="*", default=[], metavar="POINT", help="black stones")
    p.add_argument("--white", nargs="*", default=[], metavar="POINT", help="white stones")
    p.add_argument("--record", type=Path, default=None, help="a .sgf or .rif record file")
    p.add_argument("--game-index", type=COUNT, default=0, help="which game of --record (0)")
    p.add_argument("--moves", type=COUNT, default=None,
                   help="the position after this many moves of --record (default: all)")
    p.add_argument("--iterations", type=COUNT, default=0, help="per restart (0: the paper's)")
    p.add_argument("--restarts", type=COUNT, default=0, help="0: 5")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--time-ms", type=COUNT, default=0,
                   help="time budget (0: the server's limit); the best order so far is kept")
    p.add_argument("--neighbour", choices=NEIGHBOURS, default="", help="default: mix")
    p.add_argument("--init", choices=INITS, default="", help="default: greedy")
    p.add_argument("--tempering", action="store_true",
                   help="restarts as parallel-tempering chains (beyond the paper)")
    p.add_argument("--polish", action="store_true",
                   help="end with a descent over every swp2/mov2 neighbour (beyond the paper)")
    p.add_argument("--timeout", type=DEADLINE_S, default=None,
                   help="seconds (default: time budget + 10 s)")
    p.add_argument("--out", type=output_file(), default=None,
                   help="write the inferred game: .sgf (any game) or .rif (Gomoku)")
    auth.add_client_arguments(p)
    return {"infer": cmd_infer}


REGISTRARS: list[Registrar] = [
    add_search_commands,
    add_process_commands,
    add_infer_command,
    add_rollout_commands,
    add_play_command,
    add_gtp_command,
    add_analysis_engine_command,
    add_match_commands,
    add_selfplay_command,
    add_quantize_command,
]


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = argparse.ArgumentParser(prog="movepred", description="Gomoku/Go move prediction")
    parser.add_argument("--version", action="version", version=f"movepred {app_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands: dict[str, Handler] = {}
    for register in REGISTRARS:
        commands.update(register(subparsers))
    return parser, commands


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = build_parser()
    args = parser.parse_args(argv)
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
