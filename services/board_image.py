"""A board as a PNG with a heatmap on its points: the policy of a Predict answer, or the visits
of an Analyze report. People read a picture of a policy faster than a table of probabilities.

Any registered game is drawn the same way: its points as a grid (stones on the intersections),
column and row labels in the game's own notation (`Game.move_name`: "h8" for Gomoku, "D4" for
Go, whose column letters skip I), the stones, the last move ringed in red, each point coloured
by its value (yellow to red, with a colour bar in the values' units: a policy from its smallest
value drawn to its largest, so an untrained network's nearly flat policy still shows its shape;
visits from 0; points without a value are left plain) and the largest values written on their
points. A pass (Go) has no point: its value goes in the title.

The picture is PNG_PX x PNG_PX pixels and the board always fills the same square of it, so
`point_pixel` tells where a point is drawn (what the tests look at).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: files only
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Circle

from services.games.base import BLACK, WHITE, Game, Position

PNG_PX = 800
_DPI = 100
# the board's square in figure fractions: left and bottom margin, side (room above for a title)
_LEFT, _BOTTOM, _SIDE = 0.05, 0.05, 0.85
_COLOUR_BAR = (0.915, 0.05, 0.015, 0.85)
BOARD_COLOUR = "#dcb35c"  # the colour of a wooden board
HEAT_CMAP = "YlOrRd"
LABELLED_POINTS = 12  # the largest values are written on their points


def point_pixel(x: int, y: int, size: int, dx: float = 0.0, dy: float = 0.0) -> tuple[int, int]:
    """(column, row) of the pixel at point (x, y) (y from the bottom) moved by (dx, dy) points,
    row 0 at the top of the image."""
    fx = _LEFT + _SIDE * (x + dx + 0.5) / size
    fy = _BOTTOM + _SIDE * (y + dy + 0.5) / size
    return int(fx * PNG_PX), int((1.0 - fy) * PNG_PX)


def _labels(game: Game, size: int) -> tuple[list[str], list[str]]:
    """Column and row labels from the game's names of the bottom row and the left column."""
    columns = [game.move_name(x, size).rstrip("0123456789") for x in range(size)]
    rows = [game.move_name(y * size, size).lstrip(string.ascii_letters) for y in range(size)]
    return columns, rows


def draw_board(game: Game, state: Position, values: Sequence[float] | np.ndarray | None,
               path: Path | str, title: str = "", percent: bool = True) -> Path:
    """Write `state` with `values` (one per point, y * size + x, and for a game with a pass
    one more, the pass; None: no heatmap) as a PNG at `path`. `percent`: write values as
    percentages (a policy), else as integers (visits)."""
    size = state.size
    n = size * size
    heat = None if values is None else np.asarray(values, dtype=np.float64)
    pass_value = heat[n] if heat is not None and heat.size > n else None
    fig = plt.figure(figsize=(PNG_PX / _DPI, PNG_PX / _DPI), dpi=_DPI)
    ax = fig.add_axes((_LEFT, _BOTTOM, _SIDE, _SIDE))
    ax.set_xlim(-0.5, size - 0.5)
    ax.set_ylim(-0.5, size - 0.5)
    ax.set_facecolor(BOARD_COLOUR)
    fig.patch.set_facecolor("white")
    low = high = 0.0
    if heat is not None:
        grid = heat[:n].reshape(size, size)
        positive = grid[grid > 0]
        if positive.size:
            scale = 100.0 if percent else 1.0
            high = float(positive.max()) * scale
            # a policy's shape from its smallest value drawn; visits are counts, from 0
            low = float(positive.min()) * scale if percent else 0.0
            masked = np.ma.masked_less_equal(grid * scale, 0.0)
            shown = ax.imshow(masked, cmap=HEAT_CMAP, vmin=low, vmax=max(high, low * 1.000001),
                              origin="lower", extent=(-0.5, size - 0.5, -0.5, size - 0.5),
                              interpolation="nearest", zorder=1)
            bar = fig.colorbar(shown, cax=fig.add_axes(_COLOUR_BAR))
            bar.ax.tick_params(labelsize=7)
            bar.set_label("%" if percent else "visits", fontsize=8)
    for i in range(size):  # the lines through the points
        ax.plot([i, i], [0, size - 1], color="black", lw=0.6, zorder=2)
        ax.plot([0, size - 1], [i, i], color="black", lw=0.6, zorder=2)
    board = state.board
    radius = 0.46
    for y in range(size):
        for x in range(size):
            cell = int(board[y, x])
            if cell in (BLACK, WHITE):
                ax.add_patch(Circle((x, y), radius, facecolor="black" if cell == BLACK else
                                    "white", edgecolor="black", lw=0.8, zorder=3))
    last = state.moves[-1] if state.moves else -1
    if 0 <= last < n:
        ax.add_patch(Circle((last % size, last // size), radius * 0.45, fill=False,
                            edgecolor="red", lw=2.0, zorder=4))
    if heat is not None:
        grid = heat[:n]
        order = [p for p in np.argsort(-grid, kind="stable")[:LABELLED_POINTS] if grid[p] > 0]
        for p in order:
            value = 100 * grid[p] if percent else grid[p]
            text = f"{value:.1f}" if percent and value < 10 else f"{value:.0f}"
            dark = value >= low + 0.6 * (high - low)  # white on the darkest reds
            ax.text(p % size, p // size, text, ha="center", va="center", fontsize=7,
                    color="white" if dark else "black", zorder=5)
    columns, rows = _labels(game, size)
    ax.set_xticks(range(size), columns, fontsize=8)
    ax.set_yticks(range(size), rows, fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if pass_value is not None:
        title += f"  (pass: {100 * pass_value:.1f}%)" if percent else f"  (pass: {pass_value:.0f})"
    fig.suptitle(title, fontsize=10, y=1.0 - (1.0 - _BOTTOM - _SIDE) / 2)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=_DPI)
    plt.close(fig)
    return out
