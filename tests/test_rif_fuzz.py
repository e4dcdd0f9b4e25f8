"""Property-based and mutation tests for the streaming `.rif` reader (services/records/rif.py).

The reader's contract, checked here on generated and mutated files:
* every `<game>` element is one record: a RifGame or a Rejected with a reason, never dropped;
* a file that stops being XML (cut short, broken markup, bytes that are not text at all) ends
  with exactly one more Rejected, the "malformed XML" tail (record_id "offset ..."), after
  every game that was complete before the error; so records read = ingested + quarantined,
  and a game cut in half is covered by that tail;
* bytes input never raises, whatever the content.

Deterministic in CI: every test runs under `FUZZ` (derandomize=True, no example database).
Everything is generated here: no RenjuNet data is needed.
"""

from __future__ import annotations

import gzip
import random
import re
import tempfile
import xml.parsers.expat
from pathlib import Path
from unittest import mock
from xml.sax.saxutils import escape, quoteattr

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.coords import index_name
from services.records import Rejected, RifGame, read_rif, summarize, write_rif
from services.records import rif as rif_module
from services.records.rif import SNIPPET_CHARS, reason_category

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=50,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SOURCE = "fuzz.rif"
# every reason the reader gives, by reason_category
CATEGORIES = {
    "missing game id", "duplicate game id", "empty game", "unknown coordinate",
    "repeated point", "non-numeric bresult", "unknown bresult", "malformed XML",
}
MAX_REASON_CHARS = 300
DOC = b'<?xml version="1.0" encoding="utf-8"?>\n<database version="1.0" date="2024-01-01">\n'

# ---- strategies ---------------------------------------------------------------------------------

# text an XML attribute or element can hold: no control characters, surrogates or U+FFFE/FFFF
XML_CHAR = st.characters(exclude_categories=("Cc", "Cs", "Cn"))
ATTR_CHAR = st.one_of(XML_CHAR, st.sampled_from("\t\n\r &<>\"'"))
# a name read back through a table: the reader strips ids and joins "name surname"
NAME = st.text(XML_CHAR, max_size=12).map(str.strip)
GAME_ID = st.one_of(
    st.integers(1, 10**9).map(str),
    st.text(XML_CHAR, min_size=1, max_size=10).map(str.strip).filter(bool),
)
MOVES = st.lists(st.integers(0, 224), min_size=1, max_size=40, unique=True).map(tuple)
BRESULT = st.sampled_from([1.0, 0.0, 0.5, None])


@st.composite
def rif_games(draw, min_size: int = 1, max_size: int = 6) -> list[RifGame]:
    ids = draw(st.lists(GAME_ID, min_size=min_size, max_size=max_size, unique=True))
    players = draw(st.lists(NAME, min_size=1, max_size=4))
    games = []
    for game_id in ids:
        games.append(RifGame(
            source=SOURCE,
            game_id=game_id,
            moves=draw(MOVES),
            rule=draw(st.sampled_from(["", "RIF", "Yamaguchi", "Soosõrv-8"]) | NAME),
            bresult=draw(BRESULT),
            black=draw(st.sampled_from(players)),
            white=draw(st.sampled_from(players)),
            opening=draw(st.sampled_from(["", "Kagetsu", "Ryusei"]) | NAME),
            alt=draw(st.text(ATTR_CHAR, max_size=6)),
            swap=draw(st.sampled_from(["", "R", "R--R-"]) | st.text(ATTR_CHAR, max_size=6)),
            tournament=draw(st.sampled_from(["", "Fixture Cup ½"]) | NAME),
            btime=draw(st.sampled_from(["", "8", "12.5"])),
            wtime=draw(st.sampled_from(["", "8", "0"])),
            # element text: the reader strips it (and a bare CR in text is read as LF)
            info=draw(st.text(st.one_of(XML_CHAR, st.sampled_from("\t\n &<>")), max_size=12)
                      .map(str.strip)),
        ))
    return games


def rif_bytes(games: list[RifGame], moves_per_line: int = 0) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_rif(games, Path(tmp) / "g.rif", date="2024-01-01",
                         moves_per_line=moves_per_line)
        return path.read_bytes()


# ---- oracle and invariants ----------------------------------------------------------------------


