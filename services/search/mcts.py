"""PUCT tree search for Gomoku guided by a policy network.

Why it looks like this:

* **No value head yet.** A non-terminal leaf is worth 0 (a draw) to both sides. Real values come
  only from proven outcomes: a move that makes five is +1 for its mover, a full board is 0, and a
  position whose side to move can make five at once is +1 for that side. With zero-valued leaves
  the visits follow the prior, sharpened wherever the rules prove something.
* **Tactical exactness**, so the guarantees hold even with a weak network: when the side to move
  can make five, only its winning points are searched (the node is a proven win); otherwise,
  when the opponent threatens five (a four), only the blocking points are searched. Nodes left
  with a single candidate need no network call.
* **Batched leaf evaluation.** Up to `batch_size` leaves are gathered per evaluator call, spread
  over the tree by a virtual loss, so one Triton request carries many boards.
* **Deterministic given the evaluator**: candidates are kept in ascending point order and every
  tie (selection, final move, principal variation) goes to the lowest point index.

The search talks to a `PolicyEvaluator` (anything with `infer(boards) -> logits/model info`,
e.g. `services.triton.client.PolicyClient`), never to Triton directly.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.games.gomoku import DIRECTIONS, EMPTY, GomokuState, makes_five, opponent

DEFAULT_C_PUCT = 1.5
DEFAULT_BATCH_SIZE = 16
VIRTUAL_LOSS = 1.0


class PolicyOutput(Protocol):
    """What an evaluator returns (`services.triton.client.PolicyResult` fits)."""

    @property
    def logits(self) -> np.ndarray: ...  # float32 [N, size*size], unmasked

    @property
    def model_name(self) -> str: ...

    @property
    def model_version(self) -> str: ...


class PolicyEvaluator(Protocol):
    """A policy network: int8 boards [N, size, size] (0 empty, 1 black, 2 white) -> logits."""

    def infer(self, boards: np.ndarray) -> PolicyOutput: ...


class GameOverError(ValueError):
    """The position has no legal move (somebody made five, or the board is full)."""


class EvaluatorError(RuntimeError):
    """The evaluator answered with something the search cannot use (e.g. a wrong shape)."""


def masked_softmax(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Softmax of `logits` over the points where `legal` holds; exactly 0 elsewhere (float64).

    NaN logits count as -inf; if every legal logit is -inf the legal points share equally.
    """
    out = np.zeros(legal.shape, dtype=np.float64)
    if not legal.any():
        return out
    z = np.asarray(logits, dtype=np.float64).reshape(legal.shape)[legal]
    z = np.where(np.isnan(z), -np.inf, z)
    if np.isposinf(z).any():
        p = np.isposinf(z).astype(np.float64)
    elif np.isneginf(z).all():
        p = np.ones_like(z)
    else:
        p = np.exp(z - z.max())
    out[legal] = p / p.sum()
    return out


@functools.cache
def _windows(size: int) -> np.ndarray:
    """Flat indices of every 5-in-a-row window on a size x size board, shape [n, 5]."""
    rows = []
    for dx, dy in DIRECTIONS:
        for y in range(size):
            for x in range(size):
                if 0 <= x + 4 * dx < size and 0 <= y + 4 * dy < size:
                    rows.append([(y + k * dy) * size + x + k * dx for k in range(5)])
    return np.array(rows, dtype=np.intp)


