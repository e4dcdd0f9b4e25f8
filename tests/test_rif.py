"""The .rif reader on fixtures written at test time from the real RenjuNet-derived games.

RenjuNet games must not be copied into the repository, so the fixtures are built in tmp_path
from ../shared/data/renjunet; the only literal game is the public excerpt in RIF_SCHEMA.md.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import tracemalloc
from pathlib import Path

import pytest

from services.coords import parse_point
from services.games.gomoku.rules import BLACK, GomokuState, Rule
from services.records import ReadStats, Rejected, RifGame, read_rif, summarize, write_rif
from services.records.rif import reason_category

RENJUNET = Path(__file__).resolve().parents[2] / "shared" / "data" / "renjunet"
TSV = RENJUNET / "renjunet-derived-games-dev.tsv"

# verbatim real <game> element quoted in RIF_SCHEMA.md (source S4)
SCHEMA_EXCERPT = """\
<game id="171548" publisher="91" tournament="3369" round="8" rule="25" black="3069" white="3969" bresult="1" btime="8" wtime="8" opening="19" alt="51" swap="R--R-">
<move>h8 h9 i8 g8 g9 f7 e6 f10 f6 g6 e8 e7 d7 c6 i10 i7 g7 i9 c8 f5 h5 j8 k9 c5 d5 d6 b4 f4 h6 k7 l6 h7 i5 j4 j5 k5 d4 e5 g3 k4 k6 m4 j6 i6 h4 f2 h3 h2 i4 l7 g2</move>
<info>B=1245</info>
</game>"""  # noqa: E501

SURNAMES = ("Kärkkäinen", "", "Šťastný", "王", "Ōta-Łukasz")
ALTS = ("", "i8", "51")
SWAPS = ("R", "", "R--R-", "")


def points(text: str) -> tuple[int, ...]:
    return tuple(y * 15 + x for x, y in (parse_point(t, 15) for t in text.split()))


def database(games_xml: str, tables: str = "") -> bytes:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<database version="1.0" date="2024-01-01">\n'
        f"{tables}<games>\n{games_xml}\n</games>\n</database>\n"
    ).encode()


def game_xml(game_id: str, moves: str, bresult: str | None = "1", extra: str = "") -> str:
    result = "" if bresult is None else f' bresult="{bresult}"'
    return f'<game id="{game_id}"{result}{extra}><move>{moves}</move></game>'


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    if not RENJUNET.is_dir():
        pytest.skip(f"shared RenjuNet data folder {RENJUNET} is absent; tests read it at run time")
    with TSV.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.fixture(scope="module")
def real_games(rows: list[dict[str, str]]) -> list[RifGame]:
    """The TSV games as RifGames, with the attribute variety a real export has."""
    games = []
    for i, row in enumerate(rows):
        black = f"{row['black_first_name']} {SURNAMES[i % len(SURNAMES)]}".strip()
        games.append(
            RifGame(
                source="fixture.rif",
                game_id=str(1000 + int(row["game_no"])),
                moves=points(row["moves"]),
                rule="RIF",
                bresult=float(row["bresult"]),
                black=black,
                white=row["white_first_name"],
                opening=row["opening"],
                alt=ALTS[i % len(ALTS)],
                swap=SWAPS[i % len(SWAPS)],
                tournament="Fixture Cup ½" if i % 2 else "",
                btime=str(i % 60) if i % 3 else "",
                wtime="8" if i % 3 else "",
                info="B=1245 & <note>" if i % 4 == 0 else "",
            )
        )
    return games


def test_real_games_round_trip(tmp_path: Path, rows: list, real_games: list[RifGame]) -> None:
    path = write_rif(real_games, tmp_path / "fixture.rif", date="2024-01-01", moves_per_line=7)
    raw = path.read_text(encoding="utf-8")
    assert "Kärkkäinen" in raw and "王" in raw  # non-ASCII names are stored as UTF-8
    assert "<move>\n    h8 " in raw  # multi-line whitespace inside <move>
    assert raw.count("<info>") == len(real_games[::4])

    items = list(read_rif(path))
    assert items == real_games  # every field, in file order
    assert [g.moves for g in items] == [points(r["moves"]) for r in rows]
    assert {g.bresult for g in items} == {0.0, 0.5, 1.0}
    assert summarize(items) == ReadStats(read=len(rows), games=len(rows), rejected=0,
                                         moves=sum(len(g.moves) for g in items))


def test_reads_bytes_and_gzip(tmp_path: Path, real_games: list[RifGame]) -> None:
    plain = write_rif(real_games[:30], tmp_path / "a.rif")
    zipped = write_rif(real_games[:30], tmp_path / "a.rif.gz")
    assert gzip.decompress(zipped.read_bytes()) == plain.read_bytes()
    from_bytes = list(read_rif(plain.read_bytes(), source="fixture.rif"))
    assert from_bytes == list(read_rif(zipped, source="fixture.rif")) == real_games[:30]
    assert next(read_rif(plain.read_bytes())).source == "<bytes>"


def test_schema_excerpt_without_and_with_tables() -> None:
    (game,) = read_rif(database(SCHEMA_EXCERPT), source="excerpt")
    assert isinstance(game, RifGame)
    assert (game.game_id, game.bresult, game.alt, game.swap) == ("171548", 1.0, "51", "R--R-")
    assert (game.black, game.white, game.rule, game.opening) == ("3069", "3969", "25", "19")
    assert (game.tournament, game.btime, game.wtime, game.info) == ("3369", "8", "8", "B=1245")
    assert len(game.moves) == 51 and game.moves[0] == 7 * 15 + 7 and game.moves[-1] == 1 * 15 + 6
    final = GomokuState.from_moves(game.moves, rule=Rule.RENJU)
    assert final.winner == BLACK  # g2 makes exactly five, as bresult="1" says

    # the tables below are invented for the test, only to show the joins
    tables = (
        '<rules><rule id="25" name="RIF"><info>Renju International Federation</info></rule>'
        '</rules><openings><opening id="19" abbr="Ra" name="Rangetsu"/></openings>'
        '<players><player id="3069" name="Jüri" surname="Tamm" country="1"/>'
        '<player id="3969" name="Ann" surname="" country="1"/></players>'
        '<tournaments><tournament id="3369" name="Test Open" year="2019"/></tournaments>'
    )
    (joined,) = read_rif(database(SCHEMA_EXCERPT, tables))
    assert isinstance(joined, RifGame)
    assert (joined.black, joined.white, joined.rule) == ("Jüri Tamm", "Ann", "RIF")
    assert (joined.opening, joined.tournament) == ("Rangetsu", "Test Open")


def test_missing_optional_attributes_and_odd_whitespace(rows: list) -> None:
    a, b = rows[0]["moves"], rows[1]["moves"]
    messy = "\n\t " + a.replace(" ", "\r\n\t", 5).replace(" ", "  ") + " \n"
    xml = "\n".join(
        [
            f'<game id="1" black="1" white="2" bresult="0"><move>{a}</move></game>',
            f'<game id="2" alt="" swap=""><move>{messy}</move><info>  </info></game>',
            f'<game id="3" bresult=""><move>{b.upper()}</move></game>',
        ]
    )
    items = list(read_rif(database(xml)))
    assert all(isinstance(g, RifGame) for g in items)
    first, second, third = items
    assert first.moves == second.moves == points(a) and third.moves == points(b)
    assert (first.black, first.alt, first.swap, first.info, first.rule) == ("1", "", "", "", "")
    assert second.bresult is None and third.bresult is None and second.info == ""


def test_bad_games_are_reported_and_the_rest_ingested(rows: list) -> None:
    moves = [r["moves"].split() for r in rows[:12]]
    good = [" ".join(m) for m in moves]
    with_token = " ".join([*moves[1][:6], "p16", *moves[1][6:]])
    repeated = " ".join([*moves[2][:11], "h8", *moves[2][11:]])
    cases = [
        (game_xml("10", good[0]), None),
        (game_xml("11", with_token), "unknown coordinate 'p16' at move 7"),
        (game_xml("12", "h8 z0 h9"), "unknown coordinate 'z0' at move 2"),
        (game_xml("13", "h8 h0"), "unknown coordinate 'h0' at move 2"),
        (game_xml("14", good[3]), None),
        (game_xml("15", repeated), "repeated point h8 at move 12 (first at move 1)"),
        (game_xml("14", good[4]), "duplicate game id 14"),
        (game_xml("16", good[5], bresult="black"), "non-numeric bresult 'black'"),
        (game_xml("17", good[6], bresult="2"), "unknown bresult '2' (expected 1, 0 or 0.5)"),
        (game_xml("18", "  \n "), "empty game"),
        ('<game id="19" bresult="1"><info>no moves</info></game>', "empty game"),
        ('<game bresult="1"><move>h8</move></game>', "missing game id"),
        (game_xml("20", good[7], bresult="0.5"), None),
    ]
    data = database("\n".join(xml for xml, _ in cases))
    items = list(read_rif(data, source="bad.rif"))

    assert len(items) == len(cases) == data.count(b"<game ")  # one record per <game>
    for item, (_, reason) in zip(items, cases, strict=True):
        if reason is None:
            assert isinstance(item, RifGame), item
        else:
            assert isinstance(item, Rejected) and item.reason == reason, item
            assert item.source == "bad.rif" and item.snippet.startswith("<game")
            assert len(item.snippet) <= 200
    assert [g.game_id for g in items if isinstance(g, RifGame)] == ["10", "14", "20"]
    assert items[0].moves == points(good[0])  # type: ignore[union-attr]
    assert items[11].record_id == "game #12"  # no id: numbered by position

    stats = summarize(items)
    assert (stats.read, stats.games, stats.rejected) == (13, 3, 10)
    assert stats.read == stats.games + stats.rejected
    assert stats.by_reason == {
        "unknown coordinate": 3, "empty game": 2, "repeated point": 1, "duplicate game id": 1,
        "non-numeric bresult": 1, "unknown bresult": 1, "missing game id": 1,
    }


def test_truncated_file_yields_games_before_it_then_one_rejection(
    tmp_path: Path, real_games: list[RifGame]
) -> None:
    data = write_rif(real_games[:40], tmp_path / "t.rif", moves_per_line=10).read_bytes()
    start = data.index(f'<game id="{real_games[25].game_id}"'.encode())
    cut = data.index(b"<move>", start) + 30  # in the middle of the 26th game's moves
    items = list(read_rif(data[:cut], source="t.rif"))

    assert items[:-1] == [dataclasses.replace(g, source="t.rif") for g in real_games[:25]]
    tail = items[-1]
    assert isinstance(tail, Rejected)
    assert tail.reason == "malformed XML: no element found"
    assert tail.record_id.startswith("offset ") and "line " in tail.record_id
    offset = int(tail.record_id.split()[1])
    assert 0 < offset <= cut and tail.snippet and len(tail.snippet) <= 200
    stats = summarize(items)
    assert stats.read == data[:cut].count(b"<game ") == stats.games + stats.rejected == 26


def test_broken_markup_mid_file_is_located_exactly() -> None:
    xml = (
        f'{game_xml("1", "h8 h9")}\n'
        '<game id="2" black="Jürgen Ōta"><move>h8 i9</mov></game>\n'
        f'{game_xml("3", "h8 h7")}'
    )
    data = database(xml)
    items = list(read_rif(data))
    assert isinstance(items[0], RifGame) and items[0].game_id == "1"
    (tail,) = items[1:]  # parsing stops at the first XML error
    assert isinstance(tail, Rejected) and tail.reason == "malformed XML: mismatched tag"
    offset = int(tail.record_id.split()[1])  # a byte offset, past the non-ASCII name
    assert data[offset:].startswith(b"mov></game>")
    assert "Jürgen" in tail.snippet


@pytest.mark.parametrize("data", [b"", b"not xml at all", b"<database><games><game id='1'>"])
def test_garbage_never_raises(data: bytes) -> None:
    (item,) = read_rif(data)
    assert isinstance(item, Rejected) and item.reason.startswith("malformed XML: ")


def test_memory_stays_flat_on_a_large_file(tmp_path: Path, real_games: list[RifGame]) -> None:
    many = [
        dataclasses.replace(real_games[i % len(real_games)], game_id=str(i)) for i in range(4000)
    ]
    path = write_rif(many, tmp_path / "big.rif")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        count = sum(1 for _ in read_rif(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 4000
    assert peak < min(3_000_000, size), (peak, size)  # a DOM of this file takes ~5 MB


def test_reason_categories() -> None:
    assert reason_category("unknown coordinate 'p16' at move 7") == "unknown coordinate"
    assert reason_category("repeated point h8 at move 12 (first at move 1)") == "repeated point"
    assert reason_category("duplicate game id 42") == "duplicate game id"
    assert reason_category("malformed XML: not well-formed (invalid token)") == "malformed XML"
    assert reason_category("empty game") == "empty game"
