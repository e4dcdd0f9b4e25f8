"""The PUCT search tree in numba: node and edge pools in numpy arrays, selection, expansion,
virtual loss, priors and backup compiled, the game's rules compiled in (`Game.search_kernels`).

Why: the interpreted tree (a `Position` object, a `Game.expand` and a dozen small numpy calls
per playout) costs 100-300 µs of CPU a playout, more than a small network on a GPU. Here a
batch of playouts runs in one compiled call: descend with virtual loss, play the move, classify
the new node with the game's kernels, write its network input; Python calls the evaluator once
per batch, and one more compiled call turns the logits into priors and backs the values up.

The rules of the search are `services.search.mcts`'s (read its docstring): the same PUCT
formula evaluated in the same order, the first maximum (lowest point index) on ties, virtual
loss 1 added to N and taken from W, the masked softmax in float64 summed pairwise as numpy sums
(`pairwise_sum`, bit for bit), so that both trees give the same visits and moves for the same
evaluator (tests/test_compiled_search.py runs the interpreted reference beside it).

Layout (`Tree`): node i has `nodes_i[i]` = [first edge, candidates, flags, parent, parent
edge], `nodes_f[i]` = [value, scale (NaN: none)], its position in `cells[i]` and `aux[i]`;
its candidates are edges first..first+count-1 (`edge_move` ascending, `edge_child` -1 until
expanded, `edge_n` float32 visits, `edge_w` float64 total value, `edge_prior`). Pools grow by
doubling between batches (`Tree.reserve`), never during a compiled call.

The game's kernels are bound into the generic functions here by `compiled_search`, which makes
one copy of each per game with the kernels as its globals, cached on disk under the game's name
and kernels' version (numba cannot cache a closure over other compiled functions).
"""

from __future__ import annotations

import math
import types
from functools import cache
from typing import Any, NamedTuple

import numpy as np

from services.compiled import kernel
from services.games.search_kernels import KIND_PROVEN, KIND_TERMINAL, SearchKernels
from services.search.puct import VIRTUAL_LOSS  # one source for both trees

# nodes_i columns
FIRST, COUNT, FLAGS, PARENT, PARENT_EDGE = 0, 1, 2, 3, 4
NODE_INTS = 5
# nodes_f columns
VALUE, SCALE = 0, 1
# flags
TERMINAL, PROVEN, READY, PENDING = 1, 2, 4, 8

TreeArrays = tuple[np.ndarray, ...]  # nodes_i, nodes_f, cells, aux, edge_*, used


# ---- generic kernels ---------------------------------------------------------------------
@kernel
def _block_sum(a: np.ndarray, lo: int, n: int) -> float:
    """numpy's pairwise summation of at most 128 float64: 8 partial sums (below 8: a plain
    loop from -0.0)."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    stop = n - n % 8
    while i < stop:
        j = lo + i
        r0 += a[j]
        r1 += a[j + 1]
        r2 += a[j + 2]
        r3 += a[j + 3]
        r4 += a[j + 4]
        r5 += a[j + 5]
        r6 += a[j + 6]
        r7 += a[j + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


# numpy splits a longer run in two halves (the first a multiple of 8) and sums each the same
# way. Written as a chain of levels, not as a recursion: numba cannot load a cached function
# that calls a recursive one. Six levels cover 4,000 elements; policies have at most 626.
@kernel
def _sum2(a: np.ndarray, lo: int, n: int) -> float:
    if n <= 128:
        return _block_sum(a, lo, n)
    n2 = n // 2 - (n // 2) % 8
    return _block_sum(a, lo, n2) + _block_sum(a, lo + n2, n - n2)


@kernel
def _sum3(a: np.ndarray, lo: int, n: int) -> float:
    if n <= 128:
        return _block_sum(a, lo, n)
    n2 = n // 2 - (n // 2) % 8
    return _sum2(a, lo, n2) + _sum2(a, lo + n2, n - n2)


@kernel
def _sum4(a: np.ndarray, lo: int, n: int) -> float:
    if n <= 128:
        return _block_sum(a, lo, n)
    n2 = n // 2 - (n // 2) % 8
    return _sum3(a, lo, n2) + _sum3(a, lo + n2, n - n2)


@kernel
def _sum5(a: np.ndarray, lo: int, n: int) -> float:
    if n <= 128:
        return _block_sum(a, lo, n)
    n2 = n // 2 - (n // 2) % 8
    return _sum4(a, lo, n2) + _sum4(a, lo + n2, n - n2)


@kernel
def pairwise_sum(a: np.ndarray, lo: int, n: int) -> float:
    """The sum of a[lo:lo + n] added in numpy's order (its pairwise summation of float64), so
    a float64 sum here equals numpy's `sum` to the bit (up to 4,000 elements)."""
    if n <= 128:
        return _block_sum(a, lo, n)
    n2 = n // 2 - (n // 2) % 8
    return _sum5(a, lo, n2) + _sum5(a, lo + n2, n - n2)


