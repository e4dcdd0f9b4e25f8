"""The interpreted PUCT tree: the search of a game that gives no compiled rules, and the reference
the compiled tree is checked against.

Why it stays: a new game is a package with its rules in Python (`Game.expand`,
`Position.play`); it is searchable at once, before anyone writes its compiled kernels
(`Game.search_kernels`), and `services.search.mcts.Search` hands such a game's positions here.
The compiled tree (`services.search.compiled_tree`) must give this tree's answers visit for
visit (tests/test_compiled_search.py), so this is also the plainest statement of what the
search does: a `Node` object per position, the game's `Position.play` and `Game.expand` per
playout, the rules of `services.search.mcts` (read its docstring) and the shared answers, loop
and exploration of `services.search.puct`. It costs 100-300 µs of CPU a playout
(benchmarks/search_speed.py), fine for small games and tests.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from services.evaluator import EvaluatorError, PolicyEvaluator, finite_outputs
from services.search.puct import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_C_PUCT,
    DEFAULT_NOISE_WEIGHT,
    VIRTUAL_LOSS,
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

# bytes of a node object and its dict of children, besides its arrays (sys.getsizeof, 64-bit)
_NODE_OVERHEAD_BYTES = 200


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

    def compacted(self) -> Node:
        """This node as the root of a tree of its own (what a cache keeps): it is one already,
        a node holding no reference to its parent."""
        return self

    @property
    def tree_bytes(self) -> int:
        """Bytes held by this node's subtree (its arrays and an estimate per node object)."""
        total, stack = 0, [self]
        while stack:
            node = stack.pop()
            total += _NODE_OVERHEAD_BYTES + node.moves.nbytes + node.child_n.nbytes + \
                node.child_w.nbytes + (node.priors.nbytes if node.priors is not None else 0)
            stack.extend(node.children.values())
        return total

    def child(self, move: int) -> Node | None:
        """The expanded child reached by `move`, or None."""
        i = int(np.searchsorted(self.moves, move))
        if i < len(self.moves) and self.moves[i] == move:
            return self.children.get(i)
        return None



class Search(SearchLoop):
    """One PUCT search on the interpreted tree, run batch by batch: `services.search.mcts.Search`
    (`root` a position or a reused `Node`, `clock`, exploration, the use: see there)."""

    def __init__(self, root: State | Node, evaluator: PolicyEvaluator, *,
                 c_puct: float = DEFAULT_C_PUCT, batch_size: int = DEFAULT_BATCH_SIZE,
                 model_name: str = "", model_version: str = "",
                 clock: Callable[[], float] = time.monotonic, noise_alpha: float = 0.0,
                 noise_weight: float = DEFAULT_NOISE_WEIGHT, temperature: float = 0.0,
                 seed: int | None = None) -> None:
        self._options(evaluator, c_puct, batch_size)
        self._explore(noise_alpha, noise_weight, temperature, seed)
        self.reused = isinstance(root, Node)
        self.root = root if isinstance(root, Node) else Node(root)
        if self.reused and (self.root.priors is None or self.root.terminal):
            raise ValueError("a reused root must be an expanded, non-terminal node")
        self._count_from(self.root.visits if self.reused else 0, model_name, model_version, clock)
        self._started = False

    def evaluate(self, nodes: list[Node]) -> np.ndarray:
        """One evaluator call for `nodes`; returns their legal-point policies [N, size*size]."""
        return self.evaluate_with_values(nodes)[0]

    def evaluate_with_values(self, nodes: list[Node]) -> tuple[np.ndarray, np.ndarray]:
        """One evaluator call for `nodes`: (legal-point policies [N, size*size], leaf values
        [N]); a leaf value is for the player who moved into the node (see `leaf_values`)."""
        boards = np.stack([network_input(n.state) for n in nodes]).astype(np.int8, copy=False)
        out = infer_leaves(self.evaluator, boards,
                           lambda: np.array([n.state.to_move for n in nodes], np.int8))
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
        priors = self._root_priors if node is self.root and len(self._root_priors) else \
            node.priors  # the root's noise is seen by the root's selection alone
        n, w = node.child_n.astype(np.float64), node.child_w
        q = np.divide(w, n, out=np.zeros_like(w), where=n > 0)  # unvisited: 0 (a draw)
        u = q + self.c_puct * priors * math.sqrt(max(n.sum(), 1.0)) / (1.0 + n)
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
        self._noise_root()
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


def search(state: State, evaluator: PolicyEvaluator, *, max_visits: int = 0,
           max_time_ms: int = 0, deadline: float | None = None, c_puct: float = DEFAULT_C_PUCT,
           batch_size: int = DEFAULT_BATCH_SIZE, top_children: int = 10,
           tree: Node | None = None, should_stop: Callable[[], bool] | None = None,
           clock: Callable[[], float] = time.monotonic, **exploration: float | int | None
           ) -> SearchResult:
    """`services.search.mcts.search` (budgets, deadline, reuse, exploration, errors: see there)
    on this tree, whatever the game."""
    return run_search(Search, state, evaluator, max_visits=max_visits, max_time_ms=max_time_ms,
                      deadline=deadline, c_puct=c_puct, batch_size=batch_size,
                      top_children=top_children, tree=tree, should_stop=should_stop, clock=clock,
                      **exploration)


__all__ = ["Node", "Search", "search"]
