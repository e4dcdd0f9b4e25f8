"""PUCT tree search for any registered game, guided by a policy network (and its value head).

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

**Compiled.** The tree of every game with compiled rules is `services.search.compiled_tree`:
node and edge pools in numpy arrays, a batch of playouts (selection, the game's rules, the new
nodes' network inputs) and the priors and backup each run in one numba call, with the game's
rules compiled in (`Game.search_kernels`); Python calls the evaluator once per batch. It gives
the answers of the interpreted tree (`services.search.interpreted`, compared visit for visit in
tests/test_compiled_search.py) at a fraction of its CPU (benchmarks/search_speed.py); a game
without compiled rules is searched on that interpreted tree (`Search` hands it over). A `Node`
here is a view of one node of those arrays. numba compiles the kernels on first use: a process
that serves searches calls `warm_up(game)` before its first request.

**Exploration, off by default**: Dirichlet noise on the root's priors (`noise_alpha`, mixed
in with weight `noise_weight`, 0.25 as AlphaZero) and a move drawn with probability visits **
(1 / `temperature`) instead of the most visited one; both from a generator seeded with `seed`,
so a seeded search repeats itself. The noise is only seen by the root's selection: the tree
keeps the network's priors (results report those, and a reused tree is not skewed).

The search talks to a `PolicyEvaluator` (anything with `infer(boards) -> logits/values/model
info`, e.g. `services.triton.client.PolicyClient`), never to Triton directly. The boards it
sends are `network_input(state)` (the game's `network_input`: the int8 board [S, S] for Gomoku,
the compact int8 [4, S, S] for Go).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from services.evaluator import (
    EvaluatorError,
    PolicyEvaluator,
    finite_outputs,
)
from services.games.base import BLACK, WHITE, Game
from services.search import compiled_tree as ct
from services.search import interpreted
from services.search.puct import (  # the search's answers and options, re-exported
    DEFAULT_BATCH_SIZE,
    DEFAULT_C_PUCT,
    DEFAULT_NOISE_WEIGHT,
    VIRTUAL_LOSS,
    ChildStats,
    GameOverError,
    SearchLoop,
    SearchResult,
    State,
    infer_leaves,
    leaf_values,
    masked_softmax,
    network_input,
    policy_size,
    run_search,
)


class _TreeData:
    """One compiled tree with what its views need: the position of node 0, the game's
    compiled search, the tree-wide parameters and the batch's scratch arrays."""

    def __init__(self, state: State) -> None:
        game = state.game
        kernels = game.search_kernels()
        if kernels is None:
            raise ValueError(f"{game.title} has no compiled search kernels")
        pos = game.search_position(state)
        self.state = state
        self.compiled = ct.compiled_search(kernels)
        self.iparams = np.ascontiguousarray(pos.iparams, np.int64)
        self.fparams = np.ascontiguousarray(pos.fparams, np.float64)
        self.points = game.policy_size(state.size)
        self.input_shape = tuple(game.input_shape(state.size))
        self.tree = ct.Tree(len(pos.cells), len(pos.aux))
        self.tree.cells[0] = pos.cells
        self.tree.aux[0] = pos.aux
        self.tree.used[0] = 1
        self._scratch: dict[int, tuple[np.ndarray, ...]] = {}

    def scratch(self, batch: int) -> tuple[np.ndarray, ...]:
        """(leaves, inputs, legal, candidates) for batches of up to `batch` leaves."""
        if batch not in self._scratch:
            width = int(np.prod(self.input_shape))
            self._scratch[batch] = (np.zeros(batch, np.int64),
                                    np.zeros((batch, width), np.int8),
                                    np.zeros((batch, self.points), np.bool_),
                                    np.zeros(self.points, np.int64))
        return self._scratch[batch]


