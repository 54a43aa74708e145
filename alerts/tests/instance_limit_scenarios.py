#!/usr/bin/env python3
"""The machine's own disk limit and the provider's counters (issue 55 items 1 and 3), as a promtool test.

Hosts with several volumes modelled per 15 s scrape with cause_scenarios.py's machinery: a machine's limit holding the
volumes' summed IOPS or bytes/s while the split drifts (two and three volumes), the controls a VM limit must not be
called (healthy busy hosts whose sum varies, a single capped volume beside a busy one, two volumes each at its own
cap), and the provider's counters of time over a limit (the exporter's fioscope_ebs_*, the CSI driver's
aws_ebs_csi_*) deciding: a cap too jittery for the signature confirmed, a signature's cap with flat counters no cap, a
jittery machine's limit named by the instance's counter.

    python3 alerts/tests/instance_limit_scenarios.py          # write instance_limit.test.yaml (2.42) and .prometheus3. (3.x)
    python3 alerts/tests/instance_limit_scenarios.py --check  # exit 1 if the rules contradict an expectation
    python3 alerts/tests/instance_limit_scenarios.py --matrix # print each host's first naming and its pages
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cause_scenarios as cs  # noqa: E402  (alerts/tests is no package)
import scenarios as sc  # noqa: E402
from fioscope_mixin import columns  # noqa: E402
from fioscope_mixin import names as n  # noqa: E402
from scenarios import END, MINUTES, ONSET, STEP, Device, Sample, duration, light_fast  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = {"2": HERE / "instance_limit.test.yaml", "3": HERE / "instance_limit.prometheus3.test.yaml"}
NAMED_WITHIN = 120  # the machine's limit named within 2 minutes of the onset
CONFIRMED_WITHIN = 30  # a cap the volume's own counter confirms pages within 30 s
PAGES = (*n.THROTTLING_ALERTS, n.ALERT_INSTANCE_DISK_LIMIT)
KIB = 1024


def machine_limit(host: str, total: float, volumes: int, jitter: float = 0.01, period: int = 16 * 60):
    """The host's volumes' shares of a machine's limit of ``total`` (+-``jitter`` a scrape) at second ``t``: each
    volume's share drifts around 1/volumes (two volumes: 30/70 <-> 70/30 over ``period``), a few percent of scrape noise
    on top; every volume of the host draws the same figures (the same seed per scrape)."""
    def shares(t: int) -> tuple[float, list[float]]:
        rng = random.Random(f"{host}/{t}")
        s = [max(0.1, 1 + 0.4 * math.sin(2 * math.pi * (t - ONSET) / period + 2 * math.pi * i / volumes) + rng.uniform(-0.05, 0.05))
             for i in range(volumes)]
        return total * (1 + rng.uniform(-jitter, jitter)), [x / sum(s) for x in s]
    return shares


def at_limit(shares, i: int, size: int = 4096, queue: float = 16, by_bytes: bool = False):
    """Volume ``i`` of a host at its machine's limit: its share of the IOPS (or, ``by_bytes``, of the bytes/s at its
    own request ``size``), ``queue`` requests in flight (await by Little's law), busy throughout."""
    def model(t: int, _rng: random.Random) -> Sample:
        total, share = shares(t)
        r = total * share[i] / (size if by_bytes else 1)
        return Sample(r=r, rb=r * size, r_await=queue / r, util=1.0, queue=queue)
    return model


def started_between_scrapes(model, start: int, part: float):
    """``model`` whose load started between two scrapes: the scrape at ``start`` saw ``part`` of its rate (busy
    already). The lab's loads start so (issue 55: a 789 IO/s scrape before the 1,200 sum; the sum's range over
    share_window held that step for five minutes and the machine's limit went unnamed)."""
    def partial(t: int, rng: random.Random) -> Sample:
        x = model(t, rng)
        if t != start:
            return x
        return Sample(r=x.r * part, w=x.w * part, rb=x.rb * part, wb=x.wb * part, r_await=x.r_await, w_await=x.w_await,
                      util=max(0.5, x.util * part), queue=x.queue * part)
    return partial


def demand(level: float, swing: float, size: int = 4096, await_s: float = 0.0004):
    """A healthy load following its demand: ``level`` +- ``swing`` a scrape, at ``await_s``."""
    def model(_t: int, rng: random.Random) -> Sample:
        r = level * (1 + rng.uniform(-swing, swing))
        return Sample(r=r, rb=r * size, r_await=await_s, util=min(1.0, r * await_s * 1.2), queue=r * await_s)
    return model


def jittery_cap(cap: float, jitter: float, queue: float = 16):
    def model(_t: int, rng: random.Random) -> Sample:
        r = cap * (1 + rng.uniform(-jitter, jitter))
        return Sample(r=r, rb=r * 4096, r_await=queue / r, util=1.0, queue=queue)
    return model


@dataclass
class Counter:
    """A provider counter of time over a limit on a device, growing by ``ratio`` of each second from ``start``."""

    device: str
    metric: str  # fioscope_ebs_exceeded_iops_seconds_total, aws_ebs_csi_exceeded_iops_seconds_total, ...
    ratio: float = 0.0
    start: int = ONSET


@dataclass
class HostCase:
    name: str
    host: str
    devices: dict[str, Callable[[int, random.Random], Sample]]
    cause: dict[str, str | None]  # device -> the cause it must get in its episode (None: never instance_limit/provider_cap)
    pages: dict[str, str] = field(default_factory=dict)  # alert -> device ("" for the host's alert) that must fire
    within: int = NAMED_WITHIN  # ... within this many seconds of the onset
    counters: list[Counter] = field(default_factory=list)


def limit_host(name: str, host: str, total: float, volumes: int, by_bytes: bool = False, sizes=(4096,), jitter: float = 0.01,
               counters: tuple[str, ...] = (), period: int = 16 * 60, first_part: float = 1.0) -> HostCase:
    shares = machine_limit(host, total, volumes, jitter, period)
    devs = {f"nvme{i + 1}n1": started_between_scrapes(
        cs.window(at_limit(shares, i, sizes[i % len(sizes)], by_bytes=by_bytes), ONSET, END, light_fast), ONSET, first_part)
        for i in range(volumes)}
    return HostCase(name, host, devs, {d: "instance_limit" for d in devs}, {n.ALERT_INSTANCE_DISK_LIMIT: ""},
                    counters=[Counter(d, m, 0.4) for d in devs for m in counters])


EBS_VOLUME, EBS_INSTANCE = "fioscope_ebs_exceeded_iops_seconds_total", "fioscope_ebs_ec2_exceeded_iops_seconds_total"
CSI_VOLUME = "aws_ebs_csi_exceeded_iops_seconds_total"
CASES = [
    limit_host("the machine's limit: two volumes, 6,000 IOPS +-1 %, the split drifting 30/70 <-> 70/30", "v1", 6000, 2),
    limit_host("the machine's limit: three volumes, 12,000 IOPS +-1 %, the shares rotating every 8 minutes", "v2", 12000, 3,
               period=8 * 60),
    limit_host("the machine's limit: two volumes, 250 MiB/s +-1 % of 64 KiB and 256 KiB requests", "v3", 250 * 1048576, 2,
               by_bytes=True, sizes=(64 * KIB, 256 * KIB)),
    limit_host("the machine's limit: three volumes, 600 MiB/s +-1 % of 16, 128 and 512 KiB requests, every 8 minutes", "v4",
               600 * 1048576, 3, by_bytes=True, sizes=(16 * KIB, 128 * KIB, 512 * KIB), period=8 * 60),
    # the controls: never the machine's limit
    HostCase("healthy busy host: two volumes following their demand (+-30 % a scrape each)", "h1",
             {"nvme1n1": cs.window(demand(3000, 0.3), ONSET, END, light_fast),
              "nvme2n1": cs.window(demand(2000, 0.3), ONSET, END, light_fast)}, {"nvme1n1": None, "nvme2n1": None}),
    HostCase("healthy busy host, slow: two backups at 8x their normal latency, each +-25 % a scrape", "h2",
             {"nvme1n1": cs.window(demand(800, 0.25, size=131072, await_s=0.0032), ONSET, END, light_fast),
              "nvme2n1": cs.window(demand(600, 0.25, size=131072, await_s=0.0032), ONSET, END, light_fast)},
             {"nvme1n1": None, "nvme2n1": None}),
    HostCase("a single capped volume (700 r/s + 300 w/s) beside a busy healthy one", "h3",
             {"nvme1n1": cs.window(sc.iops_cap, ONSET, END), "nvme2n1": cs.window(demand(2000, 0.3), ONSET, END, light_fast)},
             {"nvme1n1": "provider_cap", "nvme2n1": None}, {n.ALERT_DISK_THROTTLED: "nvme1n1"}),
    HostCase("two volumes, each at its own cap (flat): their sum is flat, but no share moves", "h4",
             {"nvme1n1": cs.window(sc.iops_cap, ONSET, END), "nvme2n1": cs.window(jittery_cap(2000, 0.01), ONSET, END, light_fast)},
             {"nvme1n1": "provider_cap", "nvme2n1": "provider_cap"}, {n.ALERT_DISK_THROTTLED: "nvme1n1 nvme2n1"}),
    # the provider's counters decide where they exist
    HostCase("a cap jittering +-30 % a scrape (no signature), the volume's counter growing: confirmed", "g1",
             {"nvme1n1": cs.window(jittery_cap(1000, 0.3), ONSET, END, light_fast)}, {"nvme1n1": "provider_cap"},
             {n.ALERT_DISK_THROTTLED: "nvme1n1"}, CONFIRMED_WITHIN,
             [Counter("nvme1n1", EBS_VOLUME, 0.5), Counter("nvme1n1", EBS_INSTANCE)]),
    HostCase("the same cap read from the EBS CSI driver's series (volume_id vol-0g2 is node_exporter's serial vol0g2)", "g2",
             {"nvme1n1": cs.window(jittery_cap(1000, 0.3), ONSET, END, light_fast)}, {"nvme1n1": "provider_cap"},
             {n.ALERT_DISK_THROTTLED: "nvme1n1"}, CONFIRMED_WITHIN, [Counter("nvme1n1", CSI_VOLUME, 0.5)]),
    HostCase("a flat ceiling the signature pages (700 r/s + 300 w/s), the counters flat: no provider cap", "g3",
             {"nvme1n1": cs.window(sc.iops_cap, ONSET, END)}, {"nvme1n1": None}, {},
             counters=[Counter("nvme1n1", EBS_VOLUME), Counter("nvme1n1", EBS_INSTANCE)]),
    limit_host("the machine's limit jittering +-15 % (no signature), the instance's counter growing", "g4", 6000, 2, jitter=0.15,
               counters=(EBS_INSTANCE,)),
    # (last: each case's seed is its place in this list)
    limit_host("the machine's limit: two volumes, 1,200 IOPS +-1 %, the load started between two scrapes (its first: 2/3)",
               "v5", 1200, 2, period=4 * 60, first_part=2 / 3),
    HostCase("two volumes, each at its own cap, their loads started between two scrapes (the first: 2/3): no share moves", "h5",
             {"nvme1n1": started_between_scrapes(cs.window(sc.iops_cap, ONSET, END), ONSET, 2 / 3),
              "nvme2n1": started_between_scrapes(cs.window(jittery_cap(2000, 0.01), ONSET, END, light_fast), ONSET, 2 / 3)},
             {"nvme1n1": "provider_cap", "nvme2n1": "provider_cap"}, {n.ALERT_DISK_THROTTLED: "nvme1n1 nvme2n1"}),
]


# ---------------------------------------------------------------------------- input series
def host_series(case: HostCase, seed: int) -> list[dict]:
    out: list[dict] = []
    for j, (device, model) in enumerate(sorted(case.devices.items())):
        out += cs.case_series(cs.Case(case.name, Device(case.host, device, model, discards=False), None), seed + j)
    times = [i * STEP for i in range(MINUTES * 60 // STEP + 1)]
    for c in case.counters:
        rates = [c.ratio if t >= c.start and t < END else 0.0 for t in times]
        if c.metric.startswith("aws_"):  # the CSI driver's node pod: volume_id, no host or device
            labels = f'job="ebs-csi-node",instance="10.0.0.7:3302",volume_id="vol-0{case.host}"'
            out.append({"series": (f'{columns.INFO_SERIES}{{job="node",instance="{case.host}:9100",host="{case.host}",'
                                   f'device="{c.device}",model="Amazon Elastic Block Store",serial="vol0{case.host}"}}'),
                        "values": f"1x{len(times) - 1}"})
        else:
            labels = (f'job="fioscope",instance="{case.host}:7963",host="{case.host}",device="{c.device}",'
                      f'volume_id="vol-0{case.host}{c.device}"')
        out.append({"series": f"{c.metric}{{{labels}}}", "values": cs._counter(rates)})
    return out


def input_series() -> list[dict]:
    return [s for i, case in enumerate(CASES) for s in host_series(case, 9000 + 10 * i)]


# ---------------------------------------------------------------------------- what promtool says
Seen = dict[int, dict[str, str]]  # time -> {"host/device": cause}
Fired = dict[tuple[str, str, int], list[dict]]  # (alert, "host/device" or "host/", t) -> [labels, annotations]


def observe(rules_dir: Path, line: str) -> tuple[Seen, Fired]:
    return cs.observe_causes(rules_dir, line, "instance_limit_scenarios.py", n.DISK_SLOW_CAUSE, PAGES, f"{STEP}s", input_series(),
                             list(range(ONSET - 120, END + 1, STEP)), STEP)


def judge(seen: Seen, fired: Fired) -> tuple[list[str], list[str]]:
    rows, problems = [], []
    for case in CASES:
        for device, cause in case.cause.items():
            key = f"{case.host}/{device}"
            causes = {t: c[key] for t, c in seen.items() if key in c and t >= ONSET}
            named = sorted(t for t, c in causes.items() if c == cause)
            rows.append(f"| {case.host} | {device} | {cause} | {named[0] - ONSET if named else ''} | "
                        f"{', '.join(sorted(set(causes.values()))) or 'none'} |")
            if cause and not named:
                problems.append(f"{case.name}: {device} never named {cause}")
            elif cause and named[0] - ONSET > case.within:
                problems.append(f"{case.name}: {device} named {cause} {named[0] - ONSET} s after the onset (target {case.within} s)")
            wrong = {c for c in causes.values() if c in ("instance_limit", "provider_cap") and c != cause}
            if wrong:
                problems.append(f"{case.name}: {device} named {sorted(wrong)}")
        expected = {(a, f"{case.host}/{d}") for a, devs in case.pages.items() for d in (devs.split() or [""])}
        for alert, key in sorted({(a, k) for (a, k, _t) in fired if k.split("/")[0] == case.host}):
            if (alert, key) not in expected:
                problems.append(f"{case.name}: {alert} fired on {key}")
        for alert, key in sorted(expected):
            first = min((t for (a, k, t) in fired if (a, k) == (alert, key)), default=None)
            rows.append(f"| {key} | {alert} | fired {'never' if first is None else first - ONSET} s after the onset |")
            if first is None or first - ONSET > case.within:
                problems.append(f"{case.name}: {alert} on {key}: {'never' if first is None else first - ONSET} (target {case.within} s)")
    return rows, problems


def build_test(seen: Seen, fired: Fired, rules_dir: Path) -> dict:
    """The cause of every device of these hosts every minute and around each first naming; each page where it first
    fires, a minute later, and before the onset (silent)."""
    times = set(range(ONSET - 60, END + 1, 60))
    for case in CASES:
        for device, cause in case.cause.items():
            named = sorted(t for t, c in seen.items() if cause and c.get(f"{case.host}/{device}") == cause)
            if named:
                times |= {named[0] - STEP, named[0]}

    def samples(t: int) -> list[dict]:
        return [{"labels": n.DISK_SLOW_CAUSE + sc._labels({"job": "node", "instance": f"{k.split('/')[0]}:9100", "host": k.split("/")[0],
                                                            "device": k.split("/")[1], "cause": c}), "value": 1}
                for k, c in sorted(seen[t].items())]

    alert_tests = []
    for name in PAGES:
        first = sorted({t for (a, _k, t) in fired if a == name})
        for t in sorted({ONSET - 60, *([first[0] - STEP, first[0], first[0] + 4 * STEP] if first else [ONSET + 5 * 60])}):
            alert_tests.append({"eval_time": duration(t), "alertname": name,
                                "exp_alerts": [x for (a, _k, at), xs in sorted(fired.items()) if a == name and at == t for x in xs]})
    return {"rule_files": [f"../{f}" for f in sc.RULE_FILES], "evaluation_interval": f"{STEP}s",
            "group_eval_order": sc.group_order(rules_dir),
            "tests": [{"name": "the machine's limit named within 2 minutes, never on the controls; the provider's counters decide",
                       "interval": f"{STEP}s", "input_series": input_series(),
                       "promql_expr_test": [{"expr": n.DISK_SLOW_CAUSE, "eval_time": duration(t), "exp_samples": samples(t)}
                                            for t in sorted(times)] + VALUES,
                       "alert_rule_test": alert_tests}]}


# the evidence records' values, five minutes into the episodes
AT = duration(ONSET + 300)


def _one(expr: str, samples: list[tuple[str, float]]) -> dict:
    return {"expr": expr, "eval_time": AT, "exp_samples": [{"labels": labels, "value": value} for labels, value in samples]}


VALUES = [
    # v1's two volumes together at the machine's 6,000 IOPS, per scrape and held over the window; two volumes are at
    # its limit, each moving twice as far as their sum; no such volume on h4 (each at its own cap)
    *(_one(f'round({record}{{host="v1",rate="iops"}}, 500)', [('{host="v1", instance="v1:9100", job="node", rate="iops"}', 6000)])
      for record in (n.HOST_VOLUMES_RATE_IRATE, n.HOST_VOLUMES_HELD_SUM)),
    _one(f'count by (host) (max by (host, device) ({n.DISK_VOLUME_SHARE_RANGE_RATIO}{{host=~"v1|h4"}}))', [('{host="v1"}', 2)]),
    _one(f'count by (host) ({n.DISK_VOLUME_RATE_IRATE}{{host=~"v1|h4",rate="iops"}})', [('{host="v1"}', 2), ('{host="h4"}', 2)]),
    # v5's load started between two scrapes (the first at 800 of 1,200): the held bounds over five minutes never hold it,
    # the host's sum's (within +-1 % of 1,200) nor its two volumes'
    *(_one(f'round({agg}_over_time({n.HOST_VOLUMES_HELD_RATE_BOUND}{{host="v5",rate="iops",bound="{bound}"}}[5m]), 100)',
           [(f'{{bound="{bound}", host="v5", instance="v5:9100", job="node", rate="iops"}}', 1200)])
      for agg, bound in (("min", "min"), ("max", "max"))),
    _one(f'count by (host, bound) ({n.DISK_VOLUME_HELD_RATE_BOUND}{{host="v5",rate="iops"}} > 200)',
         [('{bound="max", host="v5"}', 2), ('{bound="min", host="v5"}', 2)]),
    # the provider's counters: growing on g1 (the exporter's) and g2 (the CSI driver's), flat on g3
    _one(f'{n.DISK_PROVIDER_OVER_LIMIT}{{host=~"g1|g2|g3"}}',
         [(f'{n.DISK_PROVIDER_OVER_LIMIT}{{device="nvme1n1", host="{host}", limit="{limit}"}}', value)
          for host, limit, value in (("g1", "instance", 0), ("g1", "volume", 1), ("g2", "volume", 1), ("g3", "instance", 0),
                                     ("g3", "volume", 0))]),
]

HEADER = ("# Generated by alerts/tests/instance_limit_scenarios.py (the hosts and what each must get are there);\n"
          "# regenerate with `python3 alerts/tests/instance_limit_scenarios.py` after changing the rules.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the rules contradict an expectation")
    parser.add_argument("--matrix", action="store_true", help="print each device's first naming and each page's")
    parser.add_argument("--rules", type=Path, default=HERE.parent, help="directory with the generated rule files")
    parser.add_argument("--line", choices=sorted(OUT), action="append", help="only this Prometheus line (default: both)")
    args = parser.parse_args(argv)
    failed = False
    for line in args.line or sorted(OUT):
        seen, fired = observe(args.rules, line)
        rows, problems = judge(seen, fired)
        if args.matrix:
            print(f"Prometheus {sc.LINE_NAMES[line]}:\n" + "\n".join(rows))
        for p in problems:
            print(f"instance_limit_scenarios.py: Prometheus {sc.LINE_NAMES[line]}: {p}", file=sys.stderr)
        failed |= bool(problems)
        if not (problems or args.check or args.matrix):
            OUT[line].write_text(HEADER + yaml.safe_dump(build_test(seen, fired, args.rules), sort_keys=False, width=160))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
