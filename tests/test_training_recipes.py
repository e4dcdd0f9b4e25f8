"""Every recipe the suite serves a trained network from passes the rollout's tactical smoke
check with `MARGIN_LOGITS` to spare, on each float path this machine has (each run in a process
of its own, with torch's, oneDNN's and MKL's instruction sets capped: they read it at start-up).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.training_recipes import (
    CAPPED_FLOAT_PATHS,
    FLOAT_PATH_VARIABLES,
    MARGIN_LOGITS,
    NATIVE,
    SERVED_RECIPES,
    float_path_environment,
    float_paths,
    margins_in_process,
    write_sample_dataset,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # 4 to 6 training runs


def test_float_paths_run_from_default_to_native() -> None:
    paths = float_paths()
    assert paths[-1] == NATIVE and paths[:-1] == list(CAPPED_FLOAT_PATHS)[:len(paths) - 1]
    native = float_path_environment(NATIVE, {"ATEN_CPU_CAPABILITY": "avx2", "HOME": "/h"})
    assert native == {"HOME": "/h"}  # nothing capped, whatever the caller's environment says
    capped = float_path_environment("default", {"MKL_ENABLE_INSTRUCTIONS": "AVX2"})
    assert {k: capped[k] for k in FLOAT_PATH_VARIABLES} == CAPPED_FLOAT_PATHS["default"]


def test_served_recipes_pass_the_smoke_test_with_margin_on_every_float_path(
        tmp_path: Path) -> None:
    dataset = write_sample_dataset(tmp_path / "dataset")
    runs = [(recipe, path) for recipe in SERVED_RECIPES for path in float_paths()]
    with ThreadPoolExecutor(max_workers=2) as pool:  # one torch thread each, on 2 cores
        seen = list(pool.map(lambda run: margins_in_process(run[0], dataset, run[1]), runs))
    for (recipe, path), result in zip(runs, seen, strict=True):
        print("RECIPE-MARGINS", json.dumps(result))
        if path != NATIVE:  # torch ran the kernels asked for
            assert result["aten"] == CAPPED_FLOAT_PATHS[path]["ATEN_CPU_CAPABILITY"], result
        assert result["passed"], result["detail"]
        low = {name: round(m, 2) for name, m in result["margins"].items() if m < MARGIN_LOGITS}
        assert not low, (f"{recipe} on {path}: tactical answers within {MARGIN_LOGITS} logits "
                         f"of the smoke test's limit: {low}")
