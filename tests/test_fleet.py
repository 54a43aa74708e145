"""One Prometheus for many test hosts: host labels, file_sd discovery without a restart, TLS + basic auth scrapes.

Real Prometheus, real node_exporter, the real fioscope exporter; the configuration is the generated one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import bcrypt
import pytest
import yaml
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import run
from fioscope_testkit.net import free_port, wait_for
from fioscope_testkit.prometheus import Prometheus
from helpers.fleet import fleet_overrides, run_hosts
from helpers.processes import Exporter, NodeExporter


def up_hosts(prom: Prometheus, job: str) -> dict[str, str]:
    return {t["labels"].get("host", ""): t["health"] for t in prom.client.targets(job)}


@pytest.mark.slow
def test_prometheus_discovers_a_host_added_while_it_runs(tmp_path, running):
    exporter = Exporter(tmp_path)
    running.append(exporter)
    node = NodeExporter(tmp_path / "node.log", device_include="^vda$")
    running.append(node)
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    prom = Prometheus.generated(tmp_path / "prom", fleet_overrides(hosts, node.port, exporter.port))
    running.append(prom)
    for job in ("node", "fioscope"):
        wait_for(lambda job=job: up_hosts(prom, job) == {"lab-a": "up"}, 15, what=f"{job} of the local host up")

    added = run_hosts("--dir", hosts, "add", "db-7", node.address, f"127.0.0.1:{exporter.port}")
    assert added.returncode == 0, added.stderr
    started = time.time()
    for job in ("node", "fioscope"):
        wait_for(lambda job=job: up_hosts(prom, job) == {"lab-a": "up", "db-7": "up"}, 10, what=f"{job} of db-7 discovered and up")
    discovered = time.time() - started
    # both jobs' series say which host they came from; nothing without one
    wait_for(lambda: {r["metric"]["host"] for r in prom.client.query('count by (host) (node_disk_io_time_seconds_total{job="node"})')}
             == {"lab-a", "db-7"}, 5, what="node series of both hosts")
    wait_for(lambda: {r["metric"]["host"] for r in prom.client.query('fioscope_up{job="fioscope"}')} == {"lab-a", "db-7"}, 5,
             what="fioscope series of both hosts")
    assert prom.client.query('count({job=~"node|fioscope",host="",__name__!~".*:.*"})') == []  # scraped series; rules are detect's
    # Prometheus hands discovery changes to the scrapers every 5 s; then the next scrape (1 s here)
    assert discovered < 5 + 1 + 1, f"discovery took {discovered:.1f}s"

    # a group written by hand without a host label is named after its address; the internal job label never shows
    (hosts / "bare.yml").write_text(yaml.safe_dump([{"targets": [f"127.0.0.1:{exporter.port}"], "labels": {"__fioscope_job": "fioscope"}}]))
    wait_for(lambda: set(up_hosts(prom, "fioscope")) == {"lab-a", "db-7", "127.0.0.1"}, 10, what="bare group named by address")
    assert all("__fioscope_job" not in t["labels"] for t in prom.client.targets())

    removed = run_hosts("--dir", hosts, "remove", "db-7")
    assert removed.returncode == 0, removed.stderr
    wait_for(lambda: "db-7" not in up_hosts(prom, "node"), 10, what="db-7 gone after remove")


def _tls_material(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run([require("openssl"), "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=fleet-test", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def test_generated_config_scrapes_with_tls_and_basic_auth(tmp_path, running):
    """node_exporter secured by an exporter-toolkit web config; Prometheus scrapes it as configured in alerts/config.yaml."""
    cert, key = _tls_material(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"tls_server_config": {"cert_file": str(cert), "key_file": str(key)},
                                   "basic_auth_users": {"prometheus": bcrypt.hashpw(b"s3cret-fleet", bcrypt.gensalt(10)).decode()}}))
    node = NodeExporter(tmp_path / "node.log", device_include="^vda$", web_config=web)
    running.append(node)
    password = tmp_path / "scrape-password"
    password.write_text("s3cret-fleet\n")
    prom = Prometheus.generated(tmp_path / "prom", fleet_overrides(tmp_path / "hosts", node.port, free_port(), [
        "stack.scrape_tls.enabled=true", f"stack.scrape_tls.ca_file={cert}",
        "stack.scrape_basic_auth.username=prometheus", f"stack.scrape_basic_auth.password_file={password}"]))
    running.append(prom)
    wait_for(lambda: prom.client.value('up{job="node",host="lab-a"}') == 1, 15, what="TLS + basic auth scrape up")
    assert prom.client.targets("node")[0]["scrapeUrl"].startswith("https://")

    password.write_text("wrong\n")  # read on every scrape
    wait_for(lambda: "401" in prom.client.targets("node")[0]["lastError"], 10, what="401 with a wrong password")
    assert prom.client.value('up{job="node",host="lab-a"}') == 0


@pytest.mark.parametrize("sets, message", [
    (["stack.scrape_basic_auth.username=prometheus"], "set both username and password_file"),
    (["stack.scrape_basic_auth.username=prometheus", "stack.scrape_basic_auth.password_file=/run/secrets/p"],
     "basic auth needs stack.scrape_tls.enabled"),
])
def test_scrape_credentials_never_default_and_never_travel_in_clear(tmp_path, sets, message):
    proc = run([sys.executable, "-m", "fioscope_mixin", "generate", "--only", "prometheus", "--out", tmp_path,
                *[arg for s in sets for arg in ("--set", s)]])
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, message", [
    (["bad name", "a:9100", "a:7963"], "NAME 'bad name'"),
    (["db-7", "10.0.0.7", "10.0.0.7:7963"], "NODE_ADDR '10.0.0.7': expected HOST:PORT"),
    (["db-7", "10.0.0.7:9100", "10.0.0.7:99999"], "FIOSCOPE_ADDR"),
])
def test_add_host_rejects_bad_input_in_one_line(tmp_path, args, message):
    proc = run_hosts("--dir", tmp_path, "add", *args)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and message in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []
