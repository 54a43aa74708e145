#!/usr/bin/env python3
"""The await baseline's cost once a fleet has run its whole window: every device's 6-hour median.

``fioscope-disk-baseline`` records each device's unsaturated await once a minute (a 1-minute average), three times
(all requests, reads, writes), and a group of its own for each recomputes its median over
``thresholds.throttle.baseline_window`` (6h) every ``baseline_median_interval`` (3m). A fleet benchmark of
minutes (bench/bench_fleet.py) never sees that window full. This one backfills it: the three unsaturated-await
records of N hosts x 4 devices, one sample a minute over the window (``promtool tsdb create-blocks-from
openmetrics``), then starts Prometheus on those blocks and runs the baseline's three median rules, as generated from
alerts/config.yaml, as instant queries at the window's end: the server's own evaluation time and the samples each
loaded (``stats=all``), a few times each. Prints figures, asserts nothing.

Usage: python3 bench/bench_baseline.py [--hosts 2000] [--window 6h] [--prometheus P] [--promtool P] [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fioscope_mixin import names as n
from fioscope_mixin.recording import recording_rules
from fioscope_mixin.settings import load_settings
from fioscope_mixin.units import parse_duration
from fioscope_testkit.binaries import first_installed, run_first
from fioscope_testkit.prometheus import Prometheus

DEVICES = ("vda", "vdb", "md0", "dm-0")  # as bench_fleet's hosts
STEP = 60  # one unsaturated await a minute (the baseline group's interval)
# each median rule and the record it reads
MEDIANS = {n.DISK_AWAIT_BASELINE_SECONDS: n.DISK_AWAIT_UNSATURATED_SECONDS,
           n.DISK_READ_AWAIT_BASELINE_SECONDS: n.DISK_READ_AWAIT_UNSATURATED_SECONDS,
           n.DISK_WRITE_AWAIT_BASELINE_SECONDS: n.DISK_WRITE_AWAIT_UNSATURATED_SECONDS}


def median_rules(overrides: list[str]) -> dict[str, tuple[str, str, str]]:
    """The three median rules as generated: {record: (expr, its group, the group's interval)}."""
    return {r["record"]: (r["expr"], g["name"], g.get("interval", "the global interval"))
            for g in recording_rules(load_settings(overrides))["groups"] for r in g["rules"] if r.get("record") in MEDIANS}


def write_openmetrics(path: Path, hosts: int, start: int, end: int, seed: int = 1) -> int:
    """The three unsaturated-await records of ``hosts`` x 4 devices, a sample a minute in (start, end]; the sample count."""
    rng = random.Random(seed)
    samples = 0
    with path.open("w") as out:
        for record in MEDIANS.values():
            out.write(f"# TYPE {record} gauge\n")
            for h in range(1, hosts + 1):
                host = f"host-{h:04d}"
                for device in DEVICES:
                    labels = f'{{device="{device}",host="{host}",instance="{host}:9100",job="node"}}'
                    normal = rng.uniform(0.0005, 0.004)
                    out.write("".join(f"{record}{labels} {normal * rng.uniform(0.8, 1.25):.6g} {t}\n"
                                      for t in range(start + STEP, end + 1, STEP)))
                    samples += (end - start) // STEP
        out.write("# EOF\n")
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--window", default="", help="the baseline window (default: alerts/config.yaml's)")
    parser.add_argument("--repeat", type=int, default=5, help="queries of each rule")
    parser.add_argument("--prometheus", default="", help="the prometheus binary (default: the installed one)")
    parser.add_argument("--promtool", default="", help="the promtool binary (default: beside --prometheus, or the installed one)")
    parser.add_argument("--work-dir", type=Path, help="kept afterwards (default: a temporary directory)")
    args = parser.parse_args()
    overrides = [f"thresholds.throttle.baseline_window={args.window}"] if args.window else []
    try:
        rules = median_rules(overrides)
        window = int(parse_duration(load_settings(overrides)["thresholds"]["throttle"]["baseline_window"]))
    except ValueError as exc:
        print(f"bench_baseline: {exc}", file=sys.stderr)
        return 2
    try:
        prometheus = args.prometheus or first_installed("prometheus")
        promtool = args.promtool or (str(Path(prometheus).with_name("promtool")) if args.prometheus else first_installed("promtool"))
    except FileNotFoundError as exc:
        print(f"bench_baseline: {exc}", file=sys.stderr)
        return 2
    for flag, binary in (("--prometheus", prometheus), ("--promtool", promtool)):
        if not Path(binary).is_file() and not shutil.which(binary):
            print(f"bench_baseline: {flag} {binary}: not found", file=sys.stderr)
            return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="fioscope-baseline-"))
    work.mkdir(parents=True, exist_ok=True)
    end = int(time.time()) // STEP * STEP - STEP
    start = end - window
    print(f"== {args.hosts} hosts x {len(DEVICES)} devices, {window / 3600:g} h of 1-minute unsaturated awaits "
          f"({len(MEDIANS)} records), Prometheus {prometheus}", flush=True)
    t0 = time.monotonic()
    samples = write_openmetrics(work / "baseline.om", args.hosts, start, end)
    print(f"  wrote {samples:,} samples in {time.monotonic() - t0:.0f} s", flush=True)
    tsdb = work / "tsdb"
    shutil.rmtree(tsdb, ignore_errors=True)
    t0 = time.monotonic()
    made = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(work / "baseline.om"), str(tsdb)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        print(f"bench_baseline: promtool tsdb create-blocks-from: {made.stderr.strip()[-500:]}", file=sys.stderr)
        return 1
    (work / "baseline.om").unlink()
    print(f"  backfilled in {time.monotonic() - t0:.0f} s: {len([p for p in tsdb.iterdir() if p.is_dir()])} blocks", flush=True)
    config = work / "prometheus.yml"
    config.write_text("global:\n  evaluation_interval: 1m\n")
    if args.prometheus:
        run_first(Path(args.prometheus))
    server = Prometheus(work, config, extra_args=["--storage.tsdb.retention.time=30d"], ready_within=120)
    server.client.timeout = 300
    try:
        for record, (expr, group, interval) in rules.items():
            runs = [server.client.query_cost(expr, end) for _ in range(args.repeat)]
            evals = [r[0] for r in runs]
            print(f"  {record} (group {group}, every {interval}): {expr}\n"
                  f"    evaluation median {statistics.median(evals):.3f} s, least {min(evals):.3f} s, "
                  f"most {max(evals):.3f} s ({args.repeat} queries, the first {evals[0]:.3f} s); "
                  f"{runs[-1][1]:,} samples loaded, {runs[-1][2]:,} series", flush=True)
    finally:
        server.stop()
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
