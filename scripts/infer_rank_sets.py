"""The paper's four Go sets (Pro20m, Pro40m, Ama20m, Ama40m) from the rank data of ../shared.

Hsueh & Ikeda (2023), section 5: 100 games a set, professional games and mid-level amateur
(1-dan) games, no handicap stones and no capture until the 50th move, cut to their first 20 or
40 moves. Here the players' ranks are the SGFs' BR / WR properties of the Go archives of
../shared (kgs-games-dev.tar.gz, go-games-other-dev.tar.gz and the loose KGS files):

* Pro: both ranks professional ("9p", "P9", "P8段", "9 Dan Professional", ...);
* Ama: both ranks kyu or low dan (1d-3d, KGS's "*" of an unsure rank allowed): the nearest the
  archives hold to the paper's 1-dan amateurs (they hold 12 "1d" ranks; most of these players
  are 8-17 kyu on KGS, weaker than the paper's).

19x19 games only (the paper's board), a game counted once (the first copy of its first 60
moves), the paper's filter (`services.move_order.evaluation.exclusion`: no set-up stones, no
pass or capture in the first 50 moves, at least the set's moves), then up to 100 games a set
in the fixed hash order of their ids, the games of `--dataset`'s held-out split (`game_test`,
which the network evaluated never trained on) first.

    # the sets and their counts
    .venv/bin/python scripts/infer_rank_sets.py sets [--dataset runs/go9/dataset] \\
        --out runs/infer_rank/sets.json
    # inference on one set (a TorchScript Go policy in this process, one torch thread);
    # results in infer_eval's format (`infer_eval.py report --results-dir` reads them)
    .venv/bin/python scripts/infer_rank_sets.py run --sets runs/infer_rank/sets.json \\
        --set Pro20m --model M.pt [--limit N] [--iterations N] --results R.jsonl
    # the Go archives without every game of the four sets (and without any other copy of
    # their moves), to train a network that never saw them (`flows.ingest` reads the copies)
    .venv/bin/python scripts/infer_rank_sets.py sources --sets runs/infer_rank/sets.json \\
        --out runs/infer_rank/heldout/sources
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import infer_eval  # noqa: E402

from services.games.registry import get_game  # noqa: E402
from services.move_order.evaluation import (  # noqa: E402
    GO_CLEAN_MOVES,
    EvalPosition,
    RecordedGame,
    evaluate_position,
    exclusion,
    game_hash,
    held_out_ids,
)
from services.records.sgf import SgfGame, read_sgf  # noqa: E402
from services.settings import bounded  # noqa: E402

log = logging.getLogger("infer_rank_sets")

LOOSE_KGS = infer_eval.SHARED / "kgs" / "loose"
SET_SIZE = 100  # the paper's games a set
SETS = {"Pro20m": ("pro", 20), "Pro40m": ("pro", 40), "Ama20m": ("ama", 20),
        "Ama40m": ("ama", 40)}
PRO_RANK = re.compile(r"^(p\s*\d+\s*段?|\d+\s*p|\d+\s*dan\s+pro(fessional)?|pro(fessional)?)$",
                      re.IGNORECASE)
AMATEUR_RANK = re.compile(r"^(\d+)\s*([kd])\s*[*?]?$", re.IGNORECASE)
LOW_DAN = 3  # the highest dan counted as "low dan"
DEDUP_MOVES = 60  # two records with the same first moves are one game


def rank_class(rank: str) -> str:
    """'pro', 'kyu', 'low_dan' (1d-3d), 'high_dan' (4d+) or 'other' (none, ratings, 9段...)."""
    text = rank.strip()
    if PRO_RANK.match(text):
        return "pro"
    found = AMATEUR_RANK.match(text)
    if found is None:
        return "other"
    if found.group(2).lower() == "k":
        return "kyu"
    return "low_dan" if int(found.group(1)) <= LOW_DAN else "high_dan"


def level(record: SgfGame) -> str | None:
    """'pro' when both players are professionals, 'ama' when both are kyu or low dan."""
    classes = {rank_class(record.black_rank), rank_class(record.white_rank)}
    if classes == {"pro"}:
        return "pro"
    if classes <= {"kyu", "low_dan"}:
        return "ama"
    return None


def records() -> Iterator[SgfGame]:
    """infer_eval's Go archives, then the loose KGS files (they carry ranks too)."""
    yield from infer_eval.go_records()
    if LOOSE_KGS.is_dir():
        for path in sorted(LOOSE_KGS.glob("*.sgf")):
            for record in read_sgf(path):
                if isinstance(record, SgfGame):
                    yield record


def build_sets(held_out: set[str]) -> dict:
    """The four sets and the counts of every stage (see the module's docstring)."""
    go = get_game("go")
    counts: Counter[str] = Counter()
    seen: set[tuple] = set()
    games: dict[str, list] = {"pro": [], "ama": []}
    for record in records():
        which = level(record)
        if which is None:
            continue
        counts[f"{which}: both ranks"] += 1
        if record.size != infer_eval.GO_SIZE:
            continue
        counts[f"{which}: 19x19"] += 1
        key = record.moves[:DEDUP_MOVES]
        if key in seen:
            counts[f"{which}: duplicate"] += 1
            continue
        seen.add(key)
        counts[f"{which}: 19x19, distinct"] += 1
        games[which].append(infer_eval.recorded_go_game(record))
    sets: dict[str, list[dict]] = {}
    for name, (which, n) in SETS.items():
        qualifying = []
        for game in games[which]:
            why = exclusion(go, game, n, GO_CLEAN_MOVES)
            if why is None:
                qualifying.append(game)
            else:
                counts[f"{name}: excluded, {why.split(' ')[0]}"] += 1
        counts[f"{name}: qualifying"] = len(qualifying)
        qualifying.sort(key=lambda g: (g.game_id not in held_out, game_hash(g.game_id)))
        chosen = qualifying[:SET_SIZE]
        counts[f"{name}: in the set"] = len(chosen)
        counts[f"{name}: held out of the network's training"] = sum(
            g.game_id in held_out for g in chosen)
        sets[name] = [{"game_id": g.game_id, "moves": [int(m) for m in g.moves[:n]],
                       "held_out": g.game_id in held_out} for g in chosen]
    return {"counts": dict(sorted(counts.items())), "sets": sets}


