#!/usr/bin/env python3
"""Hostile result files against a real ``fioscope serve``: prints figures, asserts nothing.

  --percentile-bomb N   one file of ~6 KiB whose job has N percentile keys like "1e-999990"
  --jobs N              one file with N jobs (fio-3.33/randrw.json's job under N names, testkit/fioscope_testkit/corpus.py)
  --files F             with --jobs: F such files (series per exporter)

Prints the /metrics size, the scrape time (median of 5), the exporter's RSS and the rejected count.
Usage: python3 bench/bench_hostile_results.py --jobs 5000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from fioscope_testkit import corpus
from fioscope_testkit.net import free_port, wait_for
from fioscope_testkit.paths import FIO_OUTPUTS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return -1


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--percentile-bomb", type=int, default=0)
    p.add_argument("--jobs", type=int, default=0)
    p.add_argument("--files", type=int, default=1)
    args = p.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp, "results")
        results.mkdir()
        if args.percentile_bomb:
            doc = json.loads((FIO_OUTPUTS / "fio-3.33" / "randrw.json").read_text())
            pct = doc["jobs"][0]["read"]["clat_ns"]["percentile"] = {}
            for i in range(args.percentile_bomb):
                pct[f"1e-9999{i:02d}"] = 1000
            Path(results, "bomb.json").write_text(json.dumps(doc))
        for f in range(args.files if args.jobs else 0):  # fio-3.33/randrw.json's job, as in the hostile corpus
            Path(results, f"jobs-{f}.json").write_bytes(corpus.many_jobs(args.jobs, f"f{f}-j", "fio-3.33/randrw.json"))
        sizes = sum(p.stat().st_size for p in results.iterdir())
        past = time.time() - 3600
        for path in results.iterdir():
            os.utime(path, (past, past))
        server = subprocess.Popen([sys.executable, "-m", "fioscope", "serve", "--results.dir", str(results),
                                   "--web.listen-address", f"127.0.0.1:{port}"], stderr=Path(tmp, "log").open("w"))
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            wait_for(lambda: urllib.request.urlopen(url.replace("metrics", "-/healthy"), timeout=2).status == 200, timeout=600)
            times, size, text = [], 0, ""
            for _ in range(5):
                started = time.perf_counter()
                with urllib.request.urlopen(url, timeout=120) as resp:
                    body = resp.read()
                times.append(time.perf_counter() - started)
                size = len(body)
                text = body.decode(errors="replace")
            rejected = next((line.split()[-1] for line in text.splitlines() if line.startswith("fioscope_result_parse_errors_total")), "?")
            longest = max((len(line) for line in text.splitlines()), default=0)
            print(f"input {sizes / 2**20:.1f} MiB: /metrics {size / 2**20:.1f} MiB ({text.count(chr(10))} lines, longest {longest} chars), "
                  f"scrape median {statistics.median(times):.2f} s (max {max(times):.2f} s), RSS {rss_mib(server.pid):.0f} MiB, "
                  f"files rejected {rejected}")
        finally:
            server.terminate()
            server.wait(30)
        for line in Path(tmp, "log").read_text().splitlines():
            if "rejected" in line or "limit" in line:
                print("log:", line[:300])
                break


if __name__ == "__main__":
    main()