def winning_points(state: GomokuState, color: int) -> list[int]:
    """Empty points where `color` makes five at once, ascending.

    Same answer as `GomokuState.winning_points`, but fast: a five through a point needs a window
    of five cells holding four stones of `color` and that empty point, so only those candidates
    are checked with the rules' own `makes_five` (which knows about overlines).
    """
    windows = _windows(state.size)
    cells = state.board.reshape(-1)[windows]
    hit = ((cells == color).sum(axis=1) == 4) & ((cells == EMPTY).sum(axis=1) == 1)
    if not hit.any():
        return []
    candidates = np.unique(windows[hit][cells[hit] == EMPTY])
    size, board, rule = state.size, state.board, state.rule
    return [int(p) for p in candidates if makes_five(board, p % size, p // size, color, rule)]


@dataclass(frozen=True)
class ChildStats:
    move: int
    visits: int
    prior: float  # the network's probability of the move over all legal points
    value: float  # mean value for the player making the move (0 when unvisited)


@dataclass(frozen=True)
class SearchResult:
    move: int
    visits: int  # visits of the chosen move
    total_visits: int  # simulations run (visits of the root's children together)
    prior: float  # network probability of the chosen move over all legal points
    value: float  # root mean value for the side to move, in [-1, 1]
    principal_variation: tuple[int, ...]  # starts with `move`
    model_name: str
    model_version: str
    children: tuple[ChildStats, ...]  # most visited first
    evaluator_calls: int
    evaluated_leaves: int  # boards sent to the evaluator, root included
    elapsed_s: float


class _Node:
    """A position in the tree; edge statistics live in the parent's arrays for fast selection."""

    __slots__ = ("child_n", "child_w", "children", "moves", "priors", "state", "terminal", "value")

    def __init__(self, state: GomokuState) -> None:
        self.state = state
        self.terminal = False
        self.value = 0.0  # leaf value for the player who moved into this node
        self.moves: np.ndarray = np.empty(0, dtype=np.intp)  # candidates, ascending
        self.priors: np.ndarray | None = None  # over `moves`; None while awaiting the network
        self.child_n = np.empty(0)
        self.child_w = np.empty(0)
        self.children: list[_Node | None] = []

    def prepare(self) -> bool:
        """Classify a new node; True when its priors must come from the network."""
        s = self.state
        if s.winner != EMPTY:  # the move into this node made five
            self.terminal, self.value = True, 1.0
            return False
        if not (s.board == EMPTY).any():  # full board, nobody made five
            self.terminal, self.value = True, 0.0
            return False
        wins = winning_points(s, s.to_move)
        if wins:  # proven win for the side to move: only winning points matter
            self.value = -1.0
            self._set_moves(wins, np.full(len(wins), 1.0 / len(wins)))
            return False
        blocks = winning_points(s, opponent(s.to_move))
        candidates = blocks or np.flatnonzero(s.board.reshape(-1) == EMPTY).tolist()
        if len(candidates) == 1:
            self._set_moves(candidates, np.ones(1))
            return False
        self._set_moves(candidates, None)
        return True

    def _set_moves(self, moves: list[int], priors: np.ndarray | None) -> None:
        self.moves = np.asarray(moves, dtype=np.intp)
        self.priors = priors
        self.child_n = np.zeros(len(moves))
        self.child_w = np.zeros(len(moves))
        self.children = [None] * len(moves)

    def set_network_priors(self, policy: np.ndarray) -> None:
        """Priors over the candidates from a full-board policy, renormalised."""
        p = policy[self.moves]
        total = p.sum()
        self.priors = p / total if total > 0 else np.full(len(p), 1.0 / len(p))

    def best_child(self) -> int:
        """Most visited child; ties go to the higher prior, then the lower point index."""
        assert self.priors is not None
        order = np.lexsort((self.moves, -self.priors, -self.child_n))
        return int(order[0])


class _Search:
    def __init__(
        self,
        root: GomokuState,
        evaluator: PolicyEvaluator,
        c_puct: float,
        batch_size: int,
    ) -> None:
        self.evaluator = evaluator
        self.c_puct = c_puct
        self.batch_size = batch_size
        self.root = _Node(root)
        self.model_name = ""
        self.model_version = ""
        self.evaluator_calls = 0
        self.evaluated_leaves = 0
        self.visits = 0

    def evaluate(self, nodes: list[_Node]) -> np.ndarray:
        """One evaluator call for `nodes`; returns their legal-point policies [N, size*size]."""
        boards = np.stack([n.state.board for n in nodes]).astype(np.int8, copy=False)
        out = self.evaluator.infer(boards)
        logits = np.asarray(out.logits, dtype=np.float32)
        points = nodes[0].state.size ** 2
        if logits.shape != (len(nodes), points):
            expected = (len(nodes), points)
            raise EvaluatorError(f"evaluator returned logits {logits.shape}, expected {expected}")
        self.model_name, self.model_version = str(out.model_name), str(out.model_version)
        self.evaluator_calls += 1
        self.evaluated_leaves += len(nodes)
        rows = zip(logits, nodes, strict=True)
        return np.stack([masked_softmax(row, n.state.legal_mask()) for row, n in rows])

    def select_child(self, node: _Node) -> int:
        assert node.priors is not None
        n, w = node.child_n, node.child_w
        q = np.divide(w, n, out=np.zeros_like(w), where=n > 0)  # unvisited: 0 (a draw)
        u = q + self.c_puct * node.priors * math.sqrt(max(n.sum(), 1.0)) / (1.0 + n)
        return int(np.argmax(u))  # first maximum: the lowest point index

    def descend(self) -> tuple[list[tuple[_Node, int]], _Node, str]:
        """Select a path with virtual loss; kind is 'eval', 'known' or 'pending' (a collision)."""
        path: list[tuple[_Node, int]] = []
        node = self.root
        while True:
            i = self.select_child(node)
            path.append((node, i))
            node.child_n[i] += VIRTUAL_LOSS
            node.child_w[i] -= VIRTUAL_LOSS
            child = node.children[i]
            if child is None:
                child = _Node(node.state.play(int(node.moves[i])))
                node.children[i] = child
                return path, child, "eval" if child.prepare() else "known"
            if child.terminal:
                return path, child, "known"
            if child.priors is None:
                return path, child, "pending"
            node = child

    @staticmethod
    def backup(path: list[tuple[_Node, int]], value: float, visit: bool = True) -> None:
        """Replace the virtual loss by a real visit worth `value` to the last mover on the path."""
        for node, i in reversed(path):
            node.child_n[i] += (1.0 if visit else 0.0) - VIRTUAL_LOSS
            node.child_w[i] += (value if visit else 0.0) + VIRTUAL_LOSS
            value = -value

    def run(self, max_visits: int, end: float) -> None:
        root = self.root
        root.prepare()
        if root.terminal:
            raise GameOverError("the game is over: there is no legal move")
        policy = self.evaluate([root])[0]
        self.root_policy = policy
        root.set_network_priors(policy)
        proven_win = root.value < 0  # the side to move can make five: one visit shows it
        limit = max_visits if max_visits > 0 else math.inf
        while self.visits < limit and time.monotonic() < end:
            if proven_win and self.visits > 0:
                break
            batch: list[tuple[list[tuple[_Node, int]], _Node]] = []
            for _ in range(int(min(self.batch_size, limit - self.visits))):
                path, leaf, kind = self.descend()
                if kind == "pending":  # already waiting in this batch: evaluate first
                    self.backup(path, 0.0, visit=False)
                    break
                self.visits += 1
                if kind == "eval":
                    batch.append((path, leaf))
                else:
                    self.backup(path, leaf.value)
            if batch:
                policies = self.evaluate([leaf for _, leaf in batch])
                for (path, leaf), policy in zip(batch, policies, strict=True):
                    leaf.set_network_priors(policy)
                    self.backup(path, leaf.value)  # 0: no value head yet

    def result(self, started: float, top_children: int) -> SearchResult:
        root = self.root
        best = root.best_child()
        order = np.lexsort((root.moves, -root.priors, -root.child_n))
        n, w = root.child_n, root.child_w
        q = np.divide(w, n, out=np.zeros_like(w), where=n > 0)
        children = tuple(
            ChildStats(
                move=int(root.moves[i]),
                visits=int(n[i]),
                prior=float(self.root_policy[root.moves[i]]),
                value=float(q[i]),
            )
            for i in order[:top_children]
        )
        total = float(n.sum())
        return SearchResult(
            move=int(root.moves[best]),
            visits=int(n[best]),
            total_visits=int(total),
            prior=float(self.root_policy[root.moves[best]]),
            value=float(w.sum() / total) if total > 0 else 0.0,
            principal_variation=self.principal_variation(),
            model_name=self.model_name,
            model_version=self.model_version,
            children=children,
            evaluator_calls=self.evaluator_calls,
            evaluated_leaves=self.evaluated_leaves,
            elapsed_s=time.monotonic() - started,
        )

    def principal_variation(self) -> tuple[int, ...]:
        """Follow the most visited children from the root (the first move is always included)."""
        pv: list[int] = []
        node: _Node | None = self.root
        while node is not None and not node.terminal and node.priors is not None:
            i = node.best_child()
            if pv and node.child_n[i] < 1:
                break
            pv.append(int(node.moves[i]))
            node = node.children[i]
        return tuple(pv)


def search(
    state: GomokuState,
    evaluator: PolicyEvaluator,
    *,
    max_visits: int = 0,
    max_time_ms: int = 0,
    deadline: float | None = None,
    c_puct: float = DEFAULT_C_PUCT,
    batch_size: int = DEFAULT_BATCH_SIZE,
    top_children: int = 10,
) -> SearchResult:
    """Choose a move for the side to move in `state`.

    Budget: `max_visits` simulations and/or `max_time_ms` of wall time (0 = unlimited, but not
    both). `deadline` (a `time.monotonic()` instant) cuts the search short too, e.g. the gRPC
    request deadline. The root is always evaluated once, even past the deadline, so there is
    always a move (the highest prior one if no simulation ran). Evaluator errors propagate.
    Raises GameOverError when the position has no legal move.
    """
    if max_visits < 0 or max_time_ms < 0:
        raise ValueError(f"budgets must be >= 0, got {max_visits=} {max_time_ms=}")
    if max_visits == 0 and max_time_ms == 0:
        raise ValueError("give max_visits or max_time_ms (both 0 would search forever)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    started = time.monotonic()
    end = started + max_time_ms / 1000.0 if max_time_ms > 0 else math.inf
    if deadline is not None:
        end = min(end, deadline)
    tree = _Search(state, evaluator, c_puct=c_puct, batch_size=batch_size)
    tree.run(max_visits, end)
    return tree.result(started, top_children)
