"""Fuzz the record readers and the request validation: count inputs, save every crash.

    .venv/bin/python benchmarks/fuzz.py --inputs 1000000 [--targets sgf,rif,validation]
        [--crashes artifacts/fuzz-crashes] [--batch 5000] [--seed 0] [--doc docs/reliability.md]

Targets (the inputs are split evenly between the chosen ones):

* ``sgf``: `services.records.sgf.read_sgf` on bytes, consumed to the end. Its contract is that
  it never raises on bad content (a bad game or file is an `SgfRejected`), so *any* exception
  is a crash.
* ``rif``: `services.records.rif.read_rif` on bytes, consumed to the end; the same contract
  (`Rejected` records, never an exception), so any exception is a crash.
* ``validation``: `services.search.validation` on Predict / GenMove / Analyze requests built
  from fuzzed fields (games, rules, sizes, komi with NaN/Inf, moves, set-up stones, budgets,
  batches) and on requests parsed from fuzzed bytes; a valid request is then turned into what
  the servicer feeds the network (`mcts.network_input`, the legal mask). The documented errors
  are `InvalidRequest` (and its subclass `RequestTooLarge`), and `DecodeError` for bytes that
  are not a request; anything else is a crash (the service would answer UNKNOWN).

Inputs come from hypothesis (pinned in requirements.txt): byte-level mutations (flip, insert,
delete, duplicate, truncate, splice) of valid seed files (SGF texts in several encodings, with
set-up, escapes and variations, and the SGF edge-case files under ``../shared/data`` when
present; RIF files written by `write_rif`), grammar-built files, and raw bytes. Hypothesis runs
in batches of ``--batch`` inputs with a seed each (``--seed`` + batch number), so a run is
reproducible; a crash is caught in the test body (hypothesis does not stop or shrink) and its
input is written to ``<crashes>/<target>/<sha1>.bin`` with the traceback next to it
(``.txt``), one file per distinct input. An input that takes over ``--slow-s`` seconds is
timed again and, when the second run is slow too, saved under ``slow/`` (on a shared machine
a single slow run is often a stall of the machine, not of the code). Progress goes to the log
every batch; the end prints a table and, with ``--doc``, rewrites the fuzz section of
docs/reliability.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from benchmarks.doc_sections import write_doc_section  # noqa: E402
from benchmarks.host import cpu_model  # noqa: E402
from services import logs  # noqa: E402

logger = logging.getLogger("fuzz")

TARGET_NAMES = ("sgf", "rif", "validation")
SHARED_SGF = ROOT.parent / "shared" / "data" / "sgf-edge-cases"
MAX_SEED_BYTES = 16_384
DOC_BEGIN = "<!-- fuzz:begin -->"
DOC_END = "<!-- fuzz:end -->"
SLOW_NOTE = "one over --slow-s: the faster of two runs"


# ----------------------------------------------------------------------------- mutations
# Inputs are built by plain Python from a seed that hypothesis draws: drawing one integer costs
# hypothesis ~0.25 ms, while composite strategies (recursive grammars, lists of tuples) cost
# ~10 ms an input, 100x the readers' own time; a million inputs would take a day.
OPS = ("flip", "insert", "delete", "dup", "truncate", "splice", "byte")
SPECIAL_BYTES = b"()[];\\:\n\r\t \x00\xff\xfe\xef\xbb\xbf<>&\"'/=%"
TOKENS = (b"(;", b")", b"(", b";", b"[", b"]", b"\\", b"\\]", b"<game", b"</move>", b"&#0;",
          b"<![CDATA[", b"]]>", b"&amp;", b"\xc3", b"\xff\xfe", b"\r\n")


def mutate(data: bytes, rng: random.Random, n_ops: int | None = None) -> bytes:
    """Apply 1-6 random byte-level edits (flip a bit, insert, delete, duplicate, truncate,
    splice from elsewhere in the data, set a special byte) to `data`."""
    buf = bytearray(data)
    for _ in range(n_ops if n_ops is not None else rng.randint(1, 6)):
        kind = rng.choice(OPS)
        n = len(buf)
        at = rng.randint(0, n)
        if kind == "flip" and n:
            buf[at % n] ^= 1 << rng.randrange(8)
        elif kind == "insert":
            buf[at:at] = (rng.choice(TOKENS) if rng.random() < 0.6
                          else rng.randbytes(rng.randint(1, 6)))
        elif kind == "delete":
            del buf[at:at + rng.randint(1, 64)]
        elif kind == "dup" and n:
            buf[at:at] = bytes(buf[at:at + rng.randint(1, 256)])
        elif kind == "truncate":
            del buf[at:]
        elif kind == "splice" and n:
            src = rng.randrange(n)
            piece = bytes(buf[src:src + rng.randint(1, 128)])
            buf[at:at + len(piece)] = piece
        elif kind == "byte" and n:
            buf[at % n] = rng.choice(SPECIAL_BYTES)
    return bytes(buf)


def _mutant(seeds: list[bytes], rng: random.Random) -> bytes:
    data = rng.choice(seeds)
    if rng.random() < 0.15:  # cross two seeds
        other = rng.choice(seeds)
        data = data[:rng.randint(0, len(data))] + other[rng.randint(0, len(other)):]
    return mutate(data, rng)


# ----------------------------------------------------------------------------- SGF inputs
SGF_SEEDS_TEXT = [
    "(;FF[4]GM[1]SZ[19]KM[6.5]RE[B+R]PB[black]PW[white];B[pd];W[dp];B[pp];W[dd];B[];W[tt])",
    "(;GM[1]FF[4]SZ[9]AB[cc][gg]AW[cg:dh]AE[aa]PL[W];W[ee];B[ef](;W[ff])(;W[fg];B[gf]))",
    "(;FF[3]GaMe[1]SiZe[13]KoMi[750]AddBlack[dd][jj]RE[W+12.5]C[a \\] b \\\\ c\\\nd]"
    ";B[gg];W[gh];B[hh])(;SZ[19];B[aa])",
    "(;FF[4]CA[UTF-8]SZ[19]PB[李昌鎬]PW[曺薰鉉]RE[W+0.5];B[qd];W[dc];B[pq])",
    "(;GM[1]SZ[19]HA[2]AB[pd][dp];W[dd];B[pp];W[jj]\r\n;B[kk]\r;W[ll])",
    "(;GM[1]SZ[25]KM[0];B[yy];W[aa];B[ab:bc])",
    "(;GM[1]SZ[19]RE[?]DT[2020-01-01];B[pd]C[comment (with) [brackets\\]];W[])",
    "(;GM[2]SZ[15];B[hh])",
    "(;SZ[19:13];B[aa])",
    "(;GM[1]SZ[19];B[pd];AB[aa];W[dd])",
]


def sgf_seeds() -> list[bytes]:
    """Valid and edge-case SGF bytes: the texts above in several encodings, and the SGF
    edge-case files of ../shared when present (up to MAX_SEED_BYTES each)."""
    seeds = [text.encode("utf-8") for text in SGF_SEEDS_TEXT]
    seeds.append(SGF_SEEDS_TEXT[3].replace("UTF-8", "GB2312").encode("gb18030"))
    seeds.append(SGF_SEEDS_TEXT[3].replace("CA[UTF-8]", "").encode("utf-16"))
    seeds.append("(;CA[Shift_JIS]PB[本因坊秀策]SZ[19];B[qd])".encode("cp932"))
    seeds.append(b"\xef\xbb\xbf" + SGF_SEEDS_TEXT[0].encode())
    seeds.append(b"(;CA[latin-1]PB[Jos\xe9]SZ[19];B[aa])")
    if SHARED_SGF.is_dir():
        for path in sorted(SHARED_SGF.rglob("*")):
            if path.is_file() and path.stat().st_size <= MAX_SEED_BYTES:
                seeds.append(path.read_bytes())
    return seeds


SGF_PROPS = ("B", "W", "AB", "AW", "AE", "SZ", "KM", "RE", "HA", "CA", "GM", "FF", "PL", "C",
             "PB", "DT", "TB", "LB", "MN", "Sz", "AddBlack", "b", "")
SGF_VALUES = ("", "aa", "ss", "tt", "pd", "zz", "19", "9", "25", "0", "1", "-1", "7.5", "750",
              "B+R", "W+0.5", "?", "Void", "B+", "UTF-8", "GB2312", "Shift_JIS", "aa:cc",
              "cc:aa", "a", "1e309", "nan", "9:13", "\\]", "\\", "é", "\u4e00", "\x00", "26")
ENCODINGS = ("utf-8", "gb18030", "utf-16", "latin-1", "cp932")


def _sgf_tree(rng: random.Random, depth: int) -> str:
    nodes = []
    for _ in range(rng.randint(1, 8)):
        props = []
        for _ in range(rng.randint(0, 4)):
            values = "".join(f"[{rng.choice(SGF_VALUES)}]" for _ in range(rng.randint(1, 3)))
            props.append(rng.choice(SGF_PROPS) + values)
        nodes.append(";" + "".join(props))
    children = [_sgf_tree(rng, depth - 1) for _ in range(rng.randint(0, 3) if depth else 0)]
    return "(" + "".join(nodes) + "".join(children) + ")"


def sgf_input(rng: random.Random, seeds: list[bytes]) -> bytes:
    """A mutated seed (60%), a grammar-built collection (30%, sometimes mutated too), or
    random bytes (10%)."""
    r = rng.random()
    if r < 0.6:
        return _mutant(seeds, rng)
    if r < 0.9:
        text = "".join(_sgf_tree(rng, 2) for _ in range(rng.randint(1, 3)))
        data = text.encode(rng.choice(ENCODINGS), errors="replace")
        return mutate(data, rng) if rng.random() < 0.3 else data
    return rng.randbytes(rng.randint(0, 300))


def run_sgf(data: bytes) -> None:
    from services.records.reasons import summarize
    from services.records.sgf import read_sgf

    summarize(list(read_sgf(data, source="fuzz.sgf")))


# ----------------------------------------------------------------------------- RIF inputs
def rif_seeds() -> list[bytes]:
    """Small RIF files written by `write_rif` (games of the shipped sample, with tables and
    wrapped move lines), plus hand-made edge cases."""
    import tempfile

    from services.records.rif import read_rif
    from services.records.rif_writer import write_rif

    games = []
    for item in read_rif(ROOT / "data" / "sample" / "selfplay.rif"):
        games.append(item)
        if len(games) >= 6:
            break
    seeds: list[bytes] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, chunk in enumerate((games[:1], games[1:3], games[3:6])):
            path = Path(tmp) / f"seed{i}.rif"
            write_rif(chunk, path, date="2024-01-01", moves_per_line=7 * i)
            seeds.append(path.read_bytes())
    head = b'<?xml version="1.0" encoding="utf-8"?>\n<database version="1.0">'
    seeds += [
        head + b'<games><game id="1" bresult="0.5"><move>h8 h9 i8</move></game></games>'
               b"</database>",
        head + b'<players><player id="1" name="A" surname="B"/></players><games>'
               b'<game id="2" black="1" white="9" bresult="x"><move>h8 h8</move></game>'
               b'<game id="2"><move>z99</move></game><game><move/></game></games></database>',
        b'<?xml version="1.0" encoding="windows-1252"?><database><games><game id="3" '
        b'info="\xe9"><move>a1 o15</move></game></games></database>',
        b'<?xml version="1.0" encoding="nope"?><database/>',
        b'<?xml version="1.0" encoding="utf-16"?><database/>',
        b'<!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]><database><games>'
        b'<game id="4" info="&b;"><move>h8</move></game></games></database>',
    ]
    return seeds


RIF_TAGS = ("database", "games", "game", "move", "players", "player", "rules", "rule",
            "tournaments", "tournament", "openings", "opening")
RIF_ATTRS = ("id", "bresult", "black", "white", "rule", "opening", "tournament", "name",
             "surname", "abbr", "info", "btime", "wtime", "alt", "swap")
RIF_VALUES = ("1", "0", "0.5", "1.0", "nan", "inf", "-1", "", "x", "h8", "a1 o15", "é", "&amp;",
              "99999999999999999999", "1e309", " 2 ")
RIF_MOVES = ("h8", "h9", "i8", "a1", "o15", "p16", "a0", "H8", "x", "h08", "o1", "a15")


def _rif_element(rng: random.Random, depth: int) -> str:
    tag = rng.choice(RIF_TAGS)
    attrs = "".join(f' {k}="{rng.choice(RIF_VALUES)}"'
                    for k in {rng.choice(RIF_ATTRS) for _ in range(rng.randint(0, 4))})
    if depth and rng.random() < 0.6:
        inner = "".join(_rif_element(rng, depth - 1) for _ in range(rng.randint(0, 4)))
    else:
        inner = " ".join(rng.choice(RIF_MOVES) for _ in range(rng.randint(0, 12)))
    return f"<{tag}{attrs}>{inner}</{tag}>"


def rif_input(rng: random.Random, seeds: list[bytes]) -> bytes:
    """A mutated seed (60%), a grammar-built document (30%), or random bytes (10%)."""
    r = rng.random()
    if r < 0.6:
        return _mutant(seeds, rng)
    if r < 0.9:
        text = '<?xml version="1.0" encoding="utf-8"?>\n' + _rif_element(rng, 3)
        data = text.encode()
        return mutate(data, rng) if rng.random() < 0.3 else data
    return rng.randbytes(rng.randint(0, 300))


def run_rif(data: bytes) -> None:
    from services.records.reasons import summarize
    from services.records.rif import read_rif

    summarize(list(read_rif(data, source="fuzz.rif")))


# ----------------------------------------------------------------------------- requests
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
EDGE_INTS = (0, 1, -1, 2, 5, 8, 9, 15, 19, 20, 25, 81, 225, 226, 361, 362, 363, 256, 257,
             1000, 100_000, 100_001, 60_000, 60_001, INT32_MIN, INT32_MAX)
EDGE_FLOATS = (7.5, 0.0, -0.0, 361.0, 361.5, -362.0, math.nan, math.inf, -math.inf, 1e38,
               -1e-45, 3.4028234663852886e38)


def _points(rng: random.Random, size: int) -> list[tuple[int, int, bool]]:
    """Mostly distinct on-board points (so validation goes deep: replay, captures, fives),
    with now and then an off-board point, a repeat or a pass."""
    n = rng.choice((0, 1, 2, 5, 10, 30, 60, 120))
    side = size if 2 <= size <= 25 else 15
    cells = rng.sample(range(side * side), min(n, side * side))
    out = [(c % side, c // side, False) for c in cells]
    for _ in range(rng.choice((0, 0, 0, 1, 2))):
        kind = rng.random()
        at = rng.randint(0, len(out))
        if kind < 0.4:
            out.insert(at, (_int(rng, -3, 30, 0.3), _int(rng, -3, 30, 0.3), False))
        elif kind < 0.7 and out:
            out.insert(at, rng.choice(out))
        else:
            out.insert(at, (rng.randint(-1, 20), rng.randint(-1, 20), True))
    return out


def _int(rng: random.Random, low: int, high: int, odd: float = 0.1) -> int:
    """Mostly in [low, high] (valid values), with probability `odd` an edge value."""
    return rng.choice(EDGE_INTS) if rng.random() < odd else rng.randint(low, high)


def _position_fields(rng: random.Random) -> dict[str, Any]:
    """Fields of a Position, each valid for its game about 90% of the time, so that about
    half the requests pass validation and the replay (captures, ko, fives) runs."""
    odd = rng.random() < 0.1
    game = rng.choice((-1, 3, 4)) if odd else rng.choice((0, 1, 2, 2))
    go = game == 2
    if rng.random() < 0.9:
        size = rng.choice((0, 9, 13, 19, rng.randint(9, 19))) if go else rng.choice((0, 15))
    else:
        size = _int(rng, -3, 30, 0.5)
    if rng.random() < 0.9:
        rule = rng.choice((0, 4)) if go else rng.randint(0, 3)
    else:
        rule = rng.randint(-2, 7)
    fields: dict[str, Any] = {
        "game": game,
        "rule": rule,
        "board_size": size,
        "moves": _points(rng, size or (19 if go else 15)),
        "setup_black": _points(rng, size) if rng.random() < 0.15 else [],
        "setup_white": _points(rng, size) if rng.random() < 0.15 else [],
        "first_to_move": (rng.randint(0, 2) if go else rng.randint(0, 1))
        if rng.random() < 0.95 else rng.randint(-2, 5),
    }
    if rng.random() < (0.6 if go else 0.05):
        fields["komi"] = rng.choice(EDGE_FLOATS) if rng.random() < 0.3 else rng.uniform(-50, 50)
    return fields


def request_fields(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(("predict", "genmove", "analyze"))
    out: dict[str, Any] = {"kind": kind,
                           "position": _position_fields(rng) if rng.random() < 0.95 else None}
    if kind == "predict":
        out["top_k"] = _int(rng, 0, 10)
        batch = rng.random() < 0.25
        out["positions"] = [_position_fields(rng) for _ in range(rng.randint(1, 3))] \
            if batch else []
        out["repeat"] = rng.choice((1, 1, 1, 2, 256, 257)) if batch else 1
        if batch and rng.random() < 0.9:
            out["position"] = None
    else:
        out["max_visits"] = _int(rng, 0, 1000)
        out["max_time_ms"] = _int(rng, 0, 100)
        out["max_candidates"] = _int(rng, 0, 10)
        out["disable_tree_reuse"] = rng.random() < 0.5
        if kind == "analyze":
            out["report_every_visits"] = _int(rng, 0, 200)
    return out


def build_position(fields: dict[str, Any]) -> Any:
    from services.api.movepred.v1 import search_pb2

    def points(items: list[Any]) -> list[Any]:
        return [search_pb2.Point(x=x, y=y, is_pass=p) for x, y, p in items]

    kwargs = {k: v for k, v in fields.items()
              if k not in ("moves", "setup_black", "setup_white")}
    return search_pb2.Position(moves=points(fields["moves"]),
                               setup_black=points(fields["setup_black"]),
                               setup_white=points(fields["setup_white"]), **kwargs)


def build_request(fields: dict[str, Any]) -> Any:
    from services.api.movepred.v1 import search_pb2

    kind = fields["kind"]
    position = build_position(fields["position"]) if fields["position"] is not None else None
    common = {"position": position} if position is not None else {}
    if kind == "predict":
        positions = [build_position(p) for p in fields["positions"]] * fields["repeat"]
        return search_pb2.PredictRequest(top_k=fields["top_k"], positions=positions, **common)
    budget = {k: fields[k] for k in ("max_visits", "max_time_ms", "max_candidates",
                                     "disable_tree_reuse")}
    if kind == "genmove":
        return search_pb2.GenMoveRequest(**budget, **common)
    return search_pb2.AnalyzeRequest(report_every_visits=fields["report_every_visits"],
                                     **budget, **common)


RequestInput = tuple[str, str, Any]  # (kind, "fields", dict) or (kind, "bytes", bytes)
KINDS = ("predict", "genmove", "analyze")


def request_seeds() -> list[bytes]:
    """Serialised valid requests of each kind, the bases of the byte mutations."""
    rng = random.Random(0)
    seeds = []
    for _ in range(30):
        fields = request_fields(rng)
        seeds.append(build_request(fields).SerializeToString())
    return seeds


def validation_input(rng: random.Random, seeds: list[bytes]) -> RequestInput:
    """Fields of a request (80%), or bytes to parse as one: a mutated request or random."""
    if rng.random() < 0.8:
        fields = request_fields(rng)
        return fields["kind"], "fields", fields
    data = _mutant(seeds, rng) if rng.random() < 0.7 else rng.randbytes(rng.randint(0, 200))
    return rng.choice(KINDS), "bytes", data


def request_of(item: RequestInput) -> Any:
    """The proto request an input stands for (DecodeError for bytes that are not one)."""
    from services.api.movepred.v1 import search_pb2

    kind, form, payload = item
    if form == "fields":
        return build_request(payload)
    message = {"predict": search_pb2.PredictRequest, "genmove": search_pb2.GenMoveRequest,
               "analyze": search_pb2.AnalyzeRequest}[kind]()
    message.ParseFromString(payload)
    return message


def run_validation(item: RequestInput) -> None:
    """What the servicer does with a request before the network answers: validate it, then
    build the network's input and the legal mask of every state."""
    from services.api.movepred.v1 import search_pb2
    from services.search import mcts, validation

    request = request_of(item)
    if isinstance(request, search_pb2.PredictRequest):
        states, _, _ = validation.predict_batch(request)
    elif isinstance(request, search_pb2.GenMoveRequest):
        state, _ = validation.genmove_request(request)
        validation.max_candidates(request.max_candidates, points=mcts.policy_size(state))
        states = [state]
    else:
        states = [validation.analyze_request(request).state]
    for state in states:
        mcts.network_input(state)
        state.legal_mask()


