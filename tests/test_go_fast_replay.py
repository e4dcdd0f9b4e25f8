"""The compiled incremental Go replay (services/games/go/fast.py) against the reference pairs.

`game_pairs` (fast) must give byte-identical arrays to `game_pairs_reference`
(tests/go_reference.py: `replay` + `compact` per position): hand-made positions (ko,
snapback, multi-group capture, suicide) with their planes checked by hand, random games on
small boards (many captures, kos, illegal moves, passes, same colour twice), and the real
games of ../shared/data.
"""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from services.games.go.replay import GoPairs, canonicalize_packed, game_packed_pairs, game_pairs
from services.games.go.rules import BLACK, WHITE, GoState, board_from_ascii, replay
from services.records.sgf import SgfGame, read_archive
from tests.go_reference import game_pairs_reference

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ARCHIVES = (SHARED_DATA / "kgs" / "kgs-games-dev.tar.gz",
            SHARED_DATA / "go-other" / "go-games-other-dev.tar.gz")
GTP = "ABCDEFGHJKLMNOPQRSTUVWXYZ"


def pt(name: str, size: int = 5) -> int:
    """GTP name ('C3') -> flat index y * size + x."""
    return (int(name[1:]) - 1) * size + GTP.index(name[0].upper())


def record(board: str, moves: list[tuple[int, str]], winner: int | None = BLACK,
           size: int | None = None) -> SimpleNamespace:
    """A game record (what `game_pairs` reads) from an ASCII set-up and (colour, GTP) moves."""
    setup = board_from_ascii(board) if board.strip() else np.zeros((size, size), np.int8)
    s = setup.shape[0]
    flat = setup.reshape(-1)
    return SimpleNamespace(
        size=s,
        setup_black=tuple(int(p) for p in np.flatnonzero(flat == BLACK)),
        setup_white=tuple(int(p) for p in np.flatnonzero(flat == WHITE)),
        moves=tuple((c, None if n == "pass" else pt(n, s)) for c, n in moves),
        player_to_move=None, winner=winner, black_rank="3d", white_rank="1k",
    )


def assert_same(fast: GoPairs, ref: GoPairs, what: str = "") -> None:
    assert fast.error == ref.error, what
    for name in ("inputs", "moves", "to_move", "plies", "results"):
        a, b = getattr(fast, name), getattr(ref, name)
        assert a.dtype == b.dtype and a.shape == b.shape, (what, name)
        assert a.tobytes() == b.tobytes(), (what, name)
    assert fast.ranks == ref.ranks, what


def checked(game) -> GoPairs:
    """Fast pairs, after checking them against the reference (and the packed replay against
    them)."""
    fast = game_pairs(game)
    assert_same(fast, game_pairs_reference(game))
    assert_packed_same(game, fast)
    return fast


def assert_packed_same(game, fast: GoPairs, what: str = "") -> None:
    """`game_packed_pairs` (replay, canonical choice and packing in one pass) gives what
    `canonicalize_packed` makes of `game_pairs`' inputs, and the same other columns."""
    packed = game_packed_pairs(game)
    assert packed.error == fast.error, what
    boards, moves, hashes = canonicalize_packed(fast.inputs, fast.moves, fast.image_hashes())
    for name, a, b in (("boards", packed.boards, boards), ("moves", packed.moves, moves),
                       ("position_hash", packed.position_hash, hashes),
                       ("to_move", packed.to_move, fast.to_move),
                       ("plies", packed.plies, fast.plies),
                       ("results", packed.results, fast.results)):
        assert a.dtype == b.dtype and a.shape == b.shape, (what, name)
        assert a.tobytes() == b.tobytes(), (what, name)
    assert packed.ranks == fast.ranks and packed.size == game.size, what


def plane(pairs: GoPairs, i: int, channel: int, name: str) -> int:
    s = pairs.inputs.shape[-1]
    return int(pairs.inputs[i, channel].reshape(-1)[pt(name, s)])


# ---- hand-made positions -------------------------------------------------------------------
KO = """
.....
.XO..
XO.O.
.XO..
.....
"""


def test_ko_point_plane_and_retake_error() -> None:
    bad = checked(record(KO, [(BLACK, "C3"), (WHITE, "B3")]))
    assert bad.error == "move 2 (W B3): ko: B3 retakes the ko at once" and len(bad.moves) == 1
    p = checked(record(KO, [(BLACK, "C3"), (WHITE, "E1"), (BLACK, "E5"), (WHITE, "B3"),
                            (BLACK, "E4")]))
    assert p.error is None and len(p.moves) == 5
    assert plane(p, 1, 3, "B3") == 1 and p.inputs[1, 3].sum() == 1  # White faces the ko
    assert plane(p, 1, 1, "C3") == 1 and plane(p, 1, 0, "C3") == 2  # Black's stone, in atari
    assert p.inputs[2, 3].sum() == 0 and p.inputs[3, 3].sum() == 0  # the threat lifted it
    assert plane(p, 4, 3, "C3") == 1 and plane(p, 4, 0, "B3") == 2  # retaken the other way
    assert [plane(p, 4, 2, n) for n in ("B3", "E5", "E1", "C3")] == [1, 2, 3, 4]


