"""Large-batch throughput: boards per second answered by Triton (python backend running the
TorchScript file) against the same TorchScript network called in raw torch in this process (the
baseline, measured in the same run on the same device). Goal: Triton >= 0.8 of raw torch.

    python benchmarks/triton_throughput.py [--model shao_f128_n4] [--batch 256]
        [--concurrency 1,2,4,8] [--instances 1,2] [--seconds 8] [--max-batch-size N]
        [--queue-delay-us D] [--json out.json]

Raw torch, two figures: `torch (host copies)` does per batch what the backend's stub does
around the network (int8 boards from a numpy array to the device, the forward pass under
`inference_mode`, the logits back into a numpy array): the baseline of the ratio. `torch
(device only)` keeps inputs and outputs on the device: the network's own ceiling, printed for
reference. Triton: C client threads, each with its own `PolicyClient` (gRPC), send batches of
`--batch` boards back to back for `--seconds`; Triton's dynamic batcher may merge concurrent
requests up to the config's max_batch_size. Each `--instances` value restarts Triton with that
many stub processes (KIND_GPU on a GPU, KIND_CPU otherwise). The model has random weights
(throughput does not depend on them); the boards are random positions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from serving import _ints, tune_config  # noqa: E402

from services.defaults import MODEL_FILE  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.trainer.publish import publish_model  # noqa: E402
from services.triton.client import PolicyClient  # noqa: E402
from services.triton.launcher import TritonServer  # noqa: E402


def random_boards(n: int, size: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.choice(np.array([0, 1, 2], np.int8), size=(n, size, size), p=[0.8, 0.1, 0.1])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def torch_rate(model_file: Path, boards: np.ndarray, device: torch.device, seconds: float,
               host_copies: bool) -> float:
    """Boards/s of the TorchScript network called back to back in this process."""
    model = torch.jit.load(str(model_file), map_location=device)
    model.eval()
    on_device = torch.from_numpy(boards).to(device)

    def step() -> None:
        with torch.inference_mode():
            x = torch.from_numpy(boards).to(device, non_blocking=True) if host_copies \
                else on_device
            out = model(x)
            y = out[0] if isinstance(out, (tuple, list)) else out
            if host_copies:
                y.to(device="cpu", dtype=torch.float32).numpy()

    for _ in range(5):
        step()
    _sync(device)
    n = 0
    start = time.perf_counter()
    while True:
        step()
        n += 1
        if n % 4 == 0:
            _sync(device)
            if time.perf_counter() - start >= seconds:
                break
    return n * len(boards) / (time.perf_counter() - start)


def triton_rate(url: str, boards: np.ndarray, concurrency: int, seconds: float) -> float:
    """Boards/s answered by Triton to `concurrency` threads sending `boards` back to back."""
    counts = [0] * concurrency
    errors: list[BaseException] = []
    start_gate = threading.Barrier(concurrency + 1)
    stop_at = [0.0]

    def worker(i: int) -> None:
        client = PolicyClient(url)
        try:
            for _ in range(3):  # warm-up, untimed
                client.infer(boards)
            start_gate.wait()
            while time.perf_counter() < stop_at[0]:
                client.infer(boards)
                counts[i] += len(boards)
        except BaseException as exc:  # reported below: a failed level is not a figure
            errors.append(exc)
            start_gate.abort()
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True)
               for i in range(concurrency)]
    for t in threads:
        t.start()
    stop_at[0] = float("inf")
    with contextlib.suppress(threading.BrokenBarrierError):
        start_gate.wait()
    start = time.perf_counter()
    stop_at[0] = start + seconds
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"Triton level C={concurrency} failed: {errors[0]}") from errors[0]
    return sum(counts) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="shao_f128_n4", help="Gomoku model config")
    parser.add_argument("--batch", type=int, default=256, help="boards per request")
    parser.add_argument("--concurrency", type=_ints, default=[1, 2, 4, 8])
    parser.add_argument("--instances", type=_ints, default=[1, 2])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--max-batch-size", type=int, default=None,
                        help="rewrite the config's max_batch_size (default: as published)")
    parser.add_argument("--queue-delay-us", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (baseline)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "none"
    print(f"machine: {platform.node()} {platform.machine()} cpus={os.cpu_count()} gpu={gpu} "
          f"torch {torch.__version__} load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} model={args.model} "
          f"batch={args.batch}", flush=True)
    game = get_game("gomoku")
    boards = random_boards(args.batch, game.default_size)
    figures: dict = {"model": args.model, "batch": args.batch, "device": gpu, "triton": []}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        version = publish_model(repo, config=args.model)  # every game's one publish path
        model_file = repo / game.default_model / str(version) / MODEL_FILE
        for host_copies, name in ((True, "torch_host"), (False, "torch_device")):
            rate = torch_rate(model_file, boards, device, args.seconds, host_copies)
            figures[name] = rate
            print(f"{name:14s} {rate:12,.0f} boards/s", flush=True)
        baseline = figures["torch_host"]
        kind = "KIND_GPU" if device.type == "cuda" else "KIND_CPU"
        for instances in args.instances:
            settings = tune_config(repo, game.default_model, instances, kind,
                                   args.queue_delay_us, args.max_batch_size)
            print(f"triton: {settings}", flush=True)
            with TritonServer(repo, log_path=Path(tmp) / f"triton-{instances}.log") as triton:
                for c in args.concurrency:
                    rate = triton_rate(triton.grpc_url, boards, c, args.seconds)
                    figures["triton"].append({"instances": instances, "concurrency": c,
                                              "boards_per_s": rate,
                                              "ratio": rate / baseline})
                    print(f"triton x{instances} C={c:<3d} {rate:12,.0f} boards/s  "
                          f"{rate / baseline:.3f} of torch (host copies)  "
                          f"{rate / figures['torch_device']:.3f} of device-only", flush=True)
    best = max(figures["triton"], key=lambda r: r["boards_per_s"])
    figures["best"] = best
    print(f"best: triton x{best['instances']} C={best['concurrency']}: "
          f"{best['boards_per_s']:,.0f} boards/s = {best['ratio']:.3f} of raw torch "
          f"(goal >= 0.8)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
