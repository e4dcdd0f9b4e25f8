"""Streaming reader for RenjuNet `.rif` XML database exports.

Why streaming: the full RenjuNet export is tens of MB, so the file is fed to an expat pull
parser in chunks and every record element is dropped as soon as it has been handled; memory
stays flat whatever the file size. Why it never raises on bad content: a dataset build should
ingest every good game and account for every bad one (`Rejected`, with a short reason) rather
than stop at the first problem. Schema: /work/shared/data/renjunet/RIF_SCHEMA.md.

The lookup tables (`<players>`, `<rules>`, `<tournaments>`, `<openings>`) precede `<games>` in
a real export; they are kept as small dicts and joined into each game. A game whose ids are
not in a table (or that comes before it) keeps the raw id.
"""

from __future__ import annotations

import gzip
import io
import math
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from operator import itemgetter
from pathlib import Path
from typing import BinaryIO

from services.coords import (
    LETTERS,
    index_name,
    parse_point,
    point_name,
)
from services.records.reasons import reason_category

__all__ = ["RIF_SUFFIXES", "Rejected", "RifGame", "parse_bresult", "parse_moves", "read_rif",
           "reason_category"]

BOARD_SIZE = 15  # RenjuNet games are 15x15
RIF_SUFFIXES = (".rif", ".rif.gz")  # what read_rif is given to read (.gz: gzip-compressed)
SNIPPET_CHARS = 200
CHUNK_BYTES = 1 << 16
# one record element's bytes (a game is a few hundred): the parser holds an open element
# whole, so a 300 MB <move> or five million children would cost gigabytes
MAX_RECORD_BYTES = 1 << 20
# what a damaged .gz raises while it is read: cut short (EOFError), not gzip or a bad CRC
# (gzip.BadGzipFile), corrupt deflate data (zlib.error); other OSErrors are I/O problems
_COMPRESSION_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)
BRESULTS = (0.0, 0.5, 1.0)
_PLAIN_BRESULTS = {"1": 1.0, "0": 0.0, "0.5": 0.5}  # what parse_bresult makes of them
# record tag -> attributes that name the record: a player is "name surname", the others take
# the first non-empty one
_LOOKUPS = {
    "player": ("name", "surname"),
    "rule": ("name",),
    "tournament": ("name",),
    "opening": ("name", "abbr"),
}


@dataclass(frozen=True)
class RifGame:
    """One validated game; `moves` are flat point indices y * 15 + x, Black first."""

    source: str
    game_id: str
    moves: tuple[int, ...]
    # the rule's name from the rules table (its id when not in it), as the file has it: which
    # rules that means for play is the game's to say (`services.games.gomoku.rules.game_rule`)
    rule: str = ""
    bresult: float | None = None  # Black's score: 1 won, 0 lost, 0.5 draw, None unknown
    black: str = ""
    white: str = ""
    opening: str = ""
    alt: str = ""
    swap: str = ""
    tournament: str = ""
    btime: str = ""
    wtime: str = ""
    info: str = ""


def _new_game(values: dict) -> RifGame:
    """RifGame(**values) for a dict holding every field (and nothing else), without the frozen
    dataclass's object.__setattr__ call per field (a fifth of the reader's time per game);
    tests/test_dataset_speed_equivalence.py checks it against the dataclass."""
    game = object.__new__(RifGame)
    game.__dict__.update(values)
    return game


@dataclass(frozen=True)
class Rejected:
    """A record that could not be ingested, with why and the start of its raw text."""

    source: str
    record_id: str
    reason: str
    snippet: str


def read_rif(
    path_or_bytes: str | Path | bytes, source: str | None = None
) -> Iterator[RifGame | Rejected]:
    """Yield every `<game>` of a .rif file as RifGame or Rejected.

    A str or Path is a file name (gzip-compressed when it ends in .gz); bytes are the content.

    Each `<game>` element is one record, and a malformed tail is one more (a Rejected whose
    record_id starts with "offset"), so records read == games + rejections. A damaged .gz (cut
    short, corrupt, not gzip) is such a tail too: "compressed file damaged: ...".
    """
    if isinstance(path_or_bytes, bytes | bytearray):
        yield from _Reader(source or "<bytes>").run(io.BytesIO(path_or_bytes))
        return
    path = Path(path_or_bytes)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as stream:
        yield from _Reader(source or path.name).run(stream)


