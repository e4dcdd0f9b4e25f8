"""A game's Triton `config.pbtxt`, generated from its model I/O (`Game.model_io`).

The served model of every game runs the same python-backend `model.py` over a TorchScript
network, so what differs between games is only what `ModelIO` says: the input's dims (the
board, or planes of it), the logits per board (the points, plus the pass), whether one version
answers several board sizes (then the spatial dims and the logits are -1 and follow the board).
Writing those facts here, once, keeps a game's shapes in one place: the committed
`model_repository/<model>/config.pbtxt` files are this module's output (a test compares them),
and a game added later gets its config from the same function.

A network built for another of its game's input encoders (Go's "extended": the basic planes
and tactical channels) is served as a model of its own (`Game.model_name(encoder)`, e.g.
``go_policy_extended``): a config applies to every version of its model, so the config states
the encoder as a parameter (`ENCODER_PARAMETER`) beside the dims of that encoder's input, and
what sends requests reads it from the served config (`services.triton.client`) to compute that
input. Those configs are generated into a repository when a model is first published
(`services.repository.configs.ensure_model_config`), not committed.

    python -m services.games.triton_config [--write] [--repository model_repository]

prints (or, with --write, writes) the config of every registered game's default model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from services.defaults import MAX_BATCH_BOARDS
from services.games.base import BASIC_ENCODER, Game

QUEUE_DELAY_US = 500  # Triton's dynamic batcher waits this long to fill a batch
GENERATOR = "python -m services.games.triton_config --write"
# The config parameter naming the input encoder the model's networks take (absent: "basic", the
# game's input as requests and shards hold it; an older repository's configs declare none).
ENCODER_PARAMETER = "encoder"


def _dims(values: tuple[int, ...]) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]"


def io_dims(game: Game, encoder: str = BASIC_ENCODER) -> tuple[tuple[int, ...], int]:
    """(the input dims of one board, the logits per board) as the config of `game`'s model
    taking `encoder` declares them: -1 for what follows the board size when the model serves
    several sizes."""
    io = game.model_io(encoder)
    if len(io.board_sizes) == 1:
        return io.board_shape, io.n_moves
    return (*io.board_shape[:-2], -1, -1), -1


def config_text(game: Game, encoder: str = BASIC_ENCODER, *,
                max_batch_size: int = MAX_BATCH_BOARDS,
                queue_delay_us: int = QUEUE_DELAY_US) -> str:
    """The complete config of `game`'s model taking `encoder` (`Game.model_name`; the server
    runs with --disable-auto-complete-config, so nothing may be left for Triton to fill in)."""
    io = game.model_io(encoder)
    board_dims, n_moves = io_dims(game, encoder)
    encoded = ("" if encoder == BASIC_ENCODER else
               f",\n# on its {encoder!r} input encoding (computed by the sender)")
    sizes = io.board_sizes
    logits = "S*S+1 (the pass last)" if io.pass_move else "S*S"
    if len(sizes) == 1:
        served = f"one board size, {sizes[0]}x{sizes[0]}"
        follow = ""
    else:
        served = f"every board size {sizes[0]}..{sizes[-1]} with one version"
        follow = ("\n# The spatial dims and the logits are -1: they follow the board. One "
                  "request holds boards of one\n# size; model.py makes one forward pass per "
                  "size when a batch mixes them.")
    head = f"{game.title}: the policy network served by Triton's python backend, {served}"
    return f"""# {head}{encoded}.
# Generated from the game's model I/O by `{GENERATOR}`: edit the game, not this file.
#
# Each published version folder (<version>/, gitignored) holds model.pt (TorchScript: int8
# inputs {io.describe()} -> float32 logits [N, {logits}], or the tuple
# (logits, value [N]) for a network with a value head), model.py (a copy of
# services/triton/policy_model.py, which reads the shapes below and answers both outputs for
# either kind of model) and metadata.json.{follow}
# The server runs with --disable-auto-complete-config, so this file must stay complete.
name: "{game.model_name(encoder)}"
backend: "python"
max_batch_size: {max_batch_size}

input [
  {{
    name: "boards"
    data_type: TYPE_INT8
    dims: {_dims(board_dims)}
  }}
]

output [
  {{
    name: "logits"
    data_type: TYPE_FP32
    dims: {_dims((n_moves,))}
  }},
  # The value head's expected result for the side to move, in [-1, 1]: [N,1]. NaN for every
  # board when the published model.pt has no value head (it returns logits only).
  {{
    name: "value"
    data_type: TYPE_FP32
    dims: [ 1 ]
  }}
]

# Whether a board's logits end with the pass: model.py's only way to know the logits per board
# of a size it has not seen (it never guesses a game from a board's shape).
parameters: {{
  key: "pass_move"
  value: {{ string_value: "{str(io.pass_move).lower()}" }}
}}

# The input encoder of every version's network (its metadata.json records the same one, else
# the version is not served): the search service and the rollout read it here and send that
# input, computed from each position.
parameters: {{
  key: "{ENCODER_PARAMETER}"
  value: {{ string_value: "{encoder}" }}
}}

# Only the newest version is served: loading (or reloading) the model brings up the newest
# version folder and then unloads the previous one.
version_policy: {{ latest: {{ num_versions: 1 }} }}

dynamic_batching {{
  max_queue_delay_microseconds: {queue_delay_us}
}}

# One stub process; policy_model.py moves the batch to the GPU itself when torch sees one.
instance_group [
  {{
    kind: KIND_CPU
    count: 1
  }}
]
"""


def config_path(game: Game, repository: Path, encoder: str = BASIC_ENCODER) -> Path:
    return Path(repository) / game.model_name(encoder) / "config.pbtxt"


def main(argv: list[str] | None = None) -> int:
    from services.games.registry import registered_games

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--write", action="store_true", help="write the files (else print)")
    args = parser.parse_args(argv)
    for game in registered_games():
        text = config_text(game)
        path = config_path(game, args.repository)
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            sys.stderr.write(f"wrote {path}\n")
        else:
            sys.stdout.write(f"# ---- {path}\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
