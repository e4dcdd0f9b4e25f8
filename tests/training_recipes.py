"""The training recipes whose networks the suite serves, and how far each network stands from
failing the rollout's tactical smoke check, on any of this machine's float paths.

Why: a freshly trained network that must be served passes the smoke test (take a five, block a
four among the policy's 5 best points) only if training went well enough, and training is
chaotic: torch picks its CPU kernels by the processor (`ATEN_CPU_CAPABILITY`: default, avx2,
avx512), and another kernel's rounding sends the run down another trajectory, as another seed
would. A recipe that passes by a fraction of a logit on one machine fails on the next (400 steps
of 32 did). So a test that needs a served network trains one of `SERVED_RECIPES`, each
checked by `tests/test_training_recipes.py` under every float path this machine supports to
lead the smoke test by `MARGIN_LOGITS` or more on every position.

Run one check by hand (prints JSON; an optional seed replaces the recipe's own; the float path
`default`, `avx2` or `native`, default native):
    .venv/bin/python -m tests.training_recipes "make demo" DATASET [SEED [FLOAT_PATH]]
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import torch

from scripts.demo import DEMO_TRAINING
from services.dataset.build import deduplicate
from services.dataset.shards import SCHEMA_VERSION, SPLITS, atomic_write_json, write_split_shards
from services.games.gomoku.replay import source_pairs
from services.games.registry import get_game
from services.records.rif import read_rif
from services.trainer.train import TrainConfig, train
from services.triton.smoke import tactical_margins, tactics_check

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_RIF = ROOT / "data" / "sample" / "selfplay.rif"

# The lead over the smoke test's limit every tactical answer keeps, in logits (e^2: the answer
# is at least 7x as likely as the 5th-best other point). Measured on the sample, 4 to 6 seeds
# on each float path of an AVX-512 machine (docs/testing.md): make train's defaults >= 5.3, demo
# >= 3.4; 400 steps of 32 went down to 0.19 and failed on an AVX2 machine.
MARGIN_LOGITS = 2.0

SERVED_RECIPES: dict[str, TrainConfig] = {
    # `make ingest && make train` as the typical session runs them: the trainer's defaults
    "make train": TrainConfig(),
    # scripts/demo.py (`make demo`), also the network of the train-rollout and end-to-end tests
    "make demo": DEMO_TRAINING,
}

# A float path is the instruction-set level of all three libraries whose kernels training runs
# on: torch's own (ATen), oneDNN's (convolutions) and MKL's (matrix products); each picks the
# CPU's best unless capped, and each changes the trained network (seen here). The x86 levels
# below a machine's own, lowest first; "native" caps nothing.
CAPPED_FLOAT_PATHS: dict[str, dict[str, str]] = {
    "default": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}
NATIVE = "native"
FLOAT_PATH_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def float_path_environment(path: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (this process's environment) with the variables of float path `path` set, and
    those of any other path removed."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k not in FLOAT_PATH_VARIABLES}
    return {**env, **CAPPED_FLOAT_PATHS.get(path, {})}


def native_aten_capability() -> str:
    """torch's own kernel level on this machine when nothing caps it (asked in a process of
    its own: this one may run capped)."""
    run = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu."
                          "get_cpu_capability().lower())"], env=float_path_environment(NATIVE),
                         capture_output=True, text=True, timeout=120, check=True)
    return run.stdout.strip()


def float_paths() -> list[str]:
    """This machine's float paths: every capped level below its own, lowest first, then
    `NATIVE`."""
    native = native_aten_capability()
    levels = list(CAPPED_FLOAT_PATHS)
    below = levels[:levels.index(native)] if native in levels else (
        ["default"] if native != "default" else [])
    return [*below, NATIVE]


def aten_capability() -> str:
    """torch's own kernel level in this process."""
    return torch.backends.cpu.get_cpu_capability().lower()


def write_dataset(out: Path, records: Iterable[object]) -> Path:
    """Shards and manifest of `records` (what `make ingest` writes for them), without Prefect."""
    out.mkdir(parents=True, exist_ok=True)
    files = write_split_shards(deduplicate([source_pairs("sample", records).pairs]), out)
    atomic_write_json({"schema_version": SCHEMA_VERSION, "files": files,
                       "splits": {s: sum(f["rows"] for f in files if f["split"] == s)
                                  for s in SPLITS}}, out / "manifest.json")
    return out


def write_sample_dataset(out: Path) -> Path:
    """The shipped sample's dataset (`make ingest` with no sources)."""
    return write_dataset(out, read_rif(SAMPLE_RIF))


def margins_after_training(recipe: str, dataset: Path, seed: int | None = None) -> dict:
    """Train `SERVED_RECIPES[recipe]` on `dataset` as its command does (with `seed` instead of
    its own, to see the spread over seeds) and measure the network on the game's tactical
    positions: the smoke test's verdict and each position's margin."""
    config = SERVED_RECIPES[recipe]
    if seed is not None:
        config = dataclasses.replace(config, seed=seed)
    result = train(dataset, config, progress=False)
    game = get_game("gomoku")
    boards = np.stack([b for b, _ in game.tactical_positions().values()])
    with torch.inference_mode():
        out = result.model.eval()(torch.from_numpy(boards))
    logits = (out[0] if isinstance(out, (tuple, list)) else out).numpy()
    check = tactics_check(game, logits)
    return {"recipe": recipe, "seed": result.config.seed, "aten": aten_capability(),
            "passed": check.passed,
            "detail": check.detail, "margins": tactical_margins(game, logits)}


def margins_in_process(recipe: str, dataset: Path, path: str, seed: int | None = None) -> dict:
    """`margins_after_training` in a process of its own on float path `path` (the libraries
    read their caps once, at start-up); the result also names the path."""
    run = subprocess.run([sys.executable, "-m", "tests.training_recipes", recipe, str(dataset),
                          *([] if seed is None else [str(seed)])], cwd=ROOT,
                         env={**float_path_environment(path), "OMP_NUM_THREADS": "1"},
                         capture_output=True, text=True, timeout=900)
    if run.returncode:
        raise RuntimeError(f"{recipe} on {path}: {run.stderr[-3000:]}")
    return {**json.loads(run.stdout.strip().splitlines()[-1]), "float_path": path}


if __name__ == "__main__":
    if len(sys.argv) > 4:  # a float path: run in a process capped to it
        print(json.dumps(margins_in_process(sys.argv[1], Path(sys.argv[2]), sys.argv[4],
                                            int(sys.argv[3]))))
    else:
        print(json.dumps(margins_after_training(sys.argv[1], Path(sys.argv[2]),
                                                int(sys.argv[3]) if len(sys.argv) > 3 else None)))