def census(data: bytes) -> tuple[int, int, bool]:
    """(game elements opened, closed, whether the XML fails), from a one-shot expat parse that
    shares nothing with the reader but the expat library."""
    counts = {"opened": 0, "closed": 0}

    def start(name, _attrs):
        if name == "game":
            counts["opened"] += 1

    def end(name):
        if name == "game":
            counts["closed"] += 1

    parser = xml.parsers.expat.ParserCreate()
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
        failed = False
    except (xml.parsers.expat.ExpatError, LookupError, ValueError):
        failed = True
    return counts["opened"], counts["closed"], failed


def is_tail(item: object) -> bool:
    return isinstance(item, Rejected) and item.reason.startswith("malformed XML")


def read_all(data: bytes, chunk: int | None = None) -> list[RifGame | Rejected]:
    """read_rif on bytes; anything it raises fails the test with the exception."""
    if chunk is None:
        return list(read_rif(data, source=SOURCE))
    with mock.patch.object(rif_module, "CHUNK_BYTES", chunk):
        return list(read_rif(data, source=SOURCE))


def check_records(
    data: bytes, items: list[RifGame | Rejected], chunk: int | None = None
) -> None:
    """The accounting identity against the census, plus the shape of every record. (The tail
    quotes the last two chunks fed, so with tiny test chunks its snippet may be blank.)"""
    opened, closed, failed = census(data)
    tails = [i for i, item in enumerate(items) if is_tail(item)]
    assert tails == ([len(items) - 1] if failed else []), (failed, items[-3:])
    records = items[:-1] if failed else items
    # every complete <game> is one record; one still open at the error is covered by the tail
    assert len(records) == closed, (closed, records)
    assert failed or opened == closed
    stats = summarize(items)
    assert stats.read == stats.games + stats.rejected == closed + failed

    ids = [g.game_id for g in records if isinstance(g, RifGame)]
    assert len(set(ids)) == len(ids)
    for number, item in enumerate(records, 1):
        assert item.source == SOURCE
        if isinstance(item, RifGame):
            assert item.game_id and item.game_id == item.game_id.strip()
            assert item.moves and len(set(item.moves)) == len(item.moves)
            assert all(isinstance(p, int) and 0 <= p < 225 for p in item.moves)
            assert item.bresult in (None, 0.0, 0.5, 1.0)
        else:
            check_reason(item)
            assert item.snippet.startswith("<game"), item
            if item.reason == "missing game id":
                assert item.record_id == f"game #{number}", item  # numbered by position
            else:
                assert item.record_id and item.record_id == item.record_id.strip(), item
    if failed:
        tail = items[-1]
        check_reason(tail)
        assert tail.record_id.startswith("offset "), tail
        offset = tail.record_id.split()[1]
        if offset.isdigit():
            assert 0 <= int(offset) <= len(data), (tail, len(data))
        assert tail.snippet or not data.strip() or chunk, tail


def check_reason(item: Rejected) -> None:
    """A reason a person can read in a quarantine table: one short printable line, from the
    known set of categories."""
    assert item.reason and item.reason.isprintable(), item
    assert len(item.reason) <= MAX_REASON_CHARS, item.reason[:400]
    assert reason_category(item.reason) in CATEGORIES, item.reason
    assert len(item.snippet) <= SNIPPET_CHARS


# ---- 1. round trip ------------------------------------------------------------------------------


@FUZZ
@given(games=rif_games(), moves_per_line=st.integers(0, 9))
def test_written_games_read_back_with_identical_fields(games, moves_per_line) -> None:
    data = rif_bytes(games, moves_per_line)
    items = read_all(data)
    assert items == games
    check_records(data, items)


