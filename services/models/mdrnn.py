"""Multi-dimensional recurrent networks for the Capture Game (Grüttner et al., after Schaul &
Schmidhuber's scalable board-game networks): MDRNN and MDLSTM.

Four hidden layers sweep the board diagonally, one from each corner. The sweep from the top
left computes, at every point (i, j),

    h(i, j) = f(W_in x(i, j) + W_h h(i-1, j) + W_h h(i, j-1))

with f = tanh, no bias, and the border activations h(-1, j) = h(i, -1) = w_b. The other three
sweeps are the same layer run on the board mirrored vertically, horizontally and both: the four
directions share every weight, as in the paper's "four (identical) hidden layers". The output
at each point is sigmoid(sum over the four directions of w_out . h_d(i, j)), a preference per
point; the player moves to the legal point with the highest one. Nothing depends on the board
size, so the same weights play 5x5, 7x7 or 9x9 (though a network trained on one size loses on
the others: one retrained per size is served as one model, `services.models.per_size.PerSize`,
inside `CapturePolicy`).

Input per point: two values, (1, 0) for a stone of the player to move, (0, 1) for an opponent
stone, (0, 0) for an empty point (the paper's two input weights per hidden neuron; PyBrain's
CaptureGame board array, seen from the side to move). The batched input is float or int
planes [B, 2, S, S], the output scores [B, S, S] in (0, 1).

The weights, with k hidden neurons (the paper's count, Section 3.2):

MDRNN, 4k + k^2 (12 for k = 2):
    w_in   [k, 2]   input -> hidden                               2k
    w_h    [k, k]   hidden -> hidden, the same for both predecessors k^2
    w_out  [k]      hidden -> output, the same for all directions  k
    w_b    [k]      the fixed border activation                    k

MDLSTM, 16k + 5k^2 (52 for k = 2): each hidden neuron is a 2-D LSTM cell (Graves) with five
units: the cell input z, the input gate, one forget gate per predecessor ((i-1, j) and
(i, j-1)) and the output gate,
    w_in   [5k, 2]  input -> the five units                       10k
    w_h    [5k, k]  hidden -> the five units, both predecessors   5k^2
    w_peep [4, k]   peepholes: input gate <- c(i-1,j) + c(i,j-1),
                    forget gate 1 <- c(i-1,j), forget gate 2 <- c(i,j-1),
                    output gate <- c(i,j)                          4k
    w_out  [k]      hidden -> output                               k
    w_b    [k]      the border activation (the border cell state is 0) k
so that c = i * tanh(z) + f1 * c(i-1,j) + f2 * c(i,j-1) and h = o * tanh(c).

Served (`CapturePolicy`, the configurations' serving wrapper: `ModelSpec.serve`), a network
takes what the Capture Game's positions give, the int8 board [N, S, S] (0 empty, 1 black, 2
white), and answers logits [N, S * S]:

* the side to move is black when both colours have as many stones (no stone leaves the board
  in a game that goes on), and the planes are those of the policy search's games
  (`services.policy_search.fitness.planes`), so a trained vector plays there as it was trained;
* the logits are the preferences' log-odds, ``log(p / (1 - p))``, the network's output before
  its sigmoid: the order of the points is the network's, and the search service's softmax
  over them is the sigmoid's own scale rather than a near-uniform softmax of numbers in (0, 1).
  A preference is first clamped to [2^-24, 1 - 2^-24] (float32's last steps below 1), so a
  saturated one gives a finite logit (about +-16.6): only points the network already scores
  as exactly 1.0, or below 6e-8, become ties.

The sweep is a loop over anti-diagonals: the points with i + j = d depend only on diagonal
d - 1, so an S x S board takes 2S - 1 steps, each on all its points, all four directions and
the whole batch at once (the board is skewed so that each diagonal is one column). The weights
may also come per board (`scores_per_board`), so one call plays a whole population of
parameter vectors against its opponents. The optimisers of `services.policy_search` work on
flat vectors (`get_flat` / `set_flat`, the order of `named_parameters`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from services.games.base import BLACK, WHITE

IN_PLANES = 2  # own stones, opponent stones (an empty point is (0, 0))
# float32's largest step below 1: a preference is clamped to [EPS, 1 - EPS] before its log-odds
EPS = 2.0 ** -24


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    """1 / (1 + exp(-x)), written out rather than torch.sigmoid: on CPU torch.sigmoid rounds
    a value differently in the vectorised body of a tensor than in its scalar tail, so a
    board's scores would depend on where it sits in the batch (and a near tie between two
    points could go either way); exp, the addition and the reciprocal round each value the
    same wherever it sits, so a board's scores are the same alone or in any batch (policy
    search relies on it: runs in lock step end exactly as alone). About 25% dearer."""
    return torch.exp(-x).add_(1.0).reciprocal_()


def _tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) as 2 sigmoid(2x) - 1: the same function, and on CPU about 4x cheaper than
    torch.tanh, which dominates the sweep otherwise (float32, 1 thread: 48,000 values take
    ~250 us in torch.tanh against ~20-50 us in torch.sigmoid)."""
    return 2.0 * _sigmoid(2.0 * x) - 1.0


