"""Move-order inference on real games, figures as Hsueh & Ikeda (2023): sets, runs, report.

    # 1. training sources without the evaluation games (then ingest and train on them)
    .venv/bin/python scripts/infer_eval.py prepare --game gomoku --out runs/infer_eval/gomoku
    .venv/bin/python scripts/infer_eval.py prepare --game go --out runs/infer_eval/go
    .venv/bin/python scripts/infer_eval.py prepare --game gomoku --records F.rif --out DIR
    # 2. inference on a set, one JSON line per position appended to --results (resumable)
    .venv/bin/python scripts/infer_eval.py run --game gomoku --prepared runs/infer_eval/gomoku \
        --dataset runs/infer_eval/gomoku/dataset --model runs/infer_eval/gomoku/strong/model.pt \
        --stones 20 --limit 100 [--restarts 5] [--iterations N | --budget B] \
        [--neighbour mix] [--init greedy] --results runs/infer_eval/results/X.jsonl
    # 3. figures of every results file, scatter plots
    .venv/bin/python scripts/infer_eval.py report --results-dir runs/infer_eval/results \
        --png-prefix docs/infer_sequence_

Sets (`services.move_order.evaluation`): the first `--stones` moves of real games the network
never trained on. Gomoku/Renju: the RenjuNet-derived games of ../shared; Go: the 19x19 games of
the ../shared archives with no handicap and no pass or capture in the first 50 moves.
`prepare --game gomoku --records F.rif` takes the games of a .rif file instead (all under one
rule, e.g. the rule-based player's freestyle games of services.games.gomoku.selfplay: a player a
network can learn closely, so the method is measured apart from the network's weakness); `run`
reads the same file, named in prepare's kept_out.json.
`prepare` chooses `--keep-out` qualifying games by a hash of their ids and writes the training
sources without them (a .rif file; Go: copies of the archives without their members); the
ingest of those sources holds out 5% of the games more (`game_test`), and a set takes those
first, then the kept-out ones.

The network is a TorchScript policy run in this process with `--threads` torch threads (set
explicitly), or with `--rulebot` the rule-based Gomoku player's own move distribution (on its
games: the policy a network trained on them can at best learn). The annealing is the
production `infer_order` with `AnnealingParams`: the paper's recipe by default (greedy
initial order, mix, T 1.0 -> 0.1, 5 restarts of 5,000 iterations at 20 stones, 20,000 at 40);
`--iterations` per restart or `--budget` candidates per position in all (budget / restarts per
restart) set a smaller one.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.api.movepred.v1 import search_pb2  # noqa: E402
from services.coords import parse_point  # noqa: E402
from services.games.gomoku.rules import game_rule  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.move_order.annealing import AnnealingParams  # noqa: E402
from services.move_order.evaluation import (  # noqa: E402
    GO_CLEAN_MOVES,
    RecordedGame,
    build_set,
    evaluate_position,
    exclusion,
    figures,
    held_out_ids,
    kept_out,
)
from services.records.rif import RifGame, read_rif  # noqa: E402
from services.records.rif_writer import write_rif  # noqa: E402
from services.records.sgf import SgfGame, read_archive  # noqa: E402
from services.settings import bounded  # noqa: E402

log = logging.getLogger("infer_eval")

SHARED = ROOT.parent / "shared" / "data"
RENJU_TSV = SHARED / "renjunet" / "renjunet-derived-games-dev.tsv"
GO_ARCHIVES = (SHARED / "kgs" / "kgs-games-dev.tar.gz",
               SHARED / "go-other" / "go-games-other-dev.tar.gz")
GO_SIZE = 19
LONGEST_SET = 40  # a kept-out game qualifies for the longest set, so for every set
KEEP_OUT = 100
PAPER = {  # Hsueh & Ikeda 2023: share >= actual, slope, exact match
    "Pro20m": (1.00, 1.023, 0.51), "Pro40m": (0.65, 0.988, 0.02),
    "Ama20m": (0.93, 1.093, 0.11), "Ama40m": (0.82, 1.125, 0.00),
}


@dataclass(frozen=True)
class RenjuRow:
    """A TSV game as `write_rif` takes it."""

    game_id: str
    moves: tuple[int, ...]
    bresult: float
    rule: str = "RIF"


# ------------------------------------------------------------------------------ games
def renju_rows(tsv: Path = RENJU_TSV) -> list[RenjuRow]:
    rows = []
    with tsv.open(encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            pts = [parse_point(t, 15) for t in row["moves"].split()]
            rows.append(RenjuRow(row["game_no"], tuple(y * 15 + x for x, y in pts),
                                 float(row["bresult"])))
    return rows


def renju_games(tsv: Path = RENJU_TSV) -> list[RecordedGame]:
    return [RecordedGame(r.game_id, 15, r.moves) for r in renju_rows(tsv)]


def recorded_go_game(record: SgfGame) -> RecordedGame:
    """An SGF game as a `RecordedGame` under the ingest's id (`<archive>:<member>#<n>`); the
    moves stop where the colours stop alternating from black."""
    moves: list[int | None] = []
    for ply, (colour, point) in enumerate(record.moves):
        if colour != (1 if ply % 2 == 0 else 2):
            break
        moves.append(point)
    setup = max(record.handicap, 0) + len(record.setup_black) + len(record.setup_white)
    return RecordedGame(f"{record.source}#{record.game_index}", record.size, tuple(moves), setup)


def go_records(archives: tuple[Path, ...] = GO_ARCHIVES) -> Iterator[SgfGame]:
    """Every game of the Go archives, any board size, in archive order: the one reading
    that both the evaluation sets here and scripts/infer_rank_sets.py's sets start from, so
    the two see the same games under the same ids. A record the reader rejects is dropped
    (the ingest counts those; a set only needs the games)."""
    for archive in archives:
        for record in read_archive(archive):
            if isinstance(record, SgfGame):
                yield record


def go_games(archives: tuple[Path, ...] = GO_ARCHIVES) -> Iterator[RecordedGame]:
    for record in go_records(archives):
        if record.size == GO_SIZE:
            yield recorded_go_game(record)


@dataclass(frozen=True)
class Collection:
    """Where a game's evaluation games come from and how they qualify."""

    read: Callable[[], list[RecordedGame]]
    rule: int  # the API rule they were played under
    clean: int  # moves from the start with no pass and no capture