def test_snapback_liberties() -> None:
    p = checked(record("""
        .....
        .....
        XXXX.
        OOOX.
        ..OX.
    """, [(BLACK, "B1"), (WHITE, "A1"), (BLACK, "B1"), (WHITE, "A1")]))
    assert p.error is None
    # before White A1: the B1 throw-in leaves White's four stones one liberty (A1), and B1 one
    assert [plane(p, 1, 1, n) for n in ("A2", "B2", "C2", "C1", "B1")] == [1, 1, 1, 1, 1]
    assert p.inputs[1, 3].sum() == 0  # B1 throw-in was no ko capture
    # before Black B1: A1 joined the chain; it has one liberty (B1); no ko
    assert [plane(p, 2, 1, n) for n in ("A1", "A2", "C1")] == [1, 1, 1]
    assert plane(p, 2, 0, "B1") == 0 and p.inputs[2, 3].sum() == 0
    # before White A1 again: five stones gone, Black's wall got its liberties back
    assert [plane(p, 3, 0, n) for n in ("A1", "A2", "B2", "C2", "C1")] == [0] * 5
    assert plane(p, 3, 1, "B1") == 3 and plane(p, 3, 1, "A3") == 4


def test_one_move_captures_two_groups() -> None:
    p = checked(record("""
        .....
        .....
        .X.X.
        XO.OX
        .X.X.
    """, [(BLACK, "C2"), (WHITE, "E5")]))
    assert p.error is None
    assert plane(p, 1, 0, "B2") == 0 and plane(p, 1, 0, "D2") == 0
    assert plane(p, 1, 1, "C2") == 4 and plane(p, 1, 1, "B1") == 3  # B1: A1, B2, C1
    assert p.inputs[1, 3].sum() == 0  # two stones: no ko


def test_suicide_ends_the_pairs_and_capturing_without_liberties_does_not() -> None:
    single = checked(record("""
        .....
        .....
        .....
        .O...
        O.O..
    """, [(BLACK, "E5"), (WHITE, "D5"), (BLACK, "B1")]))
    assert single.error == "move 3 (B B1): suicide: B1" and len(single.moves) == 2
    multi = checked(record("""
        .....
        .....
        OO...
        XXO..
        .OO..
    """, [(BLACK, "A1"), (WHITE, "A1")]))
    assert multi.error == "move 1 (B A1): suicide: A1" and len(multi.moves) == 0
    takes = checked(record("""
        .....
        .....
        OO...
        XXO..
        .OO..
    """, [(WHITE, "A1"), (BLACK, "B2"), (WHITE, "A2")]))
    assert takes.error is None and plane(takes, 1, 0, "A2") == plane(takes, 1, 0, "B2") == 0
    assert plane(takes, 1, 1, "A1") == 4 and plane(takes, 2, 1, "B2") == 1
    occupied = checked(record(KO, [(BLACK, "B4")]))
    assert occupied.error == "move 1 (B B4): occupied: B4"


def test_passes_resume_and_same_colour_twice() -> None:
    p = checked(record(KO, [(BLACK, "C3"), (WHITE, "pass"), (BLACK, "pass"), (WHITE, "D4"),
                            (WHITE, "E4"), (BLACK, "pass"), (BLACK, "E1")], winner=0))
    assert p.error is None and p.results.tolist() == [0.5] * 7
    assert plane(p, 4, 0, "D4") == 1 and plane(p, 4, 2, "D4") == 1  # W moves twice
    assert plane(p, 3, 2, "C3") == 3 and p.inputs[3, 2].sum() == 3  # passes take an age
    assert p.inputs[1, 3].sum() == 1 and p.inputs[2, 3].sum() == 0  # a pass lifts the ko


