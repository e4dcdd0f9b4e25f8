"""`mcts.warm_up` (the search service runs it for every served game before it listens) leaves
every kernel of the compiled search tree compiled, so the first request does not pay numba's
compile (about 18 s a game where its disk cache is missing, as in a read-only pod), and a
request's search then compiles nothing more (its argument types are the warm-up's). Checked in
a fresh process, where nothing ran before the warm-up; no timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WARM_UP = """
import json
import numpy as np
from services.games.registry import registered_games
from services.search import compiled_tree as ct, mcts

# the generic kernels Python calls (select, backup, pairwise_sum run inside these)
generic = ("shift_logits", "set_priors", "apply_batch", "abandon_batch", "subtree_size",
           "copy_subtree")

def compiled(kernels):  # {kernel: how many signatures it has compiled}
    found = {name: len(getattr(ct, name).signatures) for name in generic}
    per_game = ct.compiled_search(kernels)
    found.update({name: len(fn.signatures) for name, fn in per_game._asdict().items()})
    return found

class Out:
    def __init__(self, logits, values):
        self.logits, self.values = logits, values
        self.model_name, self.model_version = "net", "1"

class Network:  # random logits and values, float32, as a value network answers
    def __init__(self, points):
        self.points, self.rng = points, np.random.default_rng(0)
    def infer(self, boards):
        n = len(boards)
        return Out(self.rng.normal(size=(n, self.points)).astype(np.float32),
                   self.rng.uniform(-1, 1, n).astype(np.float32))

report = {}
for game in registered_games():
    kernels = game.search_kernels()
    if kernels is None:
        continue
    before = compiled(kernels)
    mcts.warm_up(game)
    after = compiled(kernels)
    # a request's search (a value head, root noise, a reused subtree) compiles nothing more
    state = game.start()
    search = mcts.Search(state, Network(game.policy_size(state.size)), noise_alpha=0.3, seed=1)
    search.run(64)
    node = search.root.child(search.result().move).compacted()
    mcts.search(node.state, search.evaluator, max_visits=node.visits + 32, tree=node)
    report[game.name] = {"before": before, "after": after, "request": compiled(kernels)}
print(json.dumps(report))
"""


def test_warm_up_compiles_every_kernel_of_the_search_tree() -> None:
    out = subprocess.run([sys.executable, "-c", WARM_UP], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    assert {"gomoku", "go"} <= set(report)
    first = next(iter(report.values()))
    assert not any(first["before"].values()), "compiled before the first warm-up"
    for game, seen in report.items():
        missing = sorted(name for name, done in seen["after"].items() if not done)
        assert not missing, f"{game}: not compiled by the warm-up: {missing}"
        assert seen["request"] == seen["after"], f"{game}: a request compiled more"
