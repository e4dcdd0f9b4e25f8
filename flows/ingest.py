"""Prefect flow `ingest`: game records -> deduplicated Parquet shards + manifest.

Every registered game goes through the same path: a source file's suffix names its game
(`Game.record_formats`: Gomoku's RenjuNet `.rif` / `.rif.gz`, Go's `.sgf` files and KGS month
archives), the game replays its records (`Game.replay_source`: its codecs, its rules, each
Gomoku game under its own rule, Go games of one board size), and
`services.dataset.sources.write_source_pairs` writes the pairs. A file of any other suffix is
refused before anything is read. One run, one game: each game goes to its own dataset folder.
Per source, read = ingested + quarantined, and quarantined records are counted by reason
category (`services.records.reasons`, the first full reason of each kept as its example).
Games a game's replay keeps up to a move (`Game.kept_notes`: a Go game cut short by an illegal
move, `truncated`; a renju game cut at a forbidden black move, `cut_at_forbidden`, the move
itself no target) count as ingested and also have a row in the quarantine table, and are
counted by kind. A self-play folder (one holding `games/`) is a source too: its games are
replayed through the same game replay and become rows with their policy targets and lineage,
never merged (`services.selfplay.pairs`, docs/selfplay.md). A source's name labels its rows
and keys its cached read: the path's last part, or NAME given as `NAME=PATH`, so that the
same-named folders of several self-play runs can go into one dataset.

Run: python -m flows.ingest [SOURCES ...] --out artifacts/dataset
         [--dask | --dask-address tcp://scheduler:8786]

How a run goes:

1. every source file is fingerprinted (SHA-256 of its bytes);
2. one `read-source` task per file, run in parallel (threads, or a Dask cluster), parses and
   replays it into an intermediate Parquet file of raw canonical pairs plus one of quarantine
   rows, both in the work folder (default `<out>.work/`) under a name holding the fingerprint.
   The task returns only a small summary (counts, the two paths and their checksums), cached
   by Prefect under the file's fingerprint, its name, the work folder and a hash of the
   pipeline's code (this module and every project module it imports, found by reading the
   sources: `services.import_closure`): an unchanged source is not read again until that
   code changes. It is retried with exponential back-off;
3. the flow checks each intermediate against the checksum in its summary (a cached summary
   whose file was deleted or damaged is recomputed), then rebuilds the whole dataset from all
   intermediates: dedup across every source, split, shards, out of core (a DuckDB query
   spilling to the work folder, `services/dataset/dedup.py`; see `services/dataset/shards.py`
   for why a kill at any point is harmless and a rerun byte-identical);
4. a table artifact (counts per source) and a markdown artifact (the run) are attached.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import Flow, flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import INPUTS
from prefect.futures import as_completed
from prefect.tasks import exponential_backoff

from flows import announce_prefect_api, configure_logging, on_dask
from services import logs
from services.dataset.dedup import BuildSettings, build_shards
from services.dataset.shards import (
    COMPRESSION,
    QUARANTINE_SCHEMA,
    ROW_GROUP_ROWS,
    ROWS_PER_SHARD,
    SCHEMA_VERSION,
    commit_manifest,
    sha256_file,
    write_quarantine,
    write_table_atomic,
)
from services.dataset.sources import write_source_pairs
from services.games.registry import game_of_source, get_game, registered_games
from services.import_closure import closure_digest
from services.records.reasons import count_reasons
from services.selfplay.pairs import (
    folder_fingerprint,
    folder_game,
    is_selfplay_source,
    write_selfplay_pairs,
)
from services.settings import DEFAULT_DATASET, bounded

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCES = (str(ROOT / "data" / "sample" / "selfplay.rif"),)
DEFAULT_OUT = DEFAULT_DATASET
INTERMEDIATE_VERSION = 2  # bump when the intermediate files' layout changes
# the module that defines the read task: its import closure is the code that turns a source
# into intermediates, and any change to it is a new cache key
PIPELINE_ENTRY = "flows.ingest"
def source_suffixes() -> tuple[str, ...]:
    """What a source file's name may end with: every registered game's record formats."""
    return tuple(s for g in registered_games() for s in g.record_formats)


RETRIES = 3  # delays 1, 2, 4 s (+ up to 50 % jitter)
DEFAULT_DASK_WORKERS = 2


def pipeline_version(root: Path = ROOT) -> str:
    """INTERMEDIATE_VERSION plus a hash of the sources of PIPELINE_ENTRY and of every project
    module it imports (under `root`), directly or not: a hand-kept list of modules misses
    the next one imported."""
    return f"{INTERMEDIATE_VERSION}-{closure_digest(PIPELINE_ENTRY, root)[:16]}"


PIPELINE_VERSION = pipeline_version()


def source_fingerprint(path: Path) -> str:
    """The source's content fingerprint: SHA-256 of its bytes; of a self-play folder, of its
    game files' names and SHA-256s (`services.selfplay.pairs.folder_fingerprint`)."""
    if is_selfplay_source(path):
        return folder_fingerprint(path)
    return sha256_file(Path(path))


