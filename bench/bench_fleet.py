#!/usr/bin/env python3
"""Fleet benchmark: the project's rules against a synthetic fleet, on one Prometheus or on Prometheus shards under Thanos.

For each fleet size (default 50, 200, 500 hosts x 4 devices) a fresh deployment, the native stack's own
(fioscope_mixin.native, generated prometheus.yml and rule files, one Alertmanager), discovers the hosts through
file_sd, one file per host in its hosts folder, exactly as ``python3 -m fioscope_mixin.hosts add`` writes them:
``--engine single`` is one Prometheus; ``--engine thanos`` is ``--shards`` Prometheus shards (default: one per
``--hosts-per-shard`` hosts) with Thanos sidecars and Thanos Query, as ``python3 -m fioscope_mixin.native --shards N``.
One Python HTTP server plays every host: ``/<host>/node`` is node_exporter's disk and CPU view (vda, vdb, md0 and
dm-0 = vg0-data, 4 CPUs; counters advance with wall time at per-device rates), ``/<host>/fioscope`` is the real
exporter's /metrics for two real fio results (etcd-wal json+ with its latency histogram, a randrw run).

Once the rules run, host-0001's vdb is capped: its demand doubles and it sits flat at the cap, util 100 %, a
32-deep queue and a 50 ms await; the time from the cap to the throttling alert in Alertmanager is printed.

Printed per size: series per host by family (node, fioscope, recorded: one host's series, counted by name),
head series and RSS per Prometheus, each rule group's evaluation time per cycle (mean and max over the sampled
cycles, the worst shard), the costliest rules, the dashboards' queries through the query layer (one host, all
devices) and the cap-to-alert time. Every query has a generous timeout and counts one host or reads the TSDB
status, so a size whose Prometheus is slow still prints its figures (at 2,000 hosts the old fleet-wide count
queries took more than 10 s). A size whose memory (estimated from the previous size) would not fit in the
memory available is skipped with a line saying so.

Usage: python3 bench/bench_fleet.py [--hosts 50,200,500] [--engine single|thanos] [--shards N]
       [--interval 15s] [--cycles 6] [--top 5]
Note: the data is minutes old, so a 6 h window (the await baseline) holds minutes of samples, not 6 h.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from fioscope_mixin.hosts import host_groups
from fioscope_mixin.units import parse_duration as seconds
from fioscope_testkit.binaries import run_first
from fioscope_testkit.dashboard_queries import dashboard_queries, substitute
from fioscope_testkit.native_stack import NativeStack
from fioscope_testkit.net import free_port, free_port_block, wait_for
from fioscope_testkit.prometheus import PromClient

REPO = Path(__file__).resolve().parents[1]

FIO_RESULTS = [REPO / "tests" / "fixtures" / "fio-outputs" / "fio-3.33" / name for name in ("etcd.json+", "randrw.json")]
PORTS = {"node": 9100, "fioscope": 7963}  # the instance label a host's exporters would have
DEVICES = ("vda", "vdb", "md0", "dm-0")
CPUS = 4
CPU_MODES = {"user": 0.12, "nice": 0.0, "system": 0.05, "iowait": 0.03, "irq": 0.0, "softirq": 0.01, "steal": 0.0, "idle": 0.79}
# node_exporter 1.x diskstats counters and their per-second rate relative to the device's IOPS
DISK_COUNTERS = {
    "reads_completed_total": 0.6, "reads_merged_total": 0.05, "read_bytes_total": 0.6 * 16384, "read_time_seconds_total": 0.6 * 0.002,
    "writes_completed_total": 0.4, "writes_merged_total": 0.1, "written_bytes_total": 0.4 * 32768, "write_time_seconds_total": 0.4 * 0.004,
    "discards_completed_total": 0.0, "discards_merged_total": 0.0, "discarded_sectors_total": 0.0, "discard_time_seconds_total": 0.0,
    "flush_requests_total": 0.02, "flush_requests_time_seconds_total": 0.02 * 0.001,
    # util under 45 % at every device's load (at most 450/s): the await baseline learns from unsaturated minutes only
    "io_time_seconds_total": 0.0008, "io_time_weighted_seconds_total": 0.004,
}


def fioscope_exposition() -> bytes:
    """The real exporter's /metrics for the fixture results."""
    from fioscope.collector import Exposition
    from fioscope.collector.exporter import ScrapeTimer
    from fioscope.config import Config
    from fioscope.store import Store

    results = Path(tempfile.mkdtemp(prefix="fleet-bench-results-"))
    store = Store(Config(results_dir=results))
    for path in FIO_RESULTS:
        copy = results / (path.stem + ".json")
        shutil.copy(path, copy)
        # just copied, so not yet settled for a scan (anybody's fio output counts once its writer is done)
        if not store.ingest_file(copy, settled=True):
            raise SystemExit(f"bench_fleet.py: {path}: not published by the exporter")
    shutil.rmtree(results)
    body = Exposition(store, ScrapeTimer()).render()
    if b"\nfio_latency_seconds_bucket{" not in body:
        raise SystemExit("bench_fleet.py: the exporter's /metrics has no fio latency histogram")
    return body