@st.composite
def joined_file(draw) -> tuple[bytes, list[RifGame]]:
    """A hand-built file whose games refer to table ids, some of them missing from the tables
    (or tables placed after <games>): a game keeps the raw id where no join applies."""
    names = {
        "player": draw(st.dictionaries(st.sampled_from("1234"), st.tuples(NAME, NAME))),
        "rule": draw(st.dictionaries(st.sampled_from("1234"), NAME)),
        "opening": draw(st.dictionaries(st.sampled_from("1234"), st.tuples(NAME, NAME))),
        "tournament": draw(st.dictionaries(st.sampled_from("1234"), NAME)),
    }
    tables_first = draw(st.booleans())

    def display(tag: str, key: str) -> str:
        if not tables_first or key not in names[tag]:
            return key
        value = names[tag][key]
        if tag == "player":
            return " ".join(part for part in value if part) or key
        if tag == "opening":
            return next((part for part in value if part), key)
        return value or key

    rows, expected = [], []
    refs = st.sampled_from(["", "1", "2", "3", "4", "77"])
    for number in range(draw(st.integers(1, 5))):
        keys = {a: draw(refs) for a in ("rule", "black", "white", "opening", "tournament")}
        moves = draw(MOVES)
        bresult = draw(st.sampled_from(["1", "0", "0.5", "", None, "1.0", " 0.5 "]))
        attrs = "".join(f' {a}="{k}"' for a, k in keys.items() if k or draw(st.booleans()))
        if bresult is not None:
            attrs += f' bresult="{bresult}"'
        text = " ".join(index_name(p, 15) for p in moves)
        rows.append(f'<game id="{number + 1}"{attrs}><move>{text}</move></game>')
        expected.append(RifGame(
            source=SOURCE, game_id=str(number + 1), moves=moves,
            rule=display("rule", keys["rule"]),
            bresult=float(bresult) if bresult and bresult.strip() else None,
            black=display("player", keys["black"]), white=display("player", keys["white"]),
            opening=display("opening", keys["opening"]),
            tournament=display("tournament", keys["tournament"]),
        ))

    def quote(value: str) -> str:
        return value.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")

    tables = "".join([
        "<players>", *(f'<player id="{k}" name="{quote(a)}" surname="{quote(b)}"/>'
                       for k, (a, b) in names["player"].items()), "</players>",
        "<rules>", *(f'<rule id="{k}" name="{quote(v)}"><info>x</info></rule>'
                     for k, v in names["rule"].items()), "</rules>",
        "<openings>", *(f'<opening id="{k}" name="{quote(a)}" abbr="{quote(b)}"/>'
                        for k, (a, b) in names["opening"].items()), "</openings>",
        "<tournaments>", *(f'<tournament id="{k}" name="{quote(v)}"/>'
                           for k, v in names["tournament"].items()), "</tournaments>",
    ])
    games = "<games>\n" + "\n".join(rows) + "\n</games>"
    body = tables + games if tables_first else games + tables
    data = f'<?xml version="1.0" encoding="utf-8"?>\n<database>{body}</database>\n'.encode()
    return data, expected


@FUZZ
@given(case=joined_file())
def test_table_joins_and_missing_references(case) -> None:
    data, expected = case
    items = read_all(data)
    assert items == expected
    check_records(data, items)


# ---- 2. one bad game among good ones ------------------------------------------------------------

# other scripts' digits ("h８", "h٨") and letters that case mapping makes ASCII ("\u212a8",
# the Kelvin sign) too: names are ASCII only
BAD_TOKENS = ["p16", "a0", "zz", "h16", "o0", "p1", "h", "8", "h8h9", "h-1", "h+8", "h 8",
              "h²", "h⁸", "Ｈ8", "ı8", "h8.0", "h1e1", "&", "<", "\u0300", "h0x8", "h８", "h٨",
              "\u212a8"]
BAD_BRESULTS = {
    "non-numeric bresult": ["black", "1/2", "½", "0x1", "1,0", "--1", "1 0"],
    "unknown bresult": ["2", "-1", "0.25", "nan", "inf", "-inf", "1e999", "9" * 400],
}


@st.composite
def one_bad_game(draw) -> tuple[list[RifGame], int, str, str]:
    """(games, index of the bad one, the category its rejection must have, bad <game> xml)."""
    games = draw(rif_games(min_size=2, max_size=5))
    kind = draw(st.sampled_from(
        ["token", "repeat", "bresult", "no id", "blank id", "duplicate id", "empty"]))
    bad = draw(st.integers(1 if kind == "duplicate id" else 0, len(games) - 1))
    game = games[bad]
    attrs = f"id={quoteattr(game.game_id)}"
    moves = [index_name(p, 15) for p in game.moves]
    bresult = ' bresult="1"'
    if kind == "token":
        moves.insert(draw(st.integers(0, len(moves))), draw(st.sampled_from(BAD_TOKENS)))
        category = "unknown coordinate"
    elif kind == "repeat":
        at = draw(st.integers(1, len(moves)))
        moves.insert(at, moves[draw(st.integers(0, at - 1))])
        category = "repeated point"
    elif kind == "bresult":
        category = draw(st.sampled_from(sorted(BAD_BRESULTS)))
        bresult = f' bresult="{draw(st.sampled_from(BAD_BRESULTS[category]))}"'
    elif kind in ("no id", "blank id"):
        attrs = "" if kind == "no id" else 'id=" \t "'
        category = "missing game id"
    elif kind == "duplicate id":
        attrs = f"id={quoteattr(games[0].game_id)}"
        category = "duplicate game id"
    else:
        moves = draw(st.sampled_from([[], [" "], ["\n\t"]]))
        category = "empty game"
    text = escape(" ".join(moves))
    return games, bad, category, f"<game {attrs}{bresult}><move>{text}</move></game>\n"


