#!/usr/bin/env python3
"""What each rule costs on a fixed fleet's data, without a live fleet's contention.

bench/bench_fleet.py measures the groups while 2,000 hosts are scraped and every group runs; on two cores its figures
move from one run to the next as much as a rule change does (the groups that start together stretch each other). This
one takes the data such a run left (``bench_fleet.py --work-dir DIR --keep``: DIR/<hosts>/stack/prometheus), starts an
idle Prometheus on it (no scrapes, no rules), and runs every rule of the rule files generated from
alerts/config.yaml (with ``--set`` overrides) as an instant query at the data's last minute, ``--repeat`` times, one
after another: the server's own evaluation time (median), the samples each loaded and the series it returned. Per group:
the sum (what one evaluation costs a core, uncontended) and that times its evaluations an interval. Run it from two
checkouts (PYTHONPATH) against the same data to compare two rule sets. Prints figures, asserts nothing.

Usage: python3 bench/bench_rule_cost.py --tsdb /tmp/lay1/2000/stack/prometheus [--prometheus P] [--repeat 5] [--top 25]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from fioscope_mixin.prometheus import rule_groups as generated_groups
from fioscope_mixin.settings import SettingsError, duration, load_settings
from fioscope_mixin.units import parse_duration
from fioscope_testkit.binaries import run_first
from fioscope_testkit.prometheus import Prometheus


def rule_groups(overrides: list[str]) -> tuple[list[dict], float]:
    """The generated rule groups (recording, then alerting) and the stack's evaluation interval in seconds."""
    settings = load_settings(overrides)
    return ([g for groups in generated_groups(settings).values() for g in groups],
            duration(settings, "stack", "evaluation_interval"))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tsdb", type=Path, required=True, help="a Prometheus data directory (bench_fleet.py --keep's)")
    parser.add_argument("--prometheus", type=Path, help="the prometheus binary (default: the installed one); the one that wrote the data")
    parser.add_argument("--repeat", type=int, default=5, help="queries of each rule")
    parser.add_argument("--top", type=int, default=25, help="costliest rules printed")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override alerts/config.yaml")
    args = parser.parse_args()
    if not (args.tsdb / "wal").is_dir() and not any(args.tsdb.glob("*/meta.json")):
        parser.error(f"--tsdb {args.tsdb}: not a Prometheus data directory (no wal/, no blocks)")
    if args.prometheus:
        if not os.access(args.prometheus, os.X_OK):
            parser.error(f"--prometheus {args.prometheus}: not an executable")
        run_first(args.prometheus)
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    try:
        groups, interval = rule_groups(args.set)
    except (SettingsError, ValueError) as exc:
        parser.error(f"--set: {exc}")
    with tempfile.TemporaryDirectory(prefix="fioscope-rule-cost-") as tmp:
        root = Path(tmp)
        (root / "tsdb").symlink_to(args.tsdb.resolve())
        config = root / "prometheus.yml"
        config.write_text("global:\n  evaluation_interval: 1m\n")
        # a head of ~900k series replays its write-ahead log for a minute or two
        server = Prometheus(root, config, extra_args=["--storage.tsdb.retention.time=3650d"], ready_within=600)
        server.client.timeout = 300
        try:
            head = server.client.head_stats()
            at = int(head["maxTime"]) / 1000 - 60  # every group's last evaluation is in
            print(f"== {args.tsdb}: {int(head['numSeries']):,} head series; each rule at the data's last minute, "
                  f"{args.repeat} queries each, one at a time", flush=True)
            costs = []  # (group, every, rule, median s, samples, series)
            for group in groups:
                every = parse_duration(group.get("interval", f"{interval}s"))
                for rule in group["rules"]:
                    runs = [server.client.query_cost(rule["expr"], at) for _ in range(args.repeat)]
                    name = rule.get("record") or rule["alert"]
                    labels = ",".join(f"{k}={v}" for k, v in sorted(rule.get("labels", {}).items()) if k not in ("severity",))
                    costs.append((group["name"], every, f"{name}{{{labels}}}" if labels else name,
                                  statistics.median(r[0] for r in runs), runs[-1][1], runs[-1][2]))
        finally:
            server.stop()
    print(f"  {'group':<42} {'every':>6} {'rules':>5} {'one evaluation':>15} {'a core, per interval':>21} {'samples':>12}")
    total = 0.0
    for group in groups:
        rows = [c for c in costs if c[0] == group["name"]]
        one = sum(c[3] for c in rows)
        per_interval = one * interval / rows[0][1] if rows else 0.0
        total += per_interval
        print(f"  {group['name']:<42} {rows[0][1] if rows else 0:>5g}s {len(rows):>5} {one * 1000:>12.1f} ms "
              f"{per_interval * 1000:>18.1f} ms {sum(c[4] for c in rows):>12,}")
    print(f"  all groups: {total:.2f} s of a core every {interval:g} s ({total / interval:.2f} cores), uncontended")
    print(f"  the {args.top} costliest rules (one evaluation):")
    for group_name, _every, rule_name, seconds, samples, series in sorted(costs, key=lambda c: -c[3])[:args.top]:
        print(f"    {seconds * 1000:8.1f} ms  {samples:>10,} samples  {series:>6,} series  {rule_name} ({group_name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
