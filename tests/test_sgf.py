"""SGF reader: syntax, values, encodings, rejections, archives, and the real games in ../shared.

The real material (KGS and other Go games, parser test files of seven projects) is read from
../shared/data at run time; tests that need it skip with a message when it is absent.
"""

from __future__ import annotations

import csv
import io
import random
import tarfile
import time
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from services.games.go.rules import BLACK, WHITE, replay, sgf_point
from services.records.reasons import summarize
from services.records.sgf import (
    MAX_TREE_DEPTH,
    MAX_VALUE_CHARS,
    SgfGame,
    SgfRejected,
    decode_sgf,
    parse_result,
    read_archive,
    read_sgf,
)
from tests.reference_impls import sgf_token_by_token

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
KGS_DIR = SHARED_DATA / "kgs"
OTHER_DIR = SHARED_DATA / "go-other"
EDGE_DIR = SHARED_DATA / "sgf-edge-cases"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real Go records not found at {path} (../shared absent)")
    return path


def games(data: bytes | str, source: str = "t.sgf") -> list[SgfGame | SgfRejected]:
    return list(read_sgf(data, source))


def one(data: bytes | str) -> SgfGame:
    items = games(data)
    assert len(items) == 1 and isinstance(items[0], SgfGame), items
    return items[0]


def rejected(data: bytes | str) -> SgfRejected:
    items = games(data)
    assert len(items) == 1 and isinstance(items[0], SgfRejected), items
    return items[0]


def sgf(name: str, size: int = 19) -> int:
    """SGF letters -> flat index (row counted from the top in SGF, from the bottom here)."""
    return sgf_point(ord(name[0]) - 97, ord(name[1]) - 97, size)


# ---- syntax and values ---------------------------------------------------------------------------
def test_coordinates_turn_sgf_rows_from_the_top_into_rows_from_the_bottom() -> None:
    g = one("(;GM[1]FF[4]SZ[19];B[pd];W[dp];B[aa];W[as])")
    assert g.moves == ((BLACK, 15 * 19 + 15), (WHITE, 3 * 19 + 3), (BLACK, 18 * 19), (WHITE, 0))
    assert g.size == 19 and g.file_format == 4


def test_escapes_soft_line_breaks_and_brackets_inside_comments() -> None:
    text = (
        "(;GM[1]FF[4]SZ[9]PB[Lee \\] Sedol \\\\]PW[Cho\\\nHun]\n"
        "C[a comment with (;B[aa\\]) and \\] and ;W[bb\\] inside]\n"
        ";B[ee]C[kgs [3k\\]: hi (;) ];W[ef])"
    )
    g = one(text)
    assert g.black == "Lee ] Sedol \\" and g.white == "ChoHun"
    assert g.moves == ((BLACK, sgf("ee", 9)), (WHITE, sgf("ef", 9)))
    assert g.variations == 0


def test_crlf_whitespace_between_properties_and_a_root_without_semicolon() -> None:
    g = one(b"(;GM[1]\r\nSZ[9]  \r\n  KM [6.5]\tRE\r\n[B+R]\r\n;\r\nB[ee]\r\n;W\r\n[ef]\r\n)\r\n")
    assert g.size == 9 and g.komi == 6.5 and g.result_raw == "B+R" and len(g.moves) == 2
    g = one("(\r\nSZ[9]PB[x]\r\n;B[ee];W[ef])")  # nihon-kiin style: no ';' before the root
    assert g.size == 9 and g.black == "x" and len(g.moves) == 2


def test_old_long_mixed_case_property_names() -> None:
    g = one("(;FileFormat[1]GaMe[1]SiZe[9]PlayerBlack[hi]KoMi[-1.5]AddBlack[aa][bb]"
            "Black[ff];White[gd];Black[fd])")
    assert g.size == 9 and g.black == "hi" and g.komi == -1.5 and g.file_format == 1
    assert g.setup_black == (sgf("aa", 9), sgf("bb", 9))
    assert [c for c, _ in g.moves] == [BLACK, WHITE, BLACK]


def test_compressed_point_lists_setup_nodes_and_clearing() -> None:
    g = one("(;SZ[19]AB[dr:ds][aa:bb][aa]AW[qq];AE[bb]AB[pd];W[dd])")
    expected_black = {sgf("dr"), sgf("ds"), sgf("aa"), sgf("ab"), sgf("ba"), sgf("pd")}
    assert set(g.setup_black) == expected_black and len(g.setup_black) == 6
    assert g.setup_white == (sgf("qq"),)
    assert g.moves == ((WHITE, sgf("dd")),)


def test_fox_handicap_in_the_second_node_and_komi_times_100() -> None:
    g = one("(;GM[1]FF[4]  SZ[19]  KM[0]HA[2]AP[GNU Go:3.8]AP[foxwq]  ;AB[pd][dp];W[dc];B[ce];)")
    assert g.handicap == 2 and g.setup_black == (sgf("pd"), sgf("dp")) and g.komi == 0.0
    assert [c for c, _ in g.moves] == [WHITE, BLACK]


