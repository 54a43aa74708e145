#!/usr/bin/env python3
"""Histogram accuracy on a real fio run: p99 from ``fio_latency_seconds`` (as histogram_quantile computes it) vs fio's p99.

Runs one profile with ``fioscope run`` into a scratch results directory, then for every
job, direction and stage with json+ bins prints fio's p99, the p99 Prometheus would compute
from the exporter's buckets, and the error. Prints figures, asserts nothing.

Usage: python3 bench/bench_histogram.py PROFILE --target.dir DIR [--env K=V ...] [--target.cgroup CG]
  e.g. etcd-wal on /var/tmp (fast fsync), rand-read-iops (healthy random read), a throttled lab disk.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from fioscope.histogram import BUCKET_BOUNDS, bucket_counts
from fioscope.parser import parse_file
from fioscope_testkit.cli import fioscope
from fioscope_testkit.histogram import histogram_quantile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--target.dir", dest="target_dir", required=True)
    parser.add_argument("--target.cgroup", dest="cgroup")
    parser.add_argument("--env", action="append", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as results:
        cmd = ["run", args.profile, "--target.dir", args.target_dir, "--results.dir", results]
        cmd += [x for kv in args.env for x in ("--env", kv)]
        if args.cgroup:
            cmd += ["--target.cgroup", args.cgroup]
        proc = fioscope(*cmd, timeout=3600)
        paths = [p for p in Path(results).glob("*.json") if not p.name.endswith(".failure.json")]
        if not paths:
            sys.exit(f"bench_histogram: {args.profile} left no result: {proc.stderr.strip()}")
        for run in parse_file(paths[0]):
            for job in run.jobs:
                for ddir, direction in sorted(job.directions.items()):
                    for stage, lat in sorted(direction.latencies.items()):
                        fio_p99 = lat.percentiles.get("0.99")
                        if not lat.bins_ns or not fio_p99:
                            continue
                        ours = histogram_quantile(0.99, BUCKET_BOUNDS, bucket_counts(lat.bins_ns))
                        print(f"{args.profile} {job.jobname} {ddir}/{stage}: N={lat.count} fio p99 {fio_p99 * 1e3:.4f} ms, "
                              f"histogram_quantile p99 {ours * 1e3:.4f} ms, error {100 * (ours - fio_p99) / fio_p99:+.2f} %")


if __name__ == "__main__":
    main()