def validation_expected() -> tuple[type[BaseException], ...]:
    from google.protobuf.message import DecodeError

    from services.search.validation import InvalidRequest

    return (InvalidRequest, DecodeError)


def validation_bytes(item: RequestInput) -> bytes:
    """A saved request input: its kind on the first line, then the serialised message (or,
    for fields no message can hold, their repr)."""
    kind, form, payload = item
    if form == "bytes":
        return kind.encode() + b"\n" + payload
    try:
        return kind.encode() + b"\n" + build_request(payload).SerializeToString()
    except Exception:
        return kind.encode() + b"\nfields " + repr(payload).encode()

# ----------------------------------------------------------------------------- harness
@dataclasses.dataclass
class Target:
    name: str
    seeds: Callable[[], list[bytes]]
    make: Callable[[random.Random, list[bytes]], Any]  # one input from a seeded generator
    run: Callable[[Any], None]
    expected: Callable[[], tuple[type[BaseException], ...]]
    to_bytes: Callable[[Any], bytes]
    documented: str  # the documented errors, for the report

    def strategy(self) -> st.SearchStrategy[Any]:
        """Inputs built from a hypothesis-drawn 64-bit seed (what makes a run reproducible
        and cheap), now and then raw hypothesis bytes for the readers."""
        seeds = self.seeds()
        built = st.integers(0, (1 << 64) - 1).map(lambda s: self.make(random.Random(s), seeds))
        if self.name in ("sgf", "rif"):
            return built | st.binary(max_size=200)
        return built


