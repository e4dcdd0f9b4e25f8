"""``movepred quantize``: publish an int8 copy of a version (`services.repository.quantize`).

    movepred quantize --repository model_repository --version 4

Kept apart from the quantizer so that the command line starts without importing torch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from services.defaults import QUANTIZE_CALIBRATION, QUANTIZE_MIN_AGREEMENT
from services.settings import DEFAULT_REPOSITORY


def cmd_quantize(args: argparse.Namespace) -> int:
    from services.games.registry import default_game, game_for_model
    from services.repository.quantize import QuantizeError, publish_int8

    model = args.model_name or default_game().default_model
    try:
        new, report = publish_int8(Path(args.repository), model, args.version,
                                   calibration=args.calibration,
                                   min_agreement=args.min_agreement)
    except (QuantizeError, OSError) as exc:
        print(f"movepred quantize: error: {exc}", file=sys.stderr)
        return 2
    game = game_for_model(model)
    print(f"published {model} v{new}: int8 of v{args.version}"
          f"{' (' + game.title + ')' if game else ''}; best move as the float network's on "
          f"{report.top1_agreement:.1%} of {report.check_positions} {report.checked_on} "
          f"positions, largest "
          f"logit difference {report.max_abs_logit_diff}"
          + ("" if report.max_abs_value_diff is None
             else f", value difference {report.max_abs_value_diff}"))
    return 0


def add_quantize_command(subparsers: Any) -> dict[str, Any]:
    """Register `quantize` (a registrar for `services.cli.REGISTRARS`)."""
    q = subparsers.add_parser(
        "quantize", help="publish an int8 copy of a version, for serving on a CPU",
        description="Quantize a published version's convolutions to int8 (calibrated on "
                    "positions of random games and its stored real positions) and publish it "
                    "as the next version, refused when its best move agrees with the float "
                    "network's on fewer than --min-agreement of the stored positions. "
                    "Roll it out and rate it like any version; int8 runs on the CPU only.")
    q.add_argument("--version", type=int, required=True, help="the float version to quantize")
    q.add_argument("--model-name", default=None, help="default: the default game's model")
    q.add_argument("--repository", default=DEFAULT_REPOSITORY)
    q.add_argument("--calibration", type=int, default=QUANTIZE_CALIBRATION,
                   help="positions of random games to calibrate on (plus half as many of "
                        "the stored real ones)")
    q.add_argument("--min-agreement", type=float, default=QUANTIZE_MIN_AGREEMENT)
    return {"quantize": cmd_quantize}
