"""`movepred rollout`, `movepred rollback` and `movepred serving`: which version Triton serves.

    movepred rollout --triton-url 127.0.0.1:8001 --repository model_repository [--version N]
    movepred rollback --triton-url 127.0.0.1:8001 --repository model_repository
    movepred serving --triton-url 127.0.0.1:8001 --repository model_repository

Exit codes: 0 done (or already serving), 1 refused or Triton unreachable (the serving version
keeps serving), 2 usage (no published version).

`serving` prints what Triton serves next to the rollout record (``rollout.json``, the truth the
launcher starts Triton from), the published and quarantined versions, the recent history in
words ("v7 replaced v6", "v8 refused (reason), v7 kept serving", "rolled back v8 -> v7"), and
the model card of the version that serves (else the recorded one, else the newest published):
model config, dataset manifest hash and rows, code commit, training recipe, metrics by split
and stage, gate result, created time (`services.repository.model_card`; ``--json``: under
``model_card``). Where a stock Triton serves the repository (``MOVEPRED_PINNED_CONFIG``, see
`services.repository.rollout_state`), it also says whether the config it loads on a restart is
pinned to the recorded version of today's ``config.pbtxt``; ``--pin`` rewrites it so (after
``config.pbtxt`` changed: a new stock config).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from services.defaults import TRITON_URL

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REPOSITORY = REPO_ROOT / "model_repository"
EXIT_REFUSED = 1
EXIT_USAGE = 2


def _add_common(p: argparse.ArgumentParser) -> None:
    from services.repository.versions import DEFAULT_MODEL_NAME  # lazy: it imports the games

    p.add_argument("--triton-url", default=TRITON_URL, help="Triton gRPC host:port")
    p.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY,
                   help="the model repository Triton serves")
    p.add_argument("--model-name", default=DEFAULT_MODEL_NAME)
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _print_report(args: argparse.Namespace, report: object) -> None:
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))  # type: ignore[attr-defined]
    else:
        print(report.to_markdown())  # type: ignore[attr-defined]


def _run(args: argparse.Namespace, action: str) -> int:
    from services.repository.versions import latest_version
    from services.triton.client import PolicyClient, TritonError
    from services.triton.rollout import RolloutError, rollback, rollout

    version = getattr(args, "version", None)
    if action == "rollout" and version is None:
        version = latest_version(args.repository, args.model_name)
        if version is None:
            print(f"error: no published version of {args.model_name} in {args.repository}",
                  file=sys.stderr)
            return EXIT_USAGE
    with PolicyClient(args.triton_url, args.model_name) as client:
        try:
            if action == "rollout":
                report = rollout(client, args.repository, version, args.model_name,
                                 centre_radius=args.centre_radius)
            else:
                report = rollback(client, args.repository, args.model_name)
        except RolloutError as exc:
            print(f"error: {exc}", file=sys.stderr)
            if exc.smoke:
                from services.triton.smoke import checks_markdown

                print(checks_markdown(exc.smoke), file=sys.stderr)
            return EXIT_REFUSED
        except (TritonError, FileNotFoundError, TimeoutError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_REFUSED
    _print_report(args, report)
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    return _run(args, "rollout")


def cmd_rollback(args: argparse.Namespace) -> int:
    return _run(args, "rollback")


def _named(version: int | None, none: str) -> str:
    return none if version is None else f"v{version}"


def _listed(versions: list[int]) -> str:
    return ", ".join(f"v{v}" for v in versions) or "none"


def cmd_serving(args: argparse.Namespace) -> int:
    from services.repository.rollout_state import (
        PINNED_CONFIG_ENV,
        describe_event,
        pinned_config_is_current,
        pinned_config_name,
        pinned_config_path,
        read_state,
        rollout_lock,
        write_pinned_config,
    )
    from services.repository.version_files import read_version_metadata
    from services.repository.versions import latest_version, list_versions, quarantined_versions
    from services.triton.client import PolicyClient, TritonError
    from services.triton.rollout import current_version

    pinned = pinned_config_name()
    if args.pin and pinned is None:
        print(f"error: --pin needs {PINNED_CONFIG_ENV}: the --model-config-name of the stock "
              "Triton that serves this repository", file=sys.stderr)
        return EXIT_USAGE
    try:
        state = read_state(args.repository, args.model_name)
        if args.pin:
            with rollout_lock(args.repository, args.model_name, timeout_s=300):
                state = read_state(args.repository, args.model_name)
                write_pinned_config(args.repository, args.model_name, state["current"], pinned)
        pinned_current = (None if pinned is None
                          else pinned_config_is_current(args.repository, args.model_name, pinned))
    except (ValueError, OSError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    unreachable = None
    with PolicyClient(args.triton_url, args.model_name) as client:
        try:
            serving = current_version(client, args.model_name)
        except TritonError as exc:
            serving, unreachable = None, str(exc)
    carded = next((v for v in (serving, state["current"]) if v is not None),
                  None) or latest_version(args.repository, args.model_name)
    card = read_version_metadata(args.repository, args.model_name, carded)
    out = {"model_name": args.model_name, "serving": serving, "recorded_current": state["current"],
           "recorded_previous": state["previous"],
           "published": list_versions(args.repository, args.model_name),
           "quarantined": quarantined_versions(args.repository, args.model_name),
           "history": state["history"][-5:], "triton_error": unreachable,
           "pinned_config_current": pinned_current, "model_card": card}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        triton = (f"Triton at {args.triton_url} is unreachable ({unreachable})" if unreachable
                  else f"Triton serves {_named(serving, 'nothing')}")
        print(f"{args.model_name}: {triton}; recorded current "
              f"{_named(state['current'], 'none recorded')}, previous "
              f"{_named(state['previous'], 'none recorded')}")
        print(f"published: {_listed(out['published'])}; quarantined: "
              f"{_listed(out['quarantined'])}")
        if not unreachable and state["current"] is not None and serving != state["current"]:
            print(f"warning: Triton serves {_named(serving, 'nothing')} but the record says "
                  f"v{state['current']}: `movepred rollout --triton-url {args.triton_url} "
                  f"--repository {args.repository} --version {state['current']}` restores it")
        if pinned is not None and not pinned_current:
            print(f"warning: {pinned_config_path(args.repository, args.model_name, pinned)} is "
                  f"not config.pbtxt pinned to the recorded version: the stock Triton restarted "
                  f"with --model-config-name={pinned} would load another; `movepred serving "
                  f"--repository {args.repository} --model-name {args.model_name} --pin` "
                  "rewrites it")
        if out["history"]:
            print("history (newest last):")
            for event in out["history"]:
                print("  " + describe_event(event))
        else:
            print("history: none recorded")
        if carded is None:
            print("model card: nothing published")
        else:
            from services.repository.model_card import render

            print("\n".join(render({"model_name": args.model_name, "version": carded, **card})))
    return EXIT_REFUSED if unreachable else 0


def add_rollout_commands(subparsers: argparse._SubParsersAction) -> dict:
    """Register `rollout`, `rollback` and `serving` (Triton's serving version)."""
    r = subparsers.add_parser(
        "rollout",
        help="smoke-test a published version and switch Triton's traffic to it",
        epilog="A version that fails the checks is refused and the serving version stays.",
    )
    _add_common(r)
    r.add_argument("--version", type=int, default=None,
                   help="version to serve (default: the newest published)")
    r.add_argument("--centre-radius", type=int, default=None,
                   help="also require the empty board's top move within this many points of "
                        "the centre")
    b = subparsers.add_parser("rollback", help="serve the previous version again")
    _add_common(b)
    s = subparsers.add_parser("serving", help="the version Triton serves and the rollout record")
    _add_common(s)
    s.add_argument("--pin", action="store_true",
                   help="first rewrite configs/$MOVEPRED_PINNED_CONFIG.pbtxt (what the stock "
                        "Triton started with that --model-config-name loads) from config.pbtxt "
                        "and the record")
    return {"rollout": cmd_rollout, "rollback": cmd_rollback, "serving": cmd_serving}