def _targets() -> dict[str, Target]:
    return {
        "sgf": Target("sgf", sgf_seeds, sgf_input, run_sgf, lambda: (), bytes,
                      "none: bad content is an SgfRejected record"),
        "rif": Target("rif", rif_seeds, rif_input, run_rif, lambda: (), bytes,
                      "none: bad content is a Rejected record"),
        "validation": Target("validation", request_seeds, validation_input, run_validation,
                             validation_expected, validation_bytes,
                             "InvalidRequest (RequestTooLarge), DecodeError"),
    }


@dataclasses.dataclass
class Tally:
    target: str
    inputs: int = 0
    expected_errors: int = 0
    crashes: int = 0
    distinct_crashes: int = 0
    slow: int = 0
    max_input_s: float = 0.0
    seconds: float = 0.0
    signatures: dict[str, int] = dataclasses.field(default_factory=dict)


def _signature(exc: BaseException) -> str:
    """Exception type and the innermost project frame: crashes with one cause share it."""
    frames = traceback.extract_tb(exc.__traceback__)
    inner = next((f for f in reversed(frames) if "/services/" in f.filename), None)
    where = f"{Path(inner.filename).name}:{inner.lineno}" if inner else "?"
    return f"{type(exc).__name__} at {where}"


def _save(folder: Path, data: bytes, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha1(data).hexdigest()}.bin"
    if not path.exists():
        path.write_bytes(data)
        path.with_suffix(".txt").write_text(text)
    return path


