"""One self-play game: a search a move, the targets of the full searches, the result.

Each move is searched fully (`SelfPlaySettings.full_visits`, root noise, its visit counts kept
as the policy target) with probability `full_share`, else quickly (`fast_visits`, no noise, no
policy target): KataGo's playout cap randomization. The tree is reused from move to move (the
chosen move's subtree continues as the next root), so a fast search after a full one starts
with the visits already there. A move is drawn by visits for the first `temperature_moves`
moves, the most visited one after.

Resignation: the side to move resigns when its root value has been below `-resign_threshold`
for its last `resign_after` moves. A share of the games (`no_resign_share`) is played out
regardless; such a game records the first resignation it would have made, so the rate of
wrong resignations can be measured (`would_resign` and `winner`).

Every random choice comes from one generator seeded with the game's seed, so a game replays
the same with a deterministic evaluator.
"""

from __future__ import annotations

import numpy as np

from services.evaluator import PolicyEvaluator
from services.games.base import BLACK, WHITE, Game, Position
from services.search import mcts
from services.selfplay.game_record import MoveRecord, SelfPlayGame
from services.selfplay.openings import play_opening
from services.selfplay.settings import SelfPlaySettings

END_RULES = "rules"  # the rules ended the game (five, full board, two passes)
END_RESIGNED = "resigned"
END_MOVE_CAP = "move cap"  # a draw at `SelfPlaySettings.move_cap`


def _winner_of_finished(game: Game, state: Position) -> int:
    """Who won a game its rules ended (the last mover's result is `terminal_value`)."""
    value = game.terminal_value(state)
    if value == 0:
        return 0
    last_mover = WHITE if state.to_move == BLACK else BLACK
    return last_mover if value > 0 else (WHITE if last_mover == BLACK else BLACK)


def play_game(game: Game, evaluator: PolicyEvaluator, settings: SelfPlaySettings, *,
              seed: int, opening: tuple[int, ...] = (), size: int | None = None,
              no_resign: bool | None = None) -> SelfPlayGame:
    """Play one game from `opening` with `evaluator` on both sides. `no_resign` None: drawn
    with probability `settings.no_resign_share` from the game's generator."""
    rng = np.random.default_rng(seed)
    state = play_opening(game, tuple(opening), size)
    if no_resign is None:
        no_resign = bool(rng.random() < settings.no_resign_share)
    record = SelfPlayGame(game.name, state.size, seed, tuple(opening), no_resign)
    cap = settings.move_cap(game.policy_size(state.size))
    low_streak = {BLACK: 0, WHITE: 0}
    tree: mcts.Node | None = None
    while True:
        if state.is_over:
            record.winner, record.end = _winner_of_finished(game, state), END_RULES
            return record
        if len(state.moves) >= cap:
            record.winner, record.end = 0, END_MOVE_CAP
            return record
        full = bool(rng.random() < settings.full_share)
        ply = len(record.moves)
        temperature = 1.0 if ply < settings.temperature_moves else 0.0
        legal = int(np.count_nonzero(state.legal_mask()))
        alpha = settings.noise_total_alpha / max(legal, 1) if full else 0.0
        search = mcts.Search(tree if tree is not None else state, evaluator,
                             c_puct=settings.c_puct, batch_size=settings.batch_size,
                             noise_alpha=alpha, noise_weight=settings.noise_weight,
                             temperature=temperature, seed=int(rng.integers(2**63)))
        search.run(settings.full_visits if full else settings.fast_visits)
        result = search.result(top_children=len(search.root.moves))
        if result.model_name:  # a search that asked the network nothing (all reused) names none
            record.model_name, record.model_version = result.model_name, result.model_version
        target = tuple((c.move, c.visits) for c in result.children if c.visits > 0) \
            if full else ()
        record.moves.append(MoveRecord(result.move, full, result.total_visits,
                                       float(result.value), target))
        mover = state.to_move
        low_streak[mover] = low_streak[mover] + 1 \
            if result.value < -settings.resign_threshold else 0
        if low_streak[mover] >= settings.resign_after:
            if record.would_resign is None:
                record.would_resign = (len(state.moves), mover)
            if not no_resign:
                record.winner, record.end = (WHITE if mover == BLACK else BLACK), END_RESIGNED
                return record
        child = search.root.child(result.move)
        tree = child if child is not None and not child.terminal and \
            child.priors is not None else None
        state = state.play(result.move)


def wrong_resignations(games: list[SelfPlayGame]) -> tuple[int, int]:
    """(wrong, counted): of the no-resign games that would have resigned, how many the
    would-be resigner did not lose (minigo's false-positive rate is wrong / counted)."""
    counted = [g for g in games if g.no_resign and g.would_resign is not None]
    wrong = sum(1 for g in counted if g.winner != _other(g.would_resign[1]))
    return wrong, len(counted)


def _other(colour: int) -> int:
    return WHITE if colour == BLACK else BLACK


__all__ = ["END_MOVE_CAP", "END_RESIGNED", "END_RULES", "MoveRecord", "SelfPlayGame",
           "play_game", "wrong_resignations"]