fingerprint = source_fingerprint  # (the read task's parameter of that name hides this one)


def default_work_dir(out_dir: str | Path) -> Path:
    """Intermediates live next to the dataset folder, never inside it."""
    out = Path(out_dir).resolve()
    return out.with_name(out.name + ".work")


def intermediate_stem(name: str, fp: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return f"{safe}.{fp[:16]}.v{INTERMEDIATE_VERSION}"


@task(
    name="read-source",
    task_run_name="read {name}",
    retries=RETRIES,
    retry_delay_seconds=exponential_backoff(backoff_factor=1),
    retry_jitter_factor=0.5,
    # the key: name, fingerprint, work folder, pipeline version; not the path (a moved file
    # hits)
    cache_policy=INPUTS - "path",
    result_serializer="json",
)
def read_source(path: str, name: str, fingerprint: str, work_dir: str,
                version: str = PIPELINE_VERSION, board_size: int | None = None) -> dict:
    """Parse and replay one source into intermediate files; return their summary.

    The source's game (`source_game`) replays it (`Game.replay_source`: its record codecs,
    rules and board encoding), and `services.dataset.sources.write_source_pairs` writes the
    pairs; `board_size`: the one size kept (None: every size).

    Malformed records go to quarantine and never raise; an exception here is an I/O problem
    (retried) or a source that changed after the flow fingerprinted it (fails the run).
    """
    p = Path(path)
    if source_fingerprint(p) != fingerprint:
        raise RuntimeError(f"{p}: changed while the ingest ran (fingerprint mismatch)")
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    stem = intermediate_stem(name, fingerprint)
    pairs_path = work / f"{stem}.pairs.parquet"
    quarantine_path = work / f"{stem}.quarantine.parquet"
    game = get_game(source_game(p))
    # written as it is read: an archive's pairs need not fit in memory
    if is_selfplay_source(p):  # its games replayed with their targets and lineage
        result = write_selfplay_pairs(game, p, pairs_path, name, board_size=board_size)
    else:
        result = write_source_pairs(game, p, pairs_path, name, board_size=board_size)
    quarantine = pa.Table.from_pylist(result.quarantine, schema=QUARANTINE_SCHEMA)
    reasons, examples = count_reasons(  # quarantined records only, not the kept games' notes
        q["reason"] for q in result.quarantine
        if not q["reason"].startswith(tuple(game.kept_notes.values())))
    return {
        "source": name,
        "game": game.name,
        "fingerprint": fingerprint,
        "read": result.read,
        "ingested": result.ingested,
        "quarantined": result.quarantined,
        **{kind: result.notes.get(kind, 0) for kind in game.kept_notes},
        "reasons": dict(sorted(reasons.items())),
        "reason_examples": dict(sorted(examples.items())),
        "pairs": result.rows,
        "pairs_path": str(pairs_path),
        "pairs_sha256": result.sha256,
        "quarantine_path": str(quarantine_path),
        "quarantine_sha256": write_table_atomic(quarantine, quarantine_path),
    }


def _intact(summary: dict) -> bool:
    for key in ("pairs", "quarantine"):
        path = Path(summary[f"{key}_path"])
        if not path.is_file() or sha256_file(path) != summary[f"{key}_sha256"]:
            return False
    return True


def source_game(path: str | Path) -> str:
    """The registered name of the game whose records the file's suffix names
    (`Game.record_formats`), or whose games a self-play folder holds; a file of any other
    suffix is refused (ValueError naming it and the suffixes accepted)."""
    if is_selfplay_source(path):
        name = folder_game(path)
        if name is None or name not in {g.name for g in registered_games()}:
            raise ValueError(f"{path}: a self-play folder without a readable game file of a "
                             f"registered game (found {name!r})")
        return name
    game = game_of_source(str(path))
    if game is None:
        raise ValueError(unknown_suffix_message([str(path)]))
    return game.name


def unknown_suffix_message(paths: list[str]) -> str:
    games = sorted((g for g in registered_games() if g.record_formats), key=lambda g: g.name)
    by_game = "; ".join(f"{g.title} {', '.join(g.record_formats)}" for g in games)
    return (f"unknown source file type: {', '.join(paths)}; accepted suffixes: "
            f"{', '.join(sorted(source_suffixes()))} ({by_game}), or a self-play folder "
            "(one holding games/)")


class Source(NamedTuple):
    """One source of a run: the name that labels its rows (and keys its cached read) and the
    file or self-play folder it is read from."""

    name: str
    path: Path


SOURCE_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def parse_source(text: str) -> Source:
    """`PATH`, named by its last part, or `NAME=PATH`, named NAME: the form for two folders
    of one name (every self-play run has a `selfplay-0000`). An existing path is always a
    path, even with an `=` in it."""
    label, sep, rest = text.partition("=")
    if sep and SOURCE_LABEL.fullmatch(label) and rest and not Path(text).exists():
        return Source(label, Path(rest).resolve())
    path = Path(text).resolve()
    return Source(path.name, path)


def _resolve_sources(sources: list[str] | None) -> list[Source]:
    found = sorted({parse_source(s) for s in (sources or DEFAULT_SOURCES)},
                   key=lambda src: (src.name, str(src.path)))
    paths = [src.path for src in found]
    unknown = [str(p) for p in paths if not p.name.lower().endswith(source_suffixes())
               and not is_selfplay_source(p)]
    if unknown:  # before anything is read: an unknown file is never read as .rif
        raise ValueError(unknown_suffix_message(unknown))
    missing = [str(p) for p in paths if not p.is_file() and not is_selfplay_source(p)]
    if missing:
        raise FileNotFoundError(f"source file(s) not found: {', '.join(missing)}")
    games = {source_game(p) for p in paths}
    if len(games) > 1:
        raise ValueError(f"this run mixes the sources of several games "
                         f"({', '.join(sorted(games))}): ingest each game into its own "
                         "dataset folder (one run each)")
    if len({is_selfplay_source(p) for p in paths}) > 1:
        raise ValueError("this run mixes self-play folders and record files: ingest each into "
                         "its own dataset folder (records' pairs are merged, self-play rows "
                         "never are: docs/selfplay.md)")
    names = Counter(src.name for src in found)
    clashes = sorted(n for n, k in names.items() if k > 1)
    if clashes:
        raise ValueError(f"source names must be unique (the name labels its rows): {clashes}; "
                         "name each one with NAME=PATH")
    return found


def _run_reads(resolved: list[Source], fps: dict[Source, str], work: Path, progress: bool,
               refresh: bool = False, board_size: int | None = None,
               ) -> tuple[dict[str, dict], set[str]]:
    """Submit one read task per source; return summaries by name and the names served from
    Prefect's cache."""
    reader = read_source.with_options(refresh_cache=True) if refresh else read_source
    futures = [reader.submit(str(src.path), src.name, fps[src], str(work), PIPELINE_VERSION,
                             board_size) for src in resolved]
    summaries, cached = {}, set()
    bar = _progress_bar(len(futures), "re-reading" if refresh else "reading") if progress else None
    try:
        for future in as_completed(futures):
            summary = future.result()
            summaries[summary["source"]] = summary
            if future.state.name == "Cached":
                cached.add(summary["source"])
            if bar is not None:
                bar[0].update(bar[1], advance=1, description=f"read {summary['source']}")
    finally:
        if bar is not None:
            bar[0].stop()
    return summaries, cached


def _progress_bar(total: int, label: str):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("sources"), TimeElapsedColumn(), console=Console(stderr=True))
    bar.start()
    return bar, bar.add_task(label, total=total)


