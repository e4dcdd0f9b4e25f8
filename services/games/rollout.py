"""Fast rollouts: what every game's compiled rollout shares (the policy's weights, its
incremental logits, the seeded sampling) and what a game's rollouts answer (`Rollouts`).

Why: a leaf's value in BAKAGO / AlphaGo mixes the value network with the result of a game
played out from the leaf by a fast policy, `V = (1 - lambda) v + lambda z` (the report's
equation 3). A rollout plays hundreds of moves, so its policy must cost microseconds a move:
the policy is one k x k convolution over the mover's own / opponent / empty planes
(`services.models.rollout.LinearRolloutPolicy`, trained by the trainer), and its logits are
kept up to date as stones come and go instead of recomputed. With `e = 1 - own - opp` on the
board, the logit at q for the side `c` to move is

    base[q] + sum over stones s of (d_own if s is c's else d_opp)[the offset of s from q]

where `base` is the empty plane's kernel summed over the board (the edges are where it
differs) plus the bias, `d_own = W_own - W_empty`, `d_opp = W_opp - W_empty`. Both sides'
logit maps are kept (`logits[0]`: the leaf's mover to move, `logits[1]`: the opponent); a
stone placed or captured adds or subtracts its k*k weights around it in both, and the softmax
weights `exp(logit)` of those points are refreshed with them, so a move costs O(k^2) plus one
pass over the points to draw from the softmax.

The kernels see a leaf's board as the mover's: cells 1 (the mover's stones), 2 (the
opponent's), 0 (empty), flat y * S + x, whatever the game's network input holds; a game's
`Rollouts.leaf_cells` makes them. Results are from the leaf mover's side: +1 won, -1 lost, 0
drawn (or the cap reached without a verdict). Every rollout draws from its own generator
(splitmix64), seeded from (seed, leaf index, rollout index): the same call gives the same
results on any machine.
"""

from __future__ import annotations

import hashlib
import io
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cache, cached_property

import numpy as np

from services.compiled import kernel

ROLLOUT_PLANES = 3  # own, opponent, empty
MAX_LOGIT = 60.0  # exp() stays finite in float64 for any sum of such weights
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class RolloutWeights:
    """A trained rollout policy's raw weights (`LinearRolloutPolicy.weights`): `kernel`
    float32 [3, k, k] over (own, opponent, empty), `bias`, `pass_weights` float32 [4] (the
    trained pass logit's weights on the planes' means and its bias; the rollouts do not use
    it), and what it is: `config` (the model configuration) and `top1` (its test top-1, NaN
    when not measured)."""

    kernel: np.ndarray
    bias: float
    pass_weights: np.ndarray = field(default_factory=lambda: np.zeros(4, np.float32))
    config: str = ""
    top1: float = float("nan")

    def __post_init__(self) -> None:
        k = np.asarray(self.kernel)
        shape = k.shape if k.ndim == 3 else (0, 0, 0)  # layout: the kernel is [3, k, k]
        if shape[0] != ROLLOUT_PLANES or shape[1] != shape[2] or shape[1] % 2 == 0:
            raise ValueError(f"a rollout kernel is float [3, k, k] with k odd, got {k.shape}")
        if not (np.isfinite(k).all() and math.isfinite(self.bias)):
            raise ValueError("rollout weights must be finite")

    @cached_property
    def fingerprint(self) -> str:
        """A digest of the weights the rollouts play with (kernel and bias): which rollout
        policy a search's leaf values were mixed with, so a tree searched with one policy is
        never continued with another (`services.search.tree_cache`)."""
        digest = hashlib.sha256(np.ascontiguousarray(self.kernel, np.float32).tobytes())
        digest.update(np.float64(self.bias).tobytes())
        return digest.hexdigest()[:16]

    @property
    def size(self) -> int:
        """k, the kernel's width."""
        return int(np.asarray(self.kernel).shape[1])

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], config: str = "",
                    top1: float = float("nan")) -> RolloutWeights:
        """From `LinearRolloutPolicy.weights()`' arrays."""
        return cls(np.asarray(arrays["kernel"], np.float32),
                   float(np.asarray(arrays["bias"]).reshape(-1)[0]),
                   np.asarray(arrays.get("pass_weights", np.zeros(4)), np.float32),
                   config, top1)

    def to_bytes(self) -> bytes:
        """The weights as an .npz file's bytes (what is stored with a model version)."""
        out = io.BytesIO()
        np.savez(out, kernel=np.asarray(self.kernel, np.float32),
                 bias=np.array([self.bias], np.float32),
                 pass_weights=np.asarray(self.pass_weights, np.float32),
                 config=np.array(self.config), top1=np.array(self.top1, np.float64))
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> RolloutWeights:
        """`to_bytes`' inverse; ValueError for a file that is not one."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                return cls.from_arrays({k: z[k] for k in ("kernel", "bias", "pass_weights")},
                                       str(z["config"]) if "config" in z else "",
                                       float(z["top1"]) if "top1" in z else float("nan"))
        except (KeyError, OSError, EOFError) as exc:
            raise ValueError(f"not a rollout policy file: {exc}") from exc

    def tables(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(base float64 [S*S], d_own float64 [k*k], d_opp float64 [k*k]) on a `size` board:
        the empty-board logits and what a stone adds for its side and for the other."""
        kern = np.ascontiguousarray(self.kernel, np.float64)
        return _tables(kern.tobytes(), self.size, float(self.bias), size)

    def logits(self, cells: np.ndarray, size: int) -> np.ndarray:
        """float64 [2, S*S]: the logits of the leaf's mover (row 0) and of its opponent
        (row 1) on the mover's `cells` (uint8 [S*S], 1 own 2 opponent): what the kernels
        keep, for tests."""
        base, d_own, d_opp = self.tables(size)
        logits, _ = _initial_logits(np.ascontiguousarray(cells, np.uint8), base, d_own,
                                    d_opp, size, self.size)
        return logits


