"""The documents that describe code or point into each other stay true to it.

* docs/reference.md's table of shard columns lists exactly the columns and Arrow types of
  `services.dataset.shards.PAIR_SCHEMA`, in order;
* every place that cites a section of docs/benchmarks.md by its quoted name (`docs/benchmarks.md,
  "Request cost"`, in code comments and documents alike) names a section that exists;
* every area of docs/benchmarks.md has its table of current figures in the same columns.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from services.dataset.shards import PAIR_SCHEMA

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
FIGURE_COLUMNS = "| figure | value | machine | date | command |"
# where a citation may stand; generated code and the virtualenv are not ours
CITING = ("README.md", "Makefile", "docs", "deploy", "services", "flows", "scripts", "benchmarks",
          "model_repository", "tests")
SUFFIXES = {".md", ".py", ".pbtxt", ".yaml", ".yml", ".sh", ""}
CITATION = re.compile(r"benchmarks\.md\)?,\s+\"([^\"]+)\"")


def _sections(doc: Path) -> list[str]:
    return [line[3:].strip() for line in doc.read_text().splitlines() if line.startswith("## ")]


def _reference_shard_columns() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "reference.md").read_text()
    start = text.index("| column | type | what it holds |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        name, kind = (cell.strip() for cell in line.strip("|").split("|")[:2])
        rows.append((name.strip("`"), kind))
    return rows


def test_the_reference_lists_every_shard_column_with_its_type() -> None:
    names = {pa.binary(): "binary", pa.string(): "string", pa.int8(): "int8", pa.int16(): "int16",
             pa.int32(): "int32", pa.uint64(): "uint64", pa.float32(): "float32"}
    expected = [(field.name, names[field.type]) for field in PAIR_SCHEMA]
    assert _reference_shard_columns() == expected


def _citing_files() -> list[Path]:
    files: list[Path] = []
    for name in CITING:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in sorted(path.rglob("*"))
                      if p.is_file() and p.suffix in SUFFIXES and "movepred" not in p.parts
                      and "__pycache__" not in p.parts]
    return files


def test_every_cited_benchmark_section_exists() -> None:
    sections = _sections(BENCHMARKS)
    cited: dict[str, list[str]] = {}
    for path in _citing_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        flat = re.sub(r"\n\s*(?:#|//|>)?\s*", " ", text)  # comments and quotes wrapped over lines
        for name in CITATION.findall(flat):
            cited.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert cited, "no citation found: the pattern no longer matches how sections are cited"
    missing = {name: where for name, where in cited.items()
               if not any(section.startswith(name) for section in sections)}
    assert not missing, f"cited sections not in docs/benchmarks.md: {missing}"


def test_every_benchmark_area_has_a_table_of_current_figures() -> None:
    text = BENCHMARKS.read_text()
    parts = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    areas = {part.splitlines()[0]: part for part in parts}
    without = [title for title, body in areas.items()
               if title not in ("Machines",) and not title.startswith("History")
               and FIGURE_COLUMNS not in body]
    assert not without, f"areas without a '{FIGURE_COLUMNS}' table: {without}"
    assert list(areas)[-1].startswith("History, "), "the history is the last section"
