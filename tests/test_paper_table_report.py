"""`scripts/paper_table.py` rewrites only its own section of docs/paper_table.md.

The page is mostly written by hand: which of the paper's rows were run and which were not, what
the position-hash split does to test accuracy, how to read the figures. A rerun of the script
once replaced the whole page with its generated table under a heading that claimed the paper
reproduced; now it writes its table between two marker comments and keeps everything else.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from scripts.paper_table import BEGIN, END, PAGE_TITLE, merge_section, write_report

HAND = """# Shao et al. 2016: five rows of Table III on the dev sample

## What was run, and what was not

| the paper's table | its rows | run here | not run |
|---|---|---|---|
| Table III: depth, filters and batch size | 13 | **5** | 8 |

**The split.** The dataset here is split by position hash, not by game.
"""


def _row(model: str, n: int | None, seed: int, top1: float) -> dict:
    figures = {"top1": top1, "loss": 2.5}
    return {"model": model, "seed": seed, "n": n, "train": figures, "validation": figures,
            "test": figures, "epochs": 3, "steps": 100, "stopped": "max_epochs",
            "params": 1234, "seconds": 1}


def _args(out_dir: Path) -> argparse.Namespace:
    return argparse.Namespace(device="cpu", threads=1, epochs=3, patience=1,
                              seconds_per_row=60.0, batch_size=32, lr=0.003,
                              lr_schedule="constant", out_dir=out_dir)


DATA = {"games": 5, "pairs": 100, "unique": 90,
        "splits": {"train": 80, "validation": 5, "test": 5, "game_test": 0}}


def test_a_rerun_keeps_the_hand_written_page(tmp_path: Path) -> None:
    page = tmp_path / "paper_table.md"
    page.write_text(HAND)
    write_report(DATA, [_row("shao_f128_n2", 2, 0, 0.25)], _args(tmp_path))
    first = page.read_text()
    assert first.startswith(HAND.rstrip()), "the hand-written page was changed"
    assert first.count(BEGIN) == 1 and first.count(END) == 1
    assert "25.00%" in first
    # a second run replaces its own section only: the hand-written text once, one section
    write_report(DATA, [_row("shao_f128_n4", 4, 0, 0.375)], _args(tmp_path))
    second = page.read_text()
    assert second.startswith(HAND.rstrip())
    assert second.count(BEGIN) == 1 and second.count(END) == 1
    assert second.count("## What was run, and what was not") == 1
    assert "37.50%" in second and "25.00%" not in second
    generated = second[second.index(BEGIN):]
    assert "reproduc" not in generated.lower()
    assert "position-hash split" in generated
    assert (tmp_path / "paper_table.json").exists()
    assert not list(tmp_path.glob("*.tmp"))


def test_text_after_the_section_is_kept() -> None:
    page = f"{HAND}\n{BEGIN}\nold table\n{END}\n\n## With a value head\n\nhand text\n"
    merged = merge_section(page, "new table")
    assert merged == f"{HAND}\n{BEGIN}\nnew table\n{END}\n\n## With a value head\n\nhand text\n"


def test_a_missing_page_is_created_and_broken_markers_are_refused() -> None:
    assert merge_section(None, "table") == f"{PAGE_TITLE}\n\n{BEGIN}\ntable\n{END}\n"
    with pytest.raises(ValueError, match="markers"):
        merge_section(f"{HAND}\n{END}\nstray\n{BEGIN}\n", "table")
    with pytest.raises(ValueError, match="markers"):
        merge_section(f"{HAND}\n{BEGIN}\nno end\n", "table")
