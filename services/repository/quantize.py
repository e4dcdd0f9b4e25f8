"""Post-training int8 quantization of a published network, for serving on a CPU.

Why: on a CPU the search's time goes to the network: one forward pass of about 110 µs a board
for the Gomoku demo network at the search's batch of 16, against 14 µs of compiled tree work a
playout (`benchmarks/search_speed.py`). No float32 path torch offers on the CPU is much faster,
and bfloat16 changes the answers as much as int8 does while gaining less. int8 convolutions
(oneDNN/FBGEMM's x86 kernels) cut the pass by about 2-3x.

What is quantized: the convolutions and their ReLUs, statically (weights per channel, the
activations' ranges observed on calibration positions), through torch's FX graph mode; the
input encoding and the value head's linear layers stay in float32. The result is traced and
frozen into a TorchScript file, so everything that loads a ``model.pt`` (the Triton backend,
`LocalEvaluator`) runs it unchanged. Calibration uses the version's stored real positions
(``smoke_positions.npz``) and positions of random legal games (`Game.sample_inputs`).

A quantized network computes other numbers, so it is published as a new version whose
metadata says ``precision: int8`` and which version it came from, with how often its best move
agrees with the float network's on the stored positions; it is refused when that share is under
`min_agreement`. Its strength is measured like any version's, by a match against its source.
int8 kernels exist on the CPU only: the Triton backend keeps such a version on the CPU.
torch marks its `torch.ao.quantization` API deprecated (moving to torchao); the pinned torch
still carries it, and a torch without it makes this module refuse with QuantizeError.
"""

from __future__ import annotations

import copy
import json
import logging
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from services.defaults import MODEL_FILE, QUANTIZE_CALIBRATION, QUANTIZE_MIN_AGREEMENT
from services.games.base import BASIC_ENCODER
from services.games.registry import default_game, game_for_model, get_game
from services.models.value import split_outputs
from services.models.weights import network
from services.repository.smoke_positions import SMOKE_POSITIONS_FILE, read_smoke_positions
from services.repository.version_files import METADATA_FILE

log = logging.getLogger(__name__)

INT8 = "int8"
PRECISION_KEY = "precision"
TRACE_BATCH = 16


class QuantizeError(ValueError):
    """The version cannot be quantized (its network, its files, or the result's agreement)."""


@dataclass(frozen=True)
class QuantizeReport:
    """How the int8 network compares with its float32 source on the stored positions."""

    source_version: int
    config: str
    calibration_positions: int
    check_positions: int
    checked_on: str  # "stored": the version's real positions; "sampled": of random games
    top1_agreement: float  # the same best move (logits' argmax) as the float network
    max_abs_logit_diff: float
    max_abs_value_diff: float | None  # None: no value head

    def to_dict(self) -> dict:
        return asdict(self)


