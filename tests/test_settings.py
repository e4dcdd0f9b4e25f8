"""One source per setting: the settings dataclasses (`TrainConfig`, `ServiceConfig`) write every
command line's flags and defaults, the train flow and its deployments take the dataclass, and
no entry point, deployment or Make target restates a default."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import shlex
import subprocess
from pathlib import Path

import pytest

import flows  # noqa: F401  (Prefect defaults before Prefect is imported)
from services import settings
from services.games.registry import default_game, get_game, registered_games
from services.search import server
from services.search.server import ServiceConfig
from services.trainer import distributed
from services.trainer.train import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Example:
    steps: int | None = settings.setting(None, "a limit (default: none)")
    rate: float = settings.setting(0.5, "a rate", flag="learning-rate")
    mode: str = settings.setting("a", "a mode", choices=("a", "b"))
    shuffle: bool = settings.setting(True, "shuffle")
    hidden: int = settings.setting(3, "set by an object, not a flag", cli=False)


def test_flags_come_from_the_fields() -> None:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, Example)
    assert settings.from_args(Example, parser.parse_args([])) == Example()
    parsed = settings.from_args(Example, parser.parse_args(
        ["--steps", "7", "--learning-rate", "0.25", "--mode", "b", "--no-shuffle"]))
    assert parsed == Example(steps=7, rate=0.25, mode="b", shuffle=False)
    assert "--hidden" not in parser.format_help() and "(default 0.5)" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "c"])


def test_numbers_out_of_their_range_are_usage_errors(capsys: pytest.CaptureFixture) -> None:
    """Ports past 65535 wrapped (70000 listened on 4464) or raised OverflowError; a limit of 0
    RPCs started a server that refused every call. The range is the field's."""
    for argv, message in (
            (["--port", "70000"], "--port: must be in 0..65535, got 70000"),
            (["--port", "-1"], "--port: must be in 0..65535, got -1"),
            (["--metrics-port", "65536"], "--metrics-port: must be in 0..65535"),
            (["--max-concurrent-rpcs", "0"], "--max-concurrent-rpcs: must be >= 1, got 0"),
            (["--max-message-bytes", "0"], "--max-message-bytes: must be in 1024..2147483647"),
            (["--triton-timeout", "nan"], "--triton-timeout: must be in 0.001..3600, got nan"),
            (["--triton-timeout", "inf"], "--triton-timeout: must be in 0.001..3600, got inf"),
            (["--processes", "0"], "--processes: must be in 1..256, got 0")):
        with pytest.raises(SystemExit) as exit_info:
            server._parse_args(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err, argv
    args = server._parse_args(["--port", "0", "--metrics-port", "65535", "--processes", "2"])
    assert (args.port, args.metrics_port, args.processes) == (0, 65535, 2)
    parse = settings.bounded(float, 0.5)
    assert parse("0.5") == 0.5 and parse("1e9") == 1e9
    with pytest.raises(argparse.ArgumentTypeError, match=r">= 0\.5, got 0\.4"):
        parse("0.4")


def test_prefix_and_per_entry_defaults() -> None:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, Example, prefix="train-", defaults={"mode": "b"})
    args = parser.parse_args(["--train-steps", "4"])
    assert args.train_steps == 4 and args.train_mode == "b"
    assert settings.from_args(Example, args, prefix="train-") == Example(steps=4, mode="b")
    with pytest.raises(ValueError, match="no field"):
        settings.add_arguments(argparse.ArgumentParser(), Example, defaults={"nope": 1})


def _train_parsers() -> dict[str, tuple[argparse.ArgumentParser, str, list[str]]]:
    """Every command line that takes the training settings: (parser, flag prefix, the
    arguments it requires)."""
    from flows.schedules import TRAIN_PREFIX
    from flows.schedules import build_parser as schedules_parser
    from flows.train import build_parser as train_parser

    return {"flows.train": (train_parser(), "", []),
            "flows.schedules": (schedules_parser(), TRAIN_PREFIX, []),
            "services.trainer.distributed": (distributed.build_parser(), "",
                                             ["--dataset", "d", "--run-dir", "r"])}


@pytest.mark.parametrize("entry", ["flows.train", "flows.schedules",
                                   "services.trainer.distributed"])
def test_every_training_flag_defaults_to_its_field(entry: str) -> None:
    parser, prefix, required = _train_parsers()[entry]
    flags = parser._option_string_actions  # argparse keeps no public index
    for field in settings.cli_fields(TrainConfig):
        action = flags[settings.flag_of(field, prefix)]
        assert action.dest == settings.dest_of(field, prefix), (entry, field.name)
    config = settings.from_args(TrainConfig, parser.parse_args(required), prefix=prefix)
    # torchrun's entry picks each rank's GPU unless told, on purpose (DEFAULT_DEVICE)
    expected = (TrainConfig(device=distributed.DEFAULT_DEVICE)
                if entry == "services.trainer.distributed" else TrainConfig())
    assert config == expected


