"""The in-memory dedup of Go pair tables (an Arrow group_by): the reference the tests hold the
out-of-core dedup of the ingest flow to.

`go_deduplicate` merges identical canonical (board, move) pairs of in-memory Go tables
(`services.dataset.sources.read_source_pairs` of Go sources) with an Arrow group_by (count
summed, smallest ply / position hash / rank / game id / source, the rule of the smallest game
id, result averaged over the occurrences whose result is known), then assigns splits with
`split_of`; the ingest flow deduplicates out of core instead (`services.dataset.dedup`), to
the same rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from services.dataset.splits import split_of

# each column of a merged pair: count summed, the mean of the known results, the rule of the
# smallest game id, the smallest of the others
_MERGED = (("count", "sum"), ("ply", "min"), ("result", "mean"), ("mover_rank", "min"),
           ("game_id", "min"), ("source", "min"), ("position_hash", "min"),
           ("board_size", "min"), ("to_move", "min"), ("game", "min"), ("rule", "first"))


def go_deduplicate(tables: list[pa.Table]) -> pa.Table:
    """Merge identical canonical (board, move) pairs across Go sources; assign splits."""
    table = pa.concat_tables([t.select(tables[0].column_names) for t in tables])
    # NaN (unknown result) -> null, so the mean runs over the known results only
    result = table["result"]
    table = table.set_column(table.column_names.index("result"), "result",
                             pc.if_else(pc.is_nan(result), pa.scalar(None, pa.float32()),
                                        result))
    # rows by game id, then rule: a pair's "first" rule is the smallest game id's (the
    # out-of-core build's choice, `services.dataset.dedup`), not the smallest rule name
    table = table.sort_by([("game_id", "ascending"), ("rule", "ascending")])
    grouped = table.group_by(["board", "move"], use_threads=False).aggregate(list(_MERGED))
    names = {f"{c}_{agg}": c for c, agg in _MERGED}
    grouped = grouped.rename_columns([names.get(c, c) for c in grouped.column_names])
    mean = grouped["result"].to_numpy(zero_copy_only=False).astype(np.float32)  # null -> NaN
    grouped = grouped.set_column(grouped.column_names.index("result"), "result",
                                 pa.array(mean, pa.float32()))
    hashes = grouped["position_hash"].to_numpy().astype(np.uint64)
    grouped = grouped.append_column("split", pa.array(split_of(hashes), pa.string()))
    return grouped.sort_by([("position_hash", "ascending"), ("move", "ascending"),
                            ("board", "ascending")])


__all__ = ["go_deduplicate"]
