"""The record codecs import no game, so the values they share with the games are written twice:
these tests check that both copies agree, and that each game's records come from the codecs."""

from __future__ import annotations

from services.games import base
from services.games.go import game as go_game
from services.games.go import rules as go
from services.games.gomoku import rules as gomoku
from services.games.registry import get_game
from services.records import sgf, sgf_writer


def test_the_reader_colours_are_the_games_cell_values() -> None:
    assert (sgf.BLACK, sgf.WHITE) == (base.BLACK, base.WHITE) == (go.BLACK, go.WHITE)


def test_the_gomoku_defaults_are_the_games() -> None:
    assert tuple(rule.value for rule in gomoku.Rule) == sgf_writer.GOMOKU_RULES
    assert gomoku.Rule(sgf_writer.GOMOKU_RULES[0]) is gomoku.Rule.FREESTYLE  # the default rule
    assert sgf_writer.GOMOKU_SIZE == gomoku.DEFAULT_SIZE


def test_the_go_defaults_are_the_games() -> None:
    assert sgf_writer.GO_SIZE == go_game.GO_SIZE == sgf.DEFAULT_SIZE
    assert sgf_writer.GO_KOMI == go_game.DEFAULT_KOMI


def test_a_go_record_reads_back() -> None:
    size = 9
    moves = [go_game.parse_vertex(v, size) for v in ("E5", "C3", "pass", "G7")]
    text = get_game("go").record_text(".sgf", [size * size if m is None else m for m in moves],
                                      size, comments=["first"])
    (game,) = sgf.read_sgf(text, source="go.sgf")
    assert isinstance(game, sgf.SgfGame), game
    assert game.size == size and game.komi == sgf_writer.GO_KOMI
    assert game.moves == ((sgf.BLACK, moves[0]), (sgf.WHITE, moves[1]), (sgf.BLACK, None),
                          (sgf.WHITE, moves[3]))


def test_a_gomoku_rule_is_written_by_its_name() -> None:
    text = sgf_writer.game_to_sgf([112], rule=gomoku.Rule.RENJU, date="2024-01-02")
    assert "RU[renju]" in text
    assert "RU[standard]" in sgf_writer.game_to_sgf([112], rule="Standard", date="2024-01-02")