def _diagonals(size: int, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor,
                                                               torch.Tensor, torch.Tensor]]:
    """Per anti-diagonal d = i + j: the flat index of its points in the S*S board, in the
    (S+1)*(S+1) padded state (row 0 and column 0 are the border), and of their predecessors
    (i-1, j) and (i, j-1) in the padded state."""
    out: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    p = size + 1
    for d in range(2 * size - 1):
        i = torch.arange(max(0, d - size + 1), min(d, size - 1) + 1, device=device)
        j = d - i
        pos = (i + 1) * p + (j + 1)
        out.append((i * size + j, pos, pos - p, pos - 1))
    return out


def _matmul(w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Per-board matrix products with the board last: w [U, K, M], v [K, P, M] ->
    [U, P, M], out[u, p, m] = sum_k w[u, k, m] v[k, p, m]. K is tiny (2 inputs, k hidden
    neurons), so K broadcast multiply-adds over contiguous boards beat a batched matmul of M
    tiny matrices several times over."""
    out = w[:, 0, None, :] * v[0, None]
    for b in range(1, w.shape[1]):
        out = out + w[:, b, None, :] * v[b, None]
    return out


def _four_ways(x: torch.Tensor) -> torch.Tensor:
    """[N, C, S, S] -> [C, S*S, 4N]: the board as seen by the sweeps from the top-left,
    bottom-left, top-right and bottom-right corners (each then swept from the top left),
    boards last."""
    n, c, s = x.shape[0], x.shape[1], x.shape[2]
    ways = torch.cat([x, x.flip([2]), x.flip([3]), x.flip([2, 3])])
    return ways.reshape(4 * n, c, s * s).permute(1, 2, 0).contiguous()


def _per_sweep(w: torch.Tensor) -> torch.Tensor:
    """Per-board weights [N, ...] -> [..., 4N]: boards last (contiguous), repeated for the
    four sweeps."""
    return w.repeat([4] + [1] * (w.dim() - 1)).movedim(0, -1).contiguous()


def _combine(state: torch.Tensor, w_out: torch.Tensor, size: int) -> torch.Tensor:
    """The padded hidden state [k, (S+1)^2, 4N] of the four sweeps (in `_four_ways` order) and
    output weights [N, k] -> scores [N, S, S] = sigmoid(sum over directions of w_out . h)."""
    n = w_out.shape[0]
    h = state.reshape(state.shape[0], size + 1, size + 1, 4 * n)[:, 1:, 1:]  # [k, S, S, 4N]
    a, b, c, d = h[..., :n], h[..., n:2 * n], h[..., 2 * n:3 * n], h[..., 3 * n:]
    total = a + b.flip([1]) + c.flip([2]) + d.flip([1, 2])
    return _sigmoid((w_out.t()[:, None, None, :] * total).sum(0)).permute(2, 0, 1)


def mdrnn_scores(x: torch.Tensor, w_in: torch.Tensor, w_h: torch.Tensor, w_out: torch.Tensor,
                 w_b: torch.Tensor) -> torch.Tensor:
    """MDRNN scores [N, S, S] of input planes x [N, 2, S, S] with per-board weights w_in
    [N, k, 2], w_h [N, k, k], w_out [N, k], w_b [N, k]. The state is [k, (S+1)^2, 4N]: a
    padded board per neuron (row 0 and column 0 the border), the boards of all four sweeps
    last."""
    size, k = x.shape[2], w_h.shape[1]
    w_h4 = _per_sweep(w_h)
    drive = _matmul(_per_sweep(w_in), _four_ways(x))  # [k, S*S, 4N]
    border = _per_sweep(w_b)[:, None, :]  # [k, 1, 4N]
    state = border.expand(k, (size + 1) * (size + 1), border.shape[2]).contiguous()
    for cell, pos, up, left in _diagonals(size, x.device):
        before = state.index_select(1, up) + state.index_select(1, left)
        h = _tanh(drive.index_select(1, cell) + _matmul(w_h4, before))
        state.index_copy_(1, pos, h)
    return _combine(state, w_out, size)


def mdlstm_scores(x: torch.Tensor, w_in: torch.Tensor, w_h: torch.Tensor,
                  w_peep: torch.Tensor, w_out: torch.Tensor, w_b: torch.Tensor) -> torch.Tensor:
    """MDLSTM scores [N, S, S] of input planes x [N, 2, S, S] with per-board weights w_in
    [N, 5k, 2], w_h [N, 5k, k], w_peep [N, 4, k], w_out [N, k], w_b [N, k] (the state laid
    out as in `mdrnn_scores`; the border's cell state is 0)."""
    size, k = x.shape[2], w_h.shape[2]
    w_h4 = _per_sweep(w_h)
    peep = _per_sweep(w_peep)[:, :, None, :]  # [4, k, 1, 4N]
    p_in, p_f1, p_f2, p_out = peep[0], peep[1], peep[2], peep[3]
    drive = _matmul(_per_sweep(w_in), _four_ways(x))  # [5k, S*S, 4N]
    border = _per_sweep(w_b)[:, None, :]  # [k, 1, 4N]
    hidden = border.expand(k, (size + 1) * (size + 1), border.shape[2]).contiguous()
    cells = torch.zeros_like(hidden)
    for cell, pos, up, left in _diagonals(size, x.device):
        before = hidden.index_select(1, up) + hidden.index_select(1, left)
        a = drive.index_select(1, cell) + _matmul(w_h4, before)
        z, g_in, g_f1 = a[:k], a[k:2 * k], a[2 * k:3 * k]
        g_f2, g_out = a[3 * k:4 * k], a[4 * k:]
        c_up, c_left = cells.index_select(1, up), cells.index_select(1, left)
        c = (_sigmoid(g_in + p_in * (c_up + c_left)) * _tanh(z)
             + _sigmoid(g_f1 + p_f1 * c_up) * c_up
             + _sigmoid(g_f2 + p_f2 * c_left) * c_left)
        h = _sigmoid(g_out + p_out * c) * _tanh(c)
        cells.index_copy_(1, pos, c)
        hidden.index_copy_(1, pos, h)
    return _combine(hidden, w_out, size)


class _Shape(NamedTuple):
    name: str
    shape: tuple[int, ...]


class _SweepNet(nn.Module):
    """Flat-vector access shared by both networks: the parameters in `named_parameters`
    order, each flattened row-major."""

    def _shapes(self) -> list[_Shape]:
        return [_Shape(name, tuple(p.shape)) for name, p in self.named_parameters()]

    def n_weights(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def get_flat(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.parameters()])

    def set_flat(self, flat: torch.Tensor) -> None:
        flat = torch.as_tensor(flat, dtype=torch.float32)
        if flat.shape != (self.n_weights(),):
            raise ValueError(f"a flat vector of {self.n_weights()} weights, "
                             f"got {tuple(flat.shape)}")
        with torch.no_grad():
            start = 0
            for p in self.parameters():
                p.copy_(flat[start:start + p.numel()].reshape(p.shape))
                start += p.numel()

    def unflatten(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Flat vectors [N, d] -> the weights, each with a leading N (in parameter order)."""
        flat = torch.as_tensor(flat, dtype=torch.float32)
        if flat.dim() != 2 or flat.shape[1] != self.n_weights():
            raise ValueError(f"flat vectors [N, {self.n_weights()}], got {tuple(flat.shape)}")
        out, start = [], 0
        for _, shape in self._shapes():
            size = 1
            for s in shape:
                size *= s
            out.append(flat[:, start:start + size].reshape((flat.shape[0], *shape)))
            start += size
        return out


class MDRNN(_SweepNet):
    """The paper's MDRNN: planes [B, 2, S, S] (own, opponent) -> scores [B, S, S]. The
    weights start N(0, init_std^2) from `seed`, a reproducible starting point; training
    replaces them (`set_flat`)."""

    def __init__(self, hidden: int = 2, init_std: float = 1.0, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        k = hidden
        self.w_in = nn.Parameter(torch.randn(k, IN_PLANES, generator=g) * init_std)
        self.w_h = nn.Parameter(torch.randn(k, k, generator=g) * init_std)
        self.w_out = nn.Parameter(torch.randn(k, generator=g) * init_std)
        self.w_b = nn.Parameter(torch.randn(k, generator=g) * init_std)

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        n = boards.shape[0]
        return mdrnn_scores(boards.float(), self.w_in.expand(n, -1, -1),
                            self.w_h.expand(n, -1, -1), self.w_out.expand(n, -1),
                            self.w_b.expand(n, -1))

    def scores_per_board(self, boards: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
        """Scores [B, S, S] of planes [B, 2, S, S], board b played by flat vector flat[b]."""
        w_in, w_h, w_out, w_b = self.unflatten(flat)
        return mdrnn_scores(boards.float(), w_in, w_h, w_out, w_b)


class MDLSTM(_SweepNet):
    """MDLSTM: the MDRNN with 2-D LSTM cells in the sweeps (planes [B, 2, S, S] -> scores),
    weights started as the MDRNN's."""

    def __init__(self, hidden: int = 2, init_std: float = 1.0, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        k = hidden
        self.w_in = nn.Parameter(torch.randn(5 * k, IN_PLANES, generator=g) * init_std)
        self.w_h = nn.Parameter(torch.randn(5 * k, k, generator=g) * init_std)
        self.w_peep = nn.Parameter(torch.randn(4, k, generator=g) * init_std)
        self.w_out = nn.Parameter(torch.randn(k, generator=g) * init_std)
        self.w_b = nn.Parameter(torch.randn(k, generator=g) * init_std)

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        n = boards.shape[0]
        return mdlstm_scores(boards.float(), self.w_in.expand(n, -1, -1),
                             self.w_h.expand(n, -1, -1), self.w_peep.expand(n, -1, -1),
                             self.w_out.expand(n, -1), self.w_b.expand(n, -1))

    def scores_per_board(self, boards: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
        """Scores [B, S, S] of planes [B, 2, S, S], board b played by flat vector flat[b]."""
        w_in, w_h, w_peep, w_out, w_b = self.unflatten(flat)
        return mdlstm_scores(boards.float(), w_in, w_h, w_peep, w_out, w_b)


def draw_weights(net: _SweepNet, seed: int) -> None:
    """Draw every weight of `net` anew, N(0, 1) from `seed` (the constructors start from one
    fixed seed): the configurations' seeded random weights (`ModelSpec.draw`)."""
    with torch.no_grad():
        net.set_flat(torch.randn(net.n_weights(), generator=torch.Generator().manual_seed(seed)))


class CapturePolicy(nn.Module):
    """int8 boards [N, S, S] (0 empty, 1 black, 2 white) -> logits [N, S * S]: the sweep
    network's preferences for the side to move, as log-odds (see the module docstring)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        # module attributes: TorchScript reads no module-level numbers
        self.black, self.white, self.eps = BLACK, WHITE, EPS

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        n = boards.shape[0]
        cells = boards.to(torch.int64)
        black = (cells == self.black).reshape(n, -1).sum(1)
        white = (cells == self.white).reshape(n, -1).sum(1)
        mover = torch.where(black == white, torch.full_like(black, self.black),
                            torch.full_like(black, self.white))[:, None, None]
        own = cells == mover
        opponent = (cells != 0) & (cells != mover)
        scores = self.net(torch.stack([own, opponent], dim=1).float())
        p = scores.clamp(self.eps, 1.0 - self.eps)
        return (torch.log(p) - torch.log1p(-p)).reshape(n, -1)
