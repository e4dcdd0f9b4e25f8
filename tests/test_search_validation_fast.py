"""The fast Gomoku path of `validation.position_to_state` (`gomoku_game._placed_without_five`:
moves placed without replaying them when no five can have been made) gives exactly the state,
or the error, of the replay."""

from __future__ import annotations

import random

import pytest

from services.api.movepred.v1 import search_pb2
from services.games.gomoku import game as gomoku_game
from services.search import validation

RULES = [search_pb2.RULE_UNSPECIFIED, search_pb2.RULE_FREESTYLE, search_pb2.RULE_STANDARD,
         search_pb2.RULE_RENJU]


def _outcome(position: search_pb2.Position) -> tuple:
    try:
        s = validation.position_to_state(position)
    except validation.InvalidRequest as exc:
        return ("error", type(exc).__name__, str(exc))
    return ("state", s.board.dtype, s.board.tobytes(), s.moves, s.winner, s.to_move, s.rule)


def _random_position(rng: random.Random) -> search_pb2.Position:
    def point() -> search_pb2.Point:
        if rng.random() < 0.003:
            return search_pb2.Point(is_pass=True)
        return search_pb2.Point(x=rng.randrange(-1 if rng.random() < 0.01 else 0, 15),
                                y=rng.randrange(15))

    moves = [point() for _ in range(rng.choice([0, 1, 4, 9, 20, 40, 80]))]
    setup = [search_pb2.Point(x=rng.randrange(15), y=rng.randrange(15))
             for _ in range(rng.choice([0, 0, 4]))]
    return search_pb2.Position(rule=rng.choice(RULES), moves=moves, setup_black=setup)


def test_fast_path_matches_the_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    positions = [_random_position(rng) for _ in range(600)]
    # a five made by the last move, and a five built on set-up stones: the replay decides
    five = [(7, 7), (0, 0), (8, 7), (0, 1), (9, 7), (0, 2), (10, 7), (0, 3), (11, 7)]
    positions.append(search_pb2.Position(moves=[search_pb2.Point(x=x, y=y) for x, y in five]))
    positions.append(search_pb2.Position(
        setup_black=[search_pb2.Point(x=x, y=3) for x in range(4)],
        moves=[search_pb2.Point(x=4, y=3), search_pb2.Point(x=9, y=9)]))
    fast = [_outcome(p) for p in positions]
    monkeypatch.setattr(gomoku_game, "_placed_without_five", lambda *args: None)
    slow = [_outcome(p) for p in positions]
    assert fast == slow
    assert fast[-2][0] == "state" and fast[-2][4] != 0  # black won with its fifth stone
    assert fast[-1][0] == "error" and "game ended" in fast[-1][2]
    kinds = {o[0] for o in fast}
    assert kinds == {"state", "error"}
