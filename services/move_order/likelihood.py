"""The cost of an order: 1 / the geometric mean of the policy's probabilities of its moves.

The likelihood of an order m_1..m_n is prod_i P(m_i | s_{i-1}), each factor the policy of the
position before the move, masked to that position's legal moves (`numerics.masked_softmax`);
the geometric mean makes orders of different lengths comparable (the paper's cost).

A candidate of the annealing differs from the current order from some ply k on: the positions
s_0..s_k and their policies are the same, so `PrefixScorer.rescore` keeps them and sends only
s_{k+1}..s_{n-1} to the evaluator, all in ONE `infer` call (split only above `max_boards`, the
served model's batch limit). A candidate that breaks the rules of a prefix costs no call.
`rescore_many` does the same for the candidates of several annealing chains at once: all
their changed prefixes in one call, so the network sees one large batch per step.

The network is a function of its input, so its logits are also kept by input bytes
(`cache_size` of them): a position whose input was evaluated before is not sent again. After a
swap of plies a < b, the Gomoku boards from b on hold the same stones as before, so only
s_a+1..s_b travel (Go's input also holds the last moves' ages, so a few more do). The legal
mask is still asked of each position, which keeps the cost exact whatever the game's input,
and the masked policy is kept by input and mask together (`prefix_cache_size` of them), so
the softmax of a row is taken once.

A game may say when two orders of the same moves reach one position (`Game.transposition_key`:
a Gomoku position is its board, whatever the order; a Go position also holds the last moves
its network input holds, so two orders meet again once those agree). Then a candidate is
replayed only up to the last ply where it differs from the current order: from there on both
have played the same moves, so its positions, policies and factors are the current order's
(`states[i]` may then be a position reached by another order of the same moves: the same to
the rules and to the network). The masked policies are also kept by that key, which spares
the network input and the legal mask of a position reached before by another order.

A position is a function of the moves that led to it, so the scorer also keeps, by the move
sequence itself (`prefix_cache_size` of them), the position it reaches (or that it breaks the rules)
and that position's masked policy: an annealing chain near its end proposes the same few
neighbours of the same order again and again, and replaying their moves through the rules
would otherwise cost as much as the network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from services import numerics
from services.defaults import MAX_BATCH_BOARDS
from services.evaluator import EvaluatorError, PolicyEvaluator, finite_outputs
from services.games.base import Position
from services.move_order.problem import Problem

DEFAULT_MAX_BOARDS = MAX_BATCH_BOARDS  # max_batch_size of the served models' config.pbtxt
DEFAULT_CACHE_SIZE = 50_000  # logits rows kept by input (a 15x15 row: 900 bytes)
# move sequences kept with their position (~0.5-1 KB) and masked policy (float64: 1.8 KB on
# 15x15, 2.9 KB on 19x19), and as many masked policies by input and legal mask (the same
# arrays, plus a key of twice the board): ~60 MB at most; a chain's repeats are of its recent
# proposals
DEFAULT_PREFIX_CACHE_SIZE = 10_000
# positions kept by the position and move they were played from (a game with a
# transposition_key): ~1 KB each (a Gomoku state), ~30 MB at most
DEFAULT_TRANSITION_CACHE_SIZE = 30_000
# a factor below this counts as this: a legal move the network gives 0 keeps a finite cost
MIN_PROBABILITY = 1e-300
_UNSEEN = object()  # a move sequence not in the position cache


@dataclass(frozen=True)
class Scored:
    """An order with what its cost was computed from: `states[i]` is the position after `i`
    moves (n + 1 of them; for a game with a `transposition_key`, possibly the same position
    reached by another order of those moves), `policies[i]` the masked policy at
    `states[i]` (n of them, float64 rows over the game's policy entries), `factors[i]` the
    probability of move `i`. The
    likelihood figures are computed once, when first asked (the annealing compares a cost
    several times per step)."""

    order: tuple[int, ...]
    states: tuple[Position, ...]
    policies: tuple[np.ndarray, ...]
    factors: np.ndarray

    @cached_property
    def log_likelihood(self) -> float:
        return float(np.log(np.maximum(self.factors, MIN_PROBABILITY)).sum())

    @cached_property
    def geometric_mean(self) -> float:
        """The geometric mean of the factors (1 for an empty order)."""
        n = len(self.order)
        return math.exp(self.log_likelihood / n) if n else 1.0

    @cached_property
    def cost(self) -> float:
        """1 / geometric mean: lower is more likely."""
        return 1.0 / self.geometric_mean


def scored(order: Sequence[int], states: Sequence[Position],
           policies: Sequence[np.ndarray]) -> Scored:
    """A `Scored` from its states and policies (the factors are read off the policies)."""
    factors = np.array([policies[i][m] for i, m in enumerate(order)], dtype=np.float64)
    return Scored(tuple(int(m) for m in order), tuple(states), tuple(policies), factors)


class PrefixScorer:
    """Costs of orders of one problem on one evaluator; counts its calls and boards sent."""

    def __init__(self, problem: Problem, evaluator: PolicyEvaluator,
                 max_boards: int = DEFAULT_MAX_BOARDS,
                 cache_size: int = DEFAULT_CACHE_SIZE,
                 prefix_cache_size: int = DEFAULT_PREFIX_CACHE_SIZE,
                 transition_cache_size: int = DEFAULT_TRANSITION_CACHE_SIZE) -> None:
        """`cache_size` logits rows kept by network input, `prefix_cache_size` positions and
        policies kept by move sequence (both off when `cache_size` is 0: every changed prefix
        replayed and sent)."""
        if max_boards < 1 or cache_size < 0 or prefix_cache_size < 0:
            raise ValueError(f"need max_boards >= 1 and cache sizes >= 0, got {max_boards} "
                             f"{cache_size} {prefix_cache_size}")
        self.problem = problem
        self.evaluator = evaluator
        self.max_boards = max_boards
        self.cache_size = cache_size
        self.prefix_cache_size = prefix_cache_size if cache_size else 0
        self.transition_cache_size = max(1, transition_cache_size)
        self.calls = 0  # evaluator `infer` calls
        self.boards = 0  # positions sent in them
        self._logits: dict[bytes, np.ndarray] = {}  # network input bytes -> logits row
        # moves played -> the position they reach (None: a move broke the rules)
        self._states: dict[tuple[int, ...], Position | None] = {}
        self._policies: dict[tuple[int, ...], np.ndarray] = {}  # moves -> masked policy
        # network input + legal mask bytes -> masked policy (the same arrays as `_policies`)
        self._masked: dict[bytes, np.ndarray] = {}
        self._colours = (frozenset(problem.black), frozenset(problem.white))
        self._transposable: bool | None = None  # whether the game has a transposition_key
        # (ply, transposition key, move) -> the position it reaches (None: against the rules)
        self._transitions: dict[tuple[int, Any, int], Position | None] = {}
        # (moves played, transposition key) -> masked policy (the same arrays as `_masked`)
        self._by_position: dict[tuple[int, Any], np.ndarray] = {}

    def policies(self, states: Sequence[Position]) -> list[np.ndarray]:
        """The masked policy of each state. A masked policy is a function of the network input
        and the legal mask, so it is kept by both (`prefix_cache_size` of them): a softmax is
        taken only of the rows not kept, and of those only the inputs whose logits are not
        kept either are sent, in one `infer` call per `max_boards` of them. For a game with a
        `transposition_key` the rows are also kept by that key and the number of moves, which
        spares the input and the legal mask of a position reached before by another order."""
        game = self.problem.game
        by_position = self._by_position if self._is_transposable() else None
        out: list[np.ndarray | None] = []
        # policy key -> (input key, input, legal mask) of the rows to compute
        wanted: dict[bytes, tuple[bytes, np.ndarray, np.ndarray]] = {}
        # (index in out, policy key, position key) of the rows not kept by position
        todo: list[tuple[int, bytes, tuple[int, Any] | None]] = []
        for state in states:
            tkey = None
            if by_position is not None:
                tkey = (len(state.moves), game.transposition_key(state))
                row = by_position.get(tkey)
                if row is not None:
                    out.append(row)
                    continue
            x = np.ascontiguousarray(game.network_input(state))
            legal = state.legal_mask()
            key = x.tobytes()
            pkey = key + legal.tobytes()
            row = self._masked.get(pkey)
            if row is None and pkey not in wanted:
                wanted[pkey] = (key, x, legal)
            todo.append((len(out), pkey, tkey))
            out.append(row)
        fresh = self._masked_rows(wanted) if wanted else {}
        if by_position is not None and len(by_position) + len(todo) > self.prefix_cache_size:
            by_position.clear()
        for i, pkey, tkey in todo:
            row = out[i]
            if row is None:
                row = out[i] = fresh[pkey]
            if by_position is not None and self.prefix_cache_size:
                by_position[tkey] = row
        return out  # type: ignore[return-value]

    def _is_transposable(self) -> bool:
        """Whether the game has a `transposition_key` (asked once, of the empty position) and
        the caches are on (with `cache_size` 0 every changed prefix is replayed and sent)."""
        if self._transposable is None:
            self._transposable = bool(self.prefix_cache_size) and (
                self.problem.game.transposition_key(self.problem.start) is not None)
        return self._transposable

    def _masked_rows(self, wanted: dict[bytes, tuple[bytes, np.ndarray, np.ndarray]]
                     ) -> dict[bytes, np.ndarray]:
        """The masked policies of `wanted` (policy key -> (input key, input, legal mask)),
        kept after."""
        logits = self._logits_of([(key, x) for key, x, _ in wanted.values()])
        rows = numerics.masked_softmax(np.stack(logits),
                                       np.stack([legal for _, _, legal in wanted.values()]))
        fresh = dict(zip(wanted, rows, strict=True))
        if self.prefix_cache_size:
            if len(self._masked) + len(fresh) > self.prefix_cache_size:
                self._masked.clear()
            self._masked.update(fresh)
        return fresh

    def _logits_of(self, inputs: Sequence[tuple[bytes, np.ndarray]]) -> list[np.ndarray]:
        """The logits row of each (input key, input): the kept ones from the cache, the others
        from one `infer` call per `max_boards` of them (kept after, `cache_size` at most)."""
        rows: dict[bytes, np.ndarray] = {}
        missing: dict[bytes, np.ndarray] = {}
        for key, x in inputs:
            row = self._logits.get(key)
            if row is not None:
                rows[key] = row
            elif key not in missing:
                missing[key] = x
        todo = list(missing)
        for lo in range(0, len(todo), self.max_boards):
            chunk = todo[lo:lo + self.max_boards]
            rows.update(zip(chunk, self._infer(np.stack([missing[k] for k in chunk])),
                            strict=True))
        if self.cache_size:
            if len(self._logits) + len(todo) > self.cache_size:
                self._logits.clear()
            for key in todo[-self.cache_size:]:
                self._logits[key] = rows[key]
        return [rows[key] for key, _ in inputs]

    def _infer(self, boards: np.ndarray) -> np.ndarray:
        """The checked logits [N, policy size] of one evaluator call."""
        width = self.problem.game.policy_size(self.problem.size)
        answer = self.evaluator.infer(boards)
        self.calls += 1
        self.boards += len(boards)
        logits = np.asarray(answer.logits)
        if logits.shape != (len(boards), width):
            raise EvaluatorError(f"evaluator returned logits {logits.shape} for "
                                 f"{len(boards)} boards of {width} moves")
        finite_outputs(logits, None, answer.model_name, answer.model_version)
        return logits

    def score(self, order: Sequence[int]) -> Scored | None:
        """The cost of `order` from scratch (one call for all its prefixes); None when the
        order breaks the rules of some prefix."""
        states = self.problem.replay(order)
        if states is None or not self.problem.is_order(order):
            return None
        all_states = [self.problem.start, *states]
        return scored(order, all_states, self.policies(all_states[:-1]))

    def rescore(self, current: Scored, order: Sequence[int], first: int) -> Scored | None:
        """The cost of `order`, equal to `current.order` before ply `first`: the positions
        s_0..s_first and their policies are `current`'s, s_first+1..s_n-1 are evaluated in
        one call. None (and no call) when a move from `first` on breaks the rules."""
        return self.rescore_many([(current, order, first)])[0]

    def _replay(self, moves: tuple[int, ...], start: Position, first: int
                ) -> list[Position] | None:
        """`Problem.replay(moves, start, first)`, each position looked up first and kept after
        it is played (the whole cache is dropped when full; a move that breaks the rules is kept
        as None). The key is the move sequence itself (`prefix_cache_size` of them), or, for a
        game with a `transposition_key`, (ply, the key of the position the move is played from,
        the move) (`transition_cache_size` of them): the changed plies of a candidate often
        reach, by another order, positions that were played from before, and what a move does
        there is the same whatever the order that led to it."""
        if not self.prefix_cache_size:
            return self.problem.replay(moves, start, first)
        if self._is_transposable():
            cache, limit = self._transitions, self.transition_cache_size
            key_of = self.problem.game.transposition_key

            def key(ply: int, state: Position) -> Any:
                return (ply, key_of(state), moves[ply])
        else:
            cache, limit = self._states, self.prefix_cache_size

            def key(ply: int, state: Position) -> Any:
                return moves[:ply + 1]
        play = self.problem.play
        colours = self._colours
        states: list[Position] = []
        state = start
        for ply in range(first, len(moves)):
            move = moves[ply]
            if move not in colours[ply % 2]:
                return None
            k = key(ply, state)
            nxt = cache.get(k, _UNSEEN)
            if nxt is _UNSEEN:
                nxt = play(state, move)
                if len(cache) >= limit:
                    cache.clear()
                cache[k] = nxt
            if nxt is None:
                return None
            states.append(nxt)
            state = nxt
        return states

    def rescore_many(self, candidates: Sequence[tuple[Scored, Sequence[int], int]]
                     ) -> list[Scored | None]:
        """`rescore` of each (current, order, first), the changed prefixes of all of them in
        ONE evaluator call (split only above `max_boards`; none when every input is cached
        or every candidate breaks the rules). Lock-step annealing chains send their step
        through here, so the network sees one large batch instead of one small one per
        chain; each result is the one `rescore` would give. The factors before ply `first`
        are `current`'s (same positions, same moves): only the others are read off."""
        # (current, moves, first, positions, the move sequences of the changed positions,
        # the first ply from which the factors are current's)
        replayed: list[tuple[Scored, tuple[int, ...], int, tuple[Position, ...],
                             list[tuple[int, ...]], int] | None] = []
        known: dict[tuple[int, ...], np.ndarray] = {}
        pending: dict[tuple[int, ...], Position] = {}  # moves -> a position to evaluate
        cached = self._policies
        for current, order, first in candidates:
            moves = tuple(map(int, order))
            n = len(moves)
            end = self._transposed_from(current, moves, first)
            new_states = self._replay(moves[:end], current.states[first], first)
            if new_states is None:
                replayed.append(None)
                continue
            if end < n and not self._same_position(new_states[-1], current.states[end]):
                rest = self._replay(moves, new_states[-1], end)
                if rest is None:
                    replayed.append(None)
                    continue
                new_states += rest
                end = n
            # from ply `end` on the positions are current's (the same, or transposed)
            states = (current.states[:first + 1] + tuple(new_states)
                      + current.states[end + 1:])
            keys = [moves[:ply] for ply in range(first + 1, end)]
            replayed.append((current, moves, first, states, keys, end))
            for key, state in zip(keys, states[first + 1:end], strict=True):
                row = cached.get(key)
                if row is not None:
                    known[key] = row
                elif key not in known:
                    pending[key] = state
        fresh = self.policies(list(pending.values()))
        known.update(zip(pending, fresh, strict=True))
        if self.prefix_cache_size:
            if len(cached) + len(pending) > self.prefix_cache_size:
                cached.clear()
            cached.update(zip(pending, fresh, strict=True))
        out: list[Scored | None] = []
        for item in replayed:
            if item is None:
                out.append(None)
                continue
            current, moves, first, states, keys, end = item
            policies = (current.policies[:first + 1] + tuple(known[k] for k in keys)
                        + current.policies[end:])
            changed = [policies[i][moves[i]] for i in range(first, end)]
            factors = np.concatenate((current.factors[:first],
                                      np.array(changed, dtype=np.float64),
                                      current.factors[end:]))
            out.append(Scored(moves, states, policies, factors))
        return out

    def _transposed_from(self, current: Scored, moves: tuple[int, ...], first: int) -> int:
        """Where `moves` may rejoin `current.order` as a transposition: one past the last ply
        where the two differ, when the game has a `transposition_key` (after that ply both
        orders have played the same moves, so for such a game the positions are the same and
        only the plies before it need replaying); else the length of the order."""
        n = len(moves)
        if not self._is_transposable():
            return n
        old = current.order
        end = n
        while end > first and moves[end - 1] == old[end - 1]:
            end -= 1
        return max(end, first + 1)

    def _same_position(self, a: Position, b: Position) -> bool:
        """Whether the game says `a` and `b` (after the same number of moves) are one position."""
        if a is b:
            return True
        game = self.problem.game
        key = game.transposition_key(a)
        return key is not None and key == game.transposition_key(b)