def _counts_row(summary: dict, reasons: list[str], cached: bool, notes: dict[str, str]) -> dict:
    row = {"source": summary["source"], "read": summary["read"],
           "ingested": summary["ingested"], "quarantined": summary["quarantined"]}
    row.update({words: summary.get(kind, 0) for kind, words in notes.items()})
    row.update({f"quarantined: {r}": summary["reasons"].get(r, 0) for r in reasons})
    row.update({"raw pairs": summary["pairs"], "unique pairs": summary["unique_pairs"],
                "cached": "yes" if cached else "no"})
    return row


@flow(name="ingest")
def ingest(sources: list[str] | None = None, out_dir: str = DEFAULT_OUT,
           work_dir: str | None = None, progress: bool = False,
           board_size: int | None = None) -> dict:
    """Ingest every source and write shards, quarantine and manifest into `out_dir`.

    `work_dir` holds the per-source intermediates (default `<out_dir>.work`); it must be on a
    file system that every task worker and the flow see. Sources are all of one game;
    `board_size`: the one board size kept (None: the game's default size; 0: every size, but
    then the trainer's `read_split` refuses a split that mixes sizes). Returns the manifest.
    """
    logger = get_run_logger()
    resolved = _resolve_sources(sources)
    out = Path(out_dir).resolve()
    work = Path(work_dir).resolve() if work_dir else default_work_dir(out)
    work.mkdir(parents=True, exist_ok=True)
    for stale in work.glob(".*.tmp"):  # a killed run's half-written intermediate
        stale.unlink(missing_ok=True)

    fps = {src: fingerprint(src.path) for src in resolved}
    played = get_game(source_game(resolved[0].path))
    game = played.name
    kept_size = played.default_size if board_size is None else (board_size or None)
    # games kept up to a point, with a note: {kind: what happened to them, in words}
    notes = {kind: prefix.rstrip(": ") for kind, prefix in played.kept_notes.items()}
    logger.info("ingesting %d %s source(s) into %s (intermediates in %s)", len(resolved), game,
                out, work)
    summaries, cached = _run_reads(resolved, fps, work, progress, board_size=kept_size)
    logger.info("%d source(s) read, %d of them from the cache", len(resolved), len(cached))
    damaged = [src for src in resolved if not _intact(summaries[src.name])]
    if damaged:  # a cached summary outlived its intermediate file: compute it again
        again, _ = _run_reads(damaged, fps, work, progress, refresh=True,
                              board_size=kept_size)
        summaries.update(again)
        cached -= set(again)
        still = [n for n in again if not _intact(again[n])]
        if still:
            raise RuntimeError(f"intermediates of {still} are damaged right after writing")
    ordered = [summaries[src.name] for src in resolved]

    # dedup, split and shards out of core (DuckDB, spilling into the work folder)
    built = build_shards([Path(s["pairs_path"]) for s in ordered], out, game,
                         BuildSettings(temp_dir=work))
    files, split_rows = built.files, built.rows
    for s in ordered:  # counted by the build, where every source's rows merge anyway
        s["unique_pairs"] = built.unique_pairs.get(s["source"], 0)
    quarantine = [row for s in ordered
                  for row in pq.read_table(s["quarantine_path"]).to_pylist()]
    quarantine_entry = write_quarantine(quarantine, out)
    counts = [{k: s.get(k, 0) for k in ("source", "read", "ingested", "quarantined", *notes,
                                        "pairs", "unique_pairs", "reasons", "reason_examples")}
              for s in ordered]
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "game": game,
        "rows": sum(split_rows.values()),
        "raw_pairs": sum(s["pairs"] for s in ordered),
        "splits": split_rows,
        "files": files,
        "quarantine": quarantine_entry,
        "sources": [{"path": src.name, "sha256": fps[src]} for src in resolved],
        "counts": counts,
        "writer": {"rows_per_shard": ROWS_PER_SHARD, "row_group_rows": ROW_GROUP_ROWS,
                   "compression": COMPRESSION, "board_encoding": built.board_encoding,
                   "pyarrow": pa.__version__},
    }
    removed = commit_manifest(manifest, out)
    logger.info("committed %s: %d unique pairs of %d, splits %s; %d record(s) quarantined",
                out / "manifest.json", manifest["rows"], manifest["raw_pairs"], split_rows,
                sum(c["quarantined"] for c in counts))

    reasons = sorted({r for s in ordered for r in s["reasons"]})
    create_table_artifact(
        key="ingest-counts",
        table=[_counts_row(s, reasons, s["source"] in cached, notes) for s in ordered],
        description="Records per source (read = ingested + quarantined, quarantined by "
                    "reason category"
                    + "".join(f"; {words}: games kept up to that point, ingested"
                              for words in notes.values())
                    + "), raw and unique (position, move) pairs, whether the source was "
                    "served from the cache",
    )
    create_markdown_artifact(key="ingest-summary", markdown=_summary_markdown(
        manifest, out, len(cached), len(damaged), removed, notes))
    return manifest


