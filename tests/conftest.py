"""Shared fixtures: paths to ../shared data and a `.rif` built from the real RenjuNet games.

RenjuNet-derived games are never copied into the repository (their licence forbids online
use); tests build fixtures from ../shared at run time and skip clearly when it is absent.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import flows  # noqa: F401  (sets Prefect defaults before anything imports Prefect)
from services.games.coords import parse_point

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
RENJUNET_TSV = SHARED_DATA / "renjunet" / "renjunet-derived-games-dev.tsv"
SAMPLE_RIF = ROOT / "data" / "sample" / "selfplay.rif"


@dataclass(frozen=True)
class TsvGame:
    game_id: str
    moves: tuple[int, ...]
    bresult: float
    black: str
    white: str
    opening: str
    rule: str = "RIF"


def split_rows(dataset_dir: Path, split: str = "train") -> list[tuple[bytes, int]]:
    """(board bytes, move) of every row of one split, read straight from the shards the
    manifest lists: the reference the loaders' output is checked against."""
    manifest = json.loads((dataset_dir / "manifest.json").read_text())
    rows = []
    for entry in manifest["files"]:
        if entry["split"] == split:
            t = pq.read_table(dataset_dir / entry["path"], columns=["board", "move"])
            rows += zip(t["board"].to_pylist(), t["move"].to_pylist(), strict=True)
    return rows


def renjunet_games(limit: int | None = None) -> list[TsvGame]:
    """The real RenjuNet-derived games from ../shared, or skip the test if absent."""
    if not RENJUNET_TSV.exists():
        pytest.skip(f"real RenjuNet games not found at {RENJUNET_TSV} (../shared absent)")
    games = []
    with RENJUNET_TSV.open(encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            moves = []
            for token in row["moves"].split():
                x, y = parse_point(token, 15)
                moves.append(y * 15 + x)
            games.append(TsvGame(row["game_no"], tuple(moves), float(row["bresult"]),
                                 row["black_first_name"], row["white_first_name"], row["opening"]))
            if limit and len(games) >= limit:
                break
    return games


@pytest.fixture(scope="session")
def renjunet_rif(tmp_path_factory) -> Path:
    """A `.rif` file holding every real game of the dev TSV."""
    from services.records.rif_writer import write_rif

    path = tmp_path_factory.mktemp("renjunet") / "renjunet-dev.rif"
    return write_rif(renjunet_games(), path)


@pytest.fixture(scope="session")
def prefect_harness():
    """Prefect's test harness: a throwaway API server and database for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