RUN_TIMESTAMP = re.compile(rb"^(fio_run_(?:start|end)_timestamp_seconds\{[^}]*\}) (\S+)$", re.M)
LAST_SCAN = re.compile(rb"^fioscope_last_scan_timestamp_seconds .*$", re.M)


def healthy_fioscope(body: bytes, now: float) -> bytes:
    """The fixture exposition as a healthy exporter's at ``now``: its runs ended a minute before the bench began (not
    days ago), and its last scan is now (a frozen exposition fires FioscopeFioResultsStale and FioscopeResultScanStalled
    on every host: a thousand firing alerts cost the alerts group what no healthy fleet pays)."""
    ends = [float(m.group(2)) for m in RUN_TIMESTAMP.finditer(body)]
    shift = now - 60 - max(ends, default=now)
    return RUN_TIMESTAMP.sub(lambda m: m.group(1) + b" %.3f" % (float(m.group(2)) + shift), body)


def scanned_now(body: bytes) -> bytes:
    return LAST_SCAN.sub(b"fioscope_last_scan_timestamp_seconds %.3f" % time.time(), body)


# a capped device: demand beyond its cap, which holds it flat at CAP_IOPS, util 100 %, a deep queue and a long await
CAP_IOPS = 1000
CAP_AWAIT = 0.050
CAP_QUEUE = 32
CAPPED_RATES = {"reads_completed_total": 0.6 * CAP_IOPS, "writes_completed_total": 0.4 * CAP_IOPS,
                "read_bytes_total": 0.6 * CAP_IOPS * 16384, "written_bytes_total": 0.4 * CAP_IOPS * 32768,
                "read_time_seconds_total": 0.6 * CAP_IOPS * CAP_AWAIT, "write_time_seconds_total": 0.4 * CAP_IOPS * CAP_AWAIT,
                "io_time_seconds_total": 1.0, "io_time_weighted_seconds_total": CAP_QUEUE}


def device_iops(host: str, index: int) -> int:
    seed = int(hashlib.sha1(host.encode()).hexdigest()[:6], 16)
    return 50 + (seed >> index) % 400  # each device its own steady load


def counter(host: str, index: int, metric: str, now: float, capped_at: float | None) -> float:
    """The counter's value at ``now``: the device's steady rate, and from ``capped_at`` on the capped rates."""
    rate = device_iops(host, index) * DISK_COUNTERS[metric]
    if capped_at is None or now <= capped_at:
        return now * rate
    return capped_at * rate + (now - capped_at) * CAPPED_RATES.get(metric, rate)


def node_exposition(host: str, now: float, capped: dict[str, float] | None = None) -> bytes:
    """node_exporter's view of ``host``; ``capped`` = {device: time its cap began}."""
    capped = capped or {}
    lines = []
    for metric in DISK_COUNTERS:
        lines.append(f"# TYPE node_disk_{metric} counter")
        lines += [f'node_disk_{metric}{{device="{d}"}} {counter(host, i, metric, now, capped.get(d)):.3f}' for i, d in enumerate(DEVICES)]
    lines.append("# TYPE node_disk_io_now gauge")
    lines += [f'node_disk_io_now{{device="{d}"}} {CAP_QUEUE if d in capped else i}' for i, d in enumerate(DEVICES)]
    lines.append("# TYPE node_disk_info gauge")
    lines += [f'node_disk_info{{device="{d}",major="253",minor="{i}"}} 1' for i, d in enumerate(DEVICES)]
    lines.append("# TYPE node_cpu_seconds_total counter")
    for cpu in range(CPUS):
        lines += [f'node_cpu_seconds_total{{cpu="{cpu}",mode="{mode}"}} {now * share:.2f}' for mode, share in CPU_MODES.items()]
    return ("\n".join(lines) + "\n").encode()