@FUZZ
@given(case=one_bad_game(), chunk=st.sampled_from([None, 1, 5, 64]))
def test_one_bad_game_is_rejected_with_its_reason_and_the_rest_ingested(case, chunk) -> None:
    games, bad, category, bad_xml = case
    data = rif_bytes(games)
    spans = list(re.finditer(rb"<game .*?</game>\n", data, re.S))
    start, end = spans[bad].span()
    data = data[:start] + bad_xml.encode() + data[end:]
    items = read_all(data, chunk)
    check_records(data, items, chunk)
    assert len(items) == len(games)
    for i, (item, game) in enumerate(zip(items, games, strict=True)):
        if i != bad:
            assert item == game
            continue
        assert isinstance(item, Rejected), item
        assert reason_category(item.reason) == category, item
        expected_id = games[0].game_id if category == "duplicate game id" else game.game_id
        if category == "missing game id":
            expected_id = f"game #{bad + 1}"
        assert item.record_id == expected_id


# ---- 3. mutated files ---------------------------------------------------------------------------

TAG = re.compile(rb"<[^<>]*>")
GAME = re.compile(rb"<game\b.*?</game>\n?", re.S)
MOVE_TEXT = re.compile(rb"<move>([^<]*)</move>")
ATTR_VALUE = re.compile(rb'="([^"]*)"')
REF_VALUE = re.compile(rb' (?:rule|black|white|opening|tournament)="([^"]*)"')
TABLE_ROW = re.compile(rb"<(?:player|rule|opening|tournament) [^>]*/>\n?")
ENCODING = re.compile(rb'encoding="([^"]*)"')
INTERESTING_BYTES = b'<>/&;"=\'\x00\x80\xff\xc3 \nx9'
BAD_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf", b"\x00",
             b"\xef\xbf\xbe", b"\x1b", b"\xfe\xff"]
INSERTS = [b"&", b"<", b">", b"]]>", b"<!--", b"-->", b"&amp;", b"&#0;", b"&#xD800;", b"&nbsp;",
           b"<![CDATA[h8 h9]]>", b"<?pi x?>", b"<!DOCTYPE d>", b"</game>", b"<game>", b"<move>",
           b"<game id='x'><move>h8</move></game>", b"</games>", b"<games>", b"\r\n", b"'", b'"']
ENCODINGS = [b"utf-9", b"cp932", b"latin-1", b"iso-8859-15", b"utf-16", b"ascii", b"x" * 300,
             b"UTF-8", b"", b"cp1252", b"koi8-r", b"utf-32", b"idna", b"rot13", b"hex"]
HUGE = [b"9" * 100_000, b"x y " * 30_000, b"&#10;" * 20_000, b"\xc3\xa9" * 50_000,
        b"h8 " * 30_000]
OPS = ["flip", "truncate", "delete span", "delete tag", "duplicate tag", "copy game",
       "unwrap", "bad token", "repeat move", "bad bresult", "unknown ref", "drop table row",
       "non-utf8", "insert", "huge value", "encoding"]


def _span(draw, pattern: re.Pattern, data: bytes) -> tuple[int, int] | None:
    """The span of one match of `pattern` (of its group 1 when it has one), or None."""
    found = list(pattern.finditer(data))
    if not found:
        return None
    return draw(st.sampled_from(found)).span(1 if pattern.groups else 0)