class Node:
    """A node of a compiled search tree: a view of its row of the tree's arrays (statistics
    read and written there, so two views of one node agree).

    `moves` are the candidates (ascending), `child_n` / `child_w` their visits (float32,
    exact integers) and total values, `priors` their priors (None until the network's came,
    and for a terminal node), `scale` the network's total probability of the candidates (None
    when the priors did not come from it): `priors * scale` is each candidate's probability
    over all legal points. `value` is the node's worth to the player who moved into it.
    """

    __slots__ = ("_data", "_state", "index")

    def __init__(self, data: _TreeData, index: int, state: State | None = None) -> None:
        self._data = data
        self.index = index
        self._state = state

    @property
    def tree_bytes(self) -> int:
        """Bytes held by the whole tree this node belongs to."""
        return self._data.tree.nbytes

    def _row(self) -> tuple[int, int, int]:
        ni = self._data.tree.nodes_i[self.index]
        return int(ni[ct.FIRST]), int(ni[ct.COUNT]), int(ni[ct.FLAGS])

    @property
    def state(self) -> State:
        """The node's position (replayed from the tree's first position on first use)."""
        if self._state is None:
            t = self._data.tree
            moves = []
            node = self.index
            while node != 0:
                moves.append(int(t.edge_move[t.nodes_i[node, ct.PARENT_EDGE]]))
                node = int(t.nodes_i[node, ct.PARENT])
            state = self._data.state
            for m in reversed(moves):
                state = state.play(m)
            self._state = state
        return self._state

    @property
    def terminal(self) -> bool:
        return bool(self._row()[2] & ct.TERMINAL)

    @property
    def proven(self) -> bool:
        """The side to move can make its winning move at once (value -1)."""
        return bool(self._row()[2] & ct.PROVEN)

    @property
    def value(self) -> float:
        return float(self._data.tree.nodes_f[self.index, ct.VALUE])

    @property
    def moves(self) -> np.ndarray:
        first, count, _ = self._row()
        return self._data.tree.edge_move[first:first + count]

    @property
    def priors(self) -> np.ndarray | None:
        first, count, flags = self._row()
        return self._data.tree.edge_prior[first:first + count] if flags & ct.READY else None

    @property
    def scale(self) -> float | None:
        s = float(self._data.tree.nodes_f[self.index, ct.SCALE])
        return None if math.isnan(s) else s

    @property
    def child_n(self) -> np.ndarray:
        first, count, _ = self._row()
        return self._data.tree.edge_n[first:first + count]

    @child_n.setter
    def child_n(self, values: np.ndarray) -> None:
        first, count, _ = self._row()
        self._data.tree.edge_n[first:first + count] = values

    @property
    def child_w(self) -> np.ndarray:
        first, count, _ = self._row()
        return self._data.tree.edge_w[first:first + count]

    @child_w.setter
    def child_w(self, values: np.ndarray) -> None:
        first, count, _ = self._row()
        self._data.tree.edge_w[first:first + count] = values

    @property
    def children(self) -> dict[int, Node]:
        """The expanded children by candidate index."""
        first, count, _ = self._row()
        kids = self._data.tree.edge_child[first:first + count]
        return {int(i): Node(self._data, int(kids[i])) for i in np.flatnonzero(kids >= 0)}

    @property
    def visits(self) -> int:
        """Simulations that went through this node to one of its children."""
        return int(self.child_n.sum())

    def network_prior(self, i: int) -> float:
        """Probability of candidate i over all legal points (0 when unknown)."""
        priors, scale = self.priors, self.scale
        assert priors is not None
        return float(priors[i] * scale) if scale is not None else 0.0

    def best_child(self) -> int:
        """Most visited child; ties go to the higher prior, then the lower point index."""
        return _best_child(self._data.tree, self.index)

    def child(self, move: int) -> Node | None:
        """The expanded child reached by `move`, or None."""
        moves = self.moves
        i = int(np.searchsorted(moves, move))
        if i < len(moves) and moves[i] == move:
            first = self._row()[0]
            kid = int(self._data.tree.edge_child[first + i])
            return Node(self._data, kid) if kid >= 0 else None
        return None

    def compacted(self) -> Node:
        """This node as the root of a new tree holding only its subtree (what a cache keeps:
        the rest of the old tree's pools is freed with it)."""
        data = object.__new__(_TreeData)
        data.__dict__.update(self._data.__dict__)
        data.state = self.state
        data.tree = self._data.tree.subtree(self.index)
        data._scratch = {}
        return Node(data, 0, self.state)


def _colours(data: _TreeData, nodes: np.ndarray) -> np.ndarray:
    """int8 [N]: the side to move at the tree's `nodes`. Every move (a pass too) hands the
    turn to the other colour, so a node an odd number of moves below node 0 (`data.state`)
    has the other side to move than it."""
    parent = data.tree.nodes_i[:, ct.PARENT]
    at = np.asarray(nodes, np.int64).copy()
    odd = np.zeros(len(at), bool)
    while (below := at > 0).any():
        odd ^= below
        at = np.where(below, parent[at], 0)
    first = int(data.state.to_move)
    return np.where(odd, BLACK + WHITE - first, first).astype(np.int8)


def _best_child(tree: ct.Tree, node: int) -> int:
    first, count = int(tree.nodes_i[node, ct.FIRST]), int(tree.nodes_i[node, ct.COUNT])
    moves = tree.edge_move[first:first + count]
    priors = tree.edge_prior[first:first + count]
    n = tree.edge_n[first:first + count]
    return int(np.lexsort((moves, -priors, -n))[0])


