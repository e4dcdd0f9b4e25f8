"""Go whole-board scans benchmark: the per-point liberties, the legal mask and the compact network
input of real positions, compiled (services/games/go/scan.py, as `GoState.liberties`,
`GoState.legal_mask` and `go_features.compact` run them) against the interpreted references
(tests/go_reference.py), on the same positions.

    .venv/bin/python benchmarks/go_scan.py [--games 200] [ARCHIVE ...]

Default archives: ../shared/data/kgs/kgs-games-dev.tar.gz and
../shared/data/go-other/go-games-other-dev.tar.gz; the positions are every position of every
game (`replay` keeping its states) of an evenly spread sample of --games games. Parsing and
replay happen before any timing. Figures are positions per CPU-second (`time.process_time`,
this process, one thread), the two sides interleaved game by game so load on a shared machine
hits both alike, and their ratio; the answers are compared position by position (exit status 1
if any differs). One call of each compiled scan runs first, so compiling (or loading the
on-disk cache) is not timed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.go_replay import DEFAULT_ARCHIVES, archives_found, machine  # noqa: E402
from services.games.go.features import compact  # noqa: E402
from services.games.go.rules import GoState, replay  # noqa: E402
from services.records.sgf import SgfGame, read_archive  # noqa: E402
from tests.go_reference import (  # noqa: E402
    compact_reference,
    legal_mask_reference,
    liberties_reference,
)


def compiled(state: GoState) -> tuple[list[int], list[bool], bytes]:
    return (state.liberties().reshape(-1).tolist(), state.legal_mask().tolist(),
            compact(state).tobytes())


def interpreted(state: GoState) -> tuple[list[int], list[bool], bytes]:
    libs = liberties_reference(state)
    planes = compact_reference(state, liberties=np.array(libs).reshape(state.size, state.size))
    return libs, legal_mask_reference(state, state.to_move), planes.tobytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archives", nargs="*", type=Path, default=list(DEFAULT_ARCHIVES))
    parser.add_argument("--games", type=int, default=200, help="games sampled (evenly spread)")
    args = parser.parse_args()
    if not archives_found(args.archives):
        return 2
    print(machine())
    games = [g for p in args.archives for g in read_archive(p) if isinstance(g, SgfGame)]
    sample = games[:: max(1, len(games) // args.games)][: args.games]
    states = [rep.states for rep in (replay(g, keep_states=True) for g in sample)]
    positions = sum(len(s) for s in states)
    print(f"{len(sample)} of {len(games)} games, {positions:,} positions (sizes "
          f"{sorted({s[0].size for s in states if s})})")
    compiled(states[0][0])  # compile or load the kernels: not timed

    fast_s = slow_s = 0.0
    differ = 0
    for game_states in states:
        t0 = time.process_time()
        fast = [compiled(s) for s in game_states]
        t1 = time.process_time()
        slow = [interpreted(s) for s in game_states]
        t2 = time.process_time()
        fast_s += t1 - t0
        slow_s += t2 - t1
        differ += sum(a != b for a, b in zip(fast, slow, strict=True))
    fast_rate, slow_rate = positions / fast_s, positions / slow_s
    print(f"liberties, legal mask of the side to move and compact input, {positions:,} "
          "positions:")
    print(f"  interpreted {slow_rate:>10,.0f} positions/s per CPU-second ({slow_s:6.1f} CPU s, "
          f"{1e6 / slow_rate:.1f} µs a position)")
    print(f"  compiled    {fast_rate:>10,.0f} positions/s per CPU-second ({fast_s:6.1f} CPU s, "
          f"{1e6 / fast_rate:.1f} µs a position)")
    print(f"  ratio       {fast_rate / slow_rate:>10.1f}x")
    print(f"  identical   {positions - differ:,}/{positions:,} positions")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
