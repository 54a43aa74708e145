"""End-to-end fleet: two test hosts, one Prometheus, file_sd (root; `flock /tmp/fioscope-lab.lock pytest -m e2e tests/test_e2e_fleet.py`).

Each "host" is a real fioscope exporter and a real node_exporter on loopback ports, with its own lab disk;
node_exporter shows only that host's loop device (on one machine both would see every disk). Host A's disk
is capped, host B's is not; both run the same fio load. Hosts are added with fioscope_mixin.hosts, the second one
while Prometheus runs. The throttling alert must name host A and its device and nothing else.
"""

from __future__ import annotations

import time

import pytest
from fioscope_mixin.units import parse_duration
from fioscope_testkit.net import free_port, wait_for
from fioscope_testkit.prometheus import Prometheus
from helpers.fleet import run_hosts
from helpers.lab import CAP_SCRAPE_INTERVAL, E2E_SETTINGS, THROTTLE, fleet_host, lab_lock, require_root_lab
from helpers.processes import Exporter, NodeExporter

pytestmark = pytest.mark.e2e

# 2x the capped disk's 700/300, running for longer than the test waits (fio is stopped with the exporter)
LOAD = {"READ_IOPS": "1400", "WRITE_IOPS": "600", "RUNTIME": "300", "SIZE": "512m"}


def add_host(hosts_dir, name: str, node: NodeExporter, exporter: Exporter) -> None:
    proc = run_hosts("--dir", hosts_dir, "add", name, node.address, f"127.0.0.1:{exporter.port}")
    assert proc.returncode == 0, proc.stderr


def figures(prom: Prometheus) -> str:
    """What the throttling signature saw, per host and device (for a failure message)."""
    out = []
    for series in ("fioscope:disk_iops", "fioscope:disk_util_ratio", "fioscope:disk_queue_size", "fioscope:disk_await_seconds",
                   "fioscope:disk_await_baseline_seconds", "fio_run_running"):
        out.append(f"{series}: " + ", ".join(f"{r['metric'].get('host')}/{r['metric'].get('device')}={float(r['value'][1]):.3g}"
                                               for r in prom.client.query(series)))
    out.append("alerts: " + ", ".join(f"{r['metric']['alertname']}({r['metric']['alertstate']}) {r['metric'].get('host')}/"
                                      f"{r['metric'].get('device', '')}" for r in prom.client.query("ALERTS")))
    return "; ".join(out)


@pytest.mark.beside_scenarios
def test_two_hosts_one_prometheus_alert_names_the_capped_host_and_device(tmp_path):
    require_root_lab()
    from fioscope import lab

    state = tmp_path / "lab"
    made: dict = {}
    running: list = []
    with lab_lock():
        try:
            for host, kind in (("fleet-a", "throttled"), ("fleet-b", "healthy")):
                made[host], exporter, node = fleet_host(tmp_path, host, kind, state, LOAD)
                running += [exporter, node]
            exporter_a, node_a, exporter_b, node_b = running
            hosts = tmp_path / "hosts"
            add_host(hosts, "fleet-a", node_a, exporter_a)
            prom = Prometheus.generated(tmp_path / "prom", [
                # the interval at which a lab disk's cap is seen as a ceiling (helpers.lab.lab_stack)
                *E2E_SETTINGS, f"stack.scrape_interval={CAP_SCRAPE_INTERVAL}", f"stack.evaluation_interval={CAP_SCRAPE_INTERVAL}",
                "stack.rate_window=20s",
                f"stack.hosts_dir={hosts}", "stack.host=fleet-stack",
                *[f"stack.ports.{k}={free_port()}" for k in ("node_exporter", "fioscope", "alertmanager", "etcd")]])
            running.append(prom)
            wait_for(lambda: prom.client.value('sum(up{host="fleet-a",job=~"node|fioscope"})') == 2, 20, what="fleet-a up")

            added = time.time()
            add_host(hosts, "fleet-b", node_b, exporter_b)
            scrape = parse_duration(CAP_SCRAPE_INTERVAL)
            wait_for(lambda: prom.client.value('sum(up{host="fleet-b",job=~"node|fioscope"})') == 2, 5 + scrape + 5, what="fleet-b up")
            appeared = time.time() - added
            print(f"\n[fleet] host added while Prometheus runs: scraped after {appeared:.1f} s "
                  f"(discovery update 5 s + scrape interval {scrape:g} s)")
            assert appeared <= 5 + scrape + 1

            # each host's node series show only its own disk
            seen = prom.client.query('node_disk_io_time_seconds_total{job="node"}')
            devices = {(r["metric"]["host"], r["metric"]["device"]) for r in seen}
            assert devices == {("fleet-a", made["fleet-a"].device_name), ("fleet-b", made["fleet-b"].device_name)}

            wait_for(lambda: prom.client.value('count(fio_run_running{jobname="cloud-sla-70-30"} == 1)') == 2, 60,
                     what="both loads running")
            start = time.time()
            capped = ("fleet-a", made["fleet-a"].device_name)

            def throttled() -> set:
                return {(r["metric"].get("host"), r["metric"].get("device")) for r in prom.client.query('ALERTS{alertstate="firing"}')
                        if r["metric"]["alertname"] in THROTTLE}

            try:
                wait_for(lambda: capped in throttled(), 240, interval=1, what="the throttling alert for fleet-a's device")
            except AssertionError:
                raise AssertionError(f"no throttling alert for {capped}; {figures(prom)}") from None
            fired = time.time() - start
            for _ in range(15):  # and, while both loads run, for nothing else
                assert throttled() == {capped}, throttled()
                time.sleep(1)
            print(f"[fleet] throttling alert for {capped} {fired:.0f} s after both loads started; fleet-b (same load, uncapped) silent")
        finally:
            for proc in reversed(running):
                proc.stop()
            for host in made:
                lab.down(host, state)