COLLECTIONS = {
    "gomoku": Collection(renju_games, search_pb2.RULE_RENJU, 0),  # RenjuNet: renju rules
    "go": Collection(lambda: list(go_games()), search_pb2.RULE_UNSPECIFIED, GO_CLEAN_MOVES),
}


def rif_records(path: Path) -> list[RifGame]:
    """The games of a .rif file (records the reader rejects are dropped, as in the ingest)."""
    return [g for g in read_rif(path) if isinstance(g, RifGame)]


def records_collection(path: Path, records: list[RifGame] | None = None) -> Collection:
    """A .rif file's Gomoku games (`records`: as `rif_records` read them already) as a
    collection, under the one rule they were all played under (freestyle for the rule-based
    player's): a file mixing rules is refused, since a set's positions are inferred under one
    rule."""
    records = rif_records(path) if records is None else records
    rules = {game_rule(g.rule) for g in records}
    if len(rules) != 1:
        raise ValueError(f"{path}: {len(records)} games under {len(rules)} rules "
                         f"({sorted(r.value for r in rules)}); a set wants one")
    rule = get_game("gomoku").proto_rule(rules.pop().value)
    games = [RecordedGame(g.game_id, 15, g.moves) for g in records]
    return Collection(lambda: games, rule, 0)


