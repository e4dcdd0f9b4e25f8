"""The main job on embedded defaults, end to end, on this machine.

1. ingest the shipped self-play sample (data/sample/selfplay.rif) with the Prefect flow
2. train the small Shao et al. network briefly and publish it as version 1
3. start Triton on that repository and the gRPC search service in front of it
4. call Predict and GenMove through the command line client, print the answers
5. stop everything it started, and print the commands that serve the model it trained

Everything is written under runs/demo/ (recreated on every run), so the demo always publishes
version 1 and never touches model_repository/: that is what `make triton` serves and `make train`
publishes into (gated against its serving version), and a demo run must not put a briefly
trained model there. Training runs on one torch thread (services/trainer/train.py
DEFAULT_THREADS: with one thread per core it collapsed 20x whenever another process held a core).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flows import configure_logging  # noqa: E402  (flows/ sets Prefect defaults on import)
from flows.ingest import ingest  # noqa: E402
from flows.train import train_flow  # noqa: E402
from services import logs  # noqa: E402
from services.cli import main as cli  # noqa: E402
from services.search.server import build_server  # noqa: E402
from services.trainer.train import DEFAULT_THREADS, TrainConfig  # noqa: E402
from services.triton.client import PolicyClient  # noqa: E402
from services.triton.launcher import TritonServer  # noqa: E402

SAMPLE = ROOT / "data" / "sample" / "selfplay.rif"
DEFAULT_WORK = ROOT / "runs" / "demo"
MARKER = ".movepred-demo"  # in a --work folder the demo made, which a rerun may empty
# The demo's network: 600 steps of 64 train a policy whose tactical answers lead the rollout's
# smoke test by 3.4 logits or more on every float path measured (docs/testing.md), so the demo
# serves on every machine, not only where a shorter run happened to scrape through.
DEMO_TRAINING = TrainConfig(model="shao_f32_n2_v", max_steps=600, batch_size=64)


def step(title: str) -> float:
    print(f"\n=== {title}", flush=True)
    return time.perf_counter()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default=str(DEFAULT_WORK),
                        help="the demo's folder, emptied first (another non-empty folder is "
                             "refused)")
    parser.add_argument("--steps", type=int, default=DEMO_TRAINING.max_steps,
                        help=f"training steps (batch {DEMO_TRAINING.batch_size})")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help=f"torch threads for training (default {DEFAULT_THREADS})")
    logs.add_arguments(parser)
    parser.set_defaults(log_level="WARNING")  # the demo prints its own steps
    args = parser.parse_args(argv)
    configure_logging(args)
    work = Path(args.work)
    own = work.resolve() == DEFAULT_WORK.resolve() or (work / MARKER).exists()
    if work.exists() and (not work.is_dir() or any(work.iterdir())) and not own:
        parser.error(f"--work {work}: not empty and not a demo's folder; the demo empties its "
                     "folder first, so name a new or empty one")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / MARKER).write_text("made by scripts/demo.py; a rerun empties this folder\n")

    t = step(f"1. ingest {SAMPLE.relative_to(ROOT)}")
    manifest = ingest(sources=[str(SAMPLE)], out_dir=str(work / "dataset"))
    c = manifest["counts"][0]
    print(f"read {c['read']} games = ingested {c['ingested']} + quarantined {c['quarantined']}; "
          f"{manifest['raw_pairs']} pairs -> {manifest['rows']} unique; "
          f"splits {manifest['splits']}  ({time.perf_counter() - t:.1f} s)")

    t = step("2. train shao_f32_n2_v (policy + value head) and publish")
    out = train_flow(dataset_dir=str(work / "dataset"), repository=str(work / "model_repository"),
                     config=dataclasses.replace(DEMO_TRAINING, max_steps=args.steps,
                                                num_threads=args.threads),
                     run_dir=str(work / "train"))
    m = out["metrics"]
    print(f"published gomoku_policy version {out['version']}: validation top-1 "
          f"{m['validation']['top1']:.3f}, top-5 {m['validation']['top5']:.3f}, test top-1 "
          f"{m['test']['top1']:.3f} ({m['steps']} steps, {time.perf_counter() - t:.1f} s); "
          f"plots and report in {out['run_dir']}")

    t = step("3. start Triton and the search service")
    with TritonServer(work / "model_repository", log_path=work / "triton.log") as triton:
        print(f"Triton ready at {triton.grpc_url} in {triton.startup_time_s:.1f} s")
        client = PolicyClient(triton.grpc_url)
        server, port = build_server(client, port=0)
        server.start()
        target = f"127.0.0.1:{port}"
        print(f"search service on {target}")
        try:
            step("4. Predict after h8 h9 i8 (black opened, white answered, black extended)")
            rc = cli(["predict", "--target", target, "h8", "h9", "i8"])
            step("4. GenMove, 400 visits: black has a four h8-k8, white must block at l8")
            rc |= cli(["genmove", "--target", target, "--visits", "400",
                       "h8", "g8", "i8", "a1", "j8", "a2", "k8"])
        finally:
            server.stop(grace=2).wait()
            client.close()
    step("5. stopped Triton and the search service")
    print(next_steps(work / "model_repository"))
    return rc


def next_steps(repository: Path) -> str:
    """How to serve the model the demo trained, and how to train one into model_repository/
    (what `make triton` serves): the commands, in the order of the typical session
    (docs/reference.md)."""
    try:
        shown = repository.resolve().relative_to(ROOT)
    except ValueError:
        shown = repository
    return (f"\nThe demo's model stays in {shown}/ (`make triton` serves model_repository/, "
            "which the demo leaves alone). To serve it yourself:\n"
            f"  terminal 1: .venv/bin/python -m services.triton.server --repository {shown} "
            "--grpc-port 8001 --http-port 8000\n"
            "  terminal 2: make serve\n"
            "  terminal 3: make genmove MOVES=\"h8 h9\"\n"
            "  terminal 4: make web, then open http://127.0.0.1:8080/ (play against the engine, "
            "its policy heatmap and live analysis)\n"
            "To train and serve your own model: `make triton` (terminal 1), "
            "`make ingest && make train` (terminal 2), `make serve` (terminal 3), "
            "then `make genmove MOVES=\"h8 h9\"`.")


if __name__ == "__main__":
    raise SystemExit(main())
