"""A population's fitness: each candidate weight vector plays `games` games (40, the paper's)
against the greedy player, colours alternated (the network is black in its even games), and
scores the mean outcome, +1 a win and -1 a loss: -1 never wins, +1 always wins. There are no
draws (`services.games.capture_batch`: the last empty point always captures).

All the population's games are played as one batch by the engine's rule kernels
(`services.games.capture_batch`: `play`, `greedy_moves`, `network_moves`): at every ply one
network call scores the boards of every candidate whose turn it is, each board with its own
candidate's weights (`scores_per_board` of `services.models.mdrnn`), and one call moves the
greedy player on the others. The loop is `capture_batch.play_games`' with a candidate per game:
a population of one plays exactly the games `play_games` plays with the same generator.

The network sees the board from the side to move (`planes`): own stones, opponent stones.
"""

from __future__ import annotations

import numpy as np
import torch

from services.games.capture_batch import (
    BLACK,
    CAPTURED,
    GOES_ON,
    WHITE,
    empty_boards,
    greedy_moves,
    network_colours,
    network_moves,
    play,
    tie_uniforms,
)

GAMES = 40  # games per fitness evaluation (the paper's)


def planes(boards: np.ndarray, to_move: np.ndarray | int) -> torch.Tensor:
    """Engine boards int8 [B, S, S] (0 empty, 1 black, 2 white) and the side to move -> the
    networks' input float [B, 2, S, S]: plane 0 the mover's stones, plane 1 the opponent's."""
    b = torch.as_tensor(np.asarray(boards, dtype=np.int8))
    mover = torch.as_tensor(np.broadcast_to(np.asarray(to_move, dtype=np.int8),
                                            (b.shape[0],)).copy())[:, None, None]
    opponent = (BLACK + WHITE) - mover
    return torch.stack([b == mover, (b == opponent) & (b != 0)], dim=1).float()


def network_policy(net: torch.nn.Module):
    """`net` (planes -> scores [B, S, S]) as an engine policy: (boards, to_move) -> scores."""
    def policy(boards: np.ndarray, to_move: np.ndarray) -> torch.Tensor:
        with torch.no_grad():
            return net(planes(boards, to_move))
    return policy


def population_fitness(net: torch.nn.Module, population: np.ndarray, size: int,
                       rng: np.random.Generator, games: int = GAMES) -> np.ndarray:
    """Fitness in [-1, 1] of each flat weight vector of `population` [n, d] for the
    architecture of `net` (an MDRNN or MDLSTM; its own weights are not used): the mean
    outcome of `games` games against the greedy player on `size` boards. Candidate i draws
    its tie-break numbers `tie_uniforms(rng, size, games)` in turn."""
    return populations_fitness(net, [population], size, [rng], [games])[0]


def populations_fitness(net: torch.nn.Module, populations: list[np.ndarray], size: int,
                        rngs: list[np.random.Generator], games: list[int]) -> list[np.ndarray]:
    """`population_fitness` of several populations (several runs' generations) played as one
    batch: population j's candidates draw their tie-break numbers from `rngs[j]` and play
    `games[j]` games each, so each population gets exactly the fitnesses it would get alone
    (a board's moves depend only on that board: the network's per-board weights are applied
    with broadcast multiply-adds, the rules board by board), in one network call per ply for
    all of them. Why: a PGPE generation is 80 games, too few for a batch to pay for the
    per-call cost; ten runs in lock step make it 800."""
    if not (len(populations) == len(rngs) == len(games)):
        raise ValueError(f"{len(populations)} populations, {len(rngs)} generators and "
                         f"{len(games)} game counts: one of each per population")
    if any(g < 1 for g in games):
        raise ValueError(f"games per candidate must be >= 1: {games}")
    populations = [np.asarray(p, dtype=np.float64).reshape(len(p), -1) for p in populations]
    counts = [len(p) for p in populations]
    if sum(counts) == 0:
        return [np.zeros(0) for _ in populations]
    per_candidate = np.concatenate([np.full(n, g, np.int64)
                                    for n, g in zip(counts, games, strict=True)])
    owner = np.repeat(np.arange(len(per_candidate)), per_candidate)
    colour_of = np.concatenate([network_colours(int(g)) for g in per_candidate])
    uniforms = np.concatenate([tie_uniforms(rng, size, g)
                               for rng, n, g in zip(rngs, counts, games, strict=True)
                               for _ in range(n)], axis=1)
    weights = torch.as_tensor(np.concatenate(populations), dtype=torch.float32)
    n_games = len(owner)
    cells = empty_boards(n_games, size)
    outcomes = np.zeros(n_games, np.int8)
    active = np.ones(n_games, bool)
    colour = BLACK
    for ply in range(size * size):
        live = np.flatnonzero(active)
        if live.size == 0:
            break
        mine = colour_of[live] == colour
        net_rows, greedy_rows = live[mine], live[~mine]
        moves = []
        if net_rows.size:
            boards = cells[net_rows].reshape(-1, size, size)
            with torch.no_grad():
                scores = net.scores_per_board(planes(boards, colour),
                                              weights[torch.as_tensor(owner[net_rows])])
            moves.append(network_moves(cells, scores, net_rows))
        if greedy_rows.size:
            moves.append(greedy_moves(cells, colour, uniforms[ply, greedy_rows], greedy_rows))
        rows = np.concatenate([net_rows, greedy_rows])
        result = play(cells, colour, np.concatenate(moves), rows)
        ended = result != GOES_ON
        done = rows[ended]
        mover_won = result[ended] == CAPTURED
        outcomes[done] = np.where(mover_won == (colour_of[done] == colour), 1, -1)
        active[done] = False
        colour = WHITE if colour == BLACK else BLACK
    if active.any():
        raise RuntimeError(f"{int(active.sum())} games undecided after {size * size} plies")
    per_owner = np.bincount(owner, weights=outcomes, minlength=len(per_candidate))
    fitness = per_owner / per_candidate
    return [part.astype(np.float64) for part in np.split(fitness, np.cumsum(counts)[:-1])]
