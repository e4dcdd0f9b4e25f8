"""SGF parse speed: the project's reader against sgfmill on the same files, in the same run.

    .venv/bin/python benchmarks/sgf_parse.py [--repeat 5] [--copies 1]

Input: every member of the real Go archives in ../shared/data (KGS and the 4,743 "other"
games with their format oddities), read into memory first, so only parsing is timed. Each
reader turns every file's bytes into its games' main lines:
  * ours: `services.records.sgf.read_sgf` (decoding, game info, set-up, main line, results);
    also token by token (tests/reference_impls.py), to show what the fast path buys;
  * sgfmill 1.1.1: `Sgf_game.from_bytes` + `get_main_sequence()`, and each node's B / W
    values decoded by sgfmill (`node.get`), as `get_move()` does (it keeps one move a node).
Check: on every file both read, the first game's main-line moves must be equal (sgfmill's
(row, col) has row 0 at the bottom, like ours, so a point is row * size + col); files only one
side reads are counted and listed by reason.

Figures: CPU seconds (process time: the part the code decides, steadier than wall time on a
shared machine), best and median of --repeat, games/s and moves/s, and ours / sgfmill.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sgfmill import sgf as sgfmill_sgf  # noqa: E402

from services.records import sgf as ours  # noqa: E402
from tests.reference_impls import sgf_token_by_token  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
ARCHIVES = [SHARED / "kgs" / "kgs-games-dev.tar.gz",
            SHARED / "go-other" / "go-games-other-dev.tar.gz"]


def load_files(copies: int) -> list[tuple[str, bytes]]:
    files = []
    for path in ARCHIVES:
        if not path.exists():
            sys.exit(f"{path} not found: this benchmark needs ../shared/data")
        with tarfile.open(path) as archive:
            files += [(m.name, archive.extractfile(m).read()) for m in archive if m.isfile()]
    return files * copies


def parse_ours(files: list[tuple[str, bytes]]) -> dict[str, list]:
    """name -> the first game's moves as (colour, point); absent when rejected."""
    out = {}
    for name, data in files:
        for item in ours.read_sgf(data, name):
            if isinstance(item, ours.SgfGame) and item.game_index == 0:
                out[name] = list(item.moves)
    return out


def parse_sgfmill(files: list[tuple[str, bytes]]) -> dict[str, list]:
    out = {}
    for name, data in files:
        try:
            game = sgfmill_sgf.Sgf_game.from_bytes(data)
            size = game.get_size()
            moves = []
            for node in game.get_main_sequence():
                # get_move() gives one move a node; a few records put B and W in one node
                for prop in node.properties():
                    if prop in ("B", "W"):
                        move = node.get(prop)
                        point = None if move is None else move[0] * size + move[1]
                        moves.append((1 if prop == "B" else 2, point))
        except Exception:  # sgfmill raises ValueError and others on bad files
            continue
        out[name] = moves
    return out


def timed(fn, files, repeat: int) -> tuple[list[float], dict]:
    times, result = [], {}
    for _ in range(repeat):
        start = time.process_time()
        result = fn(files)
        times.append(time.process_time() - start)
    return times, result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--copies", type=int, default=1, help="read the files N times")
    args = parser.parse_args(argv)

    files = load_files(args.copies)
    size_mb = sum(len(d) for _, d in files) / 1e6
    print(f"{platform.node()} {platform.machine()}, Python {platform.python_version()}; "
          f"{len(files)} files, {size_mb:.1f} MB, best / median of {args.repeat}")

    runs = {}
    runs["ours"] = timed(parse_ours, files, args.repeat)
    with sgf_token_by_token():
        runs["ours, token by token"] = timed(parse_ours, files, args.repeat)
    runs["sgfmill 1.1.1"] = timed(parse_sgfmill, files, args.repeat)

    base = min(runs["sgfmill 1.1.1"][0])
    print(f"\n{'reader':24s} {'games':>6s} {'moves':>8s} {'CPU s best':>10s} {'median':>8s} "
          f"{'games/s':>9s} {'moves/s':>11s} {'speed vs sgfmill':>17s}")
    for label, (times, result) in runs.items():
        moves = sum(map(len, result.values()))
        best = min(times)
        print(f"{label:24s} {len(result):6d} {moves:8d} {best:10.3f} "
              f"{statistics.median(times):8.3f} {len(result) / best:9,.0f} "
              f"{moves / best:11,.0f} {base / best:16.1f}x")

    mine, theirs = runs["ours"][1], runs["sgfmill 1.1.1"][1]
    both = mine.keys() & theirs.keys()
    differ = sorted(n for n in both if mine[n] != theirs[n])
    print(f"\nmain lines compared on {len(both)} files read by both: {len(differ)} differ")
    for name in differ[:10]:
        print(f"  {name}: ours {len(mine[name])} moves, sgfmill {len(theirs[name])}")
    only = Counter()
    for name, _ in files:
        if name in mine and name not in theirs:
            only["read by ours only"] += 1
        elif name in theirs and name not in mine:
            only["read by sgfmill only (ours rejects it, with a reason)"] += 1
    for what, n in only.items():
        print(f"  {n} files {what}")
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    main()
