"""End-to-end of the sharded fleet (root; `flock /tmp/fioscope-lab.lock pytest -m e2e tests/test_e2e_shards.py`).

The deployment ``python3 -m fioscope_mixin.native --shards 2`` starts: two Prometheus shards (hashmod over the one
hosts folder) with a Thanos sidecar each, Thanos Query over them, one Alertmanager with the test's webhook. Two
"hosts", each a real fioscope exporter and a real node_exporter on loopback with its own lab disk (as in
tests/test_e2e_fleet.py), are named so that one lands on each shard; the capped one is on shard 1 and is added
while the shards run. Its throttling alert pages through the one Alertmanager; the dashboards' queries through
Thanos Query return both hosts; every host is scraped by exactly one shard.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from fioscope_mixin.settings import load_settings
from fioscope_mixin.stack import shard_of
from fioscope_testkit.dashboard_queries import dashboard_queries, substitute
from fioscope_testkit.native_stack import NativeStack
from fioscope_testkit.net import free_port, free_port_block, wait_for
from fioscope_testkit.prometheus import PromClient
from helpers.fleet import run_hosts
from helpers.lab import (
    CAP_SCRAPE_INTERVAL,
    E2E_SETTINGS,
    THROTTLE,
    e2e_overrides,
    fleet_host,
    lab_lock,
    require_root_lab,
    started,
    webhook_receiver,
)

pytestmark = pytest.mark.e2e

# 2x the capped disk's 700/300, running for longer than the test waits (fio is stopped with the exporter)
LOAD = {"READ_IOPS": "1400", "WRITE_IOPS": "600", "RUNTIME": "300", "SIZE": "512m"}


def name_on(shard: int, prefix: str) -> str:
    """The first ``prefix-<n>`` that hashmod puts on ``shard`` of 2 (checked against the shards' targets below)."""
    return next(f"{prefix}-{n}" for n in range(100) if shard_of(f"{prefix}-{n}", 2) == shard)


def shard_hosts(stack: NativeStack) -> list[set[str]]:
    """The hosts each shard scrapes (node and fioscope jobs)."""
    return [{t["labels"]["host"] for t in PromClient(f"http://{stack.shard_address('prometheus', i)}").targets()
             if t["labels"].get("job") in ("node", "fioscope")} for i in range(stack.shards)]


@pytest.mark.beside_scenarios
def test_two_shards_under_thanos_page_through_one_alertmanager_and_answer_the_dashboards_for_both(tmp_path):
    require_root_lab()
    thanos = Path(os.path.expanduser(load_settings()["fleet"]["thanos_binary"]))
    if not os.access(thanos, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{thanos}: not built (scripts/setup.sh)")
        pytest.skip(f"{thanos}: not built (scripts/setup.sh)")
    from fioscope import lab

    capped, healthy = name_on(1, "fleet-a"), name_on(0, "fleet-b")
    state = tmp_path / "lab"
    made: dict = {}
    running: list = []
    with lab_lock(), webhook_receiver() as webhook:
        try:
            for host, kind in ((capped, "throttled"), (healthy, "healthy")):
                made[host], exporter, node = fleet_host(tmp_path, host, kind, state, LOAD)
                running += [exporter, node]
            exporter_a, node_a, exporter_b, node_b = running
            hosts = tmp_path / "hosts"
            added = run_hosts("--dir", hosts, "add", healthy, node_b.address, f"127.0.0.1:{exporter_b.port}")
            assert added.returncode == 0, added.stderr
            overrides = [*e2e_overrides(webhook.url, extra=E2E_SETTINGS, scrape_interval=CAP_SCRAPE_INTERVAL),
                         f"stack.hosts_dir={hosts}", "stack.host=fleet-stack", "fleet.shards=2",
                         f"stack.ports.prometheus={free_port_block(2)}", f"fleet.ports.sidecar_grpc={free_port_block(2)}",
                         f"fleet.ports.sidecar_http={free_port_block(2)}", f"fleet.ports.query={free_port()}",
                         f"fleet.ports.query_grpc={free_port()}"]
            # the stack's own exporters are not started: the two hosts are the fleet
            with started(NativeStack(tmp_path / "stack", overrides, without=("node_exporter", "fioscope"))) as stack:
                query = PromClient(stack.query_url())
                wait_for(lambda: healthy in shard_hosts(stack)[0], 20, what=f"{healthy} on shard 0")
                # the capped host added while the shards run: it lands on shard 1, and only there
                added = run_hosts("--dir", hosts, "add", capped, node_a.address, f"127.0.0.1:{exporter_a.port}")
                assert added.returncode == 0, added.stderr
                wait_for(lambda: capped in shard_hosts(stack)[1], 5 + 5 + 5, what=f"{capped} on shard 1")
                placed = shard_hosts(stack)
                assert capped not in placed[0] and healthy not in placed[1], placed

                # the global layer: both shards' hosts, each series with its shard
                wait_for(lambda: query.value('count(fio_run_running{jobname="cloud-sla-70-30"} == 1)') == 2, 90,
                         what="both loads running, seen through Thanos Query")
                shards_seen = {(r["metric"]["host"], r["metric"]["shard"]) for r in query.query('fioscope_up{job="fioscope"}')}
                assert {(capped, "1"), (healthy, "0")} <= shards_seen, shards_seen
                start = time.time()

                def paged() -> float | None:
                    return min((t for t in (webhook.first(name, host=capped, device=made[capped].device_name) for name in THROTTLE)
                                if t is not None), default=None)

                wait_for(paged, 240, interval=1, what=f"the throttling page for {capped} (shard 1) through the one Alertmanager")
                page = next(a for _, a in webhook.received if a["labels"]["alertname"] in THROTTLE)
                assert page["labels"]["host"] == capped and page["labels"].get("shard") == "1", page["labels"]
                print(f"\n[shards] {capped} on shard 1 paged {paged() - start:.0f} s after both loads ran; {healthy} on shard 0 silent")
                assert not [a for _, a in webhook.received if a["labels"].get("host") == healthy and a["labels"]["alertname"] in THROTTLE]

                # the dashboards' queries through Thanos Query, as Grafana's fleet datasource asks them: both hosts
                values = {"datasource": "", "host": ".*", "instance": ".*", "device": ".*", "jobname": ".*", "baseline": ".*",
                          "candidate": ".*", "__rate_interval": "1m"}
                seen: dict[str, set[str]] = {}
                for n, (dashboard, title, expr, instant) in enumerate(dashboard_queries()):
                    expr = substitute(expr, values)
                    result = query.query(expr) if instant else query.query_range(expr, start - 30, time.time(), 5)
                    seen[f"{dashboard}: {title} [{n}]"] = {r["metric"].get("host", "") for r in result}
                both = [panel for panel, hosts_seen in seen.items() if {capped, healthy} <= hosts_seen]
                print(f"[shards] {len(both)} of {len(seen)} dashboard queries answered for both shards' hosts through Thanos Query; "
                      "the others: " + "; ".join(f"{panel} {sorted(h)}" for panel, h in seen.items() if panel not in both))
                iostat = [panel for panel in seen if panel.startswith("disk-under-load.json")]
                assert iostat and [panel for panel in iostat if panel in both], seen
                assert {h for hosts_seen in seen.values() for h in hosts_seen} >= {capped, healthy}
        finally:
            for proc in reversed(running):
                proc.stop()
            for host in made:
                lab.down(host, state)
