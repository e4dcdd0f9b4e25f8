"""The two test tiers: every test is unit or integration, the classifier of tests/conftest.py
sees Triton, Prefect, ../shared and services in subprocesses through the suite's helpers, and a
unit test that reaches for one of them anyway fails."""

from __future__ import annotations

import subprocess
import sys

import prefect
import pytest

import services.triton.launcher as triton_launcher_module
from tests.conftest import (
    INTEGRATION_FIXTURES,
    ROOT,
    SHARED_ROOT,
    integration_reason,
    renjunet_games,
)
from tests.service_pipe import ServicePipe


def test_every_collected_test_is_in_exactly_one_tier(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    assert request.node in items
    for item in items:
        tiers = {name for name in ("unit", "integration") if item.get_closest_marker(name)}
        assert len(tiers) == 1, (item.nodeid, tiers)


def test_no_unit_test_uses_an_integration_fixture(request: pytest.FixtureRequest) -> None:
    for item in request.session.items:
        if item.get_closest_marker("unit"):
            assert not INTEGRATION_FIXTURES.intersection(item.fixturenames), item.nodeid


def test_this_module_runs_in_the_unit_tier(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None


# what the classifier is shown: never called
def _names_shared_data():
    return SHARED_ROOT / "data" / "kgs"


def _imports_triton_in_its_body():
    from services.triton.launcher import TritonServer

    return TritonServer


def _calls_a_suite_helper_that_reads_shared():
    return renjunet_games(limit=1)


def _starts_the_search_service():
    return subprocess.Popen([sys.executable, "-m", "services.search.server", "--port", "0"])


def _asks_the_service_for_its_help():
    return subprocess.run([sys.executable, "-m", "services.search.server", "--help"])


class _ProtocolPipe(ServicePipe):  # as a protocol's tests subclass it
    def __init__(self) -> None:
        super().__init__("services.cli", "gtp")


def _talks_to_a_program_through_pipes():
    return _ProtocolPipe()


def _pure():
    return sorted(ROOT.name)


def test_the_classifier_finds_what_makes_a_test_integration() -> None:
    assert "reads ../shared" in integration_reason([_names_shared_data])
    assert "starts Triton" in integration_reason([_imports_triton_in_its_body])
    reason = integration_reason([_calls_a_suite_helper_that_reads_shared])
    assert "reads ../shared" in reason and "renjunet_games" in reason
    assert "python -m services.search.server" in integration_reason([_starts_the_search_service])
    assert integration_reason([_asks_the_service_for_its_help]) is None
    reason = integration_reason([_talks_to_a_program_through_pipes])
    assert "starts a project module in a subprocess" in reason and "ServicePipe" in reason
    assert integration_reason([_pure]) is None
    assert integration_reason([_pure, _names_shared_data]) is not None


def test_a_unit_test_cannot_start_triton_a_flow_or_a_python_module(tmp_path) -> None:
    # the class by its name as a string: naming it would make this test integration
    triton_server = getattr(triton_launcher_module, "TritonServer")  # noqa: B009
    with pytest.raises(AssertionError, match=r"a unit test starts Triton: mark it"):
        triton_server.start(None)  # the guard stops it before anything is read

    @prefect.flow
    def one() -> int:
        return 1

    with pytest.raises(AssertionError, match=r"a unit test runs a Prefect flow"):
        one()
    with pytest.raises(AssertionError, match=r"starts a service in a subprocess"):
        subprocess.Popen([sys.executable, "-m", "this"])
    # short commands stay allowed
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0


def test_the_make_targets_run_the_tiers() -> None:
    def commands(target: str) -> str:
        return subprocess.run(["make", "-s", "-n", target, "PY=python", "VENV=.venv"],
                              cwd=ROOT, capture_output=True, text=True, check=True).stdout

    assert "-m pytest -q -m unit --durations=25" in commands("test-fast")
    whole = commands("test")
    assert "-m pytest -q --durations=25" in whole and "-m unit" not in whole



@pytest.mark.integration  # runs pytest's collection in a subprocess
def test_a_local_import_classifies_a_test_whatever_was_collected_before() -> None:
    """A test that imports the suite's Triton helpers inside its body
    (test_deploy_configs.py's stock-config test) is integration even when its file is collected
    alone, so that nothing else imported those helpers first."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-m", "unit", "-p",
         "no:cacheprovider", "tests/test_deploy_configs.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "test_embedded_and_stock_configs_agree" in out.stdout, out.stdout + out.stderr
    assert "test_triton_core_accepts_the_stock_config" not in out.stdout, out.stdout