@kernel
def select(edge_n: np.ndarray, edge_w: np.ndarray, first: int, count: int, priors: np.ndarray,
           prior_first: int, c_puct: float) -> int:
    """PUCT: the candidate maximising q + c_puct * prior * sqrt(max(sum n, 1)) / (1 + n)
    (q = w / n, 0 while unvisited), the first maximum on ties (the lowest point)."""
    total = 0.0
    for i in range(count):
        total += np.float64(edge_n[first + i])
    s = math.sqrt(max(total, 1.0))
    best = -np.inf
    chosen = 0
    for i in range(count):
        n = np.float64(edge_n[first + i])
        q = edge_w[first + i] / n if n > 0 else 0.0
        u = q + c_puct * priors[prior_first + i] * s / (1.0 + n)
        if u > best:
            best = u
            chosen = i
    return chosen


@kernel
def backup(tree: TreeArrays, leaf: int, root: int, value: float, visit: bool) -> None:
    """Replace the virtual loss on the path root..leaf by a visit worth `value` to the player
    who moved into `leaf` (or, `visit` False, just take the virtual loss back)."""
    nodes_i, edge_n, edge_w = tree[0], tree[6], tree[7]
    node = leaf
    while node != root:
        e = nodes_i[node, PARENT_EDGE]
        edge_n[e] += (1.0 if visit else 0.0) - VIRTUAL_LOSS
        edge_w[e] += (value if visit else 0.0) + VIRTUAL_LOSS
        value = -value
        node = nodes_i[node, PARENT]


@kernel
def shift_logits(logits: np.ndarray, legal: np.ndarray, n: int) -> np.ndarray:
    """float64 [n, P]: each legal logit minus its row's legal maximum, -inf elsewhere (a row
    with no legal entry keeps its logits, shifted by 0): `np.exp` of it is the masked
    softmax's numerator, as `numerics.masked_softmax` computes it."""
    points = logits.shape[1]
    out = np.empty((n, points), np.float64)
    for k in range(n):
        top = -np.inf
        for p in range(points):
            if legal[k, p]:
                v = np.float64(logits[k, p])
                if v > top:
                    top = v
        if top == -np.inf:
            top = 0.0
        for p in range(points):
            out[k, p] = np.float64(logits[k, p]) - top if legal[k, p] else -np.inf
    return out


@kernel
def set_priors(tree: TreeArrays, node: int, e: np.ndarray, scratch: np.ndarray) -> None:
    """The node's priors from the numerators `e` of its masked softmax (one row): the policy
    e / sum(e) over its candidates, renormalised (uniform when they have no mass), and its
    scale (their total policy), as the interpreted tree computes them."""
    nodes_i, nodes_f, edge_move, edge_prior = tree[0], tree[1], tree[4], tree[8]
    total = pairwise_sum(e, 0, e.shape[0])
    first, count = nodes_i[node, FIRST], nodes_i[node, COUNT]
    for i in range(count):
        scratch[i] = e[edge_move[first + i]] / total if total != 0 else 0.0
    mass = pairwise_sum(scratch, 0, count)
    for i in range(count):
        edge_prior[first + i] = scratch[i] / mass if mass > 0 else 1.0 / count
    nodes_f[node, SCALE] = mass
    nodes_i[node, FLAGS] = (nodes_i[node, FLAGS] & ~PENDING) | READY


