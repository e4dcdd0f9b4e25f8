"""Reproduce Shao et al. 2016, Table III rows N = 0, 1, 2, 4, 6 (F = 128, batch 32).

Data: the real RenjuNet-derived games in ../shared/data/renjunet/ (read at run time, never
copied into the repository), through the project's own reader, replay, symmetry dedup and
hash split. Selection uses the validation split only; the test split is evaluated once per
row, at the end. Writes docs/paper_table.md and docs/paper_table.png.

    .venv/bin/python scripts/paper_table.py [--epochs 3] [--seconds-per-row 600] [--threads 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.dataset.build import deduplicate, source_pairs  # noqa: E402
from services.dataset.shards import (  # noqa: E402
    SCHEMA_VERSION,
    SPLITS,
    atomic_write_json,
    write_split_shards,
)
from services.games.coords import parse_point  # noqa: E402
from services.records.rif import read_rif  # noqa: E402
from services.records.rif_writer import write_rif  # noqa: E402
from services.trainer.train import TrainConfig, train  # noqa: E402

TSV = ROOT.parent / "shared" / "data" / "renjunet" / "renjunet-derived-games-dev.tsv"
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


def build_dataset(out: Path) -> dict:
    games = []
    with TSV.open(encoding="utf-8") as f:
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depths", default="0,1,2,4,6")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seconds-per-row", type=float, default=600)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "docs",
                        help="where paper_table.md/.png go (another folder keeps docs/ as is)")
    args = parser.parse_args(argv)
    if not TSV.exists():
        raise SystemExit(f"real RenjuNet-derived games not found at {TSV}")
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = build_dataset(Path(tmp))
        print(json.dumps(data), flush=True)
        for n in [int(d) for d in args.depths.split(",")]:
            config = TrainConfig(model=f"shao_f128_n{n}", batch_size=32, learning_rate=0.003,
                                 max_steps=10**9, max_epochs=args.epochs, patience=1,
                                 max_seconds=args.seconds_per_row, train_eval_rows=4096)
            t = time.perf_counter()
            r = train(Path(tmp), config, progress=False)
            m = r.metrics
            rows.append({"n": n, "train": m["train"], "validation": m["validation"],
                         "test": m["test"], "epochs": m["epochs"], "steps": m["steps"],
                         "stopped": m["stopped"], "seconds": round(time.perf_counter() - t)})
            print(json.dumps({k: v for k, v in rows[-1].items()
                              if k not in ("validation", "test")} | {
                "val_top1": m["validation"]["top1"], "test_top1": m["test"]["top1"]}),
                flush=True)
            write_report(data, rows, args)


def write_report(data: dict, rows: list[dict], args) -> None:
    lines = [
        "# Shao et al. 2016, Table III, reproduced on the dev sample",
        "",
        f"Machine: {platform.machine()}, {torch.get_num_threads()} torch thread(s), CPU only, "
        f"torch {torch.__version__}. Command: `.venv/bin/python scripts/paper_table.py "
        f"--epochs {args.epochs} --seconds-per-row {args.seconds_per_row:.0f} "
        f"--threads {args.threads}`.",
        "",
        f"Data: {data['games']} real RenjuNet-derived games from `../shared` -> {data['pairs']:,} "
        f"(position, move) pairs -> {data['unique']:,} unique after symmetry dedup; split "
        f"{data['splits']['train']:,} / {data['splits']['validation']:,} / "
        f"{data['splits']['test']:,} (train / validation / test) by position hash. The paper "
        f"used 1,247,582 unique pairs from 66,000 games: about "
        f"{1_247_582 / max(data['unique'], 1):.0f} times more data. Each row trains at most "
        f"{args.epochs} epochs (early stop when validation loss stops improving) and at most "
        f"{args.seconds_per_row:.0f} s; the paper trained to convergence.",
        "",
        "| N | F | batch | ours train | ours val | ours test | ours test loss | epochs | "
        "paper train | paper val | paper test | paper test loss |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = PAPER.get(r["n"], ("-",) * 4)
        lines.append(
            f"| {r['n']} | 128 | 32 | {100 * r['train']['top1']:.2f}% | "
            f"{100 * r['validation']['top1']:.2f}% | {100 * r['test']['top1']:.2f}% | "
            f"{r['test']['loss']:.3f} | {r['epochs']} ({r['stopped']}) | {p[0]}% | {p[1]}% | "
            f"{p[2]}% | {p[3]} |")
    lines += ["", "Accuracy counts the top-ranked legal point (occupied points masked). "
              "Train accuracy is measured on a fixed sample of 4,096 training rows.", ""]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "paper_table.md").write_text("\n".join(lines))
    try:
        from services.trainer.plots import plt
        fig, ax = plt.subplots(figsize=(6, 4))
        ns = [r["n"] for r in rows]
        ax.plot(ns, [100 * r["test"]["top1"] for r in rows], "o-", label="ours (dev sample)")
        ax.plot(ns, [PAPER[n][2] for n in ns if n in PAPER], "s--", label="paper (1.25M pairs)")
        ax.set(xlabel="N (3x3 conv layers)", ylabel="test top-1 (%)",
               title="Table III: F=128, batch 32")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.out_dir / "paper_table.png", dpi=100)
        plt.close(fig)
    except Exception as exc:  # the table matters more than the picture
        print(f"plot failed: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()
