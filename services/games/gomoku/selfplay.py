"""Rule-based Gomoku self-play, to make free, shippable sample games.

Why: RenjuNet games may not be committed, but the pipeline needs a sample `.rif` that anyone
can regenerate. The player is deliberately simple and deterministic for a seed: it takes an
immediate five, else blocks the opponent's, else scores every empty point near the stones by
the classic "five-window" count (each run of five cells holding only one colour is worth more
the more stones it holds, for attack and defence alike) and samples among the best few with a
temperature, so games differ from seed to seed. Freestyle rules: five or more wins.

Run: python -m services.games.gomoku.selfplay --games 300 --seed 0 --out data/sample/selfplay.rif
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from services.games.gomoku.rules import BLACK, EMPTY, Rule, five_windows, opponent
from services.records.rif import RifGame
from services.records.rif_writer import write_rif

SIZE = 15
CENTER = 7 * SIZE + 7  # h8
PLAYER = "rulebot"
SAMPLE_DATE = "2024-01-01"  # fixed, so the same seed writes the same bytes
# value of a five-window by how many stones of one colour it holds (and none of the other)
# (attack outweighs defence a little: with equal weights most games fill the board)
ATTACK = np.array([1.0, 10.0, 60.0, 400.0, 20000.0])
DEFENCE = np.array([1.0, 6.0, 30.0, 200.0, 10000.0])
TOP_K = 4
TEMPERATURE = 0.08  # relative to the best score; 0 would always play the best point
# the first plies are sampled more widely, so openings vary from game to game
OPENING_PLIES, OPENING_TOP_K, OPENING_TEMPERATURE = 4, 8, 0.6


WINDOWS = five_windows(SIZE)  # [W, 5] flat points of every five-in-a-row window
WINDOW_CELLS = WINDOWS.reshape(-1)
POINT_WINDOWS = [WINDOWS[(WINDOWS == p).any(axis=1)] for p in range(SIZE * SIZE)]  # noqa: SIM300
_ys, _xs = np.divmod(np.arange(SIZE * SIZE), SIZE)
# NEAR[p, q]: q is within two lines of p (Chebyshev distance 1 or 2)
_dist = np.maximum(np.abs(_ys[:, None] - _ys[None, :]), np.abs(_xs[:, None] - _xs[None, :]))
NEAR = (_dist >= 1) & (_dist <= 2)


def _five_points(cells: np.ndarray, mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Empty points that complete a window already holding four of `mine` and none of theirs."""
    hot = (mine == 4) & (theirs == 0)
    return np.unique(WINDOWS[hot][cells[hot] == EMPTY])


def _draw(flat: np.ndarray, color: int, top_k: int,
          temperature: float) -> tuple[np.ndarray, np.ndarray | None]:
    """What `color` draws its move from on `flat` (not empty, not full): the points and their
    probabilities, or the points and None for an urgent move (a five to make, else one to
    block), drawn uniformly."""
    cells = flat[WINDOWS]
    mine = (cells == color).sum(axis=1)
    theirs = (cells == opponent(color)).sum(axis=1)
    for urgent in (_five_points(cells, mine, theirs), _five_points(cells, theirs, mine)):
        if len(urgent):
            return urgent, None
    values = np.where(theirs == 0, ATTACK[mine], 0.0) + np.where(mine == 0, DEFENCE[theirs], 0.0)
    score = np.bincount(WINDOW_CELLS, weights=np.repeat(values, 5), minlength=flat.size)
    empty = flat == EMPTY
    candidates = np.flatnonzero(empty & NEAR[~empty].any(axis=0))
    if len(candidates) == 0:
        candidates = np.flatnonzero(empty)
    s = score[candidates]
    top = np.argsort(-s, kind="stable")[:top_k]
    best = s[top[0]]
    weights = np.exp((s[top] - best) / (temperature * best + 1e-9))
    return candidates[top], weights / weights.sum()