class Search(SearchLoop):
    """One PUCT search, run batch by batch.

    `root` is a position (a fresh tree) or a `Node` of an earlier search (reuse: its visits,
    `reused_visits`, count towards the budget; the search goes on in that tree). Use:
    `start()`, then iterate `batches(...)` (or call `run`), then `result()`. Not thread-safe:
    one search belongs to one thread. `clock` (seconds, `time.monotonic` by default) is what
    time budgets, deadlines and `elapsed_s` are read from; a test passes a clock of its own to
    check them without waiting. `noise_alpha` > 0 mixes Dirichlet noise into the root's
    priors for its selection (weight `noise_weight`); `temperature` > 0 draws the result's
    move with probability visits ** (1 / temperature); `seed` seeds both.
    """

    def __new__(cls, root: State | Node | interpreted.Node, *args: Any, **kwargs: Any
                ) -> Search:
        """The search of a game without compiled rules (`Game.search_kernels` None), or one
        continuing a tree of such a search, runs on the interpreted tree
        (`services.search.interpreted.Search`: the same API and answers, slower)."""
        if cls is Search and (isinstance(root, interpreted.Node) or (
                not isinstance(root, Node) and root.game.search_kernels() is None)):
            return interpreted.Search(root, *args, **kwargs)  # type: ignore[return-value]
        return super().__new__(cls)

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
        noise_alpha: float = 0.0,
        noise_weight: float = DEFAULT_NOISE_WEIGHT,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> None:
        self._options(evaluator, c_puct, batch_size)
        self._explore(noise_alpha, noise_weight, temperature, seed)
        self.reused = isinstance(root, Node)
        if isinstance(root, Node):
            self.root = root
            if self.root.priors is None or self.root.terminal:
                raise ValueError("a reused root must be an expanded, non-terminal node")
        else:
            self.root = Node(_TreeData(root), 0, root)
        self._data = self.root._data
        self._count_from(self.root.visits if self.reused else 0, model_name, model_version, clock)
        self._started = False

    def _evaluate(self, n: int, legal: np.ndarray, inputs: np.ndarray, nodes: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """One evaluator call for the first `n` rows of `inputs`, the positions of the tree's
        `nodes[:n]`: (the masked softmax's numerators [n, points], float64, see
        `compiled_tree.set_priors`; leaf values [n] for the player who moved into each node,
        see `leaf_values`)."""
        data = self._data
        boards = inputs[:n].reshape(n, *data.input_shape).copy()
        out = infer_leaves(self.evaluator, boards, lambda: _colours(data, nodes[:n]))
        logits = np.asarray(out.logits, dtype=np.float32)
        if logits.shape != (n, data.points):
            expected = (n, data.points)
            raise EvaluatorError(f"evaluator returned logits {logits.shape}, expected {expected}")
        name, version = str(out.model_name), str(out.model_version)
        checked = finite_outputs(logits, getattr(out, "values", None), name, version)
        values = leaf_values(checked, n)
        self.model_name, self.model_version = name, version
        self.evaluator_calls += 1
        self.evaluated_leaves += n
        return np.exp(ct.shift_logits(logits, legal, n)), values

    def start(self) -> None:
        """Classify and evaluate the root (once, unless a reused root has network priors)."""
        if self._started:
            return
        data, root = self._data, self.root.index
        t = data.tree
        _, inputs, legal, candidates = data.scratch(1)
        if not self.reused:
            t.reserve(1, data.points)
            data.compiled.new_root(t.arrays, data.iparams, data.fparams, legal[0], candidates)
        if self.root.terminal or len(self.root.moves) == 0:
            raise GameOverError("the game is over: there is no legal move")
        if self.root.scale is None:  # fresh root, or a reused proven-win / forced node
            if self.reused:
                data.compiled.legal_of(t.arrays, root, data.iparams, data.fparams, legal[0],
                                       candidates)
            data.compiled.encode_node(t.arrays, root, data.iparams, data.fparams, inputs[0])
            e, _ = self._evaluate(1, legal, inputs, np.array([root]))
            ct.set_priors(t.arrays, root, e[0], np.empty(data.points))
        self.proven_win = self.root.proven  # the side to move can make five: one visit shows it
        self._noise_root()
        self._started = True

    def step(self, max_new: float = math.inf) -> int:
        """Run one batch of at most min(batch_size, max_new) simulations; returns how many."""
        data = self._data
        n = int(min(self.batch_size, max_new))
        if n <= 0:
            return 0
        t = data.tree
        t.reserve(n, n * data.points)
        leaves, inputs, legal, candidates = data.scratch(self.batch_size)
        root = self.root.index
        done, waiting = data.compiled.descend_batch(
            t.arrays, root, n, float(self.c_puct), self._root_priors, data.iparams,
            data.fparams, leaves, inputs, legal, candidates)
        if waiting:
            try:
                e, values = self._evaluate(waiting, legal, inputs, leaves)
            except BaseException:  # leave the tree clean: no virtual loss, no half node
                ct.abandon_batch(t.arrays, leaves, waiting, root)
                self.visits += done - waiting  # the known leaves were backed up
                raise
            ct.apply_batch(t.arrays, leaves, waiting, e, values, root)
        self.visits += done
        return done

    def principal_variation(self) -> tuple[int, ...]:
        """Follow the most visited children from the root (the first move is always included)."""
        return _variation(self._data.tree, self.root.index, first_always=True)

    def child_variation(self, i: int) -> tuple[int, ...]:
        """The root's candidate i, then the most visited line below it."""
        t = self._data.tree
        e = int(t.nodes_i[self.root.index, ct.FIRST]) + i
        child = int(t.edge_child[e])
        rest = _variation(t, child, first_always=False) if child >= 0 else ()
        return (int(t.edge_move[e]), *rest)


def _variation(tree: ct.Tree, node: int, first_always: bool) -> tuple[int, ...]:
    pv: list[int] = []
    while node >= 0 and tree.nodes_i[node, ct.FLAGS] & ct.READY:
        i = _best_child(tree, node)
        e = int(tree.nodes_i[node, ct.FIRST]) + i
        if (pv or not first_always) and tree.edge_n[e] < 1:
            break
        pv.append(int(tree.edge_move[e]))
        node = int(tree.edge_child[e])
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
    noise_alpha: float = 0.0,
    noise_weight: float = DEFAULT_NOISE_WEIGHT,
    temperature: float = 0.0,
    seed: int | None = None,
) -> SearchResult:
    """Choose a move for the side to move in `state`.

    Budget: `max_visits` root visits and/or `max_time_ms` of wall time (0 = unlimited, but not
    both). `deadline` (an instant of `clock`, `time.monotonic` by default) cuts the search
    short too, e.g. the gRPC request deadline (no batch is started that would probably end
    after it), and so does `should_stop()` (checked between batches). The root is always
    evaluated once, even past the deadline, so there is always a move (the highest prior one if
    no simulation ran). `tree`: a node of an earlier search for `state` to continue (its visits
    count towards `max_visits`). Exploration (`noise_alpha`, `noise_weight`, `temperature`,
    `seed`): see `Search`. Evaluator errors propagate.
    Raises GameOverError when the position has no legal move.
    """
    return run_search(Search, state, evaluator, max_visits=max_visits, max_time_ms=max_time_ms,
                      deadline=deadline, c_puct=c_puct, batch_size=batch_size,
                      top_children=top_children, tree=tree, should_stop=should_stop, clock=clock,
                      noise_alpha=noise_alpha, noise_weight=noise_weight,
                      temperature=temperature, seed=seed)


