"""scripts/infer_rank_sets.py's level of a game from its players' ranks (BR / WR): the
paper's Pro sets take games of two professionals, its Ama sets games of two kyu or low-dan
(1d-3d) amateurs; a rank the script cannot read (a rating, none, 9段) puts a game in neither."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from services.records.sgf import read_sgf

ROOT = Path(__file__).resolve().parents[1]


def rank_sets() -> ModuleType:
    spec = importlib.util.spec_from_file_location("infer_rank_sets",
                                                  ROOT / "scripts" / "infer_rank_sets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("infer_rank_sets", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("rank", "kind"), [
    ("9p", "pro"), ("P9", "pro"), ("P8段", "pro"), ("9 Dan Professional", "pro"),
    ("1p", "pro"), ("14k*", "kyu"), ("8k", "kyu"), ("30k", "kyu"), ("1d", "low_dan"),
    ("3d", "low_dan"), ("2d*", "low_dan"), ("4d", "high_dan"), ("9d", "high_dan"),
    ("9段", "other"), ("", "other"), ("NR", "other"), ("2126", "other"), ("1799?", "other"),
])
def test_ranks_are_read_as_the_archives_write_them(rank: str, kind: str) -> None:
    assert rank_sets().rank_class(rank) == kind


@pytest.mark.parametrize(("black", "white", "level"), [
    ("9p", "P8段", "pro"), ("12k", "2d", "ama"), ("1d*", "15k", "ama"),
    ("9p", "9d", None), ("5d", "5d", None), ("", "8k", None), ("9段", "9段", None),
])
def test_a_game_is_pro_or_ama_only_when_both_players_are(black: str, white: str,
                                                         level: str | None) -> None:
    (game,) = read_sgf(f"(;GM[1]SZ[19]BR[{black}]WR[{white}];B[dd];W[pp])")
    assert rank_sets().level(game) == level


def test_sources_leave_out_every_set_game_and_every_copy_of_its_moves() -> None:
    """A network trained on `sources`' archives never saw a set game: its member is left
    out (with the member's other games), and so is another member holding the same moves."""
    from services.move_order.evaluation import RecordedGame

    sets = {"Pro20m": [{"game_id": "a.tar.gz:x/one.sgf#1", "moves": [1, 2, 3],
                        "held_out": False}],
            "Pro40m": [{"game_id": "a.tar.gz:x/one.sgf#1", "moves": [1, 2, 3, 4, 5],
                        "held_out": False}]}
    games = [RecordedGame("a.tar.gz:x/one.sgf#1", 19, (1, 2, 3, 4, 5, 6)),
             RecordedGame("a.tar.gz:x/one.sgf#0", 19, (7, 8, 9)),
             RecordedGame("b.tar.gz:y/copy.sgf#0", 19, (1, 2, 3, 9)),
             RecordedGame("b.tar.gz:y/other.sgf#0", 19, (1, 2, 4, 5)),
             RecordedGame("b.tar.gz:y/short.sgf#0", 19, (1, 2)),
             RecordedGame("b.tar.gz:y/small.sgf#0", 9, (1, 2, 3))]
    drop, counts = rank_sets().set_members(sets, games)
    assert drop == {"a.tar.gz": {"x/one.sgf"}, "b.tar.gz": {"y/copy.sgf"}}
    assert counts["a set game"] == 1
    assert counts["a copy of a set game's moves"] == 1
    assert counts["members left out"] == 2
