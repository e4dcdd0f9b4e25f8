"""SGF (FF[1]..FF[4]) game-record reader for Go, written from scratch; no third-party parser.

`read_sgf` yields one `SgfGame` per game tree in a file (a collection may hold several) and
one `SgfRejected` per game or file it cannot use, with a short reason, so that records read
== games + rejections. It never raises on bad content. `read_archive` does the same for every
member of a .tar.gz / .tar.bz2 / .tar / .zip, in memory.

What it keeps: the root's game information, set-up stones, and the *main line* (the first
child at every branch). Variations are only counted: `variations` is the number of game
trees nested inside the game's tree (every '(' after the game's own), the SGF notion of a
variation; exports that nest one tree per move (OGS, Fox) therefore count one per move.

Details that matter:
* Coordinates: SGF letters give the column from the left and the row from the *top*; points
  here are `y * size + x` with y from the *bottom* (repository convention), i.e.
  `(size - 1 - row) * size + col`. `B[]` is a pass, and so is `B[tt]` on boards up to 19x19.
  `AB[dr:ds]` (FF[4] compressed point lists) expand to the rectangle they span.
* Set-up stones (AB / AW / AE) in the root *and* in nodes after the root but before the first
  move (Fox puts handicap stones in the second node) make up `setup_black` / `setup_white`.
  Set-up in the main line *between* moves cannot be expressed as a move list: such a game is
  rejected ("set-up stones after move N"). Set-up after the last move (end-of-game markup of
  dead stones, e.g. Jago's and Cgoban's `AE[...]`) changes no position a move was played
  from: it is ignored and the game kept.
* Property names: FF[1]-FF[3] allowed lower-case letters (`AddBlack`, `SiZe`); they are
  dropped, so `AddBlack` reads as `AB`. A game-info property given twice (Fox writes two
  AP) keeps its first value.
* Values: `\\]` and `\\\\` escapes, soft line breaks (backslash-newline, removed), CRLF / CR
  line ends; whitespace between properties and nodes is ignored.
* Encodings: the file is decoded *before* tokenising (Shift_JIS and GBK second bytes can be
  `\\` or `]`). A UTF-16 / UTF-8 byte-order mark wins; otherwise CA[] picks the codec
  (GB2312 / GBK are read as GB18030, Shift_JIS / MS_KANJI as cp932 and EUC-KR as cp949, the
  supersets real files use); no CA means UTF-8. If the chosen codec fails, the fallback is
  UTF-8, then GB18030, then Latin-1 (never fails), and `encoding_fallback` is set. Two
  refinements, both because GB18030 accepts almost any byte pair: text that is UTF-8 but for
  a few broken bytes is read as UTF-8 with U+FFFD (`encoding` 'utf-8/replace'), since
  GB18030 would pair a broken byte with the following ']' and shift the tree; and bytes that
  read as cp932 with full-width kana and no half-width kana are taken as Shift_JIS
  (Japanese files without CA would otherwise come out as plausible-looking Chinese), while
  bytes whose non-ASCII runs are mostly of odd length (lone accented letters) are Latin-1.
  Undeclared EUC-KR cannot be told from GBK this way and reads as GB18030.
* Komi: Fox writes komi x100 (`KM[750]` = 7.5, `KM[375]` = 3.75): an integer komi of 100 or
  more is divided by 100 and `komi_normalised` set. `KM[0]` stays 0.0. Unreadable -> None.
* Results: `winner` 1 (Black), 2 (White), 0 (draw / jigo), None (unknown);
  `result_kind` one of resign, time, forfeit, score, win (winner but no reason), draw,
  void, illegal, other (winner with a non-standard reason: `B+J`, `B+AW`, `W+Repetition`),
  unknown (`?`, empty, unreadable or contradictory) and missing (no RE).
* Limits: a file over 64 MB, a property value over 1 MB, or a board outside 2..25 is
  rejected. An error inside a game tree (unterminated value, stray character, unclosed
  tree) rejects that game and ends the file: the rest cannot be trusted.
"""

from __future__ import annotations

import codecs
import lzma
import os
import re
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from services.numerals import ascii_decimal, ascii_int

# The colours of a record's moves, set-up stones and result: the games' cell values
# (services.games.base), written here because a codec imports no game (tests/test_sgf_writer.py
# checks that they agree).
BLACK, WHITE = 1, 2
MIN_SIZE, MAX_SIZE = 2, 25
DEFAULT_SIZE = 19
MAX_FILE_BYTES = 64 << 20
MAX_VALUE_CHARS = 1 << 20
# variations nested in variations; each open one costs ~90 bytes, and 64 MB of "(;(;(;..." would
# cost gigabytes (real files, even one variation per move, stay in the hundreds)
MAX_TREE_DEPTH = 100_000
# what a damaged or hostile archive member raises on reading, besides OSError/EOFError/
# ValueError: a corrupt deflate/xz stream, an encrypted zip member, an unknown zip method
_MEMBER_ERRORS = (OSError, EOFError, ValueError, tarfile.TarError, zipfile.BadZipFile,
                  zlib.error, lzma.LZMAError, RuntimeError, NotImplementedError)