# ------------------------------------------------------------------------------ prepare
def prepare(name: str, out: Path, count: int, records_file: Path | None = None) -> dict:
    """Choose the kept-out games and write the training sources without them (`records_file`: a
    .rif file of Gomoku games in place of the game's collection)."""
    game = get_game(name)
    out.mkdir(parents=True, exist_ok=True)
    file_games = rif_records(records_file) if records_file else []
    collection = (records_collection(records_file, file_games) if records_file
                  else COLLECTIONS[name])
    records = collection.read()
    eligible = [r.game_id for r in records
                if exclusion(game, r, LONGEST_SET, collection.clean) is None]
    kept = kept_out(eligible, count)
    sources: list[str] = []
    (out / "sources").mkdir(exist_ok=True)
    if records_file:  # the file's own games less the kept-out ones, every field as read
        kept_games = [g for g in file_games if g.game_id not in kept]
        train = out / "sources" / f"{records_file.stem}-train.rif"
        sources.append(str(write_rif(kept_games, train)))
    elif name == "gomoku":  # the collection's own format: a .rif file of the TSV's games
        rows = [r for r in renju_rows() if r.game_id not in kept]
        sources.append(str(write_rif(rows, out / "sources" / "renjunet-train.rif")))
    else:  # the same archives without the kept-out members
        members = {g.split(":", 1)[1].rsplit("#", 1)[0] for g in kept}
        for archive in GO_ARCHIVES:
            sources.append(str(filter_archive(archive, out / "sources" / archive.name,
                                              members)))
    info = {"game": name, "games": len(records), "qualifying_for_longest_set": len(eligible),
            "kept_out": sorted(kept), "sources": sources}
    if records_file:
        info["records"] = str(records_file)
    (out / "kept_out.json").write_text(json.dumps(info, indent=1))
    return info


def filter_archive(src: Path, dst: Path, drop: set[str]) -> Path:
    """A copy of a tar archive without the members named in `drop` (same member names, so
    the games keep their ids)."""
    with tarfile.open(src, "r:*") as inp, tarfile.open(dst, "w:gz") as outp:
        for member in inp:
            if member.isfile() and member.name in drop:
                continue
            outp.addfile(member, inp.extractfile(member) if member.isfile() else None)
    return dst


# ------------------------------------------------------------------------------ run
@dataclass(frozen=True)
class Output:
    logits: np.ndarray
    model_name: str
    model_version: str = "torchscript"


