"""Importing the flows keeps the caller's Prefect: the API and settings of their active profile,
not a project-local PREFECT_HOME; the defaults apply only where nothing of the caller's says
otherwise, and each flow command says which API its runs go to.

The subprocesses start from an environment without any PREFECT_ variable and with HOME in a
temporary folder, as a user's shell whose `~/.prefect/profiles.toml` is the one written here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import flows
from tests.conftest import ROOT, SAMPLE_RIF

PROBE = """
import json, os
import flows
from prefect.settings import get_current_settings
settings = get_current_settings()
print(json.dumps({"api": settings.api.url, "home_env": os.environ.get("PREFECT_HOME"),
                  "level": settings.logging.level, "line": flows.prefect_api_line()}))
"""


def user_env(home: Path) -> dict[str, str]:
    """This process's environment as a user's shell has it: no PREFECT_ variable, HOME=`home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return {**env, "HOME": str(home)}


def write_profile(home: Path, api_url: str, **extra: str) -> None:
    """`~/.prefect/profiles.toml` as `prefect profile create team` + `prefect config set`
    write it: the active profile `team` naming `api_url`."""
    settings = {"PREFECT_API_URL": api_url, **extra}
    lines = ['active = "team"', "", "[profiles.team]",
             *(f'{k} = "{v}"' for k, v in settings.items())]
    (home / ".prefect").mkdir(parents=True, exist_ok=True)
    (home / ".prefect" / "profiles.toml").write_text("\n".join(lines) + "\n")


def probe(home: Path) -> dict:
    run = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=user_env(home),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.integration  # a Python subprocess importing Prefect
def test_importing_the_flows_keeps_the_users_profile(tmp_path: Path) -> None:
    write_profile(tmp_path, "http://127.0.0.1:9/api", PREFECT_LOGGING_LEVEL="DEBUG")
    seen = probe(tmp_path)
    assert seen["api"] == "http://127.0.0.1:9/api"
    assert seen["home_env"] is None  # the caller's PREFECT_HOME (here: none) is left alone
    assert seen["level"] == "DEBUG"  # the profile's setting beats the flows' default (INFO)
    assert seen["line"] == ("Prefect API: http://127.0.0.1:9/api (profile 'team'); the runs are "
                            "recorded there")


@pytest.mark.integration
def test_without_a_configured_api_the_runs_go_to_a_temporary_server(tmp_path: Path) -> None:
    seen = probe(tmp_path)
    assert seen["api"] is None and seen["home_env"] is None
    assert seen["level"] == "INFO"  # the flows' default, where the caller set nothing
    assert seen["line"].startswith("Prefect API: none configured")
    assert "temporary local Prefect server" in seen["line"]
    assert str(tmp_path / ".prefect") in seen["line"]  # Prefect's own home, the user's


def test_defaults_apply_only_where_the_caller_set_nothing(tmp_path: Path) -> None:
    write_profile(tmp_path, "http://prefect.example:4200/api",
                  PREFECT_SERVER_ANALYTICS_ENABLED="true")
    env = {"HOME": str(tmp_path), "PREFECT_HOME": str(tmp_path / ".prefect"),
           "PREFECT_LOGGING_LEVEL": "ERROR"}
    chosen = flows.apply_prefect_defaults(env)
    assert env["PREFECT_LOGGING_LEVEL"] == "ERROR"  # the environment's
    assert "PREFECT_SERVER_ANALYTICS_ENABLED" not in env  # the profile's stays in force
    assert env["PREFECT_LOGGING_EXTRA_LOGGERS"] == "services,flows"  # nothing said: default
    assert set(chosen) == set(flows.PREFECT_DEFAULTS) - {"PREFECT_LOGGING_LEVEL",
                                                         "PREFECT_SERVER_ANALYTICS_ENABLED"}
    assert flows.configured_api_url(env) == "http://prefect.example:4200/api"
    assert flows.configured_api_url({**env, "PREFECT_PROFILE": "other"}) is None
    assert flows.configured_api_url({**env, "PREFECT_API_URL": "http://x/api"}) == "http://x/api"
    (tmp_path / ".prefect" / "profiles.toml").write_text("active = [unclosed")
    assert flows.active_profile_settings(env) == {}  # unreadable: Prefect's defaults


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration  # a real `prefect server start`, the ingest flow's command
@pytest.mark.timeout(600)
def test_flow_runs_appear_on_the_server_the_profile_names(tmp_path: Path) -> None:
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    server_home = tmp_path / "server"
    server_home.mkdir()
    server_env = {**user_env(server_home), "PREFECT_HOME": str(server_home / ".prefect"),
                  "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    prefect = Path(sys.executable).with_name("prefect")
    server = subprocess.Popen([str(prefect), "server", "start", "--host", "127.0.0.1",
                               "--port", str(port)], env=server_env,
                              stdout=(tmp_path / "server.log").open("w"),
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-3000:]
            time.sleep(0.5)

        user = tmp_path / "user"
        write_profile(user, api)
        run = subprocess.run([sys.executable, "-m", "flows.ingest", str(SAMPLE_RIF), "--out",
                              str(tmp_path / "dataset")], cwd=ROOT, env=user_env(user),
                             capture_output=True, text=True, timeout=400)
        assert run.returncode == 0, run.stderr[-3000:]
        assert f"Prefect API: {api} (profile 'team')" in run.stderr + run.stdout
        runs = httpx.post(f"{api}/flow_runs/filter", json={}, timeout=10).json()
        flows_by_id = {f["id"]: f["name"] for f in
                       httpx.post(f"{api}/flows/filter", json={}, timeout=10).json()}
        done = [(flows_by_id.get(r["flow_id"]), r["state_type"]) for r in runs]
        assert ("ingest", "COMPLETED") in done, done
        assert not (user / ".prefect" / "prefect.db").exists()  # no temporary server was used
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait(timeout=10)