@pytest.mark.parametrize(
    ("raw", "komi", "normalised"),
    [("6.5", 6.5, False), ("750", 7.5, True), ("375", 3.75, True), ("650", 6.5, True),
     ("0", 0.0, False), ("11", 11.0, False), ("7.500000", 7.5, False), ("-1.5", -1.5, False),
     ("6,5", 6.5, False), ("", None, False), ("?", None, False), ("inf", None, False),
     ("nan", None, False), ("１", None, False), ("6_5", None, False)],
)
def test_komi(raw: str, komi: float | None, normalised: bool) -> None:
    g = one(f"(;SZ[9]KM[{raw}];B[ee])")
    assert (g.komi, g.komi_normalised, g.komi_raw) == (komi, normalised, raw)


def test_passes_and_tt() -> None:
    g = one("(;SZ[19];B[pd];W[];B[tt];W[TT])")
    assert g.moves[1:] == ((WHITE, None), (BLACK, None), (WHITE, None)) and g.passes == 3
    big = one("(;SZ[21];B[tt];W[])")  # on boards over 19, tt is a point
    assert big.moves == ((BLACK, sgf_point(19, 19, 21)), (WHITE, None))


def test_main_line_is_the_first_child_and_variations_are_counted() -> None:
    g = one("(;SZ[9];B[aa](;W[bb];B[cc](;W[dd])(;W[ee]))(;W[ff];B[gg]))")
    assert [p for _, p in g.moves] == [sgf(n, 9) for n in ("aa", "bb", "cc", "dd")]
    assert g.variations == 4  # nested game trees, the SGF notion (as in the manifest)
    root_branch = one("(;SZ[9](;B[aa];W[bb])(;B[cc]))")
    assert [p for _, p in root_branch.moves] == [sgf("aa", 9), sgf("bb", 9)]
    assert root_branch.variations == 2
    # a variation's set-up or bad coordinates do not matter: only the main line is read
    side = one("(;SZ[9];B[aa](;W[bb])(;AE[aa]W[zz]))")
    assert len(side.moves) == 2


def test_several_games_in_one_file_and_a_bad_game_between_good_ones() -> None:
    text = "junk before (;SZ[9];B[aa])\n(;SZ[13];W[zz])\n(;SZ[13];W[bb];B[cc]) trailing junk"
    items = games(text)
    assert [type(i).__name__ for i in items] == ["SgfGame", "SgfRejected", "SgfGame"]
    assert [i.game_index for i in items if isinstance(i, SgfGame)] == [0, 2]
    assert items[1].record_id == "game 1" and "unknown coordinate 'zz'" in items[1].reason
    assert items[2].size == 13 and len(items[2].moves) == 2
    stats = summarize(items)
    assert (stats.read, stats.games, stats.rejected, stats.moves) == (3, 2, 1, 3)


def test_set_up_after_a_move_in_the_main_line_is_rejected() -> None:
    bad = rejected("(;SZ[9];B[aa];AE[aa];W[aa])")
    assert bad.reason == "set-up stones (AE) after move 1"
    assert rejected("(;SZ[9];B[aa];AB[cc]W[bb];B[dd])").reason == \
        "set-up stones (AB) after move 1"


def test_set_up_after_the_last_move_is_ignored() -> None:
    """End-of-game dead-stone markup (Jago, Cgoban: `AE` after the last move, often with
    territory) changes no position a move was played from: the game and its moves stay."""
    g = one("(;SZ[9];B[aa];W[bb];AE[aa]TW[ab][ba]TB[ii])")
    assert g.moves == ((BLACK, sgf("aa", 9)), (WHITE, sgf("bb", 9)))
    assert g.setup_black == g.setup_white == ()
    same_node = one("(;SZ[9]AB[cc];B[aa];W[bb]AE[aa][cc])")
    assert len(same_node.moves) == 2 and same_node.setup_black == (sgf("cc", 9),)
    # moves in a second variation are not the main line; in the first they are
    assert len(one("(;SZ[9];B[aa];W[bb](;AE[aa])(;B[cc]))").moves) == 2
    assert rejected("(;SZ[9];B[aa];W[bb];AE[aa](;B[cc])(;B[dd]))").reason == \
        "set-up stones (AE) after move 2"


@pytest.mark.parametrize(
    ("raw", "winner", "kind"),
    [("B+R", BLACK, "resign"), ("W+Resign", WHITE, "resign"), ("B+T", BLACK, "time"),
     ("W+Time", WHITE, "time"), ("B+time", BLACK, "time"), ("W+F", WHITE, "forfeit"),
     ("B+12.5", BLACK, "score"), ("W+0.5", WHITE, "score"), ("B+", BLACK, "win"),
     ("W", WHITE, "win"), ("0", 0, "draw"), ("Draw", 0, "draw"), ("D+J", 0, "draw"),
     ("Jigo", 0, "draw"), ("Void", None, "void"), ("?", None, "unknown"), ("", None, "unknown"),
     ("B+Illegal", BLACK, "illegal"), ("W+Repetition", WHITE, "other"), ("B+AW", BLACK, "other"),
     ("W+J", WHITE, "other"), ("Black resigns.", WHITE, "resign"),
     ("White resigns.", BLACK, "resign"), ("has adjourned.", None, "unknown"),
     ("B+1.5 ? W+timeout", None, "unknown"), (None, None, "missing")],
)
def test_results(raw: str | None, winner: int | None, kind: str) -> None:
    assert parse_result(raw) == (winner, kind)