@kernel
def apply_batch(tree: TreeArrays, leaves: np.ndarray, n: int, e: np.ndarray,
                values: np.ndarray, root: int) -> None:
    """The evaluated leaves get their priors and values, in batch order, each backed up."""
    scratch = np.empty(e.shape[1], np.float64)
    for k in range(n):
        node = leaves[k]
        set_priors(tree, node, e[k], scratch)
        tree[1][node, VALUE] = values[k]
        backup(tree, node, root, values[k], True)


@kernel
def abandon_batch(tree: TreeArrays, leaves: np.ndarray, n: int, root: int) -> None:
    """The evaluator failed: the leaves awaiting it leave the tree and their paths lose the
    virtual loss (their nodes stay unused in the pool)."""
    nodes_i, edge_child = tree[0], tree[5]
    for k in range(n):
        node = leaves[k]
        backup(tree, node, root, 0.0, False)
        edge_child[nodes_i[node, PARENT_EDGE]] = -1


@kernel
def subtree_size(tree: TreeArrays, root: int) -> tuple[int, int]:
    """(nodes, edges) of the subtree below `root`."""
    nodes_i, edge_child = tree[0], tree[5]
    stack = [root]
    nodes = 0
    edges = 0
    while len(stack):
        node = stack.pop()
        nodes += 1
        first, count = nodes_i[node, FIRST], nodes_i[node, COUNT]
        edges += count
        for i in range(count):
            child = edge_child[first + i]
            if child >= 0:
                stack.append(child)
    return nodes, edges


@kernel
def copy_subtree(src: TreeArrays, root: int, dst: TreeArrays) -> None:
    """The subtree below `root` into the empty tree `dst` (root first, breadth first)."""
    s_ni, s_nf, s_cells, s_aux, s_move, s_child, s_n, s_w, s_p = src[:9]
    d_ni, d_nf, d_cells, d_aux, d_move, d_child, d_n, d_w, d_p, d_used = dst
    queue = [root]  # source nodes in their new order
    parents = [-1]  # their new parent and parent edge
    parent_edges = [-1]
    head = 0
    n_edges = 0
    while head < len(queue):
        node = queue[head]
        me = head
        head += 1
        d_ni[me, :] = s_ni[node, :]
        d_ni[me, PARENT] = parents[me]
        d_ni[me, PARENT_EDGE] = parent_edges[me]
        d_nf[me, :] = s_nf[node, :]
        d_cells[me, :] = s_cells[node, :]
        d_aux[me, :] = s_aux[node, :]
        first, count = s_ni[node, FIRST], s_ni[node, COUNT]
        d_ni[me, FIRST] = n_edges
        for i in range(count):
            e = n_edges + i
            d_move[e] = s_move[first + i]
            d_n[e] = s_n[first + i]
            d_w[e] = s_w[first + i]
            d_p[e] = s_p[first + i]
            child = s_child[first + i]
            if child >= 0:
                d_child[e] = len(queue)
                queue.append(child)
                parents.append(me)
                parent_edges.append(e)
            else:
                d_child[e] = -1
        n_edges += count
    d_used[0] = len(queue)
    d_used[1] = n_edges