def fuzz_target(target: Target, inputs: int, batch: int, seed: int, crashes_dir: Path,
                slow_s: float) -> Tally:
    """Feed `inputs` generated inputs to `target`, in hypothesis runs of `batch` each."""
    tally = Tally(target.name)
    expected = target.expected()
    strategy = target.strategy()
    started = time.monotonic()

    def body(item: Any) -> None:
        if tally.inputs >= goal:
            return
        tally.inputs += 1
        t0 = time.perf_counter()
        try:
            target.run(item)
        except expected:
            tally.expected_errors += 1
        except Exception as exc:
            tally.crashes += 1
            sig = _signature(exc)
            if sig not in tally.signatures:
                tally.distinct_crashes += 1
                logger.warning("%s: new crash %s", target.name, sig)
            tally.signatures[sig] = tally.signatures.get(sig, 0) + 1
            _save(crashes_dir / target.name, target.to_bytes(item),
                  f"{sig}\n\n{traceback.format_exc()}")
        elapsed = time.perf_counter() - t0
        if elapsed > slow_s:  # timed again: on a shared machine one slow run can be a stall
            first = elapsed
            t0 = time.perf_counter()
            with contextlib.suppress(Exception):
                target.run(item)
            elapsed = min(first, time.perf_counter() - t0)
            if elapsed > slow_s:
                tally.slow += 1
                _save(crashes_dir / target.name / "slow", target.to_bytes(item),
                      f"{first:.2f} s, then {elapsed:.2f} s\n")
        tally.max_input_s = max(tally.max_input_s, elapsed)

    run_number = 0
    while tally.inputs < inputs:
        goal = min(inputs, tally.inputs + batch)
        want = goal - tally.inputs
        test = settings(max_examples=want, database=None, deadline=None,
                        phases=[Phase.generate], derandomize=False,
                        suppress_health_check=list(HealthCheck))(given(strategy)(body))
        before = tally.inputs
        hypothesis_seed(seed * 1_000_003 + run_number)(test)()
        run_number += 1
        if tally.inputs == before:
            logger.error("%s: hypothesis generated no input in run %d; stopping", target.name,
                         run_number)
            break
        rate = tally.inputs / max(1e-9, time.monotonic() - started)
        logger.info("%s: %d/%d inputs, %d crashes (%d distinct), %.0f inputs/s", target.name,
                    tally.inputs, inputs, tally.crashes, tally.distinct_crashes, rate)
    tally.seconds = time.monotonic() - started
    return tally