@cache
def _tables(kernel_bytes: bytes, k: int, bias: float, size: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    kern = np.frombuffer(kernel_bytes, np.float64).reshape(ROLLOUT_PLANES, k, k)
    r = k // 2
    onboard = np.pad(np.ones((size, size)), r)
    base = np.full((size, size), bias, np.float64)
    for dy in range(k):
        for dx in range(k):
            base += kern[2, dy, dx] * onboard[dy:dy + size, dx:dx + size]
    out = (base.reshape(-1), (kern[0] - kern[2]).reshape(-1), (kern[1] - kern[2]).reshape(-1))
    for a in out:
        a.flags.writeable = False
    return out


class Rollouts(ABC):
    """A game's compiled rollouts (`Game.rollouts()`).

    `needs_colours`: whether `run` needs each board's side-to-move colour (`colours`), as a
    game does whose network input does not say it and whose score does depend on it (Go's
    komi); such rollouts refuse boards without colours rather than guess them."""

    needs_colours: bool = False

    @abstractmethod
    def leaf_cells(self, boards: np.ndarray) -> np.ndarray:
        """uint8 [N, S*S]: the stones of a batch of the game's network inputs as their side to
        move sees them (1 own, 2 the opponent's)."""

    def play(self, boards: np.ndarray, weights: RolloutWeights, *, seed: int = 0,
             rollouts: int = 1, move_cap: int = 0, komi: float = 0.0,
             colours: np.ndarray | None = None) -> np.ndarray:
        """`run`'s results alone."""
        return self.run(boards, weights, seed=seed, rollouts=rollouts, move_cap=move_cap,
                        komi=komi, colours=colours)[0]

    @abstractmethod
    def run(self, boards: np.ndarray, weights: RolloutWeights, *, seed: int = 0,
            rollouts: int = 1, move_cap: int = 0, komi: float = 0.0,
            colours: np.ndarray | None = None, trace: list[np.ndarray] | None = None
            ) -> tuple[np.ndarray, int]:
        """(float64 [N], the moves played in all): the mean result, for the side to move, of
        `rollouts` games played out from each of the network inputs `boards` by the policy
        `weights` (+1 won, -1 lost, 0 drawn or cut at `move_cap` moves without a verdict; 0:
        the game's default cap).
        `komi` and `colours` (the side to move's colour, BLACK/WHITE, per board) for a game
        that scores with a komi (`needs_colours`: ValueError without them); the rest ignore
        them. `trace`, a list, gets the first
        rollout's moves (int64 [moves played in all, at least its own]; -1 a pass) and its
        final cells appended (`_trace_buffers`)."""


def _trace_buffers(trace: list[np.ndarray] | None, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' record of their first rollout: (moves int64 [cap], final cells uint8
    [S*S]), appended to `trace` when given (a one-entry dummy pair otherwise)."""
    if trace is None:
        return np.empty(0, np.int64), np.empty(size * size, np.uint8)
    buffers = (np.full(4 * size * size, -1, np.int64), np.zeros(size * size, np.uint8))
    trace.extend(buffers)
    return buffers


# ---- the shared kernels -----------------------------------------------------------------
@kernel
def _next_random(state):
    """splitmix64: (the next state, a uniform float64 in [0, 1))."""
    state = state + np.uint64(0x9E3779B97F4A7C15)
    z = state
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return state, float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@kernel
def seed_state(seed, leaf, rollout):
    """The generator state of one rollout: distinct for every (seed, leaf, rollout)."""
    s = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
    s = s ^ (np.uint64(leaf) * np.uint64(0xD1B54A32D192ED03))
    s = s ^ (np.uint64(rollout) * np.uint64(0xCA5A826395121157))
    s, _ = _next_random(s)
    return s


@kernel
def add_stone(logits, weights, point, side, sign, d_own, d_opp, size, k):
    """A stone of `side` (0: the leaf's mover, 1: the opponent) placed (`sign` 1) or removed
    (-1) at `point`: both sides' logits around it and their softmax weights."""
    r = k // 2
    y = point // size
    x = point - y * size
    for dy in range(-r, r + 1):
        qy = y - dy
        if qy < 0 or qy >= size:
            continue
        for dx in range(-r, r + 1):
            qx = x - dx
            if qx < 0 or qx >= size:
                continue
            q = qy * size + qx
            d = (dy + r) * k + dx + r
            own = logits[side, q] + sign * d_own[d]
            opp = logits[1 - side, q] + sign * d_opp[d]
            logits[side, q] = own
            logits[1 - side, q] = opp
            weights[side, q] = math.exp(min(own, MAX_LOGIT))
            weights[1 - side, q] = math.exp(min(opp, MAX_LOGIT))


@kernel
def _initial_logits(cells, base, d_own, d_opp, size, k):
    """(logits, softmax weights) float64 [2, S*S] of the mover's `cells`."""
    area = size * size
    logits = np.empty((2, area))
    weights = np.empty((2, area))
    for q in range(area):
        logits[0, q] = base[q]
        logits[1, q] = base[q]
    for p in range(area):
        if cells[p] != 0:
            add_stone(logits, weights, p, cells[p] - 1, 1.0, d_own, d_opp, size, k)
    for side in range(2):
        for q in range(area):
            weights[side, q] = math.exp(min(logits[side, q], MAX_LOGIT))
    return logits, weights


@kernel
def draw_point(weights_row, cells, excluded, stamp, state):
    """(a point drawn from the softmax over the empty points not `excluded` at `stamp`, -1
    when none is left; the generator's next state)."""
    area = cells.shape[0]
    total = 0.0
    for q in range(area):
        if cells[q] == 0 and excluded[q] != stamp:
            total += weights_row[q]
    if total <= 0.0:
        return -1, state
    state, u = _next_random(state)
    target = u * total
    last = -1
    acc = 0.0
    for q in range(area):
        if cells[q] == 0 and excluded[q] != stamp:
            last = q
            acc += weights_row[q]
            if acc > target:
                return q, state
    return last, state  # rounding: the last candidate