# ---- rejections ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b"  \r\n\t ", "empty file"),
        (bytes(range(256)) * 4, "binary content (NUL bytes), not an SGF file"),
        (bytes(range(128, 256)) * 3, "no SGF game tree '(;' found"),
        ("just some text (no game) here", "no SGF game tree '(;' found"),
        ("(;SZ[9];B[aa];W[b", "truncated: property value not closed ']'"),
        ("(;SZ[9];B[aa];W[bb]", "truncated: game tree not closed"),
        ("(;SZ[9];B[aa]%;W[bb])", "malformed: unexpected '%' at offset 13"),
        ("(;SZ[9]B;W[aa])", "property 'B' without a value"),
        ("(;SZ[19];B[zz])", "unknown coordinate 'zz' at move 1 on a 19x19 board"),
        ("(;SZ[9];B[jj])", "unknown coordinate 'jj' at move 1 on a 9x9 board"),
        ("(;SZ[9];B[a])", "unknown coordinate 'a' at move 1 on a 9x9 board"),
        ("(;SZ[9]AB[zz];B[aa])", "unknown set-up point 'zz' on a 9x9 board"),
        ("(;SZ[-3];B[aa])", "unsupported board size SZ[-3] (accepted 2..25)"),
        ("(;SZ[1000];B[aa])", "unsupported board size SZ[1000] (accepted 2..25)"),
        ("(;SZ[abc];B[aa])", "unreadable board size SZ[abc]"),
        ("(;SZ[١٩];B[aa])", "unreadable board size SZ[١٩]"),  # int() reads it as 19
        ("(;SZ[1_9];B[aa])", "unreadable board size SZ[1_9]"),
        ("(;SZ[19:13];B[aa])", "rectangular board SZ[19:13] is not supported"),
        ("(;GM[4]SZ[8];B[aa])", "not a Go game (GM[4])"),
        ("()", "no SGF game tree '(;' found"),
    ],
)
def test_bad_content_is_rejected_with_a_reason_never_raised(data: bytes | str, reason: str) -> None:
    bad = rejected(data)
    assert bad.reason == reason
    assert bad.source == "t.sgf"


def test_a_junk_handicap_is_0_and_the_game_is_kept() -> None:
    """HA[inf] once lost the game: int(float("inf")) raises OverflowError, not ValueError."""
    for raw, handicap in (("inf", 0), ("1e400", 0), ("2", 2), ("2.0", 2), ("２", 0), ("x", 0)):
        assert one(f"(;SZ[9]HA[{raw}];B[ee])").handicap == handicap, raw


def test_huge_values_are_capped() -> None:
    text = "(;SZ[9]C[" + "x" * (MAX_VALUE_CHARS + 10) + "];B[aa])"
    assert rejected(text).reason.startswith("property C value too long")
    side = "(;SZ[9];B[aa](;W[bb])(;C[" + "x" * (MAX_VALUE_CHARS + 10) + "]))"
    assert rejected(side).reason.startswith("property value too long")
    assert one("(;SZ[9]C[" + "x" * 100_000 + "];B[aa])").moves == ((BLACK, sgf("aa", 9)),)


def test_size_absent_or_square_pair_and_files_by_path(tmp_path: Path) -> None:
    assert one("(;B[aa])").size == 19
    assert one("(;SZ[19:19];B[aa])").size == 19
    path = tmp_path / "game (1).sgf"
    path.write_bytes(b"(;SZ[9];B[ee])")
    for data in (path, str(path)):
        items = list(read_sgf(data))
        assert len(items) == 1 and items[0].source == "game (1).sgf"
    gib = tmp_path / "x.gib"
    gib.write_text("\\HS\n\\[GIBOKIND=China\\]\n")
    assert next(read_sgf(gib)).reason == "not an SGF file (.gib)"
    missing = next(read_sgf(tmp_path / "missing.sgf"))
    assert missing.reason.startswith("unreadable file")


def mutated_inputs(count: int, seed: int) -> list[bytes]:
    """Seeded fuzzing material: truncations, structural-character flips, inserted and random
    bytes, on a few hand-made files and the first edge-case files."""
    seeds = [
        "(;GM[1]FF[4]CA[UTF-8]SZ[9]KM[6.5]PB[Lee \\] x]AB[aa:bb];B[ee](;W[ef];B[]C[(;)])(;W[dd]))",
        "(;FileFormat[1]SiZe[9]PlayerBlack[hi];Black[ff];White[gd])(;SZ[13];B[tt];W[mm])",
        "(;CA[GB2312]PB[古力];B[pd];W[dp])",
        "(;SZ[19];B[pd]BL[30.5];W[dp]C[a comment ;B[aa] with (;W[bb]) moves];B[];W[tt]\n;B[qq])",
    ]
    bases = [t.encode("gb2312" if "GB2312" in t else "utf-8") for t in seeds]
    if EDGE_DIR.exists():
        bases += [p.read_bytes() for p in sorted(EDGE_DIR.rglob("*.sgf"))[:12]]
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        data = bytearray(rng.choice(bases))
        op = rng.random()
        if op < 0.3:
            data = data[: rng.randrange(len(data) + 1)]
        elif op < 0.7:
            for _ in range(rng.randrange(1, 5)):
                data[rng.randrange(len(data))] = rng.choice(b"()[];\\\x00\xff\xe4 aZ:BW")
        elif op < 0.9:
            j = rng.randrange(len(data) + 1)
            data[j:j] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20)))
        else:
            data = bytearray(rng.randrange(256) for _ in range(rng.randrange(300)))
        out.append(bytes(data))
    return out