# ---- per game: the game's kernels bound in as globals ------------------------------------
def _classify_node(tree, node, iparams, fparams, legal, candidates):
    """Classify the new `node` by the game's rules and give it its candidates; True when its
    priors must come from the network (it then waits, PENDING)."""
    nodes_i, nodes_f, cells, aux, edge_move, edge_child, edge_n, edge_w, edge_prior, used = tree
    kind, n, value = classify(cells[node], aux[node], iparams, fparams, legal,  # noqa: F821
                              candidates)
    nodes_f[node, SCALE] = np.nan
    if kind == KIND_TERMINAL:
        nodes_i[node, FLAGS] = TERMINAL
        nodes_i[node, FIRST] = used[1]
        nodes_i[node, COUNT] = 0
        nodes_f[node, VALUE] = value
        return False
    first = used[1]
    used[1] += n
    nodes_i[node, FIRST] = first
    nodes_i[node, COUNT] = n
    for i in range(n):
        edge_move[first + i] = candidates[i]
        edge_child[first + i] = -1
        edge_n[first + i] = 0.0
        edge_w[first + i] = 0.0
    if kind == KIND_PROVEN:
        nodes_i[node, FLAGS] = PROVEN | READY
        nodes_f[node, VALUE] = -1.0
        for i in range(n):
            edge_prior[first + i] = 1.0 / n
        return False
    nodes_f[node, VALUE] = 0.0
    if n == 1:
        nodes_i[node, FLAGS] = READY
        edge_prior[first] = 1.0
        return False
    nodes_i[node, FLAGS] = PENDING
    return True


def _new_root(tree, iparams, fparams, legal, candidates):
    """Node 0 of an empty tree (its position already in row 0), classified."""
    nodes_i, used = tree[0], tree[9]
    used[0] = 1
    used[1] = 0
    nodes_i[0, PARENT] = -1
    nodes_i[0, PARENT_EDGE] = -1
    return _classify_node(tree, 0, iparams, fparams, legal, candidates)


def _legal_of(tree, node, iparams, fparams, legal, candidates):
    """The legal mask of `node` into `legal` (the tree is not changed)."""
    classify(tree[2][node], tree[3][node], iparams, fparams, legal, candidates)  # noqa: F821


def _descend_batch(tree, root, max_new, c_puct, root_priors, iparams, fparams, leaves,
                   inputs, legal, candidates):
    """Up to `max_new` playouts from `root` with virtual loss (`mcts.Search.step`'s rules):
    a new leaf is classified; one awaiting the network is written to `leaves`, `inputs` and
    `legal` (row k for the k-th); a known one (terminal, proven, forced) and a terminal one
    reached again are backed up at once; reaching a leaf already awaiting the network ends
    the batch. `root_priors` (length 0: the root's own) replaces the root's priors in
    selection (root noise). Returns (playouts done, leaves awaiting the network)."""
    nodes_i, nodes_f, cells, aux, edge_move, edge_child, edge_n, edge_w, edge_prior, used = tree
    use_root_priors = root_priors.shape[0] > 0
    done = 0
    waiting = 0
    for _ in range(max_new):
        node = root
        while True:
            first, count = nodes_i[node, FIRST], nodes_i[node, COUNT]
            if node == root and use_root_priors:
                i = select(edge_n, edge_w, first, count, root_priors, 0, c_puct)
            else:
                i = select(edge_n, edge_w, first, count, edge_prior, first, c_puct)
            e = first + i
            edge_n[e] += VIRTUAL_LOSS
            edge_w[e] -= VIRTUAL_LOSS
            child = edge_child[e]
            if child < 0:
                child = used[0]
                used[0] += 1
                nodes_i[child, PARENT] = node
                nodes_i[child, PARENT_EDGE] = e
                edge_child[e] = child
                play(cells[node], aux[node], np.int64(edge_move[e]), cells[child],  # noqa: F821
                     aux[child], iparams, fparams)
                done += 1
                if _classify_node(tree, child, iparams, fparams, legal[waiting], candidates):
                    leaves[waiting] = child
                    encode(cells[child], aux[child], iparams, fparams,  # noqa: F821
                           inputs[waiting])
                    waiting += 1
                else:
                    backup(tree, child, root, nodes_f[child, VALUE], True)
                break
            flags = nodes_i[child, FLAGS]
            if flags & TERMINAL:
                done += 1
                backup(tree, child, root, nodes_f[child, VALUE], True)
                break
            if flags & PENDING:
                backup(tree, child, root, 0.0, False)
                return done, waiting
            node = child
    return done, waiting


