"""Go match: the search service's GenMove (through the GTP front-end) against GNU Go.

    .venv/bin/python benchmarks/go_match.py [--games 4] [--visits 64] [--max-moves 200]
        [--level 1] [--komi 7.5] [--size 19] [--out runs/go_match]
        [--target HOST:PORT | --repository REPO | --checkpoint CKPT.pt --config go_res_b2c32
         | --seed 0] [--gnugo /usr/games/gnugo] [--json out.json]

Our player is `services.protocols.gtp.GtpEngine` (the `movepred gtp` engine, driven in-process)
asking the search service for `--visits` visits a move. The service is `--target` when given;
otherwise the benchmark starts one in-process on a real Triton serving ``go_policy`` from
`--repository` (its newest published version), or from a fresh temporary repository where it
publishes a ``go_res_*`` network (`--config`, with the weights of `--checkpoint` or seeded
random ones: `--seed`). The opponent is ``gnugo --mode gtp --level L --chinese-rules`` over a
pipe. Both engines get ``boardsize --size`` (default 19; the service serves 9..19 with the one
network, and GNU Go plays at most 19x19).

The referee (`play_game`) keeps its own `GoState`, asks the side to move for ``genmove`` and
tells the other side ``play``; a game ends after two passes in a row, a resignation, or
`--max-moves` moves (a short game: the position is scored as it stands). Colours alternate:
game 0 we are black, game 1 white, and so on; GNU Go gets ``--seed <game>``. The result is GNU
Go's ``final_score`` (area scoring with its dead-stone estimate), with our own all-stones-alive
area score next to it. Every game is written as SGF (our moves carry their visits, prior and
value as comments) under `--out`, with ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.games.go.game import (  # noqa: E402
    GO_MAX_SIZE,
    GO_MIN_SIZE,
    GO_SIZE,
    parse_vertex,
    vertex,
)
from services.games.go.rules import BLACK, WHITE, GoState, IllegalMove  # noqa: E402
from services.games.registry import get_game  # noqa: E402
from services.match.gtp_process import (  # noqa: E402
    DEFAULT_GNUGO,
    GtpProcess,
    GtpProcessError,
    find_gnugo,
)
from services.protocols.gtp import (  # noqa: E402
    GtpEngine,
    color_name,
    score_text,
)
from services.records.sgf_writer import go_sgf  # noqa: E402

OURS = "movepred"


class EnginePlayer:
    """Our in-process GTP engine behind the same `send` as `GtpProcess`."""

    def __init__(self, engine: GtpEngine) -> None:
        self.engine = engine

    def send(self, command: str) -> str:
        answer = self.engine.handle(command) or "="
        if answer.startswith("?"):
            raise GtpProcessError(f"{command!r}: {answer[1:].strip()}")
        return answer[1:].strip()

    def close(self) -> None:
        self.engine.close()


@dataclass
class GameResult:
    game: int
    our_color: str
    moves: int
    end: str  # "two passes", "resignation", "move cap"
    gnugo_score: str  # GNU Go's final_score, e.g. "W+87.5"
    area_score: str  # our all-alive area score of the last position
    winner: str  # "black" / "white" / "none" (by GNU Go's score)
    we_won: bool
    our_seconds_per_move: float
    gnugo_seconds_per_move: float
    sgf: str | None = None
    size: int = GO_SIZE
    history: list[tuple[int, int | None]] = field(default_factory=list, repr=False)
    comments: list[str | None] = field(default_factory=list, repr=False)


def play_game(
    ours: EnginePlayer,
    gnugo: GtpProcess,
    our_color: int,
    *,
    komi: float = 7.5,
    max_moves: int = 200,
    game: int = 0,
    size: int = GO_SIZE,
) -> GameResult:
    """One game between `ours` and `gnugo` (both already started) on a `size` board; see the
    module docstring."""
    for player in (ours, gnugo):
        player.send(f"boardsize {size}")
        player.send("clear_board")
        player.send(f"komi {komi:g}")
    state = GoState(size)
    history: list[tuple[int, int | None]] = []
    comments: list[str | None] = []
    seconds = {OURS: 0.0, "gnugo": 0.0}
    counts = {OURS: 0, "gnugo": 0}
    end = "move cap"
    winner = 0
    passes = 0
    color = BLACK
    while len(history) < max_moves:
        who, mover, other = ((OURS, ours, gnugo) if color == our_color
                             else ("gnugo", gnugo, ours))
        started = time.perf_counter()
        reply = mover.send(f"genmove {color_name(color)}").strip()
        seconds[who] += time.perf_counter() - started
        counts[who] += 1
        if reply.lower() == "resign":
            end = "resignation"
            winner = WHITE if color == BLACK else BLACK
            break
        point = parse_vertex(reply, size)
        try:
            state = state.play(point, color)
        except IllegalMove as exc:
            raise GtpProcessError(f"{who} played an illegal move {reply}: {exc}") from exc
        other.send(f"play {color_name(color)} {vertex(point, size)}")
        history.append((color, point))
        comments.append(_comment(ours) if who == OURS else None)
        passes = passes + 1 if point is None else 0
        if passes >= 2:
            end = "two passes"
            break
        color = WHITE if color == BLACK else BLACK
    area = score_text(state.score(komi))
    if end == "resignation":
        gnugo_score = f"{'B' if winner == BLACK else 'W'}+R"
    else:
        gnugo_score = gnugo.send("final_score").strip()
        winner = (BLACK if gnugo_score.upper().startswith("B+") else
                  WHITE if gnugo_score.upper().startswith("W+") else 0)
    return GameResult(
        game=game,
        our_color=color_name(our_color),
        moves=len(history),
        end=end,
        gnugo_score=gnugo_score,
        area_score=area,
        winner=color_name(winner) if winner else "none",
        we_won=winner == our_color,
        our_seconds_per_move=seconds[OURS] / max(1, counts[OURS]),
        gnugo_seconds_per_move=seconds["gnugo"] / max(1, counts["gnugo"]),
        size=size,
        history=history,
        comments=comments,
    )


def _comment(ours: EnginePlayer) -> str | None:
    r = ours.engine.last_genmove
    if r is None:
        return None
    return (f"{r.name}: {r.visits}/{r.total_visits} visits, prior {r.prior:.3f}, value "
            f"{r.value:+.3f}, {r.model_name} v{r.model_version}")


def write_sgf(result: GameResult, out: Path, komi: float, level: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    ours_black = result.our_color == "black"
    gnugo = f"GNU Go (level {level})"
    text = go_sgf(result.history, size=result.size, komi=komi,
                  black=OURS if ours_black else gnugo, white=gnugo if ours_black else OURS,
                  result=result.gnugo_score if result.gnugo_score[:2] in ("B+", "W+") else "0",
                  comments=result.comments, event=f"go_match game {result.game} ({result.end})")
    path = out / f"game-{result.game:03d}-{result.our_color}.sgf"
    path.write_text(text)
    return path


@contextmanager
def search_service(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """(target, description) of the search service to play with, started here if needed."""
    if args.target:
        yield args.target, f"search service at {args.target}"
        return
    from services.repository.versions import latest_version
    from services.search.server import build_service
    from services.trainer.publish import publish_model
    from services.triton.client import PolicyClient
    from services.triton.launcher import TritonServer

    go_model = get_game("go").default_model
    gomoku_model = get_game("gomoku").default_model
    with ExitStack() as stack:
        if args.repository:
            from services.repository.configs import dims_accept, model_io

            repository = Path(args.repository)
            version = latest_version(repository, go_model)
            if version is None:
                raise SystemExit(f"no published {go_model} version in {repository}")
            dims = model_io(repository, go_model)[0]
            if not dims_accept(dims, (4, args.size, args.size)):
                raise SystemExit(
                    f"{repository}/{go_model}/config.pbtxt takes boards {list(dims)}, not "
                    f"{args.size}x{args.size}: copy model_repository/{go_model}/config.pbtxt "
                    "(dims [4, -1, -1]) over it")
            what = f"{repository}/{go_model} v{version}"
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="go-match-")))
            repository = tmp / "model_repository"
            (repository / go_model).mkdir(parents=True)
            shutil.copyfile(ROOT / "model_repository" / go_model / "config.pbtxt",
                            repository / go_model / "config.pbtxt")
            version = publish_model(repository, game="go", config=args.config, seed=args.seed,
                                    weights=args.checkpoint)
            weights = f"checkpoint {args.checkpoint}" if args.checkpoint else \
                f"untrained, seed {args.seed}"
            what = f"{args.config} ({weights}) as {go_model} v{version}"
        triton = stack.enter_context(TritonServer(repository, models=(go_model,),
                                                  startup_timeout_s=180))
        go = PolicyClient(triton.grpc_url, go_model, timeout_s=30.0)
        gomoku = PolicyClient(triton.grpc_url, gomoku_model)  # never asked: Go games only
        service = build_service(gomoku, go_evaluator=go).start()
        stack.callback(service.stop)
        stack.callback(go.close)
        stack.callback(gomoku.close)
        yield f"127.0.0.1:{service.port}", what


def run_match(args: argparse.Namespace) -> dict:
    gnugo_bin = find_gnugo(args.gnugo)
    if gnugo_bin is None:
        raise SystemExit("gnugo not found (apt-get install -y gnugo, or pass --gnugo)")
    out = Path(args.out)
    results: list[GameResult] = []
    started = time.perf_counter()
    with search_service(args) as (target, what):
        print(f"movepred ({what}, {args.visits} visits/move) vs GNU Go level {args.level}, "
              f"{args.games} games, {args.size}x{args.size}, komi {args.komi:g}, at most "
              f"{args.max_moves} moves",
              flush=True)
        for game in range(args.games):
            our_color = BLACK if game % 2 == 0 else WHITE
            ours = EnginePlayer(GtpEngine(target, visits=args.visits, timeout_s=300))
            gnugo = GtpProcess([gnugo_bin, "--mode", "gtp", "--level", str(args.level),
                                "--chinese-rules", "--seed", str(game + 1)])
            try:
                result = play_game(ours, gnugo, our_color, komi=args.komi,
                                   max_moves=args.max_moves, game=game, size=args.size)
            finally:
                ours.close()
                gnugo.close()
            result.sgf = str(write_sgf(result, out, args.komi, args.level))
            results.append(result)
            print(f"game {game}: movepred {result.our_color:5s} {result.moves:3d} moves "
                  f"({result.end}); GNU Go score {result.gnugo_score}, area {result.area_score}"
                  f" -> {'WIN' if result.we_won else 'loss'}; s/move movepred "
                  f"{result.our_seconds_per_move:.2f} gnugo {result.gnugo_seconds_per_move:.2f}",
                  flush=True)
    wins = sum(r.we_won for r in results)
    summary = {
        "opponent": f"GNU Go level {args.level} ({gnugo_bin})",
        "ours": what,
        "visits": args.visits,
        "games": len(results),
        "wins": wins,
        "losses": len(results) - wins,
        "score": f"{wins}-{len(results) - wins}",
        "max_moves": args.max_moves,
        "komi": args.komi,
        "size": args.size,
        "seconds": round(time.perf_counter() - started, 1),
        "results": [{k: v for k, v in asdict(r).items() if k not in ("history", "comments")}
                    for r in results],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    print(f"movepred {wins} - {len(results) - wins} GNU Go (level {args.level}); "
          f"SGFs and summary.json in {out}", flush=True)
    return summary


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", type=int, default=4)
    p.add_argument("--visits", type=int, default=64, help="GenMove visits per move")
    p.add_argument("--max-moves", type=int, default=200, help="move cap (then scored)")
    p.add_argument("--level", type=int, default=1, help="GNU Go level")
    p.add_argument("--komi", type=float, default=7.5)
    p.add_argument("--size", type=int, default=GO_SIZE, choices=range(GO_MIN_SIZE, GO_MAX_SIZE + 1),
                   metavar=f"{GO_MIN_SIZE}..{GO_MAX_SIZE}",
                   help=f"board size for both engines (default {GO_SIZE})")
    p.add_argument("--out", default=str(ROOT / "runs" / "go_match"), help="SGFs and summary")
    p.add_argument("--json", default=None, help="also write the summary here")
    p.add_argument("--gnugo", default=None, help=f"gnugo binary (default: PATH or {DEFAULT_GNUGO})")
    src = p.add_argument_group("our player (default: a fresh untrained go_res_b2c32)")
    src.add_argument("--target", default=None, help="a running search service host:port")
    src.add_argument("--repository", default=None,
                     help="Triton repository with a published go_policy")
    src.add_argument("--config", default="go_res_b2c32", help="Go network configuration")
    src.add_argument("--checkpoint", type=Path, default=None, help="trainer checkpoint")
    src.add_argument("--seed", type=int, default=0, help="weights seed of an untrained network")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    run_match(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