class FleetServer:
    """Every synthetic host's node_exporter and fioscope exporter, on one port."""

    def __init__(self):
        fio = healthy_fioscope(fioscope_exposition(), time.time())
        self.capped: dict[str, dict[str, float]] = {}  # host: {device: capped since}
        capped = self.capped

        class Handler(BaseHTTPRequestHandler):
            # keep-alive, as node_exporter's Go server: at HTTP/1.0 Prometheus dialled a new connection for every
            # scrape, 270 a second at 2,000 hosts, a twentieth of its CPU (a CPU profile) that no real fleet costs it
            protocol_version = "HTTP/1.1"
            timeout = 120  # an idle connection's thread ends (Prometheus scrapes each target every 15 s)

            def do_GET(self):
                _, host, kind = (self.path.split("?")[0].split("/") + ["", "", ""])[:3]
                body = (node_exposition(host, time.time(), capped.get(host)) if kind == "node"
                        else scanned_now(fio) if kind == "fioscope" else None)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # Prometheus stopped mid-scrape
                    pass

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.request_queue_size = 4096
        ThreadingHTTPServer.daemon_threads = True
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def host_file(self, name: str) -> str:
        groups = host_groups(name, self.address, self.address)
        for group in groups:  # one server plays every host: the path says which, and its instance is the host's own
            # (as on a real fleet: the per-device rules match on instance, job and device)
            job = group["labels"]["__fioscope_job"]
            group["labels"]["__metrics_path__"] = f"/{name}/{job}"
            group["labels"]["instance"] = f"{name}:{PORTS[job]}"
        return yaml.safe_dump(groups, sort_keys=False)


CAPPED_HOST, CAPPED_DEVICE = "host-0001", "vdb"  # capped once the rules run; the dashboards' queries ask for this host
SAMPLE_HOST = "host-0000"  # its series, counted by name: the cost of a host
DASHBOARD_VARIABLES = {"host": CAPPED_HOST, "__rate_interval": "1m", "device": ".*", "jobname": ".*", "baseline": ".*", "candidate": ".*"}
SLOW_EVALUATION_S = 2.0  # the bound on one evaluation of one group
# Prometheus's own: the samples its PromQL engine loaded (the rules' work, as their evaluation times are not, whichever
# groups share the cores with them), its garbage collections (what stack.gogc trades for memory), and GOGC
QUERY_SAMPLES, GC_CYCLES, GOGC = ("prometheus_engine_query_samples_total", "go_gc_cycles_total_gc_cycles_total",
                                  "go_gc_gogc_percent")
OWN_METRICS = (QUERY_SAMPLES, GC_CYCLES, GOGC)
TIMEOUT = 120  # per API call: a loaded Prometheus answers late, never not at all


def panel_queries() -> list[str]:
    """Every panel query of the generated dashboards, for one host and all of its devices (as Grafana asks them)."""
    return [substitute(expr, DASHBOARD_VARIABLES) for _, _, expr, _ in dashboard_queries()]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores (/proc/stat)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK"), sum(ticks) / os.sysconf("SC_CLK_TCK")


class CpuShare:
    """Cores used from ``start()`` to ``stop()``: the stack (Prometheus, Alertmanager, Thanos), this process (the simulated fleet's HTTP
    server), everything else on the machine. The rule groups' evaluation times mean little without it: on a 2-core
    machine the fleet's own exporters compete with Prometheus for the same cores."""

    def __init__(self, deployment: Deployment):
        self.deployment = deployment

    def _now(self) -> tuple[float, float, float, float, float]:
        times = os.times()
        stack = sum(cpu_seconds(p.pid) for p in self.deployment.stack.procs.values() if p.poll() is None)
        return (time.monotonic(), stack, times.user + times.system, *machine_busy_seconds())

    def start(self) -> None:
        self.begin = self._now()

    def stop(self) -> dict[str, float]:
        end = self._now()
        wall, stack, fleet, busy, total = (b - a for a, b in zip(self.begin, end))
        cores = total / wall if wall else 0.0
        # the machine's ticks (/proc/stat) and the processes' own times are counted apart: on a 2-core VM they differed by
        # 0.11 of a core in 14 minutes, the machine's the smaller, so "the rest" is never below 0
        return {"stack": stack / wall, "fleet": fleet / wall, "other": max(0.0, busy - stack - fleet) / wall, "idle": cores - busy / wall}


def eval_phase(timestamp: str, interval: float) -> float:
    """Seconds into its interval at which a group evaluates (its ``lastEvaluation``, RFC 3339; Python reads the
    nanoseconds to the microsecond)."""
    return datetime.fromisoformat(timestamp).timestamp() % interval


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def safe(call, default=None):
    """One API call that may fail under load: its failure is a printed line, never the end of the run."""
    try:
        return call()
    except (OSError, AssertionError, KeyError, ValueError) as exc:
        print(f"  (query failed: {exc})", flush=True)
        return default


