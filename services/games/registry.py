"""The registered games, by name: where every service finds a `Game` (services.games.base).

The built-in games (Gomoku/Renju, Go, the Capture Game) register themselves when their modules
are imported; `get_game` and `registered_games` import them on first use. Another game
registers itself with `register(game)` when its module is imported (a test game does so from
`tests/`).
"""

from __future__ import annotations

import importlib
import threading

from services.api.movepred.v1 import search_pb2
from services.games.base import Game, Position
from services.quoting import shown

# The modules of the built-in games, imported on first lookup (each calls `register`).
BUILTIN_MODULES = ("services.games.gomoku.game", "services.games.go.game",
                   "services.games.capture.game")
# What a request's GAME_UNSPECIFIED means (the API's documented default).
DEFAULT_PROTO_GAME = search_pb2.GAME_GOMOKU

_games: dict[str, Game] = {}
_by_proto: dict[int, Game] = {}  # API `Game` value -> game
_lock = threading.Lock()
_loaded = False


class UnknownGame(KeyError):
    """No game is registered under that name (or API value)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown game"


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        for module in BUILTIN_MODULES:
            importlib.import_module(module)
        _loaded = True


def register(game: Game) -> Game:
    """Register `game` under `game.name` (once; the same object again is a no-op)."""
    with _lock:
        known = _games.get(game.name)
        if known is not None and known is not game:
            raise ValueError(f"a game named {game.name!r} is registered already")
        _games[game.name] = game
        if game.proto_game:
            _by_proto[game.proto_game] = game
    return game


def get_game(name: str) -> Game:
    """The game registered as `name`; UnknownGame names the registered ones."""
    _load_builtin()
    try:
        return _games[name]
    except KeyError:
        raise UnknownGame(f"unknown game {shown(name)} (registered: "
                          f"{', '.join(sorted(_games))})") from None


def registered_games() -> tuple[Game, ...]:
    """Every registered game, in registration order (the built-in ones first)."""
    _load_builtin()
    return tuple(_games.values())


def game_for_proto(value: int) -> Game:
    """The game of an API `Game` value (GAME_UNSPECIFIED: `DEFAULT_PROTO_GAME`)."""
    _load_builtin()
    game = _by_proto.get(value or DEFAULT_PROTO_GAME)
    if game is None:
        raise UnknownGame(f"unknown game {value}")
    return game


def game_of(state: Position) -> Game:
    """The game a position belongs to."""
    return state.game


def model_of(model_name: str) -> tuple[Game, str] | None:
    """(game, input encoder) of the Triton model `model_name` by its name: a game's
    `Game.model_name(encoder)` (its default model for the basic input), or a side model of
    one (``<name>__candidate``); None when no game claims the name. What a model serves is
    its config's (`services.games.triton_config`); the name says which config to generate
    for a model that has none yet."""
    base = model_name.split("__", 1)[0]
    for game in registered_games():
        for encoder in game.encoder_names():
            if base == game.model_name(encoder):
                return game, encoder
    return None


def game_for_model(model_name: str) -> Game | None:
    """The game whose Triton model `model_name` is (`model_of`: its default model, that of
    another input encoder, or a side model of either); None when no game claims the name."""
    found = model_of(model_name)
    return found[0] if found is not None else None


def game_of_source(path: str) -> Game | None:
    """The game whose record files (`Game.record_formats`) `path`'s suffix names: the longest
    suffix that matches decides (a game may read `.ttt.sgf` files beside Go's `.sgf`)."""
    name = str(path).lower()
    matches = [(len(suffix), game) for game in registered_games()
               for suffix in game.record_formats if name.endswith(suffix)]
    return max(matches, key=lambda m: m[0])[1] if matches else None


def default_game() -> Game:
    """The game of a request or command that names none."""
    return game_for_proto(search_pb2.GAME_UNSPECIFIED)