def test_random_small_board_games_match_the_reference() -> None:
    """Random games on 5x5..9x9: crowded boards, so many captures, kos and snapbacks; some
    end with a random (often illegal) move, some with passes, some with set-up stones."""
    rng = random.Random(7)
    kinds = {"ko": 0, "error": 0}
    for game_no in range(60):
        size = rng.choice((5, 6, 7, 9))
        state = GoState(size)
        setup_b, setup_w = [], []
        if game_no % 4 == 0:
            setup_b = rng.sample(range(size * size), 2)
            setup_w = [p for p in rng.sample(range(size * size), 3) if p not in setup_b]
            state = state.add_stones(setup_b, setup_w)
        moves: list[tuple[int, int | None]] = []
        color = BLACK
        for _ in range(rng.randint(10, 4 * size * size)):
            if rng.random() < 0.1:
                color = 3 - color  # the same colour moves twice
            if state.is_over:
                state = state.resume()  # as `replay` does
            legal = np.flatnonzero(state.legal_mask(color))
            point = None if rng.random() < 0.05 or not len(legal) else int(rng.choice(legal))
            moves.append((color, point))
            state = state.play(point, color)
            kinds["ko"] += state.ko is not None
            color = 3 - color
        if game_no % 3 == 0:
            moves.append((color, rng.randrange(size * size)))
        game = SimpleNamespace(size=size, setup_black=tuple(setup_b), setup_white=tuple(setup_w),
                               moves=tuple(moves), player_to_move=None, winner=None,
                               black_rank="", white_rank="")
        kinds["error"] += checked(game).error is not None
    assert kinds["ko"] > 10 and kinds["error"] > 5, kinds


def test_unsupported_size_and_bad_setup_give_the_reference_errors() -> None:
    big = SimpleNamespace(size=30, setup_black=(), setup_white=(), moves=((BLACK, 3),),
                          player_to_move=None, winner=None, black_rank="", white_rank="")
    assert checked(big).error == "board size 30 is not supported"
    clash = SimpleNamespace(size=5, setup_black=(0,), setup_white=(0,), moves=((BLACK, 3),),
                            player_to_move=None, winner=WHITE, black_rank="", white_rank="")
    assert checked(clash).error.startswith("set-up: occupied")
    off = SimpleNamespace(size=5, setup_black=(), setup_white=(), moves=((BLACK, 3), (WHITE, 25)),
                          player_to_move=None, winner=WHITE, black_rank="", white_rank="")
    assert checked(off).error == replay(off).error and len(game_pairs(off).moves) == 1


# ---- the real archives ----------------------------------------------------------------------
def _selection(games: list[SgfGame], fast: list[GoPairs]) -> list[int]:
    """Indices of the games to check against the (slow) reference: every 60th game, every
    game that is cut short, has a board other than 19x19, one colour moving twice or play
    after two passes, every 5th game with set-up stones (handicap), and the 40 games with the
    largest captures (stones removed by one move)."""
    picked = set(range(0, len(games), 60))
    setups: list[int] = []
    drops: list[tuple[int, int]] = []
    for i, (g, p) in enumerate(zip(games, fast, strict=True)):
        colors = [c for c, _ in g.moves]
        points = [q for _, q in g.moves]
        if (p.error is not None or g.size != 19
                or any(a == b for a, b in itertools.pairwise(colors))
                or any(points[j] is None and points[j + 1] is None
                       for j in range(len(points) - 2))):
            picked.add(i)
        if g.setup_black or g.setup_white:
            setups.append(i)
        n = len(p.moves)
        if n > 1:
            stones = (p.inputs[:, 0] != 0).reshape(n, -1).sum(1)
            drops.append((int((stones[:-1] + 1 - stones[1:]).max()), i))
    picked.update(setups[::5])
    picked.update(i for _, i in sorted(drops, reverse=True)[:40])
    return sorted(picked)


def test_real_games_match_the_reference() -> None:
    """Every game of both ../shared archives through the fast path (checked for shape and
    bookkeeping), and a deterministic subset against the reference (see `_selection`: ~550
    games, ~70k positions, ~13 CPU s; all 4,835 games, ~160 CPU s, would be too slow here;
    benchmarks/go_replay.py --reference-every 1 checks them all): identical inputs, moves,
    to_move, plies, results, ranks and error."""
    if not all(p.is_file() for p in ARCHIVES):
        pytest.skip(f"Go archives not found under {SHARED_DATA} (../shared absent)")
    games = [g for path in ARCHIVES for g in read_archive(path) if isinstance(g, SgfGame)]
    start = time.process_time()
    fast = [game_pairs(g) for g in games]
    fast_s = time.process_time() - start
    positions = sum(len(p.moves) for p in fast)
    for g, p in zip(games, fast, strict=True):
        n = len(p.moves)
        assert p.inputs.shape == (n, 4, g.size, g.size)
        assert n == len(g.moves) or p.error is not None
        assert_packed_same(g, p, g.source)
    picked = _selection(games, fast)
    start = time.process_time()
    checked_positions = 0
    for i in picked:
        ref = game_pairs_reference(games[i])
        assert_same(fast[i], ref, games[i].source)
        checked_positions += len(ref.moves)
    ref_s = time.process_time() - start
    errors = [p.error for p in fast if p.error]
    print(f"\nfast: {len(games)} games, {positions} positions, {positions / fast_s:,.0f}/s; "
          f"reference on {len(picked)} games ({checked_positions} positions): "
          f"{checked_positions / ref_s:,.0f}/s; errors {errors}")
    assert len(errors) >= 1 and checked_positions > 50_000