def test_mutated_and_random_bytes_never_raise() -> None:
    for data in mutated_inputs(1500, seed=11):
        for item in read_sgf(data, "fuzz.sgf"):
            if isinstance(item, SgfRejected):
                assert item.reason and not item.reason.startswith("parser error"), item
            else:
                replay(item, keep_states=False)


def test_the_fast_main_line_path_gives_what_token_by_token_parsing_gives() -> None:
    """The fast path (one regex pass per stretch of the main line) against the token-by-token
    parser on every real file in ../shared, the edge cases and 1,500 mutated inputs: the same
    games, moves, fields and rejection reasons."""
    inputs = [(f"fuzz{i}.sgf", data) for i, data in enumerate(mutated_inputs(1500, seed=12))]
    for tarball in (KGS_DIR / "kgs-games-dev.tar.gz", OTHER_DIR / "go-games-other-dev.tar.gz"):
        if tarball.exists():
            with tarfile.open(tarball) as archive:
                inputs += [(m.name, archive.extractfile(m).read())
                           for m in archive if m.isfile()]
    if EDGE_DIR.exists():
        inputs += [(str(p), p.read_bytes()) for p in sorted(EDGE_DIR.rglob("*")) if p.is_file()]
    fast = [list(read_sgf(data, name)) for name, data in inputs]
    with sgf_token_by_token():
        slow = [list(read_sgf(data, name)) for name, data in inputs]
    differ = [name for (name, _), a, b in zip(inputs, fast, slow, strict=True) if a != b]
    assert differ == []
    assert sum(isinstance(g, SgfGame) for items in fast for g in items) > 100


# ---- encodings -----------------------------------------------------------------------------------
def test_declared_charsets_are_decoded_before_tokenising() -> None:
    g = one("(;CA[GB2312]PB[古力]PW[柯洁];B[pd])".encode("gb2312"))
    assert (g.black, g.white, g.encoding, g.encoding_fallback) == ("古力", "柯洁", "gb18030", False)
    # Shift_JIS '表' is 0x95 0x5C: its second byte is a backslash, which must not escape ']'
    g = one("(;CA[Shift_JIS]PB[表]PW[ソ];B[pd])".encode("shift_jis"))
    assert (g.black, g.white, g.encoding) == ("表", "ソ", "cp932")
    g = one("(;CA[EUC-KR]PB[이세돌];B[pd])".encode("euc-kr"))
    assert g.black == "이세돌" and g.encoding == "cp949"
    g = one("\ufeff(;CA[UTF-16]PB[Go Seigen];B[pd])".encode("utf-16-be"))
    assert g.black == "Go Seigen" and g.encoding == "utf-16"
    g = one(b"\xef\xbb\xbf(;CA[UTF-8]PB[\xe5\x90\xb4];B[pd])")
    assert g.black == "吴" and not g.encoding_fallback


def test_a_failing_charset_falls_back_and_says_so() -> None:
    latin = one("(;CA[UTF-8]PW[Jan Hrabánek];B[pd])".encode("latin-1"))
    assert latin.white == "Jan Hrabánek" and latin.encoding == "latin-1"
    assert latin.encoding_fallback
    gbk = one("(;PB[柯洁]C[黑先];B[pd])".encode("gbk"))  # no CA, not UTF-8
    assert gbk.black == "柯洁" and gbk.encoding == "gb18030" and gbk.encoding_fallback
    # UTF-8 cut in the middle of a character, right before ']': kept as UTF-8, tree intact
    cut = one("(;CA[UTF-8]PB[你若有".encode() + "有".encode()[:2] + b"]KM[750];B[pd])")
    assert cut.black == "你若有\ufffd" and cut.komi == 7.5 and cut.encoding == "utf-8/replace"
    text, codec, fallback = decode_sgf("(;PB[井山 裕太]RE[黒中押し勝ち];B[pd])".encode("cp932"))
    assert "井山" in text and codec == "cp932" and fallback  # no CA: kana make it Japanese


# ---- archives ------------------------------------------------------------------------------------
MEMBERS = {
    "games/a.sgf": b"(;SZ[9];B[ee];W[ef])",
    "games/two.SGF": b"(;SZ[9];B[ee])(;SZ[13];W[aa])",
    "games/sub dir/bad.sgf": b"(;SZ[9];B[ee]",
    "games/t.gib": b"\\HS\n",
    "games/empty.sgf": b"",
}


def check_archive(path: Path) -> None:
    items = list(read_archive(path))
    by_source = Counter(i.source for i in items)
    assert by_source == Counter({f"{path.name}:games/a.sgf": 1, f"{path.name}:games/two.SGF": 2,
                                 f"{path.name}:games/sub dir/bad.sgf": 1,
                                 f"{path.name}:games/t.gib": 1, f"{path.name}:games/empty.sgf": 1})
    reasons = {i.source.split(":", 1)[1]: i.reason for i in items if isinstance(i, SgfRejected)}
    assert reasons == {"games/sub dir/bad.sgf": "truncated: game tree not closed",
                       "games/t.gib": "not an SGF file (.gib)", "games/empty.sgf": "empty file"}
    stats = summarize(items)
    assert (stats.read, stats.games, stats.rejected) == (6, 3, 3)


def test_read_archive_zip_and_tar_in_memory(tmp_path: Path) -> None:
    zpath = tmp_path / "games.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("games/", b"")
        for name, data in MEMBERS.items():
            z.writestr(name, data)
    check_archive(zpath)
    for mode, suffix in (("w:bz2", ".tar.bz2"), ("w:gz", ".tar.gz")):
        tpath = tmp_path / f"games{suffix}"
        with tarfile.open(tpath, mode) as t:
            for name, data in MEMBERS.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        check_archive(tpath)
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not an archive")
    assert next(read_archive(broken)).reason.startswith("unreadable archive")


