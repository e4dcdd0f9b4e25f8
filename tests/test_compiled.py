"""Compiled kernels where numba has nowhere to write its cache (a read-only root filesystem,
as the search service's pod runs): importing the Go rules must still work, and the kernels
answer as the cached ones do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# numba finds no cache location at all (what a read-only tree and home amount to)
NO_CACHE_LOCATION = """
import numba.core.caching as caching
caching.CacheImpl._locator_classes = []  # numba 0.61 (pinned)
import logging
logging.basicConfig(level=logging.WARNING)
from services.games.go.rules import GoState
from services.games.go.features import compact
from tests.test_compiled import crowded
state = crowded()
print(state.legal_mask().tolist())
print(state.liberties().tolist())
print(compact(state).tolist())
"""


def crowded():
    """A 5x5 position where points lack an empty neighbour (the mask's liberty test runs)."""
    from services.games.go.rules import GoState

    return GoState.from_ascii("""
        X X O . O
        X . X O O
        O X X O .
        . O X X O
        X O . O X
    """)


def test_kernels_compile_per_process_when_numba_cannot_cache_them() -> None:
    out = subprocess.run([sys.executable, "-c", NO_CACHE_LOCATION], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "NUMBA_CACHE_DIR" in out.stderr  # the one warning says how to get the cache back
    from services.games.go.features import compact

    state = crowded()
    assert out.stdout.splitlines() == [str(state.legal_mask().tolist()),
                                       str(state.liberties().tolist()),
                                       str(compact(state).tolist())]


def test_only_the_missing_cache_location_is_forgiven(monkeypatch: pytest.MonkeyPatch) -> None:
    import services.compiled as compiled

    def broken(**_options: object) -> object:
        def decorate(fn: object) -> object:
            raise RuntimeError("some other numba failure")
        return decorate

    monkeypatch.setattr(compiled, "njit", broken)
    with pytest.raises(RuntimeError, match="other numba failure"):
        compiled.kernel(lambda x: x)


# the search service's start-up: every game's rules warmed up where nothing is cached
WARM_UP_WITHOUT_CACHE = """
import numba.core.caching as caching
caching.CacheImpl._locator_classes = []  # numba 0.61 (pinned)
from services.games.go import scan as go_scan
from services.games.registry import registered_games
kernels = {name: getattr(go_scan, name) for name in
           ("group_liberties", "legal_points", "compact_planes")}
assert not any(k.signatures for k in kernels.values()), "compiled before the warm-up"
for game in registered_games():
    game.warm_up()
print(sorted(name for name, k in kernels.items() if k.signatures))
"""


def test_warm_up_compiles_the_go_scans_before_any_request() -> None:
    """`Game.warm_up` (called by the search service before it listens) leaves the kernels a Go
    search calls compiled, so a read-only pod's first Go position does not pay the compile."""
    out = subprocess.run([sys.executable, "-c", WARM_UP_WITHOUT_CACHE], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == str(["compact_planes", "group_liberties", "legal_points"])