def set_members(sets: dict[str, list[dict]],
                games: Iterable[RecordedGame]) -> tuple[dict[str, set[str]], Counter[str]]:
    """The archive members to leave out of a training set so that the network never sees a
    game of `sets` (`sets.json`'s "sets"): the member of each set game (a member may hold
    several games, all of them go), and every member holding another copy of a set game's
    moves, since the sets keep one copy of a game and the archives hold some twice. Keyed
    by archive file name (ids are `<archive>:<member>#<n>`); the counts say why."""
    ids = {g["game_id"] for chosen in sets.values() for g in chosen}
    openings = {(len(g["moves"]), tuple(g["moves"])) for chosen in sets.values()
                for g in chosen}
    lengths = sorted({n for n, _ in openings})
    drop: dict[str, set[str]] = {}
    counts: Counter[str] = Counter()
    for game in games:
        if game.game_id in ids:
            why = "a set game"
        elif game.size == infer_eval.GO_SIZE and any(
                (n, tuple(game.moves[:n])) in openings for n in lengths
                if len(game.moves) >= n):
            why = "a copy of a set game's moves"
        else:
            continue
        archive, rest = game.game_id.split(":", 1)
        drop.setdefault(archive, set()).add(rest.rsplit("#", 1)[0])
        counts[why] += 1
    counts["members left out"] = sum(len(m) for m in drop.values())
    return drop, counts


def write_sources(sets: dict[str, list[dict]], out: Path) -> dict:
    """Copies of infer_eval's Go archives without the members `set_members` names (same
    member names, so the remaining games keep their ids)."""
    drop, counts = set_members(sets, (infer_eval.recorded_go_game(r)
                                      for r in infer_eval.go_records()))
    out.mkdir(parents=True, exist_ok=True)
    sources = [str(infer_eval.filter_archive(a, out / a.name, drop.get(a.name, set())))
               for a in infer_eval.GO_ARCHIVES]
    info = {"counts": dict(sorted(counts.items())), "sources": sources,
            "left_out": {a: sorted(m) for a, m in sorted(drop.items())}}
    (out / "left_out.json").write_text(json.dumps(info, indent=1))
    return info


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    go = get_game("go")
    chosen = json.loads(args.sets.read_text())["sets"][args.set]
    if args.held_out_only:
        chosen = [g for g in chosen if g["held_out"]]
    chosen = chosen[:args.limit] if args.limit else chosen
    params = infer_eval.annealing_params(args)
    policy = infer_eval.TorchScriptPolicy(args.model)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    done = infer_eval.done_keys(args.results)
    for i, g in enumerate(chosen):
        position = EvalPosition(f"{g['game_id']}@{len(g['moves'])}", g["game_id"],
                                "game_test" if g["held_out"] else "trained",
                                infer_eval.GO_SIZE, tuple(g["moves"]))
        if position.key in done:
            continue
        row = evaluate_position(go, position, policy, params, 0)
        row |= {"set": args.set, "model": str(args.model), "held_out": g["held_out"],
                "iterations": params.iterations, "restarts": params.restarts,
                "load": os.getloadavg()[0],
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with args.results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        log.info("%d/%d %s: actual %.4f inferred %.4f greedy %.4f exact %s %.1f CPU s",
                 i + 1, len(chosen), position.key, row["actual_gm"], row["inferred_gm"],
                 row["greedy_gm"], row["exact"], row["cpu_seconds"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sets", help="build the four sets; counts on stdout")
    s.add_argument("--dataset", type=Path, default=None,
                   help="the evaluated network's training dataset: its game_test games first")
    s.add_argument("--out", type=Path, required=True)
    w = sub.add_parser("sources", help="the Go archives without the sets' games")
    w.add_argument("--sets", type=Path, required=True, help="`sets`'s --out")
    w.add_argument("--out", type=Path, required=True, help="a folder for the copies")
    r = sub.add_parser("run", help="inference on one set, appended to --results")
    r.add_argument("--sets", type=Path, required=True, help="`sets`'s --out")
    r.add_argument("--set", choices=sorted(SETS), required=True)
    r.add_argument("--model", type=Path, required=True, help="a TorchScript Go policy")
    r.add_argument("--limit", type=bounded(int, 0, 1000), default=0,
                   help="positions (0: the whole set)")
    r.add_argument("--held-out-only", action="store_true",
                   help="only the games the network never trained on")
    infer_eval.add_annealing_arguments(r)
    r.add_argument("--threads", type=bounded(int, 1, 256), default=1)
    r.add_argument("--results", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.command == "sets":
        held = held_out_ids(args.dataset) if args.dataset is not None else set()
        built = build_sets(held)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(built, indent=1))
        print(json.dumps(built["counts"], indent=1))
    elif args.command == "sources":
        info = write_sources(json.loads(args.sets.read_text())["sets"], args.out)
        print(json.dumps({"counts": info["counts"], "sources": info["sources"]}, indent=1))
    else:
        run(args)


if __name__ == "__main__":
    main()
