"""The SHA-256 of every shard the ingest flow writes from the ../shared archives.

    .venv/bin/python benchmarks/shard_digests.py --write benchmarks/shard_digests.json
    .venv/bin/python benchmarks/shard_digests.py --check benchmarks/shard_digests.json

Ingests, each into its own dataset folder under --work (default: a temporary folder):
  * gomoku: the RenjuNet-derived games of ../shared written as one `.rif`
    (tests/conftest.py's `renjunet_games`, `services.records.rif_writer.write_rif`);
  * go: the two Go archives of ../shared (KGS and the other Go games), 19x19.
and prints, per dataset, its rows and the SHA-256 of every file its manifest lists. A change
to the ingest path that must not change what it writes (a refactor) is checked with --check
against the digests recorded before it: exit status 1 and the differing files otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

import flows  # noqa: E402, F401  (Prefect defaults before Prefect is imported)
from flows.ingest import ingest  # noqa: E402
from services.records.rif_writer import write_rif  # noqa: E402
from tests.conftest import SHARED_DATA, renjunet_games  # noqa: E402

GO_ARCHIVES = (SHARED_DATA / "kgs" / "kgs-games-dev.tar.gz",
               SHARED_DATA / "go-other" / "go-games-other-dev.tar.gz")


def dataset_digests(sources: list[Path], out: Path) -> dict:
    """Ingest `sources` into `out`; the manifest's rows, splits and file digests."""
    manifest = ingest(sources=[str(p) for p in sources], out_dir=str(out), progress=False)
    files = {entry["path"]: entry["sha256"] for entry in manifest["files"]}
    if manifest.get("quarantine"):
        files[manifest["quarantine"]["path"]] = manifest["quarantine"]["sha256"]
    return {"rows": manifest["rows"], "splits": manifest["splits"], "files": files}


def all_digests(work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    rif = write_rif(renjunet_games(), work / "renjunet-dev.rif")
    return {"gomoku": dataset_digests([rif], work / "gomoku"),
            "go": dataset_digests(list(GO_ARCHIVES), work / "go")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="record the digests in this JSON file")
    parser.add_argument("--check", type=Path, help="compare with the digests in this file")
    parser.add_argument("--work", type=Path, help="folder for the datasets (default: temporary)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        digests = all_digests(args.work or Path(tmp))
    text = json.dumps(digests, indent=1, sort_keys=True)
    print(text)
    if args.write:
        args.write.write_text(text + "\n")
    if args.check:
        recorded = json.loads(args.check.read_text())
        differ = [f"{name}: {key}" for name in recorded for key in ("rows", "splits", "files")
                  if recorded[name][key] != digests.get(name, {}).get(key)]
        for line in differ:
            print(f"DIFFERS {line}", file=sys.stderr)
        print("shards identical" if not differ else f"{len(differ)} differences",
              file=sys.stderr)
        return int(bool(differ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