def _summary_markdown(manifest: dict, out: Path, n_cached: int, n_damaged: int,
                      removed: list[str], notes: dict[str, str]) -> str:
    rows = manifest["rows"]
    noted = {words: sum(c.get(kind, 0) for c in manifest["counts"])
             for kind, words in notes.items()}
    lines = [
        "# Ingest",
        "",
        f"{len(manifest['sources'])} source(s) ({n_cached} from the cache"
        + (f", {n_damaged} recomputed after a missing intermediate" if n_damaged else "")
        + f"), {sum(c['read'] for c in manifest['counts'])} records read, "
        f"{sum(c['quarantined'] for c in manifest['counts'])} quarantined"
        + "".join(f", {n} {words}" for words, n in noted.items() if n)
        + f"; {manifest['raw_pairs']} pairs, "
        f"**{rows} unique** after symmetry dedup, written to `{out}`.",
        "",
        "| split | rows | share | files |",
        "|---|---:|---:|---:|",
    ]
    for split, n in manifest["splits"].items():
        n_files = sum(1 for f in manifest["files"] if f["split"] == split)
        lines.append(f"| {split} | {n} | {n / max(rows, 1):.1%} | {n_files} |")
    reasons: dict[str, int] = {}
    examples: dict[str, str] = {}
    for c in manifest["counts"]:
        for category, n in c["reasons"].items():
            reasons[category] = reasons.get(category, 0) + n
        for category, example in c.get("reason_examples", {}).items():
            examples.setdefault(category, example)
    if reasons:
        lines += ["", "| quarantined: reason | records | example |", "|---|---:|---|"]
        for category, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            example = examples.get(category, "").replace("|", "\\|")
            lines.append(f"| {category} | {n} | {example} |")
    if removed:
        lines += ["", f"Removed {len(removed)} file(s) the new manifest no longer lists."]
    return "\n".join(lines)


