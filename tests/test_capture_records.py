"""Capture Game records: the SGF the game writes (`*.capture.sgf`) is what its replay reads.

Random legal games on every board size go through `record_text` and back through
`replay_source` (the ingest's path for a record file): one pair per move, each the canonical
image of the position the rules reached, with the result the rules gave. Each kind of
malformed record is quarantined with its own reason and the others in the file are kept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from services.games.base import BLACK, SourceResult
from services.games.canonical import canonicalize
from services.games.capture.game import CAPTURE
from services.games.capture.records import RECORD_SUFFIX
from services.games.registry import game_of_source


def random_game(size: int, rng: np.random.Generator) -> list[int]:
    """A game of random legal moves, played until the rules end it."""
    state, moves = CAPTURE.start(size), []
    while not state.is_over:
        move = int(rng.choice(np.flatnonzero(state.legal_mask())))
        moves.append(move)
        state = state.play(move)
    return moves


def replay(path: Path, **kw) -> tuple[SourceResult, pa.Table]:
    result = SourceResult(source=path.name)
    tables = list(CAPTURE.replay_source(path, result, **kw))
    assert tables  # at least one, even without a pair
    return result, pa.concat_tables(tables)


def test_the_records_suffix_names_the_game_and_plain_sgf_stays_go() -> None:
    assert game_of_source(f"games{RECORD_SUFFIX}") is CAPTURE
    assert game_of_source("games.sgf").name == "go"


@pytest.mark.parametrize("packed", [True, False])
def test_written_games_replay_to_one_pair_a_move_with_the_rules_result(
        tmp_path: Path, packed: bool) -> None:
    rng = np.random.default_rng(5)
    games = [(size, random_game(size, rng)) for size in CAPTURE.sizes for _ in range(3)]
    path = tmp_path / f"games{RECORD_SUFFIX}"
    path.write_text("".join(CAPTURE.record_text(RECORD_SUFFIX, moves, size)
                            for size, moves in games))
    result, table = replay(path, packed=packed)
    assert (result.read, result.ingested, result.quarantined) == (len(games), len(games), 0)
    assert table.num_rows == sum(len(m) for _, m in games)
    assert set(table["rule"].to_pylist()) == {""}
    for index, (size, moves) in enumerate(games):
        rows = table.filter(pc.equal(table["game_id"], f"{path.name}#{index}"))
        assert rows["ply"].to_pylist() == list(range(len(moves)))
        assert set(rows["board_size"].to_pylist()) == {size}
        state, boards = CAPTURE.start(size), []
        for move in moves:
            boards.append(state.board.reshape(-1).copy())
            state = state.play(move)
        canonical, canonical_moves, hashes = canonicalize(np.array(boards), np.array(moves),
                                                          size)
        stored = np.frombuffer(b"".join(rows["board"].to_pylist()), np.int8)
        assert np.array_equal(stored.reshape(len(moves), -1), canonical)
        assert rows["move"].to_pylist() == canonical_moves.tolist()
        assert rows["position_hash"].to_pylist() == hashes.tolist()
        winner_moves_first = state.winner == BLACK  # Black moves at the even plies
        expected = [float((ply % 2 == 0) == winner_moves_first) for ply in range(len(moves))]
        assert rows["result"].to_pylist() == expected


def test_malformed_records_are_quarantined_each_with_its_reason(tmp_path: Path) -> None:
    good = CAPTURE.record_text(RECORD_SUFFIX, random_game(5, np.random.default_rng(1)), 5)
    # b1 (black), b2 (white), a2, e5, c2, e4, b3: black captures b2 at move 7
    captured = ";B[be];W[bd];B[ad];W[ea];B[cd];W[eb];B[bc]"
    bad = {
        "rules 'Japanese' are not the Capture Game's": "(;GM[1]SZ[5]RU[Japanese];B[aa])",
        "board size 4: the Capture Game is played on sizes 5..9": "(;GM[1]SZ[4];B[aa])",
        "set-up stones (AB/AW)": "(;GM[1]SZ[5]AB[cc];B[aa])",
        "move 2 is a pass, which the Capture Game has not": "(;GM[1]SZ[5];B[aa];W[])",
        "move 2 is black's: the colours alternate from black": "(;GM[1]SZ[5];B[aa];B[bb])",
        "illegal move 2 (a5): occupied": "(;GM[1]SZ[5];B[aa];W[aa])",
        "move 8 (e1) comes after the game ended at move 7":
            f"(;GM[1]SZ[5]{captured};W[ee])",
        "RE[W+] names white, but black won by the rules": f"(;GM[1]SZ[5]RE[W+]{captured})",
        "not a Go game (GM[4])": "(;GM[4]SZ[5];B[aa])",
    }
    path = tmp_path / f"mixed{RECORD_SUFFIX}"
    path.write_text(good + "".join(bad.values()) + good)
    result, table = replay(path)
    assert (result.read, result.ingested, result.quarantined) == (len(bad) + 2, 2, len(bad))
    reasons = [q["reason"] for q in result.quarantine]
    for reason, expected in zip(reasons, bad, strict=True):
        assert reason.startswith(expected), (reason, expected)
    assert set(table["game_id"].to_pylist()) == {f"{path.name}#0",
                                                 f"{path.name}#{len(bad) + 1}"}


def test_results_come_from_re_for_a_game_the_rules_did_not_end(tmp_path: Path) -> None:
    path = tmp_path / f"open{RECORD_SUFFIX}"
    path.write_text("(;GM[1]SZ[5]RE[W+Resign];B[cc];W[dd])(;GM[1]SZ[5];B[cc];W[dd])"
                    "(;GM[1]SZ[5]RU[capture];B[cc])")  # the rules' name in any case
    result, table = replay(path)
    assert result.ingested == 3 and table.num_rows == 5
    by_game: dict[str, list[float]] = {}
    for row in table.to_pylist():
        by_game.setdefault(row["game_id"], []).append(row["result"])
    assert by_game[f"{path.name}#0"] == [0.0, 1.0]  # W+Resign: black lost, white won
    assert all(np.isnan(r) for r in by_game[f"{path.name}#1"])  # no result: unknown


def test_a_dataset_keeps_one_board_size(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    path = tmp_path / f"sizes{RECORD_SUFFIX}"
    path.write_text("".join(CAPTURE.record_text(RECORD_SUFFIX, random_game(size, rng), size)
                            for size in (5, 7, 5)))
    result, table = replay(path, board_size=5)
    assert (result.ingested, result.quarantined) == (2, 1)
    assert result.quarantine[0]["reason"] == "board size 7 (this dataset holds 5x5 games)"
    assert set(table["board_size"].to_pylist()) == {5}
    empty = tmp_path / f"empty{RECORD_SUFFIX}"
    empty.write_text("")
    result, table = replay(empty, board_size=7)
    assert table.num_rows == 0 and "board" in table.column_names
