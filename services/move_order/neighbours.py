"""The paper's neighbour functions: small changes of an order that keep black's stones on the
even plies and white's on the odd ones.

Each returns the new order and the first ply where it differs from the old one (what
`PrefixScorer.rescore` re-evaluates from), or None when the order is too short for it:

* swp2: swap two stones of one colour;
* mov2: take two consecutive stones (one of each colour) and put them elsewhere, at a ply of
  the same parity, so the colours still alternate;
* rot3: rotate three stones of one colour (either direction);
* mix: the three in turn (swp2, mov2, rot3, swp2, ...), the next one when one cannot apply.

`every_neighbour` lists all the swp2 and mov2 neighbours of an order (what the final descent of
`annealing.polish` tries): n^2 / 4 + n^2 / 2 of them, about, against n^3 / 12 for rot3's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Move = tuple[tuple[int, ...], int]  # (new order, first changed ply)
Neighbour = Callable[[Sequence[int], np.random.Generator], Move | None]


def _color_plies(n: int, rng: np.random.Generator, need: int) -> list[int] | None:
    """The plies of one colour with at least `need` stones, the colour drawn at random."""
    colors = [c for c in (0, 1) if len(range(c, n, 2)) >= need]
    if not colors:
        return None
    c = colors[int(rng.integers(len(colors)))]
    return list(range(c, n, 2))


def swp2(order: Sequence[int], rng: np.random.Generator) -> Move | None:
    plies = _color_plies(len(order), rng, 2)
    if plies is None:
        return None
    a, b = sorted(int(p) for p in rng.choice(plies, 2, replace=False))
    new = list(order)
    new[a], new[b] = new[b], new[a]
    return tuple(new), a


def rot3(order: Sequence[int], rng: np.random.Generator) -> Move | None:
    plies = _color_plies(len(order), rng, 3)
    if plies is None:
        return None
    a, b, c = sorted(int(p) for p in rng.choice(plies, 3, replace=False))
    new = list(order)
    if rng.integers(2):
        new[a], new[b], new[c] = order[c], order[a], order[b]
    else:
        new[a], new[b], new[c] = order[b], order[c], order[a]
    return tuple(new), a


def mov2(order: Sequence[int], rng: np.random.Generator) -> Move | None:
    n = len(order)
    # a pair starting at ply i goes to another ply j of i's parity, j <= n - 2
    starts = [i for i in range(n - 1) if len(range(i % 2, n - 1, 2)) >= 2]
    if not starts:
        return None
    i = starts[int(rng.integers(len(starts)))]
    places = [j for j in range(i % 2, n - 1, 2) if j != i]
    j = places[int(rng.integers(len(places)))]
    rest = [*order[:i], *order[i + 2:]]
    new = (*rest[:j], order[i], order[i + 1], *rest[j:])
    return tuple(int(m) for m in new), min(i, j)


NEIGHBOURS: dict[str, Neighbour] = {"swp2": swp2, "mov2": mov2, "rot3": rot3}
MIX = ("swp2", "mov2", "rot3")
NAMES = (*NEIGHBOURS, "mix")


def propose(name: str, order: Sequence[int], rng: np.random.Generator,
            iteration: int) -> Move | None:
    """A neighbour of `order` by `name` (one of `NAMES`); mix picks by `iteration`."""
    if name != "mix":
        try:
            return NEIGHBOURS[name](order, rng)
        except KeyError:
            raise ValueError(f"unknown neighbour {name!r} (one of {', '.join(NAMES)})") from None
    for k in range(len(MIX)):
        move = NEIGHBOURS[MIX[(iteration + k) % len(MIX)]](order, rng)
        if move is not None:
            return move
    return None


def every_neighbour(order: Sequence[int]) -> list[Move]:
    """Every distinct swp2 and mov2 neighbour of `order` (each with its first changed ply),
    swp2's first, in a fixed order; the order itself is not among them."""
    n = len(order)
    base = tuple(int(m) for m in order)
    seen = {base}
    out: list[Move] = []

    def add(new: tuple[int, ...], first: int) -> None:
        if new not in seen:
            seen.add(new)
            out.append((new, first))

    for a in range(n):
        for b in range(a + 2, n, 2):
            new = list(base)
            new[a], new[b] = new[b], new[a]
            add(tuple(new), a)
    for i in range(n - 1):
        rest = [*base[:i], *base[i + 2:]]
        for j in range(i % 2, n - 1, 2):
            if j != i:
                add((*rest[:j], base[i], base[i + 1], *rest[j:]), min(i, j))
    return out