def _truncate(text: str, limit: int = SNIPPET_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Reader:
    """One pass over one file: pull-parser events in, RifGame / Rejected out."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.tables: dict[str, dict[str, str]] = {tag: {} for tag in _LOOKUPS}
        self.seen_ids: set[str] = set()
        self.ordinal = 0
        self.stack: list[ET.Element] = []
        # the last two chunks fed (window = prev + cur), to locate and quote a parse error
        self.prev = self.cur = b""
        self.window_start = 0  # byte offset of prev
        self.window_line = 1  # line number at window_start
        self.record_start: int | None = None  # bytes fed when the open record element began
        self.record_depth = 0  # its depth in the element stack

    def run(self, stream: BinaryIO) -> Iterator[RifGame | Rejected]:
        parser = ET.XMLPullParser(events=("start", "end"))
        while True:
            try:
                chunk = stream.read(CHUNK_BYTES)
            except _COMPRESSION_ERRORS as exc:  # the games read before the damage are kept
                yield self._damaged(exc)
                return
            if not chunk:
                break
            self._remember(chunk)
            try:
                parser.feed(chunk)  # a parse error is queued behind the events parsed before it
            except (LookupError, ValueError) as exc:  # raised, not queued: see _bad_encoding
                yield self._bad_encoding(exc)
                return
            try:
                yield from self._drain(parser)
            except ET.ParseError as exc:
                yield self._malformed(exc)
                return
            if self.record_start is not None and self._fed() - self.record_start > \
                    MAX_RECORD_BYTES:
                yield self._oversized()
                return
        try:
            parser.close()
        except ET.ParseError as exc:  # e.g. a truncated file: no closing tags
            yield from self._drain(parser)
            yield self._malformed(exc)
            return
        yield from self._drain(parser)

    def _drain(self, parser: ET.XMLPullParser) -> Iterator[RifGame | Rejected]:
        stack = self.stack
        for event, elem in parser.read_events():
            if event == "start":
                stack.append(elem)
                if self.record_start is None and (len(stack) == 3 or elem.tag == "game"):
                    self.record_start, self.record_depth = self._fed(), len(stack)
                continue
            if len(stack) == self.record_depth:
                self.record_start, self.record_depth = None, 0
            stack.pop()
            depth = len(stack)  # 0: root, 1: container, 2: record, deeper: inside one
            if elem.tag == "game":  # a record wherever it is: no <games>, a fragment, nested
                yield self._game(elem)
            elif depth == 2 and elem.tag in _LOOKUPS:
                self._add_lookup(elem)
            if 0 < depth <= 2 and stack[-1].tag != "game":  # done with: dropped (not a part
                stack[-1].remove(elem)  # of a game outside <games>, read when the game ends)

    def _add_lookup(self, elem: ET.Element) -> None:
        key = elem.get("id", "").strip()
        parts = [p for p in (elem.get(a, "") for a in _LOOKUPS[elem.tag]) if p]
        name = " ".join(parts) if elem.tag == "player" else next(iter(parts), "")
        if key and name:
            self.tables[elem.tag][key] = name

    def _lookup(self, tag: str, elem: ET.Element, attr: str) -> str:
        raw = elem.get(attr, "").strip()
        return self.tables[tag].get(raw, raw)

    def _game(self, elem: ET.Element) -> RifGame | Rejected:
        self.ordinal += 1
        get = elem.get
        game_id = get("id", "").strip()
        record_id = game_id or f"game #{self.ordinal}"
        reason = self._check_id(game_id)
        moves: tuple[int, ...] = ()
        bresult: float | None = None
        if reason is None:
            moves, reason = parse_moves(_text(elem.find("move")))
        if reason is None:
            raw = get("bresult")
            if raw in _PLAIN_BRESULTS:
                bresult = _PLAIN_BRESULTS[raw]
            else:
                bresult, reason = parse_bresult(raw)
        if reason is not None:
            elem.tail = None
            snippet = _truncate(ET.tostring(elem, encoding="unicode"))
            return Rejected(self.source, record_id, reason, snippet)
        lookup = self._lookup
        return _new_game({
            "source": self.source,
            "game_id": game_id,
            "moves": moves,
            "rule": lookup("rule", elem, "rule"),
            "bresult": bresult,
            "black": lookup("player", elem, "black"),
            "white": lookup("player", elem, "white"),
            "opening": lookup("opening", elem, "opening"),
            "alt": get("alt", ""),
            "swap": get("swap", ""),
            "tournament": lookup("tournament", elem, "tournament"),
            "btime": get("btime", ""),
            "wtime": get("wtime", ""),
            "info": _text(elem.find("info")).strip(),
        })

    def _check_id(self, game_id: str) -> str | None:
        if not game_id:
            return "missing game id"
        if game_id in self.seen_ids:  # an id other than a short number is quoted and cut
            plain = game_id.isascii() and game_id.isdigit() and len(game_id) <= 20
            return f"duplicate game id {game_id if plain else repr(game_id[:20])}"
        self.seen_ids.add(game_id)
        return None

    def _fed(self) -> int:
        """Bytes fed to the parser so far."""
        return self.window_start + len(self.prev) + len(self.cur)

    def _oversized(self) -> Rejected:
        """A record element over MAX_RECORD_BYTES: no real one is, and the parser cannot drop
        an element it has not finished, so the rest of the file is not read."""
        head = (self.prev + self.cur)[:SNIPPET_CHARS].decode("utf-8", errors="replace")
        reason = (f"record over {MAX_RECORD_BYTES} bytes (open at byte {self.record_start}): "
                  "the rest of the file is not read")
        return Rejected(self.source, f"offset {self.record_start}", reason, _truncate(head))

    def _damaged(self, exc: Exception) -> Rejected:
        """The compressed file is damaged where `exc` was raised: the record open there (if
        any) and the rest of the file are one rejection, as for a file cut short."""
        where = self._fed() if self.record_start is None else self.record_start
        detail = _truncate(str(exc) or type(exc).__name__, 120)
        reason = (f"compressed file damaged: {detail} (after {self._fed()} bytes of text); "
                  "the rest of the file is not read")
        tail = (self.prev + self.cur)[-SNIPPET_CHARS:].decode("utf-8", errors="replace")
        return Rejected(self.source, f"offset {where}", reason, _truncate(tail))

    def _remember(self, chunk: bytes) -> None:
        self.window_line += self.prev.count(b"\n")
        self.window_start += len(self.prev)
        self.prev, self.cur = self.cur, chunk

    def _malformed(self, exc: ET.ParseError) -> Rejected:
        line, column = getattr(exc, "position", (0, 0))
        message = str(exc).split(": line ", 1)[0]
        where = f"line {line}, column {column}"
        window = self.prev + self.cur
        local = None
        if line > self.window_line or self.window_start == 0:  # else the line starts earlier
            local = _local_offset(window, line - self.window_line, column)
        if local is None:
            record_id, snippet = f"offset {where}", window[-SNIPPET_CHARS:]
        else:
            record_id = f"offset {self.window_start + local} ({where})"
            snippet = window[max(0, local - 150) : local + 50]
        if not snippet.strip():  # only blanks around the error: quote the text before them
            snippet = window[: len(window) if local is None else local].rstrip()[-150:]
        text = snippet.decode("utf-8", errors="replace")
        return Rejected(self.source, record_id, f"malformed XML: {message}", _truncate(text))

    def _bad_encoding(self, exc: LookupError | ValueError) -> Rejected:
        """The XML declaration names an encoding expat cannot use (unknown to Python, or
        multi-byte): pyexpat raises that out of feed() instead of queueing a ParseError."""
        head = (self.prev + self.cur)[:SNIPPET_CHARS].decode("utf-8", errors="replace")
        reason = f"malformed XML: unsupported encoding ({_truncate(str(exc), 80)})"
        return Rejected(self.source, "offset 0 (XML declaration)", reason, _truncate(head))


def _local_offset(window: bytes, lines_down: int, column: int) -> int | None:
    """Byte offset in `window` of expat's (line, character column), if the line is in it."""
    if lines_down < 0:
        return None
    start = 0
    for _ in range(lines_down):
        start = window.find(b"\n", start) + 1
        if start == 0:
            return None
    prefix = window[start:].decode("utf-8", errors="ignore")[:column]
    return start + len(prefix.encode("utf-8"))


def _text(elem: ET.Element | None) -> str:
    if elem is None:
        return ""
    if len(elem) == 0:  # no children: all its text is .text
        return elem.text or ""
    return "".join(elem.itertext())


@cache
def _point_names(size: int) -> dict[str, int]:
    """Every plain coordinate name ('h8', 'H8') -> its point index, for the fast path."""
    names = {}
    for y in range(size):
        for x in range(min(size, len(LETTERS))):
            name = point_name(x, y)
            names[name] = names[name.upper()] = y * size + x
    return names


def parse_moves(text: str, size: int = BOARD_SIZE) -> tuple[tuple[int, ...], str | None]:
    """RenjuNet move text ('h8 h9 ...', any whitespace) -> point indices, or a reject reason."""
    tokens = text.split()
    if not tokens:
        return (), "empty game"
    # fast path: every token a plain name and no point twice; anything else (odd spellings
    # parse_point accepts, errors) goes through the token-by-token loop below
    try:
        fast = itemgetter(*tokens)(_point_names(size))  # a tuple when there are 2+ tokens
    except KeyError:
        fast = None
    if fast is not None:
        if len(tokens) == 1:
            return (fast,), None
        if len(set(fast)) == len(fast):
            return fast, None
    return _parse_tokens(tokens, size)


def _parse_tokens(tokens: list[str], size: int) -> tuple[tuple[int, ...], str | None]:
    """The token-by-token parse: exact reasons for unknown coordinates and repeated points."""
    moves: list[int] = []
    first_at: dict[int, int] = {}
    for number, token in enumerate(tokens, 1):
        try:
            x, y = parse_point(token, size)
        except ValueError:  # CoordinateError
            return (), f"unknown coordinate {token[:20]!r} at move {number}"
        point = y * size + x
        if point in first_at:
            name = index_name(point, size)
            return (), f"repeated point {name} at move {number} (first at move {first_at[point]})"
        first_at[point] = number
        moves.append(point)
    return tuple(moves), None


def parse_bresult(raw: str | None) -> tuple[float | None, str | None]:
    """'1' / '0' / '0.5' -> Black's score; absent or blank -> None; anything else a reason."""
    if raw is None or not raw.strip():
        return None, None
    try:
        value = float(raw)
    except ValueError:
        return None, f"non-numeric bresult {raw[:20]!r}"
    if math.isnan(value) or value not in BRESULTS:
        return None, f"unknown bresult {raw[:20]!r} (expected 1, 0 or 0.5)"
    return value, None
