"""Quarantine reason categories: one fixed category per kind of reason, whatever the value.

Counting reasons by category must give one row per kind ("unknown coordinate"), not one per
bad value ("unknown coordinate 'zz' ..."); the full reason is kept apart as an example. Every
reader uses the one categoriser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.records import reasons, rif
from services.records.reasons import count_reasons, reason_category, summarize
from services.records.rif import Rejected, read_rif
from services.records.sgf import SgfRejected, read_archive, read_sgf
from tests.conftest import SHARED_DATA

VALUE = re.compile(r"['\"\[\]\d]")  # what a category never holds: quotes, brackets, digits


def test_every_reader_uses_the_one_categoriser_and_summary() -> None:
    assert rif.reason_category is reasons.reason_category
    rif_bad = b'<database><games><game id="1"><move>z9</move></game></games></database>'
    items = [*read_sgf(b"(;GM[1]SZ[19];B[zz])", "a.sgf"), *read_rif(rif_bad, "b.rif"),
             *read_sgf(b"(;GM[1]SZ[19];B[aa];W[bb])", "c.sgf"), *read_sgf(b"(;SZ[9:7])", "d")]
    stats = summarize(items)
    assert (stats.read, stats.games, stats.rejected, stats.moves) == (4, 1, 3, 2)
    rejected = [i.reason for i in items if isinstance(i, SgfRejected | Rejected)]
    assert stats.by_reason == count_reasons(rejected)[0]
    assert stats.by_reason == {"unknown coordinate": 2, "rectangular board": 1}


@pytest.mark.parametrize(("texts", "category"), [
    (["(;GM[1]SZ[19];B[zz];W[aa])", "(;GM[1]SZ[19];B[qq];W[zy])",
      "(;GM[1]SZ[9];B[aa];W[kk])"], "unknown coordinate"),
    (["(;GM[1]SZ[19];B[];XX)", "(;GM[1]SZ[19];B[aa] C )"], "property without a value"),
    (["(;GM[1]SZ[19]AB[zz];B[aa])", "(;GM[1]SZ[13]AB[aa][yy];B[bb])"], "unknown set-up point"),
    (["(;GM[1]SZ[19:13];B[aa])", "(;GM[1]SZ[9:7];B[aa])"], "rectangular board"),
    (["(;GM[1]SZ[abc];B[aa])", "(;GM[1]SZ[x y];B[aa])"], "unreadable board size"),
    (["(;GM[4]SZ[19];B[aa])", "(;GM[2];B[aa])"], "not a Go game"),
])
def test_sgf_reasons_with_different_values_share_one_category(texts: list[str],
                                                              category: str) -> None:
    found = [r.reason for t in texts for r in read_sgf(t) if isinstance(r, SgfRejected)]
    assert len(found) == len(texts) and len(set(found)) == len(texts)  # each names its value
    counts, examples = count_reasons(found)
    assert counts == {category: len(texts)}
    assert examples == {category: found[0]}


def test_rif_reasons_with_different_values_share_one_category() -> None:
    data = (b'<database><games>'
            b'<game id="1"><move>h8 p16</move></game><game id="2"><move>h8 z1</move></game>'
            b'<game id="3"><move>h8 h8</move></game><game id="4"><move>a1 b2 a1</move></game>'
            b'<game id="5" bresult="x"><move>h8</move></game>'
            b'<game id="6" bresult="it\'s"><move>h8</move></game>'
            b'<game id="7" bresult="2"><move>h8</move></game>'
            b'<game id="1"><move>h8</move></game><game id="a:b"><move>h8</move></game>'
            b'<game id="a:b"><move>h8</move></game>'
            b'</games></database>')
    found = [r.reason for r in read_rif(data) if isinstance(r, Rejected)]
    counts, examples = count_reasons(found)
    assert counts == {"unknown coordinate": 2, "repeated point": 2, "non-numeric bresult": 2,
                      "unknown bresult": 1, "duplicate game id": 2}
    assert examples["unknown coordinate"] == found[0]


@pytest.mark.parametrize(("reason", "category"), [
    ("illegal move at ply 12: move h8 is on an occupied point", "illegal move at ply"),
    ("cut at a forbidden move: move k12 is forbidden for black (overline) at ply 35",
     "cut at a forbidden move"),
    ("board size 9 (this dataset holds 19x19 games)", "board size"),
    ("malformed XML: not well-formed (invalid token)", "malformed XML"),
    ("duplicate game id 'a:b(c'", "duplicate game id"),
    ("12 34", "other"),
])
def test_category_of_a_reason(reason: str, category: str) -> None:
    assert reason_category(reason) == category


def test_categories_of_the_real_go_records_hold_no_values() -> None:
    records = [r for r in read_archive(SHARED_DATA / "kgs" / "kgs-games-dev.tar.gz")
               if isinstance(r, SgfRejected)]
    edge = SHARED_DATA / "sgf-edge-cases"
    if not edge.is_dir():
        pytest.skip(f"SGF edge cases not found at {edge} (../shared absent)")
    for path in sorted(p for p in Path(edge).rglob("*") if p.is_file()):
        records += [r for r in read_sgf(path) if isinstance(r, SgfRejected)]
    counts, examples = count_reasons(r.reason for r in records)
    assert sum(counts.values()) == len(records) > 0
    for category, example in examples.items():
        assert not VALUE.search(category), (category, example)
        assert reason_category(example) == category
