"""The record codecs import no game, so the values they share with the games are written twice:
these tests check that both copies agree."""

from __future__ import annotations

from services.games import base, go
from services.records import sgf


def test_the_reader_colours_are_the_games_cell_values() -> None:
    assert (sgf.BLACK, sgf.WHITE) == (base.BLACK, base.WHITE) == (go.BLACK, go.WHITE)