def mutate(draw, data: bytes) -> bytes:
    """One mutation of `data`, chosen by hypothesis; `data` unchanged where it does not apply."""
    op = draw(st.sampled_from(OPS))
    n = len(data)
    at = draw(st.integers(0, n))
    if op == "flip" and at < n:
        byte = draw(st.sampled_from(INTERESTING_BYTES) | st.integers(0, 255))
        return data[:at] + bytes([byte]) + data[at + 1:]
    if op == "truncate":
        return data[:at]
    if op == "delete span":
        return data[:at] + data[at + draw(st.integers(1, 40)):]
    if op == "non-utf8":
        return data[:at] + draw(st.sampled_from(BAD_BYTES)) + data[at:]
    if op == "insert":
        return data[:at] + draw(st.sampled_from(INSERTS)) + data[at:]
    if op == "unwrap":  # drop a container's (or the root's) start and end tags
        pair = draw(st.sampled_from([(b"<games>", b"</games>"), (b"<database", b"</database>")]))
        for tag in pair:
            start = data.find(tag)
            end = data.find(b">", start)
            if start >= 0 and end >= 0:  # (an earlier mutation may have removed the '>')
                data = data[:start] + data[end + 1:]
        return data
    pattern = {
        "delete tag": TAG, "duplicate tag": TAG, "copy game": GAME, "bad token": MOVE_TEXT,
        "repeat move": MOVE_TEXT, "bad bresult": GAME, "unknown ref": REF_VALUE,
        "drop table row": TABLE_ROW, "huge value": ATTR_VALUE, "encoding": ENCODING,
    }.get(op)
    span = _span(draw, pattern, data) if pattern else None
    if span is None:
        return data
    start, end = span
    old = data[start:end]
    if op == "delete tag" or op == "drop table row":
        new = b""
    elif op == "duplicate tag":
        new = old + old
    elif op == "copy game":  # the copy goes before any tag: nested, outside <games>, anywhere
        tag = draw(st.sampled_from([t.start() for t in TAG.finditer(data)]))
        return data[:tag] + old + data[tag:]
    elif op in ("bad token", "repeat move"):
        tokens = old.split()
        if op == "bad token":
            token = draw(st.sampled_from(BAD_TOKENS)).encode()
        else:
            token = draw(st.sampled_from(tokens)) if tokens else b"h8 h8"
        tokens.insert(draw(st.integers(0, len(tokens))), token)
        new = b" ".join(tokens)
    elif op == "bad bresult":
        value = draw(st.sampled_from([v for vs in BAD_BRESULTS.values() for v in vs]))
        new = re.sub(rb' bresult="[^"]*"', b"", old, count=1)
        new = new.replace(b"<game ", b'<game bresult="' + value.encode() + b'" ', 1)
    elif op == "unknown ref":
        new = draw(st.sampled_from([b"9999", b"", b"x", b"-1", b" 1 ", b"1.0"]))
    elif op == "huge value":
        new = draw(st.sampled_from(HUGE))
    else:  # encoding
        new = draw(st.sampled_from(ENCODINGS))
    return data[:start] + new + data[end:]


def base_files() -> list[bytes]:
    """Valid files to mutate, made once from a seeded generator (cheaper than drawing each):
    written by write_rif with its tables, plain and wrapped, plus a hand-built one."""
    rng = random.Random(5)
    names = ["Ann", "Jüri Tamm", "王 力", "O'Neil & Sons", ""]

    def game(i: int) -> RifGame:
        return RifGame(
            SOURCE, str(100 + i), tuple(rng.sample(range(225), rng.randint(1, 30))),
            rule=rng.choice(["RIF", "", "Yamaguchi"]), bresult=rng.choice([1.0, 0.0, 0.5, None]),
            black=rng.choice(names), white=rng.choice(names),
            opening=rng.choice(["Kagetsu", "", "Ryusei"]), alt=rng.choice(["", "i8", "51"]),
            swap=rng.choice(["", "R", "R--R-"]), tournament=rng.choice(["", "Cup <½>"]),
            btime=rng.choice(["", "8"]), wtime=rng.choice(["", "8"]),
            info=rng.choice(["", "B=1245", "a &\n b"]))

    files = [rif_bytes([game(i) for i in range(k)], per_line) for k, per_line in
             [(1, 0), (3, 0), (4, 5), (6, 0)]]
    hand = "".join(
        f'<game id="{i}" black="1" white="2" rule="1" opening="9" bresult="{i % 2}">'
        f"<move>\n  h8 h9 i{i + 1}\n</move><info>i={i}</info></game>\n" for i in range(1, 4))
    files.append(
        (f'{DOC.decode()}<players><player id="1" name="Ann" surname="Lee"/></players>'
         f'<rules><rule id="1" name="RIF"><info>x</info></rule></rules>'
         f"<games>\n{hand}</games>\n</database>\n").encode())
    return files


BASES = base_files()


