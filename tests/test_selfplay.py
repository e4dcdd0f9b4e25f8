"""The rule-based self-play player and the sample file it generated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.coords import parse_point
from services.games.gomoku.rules import BLACK, EMPTY, WHITE, GomokuState, Rule, board_from_ascii
from services.games.gomoku.selfplay import CENTER, choose_move, generate, main, play_game
from services.records import RifGame, read_rif, summarize

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample" / "selfplay.rif"


def pt(name: str) -> int:
    x, y = parse_point(name, 15)
    return y * 15 + x


def board(black: str, white: str) -> np.ndarray:
    b = np.zeros((15, 15), dtype=np.int8)
    for color, names in ((BLACK, black), (WHITE, white)):
        for n in names.split():
            b.flat[pt(n)] = color
    return b


def assert_legal(game: RifGame) -> None:
    final = GomokuState.from_moves(game.moves, rule=Rule.FREESTYLE)  # raises if illegal
    if game.bresult == 1.0:
        assert final.winner == BLACK and len(game.moves) % 2 == 1
    elif game.bresult == 0.0:
        assert final.winner == WHITE and len(game.moves) % 2 == 0
    else:
        assert game.bresult == 0.5 and final.winner == EMPTY and len(game.moves) == 225


def test_games_are_legal_and_end_at_the_first_five() -> None:
    games = generate(40, seed=0)
    for game in games:
        assert game.moves[0] == CENTER == pt("h8")
        assert_legal(game)  # from_moves refuses any move after a five
        assert game.rule == "freestyle" == Rule(game.rule).value


def test_deterministic_per_seed_and_per_game() -> None:
    assert generate(6, seed=3) == generate(6, seed=3)
    assert [g.moves for g in generate(6, seed=4)] != [g.moves for g in generate(6, seed=3)]
    assert generate(3, seed=0) == generate(8, seed=0)[:3]  # game i depends on (seed, i) only
    a, b = (play_game(np.random.default_rng(11)) for _ in range(2))
    assert a == b


def test_games_are_varied_and_long_enough() -> None:
    games = generate(60, seed=1)
    lengths = np.array([len(g.moves) for g in games])
    assert len({g.moves for g in games}) == 60
    assert len({g.moves[:3] for g in games}) >= 15  # openings differ
    assert 15 <= np.median(lengths) <= 60
    assert {g.bresult for g in games} >= {0.0, 1.0}


def test_max_moves_ends_in_a_draw() -> None:
    moves, result = play_game(np.random.default_rng(0), max_moves=6)
    assert len(moves) == 6 and result == 0.5


def test_takes_an_immediate_five_rather_than_blocking() -> None:
    # Black (to move) has d4-g4 closed by White's c4; White has an open four d10-g10.
    b = board("d4 e4 f4 g4 h12", "c4 d10 e10 f10 g10")
    for seed in range(10):
        assert choose_move(b, BLACK, np.random.default_rng(seed)) == pt("h4")


def test_blocks_a_four() -> None:
    closed = board("d4 h8 c12 m13", "e4 f4 g4 h4")
    open_four = board("h8 c12 m13 a15", "e4 f4 g4 h4")
    for seed in range(10):
        rng = np.random.default_rng(seed)
        assert choose_move(closed, BLACK, rng) == pt("i4")
        assert choose_move(open_four, BLACK, rng) in {pt("d4"), pt("i4")}


def test_blocks_a_diagonal_four_drawn_as_ascii() -> None:
    b = board_from_ascii(
        """
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . X . . . . . . . .
        . . . . . . . O . X . . . . .
        . . . . . . . . O . . . . . .
        . . . . . . . X . O . . . . .
        . . . . . . . . . . O . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        . . X . . . . . . . . . . . .
        . . . . . . . . . . . . . . .
        """
    )
    # White h9-k6 diagonal, g10 blocked by Black: the only completion is l5 (Black to move)
    assert choose_move(b, BLACK, np.random.default_rng(0)) == pt("l5")


def test_cli_writes_a_readable_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "sp.rif"
    main(["--games", "4", "--seed", "2", "--out", str(out)])
    items = list(read_rif(out))
    assert items == [
        RifGame(**{**g.__dict__, "source": "sp.rif"}) for g in generate(4, seed=2)
    ]
    assert "4 games" in capsys.readouterr().out


def test_committed_sample_is_valid_and_reproducible() -> None:
    if not SAMPLE.exists():
        pytest.skip(f"{SAMPLE} not generated; run python -m services.games.gomoku.selfplay")
    assert SAMPLE.stat().st_size < 300_000
    items = list(read_rif(SAMPLE))
    stats = summarize(items)
    assert (stats.read, stats.games, stats.rejected) == (300, 300, 0)
    for game in items:
        assert_legal(game)  # type: ignore[arg-type]
    fresh = generate(20, seed=0)  # the sample is `--games 300 --seed 0`
    assert [g.moves for g in items[:20]] == [g.moves for g in fresh]