def _encode_node(tree, node, iparams, fparams, out):
    """The network input of `node` into `out`."""
    encode(tree[2][node], tree[3][node], iparams, fparams, out)  # noqa: F821


class CompiledSearch(NamedTuple):
    """The generic kernels bound to one game's."""

    new_root: Any
    legal_of: Any
    descend_batch: Any
    encode_node: Any


def _specialise(fn: Any, kernels: SearchKernels, **extra: Any) -> Any:
    """A compiled copy of `fn` whose globals `play`, `classify`, `encode` are the game's (and
    `extra` more)."""
    glb = dict(fn.__globals__)
    glb.update(play=kernels.play, classify=kernels.classify, encode=kernels.encode, **extra)
    copy = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = f"{fn.__qualname__}__{kernels.name}_{kernels.version}"
    copy.__doc__ = fn.__doc__
    return kernel(copy)


@cache
def compiled_search(kernels: SearchKernels) -> CompiledSearch:
    """The tree's kernels for the game whose rules are `kernels` (one set per process)."""
    classify_node = _specialise(_classify_node, kernels)
    return CompiledSearch(*(_specialise(f, kernels, _classify_node=classify_node) for f in (
        _new_root, _legal_of, _descend_batch, _encode_node)))


# ---- the pools -----------------------------------------------------------------------------
class Tree:
    """A search tree's node and edge pools (see the module docstring), grown by doubling.

    `nbytes` is what its arrays hold (what a cache of trees counts)."""

    def __init__(self, cells: int, aux: int, nodes: int = 256, edges: int = 4096) -> None:
        self.nodes_i = np.zeros((nodes, NODE_INTS), np.int64)
        self.nodes_f = np.zeros((nodes, 2), np.float64)
        self.cells = np.zeros((nodes, cells), np.int8)
        self.aux = np.zeros((nodes, aux), np.int64)
        self.edge_move = np.zeros(edges, np.int16)
        self.edge_child = np.full(edges, -1, np.int32)
        self.edge_n = np.zeros(edges, np.float32)
        self.edge_w = np.zeros(edges, np.float64)
        self.edge_prior = np.zeros(edges, np.float64)
        self.used = np.zeros(2, np.int64)

    @property
    def arrays(self) -> TreeArrays:
        return (self.nodes_i, self.nodes_f, self.cells, self.aux, self.edge_move,
                self.edge_child, self.edge_n, self.edge_w, self.edge_prior, self.used)

    @property
    def n_nodes(self) -> int:
        return int(self.used[0])

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def reserve(self, nodes: int, edges: int) -> None:
        """Room for `nodes` more nodes and `edges` more edges (doubling what is short)."""
        need_n = int(self.used[0]) + nodes
        if need_n > len(self.nodes_i):
            cap = max(need_n, 2 * len(self.nodes_i))
            for name in ("nodes_i", "nodes_f", "cells", "aux"):
                old = getattr(self, name)
                new = np.zeros((cap, *old.shape[1:]), old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)
        need_e = int(self.used[1]) + edges
        if need_e > len(self.edge_move):
            cap = max(need_e, 2 * len(self.edge_move))
            for name in ("edge_move", "edge_child", "edge_n", "edge_w", "edge_prior"):
                old = getattr(self, name)
                new = np.full(cap, -1, old.dtype) if name == "edge_child" else np.zeros(
                    cap, old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)

    def subtree(self, root: int) -> Tree:
        """A new tree holding only the subtree below `root` (its root is node 0)."""
        nodes, edges = subtree_size(self.arrays, root)
        out = Tree(self.cells.shape[1], self.aux.shape[1], max(nodes, 16), max(edges, 64))
        copy_subtree(self.arrays, root, out.arrays)
        return out
