"""Renju games are replayed under renju rules: a forbidden black move ends a game's pairs.

On the real RenjuNet-derived games of ../shared (rule RIF): five of them end with black
playing a forbidden point (three double-threes, two double-fours; black lost each). Read as
freestyle those moves became training targets; under renju rules the pairs stop before
them, the games still count as ingested, and the cut is counted and noted.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from services.coords import parse_point
from services.dataset.build import deduplicate
from services.games.gomoku import renju
from services.games.gomoku.replay import FORBIDDEN_CUT, replay, replay_games, source_pairs
from services.games.gomoku.rules import (
    BLACK,
    CUT_NOTE,
    ForbiddenMove,
    GomokuState,
    IllegalMove,
    Rule,
    game_rule,
)
from services.records.rif import RifGame, read_rif
from services.records.rif_writer import write_rif
from tests.conftest import renjunet_games
from tests.reference_impls import deduplicate_reference, source_pairs_reference

S = 15
# the real games that end with a forbidden black move: game id -> (1-based ply, reason)
FORBIDDEN_IN_REAL_GAMES = {
    "196": (43, renju.DOUBLE_THREE), "258": (81, renju.DOUBLE_THREE),
    "397": (77, renju.DOUBLE_THREE), "463": (67, renju.DOUBLE_FOUR),
    "503": (57, renju.DOUBLE_FOUR),
}


def points(text: str) -> tuple[int, ...]:
    out = []
    for token in text.split():
        x, y = parse_point(token, S)
        out.append(y * S + x)
    return tuple(out)


def test_every_forbidden_move_of_the_real_games_is_found() -> None:
    games = renjunet_games()
    found = {g.game_id: renju.first_forbidden(g.moves) for g in games}
    found = {k: v for k, v in found.items() if v is not None}
    assert {k: (ply + 1, reason) for k, (ply, reason) in found.items()} == \
        FORBIDDEN_IN_REAL_GAMES
    by_id = {g.game_id: g for g in games}
    for game_id, (ply, reason) in found.items():  # the rules agree, move by move
        before = GomokuState.from_moves(by_id[game_id].moves[:ply], rule=Rule.RENJU)
        y, x = divmod(by_id[game_id].moves[ply], S)
        assert before.to_move == BLACK and renju.is_forbidden(before.board, x, y) == reason
        with pytest.raises(ForbiddenMove):
            before.play(by_id[game_id].moves[ply])


def test_real_renju_games_keep_their_pairs_up_to_the_forbidden_move(renjunet_rif: Path) -> None:
    result = source_pairs("renjunet", read_rif(renjunet_rif))
    games = renjunet_games()
    assert (result.read, result.ingested, result.quarantined, result.notes.get(CUT_NOTE, 0)) == \
        (len(games), len(games), 0, len(FORBIDDEN_IN_REAL_GAMES))
    notes = {q["record_id"]: q["reason"] for q in result.quarantine}
    assert set(notes) == set(FORBIDDEN_IN_REAL_GAMES)
    for game_id, (ply, reason) in FORBIDDEN_IN_REAL_GAMES.items():
        assert notes[game_id].startswith(FORBIDDEN_CUT)
        assert f"({reason}) at ply {ply}" in notes[game_id]
    plies: dict[str, list[int]] = {}
    for game_id, p in zip(result.pairs["game_id"].to_pylist(), result.pairs["ply"].to_pylist(),
                          strict=True):
        plies.setdefault(game_id, []).append(p)
    for g in games:
        # the forbidden move (0-based ply - 1) is no target: the game's rows stop before it
        kept = FORBIDDEN_IN_REAL_GAMES.get(g.game_id, (len(g.moves) + 1,))[0] - 1
        assert sorted(plies[g.game_id]) == list(range(kept)), g.game_id
    assert result.pairs.num_rows == sum(len(g.moves) for g in games) - len(FORBIDDEN_IN_REAL_GAMES)


def test_freestyle_games_keep_every_move(tmp_path: Path) -> None:
    """The same real games labelled freestyle: nothing cut (each forbidden move is a target)."""
    games = [dataclasses.replace(g, rule="freestyle") for g in renjunet_games()]
    path = write_rif(games, tmp_path / "freestyle.rif")
    result = source_pairs("freestyle", read_rif(path))
    assert (result.notes.get(CUT_NOTE, 0), result.quarantined, result.ingested) == \
        (0, 0, len(games))
    assert result.pairs.num_rows == sum(len(g.moves) for g in games)


def test_reference_pipeline_agrees_on_renju_games(renjunet_rif: Path, tmp_path: Path) -> None:
    """The simple per-game reference gives the same rows, notes and counts, with a record
    that goes on after its forbidden move and one refused after a win among them."""
    games = [g for g in read_rif(renjunet_rif) if isinstance(g, RifGame)]
    cut_game = next(g for g in games if g.game_id == "463")
    rest = [p for p in range(S * S) if p not in cut_game.moves][:6]
    longer = dataclasses.replace(cut_game, game_id="463-longer", moves=cut_game.moves + tuple(rest))
    path = write_rif([*games, longer], tmp_path / "more.rif")
    fast = source_pairs("more", read_rif(path))
    slow = source_pairs_reference("more", read_rif(path))
    assert fast.pairs.equals(slow.pairs)
    assert fast.quarantine == slow.quarantine
    assert (fast.read, fast.ingested, fast.notes) == (slow.read, slow.ingested, slow.notes) == \
        (len(games) + 1, len(games) + 1, {CUT_NOTE: len(FORBIDDEN_IN_REAL_GAMES) + 1})
    assert deduplicate([fast.pairs]).num_rows == deduplicate_reference([slow.pairs]).num_rows


def test_overline_is_cut_and_a_five_is_not() -> None:
    # black k7 k8 k9 k11 k12, then k10 makes six in a row: forbidden under renju
    white = points("a1 a3 a5 a7 a9 a11")
    overline = points("k7 k8 k9 k11 k12 k10")
    moves = tuple(m for pair in zip(overline, white, strict=True) for m in pair)[:-1]
    game = replay(moves, S, Rule.RENJU)
    assert game.error is None and len(game.moves) == 10
    assert game.cut is not None and "(overline) at ply 11" in game.cut
    assert replay(moves, S, Rule.FREESTYLE).cut is None  # a win under freestyle
    # exactly five instead (k12 never played): black wins, nothing forbidden
    five = tuple(m for pair in zip(points("k7 k8 k9 k11 k10"), white[:5], strict=True)
                 for m in pair)[:-1]
    assert replay(five, S, Rule.RENJU).cut is None
    assert renju.first_forbidden(five) is None


def test_batch_replay_with_a_rule_per_game_matches_one_by_one() -> None:
    real = [g.moves for g in renjunet_games()]
    rng = np.random.default_rng(3)
    games = []
    for i, g in enumerate(real[:200]):
        g = list(g)
        if i % 4 == 1:  # play on after the end
            g += [p for p in rng.permutation(S * S).tolist() if p not in g][:3]
        elif i % 4 == 2 and len(g) > 3:  # a repeated point somewhere
            g.insert(int(rng.integers(1, len(g))), g[0])
        games.append(tuple(g))
    games += [g for g in real if renju.first_forbidden(g) is not None]
    # white wins with five, then black plays on a forbidden point: refused, not cut
    won = points("a1 b1 a2 b2 a3 b3 a5 b4 a6 b5")
    games.append(won + points("a4"))  # a4: six in a row
    rules = [(Rule.RENJU, Rule.FREESTYLE, Rule.STANDARD)[i % 3] for i in range(len(games))]
    rules[-1] = Rule.RENJU
    batch = replay_games(games, S, rules)
    one = [replay(g, S, r) for g, r in zip(games, rules, strict=True)]
    assert batch.errors == [r.error for r in one]
    assert batch.cuts == [r.cut for r in one]
    assert batch.legal.tolist() == [len(r.moves) for r in one]
    assert np.array_equal(batch.moves, np.concatenate([r.moves for r in one]))
    assert sum(c is not None for c in batch.cuts) >= 2
    assert batch.errors[-1] is not None and "after the game ended" in batch.errors[-1]
    with pytest.raises(ValueError, match="rules for"):
        replay_games(games, S, rules[:-1])


def test_forbidden_move_is_an_illegal_move_with_its_reason() -> None:
    state = GomokuState.from_moves(points("h8 a1 i8 a3 j8 a5 l8 a7 m8 a9"), rule=Rule.RENJU)
    with pytest.raises(IllegalMove, match=r"k8 is forbidden for black \(overline\)") as info:
        state.play(points("k8")[0])
    assert isinstance(info.value, ForbiddenMove) and info.value.reason == renju.OVERLINE


@pytest.mark.parametrize(("name", "rule"), [
    ("RIF", Rule.RENJU), ("Yamaguchi", Rule.RENJU), ("Soosõrv-8", Rule.RENJU),
    ("Taraguchi-10", Rule.RENJU), ("Standard Renju", Rule.RENJU), ("25", Rule.RENJU),
    ("", Rule.RENJU), ("freestyle", Rule.FREESTYLE), ("Gomoku", Rule.FREESTYLE),
    ("Free-style Gomoku", Rule.FREESTYLE), ("Swap2", Rule.FREESTYLE),
    ("Standard Gomoku", Rule.STANDARD), ("standard", Rule.STANDARD),
])
def test_rule_of_a_record(name: str, rule: Rule) -> None:
    assert game_rule(name) is rule


def test_batch_scan_gives_what_the_per_game_scan_gives() -> None:
    """`first_forbidden_games` (numpy line patterns) against `first_forbidden` (one call per
    move) on the real games, the sample's freestyle games read as renju (many forbidden
    moves) and corrupted copies (off-board, repeated points, random fillings)."""
    from tests.conftest import SAMPLE_RIF

    real = [g.moves for g in renjunet_games()]
    sample = [g.moves for g in read_rif(SAMPLE_RIF) if isinstance(g, RifGame)]
    rng = np.random.default_rng(7)
    games: list[tuple[int, ...]] = []
    for i, g in enumerate(real + sample):
        g = list(g)
        if i % 6 == 1 and len(g) > 2:
            g.insert(int(rng.integers(1, len(g))), g[int(rng.integers(0, len(g) - 1))])
        elif i % 6 == 2:
            g.insert(int(rng.integers(0, len(g) + 1)), int(rng.choice([-1, S * S, 400])))
        elif i % 6 == 3:
            g = rng.permutation(S * S)[: int(rng.integers(0, S * S + 1))].tolist()
        games.append(tuple(g))
    games += [(), (112,)]
    batch = renju.first_forbidden_games(games)
    assert batch == [renju.first_forbidden(g) for g in games]
    assert sum(f is not None for f in batch) > 50
    assert {f[1] for f in batch if f is not None} == {
        renju.OVERLINE, renju.DOUBLE_FOUR, renju.DOUBLE_THREE}