@dataclass(frozen=True)
class _UniformOutput:
    logits: np.ndarray
    values: None = None
    model_name: str = "warm-up"
    model_version: str = ""


class _Uniform:
    """Zero logits for every board and no value: the warm-up's evaluator (no network)."""

    def __init__(self, points: int) -> None:
        self.points = points

    def infer(self, boards: np.ndarray) -> _UniformOutput:
        return _UniformOutput(np.zeros((len(boards), self.points), np.float32))


WARM_UP_VISITS = 48


def warm_up(game: Game) -> None:
    """`game.warm_up()` (its rules), then every compiled kernel of its search tree: a tiny
    search of its start position with uniform logits, its most visited child kept as a tree
    cache keeps it (`Node.compacted`) and searched on (reuse), and the kernels only a failed
    evaluator call or a reused unevaluated root reach, called on nothing.

    Why: numba compiles the tree's kernels on their first call, about 18 s for a game's set
    where its disk cache is missing or not writable (the service's read-only pod); a process
    that serves searches runs this before it listens so the first request does not pay it.
    With the cache present it costs milliseconds (the kernels are loaded)."""
    game.warm_up()
    if game.search_kernels() is None:
        return
    state = game.start()
    evaluator = _Uniform(game.policy_size(state.size))
    first = Search(state, evaluator, batch_size=DEFAULT_BATCH_SIZE)
    first.run(WARM_UP_VISITS)
    child = first.root.child(first.result().move)
    if child is not None and child.priors is not None and not child.terminal:
        Search(child.compacted(), evaluator).run(child.visits + DEFAULT_BATCH_SIZE)
    data, tree = first._data, first._data.tree
    leaves, _, legal, candidates = data.scratch(DEFAULT_BATCH_SIZE)
    data.compiled.legal_of(tree.arrays, 0, data.iparams, data.fparams, legal[0], candidates)
    ct.abandon_batch(tree.arrays, leaves, 0, 0)


__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_C_PUCT", "DEFAULT_NOISE_WEIGHT", "VIRTUAL_LOSS",
           "ChildStats", "GameOverError", "Node", "Search", "SearchResult", "State",
           "masked_softmax", "network_input", "policy_size", "search", "warm_up"]
