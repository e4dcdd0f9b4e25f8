"""Go tactical channels benchmark: what the extended input (services/games/go/tactics.py,
services/games/go/encoders.py) costs per position against the basic 4-plane compact input, on
the same real 19x19 positions, in the same run.

    .venv/bin/python benchmarks/go_tactics.py [--games 200] [ARCHIVE ...]

Default archive: ../shared/data/kgs/kgs-games-dev.tar.gz; the positions are every position
before each move of an evenly spread sample of --games 19x19 games (`replay` keeping its
states). Parsing and replay happen before any timing. Two paths are timed, each against its
own 4-plane baseline:
  * serving, one position a call: `go_features.compact(state)` (what a search or a request
    builds) against `tactical_planes` of that one position;
  * data, a whole game a call: `go_fast.game_compact` (the compiled replay ingest writes shards
    with) against `tactical_planes` of the game's positions in one batch.
Figures are µs per position per CPU-second (`time.process_time`, this process, one thread),
the sides interleaved game by game so load on a shared machine hits both alike. One call of
each compiled kernel runs first, so compiling (or loading the on-disk cache) is not timed.
Untimed, it also checks that a batch answers as single calls do (exit status 1 if not), and
counts the tactical points found and the positions whose ladder channels change when the
ladder reader is given ten times `MAX_LADDER_PLAYS` (0: no read of these positions runs out of
its budget).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.go_replay import archives_found, machine  # noqa: E402
from services.games.go.fast import game_compact  # noqa: E402
from services.games.go.features import compact  # noqa: E402
from services.games.go.rules import replay  # noqa: E402
from services.games.go.tactics import (  # noqa: E402
    LADDER_CAPTURE,
    LADDER_ESCAPE,
    MAX_LADDER_PLAYS,
    TACTICAL_CHANNELS,
    tactical_planes,
)
from services.records.sgf import SgfGame, read_archive  # noqa: E402

DEFAULT_ARCHIVE = ROOT.parent / "shared" / "data" / "kgs" / "kgs-games-dev.tar.gz"
SIZE = 19


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archives", nargs="*", type=Path, default=[DEFAULT_ARCHIVE])
    parser.add_argument("--games", type=int, default=200, help="games sampled (evenly spread)")
    args = parser.parse_args()
    if not archives_found(args.archives):
        return 2
    print(machine())
    games = [g for p in args.archives for g in read_archive(p)
             if isinstance(g, SgfGame) and g.size == SIZE]
    sample = games[:: max(1, len(games) // args.games)][: args.games]
    states = []
    for g in sample:
        rep = replay(g, keep_states=True)
        states.append(rep.states[: rep.played])  # the position before each applied move
    kept = [(g, s) for g, s in zip(sample, states, strict=True) if s]
    positions = sum(len(s) for _, s in kept)
    print(f"{len(kept)} of {len(games)} {SIZE}x{SIZE} games, {positions:,} positions")

    first = np.stack([compact(s) for s in kept[0][1]])
    tactical_planes(first[:1])  # compile or load the kernels: not timed
    game_compact(kept[0][0])

    spent = dict.fromkeys(("served4", "served_tactics", "data4", "data_tactics"), 0.0)
    data_positions = 0
    found = np.zeros(TACTICAL_CHANNELS, np.int64)
    changed = disagree = 0
    for game, game_states in kept:
        t0 = time.process_time()
        served = [compact(s) for s in game_states]
        t1 = time.process_time()
        one_by_one = [tactical_planes(c[None]) for c in served]
        t2 = time.process_time()
        replayed = game_compact(game).inputs
        t3 = time.process_time()
        batch = tactical_planes(replayed)
        t4 = time.process_time()
        spent["served4"] += t1 - t0
        spent["served_tactics"] += t2 - t1
        spent["data4"] += t3 - t2
        spent["data_tactics"] += t4 - t3
        data_positions += len(replayed)
        planes = np.concatenate(one_by_one)
        if len(replayed) == len(served):  # a batch answers as one position a call does
            same = (replayed == np.stack(served)).all(axis=(1, 2, 3))
            disagree += int((batch[same] != planes[same]).any(axis=(1, 2, 3)).sum())
        found += (planes > 0).sum(axis=(0, 2, 3))
        longer = tactical_planes(np.stack(served), max_plays=10 * MAX_LADDER_PLAYS)
        ladders = [LADDER_CAPTURE, LADDER_ESCAPE]
        changed += int((longer[:, ladders] != planes[:, ladders]).any(axis=(1, 2, 3)).sum())

    def us(key: str, n: int) -> float:
        return 1e6 * spent[key] / n

    rows = [
        ("serving: 4-plane compact (go_features.compact)", us("served4", positions), None),
        ("serving: tactical channels, one position a call", us("served_tactics", positions),
         us("served4", positions)),
        ("data: 4-plane compact (go_fast.game_compact)", us("data4", data_positions), None),
        ("data: tactical channels, a game a call", us("data_tactics", data_positions),
         us("data4", data_positions)),
    ]
    print(f"\n{'encoding':<52}{'µs/position':>12}{'x 4-plane':>11}")
    for name, cost, base in rows:
        ratio = f"{cost / base:>10.1f}x" if base else f"{'1.0x':>11}"
        print(f"{name:<52}{cost:>12.2f}{ratio}")
    extended = us("served4", positions) + us("served_tactics", positions)
    print(f"{'serving: extended input (both)':<52}{extended:>12.2f}"
          f"{extended / us('served4', positions):>10.1f}x")
    names = ("capture", "self-atari", "liberties after", "ladder capture", "ladder escape",
             "sensible")
    print("\npoints per position: " + ", ".join(
        f"{n} {c / positions:.2f}" for n, c in zip(names, found, strict=True)))
    print(f"positions whose ladder channels change with {10 * MAX_LADDER_PLAYS} plays a read: "
          f"{changed}/{positions}")
    print(f"positions a batch and a single call answer differently: {disagree}")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
