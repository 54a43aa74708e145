"""Dashboards, Grafana provisioning and compose.yaml, checked without a Grafana server or a Docker engine."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fioscope_testkit.binaries import built
from fioscope_testkit.paths import REPO

DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
RATE_FUNCS = ("rate(", "irate(", "increase(")
COUNTER = re.compile(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*_(total|bucket|count|sum)\b")


def panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def without_rate_calls(expr: str) -> str:
    """expr with every rate(...)/irate(...)/increase(...) call (balanced) cut out."""
    out, i = [], 0
    while i < len(expr):
        match = next((f for f in RATE_FUNCS if expr.startswith(f, i) and (i == 0 or not expr[i - 1].isalnum() and expr[i - 1] != "_")), None)
        if not match:
            out.append(expr[i])
            i += 1
            continue
        depth, i = 1, i + len(match)
        while i < len(expr) and depth:
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            i += 1
    return "".join(out)


def test_dashboards_are_generated_from_code():
    pytest.importorskip("grafana_foundation_sdk", reason="pip install -e 'mixin[generate]'")
    proc = subprocess.run([sys.executable, "-m", "fioscope_mixin", "check", "--only", "dashboards"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])] + [a["expr"] for a in dashboard["annotations"].get("list", []) if "expr" in a]


def test_cluster_variable_only_with_a_cluster_label(tmp_path):
    """selectors.cluster_label: a cluster variable first, and every query and variable scoped to $cluster; none by default."""
    pytest.importorskip("grafana_foundation_sdk", reason="pip install -e 'mixin[generate]'")
    proc = subprocess.run([sys.executable, "-m", "fioscope_mixin", "generate", "--only", "dashboards", "--out", str(tmp_path),
                           "--set", "selectors.cluster_label=k8s_cluster"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    for default in DASHBOARDS:
        d = json.loads(default.read_text())
        assert "cluster" not in default.read_text(), default.name
        clustered = json.loads((tmp_path / "dashboards" / default.name).read_text())
        variables = clustered["templating"]["list"]
        assert [v["name"] for v in variables] == ["datasource", "cluster"] + [v["name"] for v in d["templating"]["list"]][1:]
        assert variables[1]["query"]["query"].endswith(", k8s_cluster)") and not variables[1].get("multi")
        for v in variables[2:]:
            assert 'k8s_cluster=~"$cluster"' in v["query"]["query"], (default.name, v["name"])
        assert len(exprs(clustered)) == len(exprs(d)) > 0
        for expr in exprs(clustered):
            assert 'k8s_cluster=~"$cluster"' in expr, (default.name, expr)


def test_three_dashboards_with_fixed_uids():
    uids = {json.loads(p.read_text())["uid"] for p in DASHBOARDS}
    assert uids == {"fioscope-disk", "fioscope-fio", "fioscope-curve"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_structure(path):
    d = json.loads(path.read_text())
    assert d["title"].startswith("fioscope / ") and d["schemaVersion"] >= 39
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert panels(d)
    for panel in panels(d):
        where = f"{path.name}: {panel['title']}"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
        assert panel["targets"], where
        for target in panel["targets"]:
            assert target["expr"].strip(), where
            assert target["datasource"]["uid"] == "${datasource}", where
            raw = COUNTER.findall(without_rate_calls(target["expr"]))
            assert not raw, f"{where}: raw counter outside rate/increase in {target['expr']}"
            for var in re.findall(r"\$(\w+)", target["expr"]):
                assert var in variables or var.startswith("__"), f"{where}: unknown variable ${var}"


def test_required_variables_and_rate_interval():
    by_uid = {json.loads(p.read_text())["uid"]: json.loads(p.read_text()) for p in DASHBOARDS}
    disk_vars = {v["name"] for v in by_uid["fioscope-disk"]["templating"]["list"]}
    assert {"datasource", "host", "device", "jobname"} <= disk_vars
    assert {"host", "jobname"} <= {v["name"] for v in by_uid["fioscope-fio"]["templating"]["list"]}
    assert "$__rate_interval" in json.dumps(by_uid["fioscope-fio"])
    disk = json.dumps(by_uid["fioscope-disk"])
    for column in ("fioscope:cpu_iowait_ratio", "fioscope:disk_util_ratio", "fioscope:disk_read_merges_per_second",
                   "fioscope:disk_discard_iops", "fioscope:disk_read_await_seconds", "fioscope:disk_queue_size",
                   "fioscope:disk_write_request_size_bytes", "fioscope:disk_write_bytes_per_second", "ALERTS"):
        assert column in disk, column
    assert by_uid["fioscope-disk"]["annotations"]["list"][0]["expr"].startswith("fio_run_running")


def test_thresholds_drawn_from_the_one_config():
    settings = yaml.safe_load((REPO / "alerts" / "config.yaml").read_text())["thresholds"]
    fio = json.loads((REPO / "dashboards" / "fio-results.json").read_text())
    steps = [s["value"] for p in panels(fio) for s in p["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])]
    assert settings["etcd_fsync_p99_seconds"] in steps
    disk = json.loads((REPO / "dashboards" / "disk-under-load.json").read_text())
    steps = [s["value"] for p in panels(disk) for s in p["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])]
    assert settings["disk_latency_sla_seconds"] in steps


def test_provisioning_references_dashboards_and_datasource():
    datasource = yaml.safe_load((REPO / "provisioning" / "grafana" / "datasources" / "prometheus.yaml").read_text())["datasources"][0]
    for path in DASHBOARDS:
        current = next(v for v in json.loads(path.read_text())["templating"]["list"] if v["name"] == "datasource")["current"]
        assert current["value"] == datasource["uid"], path.name
    provider = yaml.safe_load((REPO / "provisioning" / "grafana" / "dashboards" / "fioscope.yaml").read_text())["providers"][0]
    grafana = COMPOSE["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    assert mounts[provider["options"]["path"]] == "./dashboards"
    assert mounts[grafana["environment"]["GF_PATHS_PROVISIONING"]] == "./provisioning/grafana"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (REPO / "dashboards" / home.rsplit("/", 1)[1]).exists()


def test_compose_file_follows_the_rules():
    services = COMPOSE["services"]
    assert set(services) == {"prometheus", "grafana", "node-exporter", "alertmanager", "fioscope"}
    for name, svc in services.items():
        assert "healthcheck" in svc, name
        assert "ports" not in svc, f"{name}: every service binds 127.0.0.1 on the host network; nothing is published"
        if "image" in svc and name != "fioscope":
            assert re.search(r":v?\d+\.\d+\.\d+$", svc["image"]), f"{name}: unpinned image {svc['image']}"
        for dep in svc.get("depends_on", {}).values():
            assert dep["condition"] == "service_healthy", name
        for volume in svc.get("volumes", []):
            if volume.startswith(("./provisioning", "./alerts", "./dashboards", "./fio-jobs")):
                assert volume.endswith(":ro"), f"{name}: {volume} must be read-only"
    grafana = services["grafana"]["environment"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana and grafana["GF_SECURITY_ADMIN_PASSWORD__FILE"].startswith("/run/secrets/")
    assert grafana["GF_SERVER_HTTP_ADDR"].endswith(":-127.0.0.1}")
    node = services["node-exporter"]
    assert node["pid"] == "host" and node["network_mode"] == "host" and "/:/host:ro,rslave" in node["volumes"]
    assert "--path.rootfs=/host" in node["command"]
    # the same Prometheus and Alertmanager files as the native stack, in the repository's layout
    prom = services["prometheus"]
    assert "./provisioning/prometheus:/etc/fioscope/provisioning/prometheus:ro" in prom["volumes"]
    assert "./alerts:/etc/fioscope/alerts:ro" in prom["volumes"]
    assert "--config.file=/etc/fioscope/provisioning/prometheus/prometheus.yml" in prom["command"]
    assert services["fioscope"]["build"]["dockerfile"] == "exporter/Dockerfile"


def test_native_stack_uses_compose_flags_for_node_exporter():
    from fioscope_mixin.native import node_exporter_flags

    flags = node_exporter_flags()
    exclude = next(f for f in flags if f.startswith("--collector.diskstats.device-exclude="))
    pattern = re.compile(exclude.split("=", 1)[1])
    for device in ("loop0", "loop12", "vda", "sda", "nvme0n1", "xvdf"):
        assert not pattern.match(device), f"{device} must be watched"
    for device in ("vda1", "sda2", "nvme0n1p1", "loop0p1", "ram0"):
        assert pattern.match(device), f"{device} must be left out"


def test_docker_compose_config_validates():
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("docker compose plugin not installed (CI builds it)")
    proc = subprocess.run([docker, "compose", "-f", str(REPO / "compose.yaml"), "config", "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_disk_dashboard_shows_the_inferred_ceiling():
    """The ceiling the throttling alerts name is on the disk dashboard, from the recording rule that infers it."""
    disk = json.loads((REPO / "dashboards" / "disk-under-load.json").read_text())
    exprs = [t["expr"] for p in panels(disk) for t in p.get("targets", [])]
    assert any(e.startswith("fioscope:disk_ceiling{") for e in exprs)
    records = {r.get("record") for g in yaml.safe_load((REPO / "alerts" / "recording.rules.yaml").read_text())["groups"] for r in g["rules"]}
    assert "fioscope:disk_ceiling" in records


# ---- Grafana's dashboard linter (scripts/setup.sh builds it; dashboards/.lint holds the reasoned exclusions)
LINTER_VERSION = re.search(r"^DASHBOARD_LINTER_VERSION=(\S+)", (REPO / "scripts" / "setup.sh").read_text(), re.MULTILINE).group(1)


@pytest.fixture(scope="module")
def dashboard_linter() -> str:
    cache = os.environ.get("FIOSCOPE_LINTER_CACHE") or os.path.expanduser(f"~/.cache/fioscope/dashboard-linter-{LINTER_VERSION}")
    binary = os.path.join(cache, "dashboard-linter")
    if not built(Path(binary), "dashboard-linter"):
        if shutil.which("go") is None and not os.environ.get("CI"):
            pytest.skip("no Go toolchain to build Grafana's dashboard linter (scripts/setup.sh)")
        pytest.fail(f"{binary} missing: run scripts/setup.sh")
    return binary


def lint(linter: str, dashboard, config=None) -> subprocess.CompletedProcess:
    args = [linter, "lint", "--strict", str(dashboard)] + (["--config", str(config)] if config else [])
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.needs_tool("dashboard-linter")
@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda p: p.name)
def test_dashboards_pass_grafanas_linter(dashboard_linter, dashboard):
    proc = lint(dashboard_linter, dashboard)
    assert proc.returncode == 0, re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)


@pytest.mark.needs_tool("dashboard-linter")
def test_linter_exclusions_each_have_a_reason_and_the_linter_can_fail(dashboard_linter, tmp_path):
    config = yaml.safe_load((REPO / "dashboards" / ".lint").read_text())
    for rule, entry in config["exclusions"].items():
        assert (entry or {}).get("reason"), rule
        assert all(e.get("reason") for e in entry.get("entries", [])), rule
    # a panel without a description is refused, with the exclusions in force
    d = json.loads(DASHBOARDS[0].read_text())
    panels(d)[0]["description"] = ""
    (tmp_path / "d.json").write_text(json.dumps(d))
    proc = lint(dashboard_linter, tmp_path / "d.json", REPO / "dashboards" / ".lint")
    assert proc.returncode != 0 and "description" in proc.stdout + proc.stderr


def test_every_panel_has_a_description():
    for path in DASHBOARDS:
        for panel in panels(json.loads(path.read_text())):
            assert panel.get("description"), (path.name, panel["title"])