# ----------------------------------------------------------------------------- report
def machine() -> str:
    """CPU model and core count, e.g. "AMD EPYC, 2 cores"."""
    return f"{cpu_model()}, {os.cpu_count()} cores"


def table(tallies: list[Tally], machine_text: str, date: str, command: str) -> str:
    rows = ["| figure | value | machine | date | command |", "|---|---|---|---|---|"]
    total = sum(t.inputs for t in tallies)
    crashes = sum(t.crashes for t in tallies)
    cells = f"{machine_text} | {date} | `{command}`"
    rows.append(f"| inputs, all targets | {total:,} | {cells} |")
    rows.append(f"| crashes, all targets | {crashes:,} | {cells} |")
    for t in tallies:
        rate = t.inputs / t.seconds if t.seconds else 0.0
        rows.append(f"| {t.target}: inputs ({rate:,.0f}/s) | {t.inputs:,} | {cells} |")
        rows.append(f"| {t.target}: documented errors | {t.expected_errors:,} | {cells} |")
        sigs = "; ".join(f"{s} x{n}" for s, n in t.signatures.items())
        rows.append(f"| {t.target}: crashes | {t.crashes:,}{' (' + sigs + ')' if sigs else ''}"
                    f" | {cells} |")
        rows.append(f"| {t.target}: slowest input, wall time ({SLOW_NOTE}) | "
                    f"{t.max_input_s * 1000:.1f} ms | {cells} |")
        rows.append(f"| {t.target}: inputs slow on both runs (saved) | {t.slow:,} | {cells} |")
    return "\n".join(rows)