SNIPPET_CHARS = 200
NOT_SGF_SUFFIXES = frozenset({".gib", ".ngf", ".ugf", ".ugi", ".gtp", ".rif", ".psf"})
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".tar", ".zip")


@dataclass(frozen=True)
class SgfGame:
    """One game's main line. Points are y * size + x with y counted from the bottom."""

    source: str
    game_index: int  # index of the game tree within the file (0 = first)
    size: int
    komi: float | None
    komi_raw: str
    komi_normalised: bool
    handicap: int
    setup_black: tuple[int, ...]
    setup_white: tuple[int, ...]
    moves: tuple[tuple[int, int | None], ...]  # (colour 1/2, point or None for a pass)
    result_raw: str
    winner: int | None
    result_kind: str
    rules: str = ""
    player_to_move: int | None = None  # PL in the root / set-up nodes
    black_rank: str = ""
    white_rank: str = ""
    black: str = ""
    white: str = ""
    variations: int = 0
    encoding: str = "utf-8"
    encoding_fallback: bool = False
    file_format: int | None = None  # FF, None when absent
    game_type: str = "1"  # GM (1: Go; another only when `read_sgf` was asked to accept it)

    @property
    def passes(self) -> int:
        return sum(1 for _, p in self.moves if p is None)


@dataclass(frozen=True)
class SgfRejected:
    """A file or game that could not be read, why, and the text near the problem."""

    source: str
    record_id: str  # "game N" (N from 0) or "file"
    reason: str
    snippet: str


# ---- public entry points ----------------------------------------------------------------------
GO_GAME_TYPES = frozenset({"", "1"})  # GM values read as Go (no GM means Go)


def read_sgf(
    data: bytes | str | Path, source: str | None = None,
    game_types: frozenset[str] | None = GO_GAME_TYPES,
) -> Iterator[SgfGame | SgfRejected]:
    """Yield every game of one SGF file (or collection) as SgfGame or SgfRejected.

    `data`: the file's bytes, a Path to it, or a str: SGF text when it contains '[' or is not
    an existing file's name, otherwise a file name. `source` names the file in the records
    (default: the file name, or '<bytes>' / '<text>'). `game_types`: the GM values accepted
    (default Go's; None: any, e.g. Gomoku's GM[4], whose moves are points on the same grid).
    """
    if isinstance(data, str) and ("[" in data or not os.path.isfile(data)):
        yield from _read_text_or_bytes(data, source or "<text>", None, game_types)
        return
    if isinstance(data, str | Path):
        path = Path(data)
        name = source or path.name
        suffix = path.suffix.lower()
        if suffix in NOT_SGF_SUFFIXES:
            yield _file_reject(name, f"not an SGF file ({suffix})", b"")
            return
        try:
            size = path.stat().st_size
            if size > MAX_FILE_BYTES:
                yield _file_reject(name, f"file too large ({size} bytes > {MAX_FILE_BYTES})", b"")
                return
            raw = path.read_bytes()
        except OSError as exc:
            yield _file_reject(name, f"unreadable file: {exc.strerror or exc}", b"")
            return
        yield from _read_text_or_bytes(raw, name, suffix, game_types)
        return
    yield from _read_text_or_bytes(bytes(data), source or "<bytes>", None, game_types)


def read_archive(path: Path | str) -> Iterator[SgfGame | SgfRejected]:
    """Every member of a .tar.gz / .tar.bz2 / .tar.xz / .tar / .zip archive, read in memory
    one member at a time (nothing is unpacked to disk). Sources read
    'archive.tar.gz:member/name.sgf'. Directories and links are skipped; every regular
    member gives at least one record. An unreadable archive gives one SgfRejected."""
    path = Path(path)
    if path.name.lower().endswith(".zip"):
        yield from _read_zip(path)
    else:
        yield from _read_tar(path)


def _read_tar(path: Path) -> Iterator[SgfGame | SgfRejected]:
    try:
        archive = tarfile.open(path, "r:*")  # noqa: SIM115 (closed by the `with` below)
    except (OSError, tarfile.TarError) as exc:
        yield _file_reject(path.name, f"unreadable archive: {exc}", b"")
        return
    with archive:
        while True:
            try:
                member = archive.next()
            except _MEMBER_ERRORS as exc:
                yield _file_reject(path.name, f"archive damaged: {exc}", b"")
                return
            archive.members = []  # tarfile keeps every header read: ~0.4 KB a member
            if member is None:
                damage = _tar_damage(archive)
                if damage:
                    yield _file_reject(path.name, f"archive damaged: {damage}", b"")
                return
            if not member.isfile():
                continue
            yield from _read_member(
                path.name, member.name, member.size,
                lambda limit, m=member: archive.extractfile(m).read(limit))


