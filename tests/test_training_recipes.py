"""Every recipe the suite serves a trained network from passes the rollout's tactical smoke
check with `MARGIN_LOGITS` to spare, under each float path this machine supports (each run in
its own process, `ATEN_CPU_CAPABILITY` set: torch reads it once, at start-up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.training_recipes import (
    MARGIN_LOGITS,
    ROOT,
    SERVED_RECIPES,
    X86_FLOAT_PATHS,
    float_paths,
    native_float_path,
    write_sample_dataset,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # 6 training runs


def check_in_process(recipe: str, path: str, dataset: Path) -> dict:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": path, "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "tests.training_recipes", recipe, str(dataset)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_float_paths_run_from_default_to_native() -> None:
    paths = float_paths()
    assert paths[0] == "default" and paths[-1] == native_float_path()
    if native_float_path() in X86_FLOAT_PATHS:
        assert paths == list(X86_FLOAT_PATHS[:len(paths)])


def test_served_recipes_pass_the_smoke_test_with_margin_on_every_float_path(
        tmp_path: Path) -> None:
    dataset = write_sample_dataset(tmp_path / "dataset")
    runs = [(recipe, path) for recipe in SERVED_RECIPES for path in float_paths()]
    with ThreadPoolExecutor(max_workers=2) as pool:  # one torch thread each, on 2 cores
        seen = list(pool.map(lambda run: check_in_process(*run, dataset), runs))
    for (recipe, path), result in zip(runs, seen, strict=True):
        print("RECIPE-MARGINS", json.dumps(result))
        assert result["float_path"] == path, result  # torch ran the kernels asked for
        assert result["passed"], result["detail"]
        low = {name: round(m, 2) for name, m in result["margins"].items() if m < MARGIN_LOGITS}
        assert not low, (f"{recipe} under {path}: tactical answers within {MARGIN_LOGITS} logits "
                         f"of the smoke test's limit: {low}")
