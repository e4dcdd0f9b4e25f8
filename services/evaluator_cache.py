"""A bounded cache of the network's answers by exact input: a board asked again is answered
from memory, not evaluated again (KataGo's NNCache).

Why: the same network input comes back. Within one search a position is reached by different
move orders (a Gomoku position is its stone set), and two leaves of one batch can be the same
board; across requests a search on a fresh tree (a match's or self-play's `SearchEngine`, a
GenMove without tree reuse) asks again for most of the positions the previous move's search
evaluated below its chosen line. Each such board is a forward pass saved.

Key: the board's exact bytes (with its shape and a namespace, the served game), nothing
derived from it: the network sees nothing but its input, so two boards with the same bytes get
the same answer from a deterministic network, and two different inputs never share an entry
(Go's compact input holds the side to move's view and the ko point, so a different ko or side
to move is a different key; what the network does not see, e.g. komi, cannot change its answer).
The legal mask is applied by the search after the cache, per node: the cache holds the raw,
unmasked logits and the value for the side to move.

Answers are unchanged: a hit returns the float32 row the network gave for that board before,
bit for bit. (A network on a CPU may give a board's row with differences of about 1e-8 in
another batch composition; a hit returns the row of the batch that first evaluated it.) The
service applies no random symmetry to its inputs, so there is no transformed output to undo.

Model versions: each entry records the model name and version that answered it. An answer for
the misses of a call from another model than its hits' (a new version served) empties the
cache and the call is evaluated anew, so one answer never mixes versions; a call answered from
the cache alone reports the version that answered it.

Bounds: `max_bytes` for the keys, rows and an estimate of Python's overhead per entry
(`ENTRY_OVERHEAD_BYTES`); the least recently used entries go first. Thread-safe (one lock
around the table; the network is called outside it, so two concurrent searches that miss on
one board may both evaluate it, as in KataGo). Rows from an answer with a non-finite logit or
value are never stored: nothing about a failure is cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from services.evaluator import EvaluatorError, PolicyEvaluator

# one source of the default bound: the search server's --eval-cache-mb and LocalEvaluator's
DEFAULT_CACHE_MB = 64
ENTRY_OVERHEAD_BYTES = 240  # dict slot, key tuple, bytes and array headers (CPython, about)


@dataclass(frozen=True)
class CachedOutput:
    """One answer (`services.evaluator.PolicyOutput`), rows from the cache and the network."""

    logits: np.ndarray  # float32 [N, policy size]
    model_name: str
    model_version: str
    values: np.ndarray | None = None  # float32 [N]; None: the network has no value head


@dataclass(frozen=True)
class _Entry:
    logits: np.ndarray  # float32 [policy size]
    value: float  # NaN: no value head
    model: tuple[str, str]
    nbytes: int


Key = tuple[Hashable, bytes]


class EvalCache:
    """The table: an LRU of network answers by key, at most `max_bytes` (0: caches nothing).
    `hits` / `misses` count the boards answered from it / sent to the network."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_MB << 20) -> None:
        if max_bytes < 0:
            raise ValueError(f"the evaluation cache's size must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @classmethod
    def of_mb(cls, mb: float) -> EvalCache:
        return cls(int(mb * (1 << 20)))

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def nbytes(self) -> int:
        """What the entries hold, by the estimate the bound is kept with."""
        with self._lock:
            return self._bytes

    @property
    def hit_rate(self) -> float:
        asked = self.hits + self.misses
        return self.hits / asked if asked else 0.0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def lookup(self, keys: list[Key]) -> list[_Entry | None]:
        """The entry of each key (None: absent), each found one made the most recent."""
        with self._lock:
            found = [self._entries.get(k) for k in keys]
            for k, e in zip(keys, found, strict=True):
                if e is not None:
                    self._entries.move_to_end(k)
        return found

    def store(self, keys: list[Key], logits: np.ndarray, values: np.ndarray,
              model: tuple[str, str]) -> None:
        """Keep row i of `logits` / `values` under keys[i], then evict down to the bound."""
        if not self.enabled:
            return
        with self._lock:
            for k, row, v in zip(keys, logits, values, strict=True):
                size = len(k[1]) + row.nbytes + ENTRY_OVERHEAD_BYTES
                old = self._entries.pop(k, None)
                if old is not None:
                    self._bytes -= old.nbytes
                self._entries[k] = _Entry(row.copy(), float(v), model, size)
                self._bytes += size
            while self._bytes > self.max_bytes and self._entries:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes

    def count(self, hits: int, misses: int) -> None:
        with self._lock:
            self.hits += hits
            self.misses += misses

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


class CachingEvaluator:
    """A `PolicyEvaluator` that answers boards found in `cache` from it and sends the others
    (each distinct board once) to `inner` in one call. `namespace` keeps the entries of
    different networks sharing one cache apart (the service: the game's name). `on_lookup`
    (hits, misses) is called for each call, e.g. to count them in the service's metrics.
    `served_model()`: the (name, version) the network last answered with, when something
    besides this evaluator asks it (the service's batcher: Predict, other games' searches);
    entries of another model are then not used."""

    def __init__(self, inner: PolicyEvaluator, cache: EvalCache | None = None, *,
                 namespace: Hashable = "",
                 on_lookup: Callable[[int, int], None] | None = None,
                 served_model: Callable[[], tuple[str, str] | None] | None = None) -> None:
        self.inner = inner
        self.cache = cache if cache is not None else EvalCache()
        self.namespace = namespace
        self.on_lookup = on_lookup
        self.served_model = served_model

    def infer(self, boards: np.ndarray, *args: Any) -> CachedOutput:
        """The answer for `boards`; `args` go to the inner evaluator (a batcher's deadline)."""
        arr = np.ascontiguousarray(boards)
        if arr.ndim < 2 or len(arr) == 0:
            raise EvaluatorError(f"boards must be [N, ...] with N >= 1, got {arr.shape}")
        prefix = (self.namespace, arr.shape[1:])
        keys = [(prefix, b.tobytes()) for b in arr]
        found = self.cache.lookup(keys) if self.cache.enabled else [None] * len(keys)
        models = {e.model for e in found if e is not None}
        served = self.served_model() if self.served_model is not None else None
        if served is not None and models and models != {served}:  # a new version serves
            self.cache.clear()
            return self._fresh(arr, keys, args)
        if len(models) > 1:  # two versions answered these boards: ask the network for all
            return self._fresh(arr, keys, args)
        missing = [i for i, e in enumerate(found) if e is None]
        if not missing:
            self._count(len(keys), 0)
            (model,) = models
            return _assemble(found, model)  # type: ignore[arg-type]
        rows, unique = _distinct(keys, missing)  # a board asked twice is evaluated once
        logits, values, model = _answer(self.inner.infer(arr[unique], *args), len(unique))
        if models and models != {model}:  # a new version answers: forget the old one's
            self.cache.clear()
            return self._fresh(arr, keys, args)
        self._keep([keys[i] for i in unique], logits, values, model)
        self._count(len(keys) - len(unique), len(unique))
        out_logits = np.empty((len(keys), logits.shape[1]), np.float32)
        out_values = np.empty(len(keys), np.float32)
        for i, (k, e) in enumerate(zip(keys, found, strict=True)):
            if e is None:
                out_logits[i] = logits[rows[k]]
                out_values[i] = values[rows[k]]
            else:
                out_logits[i] = e.logits
                out_values[i] = e.value
        return CachedOutput(out_logits, *model, _no_head(out_values))

    def _fresh(self, arr: np.ndarray, keys: list[Key], args: tuple[Any, ...]) -> CachedOutput:
        """Every board of the call from the network (distinct ones once), kept."""
        rows, unique = _distinct(keys, range(len(keys)))
        logits, values, model = _answer(self.inner.infer(arr[unique], *args), len(unique))
        self._keep([keys[i] for i in unique], logits, values, model)
        self._count(len(keys) - len(unique), len(unique))
        index = [rows[k] for k in keys]
        return CachedOutput(logits[index], *model, _no_head(values[index]))

    def _keep(self, keys: list[Key], logits: np.ndarray, values: np.ndarray,
              model: tuple[str, str]) -> None:
        """Store the rows unless the answer is one a search refuses (`finite_outputs`)."""
        nan = np.isnan(values)
        if np.isfinite(logits).all() and (np.isfinite(values).all() or nan.all()):
            self.cache.store(keys, logits, values, model)

    def _count(self, hits: int, misses: int) -> None:
        self.cache.count(hits, misses)
        if self.on_lookup is not None:
            self.on_lookup(hits, misses)


def _distinct(keys: list[Key], among: Iterable[int]) -> tuple[dict[Key, int], list[int]]:
    """({key: its row among the distinct ones}, the index of each distinct key's first
    board) over the boards `among`."""
    rows: dict[Key, int] = {}
    unique: list[int] = []
    for i in among:
        if keys[i] not in rows:
            rows[keys[i]] = len(unique)
            unique.append(i)
    return rows, unique


def _answer(out: Any, n: int) -> tuple[np.ndarray, np.ndarray, tuple[str, str]]:
    """(logits float32 [n, P], values float32 [n] (NaN: no value head), (name, version))."""
    logits = np.asarray(out.logits, dtype=np.float32)
    if logits.ndim != 2 or logits.shape[0] != n:
        raise EvaluatorError(f"evaluator returned logits {logits.shape} for {n} boards")
    raw = getattr(out, "values", None)
    values = (np.full(n, np.nan, np.float32) if raw is None
              else np.asarray(raw, dtype=np.float32).reshape(-1))
    if values.shape != (n,):
        raise EvaluatorError(f"evaluator returned values {values.shape} for {n} boards")
    model = (str(out.model_name), str(out.model_version))
    return logits, values, model


def _assemble(entries: list[_Entry], model: tuple[str, str]) -> CachedOutput:
    logits = np.stack([e.logits for e in entries])
    values = np.array([e.value for e in entries], np.float32)
    return CachedOutput(logits, *model, _no_head(values))


def _no_head(values: np.ndarray) -> np.ndarray | None:
    """None when every value is NaN (a network without a value head), as it answered."""
    return None if np.isnan(values).all() else values


__all__ = ["DEFAULT_CACHE_MB", "CachedOutput", "CachingEvaluator", "EvalCache"]