@st.composite
def mutated_file(draw) -> bytes:
    data = draw(st.sampled_from(BASES))
    for _ in range(draw(st.integers(1, 3))):
        data = mutate(draw, data)
    return data


@settings(FUZZ, max_examples=500)
@given(data=mutated_file(), chunk=st.sampled_from([1, 3, 16, 200]))
def test_mutated_files_never_raise_and_account_for_every_game(data, chunk) -> None:
    chunk = max(chunk, len(data) // 64)  # a 100 kB value is not fed a byte at a time
    items = read_all(data)
    check_records(data, items)
    # feeding the parser in other chunk sizes gives the same records (and the same tail reason;
    # its quoted window depends on the chunks)
    small = read_all(data, chunk)
    assert [is_tail(i) for i in small] == [is_tail(i) for i in items]
    if items and is_tail(items[-1]):
        assert small[-1].reason == items[-1].reason
        small, items = small[:-1], items[:-1]
    assert small == items


@FUZZ
@given(games=rif_games(max_size=4), per_line=st.sampled_from([0, 3]), data=st.data(),
       chunk=st.sampled_from([None, 1, 7, 100]))
def test_a_file_cut_anywhere_keeps_the_games_before_the_cut_and_quarantines_the_rest(
    games, per_line, data, chunk
) -> None:
    whole = rif_bytes(games, per_line)
    cut = whole[: data.draw(st.integers(0, len(whole)), label="cut")]
    items = read_all(cut, chunk)
    check_records(cut, items, chunk)
    complete = cut.count(b"</game>")
    assert items[:complete] == games[:complete]  # identical fields up to the cut
    if b"</database>" in cut:
        assert len(items) == len(games)
    else:  # a game cut in half is never ingested: the malformed tail stands for it
        assert len(items) == complete + 1 and is_tail(items[-1])


@settings(FUZZ, max_examples=150)
@given(data=st.binary(max_size=300) | st.text(max_size=100).map(str.encode))
def test_random_bytes_never_raise_and_are_accounted_for(data) -> None:
    items = read_all(data)
    check_records(data, items)


# ---- 4. specific cases the fuzzing found or that the contract names -----------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "malformed XML: no element found"),
        (b"not xml at all", "malformed XML: syntax error"),
        # mtime=0: the same bytes, so the same test id, in every run
        (gzip.compress(DOC + b"</database>\n", mtime=0),
         "malformed XML: not well-formed (invalid token)"),
        (DOC + b'<games><game id="1"><move>h8', "malformed XML: no element found"),
        # expat refuses these declared encodings; the reader must not raise LookupError /
        # ValueError out of the parser
        (DOC.replace(b"utf-8", b"utf-9") + b"</database>", "malformed XML: unsupported encoding"),
        (DOC.replace(b"utf-8", b"cp932") + b"</database>", "malformed XML: unsupported encoding"),
        (DOC.replace(b"utf-8", b"idna") + b"</database>", "malformed XML: unsupported encoding"),
    ],
)
def test_a_file_that_is_not_xml_is_one_malformed_record(data: bytes, reason: str) -> None:
    (item,) = read_all(data)
    assert isinstance(item, Rejected) and item.reason.startswith(reason), item
    assert item.record_id.startswith("offset ")


@pytest.mark.parametrize(
    "xml_text",
    [
        # no <games> container, a <games> fragment as root, a lone game as root
        '<database><game id="1"><move>h8</move></game><game id="2"><move>a1</move></game>'
        "</database>",
        '<games><game id="1"><move>h8</move></game><game id="2"><move>a1</move></game></games>',
        '<database><games><game id="1"><move>h8</move></game></games><game id="2">'
        "<move>a1</move></game></database>",
    ],
)
def test_games_outside_the_games_container_are_still_records(xml_text: str) -> None:
    items = read_all(xml_text.encode())
    assert [(g.game_id, g.moves) for g in items] == [("1", (112,)), ("2", (0,))]


def test_a_game_inside_a_game_is_a_record_too() -> None:
    data = b'<database><games><game id="1"><info><game id="2"><move>a1</move></game></info>' \
        b"<move>h8</move></game></games></database>"
    items = read_all(data)
    check_records(data, items)
    assert [g.game_id for g in items] == ["2", "1"]


def test_unicode_digits_in_a_move_are_an_unknown_coordinate() -> None:
    data = DOC + '<games><game id="1"><move>h8 h²</move></game></games></database>'.encode()
    (item,) = read_all(data)
    assert isinstance(item, Rejected) and item.reason == "unknown coordinate 'h²' at move 2"


