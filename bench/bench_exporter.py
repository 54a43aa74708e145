#!/usr/bin/env python3
"""Exporter benchmark: prints figures, asserts nothing (targets are judged by a person).

1. /metrics render time (median of 200 scrapes, timed inside the exporter as
   fioscope_scrape_duration_seconds and at the client) and RSS, with 1 and with
   100 jobs' results including json+ histograms.
2. Exporter CPU share while fio runs with a 1 s status interval.
3. First render after startup (every job rendered, nothing cached) at 500 / 1 000 / 2 000 /
   5 000 jobs, each with write slat/clat/lat json+ histograms (issue 8: linear in jobs).
4. Startup time (process start to the first /metrics answer) and RSS for a results
   directory of 10 000 result files (runs of 100 jobs).

Targets (issue 2): 1 job <= 2 ms median, 100 jobs < 50 ms, RSS <= 40 MiB, CPU < 3 % of a core.
Usage: python3 bench/bench_exporter.py [--fio-seconds 30] [--only first-render,startup,scrape,cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from fioscope_testkit.cli import fioscope_command
from fioscope_testkit.net import free_port, wait_for

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "fixtures" / "fio-outputs" / "fio-3.33"


def get(url: str, timeout: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(args: list[str]) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(fioscope_command("serve", "--web.listen-address", f"127.0.0.1:{port}", *args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: get(f"http://127.0.0.1:{port}/-/healthy"), 300)
    return proc, port


def make_results(directory: Path, jobs: int) -> None:
    """Each job: a randwrite json+ result with slat/clat/lat histograms, plus an etcd json+ result."""
    lat = json.loads((CORPUS / "lat_percentiles.json+").read_text())
    etcd = json.loads((CORPUS / "etcd.json+").read_text())
    for i in range(jobs):
        for kind, doc in (("rw", lat), ("etcd", etcd)):
            doc = json.loads(json.dumps(doc))
            doc["jobs"][0]["jobname"] = f"bench-{kind}-{i:03d}"
            path = directory / f"bench-{kind}-{i:03d}.json"
            path.write_text(json.dumps(doc))
            os.utime(path, (time.time() - 3600,) * 2)  # dropped in a while ago: past the store's settle time


def scrape_figures(jobs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        make_results(Path(tmp), jobs)
        proc, port = start(["--results.dir", tmp])
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            body = get(url)
            client, server = [], []
            for _ in range(200):
                t0 = time.perf_counter()
                body = get(url)
                client.append(time.perf_counter() - t0)
                for line in body.decode().splitlines():
                    if line.startswith("fioscope_scrape_duration_seconds "):
                        server.append(float(line.split()[1]))
            print(f"{jobs:4d} job(s) x 2 results: {len(body.splitlines()):6d} lines {len(body) / 1024:7.1f} KiB | "
                  f"render median {statistics.median(server) * 1e3:6.2f} ms (p90 {statistics.quantiles(server, n=10)[-1] * 1e3:6.2f}) | "
                  f"HTTP median {statistics.median(client) * 1e3:6.2f} ms | RSS {rss_mib(proc.pid):5.1f} MiB")
        finally:
            proc.terminate()
            proc.wait()


def cpu_during_fio(seconds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "target").mkdir()
        config = tmp / "bench.yaml"
        config.write_text(f"""
results_dir: {tmp / 'results'}
status_interval: 1s
targets: [{{name: bench, directory: {tmp / 'target'}}}]
schedule:
  - job: cloud-sla-70-30
    target: bench
    env: {{RUNTIME: "{seconds}", SIZE: 64m, IODEPTH: "16"}}
""")
        proc, port = start(["--config.file", str(config)])
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            wait_for(lambda: b'fio_run_running{jobname="cloud-sla-70-30"} 1.0' in get(url), 20)
            c0, t0 = cpu_seconds(proc.pid), time.time()
            scrapes = 0
            while b'fio_run_running{jobname="cloud-sla-70-30"} 1.0' in get(url):
                scrapes += 1
                time.sleep(1)  # a 1 s scrape interval, as the e2e stack uses
            c1, t1 = cpu_seconds(proc.pid), time.time()
            print(f"exporter CPU during a {t1 - t0:.0f} s fio run (status every 1 s, {scrapes} scrapes): "
                  f"{100 * (c1 - c0) / (t1 - t0):.2f} % of one core | RSS {rss_mib(proc.pid):.1f} MiB")
        finally:
            proc.terminate()
            proc.wait()


def write_jobs(directory: Path, files: int, jobs: int | None = None) -> None:
    """``files`` result files (randwrite json+: slat, clat and lat histograms) of ``jobs`` distinct jobs
    (default: one job per file), each its own run, aged past the settle time."""
    text = (CORPUS / "lat_percentiles.json+").read_text()
    stamp = '"timestamp_ms" : ' + text.split('"timestamp_ms" : ', 1)[1].split(",", 1)[0]
    old = time.time() - 3600
    for i in range(files):
        path = directory / f"run-{i:05d}.json"
        job = i % (jobs or files)
        path.write_text(text.replace('"jobname" : "randwrite-pct"', f'"jobname" : "job-{job:05d}"', 1)
                        .replace(stamp, f'"timestamp_ms" : {1700000000000 + i * 1000}', 1))
        os.utime(path, (old, old))


NEWLINE = b"\n"


def first_render(jobs: int) -> None:
    from fioscope.collector import Exposition
    from fioscope.collector.exporter import ScrapeTimer
    from fioscope.config import load_config
    from fioscope.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        write_jobs(Path(tmp), jobs)
        store = Store(load_config(None, tmp))
        t0, c0 = time.perf_counter(), time.process_time()
        store.scan()
        t1, c1 = time.perf_counter(), time.process_time()
        body = Exposition(store, ScrapeTimer()).render()
        t2, c2 = time.perf_counter(), time.process_time()
        # CPU seconds too: on a shared machine wall time also measures the neighbours
        print(f"{jobs:5d} jobs: scan {t1 - t0:6.2f} s (CPU {c1 - c0:6.2f} s) | first render {t2 - t1:6.2f} s (CPU {c2 - c1:6.2f} s) "
              f"| {body.count(NEWLINE)} lines, {len(body) / 2**20:.1f} MiB")


def startup(files: int, jobs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        write_jobs(Path(tmp), files, jobs)
        t0 = time.perf_counter()
        proc, port = start(["--results.dir", tmp])
        try:
            body = get(f"http://127.0.0.1:{port}/metrics", timeout=300)
            t1 = time.perf_counter()
            print(f"startup with {files} result files of {jobs} jobs: {t1 - t0:.1f} s to the first /metrics "
                  f"({len(body) / 2**20:.1f} MiB) | RSS {rss_mib(proc.pid):.0f} MiB")
        finally:
            proc.terminate()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fio-seconds", type=int, default=30)
    parser.add_argument("--only", default="scrape,cpu,first-render,startup")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if "scrape" in only:
        for jobs in (1, 100):
            scrape_figures(jobs)
    if "cpu" in only:
        cpu_during_fio(args.fio_seconds)
    if "first-render" in only:
        for jobs in (500, 1000, 2000, 5000):
            first_render(jobs)
    if "startup" in only:
        startup(10_000, 100)  # months of scheduled runs: many files, a bounded set of jobs


if __name__ == "__main__":
    main()
