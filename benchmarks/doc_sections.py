"""A benchmark's own section of a markdown document, rewritten between its markers.

Several benchmarks write into one document (docs/reliability.md: the fault suite and the
fuzzer); each owns the text between its begin/end markers, so rerunning one refreshes its table
and leaves the rest of the file as it was."""

from __future__ import annotations

import os
from pathlib import Path


def write_doc_section(doc: Path, begin: str, end: str, body: str, title: str) -> None:
    """Replace the text between `begin` and `end` in `doc` with `body` (appending the section
    under `title` when the markers are absent; creating the file when missing)."""
    text = doc.read_text() if doc.is_file() else "# Reliability\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + f"\n\n## {title}\n\n{block}\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    tmp = doc.with_name(f".{doc.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, doc)