FUZZ_INTRO = """\
`benchmarks/fuzz.py` feeds hypothesis-generated inputs (mutations of valid seed files,
grammar-built files, raw bytes; requests built from fuzzed fields and parsed from fuzzed bytes)
to the SGF reader (`read_sgf`), the RIF reader (`read_rif`) and the request validation
(`services/search/validation.py`, then the network input and legal mask of every valid
request). A crash is any exception other than the documented ones: none for the readers (bad
content is a rejected record), `InvalidRequest` / `RequestTooLarge` and protobuf's
`DecodeError` for requests. Crashing inputs are saved under the crash folder with their
traceback.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/fuzz.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=30_000, help="inputs in all targets")
    parser.add_argument("--targets", default=",".join(TARGET_NAMES),
                        help=f"comma-separated, of {', '.join(TARGET_NAMES)}")
    parser.add_argument("--batch", type=int, default=5_000, help="inputs per hypothesis run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--crashes", type=Path, default=ROOT / "artifacts" / "fuzz-crashes")
    parser.add_argument("--slow-s", type=float, default=2.0,
                        help="an input taking longer is saved under slow/")
    parser.add_argument("--doc", type=Path, default=None,
                        help="rewrite the fuzz section of this markdown file "
                             "(docs/reliability.md)")
    parser.add_argument("--summary", type=Path, default=None, help="write the tallies as JSON")
    logs.add_arguments(parser)
    args = parser.parse_args(argv)
    logs.configure_from(args)
    names = [n.strip() for n in args.targets.split(",") if n.strip()]
    unknown = sorted(set(names) - set(TARGET_NAMES))
    if unknown or not names:
        parser.error(f"unknown targets {unknown}; choose from {', '.join(TARGET_NAMES)}")
    if args.inputs < len(names):
        parser.error(f"--inputs must be at least {len(names)}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    targets = _targets()
    share, extra = divmod(args.inputs, len(names))
    tallies = []
    for i, name in enumerate(names):
        tallies.append(fuzz_target(targets[name], share + (1 if i < extra else 0), args.batch,
                                   args.seed, args.crashes, args.slow_s))
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    command = ".venv/bin/python benchmarks/fuzz.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    text = table(tallies, machine(), date, command.strip())
    sys.stdout.write(text + "\n")
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps([dataclasses.asdict(t) for t in tallies], indent=2))
    if args.doc:
        write_doc_section(args.doc, DOC_BEGIN, DOC_END, FUZZ_INTRO + "\n" + text, "Fuzzing")
    return 1 if any(t.crashes for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
