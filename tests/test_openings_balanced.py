"""Balanced opening suites: judged openings kept within a band of even, saved and loaded with
checks, and played by a match and a gate in place of random openings (`movepred openings`,
``--openings``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from services import cli
from services.games.registry import get_game
from services.match.gate import gate_by_match
from services.match.results import LOG_FILE, read_log
from services.match.runner import MatchConfig, openings
from services.selfplay.openings import (
    OpeningSuite,
    balanced_suite,
    distinct_openings,
    load_suite,
    opening_suite,
    play_opening,
    save_suite,
    search_judge,
)
from tests.match_nets import uniform_and_line_repo
from tests.test_selfplay import HashedEvaluator

torch.set_num_threads(1)
GOMOKU = get_game("gomoku")
GO = get_game("go")


def odd_is_lopsided(state) -> float:
    """A judge: black far ahead when black has one stone more (white to move), else even."""
    stones = np.asarray(state.board)
    return 0.9 if (stones == 1).sum() > (stones == 2).sum() else 0.05


def test_a_suite_is_the_prefix_of_the_distinct_openings() -> None:
    drawn = distinct_openings(GOMOKU, plies=(2, 5), radius=3, seed=4)
    first = [next(drawn) for _ in range(30)]
    assert opening_suite(GOMOKU, 30, plies=(2, 5), seed=4) == first
    assert opening_suite(GOMOKU, 10, plies=(2, 5), seed=4) == first[:10]


def test_balanced_suite_keeps_only_openings_within_the_band() -> None:
    seen = []
    suite = balanced_suite(GOMOKU, 12, odd_is_lopsided, band=0.2, plies=(2, 5), seed=1,
                           judge_name="parity", on_candidate=lambda j, k: seen.append((j, k)))
    assert len(suite.openings) == 12 and suite.values == (0.05,) * 12
    assert all(len(o) % 2 == 0 for o in suite.openings)  # the odd ones were lopsided
    drawn = opening_suite(GOMOKU, suite.candidates, plies=(2, 5), seed=1)
    assert list(suite.openings) == [o for o in drawn if len(o) % 2 == 0]
    assert seen[-1] == (suite.candidates, 12) and suite.candidates > 12
    assert suite.judge == "parity" and suite.band == 0.2 and suite.size == 15
    with pytest.raises(ValueError, match="only 0 of 40 judged openings"):
        balanced_suite(GOMOKU, 5, lambda s: 1.0, max_candidates=40)
    with pytest.raises(ValueError, match="band"):
        balanced_suite(GOMOKU, 5, odd_is_lopsided, band=0)


@pytest.mark.parametrize("value", [0.3, -0.6])
def test_the_search_judge_reads_the_root_value_from_blacks_side(value: float) -> None:
    judge = search_judge(HashedEvaluator(black_value=value), visits=8)
    black_to_move = play_opening(GOMOKU, (112, 113))
    white_to_move = play_opening(GOMOKU, (112, 113, 97))
    assert judge(black_to_move) == pytest.approx(value, abs=1e-4)
    assert judge(white_to_move) == pytest.approx(value, abs=1e-4)
    with pytest.raises(ValueError, match="visits"):
        search_judge(HashedEvaluator(), visits=0)


def test_a_saved_suite_loads_back_and_a_wrong_file_is_refused(tmp_path: Path) -> None:
    suite = balanced_suite(GOMOKU, 6, odd_is_lopsided, seed=2, judge_name="parity")
    path = tmp_path / "suite.json"
    save_suite(suite, path)
    assert load_suite(path, GOMOKU) == suite
    data = json.loads(path.read_text())
    cases = {
        "not an opening suite": {**data, "format": "other/1"},
        "not go 9": data,
        "holds no openings": {**data, "openings": []},
        "opening 1 is not playable": {**data, "openings": [
            data["openings"][0], {"moves": [112, 112]}]},
    }
    for words, content in cases.items():
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(content))
        with pytest.raises(ValueError, match=words):
            load_suite(bad, GO, 9) if words == "not go 9" else load_suite(bad, GOMOKU)
    (tmp_path / "torn.json").write_text('{"format": ')
    with pytest.raises(ValueError, match="cannot read"):
        load_suite(tmp_path / "torn.json", GOMOKU)
    five = [112, 0, 113, 1, 114, 2, 115, 3, 116]  # black's fifth stone ends the game
    (tmp_path / "over.json").write_text(json.dumps({**data, "openings": [{"moves": five}]}))
    with pytest.raises(ValueError, match="ends the game"):
        load_suite(tmp_path / "over.json", GOMOKU)


def test_a_match_config_plays_the_given_suite() -> None:
    suite = ((112, 113), (112, 97, 98), (96, 112))
    config = MatchConfig(pairs=2, suite=suite)
    assert openings(GOMOKU, config) == [(112, 113), (112, 97, 98)]
    with pytest.raises(ValueError, match="the suite holds 3"):
        MatchConfig(pairs=4, suite=suite)


def test_cli_builds_a_suite_and_a_match_plays_it(repo, tmp_path: Path, capsys) -> None:
    repository, uniform, lines = repo
    out = tmp_path / "suite.json"
    code = cli.main(["openings", "--judge", f"version:{lines}:visits=4", "--count", "3",
                     "--band", "1", "--repository", str(repository), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "3 openings within 1.0 of even of 3 judged" in printed
    suite = load_suite(out, GOMOKU)
    assert len(suite.openings) == 3 and all(abs(v) <= 1 for v in suite.values)
    code = cli.main(["match", "--engine", f"policy:{lines}", "--engine", f"policy:{uniform}",
                     "--openings", str(out), "--max-moves", "30", "--out", str(tmp_path / "m"),
                     "--repository", str(repository)])
    printed = capsys.readouterr().out
    assert code == 0 and "3 openings of" in printed
    entries = read_log(tmp_path / "m" / LOG_FILE)
    assert len(entries) == 6
    assert {tuple(e["opening"]) for e in entries} == set(suite.openings)
    score = sum(e["score"] for e in entries) / 6
    assert f"black's score over these players' 6 games: {score:.3f}" in printed


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, int, int]:
    return uniform_and_line_repo(tmp_path)


@pytest.mark.parametrize("argv, code, words", [
    (["openings", "--judge", "policy:1", "--out", "x.json"], 2, "searched version with visits="),
    (["openings", "--judge", "version:1:visits=2", "--count", "5", "--max-candidates", "3",
      "--out", "x.json"], 1, "of 3 judged openings are within 0.2 of even; 5 wanted"),
])
def test_cli_openings_errors_are_clear(repo, argv, code, words, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        sys.exit(cli.main([*argv, "--repository", str(repo[0])]))
    assert exited.value.code == code and words in capsys.readouterr().err
    assert not Path("x.json").exists()


def test_match_and_gate_refuse_a_suite_they_cannot_use(repo, tmp_path: Path, capsys) -> None:
    repository, uniform, lines = repo
    path = tmp_path / "go.json"
    save_suite(OpeningSuite("go", 9, ((40, 41),)), path)
    code = cli.main(["match", "--engine", f"policy:{lines}", "--engine", f"policy:{uniform}",
                     "--openings", str(path), "--repository", str(repository)])
    assert code == 2 and "holds go 9 openings, not gomoku 15" in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs 5 openings, the suite holds 1"):
        gate_by_match(repository, GOMOKU, lines, serving=uniform, max_games=10,
                      suite=((112, 113),), out_dir=tmp_path / "g")
