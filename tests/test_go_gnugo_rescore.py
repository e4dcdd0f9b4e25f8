"""GNU Go's rescoring of Go match games: its verdict read right, and a real record scored."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from services.match.gtp_process import find_gnugo

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("go_gnugo_rescore",
                                              ROOT / "benchmarks" / "go_gnugo_rescore.py")
rescore = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rescore)


def test_gnugo_verdicts_are_read_with_their_margin() -> None:
    assert rescore.parse_score("41 white (O) move PASS\nWhite wins by 0.5 points\n") == (
        "white", 0.5)
    assert rescore.parse_score("Black wins by 1 point\n") == ("black", 1.0)
    assert rescore.parse_score("estimate\nBlack wins by 3.5 points\nJigo\n") == ("", 0.0)
    with pytest.raises(ValueError, match="no score"):
        rescore.parse_score("gnugo: cannot open file")


# A 9x9 game played to two passes: black walls off the five left columns (white's stone at b8
# inside them is dead), white holds a corner on the right; black wins by any count. The log
# entry below claims white won, so the two verdicts must disagree.
RECORD = ("(;GM[1]FF[4]SZ[9]KM[0.5]RU[Chinese]"
          ";B[ea];W[ii];B[eb];W[hi];B[ec];W[hh];B[ed];W[ih];B[ee];W[gi];B[ef];W[gh]"
          ";B[eg];W[ig];B[eh];W[hg];B[ei];W[gg];B[ba];W[bb];B[ab];W[];B[ca];W[];B[])")


@pytest.mark.integration
def test_a_match_folder_is_rescored_by_gnugo(tmp_path: Path, capsys) -> None:
    if find_gnugo() is None:
        pytest.skip("gnugo is not installed (apt-get install gnugo)")
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "g.sgf").write_text(RECORD)
    entry = {"id": "g", "black": "a", "white": "b", "opening": [], "winner": "white",
             "score": 0.0, "plies": 25, "record": "records/g.sgf"}
    (tmp_path / "games.jsonl").write_text(json.dumps(entry) + "\n")
    out = tmp_path / "out.json"
    assert rescore.main(["--match", str(tmp_path), "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["games"] == 1
    assert figures["rows"][0]["gnugo_winner"] == "black"  # black holds the larger area
    assert figures["agree"] == 0  # the entry's area winner was white
    assert "agree on 0 of 1 games" in capsys.readouterr().out


@pytest.mark.integration
def test_gnugo_as_a_match_engine_captures_dead_stones_before_it_passes(tmp_path: Path) -> None:
    """A match counts every stone left on the board as alive, so GNU Go must not pass with a
    dead stone of its opponent in its territory (it passes there without
    ``--capture-all-dead``)."""
    from services.games.registry import get_game
    from services.match.specs import open_engine, resolve

    if find_gnugo() is None:
        pytest.skip("gnugo is not installed (apt-get install gnugo)")
    go = get_game("go")
    # black walls column E, white column F; black's H5 is dead inside white's area
    state = go.start(9)
    for row in range(9):
        state = state.play(go.parse_move(f"E{row + 1}", 9))
        state = state.play(go.parse_move(f"F{row + 1}", 9))
    state = state.play(go.parse_move("H5", 9))
    engine = open_engine(resolve("gnugo:level=10", go, tmp_path), go)
    try:
        move = engine.genmove(state)
    finally:
        engine.close()
    assert move is not None and move != go.pass_move(9), "GNU Go passed over a dead stone"
    assert state.legal_mask()[move]
