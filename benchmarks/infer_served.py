"""The paper's move-order recipe through the service (a StartInferSequence operation over
Triton) against the same inference in one process (the TorchScript network called directly).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/infer_served.py \
        --sets runs/infer_rank/sets.json --position Pro20m:0 [--position Pro40m:0] \
        [--weights runs/go9/train/model.pt] [--iterations 0] [--restarts 5] [--seed 0] \
        [--skip-local] [--json out.json]

Publishes the Go network (`--weights`, a trainer checkpoint or model; without it an untrained
`go_res_b2c32_v`, seed 0: the same work per board, not the same orders) into a temporary
repository, starts Triton on it and the search service in this process, and for each position
(a set of `scripts/infer_rank_sets.py sets` and an index in it; its first moves' stones are
the input): starts an operation with the paper's recipe (iterations 0: 5,000 x (stones / 20)^2
per restart, 5 restarts), polls it every second until it is done, then runs `infer_order` on the
published TorchScript network in this process with the same stones, parameters and seed.
Printed per position and path: wall seconds, CPU seconds (served: this process, which runs the
service's annealing, plus Triton's process group, which runs the network; in process: this
process), evaluator calls and boards, the geometric mean, and whether the two paths found the
same order (Triton's and the in-process network's logits may differ in the last bits, which
can turn an annealing's acceptance).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

SIZE = 19  # the sets' board


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of every live process of the process group `pgid`."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=Path, required=True)
    parser.add_argument("--position", action="append", required=True,
                        help="SET:INDEX, e.g. Pro20m:0 (repeatable)")
    parser.add_argument("--weights", type=Path, default=None)
    parser.add_argument("--iterations", type=int, default=0)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--skip-local", action="store_true",
                        help="only the served path")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # Triton's backend inherits it
    torch.set_num_threads(1)

    from services.api.movepred.v1 import search_pb2
    from services.games.registry import get_game
    from services.move_order.annealing import AnnealingParams, infer_order
    from services.move_order.problem import problem_from_stones
    from services.search.client import SearchClient
    from services.search.server import build_service
    from services.trainer.publish import publish_model
    from services.triton.client import PolicyClient
    from services.triton.launcher import TritonServer

    go = get_game("go")
    sets = json.loads(args.sets.read_text())["sets"]
    cases = []
    for text in args.position:
        name, index = text.split(":")
        game = sets[name][int(index)]
        moves = game["moves"]
        cases.append((text, game["game_id"], moves[0::2], moves[1::2]))

    rows = []
    with tempfile.TemporaryDirectory(prefix="infer-served-") as tmp:
        repository = Path(tmp) / "model_repository"
        if args.weights is not None:
            publish_model(repository, game="go", weights=args.weights, model_name="go_policy")
        else:
            publish_model(repository, config="go_res_b2c32_v", seed=0, model_name="go_policy")
        (model_pt,) = repository.glob("go_policy/*/model.pt")
        server = TritonServer(repository, models=["go_policy"],
                              log_path=Path(tmp) / "tritonserver.log", startup_timeout_s=180)
        with server:
            pgid = os.getpgid(server.pid) if server.pid is not None else None
            policy = PolicyClient(server.grpc_url, "go_policy", timeout_s=60.0, game=go)
            service = build_service({go.name: policy}).start()
            try:
                with SearchClient(f"127.0.0.1:{service.port}") as client:
                    client.predict(search_pb2.Position(game=search_pb2.GAME_GO))  # warm up
                    for label, game_id, black, white in cases:
                        row = {"position": label, "game_id": game_id,
                               "stones": len(black) + len(white)}
                        wall, cpu = time.perf_counter(), time.process_time()
                        triton = group_cpu_seconds(pgid) if pgid is not None else 0.0
                        started = client.start_infer_sequence(
                            [(p % SIZE, p // SIZE) for p in black],
                            [(p % SIZE, p // SIZE) for p in white], game="go",
                            iterations=args.iterations, restarts=args.restarts,
                            seed=args.seed)
                        done = client.wait_infer_sequence(started.operation_id,
                                                          poll_s=args.poll)
                        served = done.result
                        row["served"] = {
                            "state": search_pb2.OperationState.Name(done.state),
                            "wall_s": time.perf_counter() - wall,
                            "service_cpu_s": time.process_time() - cpu,
                            "triton_cpu_s": (group_cpu_seconds(pgid) - triton
                                             if pgid is not None else None),
                            "steps": done.steps_done, "iterations": served.iterations,
                            "calls": served.evaluator_calls, "boards": served.boards,
                            "geometric_mean": served.geometric_mean,
                            "greedy_geometric_mean": served.greedy_geometric_mean}
                        print(json.dumps(row), flush=True)
                        if not args.skip_local:
                            local = PolicyFromFile(model_pt)
                            problem = problem_from_stones(go, black, white)
                            params = AnnealingParams(iterations=args.iterations or None,
                                                     restarts=args.restarts, seed=args.seed)
                            wall, cpu = time.perf_counter(), time.process_time()
                            result = infer_order(problem, local, params)
                            row["in_process"] = {
                                "wall_s": time.perf_counter() - wall,
                                "cpu_s": time.process_time() - cpu,
                                "calls": result.calls, "boards": result.boards,
                                "geometric_mean": result.best.geometric_mean}
                            row["same_order"] = [problem.name(m) for m in result.best.order] \
                                == [m.name for m in served.moves]
                            print(json.dumps(row), flush=True)
                        rows.append(row)
            finally:
                service.stop()
                policy.close()
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))


@dataclass(frozen=True)
class Output:
    logits: np.ndarray
    model_name: str
    model_version: str = "torchscript"


class PolicyFromFile:
    """The published TorchScript network in this process (frozen, one torch thread), as a
    `PolicyEvaluator`: what scripts/infer_eval.py runs the evaluation sets with."""

    def __init__(self, path: Path) -> None:
        self.model = torch.jit.freeze(torch.jit.load(str(path), map_location="cpu").eval())
        self.name = str(path)

    def infer(self, boards: np.ndarray) -> Output:
        x = torch.from_numpy(np.ascontiguousarray(boards, dtype=np.int8))
        with torch.inference_mode():
            out = self.model(x)
        logits = out[0] if isinstance(out, tuple) else out
        return Output(logits.to(torch.float32).numpy(), self.name)


if __name__ == "__main__":
    main()