class TorchScriptPolicy:
    """A TorchScript policy in this process as a `PolicyEvaluator` (value output dropped). The
    module is frozen (weights inlined, module calls folded): the same outputs from less work
    per call, which counts at the few boards of an annealing step."""

    def __init__(self, path: Path, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.model = torch.jit.freeze(torch.jit.load(str(path), map_location=self.device).eval())
        self.name = str(path)

    def infer(self, boards: np.ndarray) -> Output:
        x = torch.from_numpy(np.ascontiguousarray(boards, dtype=np.int8)).to(self.device)
        with torch.inference_mode():
            out = self.model(x)
        logits = out[0] if isinstance(out, tuple) else out
        return Output(logits.to(torch.float32).cpu().numpy(), self.name)


class RuleBotPolicy:
    """The rule-based Gomoku player's own move distribution as a `PolicyEvaluator`
    (`selfplay.move_distribution`, logits its logarithms, an impossible move e^-69): on its
    games, the policy a network trained on them can at best learn."""

    name = "rulebot"
    floor = 1e-30  # a finite logit for the moves the player never plays

    def infer(self, boards: np.ndarray) -> Output:
        from services.games.gomoku.selfplay import move_distribution

        rows = [move_distribution(b) for b in np.asarray(boards)]
        return Output(np.log(np.maximum(np.stack(rows), self.floor)).astype(np.float32),
                      self.name, "rules")


def add_annealing_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `annealing_params` reads, for every script that runs the evaluation's
    annealing (here and scripts/infer_rank_sets.py): one set of names and bounds, so a run of
    either is described, and resumed, with the same words."""
    parser.add_argument("--restarts", type=bounded(int, 1, 64), default=5)
    parser.add_argument("--iterations", type=bounded(int, 0, 10_000_000), default=0,
                        help="per restart (0: the paper's, 5,000 * (stones / 20)^2)")
    parser.add_argument("--budget", type=bounded(int, 0, 10_000_000), default=0,
                        help="candidates per position in all (overrides --iterations)")
    parser.add_argument("--neighbour", default="mix")
    parser.add_argument("--init", default="greedy")
    parser.add_argument("--tempering", action="store_true",
                        help="parallel tempering instead of the paper's annealing schedule "
                             "(the restarts are the chains of a temperature ladder)")
    parser.add_argument("--seed", type=bounded(int, 0, 2**63 - 1), default=0)


def annealing_params(args: argparse.Namespace) -> AnnealingParams:
    iterations = args.iterations or None
    if args.budget:
        iterations = max(1, args.budget // args.restarts)
    return AnnealingParams(iterations=iterations, restarts=args.restarts,
                           neighbour=args.neighbour, init=args.init, seed=args.seed,
                           tempering=args.tempering)


def done_keys(results: Path) -> set[str]:
    if not results.exists():
        return set()
    keys = set()
    for line in results.read_text().splitlines():
        if line.strip():
            keys.add(json.loads(line)["key"])
    return keys


def parse_shard(text: str) -> tuple[int, int]:
    """`K/N`: the K-th of N interleaved parts of a set (0-based), so N processes (or
    machines) share one set and any finished part is a spread-out sample of it."""
    try:
        shard, shards = (int(v) for v in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard wants K/N, got {text!r}") from None
    if not 0 <= shard < shards:
        raise ValueError(f"--shard {text}: K must be in 0..N-1")
    return shard, shards


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    game = get_game(args.game)
    info = json.loads((args.prepared / "kept_out.json").read_text())
    if info["game"] != args.game:
        raise ValueError(f"--prepared {args.prepared} is a {info['game']} set, not {args.game}")
    kept = set(info["kept_out"])
    held = held_out_ids(args.dataset)
    collection = (records_collection(Path(info["records"])) if "records" in info
                  else COLLECTIONS[args.game])
    positions = build_set(game, collection.read(), args.stones, held, kept, args.limit,
                          collection.clean)
    shard, shards = parse_shard(args.shard)
    positions = positions[shard::shards]
    params = annealing_params(args)
    policy = RuleBotPolicy() if args.rulebot else TorchScriptPolicy(args.model, args.device)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    done = done_keys(args.results)
    log.info("%s %d-move set: %d positions (%d done), %s, network %s, torch threads %d, "
             "load %s", args.game, args.stones, len(positions), len(done & {p.key for p in
                                                                           positions}),
             params, policy.name, torch.get_num_threads(), os.getloadavg())
    for i, position in enumerate(positions):
        if position.key in done:
            continue
        row = evaluate_position(game, position, policy, params, collection.rule)
        row |= {"set": f"{args.game}{args.stones}",
                "model": RuleBotPolicy.name if args.rulebot else str(args.model),
                "label": args.label, "neighbour": params.neighbour, "init": params.init,
                "tempering": params.tempering, "device": args.device,
                "load": os.getloadavg()[0], "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                   time.gmtime())}
        with args.results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        log.info("%d/%d %s: actual %.4f inferred %.4f greedy %.4f exact %s match %.2f "
                 "%.1f CPU s", i + 1, len(positions), position.key, row["actual_gm"],
                 row["inferred_gm"], row["greedy_gm"], row["exact"], row["move_match"],
                 row["cpu_seconds"])


# ------------------------------------------------------------------------------ report
def load_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def report(args: argparse.Namespace) -> None:
    out = []
    runs: dict[str, list[dict]] = {}
    for path in sorted(args.results_dir.glob("*.jsonl")):
        rows = load_rows(path)
        runs[path.stem] = rows
        fig = figures(rows)
        fig["name"] = path.stem
        out.append(fig)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                          for k, v in fig.items()}))
        if args.png_prefix and rows and not path.stem.startswith(args.no_plot_prefix):
            scatter([(path.stem, rows)], Path(f"{args.png_prefix}{path.stem}.png"))
    if args.panels:
        stems = [s for s in args.panels.split(",") if runs.get(s)]
        scatter([(s, runs[s]) for s in stems], args.panels_png)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    print(markdown_table(out))


def markdown_table(rows: list[dict]) -> str:
    """One line per results file: the paper's figures, the greedy order's, time and boards."""
    lines = ["| run | positions | inferred >= actual | slope | exact | per-move match | "
             "restarts' SD | greedy >= actual | greedy slope | greedy per-move | "
             "CPU s/position | boards/position | other order >= actual | top-1 on actual |",
             "|---|" + "---:|" * 13]
    for f in rows:
        if not f["positions"]:
            continue
        top1 = f.get("actual_top1", math.nan)
        lines.append(
            f"| {f['name']} | {f['positions']} | {f['share_at_least_actual']:.0%} | "
            f"{f['slope']:.3f} | {f['exact']:.0%} | {f['move_match']:.1%} | "
            f"{f['spread']:.4f} | {f['greedy_share_at_least_actual']:.0%} | "
            f"{f['greedy_slope']:.3f} | {f['greedy_move_match']:.1%} | {f['cpu_seconds']:.1f} | "
            f"{f['boards']:.0f} | {f['actual_beaten']:.0%} | "
            f"{'-' if math.isnan(top1) else f'{top1:.1%}'} |")
    return "\n".join(lines)


def scatter(panels: list[tuple[str, list[dict]]], png: Path) -> None:
    """The paper's Fig. 3, one panel per run: actual geometric mean on x, inferred on y, the
    diagonal drawn (a point above it: the inferred order is the more likely)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.8), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels, strict=True):
        x = [r["actual_gm"] for r in rows]
        y = [r["inferred_gm"] for r in rows]
        top = max(max(x), max(y)) * 1.05
        ax.scatter(x, y, s=9, alpha=0.7)
        ax.plot([0, top], [0, top], color="grey", lw=1)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_aspect("equal")
        ax.set_xlabel("actual order: geometric mean")
        ax.set_ylabel("inferred order: geometric mean")
        ax.set_title(f"{title} ({len(rows)})", fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="kept-out games and the training sources without them")
    p.add_argument("--game", choices=sorted(COLLECTIONS), required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--keep-out", type=bounded(int, 1, 100_000), default=KEEP_OUT)
    p.add_argument("--records", type=Path, default=None,
                   help="gomoku: the games of this .rif file instead of RenjuNet's")
    r = sub.add_parser("run", help="inference on one set, appended to --results")
    r.add_argument("--game", choices=sorted(COLLECTIONS), required=True)
    r.add_argument("--prepared", type=Path, required=True, help="prepare's --out")
    r.add_argument("--dataset", type=Path, required=True, help="the training dataset")
    network = r.add_mutually_exclusive_group(required=True)
    network.add_argument("--model", type=Path, help="a TorchScript policy")
    network.add_argument("--rulebot", action="store_true",
                         help="gomoku: the rule-based player's own policy in place of a network")
    r.add_argument("--stones", type=bounded(int, 2, 361), default=20)
    r.add_argument("--limit", type=bounded(int, 0, 1_000_000), default=100,
                   help="positions (0: every one)")
    add_annealing_arguments(r)
    r.add_argument("--threads", type=bounded(int, 1, 256), default=1)
    r.add_argument("--device", default="cpu", help="where the network runs (cpu, cuda)")
    r.add_argument("--shard", default="0/1", help="K/N: only the K-th of N interleaved parts "
                   "of the set (several processes append to one --results)")
    r.add_argument("--label", default="")
    r.add_argument("--results", type=Path, required=True)
    s = sub.add_parser("report", help="figures of every results file")
    s.add_argument("--results-dir", type=Path, required=True)
    s.add_argument("--png-prefix", default="")
    s.add_argument("--json", type=Path, default=None)
    s.add_argument("--no-plot-prefix", default="ablation-",
                   help="results files whose name starts so get no plot of their own")
    s.add_argument("--panels", default="", help="results names (comma-separated) drawn side "
                   "by side in --panels-png")
    s.add_argument("--panels-png", type=Path, default=ROOT / "docs" / "infer_sequence_fig3.png")
    args = parser.parse_args(argv)
    for folder in ("prepared", "dataset", "results_dir"):
        if getattr(args, folder, None) is not None and not getattr(args, folder).is_dir():
            parser.error(f"--{folder.replace('_', '-')} {getattr(args, folder)}: no such folder")
    if getattr(args, "model", None) is not None and not args.model.is_file():
        parser.error(f"--model {args.model}: no such file")
    if getattr(args, "rulebot", False) and args.game != "gomoku":
        parser.error("--rulebot: the rule-based Gomoku player, so --game gomoku")
    if getattr(args, "records", None) is not None:
        if args.game != "gomoku":
            parser.error("--records: a .rif file of Gomoku games, so --game gomoku")
        if not args.records.is_file():
            parser.error(f"--records {args.records}: no such file")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.command == "prepare":
        info = prepare(args.game, args.out, args.keep_out, args.records)
        print(json.dumps({k: v for k, v in info.items() if k != "kept_out"}
                         | {"kept_out": len(info["kept_out"])}))
    elif args.command == "run":
        run(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
