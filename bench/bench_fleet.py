#!/usr/bin/env python3
"""Fleet benchmark: real Prometheus with the project's rules against a synthetic fleet (prints figures, asserts nothing).

For each fleet size (default 50, 200, 500 hosts x 4 devices) a fresh Prometheus (the installed binary, the
generated prometheus.yml and rule files) discovers the hosts through file_sd, one file per host in its
hosts folder, exactly as ``python3 -m fioscope_mixin.hosts add`` writes them. One Python HTTP server plays every host:
``/<host>/node`` is node_exporter's disk and CPU view (vda, vdb, md0 and dm-0 = vg0-data, 4 CPUs; counters
advance with wall time at per-device rates), ``/<host>/fioscope`` is the real exporter's /metrics for two
real fio results (etcd-wal json+ with its latency histogram, a randrw run).

Printed per size: series per host (node, fioscope, recorded), head series, each rule group's evaluation
time per cycle (mean and max over the sampled cycles, from /api/v1/rules), the costliest rules, and
Prometheus RSS. Target (issue 10): at 500 hosts every group evaluates in well under its interval
(< 2 s at 15 s), and cost grows no faster than linearly with hosts.

Usage: PYTHONPATH=tests python3 bench/bench_fleet.py [--hosts 50,200,500] [--interval 15s] [--cycles 6] [--top 5]
Note: the data is minutes old, so a 6 h window (the await baseline) holds minutes of samples, not 6 h.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
from fioscope_mixin.hosts import host_groups  # noqa: E402
from fioscope_mixin.units import parse_duration as seconds  # noqa: E402
from helpers.net import free_port, wait_for  # noqa: E402
from helpers.prometheus import Prometheus  # noqa: E402

FIO_RESULTS = [REPO / "tests" / "fixtures" / "fio-outputs" / "fio-3.33" / name for name in ("etcd.json+", "randrw.json")]
DEVICES = ("vda", "vdb", "md0", "dm-0")
CPUS = 4
CPU_MODES = {"user": 0.12, "nice": 0.0, "system": 0.05, "iowait": 0.03, "irq": 0.0, "softirq": 0.01, "steal": 0.0, "idle": 0.79}
# node_exporter 1.x diskstats counters and their per-second rate relative to the device's IOPS
DISK_COUNTERS = {
    "reads_completed_total": 0.6, "reads_merged_total": 0.05, "read_bytes_total": 0.6 * 16384, "read_time_seconds_total": 0.6 * 0.002,
    "writes_completed_total": 0.4, "writes_merged_total": 0.1, "written_bytes_total": 0.4 * 32768, "write_time_seconds_total": 0.4 * 0.004,
    "discards_completed_total": 0.0, "discards_merged_total": 0.0, "discarded_sectors_total": 0.0, "discard_time_seconds_total": 0.0,
    "flush_requests_total": 0.02, "flush_requests_time_seconds_total": 0.02 * 0.001,
    "io_time_seconds_total": 0.0015, "io_time_weighted_seconds_total": 0.004,
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


def node_exposition(host: str, now: float) -> bytes:
    seed = int(hashlib.sha1(host.encode()).hexdigest()[:6], 16)
    lines = []
    for metric, per_iop in DISK_COUNTERS.items():
        lines.append(f"# TYPE node_disk_{metric} counter")
        for i, device in enumerate(DEVICES):
            iops = 50 + (seed >> i) % 400  # each device its own steady load
            lines.append(f'node_disk_{metric}{{device="{device}"}} {now * iops * per_iop:.3f}')
    lines.append("# TYPE node_disk_io_now gauge")
    lines += [f'node_disk_io_now{{device="{d}"}} {i}' for i, d in enumerate(DEVICES)]
    lines.append("# TYPE node_disk_info gauge")
    lines += [f'node_disk_info{{device="{d}",major="253",minor="{i}"}} 1' for i, d in enumerate(DEVICES)]
    lines.append("# TYPE node_cpu_seconds_total counter")
    for cpu in range(CPUS):
        lines += [f'node_cpu_seconds_total{{cpu="{cpu}",mode="{mode}"}} {now * share:.2f}' for mode, share in CPU_MODES.items()]
    return ("\n".join(lines) + "\n").encode()


class FleetServer:
    """Every synthetic host's node_exporter and fioscope exporter, on one port."""

    def __init__(self):
        fio = fioscope_exposition()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                _, host, kind = (self.path.split("?")[0].split("/") + ["", "", ""])[:3]
                body = node_exposition(host, time.time()) if kind == "node" else fio if kind == "fioscope" else None
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

        ThreadingHTTPServer.request_queue_size = 512
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def host_file(self, name: str) -> str:
        groups = host_groups(name, self.address, self.address)
        for group in groups:  # one server plays every host: the path says which
            group["labels"]["__metrics_path__"] = f"/{name}/{group['labels']['__fioscope_job']}"
        return yaml.safe_dump(groups, sort_keys=False)


