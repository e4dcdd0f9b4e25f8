"""Search tree speed: the interpreted PUCT tree (`services.search.interpreted`) against the compiled
one (`services.search.mcts`), in the same run.

1. Tree work per playout: a zero-cost evaluator (precomputed uniform logits, no value), the
   same position and budget for both trees, Gomoku 15x15 and Go 19x19; µs of CPU per playout
   and the ratio, and the compiled tree's through a fresh cache of answers (every board a
   miss: what the cache costs). Numba compiles before the clock starts (a warm-up search).
2. GenMove playouts/s with a network in this process on CPU (torch threads 1): the Gomoku
   network `--config` (default the served one) with seeded random weights, scripted (or a
   trained TorchScript file, `--model`), searched by both trees through one evaluator at the
   service's batch size, `--repeats` runs each, interleaved; best-of, spread and ratio,
   checked to give the same answer. Also where the compiled tree's time goes: the network's
   time per board, measured inside the evaluator's calls, and the ratio no tree could beat
   with it (the interpreted tree's time per playout over the network's per playout). The
   compiled tree is run twice: asking the network directly, and through a cache of its
   answers (`services.evaluator_cache`, fresh for each run: what one search saves by
   transpositions), with the share of boards it answered.
3. GenMove along a game: `--line-moves` consecutive positions of one game (each position the
   previous one plus the move searched there), a fresh tree every move as a match's or
   self-play's `SearchEngine` searches, both sides by one evaluator; the interpreted and the
   compiled tree asking the network, and the compiled one through a cache kept along the line
   (emptied before each of `--line-repeats` runs); playouts/s over the whole line, checked to
   play the same line, and the cache's hit rate. Then the goal's ratio: the old service path
   (the interpreted tree asking the network directly) against the new one (the compiled tree
   through the cache kept along the game), both running the network as the service does
   (`NetworkPath`: the TorchScript file, `torch.inference_mode`, as `LocalEvaluator` and the
   Triton backend's model.py run it; part 4 found no faster CPU path that keeps the answers).
   Last, the line as the service plays it with tree reuse (`TreeCache`): each search continues
   the subtree of the move it chose, so part of each answer's visits come from the search
   before it; its rate counts every visit behind the answers (reused ones included), since a
   GenMove of N visits answers from N either way. It plays another line (reuse changes the
   trees), so it is not checked against the others. With `--int8`, the goal's ratio again with
   the new path asking an int8 copy of the network (`movepred quantize`'s), the old one the
   float network: another network, so its line is not checked, and its agreement is printed.
4. The network's forward pass alone, µs of CPU a board at batch `--forward-batches`, the
   TorchScript file as the service runs it against what torch offers on the CPU for the same
   weights: `no_grad` instead of `inference_mode`, `torch.jit.freeze`, freeze +
   `torch.jit.optimize_for_inference` (oneDNN's prepacked convolutions), channels-last weights,
   and oneDNN's convolutions computing in bfloat16 (`torch.backends.mkldnn.conv.fp32_precision`,
   a reduced precision: its answers differ); each variant's largest difference from the served
   outputs and its share of boards with the same best move, on the positions of random games.

Usage: .venv/bin/python benchmarks/search_speed.py [--visits 3200] [--genmove-visits 800]
       [--repeats 5] [--line-moves 12] [--line-repeats 3] [--model model.pt]
       [--forward-batches 1 4 16 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.evaluator_cache import CachingEvaluator, EvalCache  # noqa: E402
from services.games.go.game import GO  # noqa: E402
from services.games.gomoku.rules import GomokuState  # noqa: E402
from services.search import interpreted as reference_search  # noqa: E402
from services.search import mcts  # noqa: E402
from services.search.puct import run_search  # noqa: E402


@dataclass(frozen=True)
class Output:
    logits: np.ndarray
    values: np.ndarray | None = None
    model_name: str = "zero"
    model_version: str = "1"


class ZeroCost:
    """Uniform logits, precomputed: the evaluator costs (almost) nothing."""

    def __init__(self, points: int, batch: int) -> None:
        self.out = [Output(np.zeros((n, points), np.float32)) for n in range(batch + 1)]

    def infer(self, boards: np.ndarray) -> Output:
        return self.out[len(boards)]


def per_playout_us(module, state, evaluator, visits: int, repeats: int = 3,
                   cached: bool = False) -> float:
    """Best of `repeats`: CPU µs per playout of a `visits` search of `state` (`cached`: through
    a fresh cache of answers each time, every board a miss: what the cache costs)."""
    best = float("inf")
    for _ in range(repeats):
        asked = CachingEvaluator(evaluator, EvalCache()) if cached else evaluator
        t = time.process_time()
        r = module.search(state, asked, max_visits=visits, batch_size=16)
        best = min(best, (time.process_time() - t) / r.new_visits * 1e6)
    return best


def tree_work(visits: int) -> list[tuple[str, float, float, float]]:
    gomoku = GomokuState.from_moves([112, 113, 97])
    go = GO.start(19)
    for m in (72, 288, 60, 300):
        go = go.play(m)
    rows = []
    for name, state in (("Gomoku 15x15", gomoku), ("Go 19x19", go)):
        ev = ZeroCost(state.game.policy_size(state.size), 16)
        mcts.search(state, ev, max_visits=64)  # compile (or load) the kernels
        old = per_playout_us(reference_search, state, ev, max(visits // 4, 200))
        new = per_playout_us(mcts, state, ev, visits)
        cached = per_playout_us(mcts, state, ev, visits, cached=True)
        rows.append((name, old, new, cached))
    return rows


class Timed:
    """The evaluator both trees ask (one object, so the network work is the same): the
    TorchScript network as the service runs it on the CPU (`LocalEvaluator.evaluate`, the
    Triton backend's model.py: `torch.inference_mode`, the file as loaded), with the wall time
    spent in its calls and the boards sent counted (the network's share of a search)."""

    def __init__(self, model: Any) -> None:
        import torch

        from services.models.value import split_outputs

        self.model = model
        self.torch, self.split = torch, split_outputs
        self.seconds = 0.0
        self.leaves = 0

    def infer(self, boards: np.ndarray) -> Output:
        torch = self.torch
        t = time.perf_counter()
        with torch.inference_mode():
            logits, values = self.split(self.model(torch.from_numpy(boards)))
        v = values.to(torch.float32).numpy() if values is not None else None
        out = Output(logits.to(torch.float32).numpy(), v)
        self.seconds += time.perf_counter() - t
        self.leaves += len(boards)
        return out


@dataclass(frozen=True)
class Run:
    """One search: its wall seconds, playouts, and the network's seconds and boards in it."""

    seconds: float
    playouts: int
    net_seconds: float
    leaves: int
    calls: int
    visits: int = 0  # visits behind the answer, those of a reused tree included

    @property
    def rate(self) -> float:
        return self.playouts / self.seconds

    @property
    def us_per_playout(self) -> float:
        return self.seconds / self.playouts * 1e6

    @property
    def net_us_per_playout(self) -> float:
        return self.net_seconds / self.playouts * 1e6


def timed_search(module: Any, state: Any, ev: Timed, visits: int, batch: int,
                 cache: EvalCache | None = None) -> tuple[Run, tuple]:
    """One search of `state` by `module`'s tree (through `cache` when given): its Run and
    its answer (move, visits, PV, evaluator calls and boards asked; the trees must agree)."""
    ev.seconds, ev.leaves = 0.0, 0
    asked = ev if cache is None else CachingEvaluator(ev, cache)
    t = time.perf_counter()
    r = module.search(state, asked, max_visits=visits, batch_size=batch)
    seconds = time.perf_counter() - t
    run = Run(seconds, r.new_visits, ev.seconds, ev.leaves, r.evaluator_calls, r.total_visits)
    answer = (r.move, r.visits, r.principal_variation, r.evaluator_calls, r.evaluated_leaves)
    return run, answer


def reused_line(module: Any, ev: Timed, visits: int, moves: int, cached: bool,
                batch: int = mcts.DEFAULT_BATCH_SIZE) -> tuple[Run, int]:
    """The line as the service plays it with tree reuse: `module`'s tree (through a cache kept
    along the line when `cached`), each search continuing the previous one's subtree below the
    move it chose (as the service's `TreeCache`), `visits` visits behind each answer; the
    line's totals, and the visits that came with reused trees."""
    asked = CachingEvaluator(ev, EvalCache()) if cached else ev
    ev.seconds, ev.leaves = 0.0, 0
    state, tree = GomokuState.from_moves(START), None
    seconds = playouts = calls = total = reused = 0
    holder: list[Any] = []

    def make(*args: Any, **kwargs: Any) -> Any:
        holder.append(module.Search(*args, **kwargs))
        return holder[-1]

    for _ in range(moves):
        t = time.perf_counter()
        r = run_search(make, state, asked, max_visits=visits, max_time_ms=0, deadline=None,
                       c_puct=mcts.DEFAULT_C_PUCT, batch_size=batch, top_children=10,
                       tree=tree, should_stop=None, clock=time.monotonic)
        seconds += time.perf_counter() - t
        playouts, calls = playouts + r.new_visits, calls + r.evaluator_calls
        total, reused = total + r.total_visits, reused + r.reused_visits
        tree = holder[-1].root.child(r.move)
        state = state.play(r.move)
        if state.is_over:
            break
    return Run(seconds, playouts, ev.seconds, ev.leaves, calls, total), reused


def int8_copy(config: str, load: Any) -> Any:
    """The network `load` gives, as `movepred quantize` makes its int8 copy
    (`services.repository.quantize.quantize_network`, calibrated on positions of random games),
    and the share of positions of other random games where its best move is the float one's."""
    import torch

    from services.models.weights import network
    from services.repository.quantize import quantize_network

    game = GomokuState().game
    served = load()
    net = network(config).eval()
    net.load_state_dict(served.state_dict(), strict=True)
    quantized = quantize_network(net, game.sample_inputs(512, seed=0))
    boards = torch.from_numpy(game.sample_inputs(256, seed=1))
    with torch.inference_mode():
        same = (served(boards)[0].argmax(1) == quantized(boards)[0].argmax(1)).float().mean()
    return quantized, float(same)


def network_loader(config: str, model: str = "") -> Any:
    """A function loading a fresh copy of the network `config` with seeded random weights,
    scripted as the publisher exports it (or of the TorchScript file `model`, e.g. a trained
    one), as the service loads it; torch set to one thread."""
    import io
    import tempfile

    import torch

    torch.set_num_threads(1)
    if model:
        data = Path(model).read_bytes()
    else:
        from services.models.configs import build
        from services.models.export import export_torchscript

        torch.manual_seed(0)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.pt"
            export_torchscript(build(config).eval(), path)
            data = path.read_bytes()
    return lambda: torch.jit.load(io.BytesIO(data), map_location="cpu").eval()


START = (112, 113, 97)  # the searched Gomoku position: three stones at the centre


def genmove(ev: Timed, visits: int, repeats: int, batch: int = mcts.DEFAULT_BATCH_SIZE
            ) -> tuple[dict[str, list[Run]], float]:
    """`repeats` searches of a Gomoku position by the interpreted tree ("old"), the compiled
    one ("new") and the compiled one through a fresh cache of answers ("cached"), interleaved
    (the order rotated every round, so a change of the machine's load hits all), through one
    evaluator; and the cache's hit rate over its runs."""
    state = GomokuState.from_moves(START)
    for module in (mcts, reference_search):  # numba's kernels, TorchScript's profiling runs
        module.search(state, ev, max_visits=64, batch_size=batch)
    runs: dict[str, list[Run]] = {"old": [], "new": [], "cached": []}
    hits = asked = 0
    for k in range(repeats):
        order = [("old", reference_search), ("new", mcts), ("cached", mcts)]
        answers = {}
        for name, module in order[k % 3:] + order[:k % 3]:
            cache = EvalCache() if name == "cached" else None
            run, answer = timed_search(module, state, ev, visits, batch, cache)
            answers[name] = answer[:3]
            runs[name].append(run)
            if cache is not None:
                hits, asked = hits + cache.hits, asked + cache.hits + cache.misses
        if len(set(answers.values())) > 1:
            raise SystemExit(f"the trees disagree: {answers} (the comparison means nothing)")
    return runs, hits / asked


def line(ev: Timed, visits: int, moves: int, repeats: int,
         batch: int = mcts.DEFAULT_BATCH_SIZE, new_ev: Timed | None = None
         ) -> tuple[dict[str, list[Run]], float]:
    """GenMove at `moves` consecutive positions of one game (each the previous plus the
    move searched there), a fresh tree each: the interpreted tree ("old") and the compiled one
    ("new") asking `ev`, and the compiled one through a cache kept along the line ("cached",
    empty at each of `repeats` runs), interleaved; one Run per tree and run (the line's
    totals), and the cache's hit rate. `new_ev`: the network the compiled tree asks instead
    (an int8 copy); its lines may differ from the interpreted tree's, so they are not
    checked."""
    runs: dict[str, list[Run]] = {"old": [], "new": [], "cached": []}
    hits = asked = 0
    for k in range(repeats):
        order = [("old", reference_search), ("new", mcts), ("cached", mcts)]
        lines = {}
        for name, module in order[k % 3:] + order[:k % 3]:
            cache = EvalCache() if name == "cached" else None
            state = GomokuState.from_moves(START)
            parts: list[Run] = []
            searched = new_ev if new_ev is not None and name != "old" else ev
            for _ in range(moves):
                run, answer = timed_search(module, state, searched, visits, batch, cache)
                parts.append(run)
                state = state.play(answer[0])
                if state.is_over:
                    break
            runs[name].append(Run(*(sum(v) for v in zip(
                *((r.seconds, r.playouts, r.net_seconds, r.leaves, r.calls) for r in parts),
                strict=True))))
            lines[name] = state.moves
            if cache is not None:
                hits, asked = hits + cache.hits, asked + cache.hits + cache.misses
        if new_ev is None and len(set(lines.values())) > 1:
            raise SystemExit(f"the trees played different lines: {lines}")
    return runs, hits / asked


def spread(runs: list[Run]) -> str:
    best = max(r.rate for r in runs)
    return f"{best:,.0f} ({min(r.rate for r in runs):,.0f}-{best:,.0f})"


def report_genmove(config: str, visits: int, runs: dict[str, list[Run]], hit_rate: float
                   ) -> list[str]:
    """Best-of and spread of each tree, the ratios, and where the compiled tree's time goes:
    the network's time per board (the best of every run's average, all trees') bounds the
    ratio at the interpreted tree's time per playout over the network's per playout."""
    old, new, cached = runs["old"], runs["new"], runs["cached"]
    bo, bn = max(old, key=lambda r: r.rate), max(new, key=lambda r: r.rate)
    bc = max(cached, key=lambda r: r.rate)
    net_leaf = min(r.net_seconds / r.leaves for r in old + new + cached) * 1e6
    leaves_per_playout = bn.leaves / bn.playouts
    net = net_leaf * leaves_per_playout
    ceiling = bo.us_per_playout / net
    return [
        f"GenMove Gomoku ({config}, CPU, 1 torch thread, batch {mcts.DEFAULT_BATCH_SIZE}, "
        f"{visits} visits, best of {len(old)}, runs interleaved): "
        f"{bo.rate:,.0f} playouts/s interpreted (runs {min(r.rate for r in old):,.0f}-"
        f"{bo.rate:,.0f}), {bn.rate:,.0f} compiled ({min(r.rate for r in new):,.0f}-"
        f"{bn.rate:,.0f}), {bn.rate / bo.rate:.2f}x",
        f"  compiled through a cache of answers (fresh each run): {spread(cached)} playouts/s, "
        f"{bc.rate / bo.rate:.2f}x the interpreted; {hit_rate:.1%} of the boards asked "
        f"answered by the cache ({bc.leaves} boards evaluated for {bc.playouts} playouts)",
        f"  per playout: interpreted {bo.us_per_playout:.0f} µs, compiled "
        f"{bn.us_per_playout:.0f} µs = network {bn.net_us_per_playout:.0f} µs + tree and "
        f"Python {bn.us_per_playout - bn.net_us_per_playout:.0f} µs "
        f"({bn.leaves} boards in {bn.calls} calls for {bn.playouts} playouts)",
        f"  network alone: {net_leaf:.0f} µs per board (best run), {net:.0f} µs per playout: "
        f"no tree can beat {bo.us_per_playout:.0f} / {net:.0f} = {ceiling:.2f}x with this "
        f"network here (3x needs the network under {bo.us_per_playout / 3:.0f} µs per "
        f"playout)",
    ]


@dataclass(frozen=True)
class Variant:
    """One way to run the network's forward pass on the CPU (part 4)."""

    name: str
    module: Any
    grad_mode: str = "inference_mode"  # or "no_grad"
    conv_precision: str = ""  # oneDNN's convolution precision for fp32 tensors, "" as set


def forward_variants(load: Any) -> list[Variant]:
    """The served file (`load()` loads a fresh copy) and what torch offers for the same
    weights on the CPU. Freezing inlines the weights as constants; optimize_for_inference then
    rewrites the convolutions into oneDNN's prepacked ones (fused with their ReLU)."""
    import torch

    cl = torch.channels_last
    return [
        Variant("served (TorchScript, inference_mode)", load()),
        Variant("the same under no_grad", load(), "no_grad"),
        Variant("torch.jit.freeze", torch.jit.freeze(load())),
        Variant("freeze + optimize_for_inference",
                torch.jit.optimize_for_inference(torch.jit.freeze(load()))),
        Variant("channels_last + freeze", torch.jit.freeze(load().to(memory_format=cl))),
        Variant("channels_last + freeze + optimize_for_inference",
                torch.jit.optimize_for_inference(torch.jit.freeze(load().to(memory_format=cl)))),
        Variant("channels_last + freeze, convolutions in bfloat16 (reduced precision)",
                torch.jit.freeze(load().to(memory_format=cl)), conv_precision="bf16"),
    ]


def run_variant(v: Variant, boards: Any) -> list[Any]:
    """The variant's outputs for `boards` (int8 tensor): [logits] or [logits, value]."""
    import torch

    from services.models.value import split_outputs

    conv = torch.backends.mkldnn.conv
    before = conv.fp32_precision
    if v.conv_precision:
        conv.fp32_precision = v.conv_precision
    try:
        with torch.inference_mode() if v.grad_mode == "inference_mode" else torch.no_grad():
            logits, value = split_outputs(v.module(boards))
    finally:
        conv.fp32_precision = before
    return [logits] if value is None else [logits, value]


def forward_speed(load: Any, batches: list[int], rounds: int = 7, seconds: float = 0.05,
                  extra: tuple[Variant, ...] = ()
                  ) -> tuple[list[Variant], dict[tuple[str, int], list[float]],
                             dict[str, tuple[float, float]]]:
    """µs of CPU (process time: the machine's other load is not counted) a board, every
    variant and batch size, `rounds` timings each of about `seconds` per variant, the variants
    interleaved (the order rotated each round); and each variant's largest absolute
    difference from the served outputs and share of the served best moves, over positions of
    random games and random inputs (`Game.sample_inputs`, `Game.random_inputs`); `extra`:
    more variants (the int8 copy)."""
    import torch

    game = GomokuState().game
    size = GomokuState().size
    check = torch.from_numpy(np.concatenate([game.sample_inputs(64, size, 1),
                                             game.random_inputs(64, size, 2)]))
    variants = forward_variants(load) + list(extra)
    reference = run_variant(variants[0], check)
    agreement = {}
    for v in variants:
        out = run_variant(v, check)
        diff = max((a - b).abs().max().item() for a, b in zip(out, reference, strict=True))
        same = (out[0].argmax(1) == reference[0].argmax(1)).float().mean().item()
        agreement[v.name] = (diff, same)
    times: dict[tuple[str, int], list[float]] = {}
    for batch in batches:
        boards = check[:batch].clone() if batch <= len(check) else check[
            torch.arange(batch) % len(check)]
        for v in variants:  # TorchScript's profiling runs, oneDNN's primitives
            for _ in range(3):
                run_variant(v, boards)
        calls = max(1, int(seconds * 1e6 / 100 / batch))
        for k in range(rounds):
            for v in variants[k % len(variants):] + variants[:k % len(variants)]:
                t = time.process_time()
                for _ in range(calls):
                    run_variant(v, boards)
                times.setdefault((v.name, batch), []).append(
                    (time.process_time() - t) / calls / batch * 1e6)
    return variants, times, agreement


def report_forward(config: str, batches: list[int], variants: list[Variant],
                   times: dict[tuple[str, int], list[float]],
                   agreement: dict[str, tuple[float, float]]) -> list[str]:
    """One line a variant: best (median) µs a board at each batch, its speed-up over the
    served file at each batch (best against best), its difference from the served outputs."""
    served = variants[0].name
    lines = [f"Forward pass alone ({config}, CPU, 1 torch thread, µs of CPU a board, best "
             f"(median) of {len(times[(served, batches[0])])} timings, variants interleaved):"]
    for v in variants:
        cells = []
        for b in batches:
            t = times[(v.name, b)]
            speedup = min(times[(served, b)]) / min(t)
            cells.append(f"batch {b}: {min(t):.1f} ({np.median(t):.1f}) {speedup:.2f}x")
        diff, same = agreement[v.name]
        lines.append(f"  {v.name}: " + "; ".join(cells)
                     + f"; max abs diff {diff:.1e}, same best move {same:.1%}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=3200)
    parser.add_argument("--genmove-visits", type=int, default=800)
    parser.add_argument("--repeats", type=int, default=5, help="GenMove searches per tree")
    parser.add_argument("--config", default="", help="network config (default: Gomoku's)")
    parser.add_argument("--model", default="",
                        help="a TorchScript Gomoku network to search with instead (e.g. "
                             "runs/rollout_match/model_v.pt, trained by benchmarks/strength.py)")
    parser.add_argument("--line-moves", type=int, default=12,
                        help="consecutive positions of the game searched in part 3")
    parser.add_argument("--line-repeats", type=int, default=3, help="runs of part 3 per tree")
    parser.add_argument("--forward-batches", type=int, nargs="*", default=[1, 4, 16, 64],
                        help="batch sizes of part 4 (none: skip it)")
    parser.add_argument("--int8", action="store_true",
                        help="also the goal's ratio with the new path asking an int8 copy of "
                             "the network (movepred quantize's), the old path the float one")
    args = parser.parse_args(argv)
    print(f"cpus={os.cpu_count()}")
    for name, old, new, cached in tree_work(args.visits):
        print(f"{name}: tree work per playout {old:.1f} µs interpreted, {new:.1f} µs compiled, "
              f"{old / new:.1f}x; compiled through a fresh cache of answers (all misses: its "
              f"cost) {cached:.1f} µs")
    config_name = config = args.config or GomokuState().game.default_config
    ev = Timed(network_loader(config, args.model)())
    config = Path(args.model).name if args.model else config
    runs, hit_rate = genmove(ev, args.genmove_visits, args.repeats)
    print("\n".join(report_genmove(config, args.genmove_visits, runs, hit_rate)))
    runs, line_hits = line(ev, args.genmove_visits, args.line_moves, args.line_repeats)
    bo, bn, bc = (max(runs[k], key=lambda r: r.rate) for k in ("old", "new", "cached"))
    print(f"GenMove along a game ({args.line_moves} consecutive positions from the same start, "
          f"a fresh tree each, both sides, {args.genmove_visits} visits, best of "
          f"{args.line_repeats}, runs interleaved): {spread(runs['old'])} playouts/s "
          f"interpreted, {spread(runs['new'])} compiled ({bn.rate / bo.rate:.2f}x), "
          f"{spread(runs['cached'])} compiled with the cache kept along the game "
          f"({bc.rate / bo.rate:.2f}x); {line_hits:.1%} of the boards asked answered by the "
          f"cache ({bc.leaves} boards evaluated for {bc.playouts} playouts)")
    ratios = sorted(c.rate / o.rate for o, c in zip(runs["old"], runs["cached"], strict=True))
    print(f"Service GenMove along a game, old path (interpreted tree, the network asked "
          f"directly) against new (compiled tree, the cache kept along the game), the network "
          f"run as the service runs it in both: {bc.rate / bo.rate:.2f}x best against best "
          f"(each run against the interpreted run of its round: {ratios[0]:.2f}-"
          f"{ratios[-1]:.2f}x); the goal is 3x")
    reused: dict[str, list[tuple[Run, int]]] = {"old": [], "new": []}
    for k in range(args.line_repeats):
        order = [("old", reference_search, False), ("new", mcts, True)]
        for name, module, cached in order[k % 2:] + order[:k % 2]:
            reused[name].append(reused_line(module, ev, args.genmove_visits, args.line_moves,
                                            cached))
    (ro, came_o), (rn, came_n) = (max(reused[k], key=lambda rc: rc[0].visits / rc[0].seconds)
                                  for k in ("old", "new"))
    print(f"Service GenMove along a game with tree reuse (each search continuing the subtree "
          f"of its move, as the service's TreeCache; {args.genmove_visits} visits behind each "
          f"answer, reused ones included; best of {args.line_repeats}, interleaved): old path "
          f"(interpreted, the network asked directly) {ro.visits / ro.seconds:,.0f} visits/s "
          f"({came_o / ro.visits:.1%} reused), new (compiled, the cache kept) "
          f"{rn.visits / rn.seconds:,.0f} visits/s ({came_n / rn.visits:.1%} reused): "
          f"{(rn.visits / rn.seconds) / (ro.visits / ro.seconds):.2f}x; the lines differ from "
          f"each other and from the fresh-tree ones")
    extra: tuple[Variant, ...] = ()
    if args.int8:
        quantized, same = int8_copy(config_name, network_loader(config_name, args.model))
        extra = (Variant("int8 copy (movepred quantize's; another network)", quantized),)
        runs8, _ = line(ev, args.genmove_visits, args.line_moves, args.line_repeats,
                        new_ev=Timed(quantized))
        bo8, bc8 = (max(runs8[k], key=lambda r: r.rate) for k in ("old", "cached"))
        ratios8 = sorted(c.rate / o.rate for o, c in zip(runs8["old"], runs8["cached"],
                                                         strict=True))
        print(f"Service GenMove along a game with an int8 copy of the network on the new path "
              f"(its best move the float one's on {same:.1%} of positions of random games): "
              f"old path (interpreted, float network) {bo8.rate:,.0f} playouts/s, new "
              f"(compiled, the cache kept, int8 network) {bc8.rate:,.0f}: "
              f"{bc8.rate / bo8.rate:.2f}x best against best (each run against the "
              f"interpreted run of its round: {ratios8[0]:.2f}-{ratios8[-1]:.2f}x); network "
              f"{bc8.net_us_per_playout:.0f} µs a playout against "
              f"{bo8.net_us_per_playout:.0f}")
    if args.forward_batches:
        variants, times, agreement = forward_speed(network_loader(config_name, args.model),
                                                   args.forward_batches, extra=extra)
        print("\n".join(report_forward(config, args.forward_batches, variants, times,
                                       agreement)))


if __name__ == "__main__":
    main()