def test_a_long_or_multi_line_duplicate_id_gives_a_short_readable_reason() -> None:
    game_id = "x&#10;y " * 5000
    game = f'<game id="{game_id}"><move>h8</move></game>'
    data = DOC + f"<games>{game}{game}</games></database>".encode()
    first, second = read_all(data)
    assert isinstance(first, RifGame) and isinstance(second, Rejected)
    check_reason(second)
    assert reason_category(second.reason) == "duplicate game id"
    assert second.record_id == first.game_id


def test_a_file_cut_after_a_run_of_blanks_still_quotes_text() -> None:
    data = DOC + b'<games><game id="1"><move>h8</move></game>' + b" \n" * 400
    first, tail = read_all(data)
    assert isinstance(first, RifGame) and is_tail(tail)
    assert tail.snippet.endswith("</game>"), tail


def test_a_damaged_gzip_file_keeps_the_games_before_the_damage_and_quarantines_the_rest(
        tmp_path: Path) -> None:
    """A .gz cut short, corrupted inside, or not gzip at all raised out of read_rif, and the
    ingest flow retried it as an I/O error, then failed the whole run: now the games before
    the damage are read and the rest of the file is one rejection saying what broke."""
    games = [RifGame(SOURCE, str(i), (112, 113 + i % 5)) for i in range(3000)]
    whole = write_rif(games, tmp_path / "a.rif.gz").read_bytes()
    cases = {
        "cut.rif.gz": whole[: len(whole) // 2],  # EOFError from the gzip layer
        "crc.rif.gz": whole[:-8] + bytes(4) + whole[-4:],  # every byte read, the CRC wrong
        "plain.rif.gz": gzip.decompress(whole),  # XML under a .gz name: BadGzipFile
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        read = list(read_rif(path))
        *kept, tail = read
        assert all(isinstance(g, RifGame) for g in kept), name
        assert isinstance(tail, Rejected), (name, tail)
        assert reason_category(tail.reason) == "compressed file damaged", (name, tail.reason)
        assert tail.reason.endswith("the rest of the file is not read"), tail.reason
        assert tail.record_id.startswith("offset "), tail
        assert [g.game_id for g in kept] == [str(i) for i in range(len(kept))], name
        if name != "plain.rif.gz":  # the last read (the CRC's) loses its chunk of text too
            assert 0 < len(kept) < len(games), (name, len(kept))
        if name == "plain.rif.gz":
            assert not kept and "Not a gzipped file" in tail.reason, tail
    # zeros inside the deflate data: the damage shows as whatever is met first, bad deflate
    # data or the garbage it decodes to (malformed XML); never an exception
    corrupt = bytearray(whole)
    corrupt[len(whole) // 2 : len(whole) // 2 + 64] = bytes(64)
    path = tmp_path / "corrupt.rif.gz"
    path.write_bytes(bytes(corrupt))
    *kept, tail = read_rif(path)
    assert 0 < len(kept) < len(games) and all(isinstance(g, RifGame) for g in kept[:-1])
    assert reason_category(tail.reason) in ("compressed file damaged", "malformed XML"), tail


def test_a_record_over_the_cap_ends_the_file_with_a_reason_in_bounded_memory() -> None:
    """A 20 MB <move> (or millions of children) in one game was held whole by the parser:
    hundreds of MB from a small .gz. The games before it are kept; it and the rest of the file
    are one rejection."""
    import tracemalloc

    head = b'<database><games><game id="1" bresult="1"><move>h8 h9</move></game>'
    for bulk in (b'<game id="2"><move>' + b"h8 " * (7 << 20) + b"</move></game>",
                 b'<game id="2">' + b"<x/>" * (5 << 20) + b"</game>"):
        data = head + bulk + b'<game id="3"><move>h8 h9</move></game></games></database>'
        tracemalloc.start()
        try:
            records = list(read_rif(data, source=SOURCE))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert isinstance(records[0], RifGame) and records[0].game_id == "1"
        assert len(records) == 2 and isinstance(records[1], Rejected)
        assert records[1].reason.startswith(f"record over {rif_module.MAX_RECORD_BYTES} bytes")
        # allocated while reading (the input was made before): the cap's megabyte of <x/> is
        # ~26 MB of elements; without the cap, 5M of them took hundreds of MB
        assert peak < 64 << 20, peak