def _tar_damage(archive: tarfile.TarFile) -> str | None:
    """Why the archive ended where `next()` stopped, when it is not its end: tarfile answers
    None for an unreadable header after the first one, as it does at the end-of-archive
    blocks, which would lose every member after it without a word. None when only zero bytes
    (the end blocks, padding) follow."""
    offset = archive.offset
    try:
        archive.fileobj.seek(offset)
        while chunk := archive.fileobj.read(1 << 20):
            if chunk.strip(b"\0"):
                return f"unreadable member header at byte {offset}; the members after it are lost"
    except _MEMBER_ERRORS as exc:
        return f"unreadable after byte {offset}: {exc}"
    return None


def _read_zip(path: Path) -> Iterator[SgfGame | SgfRejected]:
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        yield _file_reject(path.name, f"unreadable archive: {exc}", b"")
        return
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            yield from _read_member(path.name, info.filename, info.file_size,
                                    lambda limit, i=info: _read_zip_member(archive, i, limit))


def _read_zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    with archive.open(info) as member:
        return member.read(limit)


def _read_member(archive_name: str, member: str, size: int,
                 read: Callable[[int], bytes]) -> Iterator[SgfGame | SgfRejected]:
    """One member's records; `read(limit)` gives at most `limit` of its bytes (a zip's
    header may understate its size: the bytes read are what counts)."""
    source = f"{archive_name}:{member}"
    suffix = os.path.splitext(member)[1].lower()
    if suffix in NOT_SGF_SUFFIXES:
        yield _file_reject(source, f"not an SGF file ({suffix})", b"")
        return
    if size > MAX_FILE_BYTES:
        yield _file_reject(source, f"file too large ({size} bytes > {MAX_FILE_BYTES})", b"")
        return
    try:
        raw = read(MAX_FILE_BYTES + 1)
    except _MEMBER_ERRORS as exc:
        yield _file_reject(source, f"unreadable archive member: {exc}", b"")
        return
    if len(raw) > MAX_FILE_BYTES:
        yield _file_reject(source, f"file too large (over {MAX_FILE_BYTES} bytes, more than "
                                   f"its header's {size})", b"")
        return
    yield from _read_text_or_bytes(raw, source, suffix)


# ---- decoding ---------------------------------------------------------------------------------
_CA_BYTES = re.compile(rb"CA\s*\[([^\]]{0,40})\]")  # literal prefix: a fast search
_CHARSETS = {
    "utf8": "utf-8", "utf-8": "utf-8", "ascii": "ascii", "usascii": "ascii",
    "gb2312": "gb18030", "gbk": "gb18030", "gb18030": "gb18030", "cp936": "gb18030",
    "euccn": "gb18030", "hzgb2312": "gb18030", "chinese": "gb18030",
    "shiftjis": "cp932", "sjis": "cp932", "mskanji": "cp932", "windows31j": "cp932",
    "cp932": "cp932", "xsjis": "cp932", "shiftjis2004": "cp932",
    "euckr": "cp949", "cp949": "cp949", "ksc5601": "cp949", "uhc": "cp949", "korean": "cp949",
    "iso88591": "latin-1", "latin1": "latin-1", "l1": "latin-1", "iso8859": "latin-1",
    "big5": "cp950", "cp950": "cp950", "eucjp": "euc_jp", "utf16": "utf-16",
    "utf16le": "utf-16-le", "utf16be": "utf-16-be",
}


def _codec_for(charset: str) -> str | None:
    key = re.sub(r"[\s_\-]", "", charset.lower())
    if key in _CHARSETS:
        return _CHARSETS[key]
    try:
        info = codecs.lookup(charset.strip())
    except (LookupError, ValueError):
        return None
    # CA[hex], CA[zlib], CA[rot13] name bytes-to-bytes codecs, which str.decode refuses
    return info.name if getattr(info, "_is_text_encoding", True) else None


