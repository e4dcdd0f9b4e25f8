"""A bounded cache of the network's answers by exact input: a board asked again is answered
from memory, not evaluated again (KataGo's NNCache).

Why: the same network input comes back. Within one search a position is reached by different
move orders (a Gomoku position is its stone set), and two leaves of one batch can be the same
board; across requests a search on a fresh tree (a match's or self-play's `SearchEngine`, a
GenMove without tree reuse) asks again for most of the positions the previous move's search
evaluated below its chosen line. Each such board is a forward pass saved.

Key: the board's exact bytes (with its shape, dtype and a namespace, the served game), nothing
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

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from services.evaluator import EvaluatorError, PolicyEvaluator

# one source of the default bound: the search server's --eval-cache-mb and LocalEvaluator's
DEFAULT_CACHE_MB = 64
# the rest of an entry: dict slot, key and entry tuples, bytes headers (tracemalloc, 15x15
# Gomoku: 1,456 bytes an entry, 1,125 of them the board and its logits)
ENTRY_OVERHEAD_BYTES = 336


@dataclass(frozen=True)
class CachedOutput:
    """One answer (`services.evaluator.PolicyOutput`), rows from the cache and the network."""

    logits: np.ndarray  # float32 [N, policy size]
    model_name: str
    model_version: str
    values: np.ndarray | None = None  # float32 [N]; None: the network has no value head


class _Entry(NamedTuple):
    logits: bytes  # float32 [policy size], as bytes: rows are joined into an answer at once
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

    def store(self, keys: list[Key], rows: list[bytes], values: list[float],
              model: tuple[str, str]) -> None:
        """Keep logits row i (float32 bytes) and value i under keys[i], then evict down to
        the bound."""
        if not self.enabled:
            return
        entries, new = self._entries, _Entry._make
        with self._lock:
            added = 0
            for k, row, v in zip(keys, rows, values, strict=True):
                size = len(k[1]) + len(row) + ENTRY_OVERHEAD_BYTES
                old = entries.get(k)
                if old is not None:  # stored meanwhile by a concurrent call
                    added -= old.nbytes
                    entries.move_to_end(k)
                entries[k] = new((row, v, model, size))
                added += size
            self._bytes += added
            while self._bytes > self.max_bytes and entries:
                _, evicted = entries.popitem(last=False)
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
        prefix = (self.namespace, arr.shape[1:], arr.dtype.str)
        raw, width = arr.tobytes(), arr[0].nbytes
        keys = [(prefix, raw[i:i + width]) for i in range(0, len(raw), width)]
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
            known = [e for e in found if e is not None]
            return _joined([e.logits for e in known], [e.value for e in known], model)
        if len(missing) == len(keys):  # nothing known: the network's answer
            return self._fresh(arr, keys, args)
        rows, unique = _distinct(keys, missing)  # a board asked twice is evaluated once
        answer, fresh_rows, fresh_values, model = self._ask(arr[unique], args)
        if models and models != {model}:  # a new version answers: forget the old one's
            self.cache.clear()
            return self._fresh(arr, keys, args)
        self._keep([keys[i] for i in unique], answer, fresh_rows, fresh_values, model)
        self._count(len(keys) - len(unique), len(unique))
        both = list(zip(keys, found, strict=True))
        parts = [fresh_rows[rows[k]] if e is None else e.logits for k, e in both]
        values = [fresh_values[rows[k]] if e is None else e.value for k, e in both]
        return _joined(parts, values, model)

    def _fresh(self, arr: np.ndarray, keys: list[Key], args: tuple[Any, ...]) -> CachedOutput:
        """Every board of the call from the network (distinct ones once), kept."""
        rows, unique = _distinct(keys, range(len(keys)))
        answer, fresh_rows, values, model = self._ask(arr if len(unique) == len(keys)
                                                      else arr[unique], args)
        self._keep([keys[i] for i in unique], answer, fresh_rows, values, model)
        self._count(len(keys) - len(unique), len(unique))
        if len(unique) == len(keys):
            return CachedOutput(answer.logits, *model, answer.values)
        index = [rows[k] for k in keys]
        vals = None if answer.values is None else answer.values[index]
        return CachedOutput(answer.logits[index], *model, vals)

    def _ask(self, boards: np.ndarray, args: tuple[Any, ...]
             ) -> tuple[CachedOutput, list[bytes], list[float], tuple[str, str]]:
        """The inner evaluator's answer for `boards` (float32 logits, values None or [n]),
        its logits rows as bytes and its values (NaN: no value head)."""
        n = len(boards)
        answer = _answer(self.inner.infer(boards, *args), n)
        raw = answer.logits.tobytes()
        width = len(raw) // n
        rows = [raw[i:i + width] for i in range(0, len(raw), width)]
        values = [math.nan] * n if answer.values is None else answer.values.tolist()
        return answer, rows, values, (answer.model_name, answer.model_version)

    def _keep(self, keys: list[Key], answer: CachedOutput, rows: list[bytes],
              values: list[float], model: tuple[str, str]) -> None:
        """Store the rows unless the answer is one a search refuses (`finite_outputs`)."""
        v = answer.values
        if np.isfinite(answer.logits).all() and (v is None or np.isfinite(v).all()):
            self.cache.store(keys, rows, values, model)

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


def _answer(out: Any, n: int) -> CachedOutput:
    """The inner answer checked for shape: logits float32 [n, P], values float32 [n] or None
    (no value head: none sent, or NaN for every board)."""
    logits = np.ascontiguousarray(out.logits, dtype=np.float32)
    if logits.ndim != 2 or logits.shape[0] != n:
        raise EvaluatorError(f"evaluator returned logits {logits.shape} for {n} boards")
    raw = getattr(out, "values", None)
    values = None if raw is None else np.asarray(raw, dtype=np.float32).reshape(-1)
    if values is not None and values.shape != (n,):
        raise EvaluatorError(f"evaluator returned values {values.shape} for {n} boards")
    if values is not None and np.isnan(values).all():
        values = None
    return CachedOutput(logits, str(out.model_name), str(out.model_version), values)


def _joined(rows: list[bytes], values: list[float], model: tuple[str, str]) -> CachedOutput:
    """One answer from logits rows (float32 bytes) and values (NaN: no value head)."""
    logits = np.frombuffer(b"".join(rows), np.float32).reshape(len(rows), -1).copy()
    vals = np.array(values, np.float32)
    return CachedOutput(logits, *model, None if np.isnan(vals).all() else vals)


__all__ = ["DEFAULT_CACHE_MB", "CachedOutput", "CachingEvaluator", "EvalCache"]