class Deployment:
    """The native stack's Prometheus side (fioscope_mixin.native) for the synthetic fleet: one Prometheus, or shards
    with Thanos sidecars and Thanos Query; one Alertmanager. The local exporters are not started (the server plays the hosts)."""

    def __init__(self, work: Path, hosts_dir: Path, interval: str, shards: int, extra: list[str]):
        ports = [f"stack.ports.{k}={free_port()}" for k in ("node_exporter", "fioscope", "alertmanager", "etcd")]
        fleet = [f"fleet.shards={shards}", f"fleet.ports.query={free_port()}", f"fleet.ports.query_grpc={free_port()}",
                 f"fleet.ports.sidecar_grpc={free_port_block(shards)}", f"fleet.ports.sidecar_http={free_port_block(shards)}"]
        self.stack = NativeStack(work, [f"stack.scrape_interval={interval}", f"stack.evaluation_interval={interval}",
                                        f"stack.hosts_dir={hosts_dir}", f"stack.ports.prometheus={free_port_block(shards)}",
                                        *ports, *fleet, *extra], without=("node_exporter", "fioscope"))
        self.stack.start(timeout=120)
        self.query = PromClient(self.stack.query_url(), timeout=TIMEOUT)
        self.shards = [PromClient(f"http://{self.stack.shard_address('prometheus', i)}", timeout=TIMEOUT) for i in range(shards)]
        self.alertmanager = self.stack.url("alertmanager")

    def own_metrics(self) -> dict[str, float]:
        """OWN_METRICS of Prometheus's own /metrics, each summed over the shards: one read of each shard's /metrics. A
        name is absent where a shard does not expose it (Prometheus 2.42 counts no query samples)."""
        totals: dict[str, float] = {}
        for i, shard in enumerate(self.shards):
            with urllib.request.urlopen(f"{shard.base}/metrics", timeout=TIMEOUT) as r:
                text = r.read().decode()
            for name in OWN_METRICS:
                match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
                if match and (i == 0 or name in totals):
                    totals[name] = totals.get(name, 0.0) + float(match.group(1))
                else:
                    totals.pop(name, None)
        return totals

    def rss(self, prefix: str) -> float:
        return sum(rss_mib(p.pid) for name, p in self.stack.procs.items() if name.startswith(prefix) and p.poll() is None)

    def alert(self) -> dict | None:
        """The throttling alert of the capped device, as Alertmanager has it."""
        url = f"{self.alertmanager}/api/v2/alerts?" + urllib.parse.urlencode({"filter": f'host="{CAPPED_HOST}"'})
        with urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            alerts = json.load(r)
        return next((a for a in alerts if a["labels"].get("alertname", "").startswith("FioscopeDiskThrottled")
                     and a["labels"].get("device") == CAPPED_DEVICE), None)

    def healthy_alerts(self) -> dict[str, int]:
        """Alerts in Alertmanager on the hosts that were never capped, by name: what a healthy fleet pages (none)."""
        with urllib.request.urlopen(f"{self.alertmanager}/api/v2/alerts", timeout=TIMEOUT) as r:
            alerts = json.load(r)
        # the fleet's hosts only (not the stack's own exporters, which the bench does not start)
        return dict(Counter(a["labels"].get("alertname", "") for a in alerts
                            if a["labels"].get("host", "").startswith("host-") and a["labels"]["host"] != CAPPED_HOST))

    def stop(self) -> None:
        self.stack.stop()


def series_per_host(query: PromClient) -> dict[str, dict[str, int]]:
    """{node|fioscope|recorded: {family: series}} of SAMPLE_HOST (a histogram's _bucket, _sum and _count are one family)."""
    out: dict[str, dict[str, int]] = {"node": {}, "fioscope": {}, "recorded": {}, "scrape": {}}
    for r in query.query(f'count by (__name__, job) ({{host="{SAMPLE_HOST}"}})'):
        name, job = r["metric"]["__name__"], r["metric"].get("job", "")
        # Prometheus's own series per target (up, scrape_*) and the alerts' state are told apart from the exporters'
        kind = ("recorded" if ":" in name or name.startswith("ALERTS") else "scrape" if name == "up" or name.startswith("scrape_")
                else job if job in out else None)
        if kind:
            family = re.sub(r"_(bucket|sum|count)$", "", name) if kind == "fioscope" else name
            out[kind][family] = out[kind].get(family, 0) + int(float(r["value"][1]))
    return out