def measure(fleet: FleetServer, hosts: int, interval: str, cycles: int, work: Path) -> dict:
    hosts_dir = work / "hosts"
    hosts_dir.mkdir(parents=True)
    for i in range(hosts):
        (hosts_dir / f"host-{i:04d}.yml").write_text(fleet.host_file(f"host-{i:04d}"))
    overrides = [f"stack.scrape_interval={interval}", f"stack.evaluation_interval={interval}", f"stack.hosts_dir={hosts_dir}",
                 *[f"stack.ports.{k}={free_port()}" for k in ("node_exporter", "fioscope", "alertmanager", "etcd")]]
    prom = Prometheus.generated(work / "prom", overrides)
    prom.client.timeout = 120  # counting every series of a 500-host head took over 10 s on a busy 2-core VM
    try:
        expected = 2 * hosts
        wait_for(lambda: sum(t["health"] == "up" for t in prom.client.targets() if t["labels"].get("host", "local") != "local") >= expected,
                 4 * seconds(interval) + 30, interval=1, what=f"{expected} targets up")
        time.sleep(seconds("1m") + 2 * seconds(interval))  # one rate window of data, then evaluate
        groups: dict[str, list[float]] = {}
        rules: dict[str, list[float]] = {}
        last_eval: dict[str, str] = {}
        # groups with a longer interval of their own (the baseline) are sampled for as long as the others need
        deadline = time.time() + cycles * seconds(interval) * 3
        while max((len(v) for v in groups.values()), default=0) < cycles and time.time() < deadline:
            for group in prom.client.rules():
                if last_eval.get(group["name"]) == group["lastEvaluation"]:
                    continue
                last_eval[group["name"]] = group["lastEvaluation"]
                groups.setdefault(group["name"], []).append(group["evaluationTime"])
                for rule in group["rules"]:  # rules of one name (the ceilings) told apart by their labels
                    labels = ",".join(f"{k}={v}" for k, v in sorted(rule.get("labels", {}).items()) if k != "severity")
                    rules.setdefault(f"{rule['name']}{{{labels}}}" if labels else rule["name"], []).append(rule["evaluationTime"])
            time.sleep(1)
        q = prom.client.value
        return {
            "hosts": hosts,
            "node_per_host": q('count({job="node",host!="local",__name__!~".+:.+"})') / hosts,
            "fioscope_per_host": q('count({job="fioscope",host!="local",__name__!~".+:.+"})') / hosts,
            "recorded_per_host": (q('count({__name__=~".+:.+"})') or 0) / hosts,
            "head_series": q("prometheus_tsdb_head_series"),
            "groups": {name: (statistics.mean(v), max(v), len(v)) for name, v in groups.items()},
            "rules": sorted(((statistics.mean(v), name) for name, v in rules.items()), reverse=True),
            "rss_mib": prom.rss_bytes() / 2**20,
        }
    finally:
        prom.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", default="50,200,500", help="fleet sizes, comma-separated")
    parser.add_argument("--interval", default="15s", help="scrape and evaluation interval")
    parser.add_argument("--cycles", type=int, default=6, help="evaluation cycles sampled per size")
    parser.add_argument("--top", type=int, default=5, help="costliest rules printed per size")
    args = parser.parse_args()
    fleet = FleetServer()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        for hosts in (int(h) for h in args.hosts.split(",")):
            print(f"\n== {hosts} hosts x {len(DEVICES)} devices (scrape/evaluation every {args.interval})", flush=True)
            r = measure(fleet, hosts, args.interval, args.cycles, Path(tmp) / str(hosts))
            rows.append(r)
            print(f"series per host: node {r['node_per_host']:.0f}, fioscope {r['fioscope_per_host']:.0f}, "
                  f"recorded {r['recorded_per_host']:.0f};"
                  f" head series {r['head_series']:.0f}; Prometheus RSS {r['rss_mib']:.0f} MiB")
            for name, (mean, worst, n) in sorted(r["groups"].items()):
                print(f"  group {name:<28} evaluation mean {mean * 1000:8.1f} ms  max {worst * 1000:8.1f} ms  ({n} cycles)")
            for mean, name in r["rules"][:args.top]:
                print(f"    rule {name:<72} mean {mean * 1000:8.1f} ms")
    print("\nhosts  head_series  RSS_MiB  " + "  ".join(f"{g}_ms" for g in sorted(rows[0]["groups"])))
    for r in rows:
        print(f"{r['hosts']:5d}  {r['head_series']:11.0f}  {r['rss_mib']:7.0f}  "
              + "  ".join(f"{r['groups'].get(g, (0, 0, 0))[0] * 1000:{len(g) + 3}.1f}" for g in sorted(rows[0]["groups"])))
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        for g in sorted(first["groups"]):
            ratio = last["groups"][g][0] / max(first["groups"][g][0], 1e-9) / (last["hosts"] / first["hosts"])
            print(f"{g}: cost per host at {last['hosts']} vs {first['hosts']} hosts x{ratio:.2f} (<= ~1: linear or better)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
