"""The monitoring pieces in deploy/: Prometheus scrape configs, Grafana provisioning and the
dashboard JSON.

* each dashboard (the serving one, the self-play loop's) loads into Grafana's own typed model
  of the dashboard schema (the grafana-foundation-sdk generated from Grafana 11.3's schema,
  the Grafana version compose runs, with its panel and datasource plugins registered:
  timeseries and table options, Prometheus queries) and encodes back with every field and
  value it had: a field the schema does not know, at any level, would be dropped on the way
  and fail the comparison (a control checks that);
* the dashboard passes the checks of Grafana's dashboard JSON model (the "Dashboard kind"
  schema reference, grafana/grafana docs/sources/developers/kinds/core/dashboard/
  schema-reference.md): `schemaVersion` present; panels with a non-empty `type` among the core
  visualisations, unique `id`, a `gridPos` inside the 24-column grid, `fieldConfig` with
  `defaults` and `overrides`, targets with unique `refId`s; `graphTooltip` in 0..2; a `time`
  range; a `uid` of at most 40 characters; the datasource it names is the provisioned one;
* every metric name the serving dashboard's PromQL uses is one a live Triton and a live search
  service export: both are started, asked a few Predicts and a GenMove, and scraped (the
  self-play dashboard's are checked against a live loop's endpoint in
  tests/test_selfplay_operations.py);
* the scrape targets are the ports compose gives Triton (--metrics-port) and the search service
  (--metrics-port), and the local file's are the ports `make triton`/`make serve` use.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.triton_fixtures import TritonSetup, triton_server  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "movepred-serving.json"
SELFPLAY_DASHBOARD = DEPLOY / "grafana" / "dashboards" / "movepred-selfplay.json"
DASHBOARDS = (DASHBOARD, SELFPLAY_DASHBOARD)
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
PROVIDERS = DEPLOY / "grafana" / "provisioning" / "dashboards" / "movepred.yaml"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
PROMETHEUS_LOCAL = DEPLOY / "prometheus" / "prometheus-local.yml"
COMPOSE = DEPLOY / "compose.yaml"
SELFPLAY_LOCAL_PORT = 9108  # prometheus-local.yml's target for `flows.selfplay --metrics-port`
# Grafana's core visualisations (public/app/plugins/panel) a provisioned dashboard may use
CORE_PANELS = {"timeseries", "stat", "gauge", "bargauge", "table", "heatmap", "histogram",
               "text", "row", "piechart", "state-timeline", "status-history", "barchart",
               "logs", "news", "dashlist", "alertlist", "nodeGraph", "trend", "xychart"}
METRIC = re.compile(r"\b((?:movepred|nv)_[a-zA-Z0-9_]+)\b")
PANELS_WANTED = {DASHBOARD: ("requests", "latency", "batch", "playouts", "version", "errors"),
                 SELFPLAY_DASHBOARD: ("games/hour", "visits/s", "game length", "resign",
                                      "policy and value loss", "elo by version")}


def dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dash["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row keeps its panels inside
    return out


def exprs(dash: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dash) for t in p.get("targets", [])]


def provisioned_datasource() -> dict[str, Any]:
    (source,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    return source


# ------------------------------------------------------------------------- schema
def grafana_round_trip(data: dict[str, Any]) -> dict[str, Any]:
    """`data` decoded into grafana-foundation-sdk's Dashboard (Grafana's schema, with the core
    panel and datasource plugins) and encoded back to JSON."""
    from grafana_foundation_sdk.cog import plugins
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    plugins.register_default_plugins()
    return json.loads(json.dumps(Dashboard.from_json(data), cls=JSONEncoder))


def lost(original: Any, decoded: Any, path: str = "") -> list[str]:
    """Paths of `original` that `decoded` lacks or holds differently (the schema's defaults it
    adds, e.g. a panel's ``transparent: false``, are not losses)."""
    if isinstance(original, dict):
        if not isinstance(decoded, dict):
            return [path or "/"]
        return [p for k, v in original.items()
                for p in ([f"{path}/{k}"] if k not in decoded else lost(v, decoded[k],
                                                                         f"{path}/{k}"))]
    if isinstance(original, list):
        if not isinstance(decoded, list) or len(decoded) != len(original):
            return [path]
        return [p for i, (a, b) in enumerate(zip(original, decoded, strict=True))
                for p in lost(a, b, f"{path}[{i}]")]
    return [] if original == decoded else [path]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_loads_in_grafanas_schema_unchanged(path: Path) -> None:
    from importlib.metadata import version

    import grafana_foundation_sdk.models.prometheus as prometheus
    import grafana_foundation_sdk.models.timeseries as timeseries
    from grafana_foundation_sdk.models.dashboard import Dashboard

    assert version("grafana-foundation-sdk").endswith("!11.3.0")  # compose's Grafana 11.3.0
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    assert compose["grafana"]["image"].endswith(":11.3.0}")
    data = dashboard(path)
    assert lost(data, grafana_round_trip(data)) == []
    typed = Dashboard.from_json(data)
    graphs = [p for p in typed.panels or [] if getattr(p, "type_val", "") == "timeseries"]
    assert graphs and all(isinstance(p.options, timeseries.Options) for p in graphs)
    assert all(isinstance(t, prometheus.Dataquery) for p in graphs for t in p.targets or [])
    # control: a misspelt field anywhere is not part of the schema and does not come back
    for where in ("dashboard", "panel", "target", "options"):
        broken = json.loads(json.dumps(data))
        graph = next(p for p in broken["panels"] if p["type"] == "timeseries")
        {"dashboard": broken, "panel": graph, "target": graph["targets"][0],
         "options": graph["options"]}[where]["refreshh"] = "1s"
        assert lost(broken, grafana_round_trip(broken)) != [], where


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_follows_grafanas_dashboard_model(path: Path) -> None:
    dash = dashboard(path)
    assert isinstance(dash["schemaVersion"], int) and 36 <= dash["schemaVersion"] < 2 ** 16
    assert isinstance(dash["title"], str) and dash["title"]
    assert isinstance(dash["uid"], str) and 1 <= len(dash["uid"]) <= 40
    assert dash.get("id") is None  # instance-local: never in a provisioned file
    assert dash.get("graphTooltip", 0) in (0, 1, 2)
    assert set(dash["time"]) == {"from", "to"}
    assert isinstance(dash.get("editable", True), bool)
    assert isinstance(dash.get("tags", []), list)
    assert re.fullmatch(r"\d+[smhd]", dash.get("refresh", "30s"))
    for annotation in dash.get("annotations", {}).get("list", []):
        assert {"name", "enable", "datasource"} <= set(annotation)
    assert isinstance(dash.get("templating", {}).get("list", []), list)

    ids: list[int] = []
    datasource = provisioned_datasource()
    occupied: set[tuple[int, int]] = set()
    for panel in panels(dash):
        assert isinstance(panel["type"], str) and panel["type"] in CORE_PANELS, panel
        assert isinstance(panel["id"], int) and 0 < panel["id"] < 2 ** 32
        ids.append(panel["id"])
        assert isinstance(panel.get("title", ""), str)
        grid = panel["gridPos"]
        assert grid["h"] > 0 and 0 < grid["w"] <= 24 and 0 <= grid["x"] < 24 and grid["y"] >= 0
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                 for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        if panel["type"] == "row":
            assert isinstance(panel.get("collapsed", False), bool)
            assert grid["w"] == 24
            continue
        assert set(panel["fieldConfig"]) >= {"defaults", "overrides"}
        assert isinstance(panel["fieldConfig"]["overrides"], list)
        assert isinstance(panel.get("options", {}), dict)
        assert panel["datasource"] == {"type": datasource["type"], "uid": datasource["uid"]}
        targets = panel["targets"]
        assert targets, panel["title"]
        refs = [t["refId"] for t in targets]
        assert len(set(refs)) == len(refs) and all(isinstance(r, str) and r for r in refs)
        for target in targets:
            assert target.get("datasource", panel["datasource"]) == panel["datasource"]
            assert isinstance(target["expr"], str) and METRIC.search(target["expr"]), target
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
    assert len(set(ids)) == len(ids), "panel ids must be unique"

    titles = " ".join(p["title"].lower() for p in panels(dash))
    for word in PANELS_WANTED[path]:
        assert word in titles, f"no panel about {word}"
    assert len({json.loads(p.read_text())["uid"] for p in DASHBOARDS}) == len(DASHBOARDS)
    if path != DASHBOARD:
        return
    # latency quantiles, from both sides
    assert any("histogram_quantile(0.99" in e and "duration_seconds_bucket" in e
               for e in exprs(dash))
    assert any("summary_us" in e and "quantile" in e for e in exprs(dash))


def test_grafana_provisioning() -> None:
    source = provisioned_datasource()
    assert source["type"] == "prometheus" and source["uid"]
    assert source["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load(PROVIDERS.read_text())["providers"]
    assert provider["type"] == "file"
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    mounts = {Path(v["target"]): (COMPOSE.parent / v["source"]).resolve()
              for v in compose["grafana"]["volumes"] if isinstance(v, dict)}
    dashboards_dir = mounts[Path(provider["options"]["path"])]
    assert DASHBOARD.resolve().parent == dashboards_dir
    assert mounts[Path("/etc/grafana/provisioning")] == DATASOURCES.parents[1].resolve()
    home = compose["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert Path(home) == Path(provider["options"]["path"]) / DASHBOARD.name


def _targets(path: Path) -> dict[str, list[str]]:
    config = yaml.safe_load(path.read_text())
    return {job["job_name"]: [t for c in job["static_configs"] for t in c["targets"]]
            for job in config["scrape_configs"]}


def _flag(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name:
            return str(argv[i + 1])
        if str(arg).startswith(name + "="):
            return str(arg).split("=", 1)[1]
    return None


def test_scrape_targets_are_the_ports_the_services_serve_metrics_on() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    triton_port = _flag(services["triton"]["command"], "--metrics-port")
    search_port = _flag(services["search"]["command"], "--metrics-port")
    assert _flag(services["triton"]["command"], "--allow-metrics") == "true"
    assert _flag(services["search"]["command"], "--metrics-host") == "0.0.0.0"
    assert _targets(PROMETHEUS) == {"triton": [f"triton:{triton_port}"],
                                    "movepred-search": [f"search:{search_port}"]}
    assert "prometheus" in services and "grafana" in services
    # the local file: the ports of `make triton` and `make serve`
    makefile = (ROOT / "Makefile").read_text()
    local = _targets(PROMETHEUS_LOCAL)
    triton_local = re.search(r"TRITON_METRICS_PORT\s*\?=\s*(\d+)", makefile)
    search_local = re.search(r"SEARCH_METRICS_PORT\s*\?=\s*(\d+)", makefile)
    assert triton_local and search_local
    assert local == {"triton": [f"127.0.0.1:{triton_local.group(1)}"],
                     "movepred-search": [f"127.0.0.1:{search_local.group(1)}"],
                     "movepred-selfplay": [f"127.0.0.1:{SELFPLAY_LOCAL_PORT}"]}
    # the self-play loop's port: the one the docs run the loop with here
    assert f"--metrics-port {SELFPLAY_LOCAL_PORT}" in (ROOT / "docs" / "selfplay.md").read_text()
    assert "--metrics-port $(TRITON_METRICS_PORT)" in makefile
    assert "--metrics-port $(SEARCH_METRICS_PORT)" in makefile


# ------------------------------------------------------------------------- live
def _scrape(url: str) -> set[str]:
    """The series names Prometheus stores from an endpoint: each sample line's name as written
    (a parser such as prometheus_client's would rename a counter's samples to ``*_total``,
    Prometheus does not). A family declared (``# TYPE``) with no sample yet, a labelled series
    nothing has happened to (no NaN answer so far, say), counts with its declared name, the one
    its samples will have (prometheus_client declares a counter as ``<name>_total``)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        text = response.read().decode()
    names = set()
    declared: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            declared.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    for name in declared:
        if not any(n == name or n.startswith(name + "_") for n in names):
            names.add(name)
    return names


@pytest.fixture(scope="module")
def live_metrics(triton_server: TritonSetup) -> Iterator[tuple[set[str], set[str]]]:  # noqa: F811
    """(Triton's sample names, the search service's) after Predicts and a GenMove."""
    import grpc

    from services.search.client import SearchClient
    from services.search.server import LIBRARY_CONFIG, build_service
    from services.triton.client import PolicyClient
    from services.triton.ports import free_port

    policy = PolicyClient(triton_server.server.grpc_url, timeout_s=10.0)
    config = dataclasses.replace(LIBRARY_CONFIG, metrics_port=free_port("127.0.0.1"))
    service = build_service({"gomoku": policy}, config).start()
    try:
        assert service.metrics_server is not None
        with SearchClient(f"127.0.0.1:{service.port}") as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.predict(["h8"], timeout=5)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            for moves in (["h8", "h9"], ["h8", "i9", "j10"]):
                client.predict(moves, timeout=10)
            client.genmove(["h8", "h9"], max_visits=32, timeout=60)
            with pytest.raises(grpc.RpcError):  # an error code for the errors panel
                client.predict(["h8", "h8"], timeout=10)
        time.sleep(2.5)  # Triton refreshes its metrics every 2 s (--metrics-interval-ms)
        yield _scrape(triton_server.server.metrics_url), _scrape(service.metrics_server.url)
    finally:
        service.stop(0)
        policy.close()


def test_triton_metrics_are_on_loopback(triton_server: TritonSetup) -> None:  # noqa: F811
    server = triton_server.server
    assert server.metrics_url.startswith("http://127.0.0.1:")
    assert "--metrics-address=127.0.0.1" in server._command()
    names = _scrape(server.metrics_url)
    assert "nv_inference_request_success" in names


def test_every_dashboard_metric_is_exported(live_metrics: tuple[set[str], set[str]]) -> None:
    triton, search = live_metrics
    used = {m for e in exprs(dashboard()) for m in METRIC.findall(e)}
    assert {m for m in used if m.startswith("movepred_")} and {
        m for m in used if m.startswith("nv_")}
    missing = {m for m in used if m not in (triton if m.startswith("nv_") else search)}
    assert not missing, (f"the dashboard asks for metrics nobody exports: {sorted(missing)}; "
                         f"Triton exports {sorted(triton)}")
    # the labels the dashboard groups by are there too
    assert any(n.startswith("nv_inference_request_summary_us") for n in triton)