GAME = b"(;GM[1]SZ[9];B[ee];W[dd];B[cc])"


def _tar(path: Path, members: int, mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as t:
        for i in range(members):
            noise = "".join(random.Random(i).choices("abcdefghij", k=2000)).encode()
            data = GAME.replace(b"SZ[9]", b"SZ[9]C[%s]" % noise)  # hardly compressible
            info = tarfile.TarInfo(f"g{i}.sgf")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def _read_all(path: Path) -> list[SgfGame | SgfRejected]:
    return list(read_archive(path))  # raising here is the defect: one source lost whole


def test_a_damaged_archive_keeps_what_came_before_and_says_where_it_broke(
        tmp_path: Path) -> None:
    """Damaged data inside a member raised zlib.error / LZMAError out of the reader; an
    unreadable header after the first ended the archive in silence."""
    for mode, suffix in (("w:gz", ".tar.gz"), ("w:xz", ".tar.xz")):
        path = _tar(tmp_path / f"g{suffix}", 50, mode)
        raw = bytearray(path.read_bytes())
        middle = len(raw) // 2
        raw[middle: middle + 64] = bytes(b ^ 0x5A for b in raw[middle: middle + 64])
        path.write_bytes(bytes(raw))
        records = _read_all(path)
        assert 0 < sum(isinstance(r, SgfGame) for r in records) < 50
        assert isinstance(records[-1], SgfRejected), suffix
        assert records[-1].reason.startswith(("unreadable archive member", "archive damaged"))
    plain = _tar(tmp_path / "three.tar", 3, "w")
    raw = bytearray(plain.read_bytes())
    second = raw.index(b"g1.sgf")
    raw[second + 148: second + 156] = b"9999999\0"  # the second header's checksum
    plain.write_bytes(bytes(raw))
    records = _read_all(plain)
    assert [type(r).__name__ for r in records] == ["SgfGame", "SgfRejected"]
    assert "unreadable member header" in records[1].reason
    assert [type(r) for r in _read_all(_tar(tmp_path / "fine.tar", 3, "w"))] == [SgfGame] * 3


def test_zip_members_the_reader_cannot_open_are_rejected(tmp_path: Path) -> None:
    """An encrypted member raised RuntimeError, an unknown method NotImplementedError."""
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.sgf", GAME)
        z.writestr("b.sgf", GAME)
    raw = path.read_bytes()
    for patched, reason in ((_zip_flag(raw, 0x1), "encrypted"),
                            (_zip_method(raw, 99), "compression method")):
        bad = tmp_path / f"bad-{reason.split()[0]}.zip"
        bad.write_bytes(patched)
        records = _read_all(bad)
        assert isinstance(records[0], SgfRejected) and reason in records[0].reason, records
        assert isinstance(records[1], SgfGame)  # the next member is read as before


def _zip_flag(raw: bytes, flag: int) -> bytes:
    """The first member's general-purpose flag OR `flag`, in its local and central headers."""
    out = bytearray(raw)
    for signature, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = out.index(signature)
        out[start + at] |= flag
    return bytes(out)


def _zip_method(raw: bytes, method: int) -> bytes:
    out = bytearray(raw)
    for signature, at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        start = out.index(signature)
        out[start + at: start + at + 2] = method.to_bytes(2, "little")
    return bytes(out)


def test_a_zip_member_that_understates_its_size_is_read_only_up_to_the_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The header said 100 bytes, the data inflate to 200 MB: `ZipFile.read` inflated them
    all at once (GBs from a 1 MB zip); the reader now reads at most the cap."""
    import tracemalloc

    from services.records import sgf as sgf_module

    monkeypatch.setattr(sgf_module, "MAX_FILE_BYTES", 1 << 20)
    path = tmp_path / "liar.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z, z.open("bomb.sgf", "w") as m:
        for _ in range(200):
            m.write(b" " * (1 << 20))
    raw = bytearray(path.read_bytes())
    for signature, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = raw.index(signature)
        raw[start + at: start + at + 4] = (100).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    tracemalloc.start()
    try:
        records = _read_all(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(records) == 1 and isinstance(records[0], SgfRejected)
    assert peak < 32 << 20, peak


def test_only_text_codecs_are_believed() -> None:
    """CA[hex] raised LookupError out of the reader; CA[utf-7] let a lone surrogate through,
    which the Parquet writer then refused, failing the whole source."""
    for charset in ("hex", "base64", "zlib", "rot13"):
        assert one(f"(;GM[1]CA[{charset}]SZ[9];B[ee])".encode()).moves  # bytes: decoded
    game = one(b"(;GM[1]CA[utf-7]SZ[9]RU[+2AA-]PB[Lee];B[ee])")
    game.rules.encode("utf-8")  # no lone surrogate left
    assert game.black == "Lee"


def test_utf16_without_a_byte_order_mark_may_start_with_blanks() -> None:
    """Only a file starting with '(' was recognised; one starting with a newline was
    quarantined as "binary content (NUL bytes)"."""
    for codec in ("utf-16-le", "utf-16-be"):
        for text in ("(;GM[1]SZ[9]PB[李];B[ee])", "\r\n (;GM[1]SZ[9]PB[李];B[ee])"):
            game = one(text.encode(codec))
            assert (game.encoding, game.black, len(game.moves)) == (codec, "李", 1), text


def test_variations_nested_past_the_cap_are_refused() -> None:
    deep = "(;GM[1]SZ[9]" + "(;" * (MAX_TREE_DEPTH + 1) + "B[aa]" + ")" * (MAX_TREE_DEPTH + 2)
    assert rejected(deep).reason == f"variations nested deeper than {MAX_TREE_DEPTH}"
    per_move = "(;GM[1]SZ[9]" + "(;B[aa];W[bb]" * 300 + ")" * 301  # one variation per move
    assert len(one(per_move).moves) == 600  # the main line: the first child at every branch


# ---- the parser test files of other projects -----------------------------------------------------
EDGE_CASES = {
    "SabakiHQ__Sabaki/test/gib/euc-kr.gib": "rejected",
    "SabakiHQ__Sabaki/test/gib/gb2312.gib": "rejected",
    "SabakiHQ__Sabaki/test/gib/utf8.gib": "rejected",
    "SabakiHQ__Sabaki/test/ngf/even.ngf": "rejected",
    "SabakiHQ__Sabaki/test/ngf/gb2312.ngf": "rejected",
    "SabakiHQ__Sabaki/test/resources/engine-transcripts/sgf/corner-9.sgf": "ok",
    "SabakiHQ__Sabaki/test/resources/engine-transcripts/sgf/empty-19.sgf": "ok",
    "SabakiHQ__Sabaki/test/resources/engine-transcripts/sgf/endgame-9.sgf": "ok",
    "SabakiHQ__Sabaki/test/resources/engine-transcripts/sgf/opening-19.sgf": "ok",
    "SabakiHQ__Sabaki/test/sgf/beginner_game.sgf": "ok",
    "SabakiHQ__Sabaki/test/sgf/blank_game.sgf": "ok",
    "SabakiHQ__Sabaki/test/sgf/pro_game.sgf": "ok",
    "SabakiHQ__Sabaki/test/sgf/shodan_game.sgf": "ok",
    "SabakiHQ__Sabaki/test/ugf/amateur.ugf": "rejected",
    "SabakiHQ__Sabaki/test/ugf/review.ugi": "rejected",
    "SabakiHQ__sgf/tests/sgf/chinese.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/complex.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/encoding/nihon-kiin.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/fox_go_server.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/fox_go_server_handicap.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/fox_go_server_japanese.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/fox_go_server_komi.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/fox_go_server_nokomi.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/japanese.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/japanese_bad.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/korean.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/no-ca.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/non_fox_game.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/utf16le.sgf": "ok",
    "SabakiHQ__sgf/tests/sgf/utf8bom.sgf": "ok",
    "lightvector__KataGo/cpp/tests/data/cornermoves.sgf": "ok",
    "lightvector__KataGo/cpp/tests/data/foxlike.sgf": "ok",
    "lightvector__KataGo/cpp/tests/data/humanslbigdiff.sgf": "ok",
    "lightvector__KataGo/cpp/tests/data/sampletest/sampletest7x7.sgf": "ok",
    "lightvector__KataGo/cpp/tests/data/sampletest/sampletest9x9.sgf": "ok",
    "lightvector__KataGo/cpp/tests/data/sampletest2/messy.sgf": "ok",
    "rooklift__sgf/test_kifu/2016-03-10a.sgf": "ok",
    "sanderland__katrain/tests/data/LS vs AG - G4 - English.sgf": "ok",
    "sanderland__katrain/tests/data/fox sgf error.sgf": "ok",
    "sanderland__katrain/tests/data/fox sgf works.sgf": "ok",
    "sanderland__katrain/tests/data/handicap2.ngf": "rejected",
    "sanderland__katrain/tests/data/ogs.sgf": "ok",
    "sanderland__katrain/tests/data/panda1.sgf": "ok",
    "sanderland__katrain/tests/data/test.gib": "rejected",
    "sanderland__katrain/tests/data/xmgt97.sgf": "ok",
    "tensorflow__minigo/tests/example_game.sgf": "ok",
}


@pytest.fixture(scope="module")
def edge_cases() -> dict[str, list[SgfGame | SgfRejected]]:
    need(EDGE_DIR)
    return {str(p.relative_to(EDGE_DIR)): list(read_sgf(p))
            for p in sorted(EDGE_DIR.rglob("*")) if p.is_file()}


def test_every_edge_case_file_parses_or_is_rejected_with_a_reason(edge_cases) -> None:
    assert set(edge_cases) == set(EDGE_CASES), "the edge-case folder changed"
    for name, items in edge_cases.items():
        assert items, name
        outcome = "ok" if all(isinstance(i, SgfGame) for i in items) else "rejected"
        assert outcome == EDGE_CASES[name], (name, items)
        for item in items:
            if isinstance(item, SgfRejected):
                suffix = Path(name).suffix
                assert item.reason == f"not an SGF file ({suffix})", (name, item)
            else:
                assert replay(item).error is None, name


def edge(edge_cases, name: str) -> SgfGame:
    items = edge_cases[name]
    assert len(items) == 1 and isinstance(items[0], SgfGame)
    return items[0]


def test_edge_case_encodings(edge_cases) -> None:
    base = "SabakiHQ__sgf/tests/sgf/"
    expected = {
        "chinese.sgf": ("古力", "柯洁", "gb18030", False),
        "japanese.sgf": ("井山 裕太", "山下 敬吾", "cp932", False),
        "korean.sgf": ("이세돌", "박정환", "cp949", False),
        "utf16le.sgf": ("Kitani Minoru", "Go Seigen", "utf-16", False),
        "utf8bom.sgf": ("Kitani Minoru", "Go Seigen", "utf-8", False),
        "encoding/nihon-kiin.sgf": ("申眞ソ", "党毅飛", "cp932", True),  # no CA, Shift_JIS
        "japanese_bad.sgf": ("\ufffd\ufffd\ufffdR \ufffdT\ufffd\ufffd", "\ufffdR\ufffd\ufffd "
                             "\ufffdh\ufffd\ufffd", "utf-8", True),  # says MS_KANJI, is UTF-8
    }
    for name, (black, white, codec, fallback) in expected.items():
        g = edge(edge_cases, base + name)
        assert (g.black, g.white, g.encoding, g.encoding_fallback) == \
            (black, white, codec, fallback), name
    utf16, utf8 = edge(edge_cases, base + "utf16le.sgf"), edge(edge_cases, base + "utf8bom.sgf")
    assert utf16.moves == utf8.moves and len(utf8.moves) == 164
    no_ca = edge(edge_cases, base + "no-ca.sgf")
    assert no_ca.encoding == "gb18030" and no_ca.encoding_fallback
    assert edge(edge_cases, base + "chinese.sgf").moves == ((BLACK, sgf("pd")), (WHITE, sgf("dp")))


def test_edge_case_contents(edge_cases) -> None:
    fox = edge(edge_cases, "SabakiHQ__sgf/tests/sgf/fox_go_server_komi.sgf")
    assert (fox.komi, fox.komi_raw, fox.komi_normalised) == (3.75, "375", True)
    assert (fox.winner, fox.result_kind) == (WHITE, "score")
    hcp = edge(edge_cases, "SabakiHQ__sgf/tests/sgf/fox_go_server_handicap.sgf")
    assert hcp.handicap == 2 and len(hcp.setup_black) == 2 and hcp.moves[0][0] == WHITE
    assert edge(edge_cases, "SabakiHQ__sgf/tests/sgf/non_fox_game.sgf").komi == 11.0
    foxlike = edge(edge_cases, "lightvector__KataGo/cpp/tests/data/foxlike.sgf")
    assert (foxlike.komi, foxlike.winner, foxlike.result_kind) == (3.25, 0, "draw")
    xm = edge(edge_cases, "sanderland__katrain/tests/data/xmgt97.sgf")
    assert (xm.size, xm.komi, xm.black, xm.white, len(xm.moves)) == (9, -1.5, "hi", "ka", 60)
    panda = edge(edge_cases, "sanderland__katrain/tests/data/panda1.sgf")
    assert panda.komi == 0.5 and panda.handicap == 2 and panda.black_rank == "12k"
    messy = edge(edge_cases, "lightvector__KataGo/cpp/tests/data/sampletest2/messy.sgf")
    assert messy.size == 9 and len(messy.moves) == 5 and messy.variations == 8
    minigo = edge(edge_cases, "tensorflow__minigo/tests/example_game.sgf")
    assert (len(minigo.moves), minigo.variations, minigo.komi) == (37, 6, 0.0)
    alphago = edge(edge_cases, "rooklift__sgf/test_kifu/2016-03-10a.sgf")
    assert len(alphago.moves) == 211 and alphago.variations > 1000
    assert alphago.file_format == 3 and alphago.black == "AlphaGo"
    blank = edge(edge_cases, "SabakiHQ__Sabaki/test/sgf/blank_game.sgf")
    assert blank.moves == () and blank.result_kind == "missing"
    ogs = edge(edge_cases, "sanderland__katrain/tests/data/ogs.sgf")
    assert len(ogs.moves) == 113 and ogs.result_kind == "unknown"


# ---- the real KGS and other Go games -------------------------------------------------------------
def manifest(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return {row["archive_path"]: row for row in csv.DictReader(f, delimiter="\t")}


class Corpus:
    def __init__(self, tarball: Path, manifest_path: Path) -> None:
        start = time.perf_counter()
        self.items = list(read_archive(need(tarball)))
        self.seconds = time.perf_counter() - start
        self.rows = manifest(manifest_path)
        self.prefix = tarball.name + ":"

    def member(self, item: SgfGame | SgfRejected) -> str:
        assert item.source.startswith(self.prefix)
        return item.source[len(self.prefix):]

    def first_games(self) -> list[tuple[SgfGame, dict[str, str]]]:
        return [(g, self.rows[self.member(g)]) for g in self.items
                if isinstance(g, SgfGame) and g.game_index == 0]


@pytest.fixture(scope="module")
def kgs() -> Corpus:
    return Corpus(KGS_DIR / "kgs-games-dev.tar.gz", KGS_DIR / "MANIFEST-kgs-dev.tsv")


@pytest.fixture(scope="module")
def other() -> Corpus:
    return Corpus(OTHER_DIR / "go-games-other-dev.tar.gz",
                  OTHER_DIR / "MANIFEST-go-other-dev.tsv")


def check_corpus(corpus: Corpus) -> tuple[list[str], list[SgfRejected]]:
    """Reconcile with the manifest; return the files whose move count differs, and rejects."""
    stats = summarize(corpus.items)
    assert stats.read == stats.games + stats.rejected
    members = Counter(corpus.member(i) for i in corpus.items)
    assert set(members) == set(corpus.rows)  # every file gave at least one record, no others
    rejects = [i for i in corpus.items if isinstance(i, SgfRejected)]
    mismatched = []
    for g, row in corpus.first_games():
        name = corpus.member(g)
        assert g.size == int((row["SZ"] or "19").split(":")[0]), name
        assert g.handicap == int(row["HA"] or 0), name
        assert g.komi_raw == row["KM"], name
        assert g.result_raw == row["RE"], name
        assert str(g.variations) == row["variations"], name
        if row["variations"] == "0":
            assert str(g.passes) == row["passes"], name
        assert len(g.setup_black) >= int(row["AB"]) and len(g.setup_white) >= int(row["AW"])
        if row["KM"] in ("750", "375", "650", "550"):
            assert g.komi_normalised and g.komi == int(row["KM"]) / 100
        if str(len(g.moves)) != row["nmoves"]:
            mismatched.append(name)
            # only where the tree branches: the manifest's simple scanner is approximate there
            assert row["variations"] != "0", name
    return mismatched, rejects


def test_kgs_tarball_reads_and_reconciles_with_its_manifest(kgs: Corpus) -> None:
    mismatched, rejects = check_corpus(kgs)
    stats = summarize(kgs.items)
    print(f"\nKGS: {stats.read} records from {len(kgs.rows)} files, {stats.games} games, "
          f"{stats.moves} moves, {stats.games / kgs.seconds:,.0f} games/s")
    assert rejects == [] and stats.games == 96  # Hellyta-Fuego.sgf holds two games
    two = [g for g in kgs.items if g.source.endswith("Hellyta-Fuego.sgf")]
    assert [g.game_index for g in two] == [0, 1]
    assert sorted(mismatched) == [
        "runningskull__gnugo/regression/games/kgs/malitourne-yagr.sgf",
        "svn2github__fuego/regression/sgf/games/2008/KGS/7/26/MatroidX-5.sgf",
        "svn2github__fuego/regression/sgf/games/2012/Blubbel-AyaBot4-2.sgf",
    ]
    assert all(g.encoding == "utf-8" and not g.encoding_fallback for g in kgs.items)


def test_kgs_loose_files_equal_their_tarball_copies(kgs: Corpus) -> None:
    loose = sorted(need(KGS_DIR / "loose").glob("*.sgf"))
    assert len(loose) == 7
    by_member = {kgs.member(g): g for g in kgs.items
                 if isinstance(g, SgfGame) and g.game_index == 0}
    for path in loose:
        game = next(read_sgf(path))  # Hellyta-Fuego.sgf holds two games; compare the first
        owner, repo, *rest = path.name.split("__")
        twin = by_member[f"{owner}__{repo}/" + "/".join(rest)]
        assert game.moves == twin.moves and game.komi == twin.komi and game.black == twin.black


def test_other_go_tarball_reads_and_reconciles_with_its_manifest(other: Corpus) -> None:
    mismatched, rejects = check_corpus(other)
    stats = summarize(other.items)
    print(f"\ngo-other: {stats.read} records, {stats.games} games, {stats.rejected} rejected, "
          f"{stats.moves} moves, {stats.games / other.seconds:,.0f} games/s, "
          f"{len(mismatched)} move-count mismatches (all in files with variations)")
    assert stats.read == len(other.rows) == 4743
    # set-up between moves rejects a game; after the last move (Jago's end-of-game AE, in
    # ab1_fuseki and arb/game01-02) it does not
    assert {other.member(r): r.reason for r in rejects} == {
        "runningskull__gnugo/regression/games/STS-RV/MiscProblems/_semeai_C9_018.sgf":
            "set-up stones (AW) after move 61",
    }
    kept = {other.member(g): len(g.moves) for g in other.items if isinstance(g, SgfGame)}
    assert kept["runningskull__gnugo/regression/games/ab1_fuseki.sgf"] == 218
    assert kept["runningskull__gnugo/regression/games/arb/game01.sgf"] == 68
    assert kept["runningskull__gnugo/regression/games/arb/game02.sgf"] == 81
    assert len(mismatched) <= 15  # of 4,739 games; all in branching files (checked above)
    assert Counter(g.size for g in other.items if isinstance(g, SgfGame)) == Counter(
        {19: 4410, 9: 221, 13: 106, 11: 3, 6: 1, 4: 1})


def test_other_go_games_replay_legally(other: Corpus) -> None:
    start = time.perf_counter()
    errors = {}
    moves = 0
    parsed = [g for g in other.items if isinstance(g, SgfGame)]
    for g in parsed:
        r = replay(g, keep_states=False)
        moves += r.played
        if r.error:
            errors[other.member(g)] = r.error
    seconds = time.perf_counter() - start
    print(f"\ngo-other replay: {len(parsed) - len(errors)}/{len(parsed)} games legal, "
          f"{moves:,} moves, {moves / seconds:,.0f} moves/s")
    assert errors == {
        "pasky__pachi/t-regress/fixed/first_line_connect3/game.sgf":
            "move 225 (B T6): occupied: T6",
        "yenw__computer-go-dataset/AI/Sweeper/2016.09.04 扫地僧2016 vs syknyk (43772425).SGF":
            "move 242 (W G16): occupied: G16",  # White replays its own stone; RE[B+0.0]
    }