def measure(fleet: FleetServer, hosts: int, interval: str, cycles: int, work: Path, shards: int, warmup: float, alert_wait: float,
            extra: list[str]) -> dict:
    hosts_dir = work / "hosts"
    hosts_dir.mkdir(parents=True)
    for i in range(hosts):
        (hosts_dir / f"host-{i:04d}.yml").write_text(fleet.host_file(f"host-{i:04d}"))
    fleet.capped.clear()
    deployment = Deployment(work / "stack", hosts_dir, interval, shards, extra)
    try:
        q = deployment.query
        expected = 2 * hosts
        up = 'sum(up{job=~"node|fioscope",host!="local"})'
        wait_for(lambda: (safe(lambda: q.value(up)) or 0) >= expected, 6 * seconds(interval) + 60 + hosts / 20, interval=2,
                 what=f"{expected} targets up")
        started = time.time()
        # the await baseline (the median of unsaturated minutes) needs a few minutes before the cap, as a real device has hours
        time.sleep(warmup)
        fleet.capped[CAPPED_HOST] = {CAPPED_DEVICE: time.time()}
        capped_at = time.time()
        cpu = CpuShare(deployment)
        cpu.start()
        own_before, sampling_since = safe(deployment.own_metrics, {}), time.monotonic()
        alert: dict | None = None
        alert_after: float | None = None
        groups: dict[str, list[float]] = {}
        slow: list[tuple[float, str, float]] = []  # (seconds after the targets were up, group, evaluation) over 2 s
        phases: dict[str, float] = {}
        rules: dict[str, list[float]] = {}
        last_eval: dict[tuple[int, str], str] = {}
        # sample the groups until each has `cycles` evaluations and the capped device has paged (or alert_wait passed)
        while time.time() < capped_at + alert_wait:
            for i, shard in enumerate(deployment.shards):
                for group in safe(shard.rules, []):
                    if last_eval.get((i, group["name"])) == group["lastEvaluation"]:
                        continue
                    last_eval[(i, group["name"])] = group["lastEvaluation"]
                    groups.setdefault(group["name"], []).append(group["evaluationTime"])
                    if group["evaluationTime"] > SLOW_EVALUATION_S:
                        at = datetime.fromisoformat(group["lastEvaluation"]).timestamp() - started
                        slow.append((at, group["name"], group["evaluationTime"]))
                    phases[group["name"]] = eval_phase(group["lastEvaluation"], group.get("interval") or seconds(interval))
                    for rule in group["rules"]:  # rules of one name (the ceilings) told apart by their labels
                        labels = ",".join(f"{k}={v}" for k, v in sorted(rule.get("labels", {}).items()) if k != "severity")
                        rules.setdefault(f"{rule['name']}{{{labels}}}" if labels else rule["name"], []).append(rule["evaluationTime"])
            if alert is None:
                alert = safe(deployment.alert)
                if alert is not None:
                    alert_after = time.time() - capped_at
            if alert is not None and min((len(v) for v in groups.values()), default=0) >= cycles * shards:
                break
            time.sleep(1)
        cores = cpu.stop()
        own_after, sampled = safe(deployment.own_metrics, {}), time.monotonic() - sampling_since

        def per_second(name: str) -> float | None:
            return (own_after[name] - own_before[name]) / sampled if name in own_before and name in own_after else None

        samples_per_second, gc_per_second = per_second(QUERY_SAMPLES), per_second(GC_CYCLES)
        gc_per_minute = None if gc_per_second is None else gc_per_second * 60 / shards
        gogc = own_after.get(GOGC)
        def points(expr: str, step: float = 15) -> list[tuple[float, float]]:
            """(value, second after the targets were up) of ``expr`` (one series) since then, in time order."""
            result = safe(lambda: q.query_range(expr, started, time.time(), step), [])
            return [(float(v), max(0.0, float(t) - started)) for series in result for t, v in series["values"]]

        def busiest(expr: str) -> list[tuple[float, float]]:
            """The three highest values of ``expr`` since the targets were up, each with its second after that."""
            return sorted(points(expr), reverse=True)[:3]

        # the head cuts a chunk of every series at once (they started together: after a restart and at each block
        # boundary, so does a real fleet): when, against the slow evaluations
        chunk_cuts = busiest('sum(rate(prometheus_tsdb_head_chunks_created_total{job="prometheus"}[1m]))')
        # the simulated fleet is one process: a stall of it delays thousands of scrapes, then they arrive together
        slow_scrapes = busiest('max(scrape_duration_seconds{job=~"node|fioscope"})')
        # the write-ahead log: a full segment is closed and fsynced (every few minutes at this rate), and the rules'
        # samples are committed to the log as the scrapes' are
        segments = points('sum(prometheus_tsdb_wal_segment_current{job="prometheus"})', step=5)  # of every shard
        wal_cuts = [at for (before, _), (after, at) in zip(segments, segments[1:]) if after > before]
        wal_fsync = busiest('sum(rate(prometheus_tsdb_wal_fsync_duration_seconds_sum{job="prometheus"}[1m]))')
        # (Prometheus 3 writes a scraped summary's quantile as a float: "1.0"; Prometheus 2 as exposed: "1")
        gc_pauses = busiest('max(go_gc_duration_seconds{job="prometheus",quantile=~"1|1[.]0"})')
        # Prometheus's garbage collections: a collection's mark phase takes half a core or more for seconds, and where
        # the two cores are then saturated a group's evaluation waits its turn among the scrapes (Go execution traces:
        # docs/fleet-bench.md)
        collections = points('sum(go_gc_cycles_total_gc_cycles_total{job="prometheus"})')  # of every shard
        latencies = []
        for expr in panel_queries():
            t0 = time.time()
            if safe(lambda expr=expr: q.query(expr)) is not None:
                latencies.append(time.time() - t0)
        return {
            "hosts": hosts, "shards": shards,
            "per_host": safe(lambda: series_per_host(q), {}),
            "head_series": [safe(lambda s=s: s._get("/api/v1/status/tsdb")["headStats"]["numSeries"], 0) for s in deployment.shards],
            "groups": {name: (statistics.mean(v), max(v), len(v)) for name, v in groups.items()},
            "group_min": {name: min(v) for name, v in groups.items()}, "phases": phases,
            "rules": sorted(((statistics.mean(v), name) for name, v in rules.items()), reverse=True),
            "rss_mib": deployment.rss("prometheus"),
            "thanos_rss_mib": deployment.rss("sidecar") + deployment.rss("thanos-query"),
            "dashboards": (len(latencies), sum(latencies), max(latencies, default=0.0), len(panel_queries())),
            "alert_after": alert_after, "alert_wait": alert_wait, "alert": alert["labels"] if alert else None,
            "healthy_alerts": safe(deployment.healthy_alerts, {}),
            "slow": sorted(slow), "chunk_cuts": chunk_cuts, "slow_scrapes": slow_scrapes,
            "wal_cuts": wal_cuts, "wal_fsync": wal_fsync, "gc_pauses": gc_pauses,
            "collections": collections,
            "minutes": (time.time() - started) / 60, "cores": cores, "samples_per_second": samples_per_second,
            "gc_per_minute": gc_per_minute, "gogc": gogc,
        }
    finally:
        deployment.stop()


