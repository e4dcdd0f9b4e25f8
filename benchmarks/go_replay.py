"""Go replay + compact planes benchmark: the reference (`GoState` replay, then `compact` per
position) against the compiled incremental replay of services/games/go/fast.py, on the real games.

    .venv/bin/python benchmarks/go_replay.py [--reference-every 4] [--repeat 3] [ARCHIVE ...]

Default archives: ../shared/data/kgs/kgs-games-dev.tar.gz and
../shared/data/go-other/go-games-other-dev.tar.gz (4,835 games, ~797k positions). Parsing
(`read_archive`) happens once, before any timing, and is reported on its own.

Figures (positions/s per CPU-second: `time.process_time`, this process only, one thread):
  * reference and fast on the same games (every --reference-every-th game; 1 = all, which
    costs ~3 min of CPU for the reference), timed call by call and interleaved game by game,
    so load on a shared machine hits both alike; their ratio; and a check that the two give
    identical arrays (inputs, moves, to_move, plies, results, ranks) and errors;
  * fast over every game, best and median of --repeat runs.
Results are dropped as soon as they are compared, so neither side pays for the other's
memory. Exit status 1 if any game differs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.host import cpu_model  # noqa: E402
from services.games.go.replay import GoPairs, game_pairs  # noqa: E402
from services.records.sgf import SgfGame, read_archive  # noqa: E402
from tests.go_reference import game_pairs_reference  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
DEFAULT_ARCHIVES = (SHARED / "kgs" / "kgs-games-dev.tar.gz",
                    SHARED / "go-other" / "go-games-other-dev.tar.gz")


def same(a: GoPairs, b: GoPairs) -> bool:
    """Byte-identical arrays (dtype and shape included), ranks and error."""
    for name in ("inputs", "moves", "to_move", "plies", "results"):
        x, y = getattr(a, name), getattr(b, name)
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            return False
    return a.ranks == b.ranks and a.error == b.error


def machine() -> str:
    """The first line of a Go records benchmark: CPU, CPUs, load and versions."""
    return (f"{cpu_model()}, {os.cpu_count()} CPUs, load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; Python "
            f"{platform.python_version()}, numpy {np.__version__}")


def archives_found(archives: list[Path]) -> bool:
    """Whether every archive is a file (else says which are not, on stderr)."""
    missing = [str(p) for p in archives if not p.is_file()]
    if missing:
        print(f"archives not found: {missing}", file=sys.stderr)
    return not missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archives", nargs="*", type=Path, default=list(DEFAULT_ARCHIVES))
    parser.add_argument("--reference-every", type=int, default=4,
                        help="time the reference on every N-th game (1 = all games)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of fast over all games")
    args = parser.parse_args()
    if not archives_found(args.archives):
        return 2
    print(machine())
    start = time.process_time()
    games = [g for p in args.archives for g in read_archive(p) if isinstance(g, SgfGame)]
    parse_s = time.process_time() - start
    total = sum(len(g.moves) for g in games)
    print(f"read {len(games)} games ({total:,} moves) from {len(args.archives)} archives in "
          f"{parse_s:.1f} CPU s (not counted below)")

    subset = games[:: args.reference_every]
    ref_s = fast_s = 0.0
    positions = 0
    differ: list[str] = []
    for g in subset:
        t0 = time.process_time()
        ref = game_pairs_reference(g)
        t1 = time.process_time()
        fast = game_pairs(g)
        t2 = time.process_time()
        ref_s += t1 - t0
        fast_s += t2 - t1
        positions += len(ref.moves)
        if not same(fast, ref):
            differ.append(f"{g.source}#{g.game_index}")
    ref_rate, fast_rate = positions / ref_s, positions / fast_s
    print(f"\nsame {len(subset)} games (every {args.reference_every}), {positions:,} positions:")
    print(f"  reference  {ref_rate:>11,.0f} positions/s per CPU-second ({ref_s:6.1f} CPU s)")
    print(f"  fast       {fast_rate:>11,.0f} positions/s per CPU-second ({fast_s:6.1f} CPU s)")
    print(f"  ratio      {fast_rate / ref_rate:>11.1f}x")
    print(f"  identical  {len(subset) - len(differ)}/{len(subset)} games"
          + (f"; DIFFER: {differ[:10]}" if differ else ""))

    rates = []
    played = 0
    for _ in range(args.repeat):
        t0 = time.process_time()
        played = 0
        for g in games:
            played += len(game_pairs(g).moves)
        rates.append(played / (time.process_time() - t0))
    print(f"\nfast over all {len(games)} games ({played:,} positions), {args.repeat} runs: "
          f"best {max(rates):,.0f}, median {statistics.median(rates):,.0f} positions/s per "
          f"CPU-second")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
