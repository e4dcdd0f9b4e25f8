"""Settings dataclasses as the one source of their command-line flags and defaults.

A settings class (`services.trainer.train.TrainConfig`, `services.search.server.ServiceConfig`)
declares each field with `setting(default, help, flag=...)`. `add_arguments` writes the argparse
flags from those fields (name, type, default, choices, help), `from_args` builds the dataclass
back from the parsed namespace, and the Prefect flows and deployments take the dataclass itself
as a parameter. A default is therefore written once, on its field, and every entry point (the
flows' command lines, torchrun's entry, the search service, the Prefect deployments) reads it
from there.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


MAX_PORT = 65535
MAX_INT32 = 2**31 - 1  # the largest count an API int32 field holds (protobuf refuses more)


def setting(default: Any, help: str, *, flag: str | None = None,
            choices: Iterable[Any] | Callable[[], Iterable[Any]] | None = None,
            cli: bool = True, minimum: float | None = None,
            maximum: float | None = None) -> Any:
    """A dataclass field with its command-line description: `flag` (default ``--`` and the field
    name with dashes), `choices` (or a function giving them when asked: a registry that grows
    after this module's import, as model configurations do), the range a number must be in
    (`minimum`, `maximum`, inclusive: the command line refuses others with a usage error), and
    `cli=False` for a field no command line sets (one given by an object built elsewhere, or
    by another module's flags)."""
    return dataclasses.field(default=default, metadata={
        "help": help, "flag": flag,
        "choices": choices if choices is None or callable(choices) else tuple(choices),
        "cli": cli, "minimum": minimum, "maximum": maximum})


def choices_of(meta: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """A setting's choices now (a function of them is called)."""
    choices = meta.get("choices")
    return tuple(choices()) if callable(choices) else choices


def port_setting(default: Any, help: str, **kwargs: Any) -> Any:
    """A TCP port (0..65535; 0 where the help says what it means): socket APIs wrap larger
    numbers modulo 65536, so 70000 would quietly listen on 4464."""
    return setting(default, help, minimum=0, maximum=MAX_PORT, **kwargs)


def _number(value: float | None) -> str:
    return str(int(value)) if value is not None and float(value).is_integer() else f"{value:g}"


def out_of_range(value: float, minimum: float | None, maximum: float | None) -> str | None:
    """'must be ...' when `value` is outside [minimum, maximum] or a float not finite (with
    a bound set), else None. (No float() of an int: a 400-digit one would overflow.)"""
    if minimum is None and maximum is None:
        return None
    if (minimum is not None and not value >= minimum) or \
            (maximum is not None and not value <= maximum) or \
            (isinstance(value, float) and not math.isfinite(value)):
        if maximum is None:
            return f"must be >= {_number(minimum)}"
        if minimum is None:
            return f"must be <= {_number(maximum)}"
        return f"must be in {_number(minimum)}..{_number(maximum)}"
    return None


def bounded(kind: type, minimum: float | None = None,
            maximum: float | None = None) -> Callable[[str], Any]:
    """An argparse `type`: `kind` (int or float) within [minimum, maximum]; NaN and infinities
    are refused wherever a bound is set."""
    def parse(text: str) -> Any:
        value = kind(text)
        problem = out_of_range(value, minimum, maximum)
        if problem:
            raise argparse.ArgumentTypeError(f"{problem}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in "invalid int value"
    return parse


# an argparse type for a client's deadline in seconds: not NaN, not negative, not forever
DEADLINE_S = bounded(float, 0.001, 86_400)


def flag_of(field: dataclasses.Field, prefix: str = "") -> str:
    """The command-line flag of `field` (``--`` + `prefix` + its name or its own flag)."""
    name = field.metadata.get("flag") or field.name.replace("_", "-")
    return f"--{prefix}{name.removeprefix('--')}"


def dest_of(field: dataclasses.Field, prefix: str = "") -> str:
    """The argparse destination of `field`'s flag: the field name, after `prefix` if any."""
    return f"{prefix.replace('-', '_')}{field.name}"


def cli_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of settings class `cls` that a command line sets."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]


def _scalar_type(cls: type, name: str) -> type:
    """int, float, str or bool: the type of field `name` without its ``| None``."""
    hint = typing.get_type_hints(cls)[name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"{cls.__name__}.{name}: one type besides None, got {hint}")
        hint = args[0]
    if hint not in (int, float, str, bool):
        raise TypeError(f"{cls.__name__}.{name}: int, float, str or bool, got {hint}")
    return hint


def _help(field: dataclasses.Field, default: Any) -> str:
    text = field.metadata.get("help") or ""
    if default is None or "default" in text:
        return text  # None means something the help text says
    shown = repr(default) if isinstance(default, str) else f"{default:g}" if isinstance(
        default, float) else str(default)
    return f"{text} (default {shown})"


def add_arguments(parser: argparse.ArgumentParser, cls: type, *, prefix: str = "",
                  defaults: Mapping[str, Any] | None = None, title: str | None = None,
                  skip: Iterable[str] = ()) -> argparse._ArgumentGroup:
    """Add a flag for every command-line field of settings class `cls` to `parser`, in a group
    (`title`, default the class's name). `defaults` overrides a field's default for this command
    line alone (an entry point whose default differs on purpose, e.g. a device picked per
    rank); `skip` leaves fields out; `prefix` goes before every flag and destination (two
    settings classes, or one twice, on one command line)."""
    defaults = dict(defaults or {})
    skip = set(skip)
    unknown = (set(defaults) | skip) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
    group = parser.add_argument_group(title or f"{cls.__name__} settings")
    for field in cli_fields(cls):
        if field.name in skip:
            continue
        default = defaults.get(field.name, field.default)
        kind = _scalar_type(cls, field.name)
        options: dict[str, Any] = {"dest": dest_of(field, prefix), "default": default,
                                   "help": _help(field, default)}
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        else:
            low, high = field.metadata.get("minimum"), field.metadata.get("maximum")
            options["type"] = kind if low is None and high is None else bounded(kind, low, high)
            if field.metadata.get("choices"):
                options["choices"] = choices_of(field.metadata)
        group.add_argument(flag_of(field, prefix), **options)
    return group


def from_args(cls: type[T], args: argparse.Namespace, *, prefix: str = "",
              **overrides: Any) -> T:
    """An instance of settings class `cls` from a namespace parsed with `add_arguments` (fields
    without a flag there keep their defaults), then `overrides`."""
    values = {f.name: getattr(args, dest_of(f, prefix)) for f in dataclasses.fields(cls)
              if hasattr(args, dest_of(f, prefix))}
    return cls(**{**values, **overrides})


def check_settings(obj: Any) -> None:
    """Raise ValueError naming every field of settings object `obj` outside its `minimum` /
    `maximum` (NaN included) or `choices`: the same rule the command line applies, for an
    object built another way (a Prefect parameter, a deployment, a test). None passes (a field
    whose None means "not set")."""
    problems = []
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        meta = field.metadata
        if value is None or not meta:
            continue
        low, high = meta.get("minimum"), meta.get("maximum")
        if (low is not None or high is not None) and not isinstance(value, bool):
            if not isinstance(value, int | float):
                problems.append(f"{field.name} must be a number, got {value!r}")
                continue
            problem = out_of_range(value, low, high)
            if problem:
                problems.append(f"{field.name} {problem}, got {value!r}")
        choices = choices_of(meta)
        if choices and value not in choices:
            problems.append(f"{field.name} must be one of {', '.join(map(str, choices))}, "
                            f"got {value!r}")
    if problems:
        raise ValueError(f"{type(obj).__name__}: " + "; ".join(problems))


def field_defaults(cls: type) -> dict[str, Any]:
    """{field name: default} of settings class `cls`."""
    return {f.name: f.default for f in dataclasses.fields(cls)}


# Where the project keeps its data and models unless told otherwise (the flows' and the
# command lines' default paths).
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = str(ROOT / "artifacts" / "dataset")
DEFAULT_REPOSITORY = str(ROOT / "model_repository")
DEFAULT_RUN_DIR = str(ROOT / "artifacts" / "train")