def around(points: list[tuple[float, float]], at: float) -> float:
    """The value of the first of ``points`` (value, second; in time order) at or after the second ``at``."""
    return next((value for value, when in points if when >= at), float("nan"))


def collections_during(counts: list[tuple[float, float]], at: float, took: float) -> float:
    """Garbage collections counted (``counts``: a cycle counter's (value, second)) from the sample at or before the
    second ``at`` to the first at or after ``at + took + 6``."""
    before = max(((when, value) for value, when in counts if when <= at), default=(at, float("nan")))[1]
    return around(counts, at + took + 6) - before


def report(r: dict, top: int) -> None:
    per_host = r["per_host"]
    total = {kind: sum(families.values()) for kind, families in per_host.items()}
    print(f"series per host: node {total.get('node', 0)}, fioscope {total.get('fioscope', 0)}, recorded and alerts "
          f"{total.get('recorded', 0)}, up and scrape_* {total.get('scrape', 0)}; "
          f"head series {sum(r['head_series']):.0f} ({' + '.join(str(h) for h in r['head_series'])}); Prometheus RSS {r['rss_mib']:.0f} MiB"
          + (f", Thanos sidecars + Query {r['thanos_rss_mib']:.0f} MiB" if r["shards"] > 1 else ""))
    for kind in ("fioscope", "node"):
        families = sorted(per_host.get(kind, {}).items(), key=lambda kv: -kv[1])
        print(f"  {kind} families per host: " + ", ".join(f"{name} {n}" for name, n in families))
    cores, stack = r["cores"], "Prometheus, Alertmanager" + (", Thanos" if r["shards"] > 1 else "")
    print(f"  cores used while the groups were sampled: the stack ({stack}) {cores['stack']:.2f}, "
          f"the simulated fleet's exporters {cores['fleet']:.2f}, the rest of the machine {cores['other']:.2f}, idle {cores['idle']:.2f} "
          f"(of {os.cpu_count()})")
    # least ~ the group's own cost; what its worst adds is the groups (and scrapes, and GC) it shared the cores with,
    # which its phase tells: Prometheus starts each group at a fixed point of its interval, from a hash of its name and
    # rule file's path (so the same rules in another directory collide differently)
    samples = r["samples_per_second"]
    print("  samples loaded by the rules (and the few queries of this bench): "
          + (f"{samples:,.0f} a second" if samples is not None else "not counted by this Prometheus"))
    gc = r.get("gc_per_minute")
    if gc is not None:
        gogc = f" (GOGC {r['gogc'] / r['shards']:.0f})" if r.get("gogc") is not None else ""
        print(f"  Prometheus's garbage collections: {gc:.1f} a minute{' per shard' if r['shards'] > 1 else ''}{gogc}")
    for name, (mean, worst, n) in sorted(r["groups"].items(), key=lambda kv: r["phases"].get(kv[0], 0)):
        print(f"  group {name:<28} at +{r['phases'].get(name, 0):5.2f} s  evaluation mean {mean * 1000:8.1f} ms  "
              f"least {r['group_min'][name] * 1000:8.1f} ms  max {worst * 1000:8.1f} ms  ({n} evaluations)")
    print(f"  evaluations over {SLOW_EVALUATION_S:g} s (seconds after the targets were up): "
          + (", ".join(f"{name} {took:.2f} s at +{at:.0f} s" for at, name, took in r["slow"]) or "none"))
    print("  head chunks created, the busiest minutes (seconds after the targets were up): "
          + ", ".join(f"{rate:,.0f} a second at +{at:.0f} s" for rate, at in r["chunk_cuts"]))
    print("  the fleet's slowest scrapes (seconds after the targets were up): "
          + ", ".join(f"{took:.2f} s at +{at:.0f} s" for took, at in r["slow_scrapes"]))
    print("  write-ahead log segments closed (seconds after the targets were up): "
          + (", ".join(f"+{at:.0f} s" for at in r["wal_cuts"]) or "none")
          + "; its fsyncs, the busiest minutes: " + ", ".join(f"{share:.3f} s a second at +{at:.0f} s" for share, at in r["wal_fsync"]))
    if r["collections"]:
        # a collection is counted once its mark phase ends: one that slowed an evaluation ends before the evaluation
        # did, or within a mark phase's length (up to 6 s) after; the scrapes before and after bound the count
        counts = [collections_during(r["collections"], at, took) for at, _, took in r["slow"]]
        print(f"  Prometheus's garbage collections{' (every shard)' if r['shards'] > 1 else ''} from the scrape before each "
              f"evaluation over {SLOW_EVALUATION_S:g} s to the first scrape 6 s after it ended (- : the run ended first): "
              + (", ".join("-" if math.isnan(n) else f"{n:.0f}" for n in counts) or "none"))
    print("  Go's longest stop-the-world pauses: " + ", ".join(f"{took * 1000:.0f} ms at +{at:.0f} s" for took, at in r["gc_pauses"]))
    for mean, name in r["rules"][:top]:
        print(f"    rule {name:<72} mean {mean * 1000:8.1f} ms")
    answered, total_s, worst, asked = r["dashboards"]
    print(f"  dashboards' {asked} queries for one host through the query layer: {answered} answered, {total_s:.2f} s in all, "
          f"slowest {worst:.2f} s")
    alert = r["alert"]
    print("  cap to alert in Alertmanager: " + (f"{r['alert_after']:.0f} s ({alert['alertname']} {alert.get('host')}/{alert.get('device')}"
                                               + (f", shard {alert['shard']}" if "shard" in alert else "") + ")"
                                               if alert else f"no alert within {r['alert_wait']:.0f} s")
          + f"; size measured in {r['minutes']:.1f} min", flush=True)
    healthy = r.get("healthy_alerts") or {}
    print("  alerts on the hosts never capped: " + (", ".join(f"{name} {n}" for name, n in sorted(healthy.items())) or "none"), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", default="50,200,500", help="fleet sizes, comma-separated")
    parser.add_argument("--engine", choices=("single", "thanos"), default="single", help="one Prometheus, or shards under Thanos Query")
    parser.add_argument("--shards", type=int, help="thanos: shards at every size (default: one per --hosts-per-shard hosts, at least 2)")
    parser.add_argument("--hosts-per-shard", type=int, default=1000, help="thanos without --shards: hosts per shard")
    parser.add_argument("--interval", default="15s", help="scrape and evaluation interval")
    parser.add_argument("--cycles", type=int, default=6, help="evaluation cycles sampled per size")
    parser.add_argument("--top", type=int, default=5, help="costliest rules printed per size")
    parser.add_argument("--warmup", default="2m", help="data before the cap (the await baseline learns from it)")
    parser.add_argument("--alert-wait", default="5m", help="longest wait for the capped device's alert")
    parser.add_argument("--prometheus", type=Path, help="the prometheus binary (default: the installed one), e.g. a Prometheus 3 build")
    parser.add_argument("--work-dir", type=Path,
                        help="where each size's stack runs (default: a new temporary directory). Prometheus places "
                             "each rule group in the interval by a hash of its name and rule file's path: the same "
                             "directory keeps the same layout, to compare rule changes run against run")
    parser.add_argument("--keep", action="store_true",
                        help="with --work-dir: keep each size's stack directory afterwards (its Prometheus TSDB is "
                             "bench/bench_rule_cost.py's input)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override alerts/config.yaml, e.g. stack.convert_classic_histograms_to_nhcb=true")
    args = parser.parse_args()
    if args.prometheus:
        if not os.access(args.prometheus, os.X_OK):
            parser.error(f"--prometheus {args.prometheus}: not an executable")
        run_first(args.prometheus)
    try:
        sizes = [int(h) for h in args.hosts.split(",")]
        warmup, alert_wait, interval = seconds(args.warmup), seconds(args.alert_wait), seconds(args.interval)
    except ValueError as exc:  # UnitError is a ValueError
        parser.error(f"--hosts/--interval/--warmup/--alert-wait: {exc}")
    if args.keep and not args.work_dir:
        parser.error("--keep: needs --work-dir (where the stacks stay)")
    if min(sizes) < 1 or interval <= 0 or args.cycles < 1 or (args.shards is not None and args.shards < 1):
        parser.error("--hosts, --interval, --cycles and --shards must be positive")
    fleet = FleetServer()
    rows = []
    if args.work_dir:
        taken = [h for h in sizes if (args.work_dir / str(h)).exists()]
        if taken:
            parser.error(f"--work-dir {args.work_dir}: {args.work_dir / str(taken[0])} exists (a bench still running, "
                         "or one that was killed): remove it")
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        base = args.work_dir.resolve() if args.work_dir else Path(tmp)
        for hosts in sizes:
            shards = 1 if args.engine == "single" else args.shards or max(2, -(-hosts // args.hosts_per_shard))
            print(f"\n== {hosts} hosts x {len(DEVICES)} devices on {args.engine}"
                  + (f" ({shards} shards, {-(-hosts // shards)} hosts each)" if shards > 1 else "")
                  + f" (scrape/evaluation every {args.interval})", flush=True)
            if rows:  # the memory the last size took per host, for this one: a size that cannot fit is skipped, not killed
                need = (rows[-1]["rss_mib"] + rows[-1]["thanos_rss_mib"]) / rows[-1]["hosts"] * hosts * 1.2
                if need > 0.85 * mem_available_mib():
                    print(f"skipped: needs ~{need / 1024:.1f} GiB (from {rows[-1]['hosts']} hosts), "
                          f"{mem_available_mib() / 1024:.1f} GiB available")
                    continue
            try:
                r = measure(fleet, hosts, args.interval, args.cycles, base / str(hosts), shards, warmup, alert_wait, args.set)
            finally:
                if not args.keep:
                    shutil.rmtree(base / str(hosts), ignore_errors=True)  # its own: the next run of this size starts there afresh
            rows.append(r)
            report(r, args.top)
    if not rows:
        return 1
    names = sorted({g for r in rows for g in r["groups"]})
    print(f"\nengine {args.engine}: hosts  shards  head_series  prom_RSS_MiB  thanos_RSS_MiB  cap_to_alert_s  dashboards_s  "
          + "  ".join(f"{g}_ms(max)" for g in names))
    for r in rows:
        print(f"{r['hosts']:5d}  {r['shards']:6d}  {sum(r['head_series']):11.0f}  {r['rss_mib']:12.0f}  {r['thanos_rss_mib']:14.0f}  "
              f"{r['alert_after'] if r['alert_after'] is not None else float('nan'):14.0f}  {r['dashboards'][1]:12.2f}  "
              + "  ".join(f"{r['groups'].get(g, (0, 0, 0))[1] * 1000:{len(g) + 8}.1f}" for g in names))
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        for g in names:
            if g in first["groups"] and g in last["groups"]:
                # all shards' evaluation time per host
                cost = [r["groups"][g][0] * r["shards"] / r["hosts"] for r in (first, last)]
                ratio = cost[1] / max(cost[0], 1e-12)
                print(f"{g}: cost per host at {last['hosts']} vs {first['hosts']} hosts x{ratio:.2f} (<= ~1: linear or better)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
