"""Quarantine reasons: a fixed category for counting, the full text kept as its example.

Why: a reason names the thing that was wrong ("unknown coordinate 'p16' at move 7"), so
counting reasons as they are gives one row per bad value; counts by reason must be counts by
kind. Every reader (`services.records.rif`, `services.records.sgf`) and the ingest flow take
the category from `reason_category` alone, so one reason always lands in one category, and
`summarize` counts any reader's output the same way.

The category is the reason's leading words, up to the first value (a quoted string, a
bracketed SGF value such as `SZ[19:13]`, a word holding a digit: a ply, a point, a size) or
the first ':' / '(' outside a value; what follows is the example's part.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

# quoted values as repr() writes them ('...' or "...", escapes inside), where the quote opens
# a word (an apostrophe inside a word is no quote); then SGF-style bracketed values
_VALUE = re.compile(r"""(?<!\w)'(?:[^'\\]|\\.)*'|(?<!\w)"(?:[^"\\]|\\.)*"|\S*\[[^\]]*\]\S*""")
_MARK = "\0"  # stands for a removed value
_DETAIL = re.compile(r"[:(]")
MIN_WORDS = 2  # a value after fewer words than this is skipped, not where the category ends
OTHER = "other"


def reason_category(reason: str) -> str:
    """The fixed category of a quarantine reason: 'unknown coordinate' for
    "unknown coordinate 'p16' at move 7", 'malformed XML' for "malformed XML: not well-formed",
    'property without a value' for "property 'XX' without a value".

    The words before the first value (a quoted string, a bracketed SGF value, a word holding
    a digit) or the first ':' / '(' outside a value; a value that comes before two words are
    collected is left out instead (the words after it still name the kind). A reason that is
    nothing but values is 'other'.
    """
    head = _DETAIL.split(_VALUE.sub(f" {_MARK} ", reason), maxsplit=1)[0]
    words: list[str] = []
    for word in head.split():
        if word == _MARK or any(c.isdigit() for c in word):
            if len(words) >= MIN_WORDS:
                break
            continue
        words.append(word)
    return " ".join(words) or OTHER


def count_reasons(reasons: Iterable[str]) -> tuple[dict[str, int], dict[str, str]]:
    """(records per category, most common first; the first reason seen of each category,
    its example)."""
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for reason in reasons:
        category = reason_category(reason)
        counts[category] += 1
        examples.setdefault(category, reason)
    return dict(counts.most_common()), examples


@dataclass
class ReadStats:
    """What a reader gave: records read = games + rejected; rejections by reason category."""

    read: int = 0
    games: int = 0
    rejected: int = 0
    moves: int = 0  # over the games
    by_reason: dict[str, int] = field(default_factory=dict)


def summarize(items: Iterable) -> ReadStats:
    """Count a reader's records (`read_rif`, `read_sgf`, `read_archive`): a rejection is a
    record with a `reason`, a game one with `moves`."""
    stats = ReadStats()
    reasons: list[str] = []
    for item in items:
        stats.read += 1
        reason = getattr(item, "reason", None)
        if reason is None:
            stats.games += 1
            stats.moves += len(item.moves)
        else:
            stats.rejected += 1
            reasons.append(reason)
    stats.by_reason = count_reasons(reasons)[0]
    return stats
