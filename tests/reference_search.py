"""The interpreted PUCT tree: the reference the compiled search (`services.search.mcts`) must
agree with, visit for visit (tests/test_compiled_search.py), and the baseline of
benchmarks/search_speed.py. It is the search as it was before the tree was compiled: a `Node`
object per position, the game's `Position.play` and `Game.expand` per playout.

Why it looks like this:

* **Leaf values from the value head, when the network has one.** A leaf that is not a finished
  game is worth what the network says: its value v (`PolicyOutput.values`) is the expected
  result for the side to move *at* the leaf, so the leaf is worth -v to the player who moved
  into it (`Node.value`, the convention of every node value and of `Search.backup`). Without a
  value head (no `values`, or NaN for every board of the answer) such a leaf is worth 0 (a
  draw) to both sides, and the visits follow the prior, sharpened wherever the rules prove
  something. Non-finite logits, or a non-finite value next to finite ones, are an error
  (`NonFiniteOutputError`, see `finite_outputs`): never a move picked from NaN. Proven
  outcomes come from the rules, never from the network: a move that makes five is +1 for its
  mover, a full board is 0, and a position whose side to move can make five at once is +1 for
  that side. Forced nodes (a single candidate, see below) are not evaluated and are worth 0.
* **Tactical exactness**, so the guarantees hold even with a weak network: when the side to move
  can make five, only its winning points are searched (the node is a proven win); otherwise,
  when the opponent threatens five (a four), only the blocking points are searched. Nodes left
  with a single candidate need no network call.
* **Batched leaf evaluation.** Up to `batch_size` leaves are gathered per evaluator call, spread
  over the tree by a virtual loss, so one Triton request carries many boards.
* **Deterministic given the evaluator**: candidates are kept in ascending point order and every
  tie (selection, final move, principal variation) goes to the lowest point index.
* **Legal moves only**: candidates come from `GomokuState.legal_mask()`, so under renju black
  never searches (nor plays) a forbidden point; a four that black could only block on a
  forbidden point is a proven loss, found by searching black's legal moves.
* **Steppable and reusable**: `Search` runs one batch at a time (`batches()` yields between
  batches, where the tree holds no virtual loss), so callers can stream reports, stop on
  cancellation, and keep the tree: a subtree of a finished search can seed the next search
  (`Search(node, ...)`) with all its visits (tree reuse between the moves of one game).

What a node is comes from its game (`Game.expand`, services/games/base.py): terminal and
worth what to whom, a proven win, or the candidates to search. Gomoku's tactics above are its
`expand` (services/games/gomoku/game.py); Go's candidates are the legal points that do not fill
one of the mover's own eyes, plus the pass (always legal, the policy's last entry), and after
two consecutive passes a node is terminal and worth the area score's verdict (with komi) to the
player who passed last (services/games/go/game.py). Other leaves get the network's value.

The search talks to a `PolicyEvaluator` (anything with `infer(boards) -> logits/values/model
info`, e.g. `services.triton.client.PolicyClient`), never to Triton directly. The boards it
sends are `network_input(state)` (the game's `network_input`: the int8 board [S, S] for Gomoku,
the compact int8 [4, S, S] for Go).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from services import numerics
from services.evaluator import (
    EvaluatorError,
    PolicyEvaluator,
    finite_outputs,
    value_rows,
)
from services.games.base import Position

State = Position

DEFAULT_C_PUCT = 1.5
DEFAULT_BATCH_SIZE = 16
VIRTUAL_LOSS = 1.0


class GameOverError(ValueError):
    """The position has no legal move (somebody made five, the board is full, or every empty
    point is forbidden for black under renju; Go: two consecutive passes ended the game)."""


def network_input(state: State) -> np.ndarray:
    """What the policy network takes for `state` (its game's `network_input`)."""
    return state.game.network_input(state)


def policy_size(state: State) -> int:
    """Entries of the policy of `state`: its points (and the pass, last, in games with one)."""
    return state.game.policy_size(state.size)


def masked_softmax(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Softmax of `logits` over the points where `legal` holds; exactly 0 elsewhere (float64).

    The legal logits must be finite: a NaN or infinite one raises ValueError (callers check
    the network's answer with `finite_outputs` first, which names the model). Turning NaN into
    a policy (uniform, say) would serve a broken model's garbage as an answer.
    """
    legal = np.asarray(legal, dtype=bool)
    if not np.isfinite(np.asarray(logits).reshape(legal.shape)[legal]).all():
        raise ValueError("masked_softmax: the legal logits must be finite (NaN or Inf found)")
    return numerics.masked_softmax(np.ravel(logits), legal.ravel()).reshape(legal.shape)


def leaf_values(values: np.ndarray | None, n: int) -> np.ndarray:
    """Leaf values (float64 [n], for the player who moved into each node) from the network's
    values for the side to move there: -v, clipped to [-1, 1]; 0 (a draw) everywhere when
    `values` is None (no value head; `finite_outputs` turns an all-NaN answer into None and
    refuses any other non-finite value before this runs)."""
    rows = value_rows(values, n)
    if rows is None:
        return np.zeros(n)
    v = rows.astype(np.float64)
    if not np.isfinite(v).all():
        raise EvaluatorError("leaf values must be finite (check them with finite_outputs)")
    return 0.0 - np.clip(v, -1.0, 1.0)


@dataclass(frozen=True)
class ChildStats:
    move: int
    visits: int
    prior: float  # the network's probability of the move over all legal points
    value: float  # mean value for the player making the move (0 when unvisited)
    principal_variation: tuple[int, ...] = ()  # starts with `move`


@dataclass(frozen=True)
class SearchResult:
    move: int
    visits: int  # visits of the chosen move
    total_visits: int  # visits of the root's children together, reused ones included
    prior: float  # network probability of the chosen move over all legal points
    value: float  # root mean value for the side to move, in [-1, 1]
    principal_variation: tuple[int, ...]  # starts with `move`
    model_name: str
    model_version: str
    children: tuple[ChildStats, ...]  # most visited first
    evaluator_calls: int
    evaluated_leaves: int  # boards sent to the evaluator, root included
    elapsed_s: float
    reused_visits: int = 0  # part of total_visits that came with a reused tree
    new_visits: int = 0  # simulations run by this search (total_visits - reused_visits)


class Node:
    """A position in the tree; edge statistics live in the parent's arrays for fast selection.

    Kept small, as trees are cached between requests (about 6 KB per expanded node on 15x15):
    candidates are int16, visit counts float32 (exact integers below 2**24), and only expanded
    children are stored (`children` maps a candidate's index to its node).

    `scale` is the network's total probability of the candidates (None while the priors did not
    come from the network): `priors * scale` gives each candidate's probability over all legal
    points, which is what results report as the prior.
    """

    __slots__ = (
        "child_n",
        "child_w",
        "children",
        "legal",
        "moves",
        "priors",
        "proven",
        "scale",
        "state",
        "terminal",
        "value",
    )

    def __init__(self, state: State) -> None:
        self.state = state
        self.terminal = False
        self.proven = False  # the side to move can make five: a proven win (value -1)
        # leaf value for the player who moved into this node: a proven outcome, or minus the
        # network's value for the side to move here (0 without a value head)
        self.value = 0.0
        self.moves: np.ndarray = np.empty(0, dtype=np.int16)  # candidates, ascending
        self.priors: np.ndarray | None = None  # over `moves`; None while awaiting the network
        self.scale: float | None = None
        self.legal: np.ndarray | None = None  # kept only while awaiting the network
        self.child_n = np.empty(0, dtype=np.float32)
        self.child_w = np.empty(0)
        self.children: dict[int, Node] = {}

    def prepare(self) -> bool:
        """Classify a new node by its game's rules (`Game.expand`); True when its priors must
        come from the network."""
        e = self.state.game.expand(self.state)
        if e.terminal_value is not None:
            self.terminal, self.value = True, float(e.terminal_value)
            return False
        if e.proven_win:  # the side to move wins at once: only its winning moves matter
            self.value, self.proven = -1.0, True
            n = len(e.candidates)
            self._set_moves(e.candidates, np.full(n, 1.0 / n))
            return False
        legal = e.legal if e.legal is not None else self.state.legal_mask()
        return self._open(e.candidates, legal)

    def _open(self, candidates: Sequence[int], legal: np.ndarray) -> bool:
        """A single candidate is forced (no evaluation needed: False); otherwise the node
        waits for the network's priors over `candidates` (True)."""
        if len(candidates) == 1:
            self._set_moves(candidates, np.ones(1))
            return False
        self._set_moves(candidates, None)
        self.legal = legal
        return True

    @property
    def visits(self) -> int:
        """Simulations that went through this node to one of its children."""
        return int(self.child_n.sum())

    def _set_moves(self, moves: Sequence[int], priors: np.ndarray | None) -> None:
        self.moves = np.asarray(moves, dtype=np.int16)
        self.priors = priors
        self.child_n = np.zeros(len(moves), dtype=np.float32)
        self.child_w = np.zeros(len(moves))
        self.children = {}

    def set_network_priors(self, policy: np.ndarray) -> None:
        """Priors over the candidates from a full-board policy, renormalised."""
        p = policy[self.moves]
        total = float(p.sum())
        self.priors = p / total if total > 0 else np.full(len(p), 1.0 / len(p))
        self.scale = total
        self.legal = None

    def network_prior(self, i: int) -> float:
        """Probability of candidate i over all legal points (0 when unknown)."""
        assert self.priors is not None
        return float(self.priors[i] * self.scale) if self.scale is not None else 0.0

    def best_child(self) -> int:
        """Most visited child; ties go to the higher prior, then the lower point index."""
        assert self.priors is not None
        order = np.lexsort((self.moves, -self.priors, -self.child_n))
        return int(order[0])

    def child(self, move: int) -> Node | None:
        """The expanded child reached by `move`, or None."""
        i = int(np.searchsorted(self.moves, move))
        if i < len(self.moves) and self.moves[i] == move:
            return self.children.get(i)
        return None



class Search:
    """One PUCT search, run batch by batch.

    `root` is a position (a fresh tree) or a `Node` of an earlier search (reuse: its visits,
    `reused_visits`, count towards the budget). Use: `start()`, then iterate `batches(...)`
    (or call `run`), then `result()`. Not thread-safe: one search belongs to one thread.
    `clock` (seconds, `time.monotonic` by default) is what time budgets, deadlines and
    `elapsed_s` are read from; a test passes a clock of its own to check them without waiting.
    """

    def __init__(
        self,
        root: State | Node,
        evaluator: PolicyEvaluator,
        *,
        c_puct: float = DEFAULT_C_PUCT,
        batch_size: int = DEFAULT_BATCH_SIZE,
        model_name: str = "",
        model_version: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.evaluator = evaluator
        self.c_puct = c_puct
        self.batch_size = batch_size
        self.reused = isinstance(root, Node)
        self.root = root if isinstance(root, Node) else Node(root)
        if self.reused and (self.root.priors is None or self.root.terminal):
            raise ValueError("a reused root must be an expanded, non-terminal node")
        self.reused_visits = self.root.visits if self.reused else 0
        self.model_name = model_name
        self.model_version = model_version
        self.evaluator_calls = 0
        self.evaluated_leaves = 0
        self.visits = 0  # simulations run by this search
        self.clock = clock
        self.started_at = clock()
        self.proven_win = False
        self.batch_seconds = 0.0  # running estimate of one batch's duration
        self._started = False

    @property
    def total_visits(self) -> int:
        return self.reused_visits + self.visits

    def evaluate(self, nodes: list[Node]) -> np.ndarray:
        """One evaluator call for `nodes`; returns their legal-point policies [N, size*size]."""
        return self.evaluate_with_values(nodes)[0]

    def evaluate_with_values(self, nodes: list[Node]) -> tuple[np.ndarray, np.ndarray]:
        """One evaluator call for `nodes`: (legal-point policies [N, size*size], leaf values
        [N]); a leaf value is for the player who moved into the node (see `leaf_values`)."""
        boards = np.stack([network_input(n.state) for n in nodes]).astype(np.int8, copy=False)
        out = self.evaluator.infer(boards)
        logits = np.asarray(out.logits, dtype=np.float32)
        points = policy_size(nodes[0].state)
        if logits.shape != (len(nodes), points):
            expected = (len(nodes), points)
            raise EvaluatorError(f"evaluator returned logits {logits.shape}, expected {expected}")
        name, version = str(out.model_name), str(out.model_version)
        checked = finite_outputs(logits, getattr(out, "values", None), name, version)
        values = leaf_values(checked, len(nodes))
        self.model_name, self.model_version = name, version
        self.evaluator_calls += 1
        self.evaluated_leaves += len(nodes)
        policies = []
        for row, n in zip(logits, nodes, strict=True):
            legal = n.legal if n.legal is not None else n.state.legal_mask()
            policies.append(masked_softmax(row, legal))
        return np.stack(policies), values

    def select_child(self, node: Node) -> int:
        assert node.priors is not None
        n, w = node.child_n.astype(np.float64), node.child_w
        q = np.divide(w, n, out=np.zeros_like(w), where=n > 0)  # unvisited: 0 (a draw)
        u = q + self.c_puct * node.priors * math.sqrt(max(n.sum(), 1.0)) / (1.0 + n)
        return int(np.argmax(u))  # first maximum: the lowest point index

    def descend(self) -> tuple[list[tuple[Node, int]], Node, str]:
        """Select a path with virtual loss; kind is 'eval', 'known' or 'pending' (a collision)."""
        path: list[tuple[Node, int]] = []
        node = self.root
        while True:
            i = self.select_child(node)
            path.append((node, i))
            node.child_n[i] += VIRTUAL_LOSS
            node.child_w[i] -= VIRTUAL_LOSS
            child = node.children.get(i)
            if child is None:
                child = Node(node.state.play(int(node.moves[i])))
                node.children[i] = child
                return path, child, "eval" if child.prepare() else "known"
            if child.terminal:
                return path, child, "known"
            if child.priors is None:
                return path, child, "pending"
            node = child

    @staticmethod
    def backup(path: list[tuple[Node, int]], value: float, visit: bool = True) -> None:
        """Replace the virtual loss by a real visit worth `value` to the last mover on the path."""
        for node, i in reversed(path):
            node.child_n[i] += (1.0 if visit else 0.0) - VIRTUAL_LOSS
            node.child_w[i] += (value if visit else 0.0) + VIRTUAL_LOSS
            value = -value

    def start(self) -> None:
        """Classify and evaluate the root (once, unless a reused root has network priors)."""
        if self._started:
            return
        root = self.root
        if not self.reused:
            root.prepare()
        if root.terminal or len(root.moves) == 0:
            raise GameOverError("the game is over: there is no legal move")
        if root.scale is None:  # fresh root, or a reused proven-win / forced node
            root.set_network_priors(self.evaluate([root])[0])
        self.proven_win = root.proven  # the side to move can make five: one visit shows it
        self._started = True

    def step(self, max_new: float = math.inf) -> int:
        """Run one batch of at most min(batch_size, max_new) simulations; returns how many."""
        batch: list[tuple[list[tuple[Node, int]], Node]] = []
        done = 0
        for _ in range(int(min(self.batch_size, max_new))):
            path, leaf, kind = self.descend()
            if kind == "pending":  # already waiting in this batch: evaluate first
                self.backup(path, 0.0, visit=False)
                break
            done += 1
            if kind == "eval":
                batch.append((path, leaf))
            else:
                self.backup(path, leaf.value)
        if batch:
            try:
                policies, values = self.evaluate_with_values([leaf for _, leaf in batch])
            except BaseException:
                for path, _leaf in batch:  # leave the tree clean: no virtual loss, no half node
                    self.backup(path, 0.0, visit=False)
                    node, i = path[-1]
                    del node.children[i]
                self.visits += done - len(batch)  # the known leaves were backed up
                raise
            for (path, leaf), policy, value in zip(batch, policies, values, strict=True):
                leaf.set_network_priors(policy)
                leaf.value = float(value)  # -v of the value head; 0 without one
                self.backup(path, leaf.value)
        self.visits += done
        return done

    def batches(
        self,
        max_visits: int,
        end: float = math.inf,
        should_stop: Callable[[], bool] | None = None,
        deadline: float | None = None,
    ) -> Iterator[int]:
        """Run batches until the root has `max_visits` visits (reused ones included; 0: no
        visit limit), the clock passes `end` (a time budget), `should_stop()` holds, or
        a proven win has been visited; yields the root's total visits after each batch.

        `deadline` is a hard end (e.g. the request deadline): a batch that would probably not
        finish before it (judged by the recent batches' durations) is not started.
        """
        self.start()
        limit = max_visits - self.reused_visits if max_visits > 0 else math.inf
        while self.visits < limit:
            now = self.clock()
            if now >= end or (deadline is not None and now + self.batch_seconds >= deadline):
                break
            if self.proven_win and self.total_visits > 0:
                break
            if should_stop is not None and should_stop():
                break
            done = self.step(limit - self.visits)
            elapsed = self.clock() - now
            # rises at once with a slow batch, decays slowly: a cautious guess for `deadline`
            self.batch_seconds = max(elapsed, 0.7 * self.batch_seconds + 0.3 * elapsed)
            if done == 0:
                break  # cannot happen on a clean tree (no leaf awaits the network between batches)
            yield self.total_visits

    def run(
        self,
        max_visits: int,
        end: float = math.inf,
        should_stop: Callable[[], bool] | None = None,
        deadline: float | None = None,
    ) -> None:
        for _ in self.batches(max_visits, end, should_stop, deadline):
            pass

    def result(self, top_children: int = 10, started: float | None = None) -> SearchResult:
        root = self.root
        assert root.priors is not None, "start() the search first"
        best = root.best_child()
        order = np.lexsort((root.moves, -root.priors, -root.child_n))
        n, w = root.child_n.astype(np.float64), root.child_w
        q = np.divide(w, n, out=np.zeros_like(w), where=n > 0)
        children = tuple(
            ChildStats(
                move=int(root.moves[i]),
                visits=int(n[i]),
                prior=root.network_prior(int(i)),
                value=float(q[i]),
                principal_variation=self.child_variation(int(i)),
            )
            for i in order[:top_children]
        )
        total = float(n.sum())
        started = self.started_at if started is None else started
        return SearchResult(
            move=int(root.moves[best]),
            visits=int(n[best]),
            total_visits=int(total),
            prior=root.network_prior(best),
            value=float(w.sum() / total) if total > 0 else 0.0,
            principal_variation=self.principal_variation(),
            model_name=self.model_name,
            model_version=self.model_version,
            children=children,
            evaluator_calls=self.evaluator_calls,
            evaluated_leaves=self.evaluated_leaves,
            elapsed_s=self.clock() - started,
            reused_visits=self.reused_visits,
            new_visits=self.visits,
        )

    def principal_variation(self) -> tuple[int, ...]:
        """Follow the most visited children from the root (the first move is always included)."""
        return _variation(self.root, first_always=True)

    def child_variation(self, i: int) -> tuple[int, ...]:
        """The root's candidate i, then the most visited line below it."""
        child = self.root.children.get(i)
        rest = _variation(child, first_always=False) if child is not None else ()
        return (int(self.root.moves[i]), *rest)



def _variation(node: Node | None, first_always: bool) -> tuple[int, ...]:
    pv: list[int] = []
    while node is not None and not node.terminal and node.priors is not None:
        i = node.best_child()
        if (pv or not first_always) and node.child_n[i] < 1:
            break
        pv.append(int(node.moves[i]))
        node = node.children.get(i)
    return tuple(pv)


def search(
    state: State,
    evaluator: PolicyEvaluator,
    *,
    max_visits: int = 0,
    max_time_ms: int = 0,
    deadline: float | None = None,
    c_puct: float = DEFAULT_C_PUCT,
    batch_size: int = DEFAULT_BATCH_SIZE,
    top_children: int = 10,
    tree: Node | None = None,
    should_stop: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SearchResult:
    """Choose a move for the side to move in `state`.

    Budget: `max_visits` root visits and/or `max_time_ms` of wall time (0 = unlimited, but not
    both). `deadline` (an instant of `clock`, `time.monotonic` by default) cuts the search
    short too, e.g. the gRPC request deadline (no batch is started that would probably end
    after it), and so does `should_stop()` (checked between batches). The root is always
    evaluated once, even past the deadline, so there is always a move (the highest prior one if
    no simulation ran). `tree`: a node of an earlier search for `state` to continue (its visits
    count towards `max_visits`). Evaluator errors propagate.
    Raises GameOverError when the position has no legal move.
    """
    if max_visits < 0 or max_time_ms < 0:
        raise ValueError(f"budgets must be >= 0, got {max_visits=} {max_time_ms=}")
    if max_visits == 0 and max_time_ms == 0:
        raise ValueError("give max_visits or max_time_ms (both 0 would search forever)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if tree is not None and not np.array_equal(tree.state.board, state.board):
        raise ValueError("tree is not a search of this position")
    started = clock()
    end = started + max_time_ms / 1000.0 if max_time_ms > 0 else math.inf
    s = Search(tree if tree is not None else state, evaluator, c_puct=c_puct,
               batch_size=batch_size, clock=clock)
    s.run(max_visits, end, should_stop, deadline)
    return s.result(top_children, started)
