"""`Game.write_record`: each game writes its records in the formats it names, and what it writes
reads back as the same game (moves, colours, rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.games.registry import get_game
from services.records.rif import RifGame, read_rif
from services.records.sgf import SgfGame, read_sgf

GOMOKU_MOVES = [112, 113, 97, 127, 82]  # h8 i8 h7 h9 h6: black first, alternating
GO_MOVES = [60, 20, 22, 58]  # on 9x9


def test_go_writes_sgf_that_reads_back_as_the_same_game(tmp_path: Path) -> None:
    go = get_game("go")
    path = go.write_record(tmp_path / "a" / "game.sgf", GO_MOVES, 9, comments=["p=0.5"] * 4,
                           summary="inferred")
    (game,) = [g for g in read_sgf(path) if isinstance(g, SgfGame)]
    assert game.size == 9
    assert [p for _, p in game.moves] == GO_MOVES
    assert [c for c, _ in game.moves] == [1, 2, 1, 2]
    assert "p=0.5" in path.read_text() and "inferred" in path.read_text()


@pytest.mark.parametrize("rule", [None, "renju"])
def test_gomoku_writes_rif_that_reads_back_with_its_rule(tmp_path: Path,
                                                        rule: str | None) -> None:
    gomoku = get_game("gomoku")
    path = gomoku.write_record(tmp_path / "game.rif", GOMOKU_MOVES, 15, rule=rule,
                               comments=["p=0.1"] * 5, summary="inferred -- order")
    (game,) = list(read_rif(path))
    assert isinstance(game, RifGame)
    assert list(game.moves) == GOMOKU_MOVES
    assert game.rule == (rule or "freestyle")
    assert "inferred" in path.read_text()  # the summary is the database comment


def test_gomoku_writes_sgf_with_its_rule(tmp_path: Path) -> None:
    gomoku = get_game("gomoku")
    path = gomoku.write_record(tmp_path / "game.sgf", GOMOKU_MOVES, 15, rule="renju")
    text = path.read_text()
    assert "GM[4]" in text and "RU[renju]" in text
    (game,) = [g for g in read_sgf(text.replace("GM[4]", "GM[1]"), source="x.sgf")
               if isinstance(g, SgfGame)]
    assert [p for _, p in game.moves] == GOMOKU_MOVES


@pytest.mark.parametrize(("game", "suffix"), [("go", ".rif"), ("gomoku", ".txt"),
                                              ("go", "")])
def test_a_format_the_game_does_not_write_is_refused_naming_the_ones_it_does(
        tmp_path: Path, game: str, suffix: str) -> None:
    g = get_game(game)
    with pytest.raises(ValueError, match=r"written as \.sgf"):
        g.write_record(tmp_path / f"game{suffix}", GO_MOVES, g.default_size)
    assert not list(tmp_path.iterdir())  # nothing written
