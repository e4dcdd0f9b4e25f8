"""Renju's forbidden points in the fast rollouts (services/games/gomoku/rollout.py): Black never
plays a double-three, double-four or overline in a renju rollout, even where the rollout
policy likes it best; freestyle rollouts from the same boards do play it."""

from __future__ import annotations

import numpy as np

from services.games.base import BLACK, WHITE
from services.games.gomoku import renju, renju_compiled
from services.games.registry import get_game
from services.games.rollout import RolloutWeights

GOMOKU = get_game("gomoku")
SIZE = 15


def board_from(rows: list[str]) -> np.ndarray:
    """A 15x15 board from text rows (the first row is y = 0; X black, O white, . empty)."""
    board = np.zeros((SIZE, SIZE), np.int8)
    for y, row in enumerate(rows):
        for x, c in enumerate(row):
            board[y, x] = {"X": BLACK, "O": WHITE}.get(c, 0)
    return board


def point(x: int, y: int) -> int:
    return y * SIZE + x


# Black to move (four stones each). At x=7, y=7 Black makes two open threes (the row and the
# column): a double-three, forbidden under renju.
DOUBLE_THREE = board_from([
    "O.............O",
    "...............",
    "...............",
    "...............",
    "...............",
    ".......X.......",
    ".......X.......",
    ".....XX........",
    "...............",
    "...............",
    "...............",
    "...............",
    "...............",
    "...............",
    "O.............O",
])
FORBIDDEN = point(7, 7)

# Black to move; White's four on the file x=7 (y 8..11, Black at y=12) is completed only at
# x=7, y=7, which is Black's double-three there (the row y=7 and the diagonal): under renju
# Black cannot block it.
FORBIDDEN_BLOCK = board_from([
    "O..............",
    "...............",
    "...............",
    "...............",
    "...............",
    ".....X.........",
    "......X........",
    ".....XX........",
    ".......O.......",
    ".......O.......",
    ".......O.......",
    ".......O.......",
    ".......X.......",
    "...............",
    "...............",
])

# Black to move, its stones spread so that threes and fours can cross later on.
SCATTERED = board_from([
    "O.............O",
    "...............",
    "...............",
    "...............",
    "....X...X......",
    "...............",
    "......X.X......",
    "...............",
    "....X...X......",
    "...............",
    "...............",
    "...............",
    "..............O",
    "...............",
    "O.O...........O",
])


def line_lover(weight: float = 5.0, k: int = 5) -> RolloutWeights:
    """A policy that likes the points with many of the mover's stones on their row and file
    within two: its favourite on `DOUBLE_THREE` is the forbidden point."""
    kernel = np.zeros((3, k, k), np.float32)
    r = k // 2
    for d in (-2, -1, 1, 2):
        kernel[0, r, r + d] = weight
        kernel[0, r + d, r] = weight
    return RolloutWeights(kernel, 0.0, config="line_lover")


def random_weights(seed: int, k: int = 5) -> RolloutWeights:
    """Random weights that lean towards the mover's own stones (dense black shapes: many
    forbidden points on the way)."""
    rng = np.random.default_rng(seed)
    kernel = rng.normal(0, 0.5, (3, k, k)).astype(np.float32)
    kernel[0] += 1.0
    return RolloutWeights(kernel, 0.0)


def test_the_fixture_is_what_it_says() -> None:
    assert renju.is_forbidden(DOUBLE_THREE, 7, 7) == "double-three"
    assert renju.is_forbidden(FORBIDDEN_BLOCK, 7, 7) == "double-three"
    cells = GOMOKU.rollouts("renju").leaf_cells(DOUBLE_THREE[None])[0]
    logits = line_lover().logits(cells, SIZE)[0]
    empty = np.flatnonzero(cells == 0)
    assert empty[np.argmax(logits[empty])] == FORBIDDEN
    assert logits[FORBIDDEN] - np.sort(logits[empty])[-2] >= 10  # by far the favourite


def test_renju_rollouts_never_play_the_favourite_forbidden_point() -> None:
    w = line_lover()
    free, renju_rollouts = GOMOKU.rollouts("freestyle"), GOMOKU.rollouts("renju")
    free_first = [free.first_game(DOUBLE_THREE, w, seed=s)[0][0] for s in range(30)]
    renju_first = [renju_rollouts.first_game(DOUBLE_THREE, w, seed=s)[0][0] for s in range(30)]
    assert free_first.count(FORBIDDEN) >= 25  # what the policy plays where it may
    assert FORBIDDEN not in renju_first
    assert all(DOUBLE_THREE.flat[m] == 0 for m in renju_first)


def _forbidden_black_moves(moves: list[int], start: np.ndarray) -> int:
    """How many of a rollout's moves from `start` (Black to move) were forbidden for Black
    (by the interpreted rules, `renju.is_forbidden`)."""
    board = start.copy()
    count = 0
    for i, m in enumerate(moves):
        y, x = divmod(m, SIZE)
        assert board[y, x] == 0, "a rollout move on an occupied point"
        if i % 2 == 0 and renju.is_forbidden(board, x, y) is not None:
            count += 1
        board[y, x] = BLACK if i % 2 == 0 else WHITE
    return count


def test_no_black_move_of_a_renju_rollout_is_forbidden() -> None:
    starts = [DOUBLE_THREE, SCATTERED]
    free, renju_rollouts = GOMOKU.rollouts("freestyle"), GOMOKU.rollouts("renju")
    free_forbidden = renju_forbidden = 0
    for start in starts:
        assert (start == BLACK).sum() == (start == WHITE).sum()  # Black to move
        for seed in range(40):
            w = random_weights(seed)
            free_forbidden += _forbidden_black_moves(free.first_game(start, w, seed=seed)[0],
                                                     start)
            renju_forbidden += _forbidden_black_moves(
                renju_rollouts.first_game(start, w, seed=seed)[0], start)
    assert free_forbidden > 0  # the positions and policies do lead Black to forbidden points
    assert renju_forbidden == 0


def test_a_four_blocked_only_on_a_forbidden_point_wins_for_white() -> None:
    w = line_lover(1.0)
    boards = np.repeat(FORBIDDEN_BLOCK[None], 16, axis=0)
    assert GOMOKU.rollouts("renju").play(boards, w, seed=2).tolist() == [-1.0] * 16
    moves, _, _ = GOMOKU.rollouts("freestyle").first_game(FORBIDDEN_BLOCK, w, seed=2)
    assert moves[0] == point(7, 7)  # where Black may, it blocks


def test_the_one_point_check_agrees_with_the_board_check() -> None:
    rng = np.random.default_rng(5)
    w = SIZE + 2 * renju.PAD
    line = np.empty(11, np.int8)
    found = 0
    for _ in range(60):
        board = rng.choice([0, BLACK, WHITE], size=SIZE * SIZE, p=[0.6, 0.25, 0.15]
                           ).astype(np.int8)
        reasons = np.zeros(SIZE * SIZE, np.int8)
        renju_compiled.forbidden_reasons(board, SIZE, reasons)
        padded = renju_compiled.padded(board, SIZE)
        for p in np.flatnonzero(board == 0):
            y, x = divmod(int(p), SIZE)
            got = renju_compiled.forbidden_point(padded, w, (y + renju.PAD) * w + x
                                                 + renju.PAD, line)
            assert got == reasons[p], (p, got, reasons[p])
        found += int((reasons != 0).sum())
    assert found > 20