def ingest_on(dask_address: str | None = None, dask_workers: int = 0,
              dask_processes: bool = True) -> Flow:
    """The `ingest` flow on a Dask cluster: an existing one at `dask_address`
    (tcp://host:8786), or a local one of `dask_workers` workers started for the run; without
    either, the flow itself (threads in this process)."""
    return on_dask(ingest, dask_address, dask_workers, processes=dask_processes)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m flows.ingest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="*",
                        help="record files of one game: "
                             + "; ".join(f"{g.title} {', '.join(g.record_formats)}"
                                         for g in registered_games() if g.record_formats)
                             + "; or self-play folders. Each is PATH (its rows labelled by "
                             "the path's last part) or NAME=PATH (labelled NAME: the form for "
                             "two folders of one name) (default: the Gomoku sample)")
    parser.add_argument("--board-size", type=bounded(int, 0, 25), default=None,
                        help="the board size kept (other sizes are quarantined; default: the "
                             "game's default size, Go 19); 0 keeps every size")
    parser.add_argument("--out", default=DEFAULT_OUT, help="dataset folder to write")
    parser.add_argument("--work", default=None,
                        help="folder for per-source intermediates (default: OUT.work)")
    parser.add_argument("--dask", action="store_true",
                        help=f"run the tasks on a local Dask cluster (--dask-workers, default "
                             f"{DEFAULT_DASK_WORKERS})")
    parser.add_argument("--dask-workers", type=bounded(int, 0, 1024), default=0,
                        help="local Dask worker processes")
    parser.add_argument("--dask-address", default=None,
                        help="run the tasks on an existing Dask cluster (tcp://host:8786)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    logs.add_arguments(parser)
    args = parser.parse_args(argv)
    try:  # the flow checks them too; here a bad list is a usage error before Prefect starts
        resolved = _resolve_sources(args.sources or None)
    except (ValueError, FileNotFoundError) as exc:
        parser.error(str(exc))
    kept_notes = get_game(source_game(resolved[0].path)).kept_notes
    configure_logging(args)
    workers = args.dask_workers or (DEFAULT_DASK_WORKERS if args.dask else 0)
    # `python -m flows.ingest` runs this file as __main__: take the flow from the importable
    # module so that Dask workers can unpickle its tasks by reference
    from flows.ingest import ingest_on as importable_ingest_on

    run = importable_ingest_on(dask_address=args.dask_address, dask_workers=workers)
    announce_prefect_api()
    try:
        manifest = run(sources=args.sources or None, out_dir=args.out, work_dir=args.work,
                       progress=not args.no_progress, board_size=args.board_size)
    except OSError as exc:
        if not args.dask_address:
            raise
        # Dask's connect timeout (distributed.comm.timeouts.connect, 30 s) passed: one line
        parser.exit(1, f"error: no Dask scheduler at {args.dask_address}: {exc}\n")
    print(f"{manifest['rows']} unique pairs -> {args.out}  splits: {manifest['splits']}")
    for row in manifest["counts"]:
        print(f"  {row['source']}: read {row['read']} = ingested {row['ingested']} "
              f"+ quarantined {row['quarantined']}"
              + (f" {row['reasons']}" if row["reasons"] else "")
              + "".join(f", {prefix.rstrip(': ')} {row[kind]}"
                        for kind, prefix in kept_notes.items() if row.get(kind)))
    return manifest


if __name__ == "__main__":
    main()
