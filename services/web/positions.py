"""The web board's positions: a page's board as a search API `Position`, and a position as
the JSON the page draws.

The page keeps only what a player chose (game, size, rule, komi) and the moves as names in the
game's notation; every rule (legality, captures, forbidden points, the end of the game) is
the `Game`'s (`services.games.base`), asked here, so the page never judges a move itself and
a board can be drawn even when the search service is down.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from services.api.movepred.v1 import search_pb2
from services.coords import CoordinateError
from services.games.base import (
    COLOR_NAMES,
    Game,
    InvalidRequest,
    Position,
    check_size,
    served_sizes,
)
from services.games.registry import UnknownGame, get_game, registered_games
from services.records.sgf import SgfGame, read_sgf
from services.settings import MAX_INT32

MAX_SGF_CHARS = 1 << 20  # a loaded SGF text; a real game is a few kB
MAX_NAME_CHARS = 64  # a game's or rule's name
MAX_BOARD_SIZE = MAX_INT32  # the API's int32; the game says which sizes it is served on
# one under the longest game the search API takes (Go: 4 x 19 x 19 moves), so that a genmove's
# answer can always be appended and the board shown
MAX_BOARD_MOVES = 4 * 19 * 19 - 1
_NAME = re.compile(r"^([A-Za-z]+)(\d+)$")


class Board(BaseModel):
    """A page's position: the game by its registered name, board size (0: the game's
    default), rule (one of the game's `rule_names`, "" its default), komi (games with one;
    None: the game's default) and the moves in order, black first."""

    game: str = Field(max_length=MAX_NAME_CHARS)
    size: int = Field(0, ge=0, le=MAX_BOARD_SIZE)
    rule: str = Field("", max_length=MAX_NAME_CHARS)
    komi: float | None = None
    moves: list[str] = Field(default_factory=list, max_length=MAX_BOARD_MOVES)


def game_named(name: str) -> Game:
    """The registered game `name`; InvalidRequest naming `game` for an unknown one."""
    try:
        return get_game(name)
    except UnknownGame as exc:
        raise InvalidRequest("game", str(exc)) from None


def games_json() -> list[dict[str, Any]]:
    """What the page offers, from the registry: every game with its sizes, rules and komi."""
    return [{"name": g.name, "title": g.title, "sizes": list(g.sizes),
             "default_size": g.default_size, "rules": list(g.rule_names),
             "default_komi": g.default_komi, "has_pass": g.has_pass}
            for g in registered_games()]


def request_position(board: Board) -> tuple[Game, search_pb2.Position]:
    """The board's game and API position; InvalidRequest naming the field (`size`,
    `moves[3]`, `rule`, `komi`) the page got wrong."""
    game = game_named(board.game)
    position = search_pb2.Position(game=game.proto_game, game_name=game.name,
                                   board_size=board.size or game.default_size)
    size = check_size(game, position, "position")
    for i, name in enumerate(board.moves):
        try:
            position.moves.append(game.move_point(game.parse_move(name, size), size))
        except CoordinateError as exc:
            raise InvalidRequest(f"moves[{i}]", str(exc)) from None
    position.rule = game.proto_rule(board.rule)
    if board.komi is not None:
        if game.default_komi is None:
            raise InvalidRequest("komi", f"{game.title} has no komi")
        position.komi = board.komi
    return game, position


def replay(board: Board) -> tuple[Game, search_pb2.Position, Position]:
    """The board's game, API position and state, replayed by the game's rules (an illegal
    move is InvalidRequest naming it, as the service would)."""
    game, position = request_position(board)
    return game, position, game.position_from_request(position, "position")


def _labels(game: Game, size: int) -> tuple[list[str], list[str]]:
    """Column letters (left to right) and row numbers (bottom to top) of the game's
    notation, read off its move names."""
    columns, rows = [], []
    for i in range(size):
        column = _NAME.match(game.move_name(i, size))
        row = _NAME.match(game.move_name(i * size, size))
        columns.append(column.group(1) if column else str(i + 1))
        rows.append(row.group(2) if row else str(i + 1))
    return columns, rows


def state_json(game: Game, board: Board, state: Position) -> dict[str, Any]:
    """The position as the page draws it: cells (index y * size + x, y from the bottom; 0
    empty, 1 black, 2 white), the last move, whose turn, and the game's notes (forbidden
    points, captures, the result)."""
    size = state.size
    notes = game.board_notes(state)
    columns, rows = _labels(game, size)
    last = state.moves[-1] if state.moves else None
    return {
        "game": game.name, "title": game.title, "size": size, "rule": board.rule,
        # the page's komi as sent (the API's float32 would show 7.3 as 7.300000190734863)
        "komi": (None if game.default_komi is None
                 else board.komi if board.komi is not None else getattr(state, "komi", None)),
        "moves": [game.move_name(m, size) for m in state.moves],
        "cells": [int(c) for c in state.board.reshape(-1)],
        "last": last if last is not None and last < size * size else None,
        "to_move": COLOR_NAMES[state.to_move],
        "over": bool(state.is_over) or bool(notes.result),
        "result": notes.result,
        "forbidden": {str(p): reason for p, reason in notes.forbidden.items()},
        "captures": (None if notes.captures is None
                     else {COLOR_NAMES[c]: n for c, n in notes.captures.items()}),
        "has_pass": game.has_pass, "columns": columns, "rows": rows,
    }


def point_json(game: Game, point: search_pb2.Point, size: int) -> dict[str, Any]:
    """An API point as {name, index} (index None for a pass)."""
    if point.is_pass:
        return {"name": "pass", "index": None}
    index = point.y * size + point.x
    return {"name": game.move_name(index, size), "index": index}


def candidates_json(game: Game, candidates: Sequence[search_pb2.MoveCandidate],
                    size: int) -> list[dict[str, Any]]:
    """Search candidates: move, visits, Q (for the player making the move), prior, PV."""
    return [{**point_json(game, c.move, size), "visits": c.visits, "q": c.value,
             "prior": c.prior, "pv": list(c.principal_variation_names)} for c in candidates]


def save_sgf(game: Game, state: Position, board: Board) -> str:
    """The game so far as SGF, written by the game's own record writer."""
    return game.record_text(".sgf", list(state.moves), state.size, rule=board.rule or None,
                            summary="played on the movepred web board", komi=board.komi)


def load_sgf(text: str, preferred: str) -> Board:
    """The first game of an SGF text as a page's board. Its game is the first one that has
    the file's SGF game type (GM) and whose rules take the moves, `preferred` (the page's
    game) tried first. InvalidRequest naming `sgf` for what the board cannot show: a file it
    cannot read, set-up stones, colours that do not alternate from black; else the first
    candidate game's objection."""
    if len(text) > MAX_SGF_CHARS:
        raise InvalidRequest("sgf", f"over {MAX_SGF_CHARS} characters")
    record = next(iter(read_sgf(text, source="upload", game_types=None)), None)
    if not isinstance(record, SgfGame):
        raise InvalidRequest("sgf", record.reason if record is not None else "no game")
    games = sorted((g for g in registered_games() if g.sgf_game_type == record.game_type),
                   key=lambda g: g.name != preferred)
    if not games:
        raise InvalidRequest("sgf", f"no game here is played as SGF GM[{record.game_type}]")
    if record.setup_black or record.setup_white:
        raise InvalidRequest("sgf", "set-up stones (AB/AW, e.g. a handicap) are not shown "
                                    "on this board")
    for i, (color, _) in enumerate(record.moves):
        if color != (1 if i % 2 == 0 else 2):
            raise InvalidRequest("sgf", f"move {i + 1} is {COLOR_NAMES[color]}'s: the colours "
                                        "must alternate from black")
    objections: list[InvalidRequest] = []
    for game in games:
        try:
            return _record_board(game, record)
        except InvalidRequest as exc:
            if exc.field.endswith("komi"):  # the file's komi, whichever game takes its moves
                raise
            objections.append(exc)
    raise objections[0]


def _record_board(game: Game, record: SgfGame) -> Board:
    """`record` as a board of `game`, replayed by its rules (InvalidRequest if they refuse)."""
    if record.size not in game.sizes:  # before naming moves: the notation may not reach
        raise InvalidRequest("sgf", f"{game.title} is played on {served_sizes(game)}, the "
                                    f"file's board is {record.size}x{record.size}")
    names = []
    for i, (_, point) in enumerate(record.moves):
        if point is None and not game.has_pass:
            raise InvalidRequest("sgf", f"move {i + 1} is a pass, which {game.title} has not")
        names.append(game.move_name(record.size * record.size if point is None else point,
                                    record.size))
    rule = record.rules.lower() if record.rules.lower() in game.rule_names else ""
    komi = record.komi if game.default_komi is not None else None
    board = Board(game=game.name, size=record.size, rule=rule, komi=komi, moves=names)
    replay(board)  # the moves must be legal here too
    return board
