"""A Dask worker preload for the kill test of `tests/test_selfplay_operations.py`: it holds a
self-play share's worker still in the middle of writing a game, so that the test kills the
worker process at a moment it chooses, not one that depends on the machine's speed.

The test sets `HOLD_ENV` to a marker file holding a share's worker name (``it0000-s00``) and
names this module in ``distributed.worker.preload``. In every Dask worker process,
`services.atomic_files.place_file` then waits, while the marker exists, before it renames a
game file of that share whose share already has a finished game: the game's temporary file is
written and its JSON not yet in place, as when a process dies mid-write. The waiting process
writes its id to ``<marker>.pid`` for the test to kill. Nothing is changed but the timing:
removing the marker lets a waiting write go on as written.

Tic-tac-toe (`tests/tictactoe_game.py`) is imported too, so that the workers know the test
game, as the test's own process does.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import tests.tictactoe_game  # noqa: F401  (registers the test game in the worker process)
from services import atomic_files
from services.atomic_files import atomic_write_text
from services.selfplay.records import GAMES_DIR

HOLD_ENV = "MOVEPRED_TEST_HOLD_SHARE"
_POLL_S = 0.05


def _held(path: Path, marker: Path) -> bool:
    """Whether writing `path` waits: a game JSON of the marker's share while the marker
    exists and the share has a finished game."""
    if path.parent.name != GAMES_DIR or path.suffix != ".json" or not marker.exists():
        return False
    worker = marker.read_text(encoding="utf-8").strip()
    return path.name.startswith(f"{worker}-") and any(path.parent.glob(f"{worker}-*.json"))


def dask_setup(worker: Any) -> None:
    """Dask's preload hook: wrap `place_file` in this worker process (see the module)."""
    value = os.environ.get(HOLD_ENV)
    if not value:
        return
    marker = Path(value)
    place_file = atomic_files.place_file

    def holding_place_file(tmp: Path, path: Path) -> None:
        if _held(Path(path), marker):
            atomic_write_text(str(os.getpid()), marker.with_name(marker.name + ".pid"))
            while marker.exists():
                time.sleep(_POLL_S)
        place_file(tmp, path)

    atomic_files.place_file = holding_place_file