def choose_move(
    board: np.ndarray,
    color: int,
    rng: np.random.Generator,
    top_k: int = TOP_K,
    temperature: float = TEMPERATURE,
) -> int:
    """The point `color` plays on `board` (int8 [15, 15] or flat), which must have a free point."""
    flat = np.asarray(board).reshape(-1)
    if not flat.any():
        return CENTER
    points, p = _draw(flat, color, top_k, temperature)
    if p is None:
        return int(rng.choice(points))
    return int(points[rng.choice(len(points), p=p)])


def move_distribution(board: np.ndarray) -> np.ndarray:
    """The probability of each point [225] that the player plays on `board` (int8 [15, 15] or
    flat, not full): `choose_move`'s draw written out, with the side to move and the opening
    plies' wider sampling read off the stone count as `play_game` has them. Why: the player's
    own policy is the one a network trained on its games can at best learn, so an order
    inference run on it shows what the method can recover from these games at all."""
    flat = np.asarray(board).reshape(-1)
    out = np.zeros(flat.size)
    stones = int(np.count_nonzero(flat))
    if stones == 0:
        out[CENTER] = 1.0
        return out
    color = BLACK if stones % 2 == 0 else opponent(BLACK)
    top_k, temperature = ((OPENING_TOP_K, OPENING_TEMPERATURE) if stones < OPENING_PLIES
                          else (TOP_K, TEMPERATURE))
    points, p = _draw(flat, color, top_k, temperature)
    out[points] = 1.0 / len(points) if p is None else p
    return out


def makes_five(flat: np.ndarray, point: int, color: int) -> bool:
    return bool((flat[POINT_WINDOWS[point]] == color).all(axis=1).any())


def play_game(rng: np.random.Generator, max_moves: int = SIZE * SIZE) -> tuple[list[int], float]:
    """One game from the empty board: (moves, Black's score 1 / 0 / 0.5)."""
    flat = np.zeros(SIZE * SIZE, dtype=np.int8)
    moves: list[int] = []
    color = BLACK
    while len(moves) < max_moves and len(moves) < SIZE * SIZE:
        if len(moves) < OPENING_PLIES:
            point = choose_move(flat, color, rng, OPENING_TOP_K, OPENING_TEMPERATURE)
        else:
            point = choose_move(flat, color, rng)
        flat[point] = color
        moves.append(point)
        if makes_five(flat, point, color):
            return moves, 1.0 if color == BLACK else 0.0
        color = opponent(color)
    return moves, 0.5


def generate(n_games: int, seed: int, progress: bool = False) -> list[RifGame]:
    """`n_games` self-play games; game i depends only on (seed, i), not on n_games."""
    games = []
    for i in tqdm(range(n_games), desc="self-play", unit="game", disable=not progress):
        moves, bresult = play_game(np.random.default_rng([seed, i]))
        games.append(
            RifGame(
                source="selfplay",
                game_id=str(i + 1),
                moves=tuple(moves),
                rule=Rule.FREESTYLE.value,
                bresult=bresult,
                black=PLAYER,
                white=PLAYER,
                info=f"selfplay seed={seed} game={i}",
            )
        )
    return games


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("data/sample/selfplay.rif"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    games = generate(args.games, args.seed, progress=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    comment = (
        f"Synthetic freestyle Gomoku self-play games (services.games.gomoku.selfplay, "
        f"{args.games} games, seed {args.seed}); not RenjuNet data."
    )
    write_rif(games, args.out, date=SAMPLE_DATE, comment=comment)
    lengths = np.array([len(g.moves) for g in games])
    results = {r: sum(g.bresult == r for g in games) for r in (1.0, 0.0, 0.5)}
    print(
        f"{len(games)} games in {time.perf_counter() - start:.1f}s -> {args.out} "
        f"({args.out.stat().st_size / 1024:.0f} KiB); moves median {np.median(lengths):.0f} "
        f"(min {lengths.min()}, max {lengths.max()}); black/white/draw "
        f"{results[1.0]}/{results[0.0]}/{results[0.5]}"
    )


if __name__ == "__main__":
    main()

