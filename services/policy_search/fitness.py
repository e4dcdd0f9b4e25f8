"""A population's fitness: each candidate weight vector plays `games` games (40, the paper's)
against the greedy player, colours alternated (the network is black in its even games), and
scores the mean outcome, +1 a win and -1 a loss: -1 never wins, +1 always wins. There are no
draws (`services.games.capture.batch`: the last empty point always captures).

All the population's games are played as one batch by the engine's rule kernels
(`services.games.capture.batch`: `play`, `greedy_moves`, `network_moves`): at every ply one
network call scores the boards of every candidate whose turn it is, each board with its own
candidate's weights (`scores_per_board` of `services.models.mdrnn`), and one call moves the
greedy player on the others. The loop is `capture_batch.play_games`' with a candidate per game:
a population of one plays exactly the games `play_games` plays with the same generator.

The network sees the board from the side to move (`planes`): own stones, opponent stones.

A weakened opponent (`random_share` > 0, for an opponent curriculum): at each of its moves,
with that probability, the greedy player plays a uniformly random empty point instead
(`capture_batch.random_moves`, picked by the move's tie-break number). Whether a move is random
is drawn per game and ply from the population's generator, after its tie-break numbers, and
only where the share is above 0, so a plain population's games are unchanged.

Common opponent draws (`shared` = k > 1): each run of k consecutive candidates of a population
(a whole generation: PGPE's symmetric pair mu + eps and mu - eps, CMA-ES's population) plays
against the same tie-break numbers, drawn once per run of k. Why: the networks move
deterministically, so two candidates that choose alike play identical games, and the
difference of their fitnesses, which is what PGPE steps on and what CMA-ES ranks by, comes
from the positions where they chose differently, not from the greedy player's coin (common
random numbers). With k = 1 (the default) every candidate draws its own, as before.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from services.games.capture.batch import (
    BLACK,
    CAPTURED,
    GOES_ON,
    WHITE,
    empty_boards,
    greedy_moves,
    network_colours,
    network_moves,
    play,
    random_moves,
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


GREEDY = -1  # a player index in `play_matches`: the greedy opponent


def populations_fitness(net: torch.nn.Module, populations: list[np.ndarray], size: int,
                        rngs: list[np.random.Generator], games: list[int]) -> list[np.ndarray]:
    """`population_fitness` of several populations (several runs' generations) played as one
    batch: population j's candidates draw their tie-break numbers from `rngs[j]` and play
    `games[j]` games each, so each population gets exactly the fitnesses it would get alone
    (a board's moves depend only on that board: the network's per-board weights are applied
    with broadcast multiply-adds, the rules board by board), in one network call per ply for
    all of them. Why: a PGPE generation is 80 games, too few for a batch to pay for the
    per-call cost; ten runs in lock step make it 800."""
    return [part.greedy for part in generation_fitness(net, populations, size, rngs, games)]


class GenerationFitness(NamedTuple):
    """One population's results in `generation_fitness`, per candidate."""

    greedy: np.ndarray  # fitness against the greedy player (mean outcome, the paper's)
    versus: np.ndarray | None  # mean outcome against the opponent networks (None: none)
    shaped: np.ndarray | None  # `shaped_outcomes` against the greedy player (None: no shaping)


def shaped_outcomes(outcomes: np.ndarray, plies: np.ndarray, size: int,
                    weight: float, wins: bool = True) -> np.ndarray:
    """Outcomes (+1 won, -1 lost) with the game's length as a tie-break: outcome - weight *
    outcome * plies / size^2, so a loss counts more the later it came and (with `wins`) a win
    the sooner; without `wins` a win is +1 whatever its length. With 0 <= weight < 1 every
    win still scores above every loss. Why: early in a run every candidate loses every game,
    the plain fitness is -1 for all and PGPE gets no step (its slow phase); how long a
    candidate holds out still ranks them."""
    outcomes = np.asarray(outcomes, dtype=np.float64)
    shift = weight * outcomes * np.asarray(plies, dtype=np.float64) / (size * size)
    return outcomes - (shift if wins else np.where(outcomes < 0, shift, 0.0))


def generation_fitness(net: torch.nn.Module, populations: list[np.ndarray], size: int,
                       rngs: list[np.random.Generator], games: list[int],
                       opponents: list[np.ndarray | None] | None = None,
                       shaping: list[float] | None = None,
                       shaping_wins: list[bool] | None = None,
                       random_share: list[float] | None = None,
                       shared: list[int] | None = None,
                       ) -> list[GenerationFitness]:
    """Per population, a `GenerationFitness`: each candidate's fitness against the greedy
    player, as in `populations_fitness`; its mean outcome against the networks of
    `opponents[j]` [m, d], or None where it has none; and, where `shaping[j]` > 0, its mean
    `shaped_outcomes` against the greedy player with that weight (and `shaping_wins[j]`, True
    where not given). Where `random_share[j]` > 0 the greedy player of population j's games is
    weakened (the module docstring) and "against the greedy player" means against it. Where
    `shared[j]` > 1, runs of that many consecutive candidates share their opponent's draws
    (the module docstring). Against
    a network a
    candidate plays two games per opponent, one with each colour: the networks move
    deterministically, so more games would repeat these. Every game of every population is in
    one batch."""
    if not (len(populations) == len(rngs) == len(games)):
        raise ValueError(f"{len(populations)} populations, {len(rngs)} generators and "
                         f"{len(games)} game counts: one of each per population")
    if any(g < 1 for g in games):
        raise ValueError(f"games per candidate must be >= 1: {games}")
    opponents = opponents if opponents is not None else [None] * len(populations)
    if len(opponents) != len(populations):
        raise ValueError(f"{len(opponents)} opponent sets for {len(populations)} populations")
    shaping = shaping if shaping is not None else [0.0] * len(populations)
    if len(shaping) != len(populations) or any(not 0 <= w < 1 for w in shaping):
        raise ValueError(f"shaping needs one weight in [0, 1) per population: {shaping}")
    shaping_wins = shaping_wins if shaping_wins is not None else [True] * len(populations)
    random_share = random_share if random_share is not None else [0.0] * len(populations)
    if len(random_share) != len(populations) or any(not 0 <= e <= 1 for e in random_share):
        raise ValueError(f"random_share needs one share in [0, 1] per population: "
                         f"{random_share}")
    populations = [np.asarray(p, dtype=np.float64).reshape(len(p), -1) for p in populations]
    counts = [len(p) for p in populations]
    table = [*populations]
    first = np.cumsum([0, *counts])  # population j's candidates are table rows first[j]...
    shared = shared if shared is not None else [1] * len(populations)
    if len(shared) != len(populations) or any(
            k < 1 or n % k for k, n in zip(shared, (len(p) for p in populations), strict=True)):
        raise ValueError(f"shared needs one group size >= 1 per population that divides its "
                         f"candidates: {shared}")
    weakened = any(e > 0 for e in random_share)
    black, white, uniforms, randomised = [], [], [], []
    for j, (n, g, rng) in enumerate(zip(counts, games, rngs, strict=True)):
        colours = network_colours(g)
        for i in range(n):
            row = first[j] + i
            black.append(np.where(colours == BLACK, row, GREEDY))
            white.append(np.where(colours == WHITE, row, GREEDY))
            if i % shared[j] == 0:  # the first of its group draws; the others repeat it
                draws = tie_uniforms(rng, size, g)
                if weakened:  # plain batches draw nothing more and build no table
                    random_draws = (rng.random((size * size, g)) < random_share[j]
                                    if random_share[j] > 0
                                    else np.zeros((size * size, g), bool))
            uniforms.append(draws)
            if weakened:
                randomised.append(random_draws)
    greedy_games = sum(len(b) for b in black)
    n_candidates = int(first[-1])
    next_row = n_candidates
    versus_of = np.full(n_candidates, -1, np.int64)  # candidate -> its first versus game
    next_game = greedy_games
    for j, opp in enumerate(opponents):
        if opp is None or len(opp) == 0:
            continue
        opp = np.asarray(opp, dtype=np.float64).reshape(len(opp), -1)
        rows = np.arange(next_row, next_row + len(opp))
        table.append(opp)
        next_row += len(opp)
        for i in range(counts[j]):
            row = first[j] + i
            versus_of[row] = next_game
            black.append(np.concatenate([[row] * len(rows), rows]))
            white.append(np.concatenate([rows, [row] * len(rows)]))
            next_game += 2 * len(rows)
    black_all = np.concatenate(black) if black else np.zeros(0, np.int64)
    white_all = np.concatenate(white) if white else np.zeros(0, np.int64)
    if n_candidates == 0:
        return [GenerationFitness(np.zeros(0), None, None) for _ in populations]
    uniforms_all = np.concatenate(
        [*uniforms, np.zeros((size * size, len(black_all) - greedy_games))], axis=1)
    randomised_all = None
    if weakened:
        randomised_all = np.concatenate(
            [*randomised, np.zeros((size * size, len(black_all) - greedy_games), bool)], axis=1)
    black_won, plies = play_matches_timed(net, np.concatenate(table), black_all, white_all,
                                          size, uniforms_all, randomised_all)
    # the greedy games: candidate per game and the candidate's colour
    owner = np.where(black_all[:greedy_games] >= 0, black_all[:greedy_games],
                     white_all[:greedy_games])
    won = np.where(black_all[:greedy_games] >= 0, black_won[:greedy_games],
                   -black_won[:greedy_games])
    per_candidate = np.bincount(owner, minlength=n_candidates)
    greedy_fitness = np.bincount(owner, weights=won, minlength=n_candidates) / per_candidate
    out = []
    for j in range(len(populations)):
        rows = slice(first[j], first[j + 1])
        versus = None
        if opponents[j] is not None and len(opponents[j]):
            m = len(opponents[j])
            versus = np.array([np.concatenate([black_won[v:v + m], -black_won[v + m:v + 2 * m]])
                               .mean() for v in versus_of[rows]], dtype=np.float64)
        shaped = None
        if shaping[j] > 0:
            mine = (owner >= first[j]) & (owner < first[j + 1])
            values = shaped_outcomes(won[mine], plies[:greedy_games][mine], size, shaping[j],
                                     shaping_wins[j])
            shaped = (np.bincount(owner[mine] - first[j], weights=values,
                                  minlength=counts[j]) / per_candidate[rows])
        out.append(GenerationFitness(greedy_fitness[rows].astype(np.float64), versus, shaped))
    return out


def play_matches(net: torch.nn.Module, table: np.ndarray, black: np.ndarray, white: np.ndarray,
                 size: int, uniforms: np.ndarray) -> np.ndarray:
    """Games from the empty `size` board, one per entry of `black` / `white`: each side is a
    row of `table` [P, d] (a network's flat weights) or GREEDY. Returns int8 per game, +1
    where black won and -1 where white won. `uniforms` [S*S, games]: the greedy player's
    tie-break numbers of each game (unused where no side is greedy). At every ply one network
    call scores every board whose side to move is a network, each with that side's weights,
    and one call moves the greedy player on the others."""
    return play_matches_timed(net, table, black, white, size, uniforms)[0]


def play_matches_timed(net: torch.nn.Module, table: np.ndarray, black: np.ndarray,
                       white: np.ndarray, size: int, uniforms: np.ndarray,
                       randomised: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`play_matches`, and the plies each game lasted (int16: the capturing move's ply + 1).
    `randomised` (bool [S*S, games], optional): where True, the greedy player of that game
    plays a random empty point at that ply (`random_moves`, by the same tie-break number)."""
    black = np.asarray(black, np.int64)
    white = np.asarray(white, np.int64)
    n_games = len(black)
    weights = torch.as_tensor(np.asarray(table), dtype=torch.float32)
    cells = empty_boards(n_games, size)
    black_won = np.zeros(n_games, np.int8)
    plies = np.zeros(n_games, np.int16)
    active = np.ones(n_games, bool)
    colour = BLACK
    for ply in range(size * size):
        live = np.flatnonzero(active)
        if live.size == 0:
            break
        player = (black if colour == BLACK else white)[live]
        net_rows, greedy_rows = live[player != GREEDY], live[player == GREEDY]
        moves = []
        if net_rows.size:
            boards = cells[net_rows].reshape(-1, size, size)
            with torch.no_grad():
                scores = net.scores_per_board(planes(boards, colour),
                                              weights[torch.as_tensor(player[player != GREEDY])])
            moves.append(network_moves(cells, scores, net_rows))
        if greedy_rows.size:
            greedy = greedy_moves(cells, colour, uniforms[ply, greedy_rows], greedy_rows)
            if randomised is not None:
                pick = randomised[ply, greedy_rows]
                if pick.any():
                    greedy[pick] = random_moves(cells, uniforms[ply, greedy_rows[pick]],
                                                greedy_rows[pick])
            moves.append(greedy)
        rows = np.concatenate([net_rows, greedy_rows])
        result = play(cells, colour, np.concatenate(moves), rows)
        ended = result != GOES_ON
        done = rows[ended]
        mover_won = result[ended] == CAPTURED
        black_won[done] = np.where(mover_won == (colour == BLACK), 1, -1)
        plies[done] = ply + 1
        active[done] = False
        colour = WHITE if colour == BLACK else BLACK
    if active.any():
        raise RuntimeError(f"{int(active.sum())} games undecided after {size * size} plies")
    return black_won, plies