_HIGH_RUNS = re.compile(rb"[\x80-\xff]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_KANA = re.compile("[\u3041-\u30ff]")
_HALFWIDTH_KANA = re.compile("[\uff61-\uff9f]")


def _looks_japanese(raw: bytes) -> bool:
    """Undeclared legacy bytes that decode as cp932 into full-width kana and no half-width
    kana are Shift_JIS (GBK text read as cp932 turns into half-width kana)."""
    try:
        text = raw.decode("cp932")
    except UnicodeDecodeError:
        return False
    return bool(_KANA.search(text)) and not _HALFWIDTH_KANA.search(text)


def decode_sgf(raw: bytes) -> tuple[str, str, bool]:
    """(text, codec used, fell back?) for an SGF file's bytes; see the module docstring."""
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        chosen: str | None = "utf-16"
    elif raw.startswith(codecs.BOM_UTF8):
        chosen, raw = "utf-8", raw[3:]
    elif (unmarked := _utf16_without_bom(raw)) is not None:
        chosen = unmarked
    else:
        m = _CA_BYTES.search(raw)
        while m is not None and m.start() and raw[m.start() - 1: m.start()].isalpha():
            m = _CA_BYTES.search(raw, m.start() + 1)  # part of a longer name (e.g. 'DCA')
        chosen = _codec_for(m.group(1).decode("latin-1")) if m else "utf-8"
    if chosen is not None:
        try:
            text = raw.decode(chosen)
            # utf-7, unicode_escape and kin can decode to lone surrogates, which no Parquet
            # (UTF-8) writer takes: such a declaration is not believed
            if not _SURROGATE.search(text):
                return text, chosen, False
        except UnicodeDecodeError:
            if chosen.startswith("utf-16"):  # a byte-order mark: no other codec will do
                return raw.decode(chosen, errors="replace"), f"{chosen}/replace", True
    text, codec = _fallback(raw)
    return text, codec, True


def _utf16_without_bom(raw: bytes) -> str | None:
    """"utf-16-le" / "utf-16-be" for UTF-16 without a byte-order mark: the first '(' as a
    UTF-16 code unit, after nothing but blanks in UTF-16 (a file may start with a newline)."""
    for codec, paren, low in (("utf-16-le", b"(\x00", 0), ("utf-16-be", b"\x00(", 1)):
        at = raw.find(paren, 0, 4096)
        if at < 0 or at % 2:
            continue
        before = raw[:at]
        if not before[1 - low::2].strip(b"\x00") and not before[low::2].strip(b" \t\r\n"):
            return codec
    return None


def _fallback(raw: bytes) -> tuple[str, str]:
    """Decode bytes the declared (or default) codec could not: UTF-8, else UTF-8 with a few
    replacement characters when it is clearly UTF-8 with some broken bytes (servers cut
    names mid-character), else Shift_JIS when it looks Japanese, else GB18030, else Latin-1.

    Why UTF-8 with replacement before GB18030: GB18030 accepts almost any byte pair, and a
    broken UTF-8 lead byte followed by ']' would swallow the ']' and shift the whole tree."""
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    text = raw.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - raw.count("\ufffd".encode())  # minus real U+FFFD
    non_ascii = sum(1 for ch in text if ch > "\x7f")
    if non_ascii > bad and bad <= max(3, non_ascii // 20):
        return text, "utf-8/replace"
    if _looks_japanese(raw):
        return raw.decode("cp932"), "cp932"
    runs = _HIGH_RUNS.findall(raw)
    if sum(len(r) % 2 for r in runs) * 2 > len(runs):
        # mostly lone high bytes between ASCII ('Hrab\xe1nek'): Latin-1, not double-byte text
        return raw.decode("latin-1"), "latin-1"
    try:
        return raw.decode("gb18030"), "gb18030"
    except UnicodeDecodeError:
        return raw.decode("latin-1"), "latin-1"


# ---- tokenising and the game tree ---------------------------------------------------------------
_VALUE = r"\[[^\\\]]*(?:\\.[^\\\]]*)*\]"
_TOKEN = re.compile(
    r"\s*(?:(?P<node>;)|(?P<prop>[A-Za-z]+)\s*(?P<values>" + _VALUE + r"(?:\s*" + _VALUE
    + r")*)|(?P<open>\()|(?P<close>\)))",
    re.S,
)
_ONE_VALUE = re.compile(r"\[([^\\\]]*(?:\\.[^\\\]]*)*)\]", re.S)
_ESCAPE = re.compile(r"\\(\r\n|\n\r|\n|\r|.)", re.S)
_GAME_START = re.compile(r"\(\s*(?:;|[A-Za-z]+\s*\[)")  # '(;', or '(' + property: no ';'
_UNTERMINATED = re.compile(r"\s*[A-Za-z]*\s*\[")
_SPACE = re.compile(r"\s+")
_NAME = re.compile(r"[A-Za-z]+")

# The fast path for the main line once its first move is reached (the bulk of a record).
# `_STRETCH` checks in one C-level match that a stretch holds only nodes and upper-case
# properties up to the next '(' or ')' (possessive quantifiers, so a failure cannot
# backtrack); `_NOT_A_MOVE` then deletes every property but B, W and set-up (whose values may
# hide ';B[aa]' text), and `_ONLY_MOVES` must match what is left, or the token-by-token
# parser takes over from that point (tests/test_sgf.py checks that the two agree).
_VALUE_POSSESSIVE = r"\[[^\\\]]*+(?:\\.[^\\\]]*+)*+\]"
_STRETCH = re.compile(r"(?:\s++|;|[A-Z]++\s*+(?:" + _VALUE_POSSESSIVE + r"\s*+)++)*+", re.S)
# any upper-case name but B, W, AB, AW, AE, with its values
_OTHER_PROPERTY = (r"(?:[C-VX-Z][A-Z]*+|A(?:[AC-DF-VX-Z][A-Z]*+|[BEW][A-Z]++)?|[BW][A-Z]++)"
                   r"\s*+(?:" + _VALUE_POSSESSIVE + r"\s*+)++")
_NOT_A_MOVE = re.compile(_OTHER_PROPERTY, re.S)
_ONLY_MOVES = re.compile(r"[ \t\n\r\f\v;]*+(?:[BW]\[[a-zA-Z]{0,2}\][ \t\n\r\f\v;]*+)*+")
_NODES_AND_SPACE = str.maketrans("", "", " \t\n\r\f\v;")
_COLOURS = {"B": BLACK, "W": WHITE}

# properties read from the main line before the first move (game info and set-up)
_INFO = frozenset({"SZ", "KM", "HA", "RE", "RU", "PL", "BR", "WR", "PB", "PW", "GM", "FF"})
_SETUP = frozenset({"AB", "AW", "AE"})


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: "" if m.group(1) in ("\n", "\r", "\r\n", "\n\r")
                       else m.group(1), value)


def _simple(value: str) -> str:
    """SimpleText: unescaped, whitespace runs (newlines included) -> one space, stripped."""
    return _SPACE.sub(" ", _unescape(value)).strip()


class _BadGame(Exception):
    """Raised inside one game's parse; becomes an SgfRejected."""

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offset = offset


class _TreeWalk:
    """Where the token stream is in a game tree: the open trees (each [on the main line,
    sub-trees seen]), whether the current node sequence is the main line (the first child at
    every branch), the main line's node count and the number of trees opened."""

    __slots__ = ("frames", "node_no", "on_main", "trees")

    def __init__(self) -> None:
        self.frames: list[list] = []
        self.trees = 0
        self.on_main = False
        self.node_no = -1  # main-line node counter

    def node_without_semicolon(self) -> None:
        """A property right after '(': it opens a node (FF[1] files omit the ';')."""
        if self.on_main:
            self.node_no += 1

    def node(self, start: int) -> None:
        if not self.frames:
            raise _BadGame("node outside a game tree", start)
        if self.on_main:
            if self.frames[-1][1]:  # a node after a sub-tree: not on any line
                self.on_main = False
            else:
                self.node_no += 1

    def open(self, start: int) -> None:
        if len(self.frames) >= MAX_TREE_DEPTH:
            raise _BadGame(f"variations nested deeper than {MAX_TREE_DEPTH}", start)
        self.trees += 1
        if self.frames:
            parent = self.frames[-1]
            child_main = self.on_main and parent[1] == 0
            parent[1] += 1
        else:
            child_main = True  # the game's own tree
        self.frames.append([child_main, 0])
        self.on_main = child_main

    def close(self) -> bool:
        """Close the innermost tree; True when it was the game's own."""
        self.frames.pop()
        self.on_main = False  # back in a parent, after one of its sub-trees
        return not self.frames

    def before_any_subtree(self) -> bool:
        """No sub-tree of the current tree has been seen yet."""
        return not self.frames[-1][1]

    def in_game_tree(self) -> bool:
        """The current tree is the game's own (not a variation nested in it)."""
        return len(self.frames) == 1


class _MainLine:
    """What a game keeps of its main line: game information and set-up stones before the
    first move, the move tokens ('B[pd', 'W['), and the first set-up after a move (it rejects
    the game only if a move follows: end-of-game markup is ignored)."""

    __slots__ = ("info", "late_setup", "late_setup_at", "moves", "setup")

    def __init__(self) -> None:
        self.moves: list[str] = []
        self.info: dict[str, str] = {}
        self.setup: dict[str, list[str]] = {"AB": [], "AW": [], "AE": []}
        self.late_setup: str | None = None
        self.late_setup_at = 0  # moves read when it came

    def add(self, name: str, raw_values: str) -> None:
        """A main-line property other than a move."""
        if name in _SETUP:
            if self.moves:
                if self.late_setup is None:
                    self.late_setup = f"set-up stones ({name}) after move {len(self.moves)}"
                    self.late_setup_at = len(self.moves)
            else:
                self.setup[name].extend(_ONE_VALUE.findall(raw_values))
        elif name in _INFO and name not in self.info and not self.moves:
            self.info[name] = _ONE_VALUE.findall(raw_values)[0]

    def check(self, pos: int) -> None:
        """Set-up stones between moves cannot be expressed as a move list."""
        if self.late_setup is not None and len(self.moves) > self.late_setup_at:
            raise _BadGame(self.late_setup, pos)


def _file_reject(source: str, reason: str, raw: bytes | str) -> SgfRejected:
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return SgfRejected(source, "file", reason, _truncate(text))


def _truncate(text: str, limit: int = SNIPPET_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _read_text_or_bytes(data: bytes | str, source: str, suffix: str | None,
                        game_types: frozenset[str] | None = GO_GAME_TYPES) -> Iterator[
        SgfGame | SgfRejected]:
    if isinstance(data, bytes):
        if len(data) > MAX_FILE_BYTES:
            yield _file_reject(source, f"file too large ({len(data)} bytes > {MAX_FILE_BYTES})",
                               b"")
            return
        if not data.strip():
            yield _file_reject(source, "empty file", b"")
            return
        text, codec, fallback = decode_sgf(data)
        if "\x00" in text[:4096]:
            yield _file_reject(source, "binary content (NUL bytes), not an SGF file",
                               data[:60].hex(" "))
            return
    else:
        text, codec, fallback = data.lstrip("\ufeff"), "utf-8", False
        if not text.strip():
            yield _file_reject(source, "empty file", b"")
            return
    first = _GAME_START.search(text)
    if first is None:
        what = f"not an SGF file ({suffix})" if suffix and suffix != ".sgf" else \
            "no SGF game tree '(;' found"
        yield _file_reject(source, what, text)
        return
    yield from _Parser(text, source, codec, fallback, game_types).games(first.start())


class _Parser:
    def __init__(self, text: str, source: str, codec: str, fallback: bool,
                 game_types: frozenset[str] | None = GO_GAME_TYPES) -> None:
        self.text = text
        self.source = source
        self.codec = codec
        self.fallback = fallback
        self.game_types = game_types

    def games(self, start: int) -> Iterator[SgfGame | SgfRejected]:
        text = self.text
        index = 0
        pos = start
        while True:
            try:
                game, pos = self._game(pos, index)
            except _BadGame as exc:
                lo = max(0, exc.offset - 120)
                yield SgfRejected(self.source, f"game {index}", exc.reason,
                                  _truncate(text[lo: exc.offset + 80]))
                return
            except Exception as exc:  # a bug here must not stop an ingest: record it
                yield SgfRejected(self.source, f"game {index}",
                                  f"parser error ({type(exc).__name__}: {exc})"[:200],
                                  _truncate(text[pos: pos + SNIPPET_CHARS]))
                return
            yield game
            index += 1
            nxt = _GAME_START.search(text, pos)
            if nxt is None:
                return
            pos = nxt.start()

    def _game(self, pos: int, index: int) -> tuple[SgfGame | SgfRejected, int]:
        """Parse the game tree opening at text[pos] == '('; return it and the end offset.

        A malformed tree raises `_BadGame` (the rest of the file cannot be trusted); a well
        formed tree with a bad value gives an `SgfRejected` for this game only."""
        walk, line = _TreeWalk(), _MainLine()
        end = self._read_tree(pos, walk, line)
        try:
            line.check(pos)
            if walk.node_no < 0:
                raise _BadGame("empty game tree (no nodes)", pos)
            return self._build(index, line.info, line.setup, line.moves, walk.trees - 1,
                               pos), end
        except _BadGame as exc:
            snippet = _truncate(self.text[pos: pos + SNIPPET_CHARS])
            return SgfRejected(self.source, f"game {index}", exc.reason, snippet), end

    def _read_tree(self, pos: int, walk: _TreeWalk, line: _MainLine) -> int:
        """Read the tokens of the game tree opening at text[pos], its main line into `line`;
        return the offset after the tree's ')' (or the file's end, where the fast path found
        the rest of the file to be the rest of the game)."""
        text = self.text
        match = _TOKEN.scanner(text, pos).match
        # bound once: this loop runs once per token
        add, moves, node, open_tree, close = line.add, line.moves, walk.node, walk.open, walk.close
        fast = True  # the fast path may take the next stretch of the main line
        fresh = False  # just after '(': a property there opens a node (no ';')
        end = pos
        while True:
            m = match()
            if m is None:
                at = self._error_offset(end)
                raise _BadGame(self._error_reason(at), at)
            end = m.end()
            kind = m.lastgroup
            if fresh:
                fresh = False
                if kind == "values":
                    walk.node_without_semicolon()
            if kind == "values":  # property (lastgroup is the last closed group)
                if not walk.on_main:
                    if end - m.start() > MAX_VALUE_CHARS:
                        raise _BadGame(f"property value too long (> {MAX_VALUE_CHARS} chars)",
                                       m.start())
                    continue
                name, raw_values = m.group("prop", "values")
                if not name.isupper():  # FF[1]-FF[3] 'AddBlack' reads as 'AB'
                    name = "".join(c for c in name if c.isupper())
                if len(raw_values) > MAX_VALUE_CHARS:
                    raise _BadGame(f"property {name} value too long "
                                   f"({len(raw_values)} > {MAX_VALUE_CHARS} chars)", m.start())
                if name not in _COLOURS:
                    add(name, raw_values)
                    continue
                if walk.node_no < 0:
                    raise _BadGame("property outside a node", m.start())
                if fast and walk.before_any_subtree() and line.late_setup is None:
                    stretch = self._main_line_stretch(m.start(), walk.in_game_tree())
                    if stretch is None:
                        fast = False
                    else:
                        moves.extend(stretch[0])
                        end = stretch[1]
                        if end == len(text):
                            return end
                        match = _TOKEN.scanner(text, end).match  # on at the '(' or ')'
                        continue
                # a move's value holds no ']' or escape: the first value is [1:first ']']
                moves.append(f"{name}[{raw_values[1:raw_values.index(']')]}")
            elif kind == "node":
                node(m.start())
            elif kind == "open":
                open_tree(m.start())
                fresh = True
            elif close():
                return end

    def _main_line_stretch(self, start: int, top: bool) -> tuple[list[str], int] | None:
        """The move tokens from text[start] (a move on the main line) up to the next '(' or
        ')' and that offset, when the stretch is plain nodes and moves once the other
        properties are deleted; None sends the caller back to token-by-token parsing.

        `top`: the game's own tree; when no '(' follows anywhere (not even in a value) the
        rest of the file is the rest of the game, and the offset returned is the file's end."""
        text = self.text
        if len(text) - start > MAX_VALUE_CHARS:
            return None
        body = None
        if top and text.find("(", start) < 0:  # the rest of the file is the rest of the game
            tail = text.rstrip()
            if tail.endswith(")"):
                body, stop = tail[start:-1], len(text)
        if body is None:
            stretch = _STRETCH.match(text, start)
            stop = stretch.end()
            if stop >= len(text) or text[stop] not in "()":
                return None
            body = text[start:stop]
        if _ONLY_MOVES.fullmatch(body) is None:
            body = _NOT_A_MOVE.sub("", body)
            if _ONLY_MOVES.fullmatch(body) is None:
                return None
        tokens = body.translate(_NODES_AND_SPACE).split("]")  # 'B[pd', 'W[', ..., ''
        del tokens[-1]
        return tokens, stop

    def _error_offset(self, end: int) -> int:
        """Skip whitespace: the offset of the first character no token matched."""
        text = self.text
        while end < len(text) and text[end].isspace():
            end += 1
        return end

    def _error_reason(self, at: int) -> str:
        text = self.text
        if at >= len(text):
            return "truncated: game tree not closed"
        if _UNTERMINATED.match(text, at):
            return "truncated: property value not closed ']'"
        ch = text[at]
        name = _NAME.match(text, at)
        if name:
            return f"property {name.group(0)!r} without a value"
        return f"malformed: unexpected {ch!r} at offset {at}"

    def _build(self, index: int, info: dict[str, str], setup: dict[str, list[str]],
               raw_moves: list, variations: int, pos: int) -> SgfGame:
        gm = info.get("GM", "1").strip()
        if self.game_types is not None and gm not in self.game_types:
            raise _BadGame(f"not a Go game (GM[{gm[:10]}])", pos)
        size = _parse_size(info.get("SZ"), pos)
        try:
            moves = tuple(map(_move_table(size).__getitem__, raw_moves))
        except KeyError:  # a value to strip, or not a point: one by one, with the reason
            moves = self._moves_one_by_one(raw_moves, size, pos)
        black = _points(setup["AB"], size, pos)
        white = _points(setup["AW"], size, pos)
        if setup["AE"]:
            cleared = set(_points(setup["AE"], size, pos))
            black = tuple(p for p in black if p not in cleared)
            white = tuple(p for p in white if p not in cleared)
        komi_raw = _simple(info.get("KM", ""))
        komi, normalised = _parse_komi(komi_raw)
        result_raw = _simple(info.get("RE", "")) if "RE" in info else ""
        winner, kind = parse_result(info.get("RE"))
        ff = info.get("FF", "").strip()
        pl = info.get("PL", "").strip().upper()[:1]
        return SgfGame(
            source=self.source,
            game_index=index,
            size=size,
            komi=komi,
            komi_raw=komi_raw,
            komi_normalised=normalised,
            handicap=_parse_int(info.get("HA", "")),
            setup_black=black,
            setup_white=white,
            moves=tuple(moves),
            result_raw=result_raw,
            winner=winner,
            result_kind=kind,
            rules=_simple(info.get("RU", "")),
            player_to_move={"B": BLACK, "W": WHITE}.get(pl),
            black_rank=_simple(info.get("BR", "")),
            white_rank=_simple(info.get("WR", "")),
            black=_simple(info.get("PB", "")),
            white=_simple(info.get("PW", "")),
            variations=variations,
            encoding=self.codec,
            encoding_fallback=self.fallback,
            file_format=int(ff) if ff.isascii() and ff.isdigit() else None,
            game_type=gm or "1",
        )

    @staticmethod
    def _moves_one_by_one(raw_moves: list[str], size: int,
                          pos: int) -> list[tuple[int, int | None]]:
        """Moves whose values need care (spaces, 'tt' on a big board) or are not points."""
        table = _point_table(size)
        tt_pass = size <= 19
        moves: list[tuple[int, int | None]] = []
        for n, token in enumerate(raw_moves, 1):
            color = _COLOURS[token[0]]
            value = token[2:].strip()
            if not value or (value in ("tt", "TT") and tt_pass):
                moves.append((color, None))
                continue
            point = table.get(value)
            if point is None:
                raise _BadGame(f"unknown coordinate {value[:10]!r} at move {n} "
                               f"on a {size}x{size} board", pos)
            moves.append((color, point))
        return moves


# ---- values -------------------------------------------------------------------------------------
@cache
def _point_table(size: int) -> dict[str, int]:
    """Every SGF point name on a size x size board -> y * size + x (y from the bottom)."""
    letters = [chr(97 + i) if i < 26 else chr(65 + i - 26) for i in range(size)]
    return {letters[x] + letters[row]: (size - 1 - row) * size + x
            for x in range(size) for row in range(size)}


@cache
def _move_table(size: int) -> dict[str, tuple[int, int | None]]:
    """Move tokens as records write them ('B[pd]', 'W[]', 'B[tt]' up to 19x19 for a pass)
    -> (colour, point); one shared tuple per token, so a game's moves cost a lookup each."""
    values: dict[str, int | None] = dict(_point_table(size))
    values[""] = None
    if size <= 19:
        values["tt"] = values["TT"] = None
    return {f"{name}[{value}": (colour, point) for name, colour in _COLOURS.items()
            for value, point in values.items()}


def _point(value: str, size: int) -> int | None:
    """SGF 'pd' -> y * size + x (y from the bottom), None if it is not on the board."""
    return _point_table(size).get(value)


def _points(values: list[str], size: int, pos: int) -> tuple[int, ...]:
    """AB / AW / AE values, compressed rectangles ('dr:ds') expanded, duplicates dropped."""
    out: dict[int, None] = {}
    for raw in values:
        value = raw.strip()
        if ":" in value:
            a, _, b = value.partition(":")
            pa, pb = _point(a.strip(), size), _point(b.strip(), size)
            if pa is None or pb is None:
                raise _BadGame(f"unknown set-up point list {value[:12]!r}", pos)
            (ya, xa), (yb, xb) = divmod(pa, size), divmod(pb, size)
            for y in range(min(ya, yb), max(ya, yb) + 1):
                for x in range(min(xa, xb), max(xa, xb) + 1):
                    out[y * size + x] = None
            continue
        if value in ("", "tt") and size <= 19:
            continue  # some writers emit AB[] / AB[tt]; nothing to place
        p = _point(value, size)
        if p is None:
            raise _BadGame(f"unknown set-up point {value[:10]!r} on a {size}x{size} board", pos)
        out[p] = None
    return tuple(out)


def _parse_size(raw: str | None, pos: int) -> int:
    if raw is None or not raw.strip():
        return DEFAULT_SIZE
    text = _simple(raw)
    cols, sep, rows = text.partition(":")
    size = ascii_int(cols.strip())
    height = ascii_int(rows.strip()) if sep else size
    if size is None or height is None:
        raise _BadGame(f"unreadable board size SZ[{text[:12]}]", pos)
    if height != size:
        raise _BadGame(f"rectangular board SZ[{text[:12]}] is not supported", pos)
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise _BadGame(f"unsupported board size SZ[{text[:12]}] "
                       f"(accepted {MIN_SIZE}..{MAX_SIZE})", pos)
    return size


def _parse_int(raw: str) -> int:
    """A number property read as an integer ("2", "2.0"); 0 when absent or not a number."""
    value = ascii_decimal(_simple(raw))
    return 0 if value is None else int(value)


def _parse_komi(text: str) -> tuple[float | None, bool]:
    """(komi, normalised?): '6.5' -> 6.5; Fox '750' -> 7.5 flagged; '' or junk -> None."""
    if not text:
        return None, False
    value = ascii_decimal(text.replace(",", "."))
    if value is None:
        return None, False
    if abs(value) >= 100 and value == int(value):
        return value / 100, True
    return value, False


_RESULT = re.compile(r"^([BW])\s*\+\s*(.*)$", re.S | re.I)
_NUMBER = re.compile(r"^\d+(?:\.\d*)?$|^\.\d+$")
_REASONS = {"r": "resign", "resign": "resign", "t": "time", "time": "time", "f": "forfeit",
            "forfeit": "forfeit", "illegal": "illegal"}


def parse_result(raw: str | None) -> tuple[int | None, str]:
    """RE value -> (winner, kind): winner 1 Black, 2 White, 0 draw, None unknown."""
    if raw is None:
        return None, "missing"
    text = _simple(raw)
    low = text.lower()
    if not text or low in ("?", "unknown"):
        return None, "unknown"
    if low in ("0", "draw", "jigo", "d", "0.0") or low.startswith(("d+", "draw", "jigo")):
        return 0, "draw"
    if low in ("void", "no result", "noresult"):
        return None, "void"
    m = _RESULT.match(text)
    if m:
        winner = BLACK if m.group(1).upper() == "B" else WHITE
        rest = m.group(2).strip()
        if "?" in rest or "+" in rest:
            return None, "unknown"  # e.g. 'B+1.5 ? W+timeout': contradictory
        if not rest:
            return winner, "win"
        if _NUMBER.match(rest):
            return winner, "score"
        return winner, _REASONS.get(rest.lower(), "other")
    if low in ("b", "w"):
        return (BLACK if low == "b" else WHITE), "win"
    for loser, winner in (("black", WHITE), ("white", BLACK)):
        if low.startswith(f"{loser} resign"):
            return winner, "resign"
    return None, "unknown"
