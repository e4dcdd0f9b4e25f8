"""SGF (FF[4]) records of Gomoku games, and `movepred play`: the service playing itself.

`game_to_sgf` writes one game: GM[4] (Gomoku/Renju), SZ, RU (our rule name: freestyle,
standard or renju; SGF defines no RU values for GM[4]), PB/PW, RE, DT, AP, then one node per
move, black first. Moves are repository points `y * size + x` (y from the *bottom*); SGF letters
give the column from the left and the row from the *top*, so a point is written as
`LETTERS[x] + LETTERS[size - 1 - y]` (the centre h8 of 15x15 is `hh`, a1 is `ao`).

Results follow the SGF convention: "B+" / "W+" (a winner; Gomoku has no score), "0" (draw,
the board filled up), "?" (unknown, e.g. the move limit ended a self-play game), or None for
no RE at all.

`movepred play --target HOST:PORT --visits N --out game.sgf` asks GenMove for both sides until
somebody makes five, the board is full or `--max-moves` is reached, and writes the game with
each move's search statistics as a comment.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.games.gomoku import BLACK, DEFAULT_SIZE, WHITE, GomokuState, Rule
from services.records.sgf_writer import APP_NAME, app_version, sgf_record

SGF_LETTERS = "abcdefghijklmnopqrstuvwxyz"
GOMOKU_GM = 4
DEFAULT_PLAY_VISITS = 200


def sgf_point(point: int, size: int = DEFAULT_SIZE) -> str:
    """Repository point (y from the bottom) -> SGF letters (column, row from the top)."""
    if not 0 <= point < size * size:
        raise ValueError(f"point {point} is off the {size}x{size} board")
    y, x = divmod(point, size)
    return SGF_LETTERS[x] + SGF_LETTERS[size - 1 - y]


def parse_sgf_point(value: str, size: int = DEFAULT_SIZE) -> int:
    """The inverse of `sgf_point`."""
    if len(value) != 2 or any(c not in SGF_LETTERS[:size] for c in value):
        raise ValueError(f"not a point on a {size}x{size} board: {value!r}")
    x, row = SGF_LETTERS.index(value[0]), SGF_LETTERS.index(value[1])
    return (size - 1 - row) * size + x


def result_of(state: GomokuState) -> str | None:
    """"B+" / "W+" once somebody made five, "0" for a full board, None while the game goes on."""
    if state.winner == BLACK:
        return "B+"
    if state.winner == WHITE:
        return "W+"
    if state.is_over:
        return "0"
    return None


def game_to_sgf(
    moves: Sequence[int],
    size: int = DEFAULT_SIZE,
    rule: Rule | str = Rule.FREESTYLE,
    black: str = APP_NAME,
    white: str = APP_NAME,
    result: str | None = None,
    comments: Mapping[int, str] | None = None,
    *,
    date: dt.date | str | None = None,
    game_comment: str | None = None,
    event: str | None = None,
) -> str:
    """One game as SGF text (ends with a newline).

    `moves` are points `y * size + x`, black first, alternating. `comments` maps a move's index
    in `moves` (0 = the first move) to the C[] of that move's node. `date` defaults to today
    (DT is YYYY-MM-DD). Raises ValueError for a point off the board or played twice, or a
    comment for a move that is not in `moves`; game rules (fives, renju) are not checked.
    """
    if not 1 <= size <= len(SGF_LETTERS):
        raise ValueError(f"board size {size} cannot be written as SGF")
    seen: set[int] = set()
    for i, p in enumerate(moves):
        if not 0 <= p < size * size:
            raise ValueError(f"moves[{i}]: point {p} is off the {size}x{size} board")
        if p in seen:
            raise ValueError(f"moves[{i}]: point {sgf_point(p, size)} is already occupied")
        seen.add(p)
    comments = dict(comments or {})
    bad = sorted(k for k in comments if not 0 <= k < len(moves))
    if bad:
        raise ValueError(f"comments for moves {bad} which are not in the game")
    rule_name = Rule(rule.lower() if isinstance(rule, str) else rule).value
    if date is None:
        date = dt.date.today()
    date_text = date.isoformat() if isinstance(date, dt.date) else str(date)

    root = [("FF", "4"), ("GM", str(GOMOKU_GM)), ("CA", "UTF-8"),
            ("AP", f"{APP_NAME}:{app_version()}"), ("SZ", str(size)), ("RU", rule_name),
            ("PB", black), ("PW", white), ("DT", date_text)]
    if event:
        root.append(("EV", event))
    if result is not None:
        root.append(("RE", result))
    if game_comment:
        root.append(("GC", game_comment))
    return sgf_record(root, [("B" if i % 2 == 0 else "W", sgf_point(p, size), comments.get(i))
                             for i, p in enumerate(moves)])


def write_sgf(path: str | Path, moves: Sequence[int], **kwargs: Any) -> Path:
    """Write `game_to_sgf(moves, **kwargs)` to `path` (UTF-8, parent folders created)."""
    return write_sgf_text(path, game_to_sgf(moves, **kwargs))


def write_sgf_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---- self-play through the search service ------------------------------------------------------
@dataclass
class PlayedGame:
    moves: list[int]
    rule: Rule
    result: str | None  # as in `result_of`; "?" when the move limit stopped the game
    comments: dict[int, str] = field(default_factory=dict)
    player: str = APP_NAME  # "movepred (gomoku_policy v1, 200 visits)"

    def to_sgf(self, **kwargs: Any) -> str:
        return game_to_sgf(
            self.moves,
            rule=self.rule,
            black=self.player,
            white=self.player,
            result=self.result,
            comments=self.comments,
            **kwargs,
        )


def play_game(
    client: Any,
    rule: Rule = Rule.FREESTYLE,
    max_visits: int = DEFAULT_PLAY_VISITS,
    max_time_ms: int = 0,
    max_moves: int = DEFAULT_SIZE * DEFAULT_SIZE,
    on_move: Callable[[int, Any], None] | None = None,
) -> PlayedGame:
    """The search service (a `SearchClient`) against itself, from the empty 15x15 board.

    Every move goes through `GomokuState.play`, so a move the rules forbid raises IllegalMove;
    gRPC failures raise `grpc.RpcError`. `on_move(index, response)` is called after each move.
    """
    state = GomokuState(size=DEFAULT_SIZE, rule=rule)
    comments: dict[int, str] = {}
    player = APP_NAME
    while not state.is_over and len(state.moves) < max_moves:
        history = [(p % state.size, p // state.size) for p in state.moves]
        r = client.genmove(history, rule=rule, max_visits=max_visits, max_time_ms=max_time_ms)
        state = state.play(r.move.y * state.size + r.move.x)
        index = len(state.moves) - 1
        comments[index] = (
            f"{r.name}: visits {r.visits}/{r.total_visits}, value {r.value:+.3f}, "
            f"prior {r.prior:.3f}, pv {' '.join(r.principal_variation_names)}"
        )
        if index == 0:
            plural = "" if max_visits == 1 else "s"
            budget = f"{max_visits} visit{plural}" if max_visits else f"{max_time_ms} ms"
            player = f"{APP_NAME} ({r.model_name} v{r.model_version}, {budget})"
        if on_move is not None:
            on_move(index, r)
    result = result_of(state)
    return PlayedGame(list(state.moves), rule, result if result else "?", comments, player)


def cmd_play(args: argparse.Namespace) -> int:
    import grpc

    from services.search import auth

    if args.visits < 0 or args.time_ms < 0 or args.max_moves < 1:
        print("error: --visits and --time-ms must be >= 0 and --max-moves >= 1")
        return 2
    rule = Rule(args.rule)

    def show(index: int, r: Any) -> None:
        if not args.quiet:
            color = "black" if index % 2 == 0 else "white"
            print(f"{index + 1:>3}. {color} {r.name} ({r.visits}/{r.total_visits} visits)")

    try:
        make_client = auth.search_client_factory(args)
    except auth.AuthConfigError as exc:
        print(f"error: {exc}")
        return 2
    try:
        with make_client() as client:
            game = play_game(
                client,
                rule=rule,
                max_visits=args.visits,
                max_time_ms=args.time_ms,
                max_moves=args.max_moves,
                on_move=show,
            )
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        print(f"error: {code.name if code else 'RPC failed'}: {details}")
        return 1
    path = write_sgf_text(args.out, game.to_sgf(event="movepred self-play"))
    print(f"wrote {path}: {len(game.moves)} moves, result {game.result}")
    return 0


def add_play_command(subparsers: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Register `movepred play` (a registrar for `services.cli.REGISTRARS`)."""
    p = subparsers.add_parser(
        "play",
        help="the search service plays itself; the game is written as SGF",
        epilog="With --visits 0 and --time-ms 0 the server searches 200 visits per move.",
    )
    from services.search.auth import add_client_arguments

    p.add_argument("--target", default="127.0.0.1:50051", help="search service host:port")
    add_client_arguments(p)  # TLS, token: the same options as every client
    p.add_argument("--rule", choices=[r.value for r in Rule], default=Rule.FREESTYLE.value)
    p.add_argument(
        "--visits", type=int, default=DEFAULT_PLAY_VISITS, help="visits per move (default 200)"
    )
    p.add_argument("--time-ms", type=int, default=0, help="time per move (0: visits only)")
    p.add_argument(
        "--max-moves",
        type=int,
        default=DEFAULT_SIZE * DEFAULT_SIZE,
        help="stop after this many moves (result '?'; default 225, the whole board)",
    )
    p.add_argument("--out", required=True, type=Path, help="SGF file to write")
    p.add_argument("--quiet", action="store_true", help="do not print every move")
    return {"play": cmd_play}
