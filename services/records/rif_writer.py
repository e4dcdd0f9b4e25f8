"""Write games as a RenjuNet-style `.rif` XML file.

Why: tests need faithful `.rif` fixtures (no real export may be committed) and self-play data
is shipped in the same format, so one reader serves both. The layout follows RIF_SCHEMA.md:
root `<database version="1.0" date=...>`, all eight containers in RenjuNet's order, players /
rules / openings / tournaments as id tables that the games refer to. Display names are split
back into `name` + `surname` at the first space, so `read_rif(write_rif(games))` round-trips.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Protocol
from xml.sax.saxutils import escape, quoteattr

from services.coords import index_name
from services.records.rif import BOARD_SIZE

CONTAINERS = (
    "countries", "cities", "months", "rules", "openings", "players", "tournaments", "games"
)
_ATTR_ENTITIES = {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class RifGameLike(Protocol):
    """Anything with `moves` (flat points, Black first); the other RifGame fields are optional
    and read with getattr: game_id, rule, bresult, black, white, opening, alt, swap,
    tournament, btime, wtime, info."""

    @property
    def moves(self) -> Sequence[int]: ...


def _attr(value: object) -> str:
    return quoteattr(_NOT_XML.sub("", str(value)), _ATTR_ENTITIES)


def _field(game: RifGameLike, name: str) -> str:
    value = getattr(game, name, "")
    return "" if value is None else str(value)


def _bresult(game: RifGameLike) -> str | None:
    value = getattr(game, "bresult", None)
    return None if value is None else f"{float(value):g}"


def _move_text(moves: Sequence[int], per_line: int) -> str:
    names = []
    for p in moves:
        if not 0 <= p < BOARD_SIZE * BOARD_SIZE:
            raise ValueError(f"move {p} is off the {BOARD_SIZE}x{BOARD_SIZE} board")
        names.append(index_name(int(p), BOARD_SIZE))
    if per_line <= 0:
        return " ".join(names)
    lines = [" ".join(names[i : i + per_line]) for i in range(0, len(names), per_line)]
    return "\n    " + "\n    ".join(lines) + "\n  "


class _Table:
    """Display name -> sequential id, in first-seen order."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def ref(self, name: str) -> str:
        if not name:
            return ""
        return str(self.ids.setdefault(name, len(self.ids) + 1))


_Row = tuple[str, dict[str, str], RifGameLike]  # game id, table references, game


def write_rif(
    games: Iterable[RifGameLike],
    path: str | Path,
    *,
    date: str | None = None,
    comment: str | None = None,
    moves_per_line: int = 0,
) -> Path:
    """Write `games` to `path` (gzip when it ends in .gz) and return the path.

    `moves_per_line` > 0 wraps `<move>` text over indented lines, as some exports do.
    """
    rows, tables = _rows(games)
    path = Path(path)
    if path.suffix == ".gz":
        with gzip.GzipFile(path, "wb", mtime=0) as raw, _text_io(raw) as out:
            _write(out, rows, tables, date, comment, moves_per_line)
    else:
        with path.open("w", encoding="utf-8", newline="\n") as out:
            _write(out, rows, tables, date, comment, moves_per_line)
    return path


def rif_text(games: Iterable[RifGameLike], *, date: str | None = None,
             comment: str | None = None, moves_per_line: int = 0) -> str:
    """What `write_rif` writes to a plain .rif file, as text."""
    rows, tables = _rows(games)
    out = io.StringIO(newline="\n")
    _write(out, rows, tables, date, comment, moves_per_line)
    return out.getvalue()


def _rows(games: Iterable[RifGameLike]) -> tuple[list[_Row], dict[str, _Table]]:
    """The games' rows with their table references, and the tables they fill."""
    games = list(games)  # the tables come first, so all games must be seen before writing
    tables = {tag: _Table() for tag in ("rule", "opening", "player", "tournament")}
    rows: list[_Row] = []
    for number, game in enumerate(games, 1):
        refs = {
            "rule": tables["rule"].ref(_field(game, "rule")),
            "black": tables["player"].ref(_field(game, "black")),
            "white": tables["player"].ref(_field(game, "white")),
            "opening": tables["opening"].ref(_field(game, "opening")),
            "tournament": tables["tournament"].ref(_field(game, "tournament")),
        }
        rows.append((_field(game, "game_id") or str(number), refs, game))
    return rows, tables


def _text_io(raw: IO[bytes]) -> IO[str]:
    return io.TextIOWrapper(raw, encoding="utf-8", newline="\n")


def _write(
    out: IO[str],
    rows: list[_Row],
    tables: dict[str, _Table],
    date: str | None,
    comment: str | None,
    moves_per_line: int,
) -> None:
    date = date or dt.date.today().isoformat()
    out.write('<?xml version="1.0" encoding="utf-8"?>\n')
    out.write(f"<database version=\"1.0\" date={_attr(date)}>\n")
    if comment:
        out.write(f"<!-- {_NOT_XML.sub('', comment).replace('--', '- -')} -->\n")
    table_of = {"rules": "rule", "openings": "opening", "players": "player",
                "tournaments": "tournament"}
    for container in CONTAINERS:
        if container == "games":
            out.write("<games>\n")
            for game_id, refs, game in rows:
                out.write(_game_xml(game_id, refs, game, moves_per_line))
            out.write("</games>\n")
        elif container in table_of:
            tag = table_of[container]
            out.write(f"<{container}>\n")
            for name, key in tables[tag].ids.items():
                out.write(f"<{tag} id=\"{key}\" {_name_attrs(tag, name)} />\n")
            out.write(f"</{container}>\n")
        else:
            out.write(f"<{container} />\n")
    out.write("</database>\n")


def _name_attrs(tag: str, name: str) -> str:
    if tag == "player":
        first, _, surname = name.partition(" ")
        return f"name={_attr(first)} surname={_attr(surname)}"
    if tag == "opening":
        return f"abbr=\"\" name={_attr(name)}"
    return f"name={_attr(name)}"


def _game_xml(game_id: str, refs: dict[str, str], game: RifGameLike, per_line: int) -> str:
    attrs = {"id": game_id, "tournament": refs["tournament"], "round": "", "rule": refs["rule"],
             "black": refs["black"], "white": refs["white"]}
    bresult = _bresult(game)
    if bresult is not None:
        attrs["bresult"] = bresult
    for name in ("btime", "wtime"):
        attrs[name] = _field(game, name)
    attrs["opening"] = refs["opening"]
    for name in ("alt", "swap"):
        attrs[name] = _field(game, name)
    head = " ".join(f"{k}={_attr(v)}" for k, v in attrs.items())
    body = f"<move>{escape(_move_text(game.moves, per_line))}</move>"
    info = _field(game, "info")
    if info:
        body += f"<info>{escape(_NOT_XML.sub('', info))}</info>"
    return f"<game {head}>\n  {body}\n</game>\n"
