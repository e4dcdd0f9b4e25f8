"""Tree reuse between the consecutive moves of one game: a bounded LRU of searched trees.

After a search of position P the service keeps P's tree, keyed by how P arose: its game's
`base_key` (Gomoku: the rule, the board size, the setup stones; Go: the komi, the set-up board
and who moved first) and the move sequence (passes included), and by what its leaf values
were mixed with (`mix`: () for the value network alone; (lambda, the rollout policy's
fingerprint) for values mixed with fast rollouts, `services.search.rollout_value.tree_key`),
so a search only ever continues a tree whose values are what its own would be. A later
request whose moves extend P's by 0, 1 or 2 moves (the same position asked again, the move
just searched, or that move and the opponent's reply) takes the matching subtree out of the
cache and continues from it, with all its visits. Entries are *taken*, never shared: two
concurrent searches can never touch one tree (the second one simply searches from scratch),
and the search that took a tree puts its new tree back under its own position when it
finishes.

Bounds: at most `max_entries` trees and `max_visits` root visits in all (a tree's node count
grows with its visits, so this bounds memory; `nbytes` counts what the trees' arrays hold, each
tree kept as its subtree alone, `Node.compacted`); the least recently stored trees go first, and a
tree larger than `max_visits` is not kept. A tree made with another model version than the one
the service last saw answer is discarded on lookup, so a rollout never mixes versions for long.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from services.search.mcts import Node, State

DEFAULT_MAX_ENTRIES = 64
# a visit (node) holds ~6 KB on 15x15 Gomoku, ~13 KB on 19x19 Go (tracemalloc): 300-650 MB
DEFAULT_MAX_VISITS = 50_000
MAX_EXTENSION = 2  # moves a request may add to a cached position and still reuse its tree

BaseKey = tuple[object, ...]
Mix = tuple[object, ...]  # what a tree's leaf values were mixed with: () the network alone


def base_key(state: State) -> BaseKey:
    """What a game is besides its moves (its game's `base_key`: e.g. rule, size and the setup
    stones), with the game's name so two games never share a key."""
    return (state.game.name, *state.game.base_key(state))


@dataclass(frozen=True)
class CachedTree:
    root: Node
    visits: int
    model_name: str
    model_version: str
    nbytes: int = 0  # what the tree's arrays hold


@dataclass(frozen=True)
class Reuse:
    """A subtree taken from the cache for a request."""

    root: Node
    visits: int
    extension: int  # moves the request added to the cached position (0..2)
    model_name: str
    model_version: str


class TreeCache:
    """Thread-safe LRU of searched trees; `take` for a request, `put` after its search."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_visits: int = DEFAULT_MAX_VISITS,
        max_extension: int = MAX_EXTENSION,
    ) -> None:
        if max_entries < 0 or max_visits < 0 or max_extension < 0:
            raise ValueError("tree cache bounds must be >= 0")
        self.max_entries = max_entries
        self.max_visits = max_visits
        self.max_extension = max_extension
        self._entries: OrderedDict[tuple[BaseKey, Mix, tuple[int, ...]], CachedTree] = \
            OrderedDict()
        self._visits = 0
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_visits > 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def visits(self) -> int:
        """Root visits of all cached trees together."""
        with self._lock:
            return self._visits

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays of all cached trees together."""
        with self._lock:
            return self._bytes

    def take(self, state: State, model_version: str | None = None, mix: Mix = ()
             ) -> Reuse | None:
        """Remove and return the subtree for `state`, if a cached position is `state` minus its
        last 0..max_extension moves, kept with the same `mix`, and that tree reached `state`.
        `model_version`: the version now served (None: do not check); a tree of another
        version is dropped."""
        if not self.enabled:
            return None
        base, moves = base_key(state), tuple(state.moves)
        with self._lock:
            for k in range(min(self.max_extension, len(moves)) + 1):
                entry = self._entries.pop((base, mix, moves[: len(moves) - k]), None)
                if entry is None:
                    continue
                self._visits -= entry.visits
                self._bytes -= entry.nbytes
                if model_version is not None and entry.model_version != model_version:
                    continue
                node = _follow(entry.root, moves[len(moves) - k :])
                if node is None or not np.array_equal(node.state.board, state.board):
                    continue
                return Reuse(node, node.visits, k, entry.model_name, entry.model_version)
        return None

    def put(self, state: State, root: Node, model_name: str, model_version: str,
            mix: Mix | None = ()) -> bool:
        """Keep `root` (the searched tree of `state`, its values mixed with `mix`; None: with
        something unknown, so it is not kept); False when it is not kept."""
        visits = root.visits
        if not self.enabled or visits == 0 or visits > self.max_visits or root.priors is None \
                or mix is None:
            return False
        key = (base_key(state), mix, tuple(state.moves))
        root = root.compacted()  # the subtree alone: the rest of a reused tree is freed
        entry = CachedTree(root, visits, model_name, model_version, root.tree_bytes)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._visits -= old.visits
                self._bytes -= old.nbytes
            self._entries[key] = entry
            self._visits += visits
            self._bytes += entry.nbytes
            while len(self._entries) > self.max_entries or self._visits > self.max_visits:
                _, evicted = self._entries.popitem(last=False)
                self._visits -= evicted.visits
                self._bytes -= evicted.nbytes
        return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._visits = 0
            self._bytes = 0


def _follow(node: Node, moves: tuple[int, ...]) -> Node | None:
    """The expanded, non-terminal node reached from `node` by `moves`, or None."""
    for move in moves:
        child = node.child(move)
        if child is None or child.terminal or child.priors is None:
            return None
        node = child
    return node
