"""Named model configurations, listed in one place (in the manner of KataGo's b6c96 names).

`shao_fF_nN` is Shao et al.'s network with F filters and N 3x3 convs (`_fc`: their fully
connected top, `_bn`: with batch norm). `res_bBcC` is a residual network of B blocks of C
channels; `go_` configurations take compact Go inputs (services/games/go/features.py) and
predict a pass as well; a `go_..._x` one takes Go's extended input instead (the basic planes and
the tactical channels: services/games/go/encoders.py, `ModelSpec.encoder`). A `_v` suffix adds a
value head (services/models/value.py). `rollout_kK` / `go_rollout_kK` are the fast rollout
policies (services/models/rollout.py): one K x K convolution over the mover's own, opponent and
empty planes, the linear softmax the compiled rollouts play (services/games/rollout.py). Every
built model takes compact int8 inputs and returns
logits, or (logits, value) with a value head, except the Capture Game's `capture_mdrnn_kK` /
`capture_mdlstm_kK` (services/models/mdrnn.py, K hidden neurons per sweep): (own, opponent)
planes [N, 2, S, S] -> move preferences [N, S, S] in (0, 1), served behind their wrapper
(`ModelSpec.serve`: `CapturePolicy`, int8 boards -> logits), and trained by the policy search;
`capture_res_bBcC` is a residual network on the Capture Game's int8 board, trained by gradient
as every other configuration (what the self-play loop trains for that game).

What a configuration says besides its network (`ModelSpec`) is all the publisher
(`services.trainer.publish`) asks of it, for every game alike: the game, the input encoder, the
module Triton serves around the network (`served`) and how a network gets seeded random weights
(`network`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from services.games.base import BASIC_ENCODER
from services.games.capture.game import CAPTURE
from services.games.go.encoders import N_EXTENDED_PLANES
from services.games.go.features import N_GO_PLANES
from services.games.go.game import GO
from services.games.gomoku.game import GOMOKU
from services.games.registry import get_game
from services.models.mdrnn import MDLSTM, MDRNN, CapturePolicy, draw_weights
from services.models.resnet import GoExtendedPolicy, GoPolicy, ResidualPolicyNet
from services.models.rollout import LinearRolloutPolicy
from services.models.shao import BoardPolicy, ShaoPolicyNet
from services.models.value import PolicyValue


@dataclass(frozen=True)
class ModelSpec:
    game: str  # the registered name of the game it plays (services.games.registry)
    make: Callable[[], nn.Module]
    value: bool = False  # forward returns (logits, value)
    # the input it takes, by the game's encoder name ("basic": the game's `input_shape`, as
    # shards store it; Go's others: `GoGame.encoders`): `Game.encode_inputs` makes it
    encoder: str = BASIC_ENCODER
    # the module Triton serves around a built network (int8 network input -> logits, or
    # (logits, value)); None: the network itself (it takes the game's input already)
    serve: Callable[[nn.Module], nn.Module] | None = None
    # draws a built network's weights from a seed, for a network whose constructor fixes its
    # own; None: torch's global seed, set before `make`, draws them
    draw: Callable[[nn.Module, int], None] | None = None

    def with_value(self) -> ModelSpec:
        colours = not get_game(self.game).input_from_mover
        return replace(self, make=lambda: PolicyValue(self.make(), colours), value=True)

    def network(self, seed: int = 0) -> nn.Module:
        """A fresh network with random weights drawn from `seed` (the same for the same seed;
        torch's global random state is left as it was)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net = self.make()
        if self.draw is not None:
            self.draw(net, seed)
        return net

    def served(self, net: nn.Module) -> nn.Module:
        """The module Triton serves for `net` (a network this configuration builds): `serve`'s
        wrapper, else `net` itself."""
        return self.serve(net) if self.serve is not None else net


def _shao(filters: int, n: int, **kw) -> ModelSpec:
    return ModelSpec(GOMOKU.name, lambda: BoardPolicy(ShaoPolicyNet(filters, n, **kw)))


def _res(blocks: int, channels: int) -> ModelSpec:
    return ModelSpec(GOMOKU.name, lambda: BoardPolicy(ResidualPolicyNet(3, blocks, channels)))


def _go(blocks: int, channels: int) -> ModelSpec:
    return ModelSpec(GO.name, lambda: GoPolicy(
        ResidualPolicyNet(N_GO_PLANES, blocks, channels, pass_logit=True)))


def _go_x(blocks: int, channels: int) -> ModelSpec:
    return ModelSpec(GO.name, lambda: GoExtendedPolicy(
        ResidualPolicyNet(N_EXTENDED_PLANES, blocks, channels, pass_logit=True)),
        encoder="extended")


def _capture_res(blocks: int, channels: int) -> ModelSpec:
    """A Capture Game residual network over its board's black, white and empty planes: one the
    trainer trains by gradient (the sweep networks take other planes)."""
    return ModelSpec(CAPTURE.name,
                     lambda: BoardPolicy(ResidualPolicyNet(3, blocks, channels)))


def _sweep(make: Callable[[], nn.Module]) -> ModelSpec:
    """A Capture Game sweep network: trained on (own, opponent) planes by the policy search,
    served behind `CapturePolicy`."""
    return ModelSpec(CAPTURE.name, make, serve=CapturePolicy, draw=draw_weights)


def _rollout(game: str, kernel: int) -> ModelSpec:
    return ModelSpec(game, lambda: LinearRolloutPolicy(game, kernel))


_POLICIES: dict[str, ModelSpec] = {
    **{f"shao_f128_n{n}": _shao(128, n) for n in (0, 1, 2, 4, 6, 8, 10)},  # Table III
    # Table I: the fully connected top against the 1x1 conv one (shao_f128_nN), N = 2, 4, 6
    **{f"shao_f128_n{n}_fc": _shao(128, n, head="fc") for n in (2, 4, 6)},
    # Table II: batch normalisation after every conv against none (shao_f128_nN)
    **{f"shao_f128_n{n}_bn": _shao(128, n, batch_norm=True) for n in (2, 4, 6)},
    # Table III's filter rows at N = 4 (its batch-size rows are a training setting)
    **{f"shao_f{f}_n4": _shao(f, 4) for f in (64, 192, 256)},
    "shao_f32_n2": _shao(32, 2),  # small: demo and tests on 2 CPU cores
    "res_b6c96": _res(6, 96),
    "res_b10c128": _res(10, 128),
    "res_b2c32": _res(2, 32),  # small residual for tests
    "res_b4c48": _res(4, 48),  # 7x shao_f32_n2's weights, 5.5x its CPU time a board
    "go_res_b6c96": _go(6, 96),
    "go_res_b10c128": _go(10, 128),
    "go_res_b2c32": _go(2, 32),  # small Go network for tests
    "go_res_b6c96_x": _go_x(6, 96),  # the extended input (tactical channels)
    "go_res_b2c32_x": _go_x(2, 32),
    # fast rollout policies (services/models/rollout.py): one k x k conv, a linear softmax
    **{f"rollout_k{k}": _rollout(GOMOKU.name, k) for k in (3, 5, 7)},
    **{f"go_rollout_k{k}": _rollout(GO.name, k) for k in (3, 5, 7)},
    "capture_mdrnn_k2": _sweep(lambda: MDRNN(2)),  # 12 weights (the paper's)
    "capture_mdlstm_k2": _sweep(lambda: MDLSTM(2)),  # 52 weights
    "capture_res_b2c32": _capture_res(2, 32),  # trained by gradient: the self-play loop's
}
# with a value head: the served search uses it at leaves that are not finished games
_WITH_VALUE = ("shao_f32_n2", "shao_f128_n2", "shao_f128_n4", "res_b2c32", "res_b4c48",
               "res_b6c96", "res_b10c128", "go_res_b2c32", "go_res_b6c96", "go_res_b10c128",
               "go_res_b2c32_x", "go_res_b6c96_x", "capture_res_b2c32")
CONFIGS: dict[str, ModelSpec] = {
    **_POLICIES, **{f"{name}_v": _POLICIES[name].with_value() for name in _WITH_VALUE}}


def register_config(name: str, model: ModelSpec) -> ModelSpec:
    """Add a named configuration (a game defined elsewhere brings its own networks: its
    `Game.default_config` names one registered here). A name is registered once; the same
    spec again is a no-op."""
    known = CONFIGS.get(name)
    if known is not None and known is not model:
        raise ValueError(f"a model config named {name!r} is registered already")
    CONFIGS[name] = model
    return model


def spec(name: str) -> ModelSpec:
    if name not in CONFIGS:
        raise ValueError(f"unknown model config {name!r}; known: {', '.join(sorted(CONFIGS))}")
    return CONFIGS[name]


def build(name: str) -> nn.Module:
    """A fresh network for the named configuration (compact int8 inputs -> logits, or
    (logits, value) for a `_v` configuration)."""
    return spec(name).make()