def test_the_flow_takes_the_config_and_its_deployment_passes_it_whole(tmp_path: Path) -> None:
    from flows.schedules import nightly_deployment, train_deployment
    from flows.train import train_flow

    flow_params = inspect.signature(train_flow.fn).parameters
    fields = set(settings.field_defaults(TrainConfig))
    assert "config" in flow_params and not fields & set(flow_params)

    config = TrainConfig(model="go_res_b2c32", max_seconds=600, batch_size=64)
    deployment = train_deployment(str(tmp_path / "ds"), config)
    assert set(deployment.parameters) <= set(flow_params)
    assert deployment.parameters["config"] == dataclasses.asdict(config)
    # the flow turns the deployment's dict back into the same TrainConfig
    model = train_flow.parameters.model_dump()["properties"]["config"]
    assert any(ref.get("$ref", "").endswith("/TrainConfig") for ref in model["anyOf"])

    from flows.ingest import ingest

    ingest_params = inspect.signature(ingest.fn).parameters
    assert set(nightly_deployment().parameters) <= set(ingest_params)


def test_the_model_default_is_the_dataset_games() -> None:
    assert TrainConfig().model is None
    assert TrainConfig().for_game("go").model == get_game("go").default_config
    assert TrainConfig(model="shao_f32_n2").for_game("go").model == "shao_f32_n2"


def test_every_service_flag_defaults_to_its_field() -> None:
    parser_args = server._parse_args([])
    assert settings.from_args(ServiceConfig, parser_args) == ServiceConfig()
    help_text = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "services.search.server", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True).stdout
    for field in settings.cli_fields(ServiceConfig):
        assert re.search(rf"(?<![\w-]){re.escape(settings.flag_of(field))}(?![\w-])",
                         help_text), field.name
    # build_service takes the settings as one ServiceConfig, none as a parameter of its own
    params = inspect.signature(server.build_service).parameters
    assert not set(params) & set(settings.field_defaults(ServiceConfig))
    assert dataclasses.replace(ServiceConfig(), port=0) == server.LIBRARY_CONFIG


def _make_recipe(target: str) -> list[str]:
    """The words of the command `make TARGET` runs (its `setup` prerequisite left out)."""
    out = subprocess.run(["make", "-s", "-n", "--no-print-directory", target, "PY=python"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.replace("\\\n", " ").splitlines()
             if line.strip() and "setup_env.sh" not in line]
    return shlex.split(" ".join(lines))


@pytest.mark.parametrize("target, module", [("train", "flows.train"),
                                            ("schedule", "flows.schedules"),
                                            ("serve", "services.search.server")])
def test_make_targets_restate_no_default(target: str, module: str) -> None:
    """What the Make target passes differs from the command line's default (the ports are the
    Makefile's own variables, shared with the client targets, and are left out)."""
    from flows.schedules import build_parser as schedules_parser
    from flows.train import build_parser as train_parser

    words = _make_recipe(target)
    at = words.index(module)
    argv = words[at + 1:]
    parser = {"flows.train": train_parser, "flows.schedules": schedules_parser,
              "services.search.server": lambda: _server_parser()}[module]()
    given, defaults = parser.parse_args(argv), parser.parse_args([])
    ports = {"port", "triton_url"}
    restated = {action.dest for action in parser._actions
                if set(action.option_strings) & set(argv) and action.dest not in ports
                and getattr(given, action.dest) == getattr(defaults, action.dest)}
    assert not restated, f"make {target} restates the defaults of {sorted(restated)}"
    flagged = [w for w in argv if w.startswith("--")]
    assert {"--dataset", "--repository", "--out", "--cron"}.isdisjoint(flagged)


def _server_parser() -> argparse.ArgumentParser:
    """The search service's parser without its post-parse checks (for defaults only)."""
    parser = argparse.ArgumentParser()
    for game in registered_games():
        parser.add_argument(server.model_flag(game), dest=server.model_dest(game))
    settings.add_arguments(parser, ServiceConfig)
    return parser


def test_every_registered_game_has_its_model_flag() -> None:
    """A game registered anywhere (here the test suite's tic-tac-toe) gets `--<name>-model`
    with no edit to the server; an empty flag leaves that game unserved."""
    from tests.tictactoe_game import TICTACTOE

    args = server._parse_args(["--tictactoe-model", "ttt_v2", "--go-model", "",
                               "--capture-model", ""])
    served = {game.name: model for game, model in server.served_models(args).items()}
    assert served == {default_game().name: default_game().default_model,
                      TICTACTOE.name: "ttt_v2"}
    assert server.model_flag(default_game()) == "--model"
    assert server.model_flag(get_game("go")) == "--go-model"


def test_a_server_with_no_model_at_all_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    empty = [arg for game in registered_games() for arg in (server.model_flag(game), "")]
    with pytest.raises(SystemExit):
        server._parse_args(empty)
    assert "name at least one model to serve" in capsys.readouterr().err
