"""CPU cost of the dearest valid Predict requests, through the real gRPC service.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/request_cost.py [--repeat 3]

The service runs in this process over an instant network (zero logits), so what is timed is
the handler's own work: validation (replaying every move of every position), the masked
softmax and the reply. For each kind of position (renju, Go, freestyle Gomoku) it sends the
largest valid request that fits in the 1 MiB message limit (256 positions, refused by the
per-request replay limit) and the largest within the replay limit
(`validation.MAX_REQUEST_MOVES`), and prints the best of `--repeat` wall times and the status.
`--no-limit` lifts the limit, to see what those requests cost without it.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import grpc
import numpy as np

from services.api.movepred.v1 import search_pb2
from services.games.go import rules as go
from services.games.go.game import GoSearchState
from services.games.gomoku.rules import has_five
from services.search import validation
from services.search.client import SearchClient
from services.search.server import build_service

MAX_MESSAGE = 1 << 20


@dataclass(frozen=True)
class Out:
    logits: np.ndarray
    model_name: str = "instant"
    model_version: str = "1"


class Instant:
    """Zero logits at once (Gomoku [N, 225]; Go [N, S*S + 1])."""

    def infer(self, boards: np.ndarray) -> Out:
        n, size = len(boards), boards.shape[-1]
        extra = 1 if boards.ndim == 4 else 0
        return Out(np.zeros((n, size * size + extra), np.float32))


def gomoku_moves(n: int, seed: int) -> list[tuple[int, int]]:
    """`n` points, alternately black and white, leaving no five on the board."""
    rng = np.random.default_rng(seed)
    points = [(x, y) for y in range(15) for x in range(15)]
    while True:
        chosen = [points[i] for i in rng.permutation(225)[:n]]
        board = np.zeros((15, 15), np.int8)
        for i, (x, y) in enumerate(chosen):
            board[y, x] = 1 + i % 2
        if not has_five(board):
            return chosen


def renju_positions(n_moves: int, count: int) -> list[search_pb2.Position]:
    """Renju positions whose replay is legal (no forbidden black move, no five)."""
    out: list[search_pb2.Position] = []
    seed = 0
    while len(out) < count:
        p = search_pb2.Position(rule=search_pb2.RULE_RENJU, moves=[
            search_pb2.Point(x=x, y=y) for x, y in gomoku_moves(n_moves, seed)])
        seed += 1
        try:
            validation.position_to_state(p)
        except validation.InvalidRequest:
            continue
        out.append(p)
    return out


def go_game(n: int, seed: int = 0) -> search_pb2.Position:
    """A random legal 19x19 Go game of `n` moves (captures included), no pass."""
    rng = np.random.default_rng(seed)
    pos = GoSearchState(go.GoState(19, 1), 7.5)
    moves: list[int] = []
    while len(moves) < n:
        points = np.flatnonzero(pos.legal_mask()[:361])
        for p in rng.permutation(points)[:30]:
            try:
                pos = pos.play(int(p))
            except go.IllegalMove:
                continue
            moves.append(int(p))
            break
        else:
            raise RuntimeError(f"the random game stalled after {len(moves)} moves")
    return search_pb2.Position(game=search_pb2.GAME_GO, board_size=19,
                               moves=[search_pb2.Point(x=m % 19, y=m // 19) for m in moves])


def timed(client: SearchClient, positions: list[search_pb2.Position],
          repeat: int) -> tuple[float, str]:
    request = search_pb2.PredictRequest(positions=positions)
    assert request.ByteSize() <= MAX_MESSAGE, request.ByteSize()
    best, code = float("inf"), "OK"
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            client._stub.Predict(request, timeout=120)
            code = "OK"
        except grpc.RpcError as exc:
            code = exc.code().name
        best = min(best, time.perf_counter() - start)
    return best, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-limit", action="store_true",
                        help="lift the replay limit (what those requests cost without it)")
    args = parser.parse_args()
    limit = validation.MAX_REQUEST_MOVES
    if args.no_limit:
        validation.MAX_REQUEST_MOVES = 10**9  # read at each request
    started = time.perf_counter()
    renju = renju_positions(170, 8)
    game = go_game(600)
    free = [search_pb2.Position(moves=[search_pb2.Point(x=x, y=y) for x, y in gomoku_moves(
        170, seed)]) for seed in range(8)]
    cases = [
        ("renju 256 x 170 moves (fits 1 MiB)", (renju * 32)[:256]),
        (f"renju {limit // (3 * 170)} x 170 moves (replay limit)",
         (renju * 32)[:limit // (3 * 170)]),
        ("Go 256 x 600 moves (fits 1 MiB)", [game] * 256),
        (f"Go {limit // 600} x 600 moves (replay limit)", [game] * (limit // 600)),
        ("freestyle 256 x 170 moves (fits 1 MiB)", (free * 32)[:256]),
        (f"freestyle {limit // 170} x 170 moves (replay limit)", (free * 32)[:limit // 170]),
    ]
    print(f"(requests built in {time.perf_counter() - started:.1f} s; replay limit "
          f"{'lifted' if args.no_limit else validation.MAX_REQUEST_MOVES})", flush=True)
    service = build_service(Instant(), port=0, go_evaluator=Instant()).start()
    try:
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            client.predict(["h8"])
            print(f"{'request':<44} {'moves':>7} {'handler s':>10}  status")
            for name, positions in cases:
                seconds, code = timed(client, positions, args.repeat)
                moves = sum(len(p.moves) for p in positions)
                print(f"{name:<44} {moves:>7} {seconds:>10.3f}  {code}", flush=True)
    finally:
        service.stop()


if __name__ == "__main__":
    main()
