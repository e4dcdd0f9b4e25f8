"""Train Shao et al. 2016's Table III rows N = 0, 1, 2, 4, 6 (F = 128, batch 32) on the dev
sample, and put other configurations (the residual networks) on the same split.

Data: the real RenjuNet-derived games in ../shared/data/renjunet/ (read at run time, never
copied into the repository; `--tsv` names another copy), through the project's own reader,
replay, symmetry dedup and position-hash split. Selection uses the validation split only; the
test split is evaluated once per row, at the end.

Writes into --out-dir (docs/ by default) the run's table as a section of paper_table.md, its
figures as paper_table.json and its plot as paper_table_run.png. The section sits between two
marker comments (`BEGIN`/`END`, below) and a rerun replaces only what lies between them: the
rest of the page is written by hand (which of the paper's rows were run and which were not,
what the position-hash split does to test accuracy, how to read the figures) and must survive
a rerun. A page without the markers gets the section appended; a missing page is created. The
section says what was run, not that the paper was reproduced: it is five of Table III's
thirteen rows, on 57 times less data, on a split that flatters test accuracy.

    .venv/bin/python scripts/paper_table.py [--epochs 3] [--seconds-per-row 600] [--threads 1]
        [--models res_b6c96] [--device cuda] [--jobs 4]

`--jobs J` trains J rows at once in separate processes (on a GPU, small-batch steps are bound by
kernel launches, so several runs share the device well).
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import platform
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.coords import parse_point  # noqa: E402
from services.dataset.build import deduplicate  # noqa: E402
from services.dataset.shards import (  # noqa: E402
    SCHEMA_VERSION,
    SPLITS,
    atomic_write_json,
    write_split_shards,
)
from services.games.gomoku.replay import source_pairs  # noqa: E402
from services.records.rif import read_rif  # noqa: E402
from services.records.rif_writer import write_rif  # noqa: E402
from services.settings import bounded  # noqa: E402
from services.trainer.train import TrainConfig, train  # noqa: E402

TSV = ROOT.parent / "shared" / "data" / "renjunet" / "renjunet-derived-games-dev.tsv"
SHAO_ROW = {f"shao_f128_n{n}": n for n in range(7)}  # Table III's rows by configuration
PAPER = {  # Table III, F = 128, batch 32: train / validation / test accuracy, test loss
    0: (24.76, 20.45, 20.21, 3.133), 1: (38.40, 32.16, 31.17, 2.612),
    2: (49.92, 42.24, 40.59, 2.227), 4: (51.51, 43.47, 41.52, 2.193),
    6: (50.94, 43.69, 41.46, 2.301),
}


@dataclass(frozen=True)
class Game:
    game_id: str
    moves: tuple[int, ...]
    bresult: float
    rule: str = "RIF"


def build_dataset(out: Path, tsv: Path = TSV) -> dict:
    """Shards of the games in `tsv` (RenjuNet move notation) in `out`; returns their counts."""
    games = []
    with tsv.open(encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            pts = [parse_point(t, 15) for t in row["moves"].split()]
            games.append(Game(row["game_no"], tuple(y * 15 + x for x, y in pts),
                              float(row["bresult"])))
    rif = write_rif(games, out / "renjunet-dev.rif")
    result = source_pairs(rif.name, read_rif(rif))
    table = deduplicate([result.pairs])
    files = write_split_shards(table, out)
    splits = {s: sum(f["rows"] for f in files if f["split"] == s) for s in SPLITS}
    atomic_write_json({"schema_version": SCHEMA_VERSION, "files": files, "splits": splits},
                      out / "manifest.json")
    return {"games": result.ingested, "pairs": result.pairs.num_rows, "unique": table.num_rows,
            "splits": splits}


def train_row(data_dir: str, train_rows: int, model: str, seed: int,
              args: argparse.Namespace) -> dict:
    """Train one row (in a worker process with --jobs) and return its figures."""
    torch.set_num_threads(args.threads)
    # a cosine schedule decays to 0 at the epoch budget (`train_rows` // batch steps an epoch)
    steps = args.epochs * (train_rows // args.batch_size) if args.lr_schedule == "cosine" else 10**9
    config = TrainConfig(model=model, batch_size=args.batch_size, learning_rate=args.lr,
                         lr_schedule=args.lr_schedule,
                         max_steps=steps, max_epochs=args.epochs, patience=args.patience,
                         max_seconds=args.seconds_per_row, train_eval_rows=4096,
                         device=args.device, seed=seed, num_threads=args.threads)
    t = time.perf_counter()
    r = train(Path(data_dir), config, progress=False)
    m = r.metrics
    return {"model": model, "seed": seed, "n": SHAO_ROW.get(model), "train": m["train"],
            "validation": m["validation"], "test": m["test"], "epochs": m["epochs"],
            "steps": m["steps"], "stopped": m["stopped"],
            "params": sum(p.numel() for p in r.model.parameters()),
            "seconds": round(time.perf_counter() - t)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depths", default="0,1,2,4,6")
    parser.add_argument("--models", default="", help="more configurations, comma-separated")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--patience", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.003, help="Adam's rate (paper: 0.003)")
    parser.add_argument("--lr-schedule", choices=["constant", "cosine"], default="constant")
    parser.add_argument("--seconds-per-row", type=float, default=600)
    parser.add_argument("--threads", type=bounded(int, 1, 256), default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--jobs", type=bounded(int, 1, 256), default=1)
    parser.add_argument("--seeds", default="0", help="seeds per row, comma-separated")
    parser.add_argument("--tsv", type=Path, default=TSV)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "docs",
                        help="where the run's section of paper_table.md, paper_table.json and "
                             f"{PLOT} go (another folder keeps docs/ as is)")
    args = parser.parse_args(argv)
    for flag, text in (("--depths", args.depths), ("--seeds", args.seeds)):
        if not all(part.strip().isascii() and part.strip().isdigit()
                   for part in text.split(",") if part.strip()):
            parser.error(f"{flag} {text}: comma-separated whole numbers")
    if not args.tsv.exists():
        raise SystemExit(f"real RenjuNet-derived games not found at {args.tsv}")
    models = [f"shao_f128_n{int(d)}" for d in args.depths.split(",") if d != ""]
    models += [m for m in args.models.split(",") if m]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = build_dataset(Path(tmp), args.tsv)
        print(json.dumps(data), flush=True)
        with ProcessPoolExecutor(max_workers=args.jobs,
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            seeds = [int(x) for x in args.seeds.split(",")]
            order = [(m, seed) for m in models for seed in seeds]
            futures = [pool.submit(train_row, tmp, data["splits"]["train"], m, seed, args)
                       for m, seed in order]
            for future in as_completed(futures):
                rows.append(future.result())
                print(json.dumps({k: v for k, v in rows[-1].items()
                                  if k not in ("train", "validation", "test")} | {
                    "val_top1": rows[-1]["validation"]["top1"],
                    "test_top1": rows[-1]["test"]["top1"]}), flush=True)
                rows.sort(key=lambda r: order.index((r["model"], r["seed"])))
                write_report(data, rows, args)


BEGIN = "<!-- BEGIN generated by scripts/paper_table.py: a rerun replaces this section -->"
END = "<!-- END generated by scripts/paper_table.py -->"
PAGE_TITLE = "# Shao et al. 2016: Table III rows on the dev sample"
PLOT = "paper_table_run.png"  # not paper_table.png: the page describes that one by hand


def merge_section(page: str | None, section: str) -> str:
    """`page` with the text between its markers replaced by `section` (kept as given, the
    markers around it); without markers, `section` appended; with no page, a new one.
    Everything outside the markers is returned unchanged."""
    block = f"{BEGIN}\n{section.strip()}\n{END}\n"
    if page is None:
        return f"{PAGE_TITLE}\n\n{block}"
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 and end < 0:
        return f"{page.rstrip()}\n\n{block}"
    if start < 0 or end < start:
        raise ValueError(f"paper_table.md: the markers {BEGIN!r} and {END!r} must both be "
                         "there, in that order; fix the page by hand")
    return page[:start] + block + page[end + len(END):].removeprefix("\n")


def _mean_sd(values: list[float]) -> str:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return f"{mean:.2f}%"
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return f"{mean:.2f}% ± {sd:.2f}"


def render_section(data: dict, rows: list[dict], args: argparse.Namespace) -> str:
    """The run's section of paper_table.md: machine, command, data, one row per trained
    network, means over seeds."""
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU only"
    command = " ".join(sys.argv[1:]) if Path(sys.argv[0]).name == "paper_table.py" else ""
    lines = [
        "## Table III on the dev sample (position-hash split): the script's last run",
        "",
        f"{time.strftime('%Y-%m-%d', time.gmtime())}. "
        f"Machine: {platform.node()}, {platform.machine()}, device {args.device} ({gpu}), "
        f"{args.threads} torch thread(s) per row, torch {torch.__version__}. Command: "
        f"`python scripts/paper_table.py {command}`.",
        "",
        f"Data: {data['games']} real RenjuNet-derived games from `../shared` -> {data['pairs']:,} "
        f"(position, move) pairs -> {data['unique']:,} unique after symmetry dedup; split "
        f"{data['splits']['train']:,} / {data['splits']['validation']:,} / "
        f"{data['splits']['test']:,} (train / validation / test) by position hash, so test "
        f"positions have siblings from the same games in train. The paper "
        f"used 1,247,582 unique pairs from 66,000 games: about "
        f"{1_247_582 / max(data['unique'], 1):.0f} times more data. Each row trains at most "
        f"{args.epochs} epochs (early stop after {args.patience} epoch(s) without a lower "
        f"validation loss) and at most {args.seconds_per_row:.0f} s, batch {args.batch_size}, "
        f"Adam {args.lr:g} ({args.lr_schedule}); the paper trained to convergence. The paper's "
        f"columns are its own test set: context, not a like-for-like comparison.",
        "",
        "| model | seed | N | params | ours train | ours val | ours test | ours test loss | "
        "epochs | paper train | paper val | paper test | paper test loss |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = PAPER.get(r["n"], ("-",) * 4)
        paper = f"{p[0]}% | {p[1]}% | {p[2]}% | {p[3]}" if r["n"] in PAPER else "- | - | - | -"
        lines.append(
            f"| {r['model']} | {r.get('seed', 0)} | {'-' if r['n'] is None else r['n']} | "
            f"{r['params']:,} | "
            f"{100 * r['train']['top1']:.2f}% | "
            f"{100 * r['validation']['top1']:.2f}% | {100 * r['test']['top1']:.2f}% | "
            f"{r['test']['loss']:.3f} | {r['epochs']} ({r['stopped']}) | {paper} |")
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    if any(len(rs) > 1 for rs in by_model.values()):
        lines += ["", "Mean over seeds (sample standard deviation):", "",
                  "| model | seeds | val top-1 | test top-1 |", "|---|---|---|---|"]
        for model, rs in by_model.items():
            val = [100 * r["validation"]["top1"] for r in rs]
            test = [100 * r["test"]["top1"] for r in rs]
            lines.append(f"| {model} | {len(rs)} | {_mean_sd(val)} | {_mean_sd(test)} |")
    lines += ["", "Accuracy counts the top-ranked legal point (occupied points masked). "
              "Train accuracy is measured on a fixed sample of 4,096 training rows. "
              f"Plot: `{PLOT}`."]
    return "\n".join(lines)


def write_report(data: dict, rows: list[dict], args: argparse.Namespace) -> None:
    """The run's section into paper_table.md (the rest of the page kept), its figures and its
    plot into --out-dir."""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    page = args.out_dir / "paper_table.md"
    old = page.read_text(encoding="utf-8") if page.exists() else None
    merged = merge_section(old, render_section(data, rows, args))
    tmp = page.with_name(page.name + ".tmp")
    tmp.write_text(merged, encoding="utf-8")
    tmp.replace(page)  # a run killed mid-write leaves the page as it was
    (args.out_dir / "paper_table.json").write_text(json.dumps({"data": data, "rows": rows},
                                                              indent=1))
    try:
        from services.trainer.plots import plt
        fig, ax = plt.subplots(figsize=(6, 4))
        shao = [r for r in rows if r["n"] is not None]
        ns = [r["n"] for r in shao]
        ax.plot(ns, [100 * r["test"]["top1"] for r in shao], "o-", label="ours (dev sample)")
        ax.plot(ns, [PAPER[n][2] for n in ns if n in PAPER], "s--", label="paper (1.25M pairs)")
        for r in rows:
            if r["n"] is None:
                ax.axhline(100 * r["test"]["top1"], ls=":", color="grey")
                ax.annotate(r["model"], (0, 100 * r["test"]["top1"]), fontsize=8)
        ax.set(xlabel="N (3x3 conv layers)", ylabel="test top-1 (%)",
               title="Table III: F=128")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.out_dir / PLOT, dpi=100)
        plt.close(fig)
    except Exception as exc:  # the table matters more than the picture
        print(f"plot failed: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()
