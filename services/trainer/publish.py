"""Publishing a network, for every registered game: one function and one command.

    python -m services.trainer.publish --repository R [--game GAME] [--config NAME] [--seed N]
        [--weights PATH | --checkpoint PATH] [--weights-per-size SIZE=FILE ...]
        [--dataset DIR] [--model-name NAME]

publishes a network of a named configuration (`services.models.configs`; default: the one the
weights file names, else the game's `default_config`; ``--game`` defaults to the
configuration's) as the next version of its game's Triton model for the configuration's input
(`Game.model_name`: ``go_policy``, ``go_policy_extended``, ``capture_policy``, ...), and prints
the version: random weights drawn from ``--seed``, or those of a weights file
(`services.models.weights.read_weights`: a trainer checkpoint, the policy search's
``best_network.pt``, a state_dict or a flat vector; or a per-size file, one network per board
size, which ``--weights-per-size 5=a.pt 7=b.pt 9=c.pt`` writes to ``--weights`` from several
``best_network.pt`` files: served as one model, `services.models.per_size.PerSize`, that plays
each board with the network of its size). `publish_model` is the command as a
function; `publish_network` publishes a network at hand, and the train flow (flows/train.py,
which runs `export_and_publish` as a Prefect task) and rank 0 of
`services.trainer.distributed` publish their trained networks through it too.

What is the same for every game: the export check (`export_served`: scripted == eager and the
logits' shape at each size the game's model is test-run at, on the game's random inputs and
positions of random legal games, and on real validation positions where there is a dataset),
the model card and metadata (the network's top-1/top-5 on each split of ``--dataset`` when
given, else the figures its weights file records; the dataset's validation positions stored
for the rollout's smoke test), and the version numbering (`services.repository.publish`). What
differs comes from the configuration (`ModelSpec`: its game, its input encoder, the module
Triton serves around the network, how its random weights are drawn) and from its `Game`
(sizes, inputs), never from the game's name.

The trainer's gate: a trained model is published only if `check_gate` passes it
(`services.repository.gate`: sound, and its validation top-1 not below the serving version's,
measured here on the same split from that version's own TorchScript file, minus a tolerance)
and the repository can serve it (`unservable_reason`: a ``config.pbtxt`` whose input dims take
the dataset's boards in the model's input). Every model is handed its own input: the trained
one its configuration's encoder (`ModelSpec.encoder`) in the export check, the stored
positions and their top-1; the serving version the encoder its ``metadata.json`` records
(``basic`` when it records none) in the gate. The published version records its encoder
(``encoder`` in ``metadata.json``).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from services.atomic_files import atomic_write_text
from services.dataset.loader import dataset_game
from services.dataset.shards import read_split
from services.defaults import MODEL_FILE
from services.games.base import BASIC_ENCODER, Game
from services.games.registry import UnknownGame, game_for_model, get_game, registered_games
from services.games.rollout import RolloutWeights
from services.games.triton_config import io_dims
from services.models.configs import CONFIGS, spec
from services.models.export import ExportError, export_for_serving
from services.models.weights import WeightsFile, network, read_weights, write_per_size
from services.repository import gate
from services.repository.configs import config_file, config_io, dims_accept
from services.repository.model_card import build_card
from services.repository.model_check import check_sizes_for, load_model
from services.repository.publish import publish
from services.repository.rollout_state import reference_version
from services.repository.smoke_positions import SMOKE_POSITIONS_FILE, write_smoke_positions
from services.repository.version_files import read_version_metadata
from services.repository.versions import version_dir
from services.trainer.metrics import evaluate, evaluate_dataset
from services.trainer.train import TrainResult

MODEL_CARD_FILE = "model_card.json"  # a training run's card, for experiment tracking
SMOKE_ROWS = 256  # validation positions stored with a version for the rollout's smoke test
CHECK_ROWS = 64  # real validation positions the export check runs on, with a dataset
CHECK_INPUTS = 16  # random inputs, and as many positions of random games, per size checked


def model_encoder(result: TrainResult) -> str:
    """The input encoder the trained model takes (its configuration's)."""
    return spec(result.config.model).encoder


def version_encoder(repository: Path, model_name: str, version: int) -> str:
    """The input encoder a published version takes: the one its ``metadata.json`` records,
    else the basic one (versions published before encoders were recorded took that)."""
    recorded = read_version_metadata(repository, model_name, version).get("encoder")
    return recorded if isinstance(recorded, str) and recorded else BASIC_ENCODER


def check_gate(metrics: dict, repository: Path, model_name: str, dataset_dir: Path,
               tolerance: float = gate.DEFAULT_TOLERANCE, device: str = "cpu"
               ) -> gate.GateDecision:
    """The publish gate on a trained model's `metrics`: refused when its outputs were not
    finite; else its validation top-1 against the serving version's (`reference_version`),
    measured here on the dataset's validation split from that version's ``model.pt``, in the
    input that version takes (`version_encoder`)."""
    refused = gate.refuse_unsound(metrics)
    if refused is not None:
        return refused
    candidate = metrics["validation"]["top1"]
    version = reference_version(repository, model_name)
    if version is None:
        return gate.decide(candidate, None, None, tolerance)
    serving = load_model(version_dir(repository, model_name, version) / MODEL_FILE, device)
    boards, moves, _ = read_split(dataset_dir, "validation")
    serving_top1 = evaluate(serving, boards, moves, device, game=metrics["game"],
                            encoder=version_encoder(repository, model_name, version))["top1"]
    return gate.decide(candidate, version, serving_top1, tolerance)


def unservable_reason(repository: str, model_name: str, dataset_dir: str,
                      encoder: str = BASIC_ENCODER) -> str | None:
    """Why a model of this dataset taking `encoder` cannot be published as `model_name`, or
    None if it can: there must be a config.pbtxt (the repository's, else the tracked template,
    else the one the model's game generates, which publishing writes) whose input dims take
    the dataset's boards in that input ([s, s] Gomoku cells, [4, s, s] Go planes, [10, s, s]
    Go's extended input; a -1 dim, as in the tracked go_policy config, takes any size)."""
    game, size = dataset_game(dataset_dir, "train")
    shape = list(get_game(game).encoder_input_shape(encoder, size))
    config = config_file(Path(repository), model_name)
    if config is None:  # publishing writes the config its game generates, if it has one
        served = game_for_model(model_name)
        if served is None:
            return (f"no Triton config.pbtxt for {model_name!r} in {repository} or the tracked "
                    "templates, and no registered game serves that model")
        where, dims = f"the config {served.title} generates", list(io_dims(served)[0])
    else:
        io = config_io(config)
        where, dims = str(config), (list(io[0]) if io is not None else None)
    if dims is None or not dims_accept(dims, shape):  # -1: any size
        boards = ("boards" if encoder == BASIC_ENCODER
                  else f"boards in the model's {encoder!r} input")
        return f"{where} takes input dims {dims}, this {game} dataset's {boards} are {shape}"
    return None


def export_checked(result: TrainResult, model_file: Path, dataset_dir: str | Path) -> float:
    """The trained network's export (`export_served`) with `CHECK_ROWS` of the dataset's
    validation positions among the check inputs; return the max abs difference."""
    return export_served(result.model, result.config.model, model_file, dataset_dir)


def export_served(net: nn.Module, config: str, model_file: Path,
                  dataset_dir: str | Path | None = None,
                  sizes: tuple[int, ...] | None = None) -> float:
    """The TorchScript export of what Triton serves for `net` (a `config` network:
    `ModelSpec.served`), checked against the eager module (`export_for_serving`) at every size
    its game's model is test-run at (`check_sizes_for`) on the game's random inputs and
    positions of random legal games, and on `CHECK_ROWS` real validation positions of
    `dataset_dir` where given, all in the model's input (`ModelSpec.encoder`); return the
    max abs difference. `sizes`: check at these instead (a per-size network: every size its
    game serves, so each network it holds, and each choice between them, is checked)."""
    found = spec(config)
    game = get_game(found.game)
    boards = None
    if dataset_dir is not None:
        boards = read_split(Path(dataset_dir), "validation")[0][:CHECK_ROWS]
        if len(boards):
            boards = game.encode_inputs(boards, found.encoder)
    return export_for_serving(found.served(net), model_file, game,
                              sizes or check_sizes_for(game),
                              encoder=found.encoder, n_check=CHECK_INPUTS, boards=boards)


def smoke_rows(dataset_dir: str | Path, rows: int = SMOKE_ROWS,
               encoder: str = BASIC_ENCODER) -> tuple[np.ndarray, np.ndarray] | None:
    """Up to `rows` validation positions, evenly spaced over the split (every game stage), as
    the network takes them (in `encoder`'s input, the model's), and the moves played: (boards
    int8, moves int64); None when the split is empty (the version then has no stored
    positions, and the rollout says so)."""
    boards, moves, _ = read_split(Path(dataset_dir), "validation")
    if not len(moves):
        return None
    pick = np.unique(np.linspace(0, len(moves) - 1, min(rows, len(moves))).astype(np.int64))
    boards = boards[pick]
    if encoder != BASIC_ENCODER:
        game, _ = dataset_game(dataset_dir, "validation")
        boards = get_game(game).encode_inputs(boards, encoder)
    return boards, moves[pick].astype(np.int64)


def export_and_publish(result: TrainResult, repository: str, model_name: str,
                       dataset_dir: str, decision: gate.GateDecision | None = None,
                       run_dir: str | None = None) -> int:
    """Publish a trained network (`publish_network`) with its training run's recipe and final
    evaluation and the gate's `decision` on its model card."""
    source = f"train run {Path(run_dir).resolve()}" if run_dir else "trainer"
    return publish_network(result.model, result.config.model, repository, model_name,
                           dataset_dir=dataset_dir, recipe=result.config,
                           metrics=result.metrics,
                           metrics_source="the training run's final evaluation",
                           decision=decision, source=source, metadata=result.summary())


def write_run_card(result: TrainResult, dataset_dir: str | Path, path: Path, *,
                   repository: str | Path | None = None, model_name: str | None = None,
                   version: int | None = None, decision: Any = None) -> Path:
    """The training run's model card as JSON at `path` (an artefact of its tracking run): the
    published version's ``metadata.json`` (the card with its version and sha256) when `version`
    is given, else the card of the trained network as publication would write it
    (`build_card`, with the gate's `decision`: a `GateDecision` or a dict of its fields; None:
    the run was not offered for publication), so a run that published nothing has one too."""
    meta = (read_version_metadata(Path(repository), model_name, version)
            if version is not None and repository is not None and model_name else {})
    if not meta:
        meta = build_card(config_name=result.config.model, model=result.model,
                          dataset_dir=dataset_dir, recipe=result.config, metrics=result.metrics,
                          metrics_source="the training run's final evaluation",
                          gate=decision if decision is not None else {
                              "passed": None, "reason": "no gate: not offered for publication"})
    atomic_write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n", path)
    return path


def publish_network(net: nn.Module, config: str, repository: str | Path,
                    model_name: str | None = None, *, source: str,
                    dataset_dir: str | Path | None = None, recipe: Any = None,
                    metrics: dict | None = None, metrics_source: str | None = None,
                    decision: gate.GateDecision | None = None,
                    metadata: dict | None = None,
                    rollout: RolloutWeights | None = None,
                    check_sizes: tuple[int, ...] | None = None) -> int:
    """Export a `config` network `net` (`export_served`: checked, at its game's sizes) and
    publish it as the next version of `model_name` (default: its game's model for the
    configuration's input, `Game.model_name`); return the
    version. Every game is published here, and only its configuration and its `Game` say
    what differs: the module served, the input encoder, the sizes and inputs checked.

    ``metadata.json`` holds `metadata`, the model card (`build_card`: the configuration, the
    dataset, the code's commit, the `recipe`, the `metrics` and their source, the gate's
    `decision`, or none), the export's max abs difference, the input encoder, and with a
    dataset its stored positions (`SMOKE_ROWS` validation positions, ``smoke_positions.npz``,
    with the exported file's top-1 on them, for the rollout's smoke test). The `metrics`:
    given, else the network evaluated now on each split of `dataset_dir`
    (`evaluate_dataset`), else none. `source` (recorded as ``source``) says what the network
    was made from. `rollout`: the fast rollout policy trained with the network, versioned
    with it (``rollout.npz`` beside ``model.pt``: searches with ``rollout_lambda`` > 0 use
    it); refused (ValueError) when it plays another game's rollouts. `check_sizes`: the sizes
    the export is checked at, when not its game's usual ones (`export_served`). ValueError
    when the dataset is of another game than the configuration."""
    found = spec(config)
    game = get_game(found.game)
    encoder = found.encoder
    model_name = model_name or game.model_name(encoder)
    served = found.served(net).eval()
    if dataset_dir is not None:
        data_game = dataset_game(dataset_dir)[0]  # from the shards: a manifest may not say
        if data_game != game.name:
            raise ValueError(f"{dataset_dir} is a {data_game} dataset, {config!r} a "
                             f"{game.name} network")
        if metrics is None:
            metrics = evaluate_dataset(served, dataset_dir, encoder=encoder)
            metrics_source = f"evaluated at publish time on {Path(dataset_dir).resolve()}"
    if rollout is not None:
        check_rollout_game(rollout, game)
    if metrics is None and metrics_source is None:
        metrics_source = "none: no dataset to evaluate it on"
    card = build_card(config_name=config, model=served, dataset_dir=dataset_dir, recipe=recipe,
                      metrics=metrics, metrics_source=metrics_source, gate=decision)
    with tempfile.TemporaryDirectory(prefix="publish-") as tmp:
        model_file = Path(tmp) / MODEL_FILE
        diff = export_served(net, config, model_file, dataset_dir, check_sizes)
        info = {**(metadata or {}), **card, "export_max_abs_diff": diff}
        extra_files: dict[str, Path | bytes] = {}
        rows = smoke_rows(dataset_dir, encoder=encoder) if dataset_dir is not None else None
        if rows is not None:
            boards, moves = rows
            positions = Path(tmp) / SMOKE_POSITIONS_FILE
            write_smoke_positions(positions, boards, moves)
            exported = load_model(model_file)
            # serving must reproduce it; `boards` are the model's input already (no encoding)
            top1 = evaluate(exported, boards, moves, "cpu", game=game.name)["top1"]
            info["smoke_positions"] = {"file": SMOKE_POSITIONS_FILE, "rows": len(moves),
                                       "top1": top1}
            extra_files[SMOKE_POSITIONS_FILE] = positions
        return publish(model_file, Path(repository), model_name, metadata=info,
                       extra_files=extra_files, source=source, game=game, encoder=encoder,
                       rollout=rollout)


# ---------------------------------------------------------------------------- the command
def resolve_config(game: str | None = None, config: str | None = None,
                   weights: WeightsFile | None = None) -> str:
    """The configuration to publish: `config`, else the one the weights file names, else
    `game`'s default; ValueError when none is named, the config is unknown, the weights file
    names another, or the config plays another game than `game` (UnknownGame, a KeyError,
    for a game not registered)."""
    named = weights.config if weights is not None else None
    if config and named and config != named:
        raise ValueError(f"{weights.path} holds a {named} network, not {config}")
    played = get_game(game) if game is not None else None
    chosen = config or named or (played.default_config if played is not None else None)
    if not chosen:
        raise ValueError("name the network: --config NAME, or --game GAME for its default "
                         f"configuration (games: {', '.join(g.name for g in registered_games())})")
    found = spec(chosen)
    if played is not None and found.game != played.name:
        own = sorted(name for name, s in CONFIGS.items() if s.game == played.name)
        raise ValueError(f"{chosen!r} is a {found.game} configuration, not a {played.title} "
                         f"one ({played.title} configurations: {', '.join(own)})")
    return chosen


def publish_model(repository: str | Path, *, game: str | None = None,
                  config: str | None = None, seed: int = 0,
                  weights: str | Path | WeightsFile | None = None,
                  dataset: str | Path | None = None, model_name: str | None = None,
                  rollout: str | Path | RolloutWeights | None = None) -> int:
    """Publish a network of any registered game (`publish_network`): a `config` network (the
    configuration `resolve_config` picks from `game`, `config` and the weights file) with
    random weights drawn from `seed`, or those of `weights` (a trainer checkpoint, the policy
    search's ``best_network.pt``, a state_dict or a flat vector, or a per-size file of one
    network per board size, served as one module and checked at every size its game serves:
    `read_weights`). The card's
    metrics: with `dataset`, the network evaluated on its splits now; else those the weights
    file records (the checkpoint's last evaluation, the policy search's fitness); else none.
    Returns the version."""
    found = (weights if isinstance(weights, WeightsFile) or weights is None
             else read_weights(weights))
    config = resolve_config(game, config, found)
    net = network(config, seed, found)
    if found is None:
        where, recipe, metrics = None, None, None
        metrics_source = "none: an untrained network and no dataset to evaluate it on"
    else:
        where, recipe, metrics = str(found.path.resolve()), found.recipe, found.metrics
        metrics_source = found.metrics_source or ("none: the weights file records none and "
                                                  "no dataset to evaluate it on")
    if dataset is not None:  # measured now instead
        metrics = metrics_source = None
    per_size = found is not None and found.sizes is not None
    metadata: dict[str, Any] = {"seed": None if where else seed, "weights": where}
    if per_size:
        metadata["per_size"] = sorted(found.sizes)
    return publish_network(net, config, repository, model_name, dataset_dir=dataset,
                           recipe=recipe, metrics=metrics, metrics_source=metrics_source,
                           source=where or f"untrained {config}, seed {seed}",
                           metadata=metadata, rollout=read_rollout_file(rollout),
                           check_sizes=(get_game(spec(config).game).sizes
                                        if per_size else None))


def check_rollout_game(rollout: RolloutWeights, game: Game) -> None:
    """ValueError unless `rollout` can serve `game`'s searches: the game has rollouts and the
    rollout policy's configuration (when it names one) is one of that game's."""
    if game.rollouts("") is None:
        raise ValueError(f"{game.title} has no rollouts: no rollout policy is published with "
                         "its networks")
    if rollout.config and rollout.config in CONFIGS and spec(rollout.config).game != game.name:
        raise ValueError(f"the rollout policy is a {spec(rollout.config).game} one "
                         f"({rollout.config}), the network plays {game.title}")


def read_rollout_file(rollout: str | Path | RolloutWeights | None) -> RolloutWeights | None:
    """`rollout` as rollout weights: read from its file (ValueError naming the file when it
    is not one); weights and None as they are."""
    if rollout is None or isinstance(rollout, RolloutWeights):
        return rollout
    path = Path(rollout)
    try:
        return RolloutWeights.from_bytes(path.read_bytes())
    except ValueError as exc:
        raise ValueError(f"{path}: not a rollout policy file ({exc})") from exc


def per_size_files(pairs: Sequence[str]) -> dict[int, Path]:
    """``SIZE=FILE`` pairs as {size: file}; ValueError naming a pair that is not one, or a
    size given twice."""
    files: dict[int, Path] = {}
    for pair in pairs:
        size, sep, file = pair.partition("=")
        if not sep or not size.strip().isdigit() or not file:
            raise ValueError(f"{pair!r}: give SIZE=FILE, e.g. 7=runs/capture/7x7.pt")
        if int(size) in files:
            raise ValueError(f"size {int(size)} given twice")
        files[int(size)] = Path(file)
    return files


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m services.trainer.publish",
        description="Publish a network of any registered game as the next version of its "
                    "Triton model (export checked, model card, stored positions with "
                    "--dataset).")
    p.add_argument("--repository", type=Path, required=True, help="Triton model repository")
    p.add_argument("--game", default=None,
                   help="the game (default: the configuration's); alone, its default "
                        "configuration is published")
    p.add_argument("--config", default=None,
                   help="model configuration (default: the one the weights file names, else "
                        "the game's default)")
    p.add_argument("--seed", type=int, default=0, help="random weights' seed (without --weights)")
    p.add_argument("--weights", "--checkpoint", dest="weights", type=Path, default=None,
                   help="trainer checkpoint, policy search best_network.pt, state_dict (.pt) "
                        "or flat weight vector (.npy, .npz)")
    p.add_argument("--weights-per-size", nargs="+", default=None, metavar="SIZE=FILE",
                   help="one network per board size (e.g. 5=a.pt 7=b.pt 9=c.pt: policy search "
                        "best_network.pt files), served as one model that plays each board "
                        "with the network of the largest size at or below it; combined into "
                        "--weights FILE (written) and published")
    p.add_argument("--dataset", type=Path, default=None,
                   help="dataset of the game: the network's top-1/top-5 (by stage) on each "
                        "split for its model card, and validation positions stored with it")
    p.add_argument("--model-name", default=None,
                   help="default: the game's Triton model (for the configuration's input)")
    p.add_argument("--rollout", type=Path, default=None,
                   help="a fast rollout policy (rollout.npz, from benchmarks/rollout_top1.py "
                        "--save) published with the network: searches with rollout_lambda > 0 "
                        "use it")
    args = p.parse_args(argv)
    if args.weights_per_size is not None and args.weights is None:
        p.error("--weights-per-size writes the combined file to --weights FILE: name it")
    try:
        if args.weights_per_size is not None:
            write_per_size(per_size_files(args.weights_per_size), args.weights)
        found = read_weights(args.weights) if args.weights is not None else None
        config = resolve_config(args.game, args.config, found)
        found_spec = spec(config)
        model_name = args.model_name or get_game(found_spec.game).model_name(found_spec.encoder)
        version = publish_model(args.repository, config=config, seed=args.seed, weights=found,
                                dataset=args.dataset, model_name=model_name,
                                rollout=args.rollout)
    except (ValueError, UnknownGame, ExportError, OSError, RuntimeError,
            pickle.UnpicklingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"published {model_name} v{version} ({config}) in {args.repository}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