def _float_network(folder: Path) -> tuple[nn.Module, dict]:
    """The version's network as an eager float32 module (its configuration built, the served
    file's weights loaded, strictly) and its metadata."""
    try:
        meta = json.loads((folder / METADATA_FILE).read_text())
        config = meta["model_config"]["name"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise QuantizeError(f"{folder}: no model configuration in its {METADATA_FILE} "
                            f"({exc})") from exc
    if meta.get(PRECISION_KEY, "float32") != "float32":
        raise QuantizeError(f"{folder} is already {meta[PRECISION_KEY]}")
    served = torch.jit.load(str(folder / MODEL_FILE), map_location="cpu")
    net = network(config).eval()
    try:
        net.load_state_dict(served.state_dict(), strict=True)
    except RuntimeError as exc:
        raise QuantizeError(f"{folder}: the served weights do not fit {config}: {exc}") from exc
    return net, meta


def _outputs(model: nn.Module, boards: np.ndarray) -> tuple[torch.Tensor, torch.Tensor | None]:
    with torch.inference_mode():
        return split_outputs(model(torch.from_numpy(boards)))


def quantize_version(folder: Path, *, calibration: int = QUANTIZE_CALIBRATION, seed: int = 0,
                     min_agreement: float = QUANTIZE_MIN_AGREEMENT
                     ) -> tuple[torch.jit.ScriptModule, QuantizeReport]:
    """The int8 TorchScript of the version in `folder` (``<repo>/<model>/<version>/``) and how
    it compares with the float network on its stored positions (positions of random games
    when it keeps none); QuantizeError when the version cannot be quantized or its best moves
    agree on fewer than `min_agreement` of them."""
    folder = Path(folder)
    net, meta = _float_network(folder)
    if (meta.get("encoder") or BASIC_ENCODER) != BASIC_ENCODER:
        raise QuantizeError(f"{folder}: only networks of the basic input are quantized here")
    game = (get_game(meta["game"]) if isinstance(meta.get("game"), str)
            else game_for_model(folder.parent.name) or default_game())
    try:
        check, _ = read_smoke_positions(folder / SMOKE_POSITIONS_FILE)
        checked_on = "stored"
    except (OSError, ValueError):  # no real positions kept: positions of random games
        check, checked_on = game.sample_inputs(256, seed=seed + 1), "sampled"
    calibrate = np.concatenate([game.sample_inputs(calibration, seed=seed),
                                check[: calibration // 2]])
    config = str(meta["model_config"]["name"])
    try:
        traced = quantize_network(net, calibrate)
    except Exception as exc:  # FX tracing and conversion raise many kinds
        raise QuantizeError(f"{folder}: {config} cannot be quantized here: "
                            f"{type(exc).__name__}: {exc}") from exc
    report = compare(net, traced, check, int(meta.get("version", folder.name)), config,
                     len(calibrate), checked_on)
    if report.top1_agreement < min_agreement:
        raise QuantizeError(f"{folder}: the int8 network's best move agrees with the float "
                            f"one's on {report.top1_agreement:.1%} of the {checked_on} "
                            f"positions, under {min_agreement:.0%}")
    return traced, report


def quantize_network(net: nn.Module, calibrate: np.ndarray) -> torch.jit.ScriptModule:
    """`net` (eager, float32, taking int8 boards) with its convolutions in int8, their ranges
    observed on the boards `calibrate`, traced and frozen; a convolution to a single plane
    (the policy's logits) stays float32: it is cheap, and the moves' ranking rests on it."""
    from torch.ao.quantization import QConfigMapping, get_default_qconfig
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    torch.backends.quantized.engine = "x86"
    qconfig = get_default_qconfig("x86")
    mapping = (QConfigMapping().set_object_type(nn.Conv2d, qconfig)
               .set_object_type(nn.ReLU, qconfig))
    for name, module in net.named_modules():
        if isinstance(module, nn.Conv2d) and module.out_channels == 1:
            mapping.set_module_name(name, None)
    example = torch.from_numpy(calibrate[:TRACE_BATCH])
    with warnings.catch_warnings():  # torch's notes on its quantization API's future
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.ao\..*")
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated")
        prepared = prepare_fx(copy.deepcopy(net).eval(), mapping, example_inputs=(example,))
        with torch.inference_mode():
            for start in range(0, len(calibrate), 64):
                prepared(torch.from_numpy(calibrate[start:start + 64]))
        converted = convert_fx(prepared).eval()
        with torch.inference_mode():
            return torch.jit.freeze(torch.jit.trace(converted, example).eval())


def compare(reference: nn.Module, quantized: nn.Module, boards: np.ndarray, version: int,
            config: str, calibrated: int, checked_on: str) -> QuantizeReport:
    """How `quantized` answers `boards` against `reference`: best-move agreement, the largest
    logit and value differences (at every batch size the boards come in: the traced file is
    asked at others than it was traced with)."""
    logits, values = _outputs(reference, boards)
    parts = [_outputs(quantized, boards[i:i + 7]) for i in range(0, len(boards), 7)]
    q_logits = torch.cat([p[0] for p in parts])
    q_values = None if parts[0][1] is None else torch.cat([p[1] for p in parts])
    if q_logits.shape != logits.shape:
        raise QuantizeError(f"the int8 network answers {tuple(q_logits.shape)} logits, the "
                            f"float one {tuple(logits.shape)}")
    agree = float((q_logits.argmax(1) == logits.argmax(1)).float().mean())
    value_diff = (None if values is None or q_values is None
                  else float((q_values - values).abs().max()))
    return QuantizeReport(version, config, calibrated, len(boards), checked_on, round(agree, 4),
                          round(float((q_logits - logits).abs().max()), 4),
                          None if value_diff is None else round(value_diff, 4))


def publish_int8(repository: Path, model_name: str, version: int, **options: Any
                 ) -> tuple[int, QuantizeReport]:
    """Quantize `version` of `model_name` (`quantize_version`'s `options`) and publish the
    result as the next version, beside its source: its metadata is the source's (game,
    encoder, model configuration, value head) with ``precision: int8``, ``quantized_from`` and
    the comparison; the source's stored positions come along. The rollout record is left
    alone: an int8 version is rolled out, and rated, like any other."""
    from services.repository.publish import publish
    from services.repository.versions import version_dir

    folder = version_dir(Path(repository), model_name, version)
    if not (folder / MODEL_FILE).is_file():
        raise QuantizeError(f"{model_name} v{version} is not published in {repository}")
    traced, report = quantize_version(folder, **options)
    source = json.loads((folder / METADATA_FILE).read_text())
    keep = ("game", "encoder", "model_config", "pass_move", "dataset", "code")
    metadata = {k: source[k] for k in keep if k in source}
    metadata.update({PRECISION_KEY: INT8, "quantized_from": version,
                     "quantization": report.to_dict()})
    stored = folder / SMOKE_POSITIONS_FILE
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / MODEL_FILE
        torch.jit.save(traced, str(path))
        new = publish(path, Path(repository), model_name, metadata,
                      extra_files={SMOKE_POSITIONS_FILE: stored} if stored.is_file() else None,
                      source=f"int8 quantization of {model_name} v{version}",
                      game=source.get("game"), encoder=source.get("encoder"))
    log.info("published %s v%d: int8 of v%d (best move agrees on %.1f%% of %d positions)",
             model_name, new, version, 100 * report.top1_agreement, report.check_positions)
    return new, report


__all__ = ["INT8", "PRECISION_KEY", "QuantizeError", "QuantizeReport", "compare", "publish_int8",
           "quantize_network", "quantize_version"]
