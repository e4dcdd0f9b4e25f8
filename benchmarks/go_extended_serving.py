"""What serving Go's extended input costs: Predict through the gRPC search service, basic vs
extended 19x19 networks of the same trunk, measured in one run on one Triton.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/go_extended_serving.py \
        [--basic go_res_b2c32_v] [--extended go_res_b2c32_x_v] [--requests 200] [--batch 32] \
        [--batches 30] [--rounds 3]

Publishes an untrained `--basic` network as ``go_policy`` and an untrained `--extended` one as
``go_policy_extended`` (the model of the extended encoder, whose config declares it) into a
temporary repository, starts one Triton serving both and two search services in this process,
one per model. Then, in `--rounds` rounds that alternate the two (so both see the same machine
load), it times: single-position Predict latency (the median of `--requests` requests over
positions of random legal games, 0..300 moves), and throughput (positions per second of
`--batches` Predict requests of `--batch` positions each, one Triton call each). The extended
service computes each batch's tactical channels (`Game.encode_inputs`) and sends 10 int8
channels instead of 4; its network's first layer sees 44 planes instead of 17. The encoding
alone is timed too (the median per call: of one position, over `--batch` positions, and of
`--batch` positions at once). Prints each figure for
both, the best round, and the ratio extended / basic.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from services.api.movepred.v1 import search_pb2
from services.games.go.game import GO, GoSearchState
from services.games.go.rules import GoState, IllegalMove

EXTENDED = "extended"
SIZE = 19


def random_positions(count: int, seed: int = 0) -> list[tuple[search_pb2.Position,
                                                              GoSearchState]]:
    """`count` positions of random legal 19x19 games (0..300 moves, no pass), as requests and
    as states."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        state, moves = GoSearchState(GoState(SIZE), 7.5), []
        for _ in range(int(rng.integers(0, 301))):
            points = np.flatnonzero(state.legal_mask()[:-1])
            for p in rng.permutation(points)[:20]:
                try:
                    state = state.play(int(p))
                except IllegalMove:
                    continue
                moves.append(int(p))
                break
            else:
                break
        request = search_pb2.Position(game=search_pb2.GAME_GO, board_size=SIZE, moves=[
            search_pb2.Point(x=m % SIZE, y=m // SIZE) for m in moves])
        out.append((request, state))
    return out


def latency_ms(client, positions: list[search_pb2.Position]) -> float:
    """Median wall time of one single-position Predict, in ms."""
    times = []
    for p in positions:
        start = time.perf_counter()
        client.predict(p, top_k=5)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def throughput(client, batches: list[list[search_pb2.Position]]) -> float:
    """Positions per second of Predict requests of a batch each, one after another."""
    start = time.perf_counter()
    for batch in batches:
        client.predict_many(batch, top_k=1)
    return sum(len(b) for b in batches) / (time.perf_counter() - start)


def encode_ms(boards: np.ndarray, repeat: int = 50) -> float:
    """Median wall time of `GO.encode_inputs(boards, "extended")`, in ms."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        GO.encode_inputs(boards, EXTENDED)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def encode_one_ms(boards: np.ndarray, repeat: int = 20) -> float:
    """Median over `boards` of one position's encoding time (`encode_ms`), in ms."""
    return statistics.median(encode_ms(b[None], repeat) for b in boards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--basic", default="go_res_b2c32_v")
    parser.add_argument("--extended", default="go_res_b2c32_x_v")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # Triton's stub inherits it
    torch.set_num_threads(1)

    from services.models.configs import spec
    from services.search.client import SearchClient
    from services.search.server import build_service
    from services.trainer.publish import publish_model
    from services.triton.client import PolicyClient
    from services.triton.launcher import TritonServer

    if spec(args.extended).encoder != EXTENDED or spec(args.basic).encoder == EXTENDED:
        parser.error(f"--basic takes the basic input and --extended the {EXTENDED!r} one")
    models = {"basic": (args.basic, GO.model_name()),
              EXTENDED: (args.extended, GO.model_name(EXTENDED))}
    started = time.perf_counter()
    cases = random_positions(args.requests + args.batch * 4, seed=0)
    singles = [r for r, _ in cases[:args.requests]]
    pool = [r for r, _ in cases]
    batches = [[pool[(i * args.batch + j) % len(pool)] for j in range(args.batch)]
               for i in range(args.batches)]
    boards = np.stack([GO.network_input(s) for _, s in cases[:args.batch]])
    print(f"({len(cases)} positions built in {time.perf_counter() - started:.1f} s; "
          f"basic {args.basic} as {models['basic'][1]}, extended {args.extended} as "
          f"{models[EXTENDED][1]}; torch threads 1)", flush=True)

    with tempfile.TemporaryDirectory(prefix="go-extended-bench-") as tmp:
        repository = Path(tmp) / "model_repository"
        for config, name in models.values():
            publish_model(repository, config=config, seed=0, model_name=name)
        server = TritonServer(repository, models=[n for _, n in models.values()],
                              log_path=Path(tmp) / "tritonserver.log", startup_timeout_s=180)
        with server:
            policies, services, clients = {}, {}, {}
            try:
                for kind, (_, name) in models.items():
                    policies[kind] = PolicyClient(server.grpc_url, name, timeout_s=60.0, game=GO)
                    services[kind] = build_service({GO.name: policies[kind]}).start()
                    clients[kind] = SearchClient(f"127.0.0.1:{services[kind].port}")
                for kind, client in clients.items():  # warm up: model load, first shapes
                    r = client.predict(singles[0])
                    assert r.model_name == models[kind][1], r.model_name
                    client.predict_many(batches[0], top_k=1)
                    latency_ms(client, singles[:20])
                results: dict[str, dict[str, list[float]]] = {
                    k: {"latency": [], "throughput": []} for k in models}
                for rnd in range(args.rounds):
                    order = list(models) if rnd % 2 == 0 else list(models)[::-1]
                    for kind in order:
                        results[kind]["latency"].append(latency_ms(clients[kind], singles))
                        results[kind]["throughput"].append(throughput(clients[kind], batches))
                    print(f"round {rnd + 1}: " + "; ".join(
                        f"{k} {results[k]['latency'][-1]:.2f} ms, "
                        f"{results[k]['throughput'][-1]:.0f} pos/s" for k in models),
                        flush=True)
            finally:
                for client in clients.values():
                    client.close()
                for service in services.values():
                    service.stop(0)
                for policy in policies.values():
                    policy.close()

    one, many = encode_one_ms(boards), encode_ms(boards)
    basic_lat, ext_lat = min(results["basic"]["latency"]), min(results[EXTENDED]["latency"])
    basic_tp = max(results["basic"]["throughput"])
    ext_tp = max(results[EXTENDED]["throughput"])
    print(f"\n{'figure (best of ' + str(args.rounds) + ' rounds)':<52} {'basic':>9} "
          f"{'extended':>9} {'ratio':>7}")
    print(f"{'Predict latency, 1 position, median (ms)':<52} {basic_lat:>9.2f} {ext_lat:>9.2f} "
          f"{ext_lat / basic_lat:>7.2f}")
    print(f"{f'Predict throughput, {args.batch} positions/request (pos/s)':<52} "
          f"{basic_tp:>9.0f} {ext_tp:>9.0f} {ext_tp / basic_tp:>7.2f}")
    print(f"{'extended encoding alone, 1 position (ms)':<52} {'':>9} {one:>9.3f}")
    print(f"{f'extended encoding alone, {args.batch} positions (ms)':<52} {'':>9} {many:>9.3f}")


if __name__ == "__main__":
    main()
