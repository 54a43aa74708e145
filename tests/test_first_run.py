"""A result's first run counts in Prometheus, and a restart counts nothing twice.

``rate()`` and ``increase()`` see only increases between two samples, so a counter or histogram
that appears with its first run already in it counts nowhere: the cross-run fsync p99 and
``FioscopeFioRunFailed`` would ignore every (target, job)'s first result. The exporter shows a
series that is new since its startup scan at zero once. Real fio, real exporter, real Prometheus.
"""

from __future__ import annotations

import json
import time

import pytest
from fioscope.histogram import BUCKET_BOUNDS
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import fioscope
from fioscope_testkit.histogram import tolerance
from fioscope_testkit.net import wait_for
from fioscope_testkit.prometheus import Prometheus
from helpers.exposition import sample
from helpers.fleet import fleet_overrides
from helpers.processes import Exporter, NodeExporter
from helpers.results import config_with_schedule

SYNC = 'jobname="etcd-wal",ddir="sync",stage="lat"'


@pytest.mark.slow
def test_first_run_counts_and_a_restart_counts_nothing_twice(tmp_path, running):
    require("fio")
    exporter = Exporter(tmp_path)
    running.append(exporter)
    node = NodeExporter(tmp_path / "node.log", device_include="^vda$")
    running.append(node)
    prom = Prometheus.generated(tmp_path / "prom", fleet_overrides(tmp_path / "hosts", node.port, exporter.port))
    running.append(prom)
    wait_for(lambda: prom.client.value('up{job="fioscope"}') == 1, 15, what="the exporter scraped")

    target = tmp_path / "target"
    target.mkdir()
    proc = fioscope("run", "etcd-wal", "--target.dir", str(target), "--results.dir", str(exporter.results), "--env", "SIZE=2m")
    assert proc.returncode in (0, 1), proc.stderr  # 1: this disk may be too slow for etcd; the run is what counts
    [result] = [json.loads(p.read_text()) for p in exporter.results.glob("etcd-wal*.json")]
    fdatasyncs = result["jobs"][0]["sync"]["lat_ns"]["N"]
    fio_p99 = result["jobs"][0]["sync"]["lat_ns"]["percentile"]["99.000000"] / 1e9

    wait_for(lambda: prom.client.value(f"fio_latency_seconds_count{{{SYNC}}}") == fdatasyncs, 20, what="the run's histogram scraped")
    # the zero before it was scraped too: the first run is an increase, in the run count and in the histogram
    assert prom.client.value('min_over_time(fio_runs_total{jobname="etcd-wal"}[1m])') == 0
    assert prom.client.value(f"min_over_time(fio_latency_seconds_count{{{SYNC}}}[1m])") == 0
    assert prom.client.value('increase(fio_runs_total{jobname="etcd-wal"}[1m])') >= 1
    assert prom.client.value(f"increase(fio_latency_seconds_count{{{SYNC}}}[1m])") >= fdatasyncs
    p99 = prom.client.value(f"histogram_quantile(0.99, sum by (le) (rate(fio_latency_seconds_bucket{{{SYNC}}}[1m])))")
    print(f"\n[first run] {fdatasyncs} fdatasyncs; p99 from the first run's histogram {p99 * 1000:.3f} ms, fio's {fio_p99 * 1000:.3f} ms")
    assert abs(p99 - fio_p99) <= tolerance(fio_p99, BUCKET_BOUNDS) * fio_p99  # 10 % near etcd's line, 45 % far from it

    # a restart shows the same totals at once: Prometheus sees no reset and no new increase
    exporter.stop()
    stopped = time.time()
    restarted = Exporter(tmp_path, results=exporter.results, port=exporter.port)
    running.append(restarted)
    wait_for(lambda: (prom.client.value('fioscope_last_scan_timestamp_seconds{job="fioscope"}') or 0) > stopped, 15,
             what="the restarted exporter scraped")

    def since_restart(series: str) -> str:
        """``series`` over the whole seconds since the old exporter stopped: the restarted exporter's samples only (a
        fixed window, e.g. 5 s, held none when the slow suite's nice 19 delayed the scrapes: CI saw that)."""
        return f"{series}[{max(1, int(time.time() - stopped))}s]"

    for series in ('fio_runs_total{jobname="etcd-wal"}', f"fio_latency_seconds_count{{{SYNC}}}"):
        # scraped twice at least: a zero shown once would sit before the second
        wait_for(lambda s=series: (prom.client.value(f"count_over_time({since_restart(s)})") or 0) >= 2, 30,
                 what=f"two scrapes of the restarted exporter's {series}")
        assert prom.client.value(f"resets({series}[2m])") == 0, series
        shown = prom.client.query(since_restart(series))
        assert prom.client.value(f"min_over_time({since_restart(series)})") == prom.client.value(series) > 0, shown


def test_scheduled_first_run_is_shown_at_zero_first_even_if_no_scrape_saw_it_running(tmp_path, exporter_factory):
    """A scheduled etcd-wal run lasts well under a second: no scrape need see it running at 0."""
    require("fio")
    config, _ = config_with_schedule(tmp_path, """
  - job: etcd-wal
    target: disk
    start_delay: 1s
    env: {SIZE: 1m}
""")
    exporter = exporter_factory(config=config)
    wait_for(lambda: [p for p in exporter.results.glob("etcd-wal*.json") if not p.name.endswith(".failure.json")], 30,
             what="the scheduled run's result file")  # watched on disk: /metrics is not touched until the run is over
    time.sleep(1)
    labels = {"jobname": "etcd-wal", "target": "disk"}
    first, second = exporter.metrics(), exporter.metrics()
    [result] = [json.loads(p.read_text()) for p in exporter.results.glob("etcd-wal*.json")]
    fdatasyncs = result["jobs"][0]["sync"]["lat_ns"]["N"]
    assert sample(first, "fio_runs_total", **labels) == 0 and sample(second, "fio_runs_total", **labels) == 1
    assert sample(first, "fio_latency_seconds_count", **labels, ddir="sync", stage="lat") == 0
    assert sample(second, "fio_latency_seconds_count", **labels, ddir="sync", stage="lat") == fdatasyncs
    # the last-run figures are not held back: only what rate() needs a zero for
    assert sample(first, "fio_run_latency_seconds_count", **labels, ddir="sync", stage="lat") == fdatasyncs

