#!/usr/bin/env python3
"""Disk scenarios for the throttling alerts, as promtool unit tests and as a detection matrix.

Each scenario is a device modelled per 15 s scrape (or 5 s: --step) (IOPS, bytes, await, util, queue per
direction); the model becomes node_exporter counters. One promtool run with "expect
nothing" at every step shows what each alert does when (promtool prints what it got);
from that:

    python3 alerts/tests/scenarios.py            # write alerts/tests/detection.test.yaml
    python3 alerts/tests/scenarios.py --check    # exit 1 if the rules contradict a scenario's expectation
    python3 alerts/tests/scenarios.py --matrix   # print scenario x (alert, seconds to fire, ceiling named)
    python3 alerts/tests/scenarios.py --markdown # ... as the Markdown table of docs/runbook.md
    python3 alerts/tests/scenarios.py --check --step 5  # the same scenarios at 5 s scrapes (rules generated for them)

The generated test (one promtool test over every scenario's series, the rule groups in the
stack's order) pins, per scenario, the first evaluation at which each alert fires (with its
description, which names the ceiling), that it is silent one step earlier, that no other
throttling alert fires on its devices, and that the healthy controls stay silent. Generation refuses a result that
contradicts a scenario's expectation (an alert that should not fire, a ceiling not named,
slower than the target), so a regression shows as a failing generator, not a new golden file.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from fioscope_mixin import names as n
from fioscope_mixin import prometheus
from fioscope_mixin.rule import params
from fioscope_mixin.settings import load_settings

HERE = Path(__file__).resolve().parent
# the generated test per Prometheus line: 3.x's range selectors are left-open, so an alert fires one evaluation earlier
# than on 2.42 and a test of exact first firings is generated for each (testkit/fioscope_testkit/binaries.rule_tests_for picks)
OUT = {"2": HERE / "detection.test.yaml", "3": HERE / "detection.prometheus3.test.yaml"}
PROMETHEUS3_DIR = Path.home() / ".cache" / "fioscope" / "prometheus-v0.316.0"  # scripts/setup.sh builds it
STEP = 15  # seconds per sample (scrape and evaluation interval); --step 5 observes the same scenarios at 5 s scrapes
PHASE = 0  # seconds from each evaluation to the next scrape (--phase): a host's scrapes keep one offset to the rule groups
# a cap's first page's target at each scrape interval (issue 25): a minute at 15 s scrapes, half a minute at 5 s
PAGE_TARGET = {15: 60, 5: 30}
# promtool evaluates every rule at every step of a test: the minutes are its cost (the default test run runs these)
MINUTES = 36
ONSET = 12 * 60  # every scenario's load starts (or changes) at 12m; the first 12m give the device its normal (and the
END = ONSET + 18 * 60  # queue test its 10 minutes before); the load stops here, and every alert resolves within
RESOLVE = 5 * 60  # five minutes (the last six minutes of the run show it)
_DEFAULTS = params(load_settings())  # the template parameters of the default rules, which the generated test pins
FIRST_PAGE = 60  # a cap pages within a minute of onset at 15 s scrapes, on both lines (issue 25's target)
THROTTLE_ALERTS = [*n.THROTTLING_ALERTS, n.ALERT_DISK_QUEUE_EXPLODING, n.ALERT_DISK_STALLED]
INFO_ALERTS = [n.ALERT_DISK_AT_PHYSICAL_MAXIMUM]
WATCHED = THROTTLE_ALERTS + INFO_ALERTS + [n.ALERT_DISK_LATENCY_ABOVE_SLA]
MIB = 1048576
RULE_FILES = ["recording.rules.yaml", "alerts.rules.yaml"]


@dataclass
class Sample:
    """One scrape interval of a device, per direction: requests/s, bytes/s, await (s); util; queue (aqu-sz)."""

    r: float = 0.0
    w: float = 0.0
    rb: float = 0.0
    wb: float = 0.0
    r_await: float = 0.0
    w_await: float = 0.0
    util: float = 0.0
    queue: float = 0.0
    in_flight: float | None = None  # node_disk_io_now at the scrape; None: the queue (aqu-sz)


def light(_t: int, rng: random.Random, normal: float = 0.001) -> Sample:
    """The background: a light random-read load at 1 ms (the device's normal)."""
    r = 50 + rng.uniform(-10, 10)
    return Sample(r=r, rb=r * 4096, r_await=normal, util=r * normal, queue=r * normal)


def light_fast(t: int, rng: random.Random) -> Sample:
    """The background of a fast device: its normal is 0.4 ms (a cloud volume) ..."""
    return light(t, rng, 0.0004)


def light_nvme(t: int, rng: random.Random) -> Sample:
    """... or 0.1 ms (a local NVMe)."""
    return light(t, rng, 0.0001)


def mixed(t: int, phase_of: Callable[[int], Sample]) -> Sample:
    """One scrape interval [t, t+STEP) as the time-weighted mix of the per-second states of a phased workload
    (a phase boundary inside a scrape: part small requests, part large). Await by Little's law: queue / IOPS."""
    parts = [phase_of(t + s) for s in range(STEP)]
    n = len(parts)
    out = Sample(r=sum(p.r for p in parts) / n, w=sum(p.w for p in parts) / n, rb=sum(p.rb for p in parts) / n,
                 wb=sum(p.wb for p in parts) / n, util=sum(p.util for p in parts) / n, queue=sum(p.queue for p in parts) / n,
                 in_flight=parts[-1].in_flight)
    total = out.r + out.w
    out.r_await = out.w_await = out.queue / total if total else 0.0
    return out


def dual_cap(iops_cap: float, bw_cap: float, sizes: tuple[int, ...], phase: int, queue: float, offset: int = 7,
             additive: bool = False, direction: str = "r"):
    """A volume with an IOPS and a bytes/s cap (min() of the two, or the additive formula 1/(1/IOPS + size/BW)),
    under a workload taking ``sizes`` in turn for ``phase`` seconds each, ``queue`` requests in flight."""
    def at(second: int) -> Sample:
        size = sizes[((second - ONSET + offset) // phase) % len(sizes)]
        iops = 1 / (1 / iops_cap + size / bw_cap) if additive else min(iops_cap, bw_cap / size)
        if direction == "w":
            return Sample(w=iops, wb=iops * size, util=1.0, queue=queue)
        return Sample(r=iops, rb=iops * size, util=1.0, queue=queue)
    return lambda t, _rng: mixed(t, at)


def capped(r: float, w: float, size: int, queue: float) -> Sample:
    """Pinned at a ceiling with ``queue`` requests waiting: await = queue / IOPS (Little's law)."""
    total = r + w
    return Sample(r=r, w=w, rb=r * size, wb=w * size, r_await=queue / total, w_await=queue / total, util=1.0, queue=queue)


@dataclass
class Device:
    host: str
    device: str
    model: Callable[[int, random.Random], Sample]
    discards: bool = True  # node_exporter has discard/flush series (kernel 4.18+/5.5+)
    hardware: tuple[str, str] | None = None  # (vendor, model) fioscope publishes from sysfs; None: no such series
    # the host's DMI identity: (job publishing it, "fioscope" or "node", its labels); None: no such series
    machine: tuple[str, dict[str, str]] | None = None
    # seconds [start, end) without a scrape (a scrape gap, an exporter's restart; staleness marked at the first), and
    # the second a new target is first scraped
    gaps: tuple[tuple[int, int], ...] = ()
    first_scrape: int = 0
    # the model node_exporter's node_disk_info names (udev's), where node_exporter alone runs on the host; None: no such series
    node_model: str | None = None


@dataclass
class Scenario:
    name: str
    devices: list[Device]
    expect: dict[str, tuple[str, str]]  # alert -> (device key "host/device", phrase its description must contain)
    within: dict[str, int] = field(default_factory=dict)  # alert -> seconds after onset it must fire by
    fio: list[tuple[str, str]] = field(default_factory=list)  # (host, device) a fio job loads from onset to END
    topology: list[tuple[str, str, str]] = field(default_factory=list)  # (host, device, parent below it)
    note: str = ""
    episode: tuple[int, int] = (ONSET, END)  # seconds the cap (the fault) binds: one alert from its first firing to the end


def after_onset(load: Callable[[int, random.Random], Sample], before=light):
    def model(t: int, rng: random.Random) -> Sample:
        return load(t, rng) if ONSET <= t < END else before(t, rng)
    return model


def iops_cap(_t, _rng):
    return capped(700, 300, 4096, 256)


def bandwidth_cap(t, _rng):
    # 40 MiB/s cap, the workload alternates 4k random reads and 256k scans every 30 s
    size = 4096 if (t // 30) % 2 == 0 else 262144
    iops = 40 * 1048576 / size
    return Sample(r=iops, rb=40 * 1048576, r_await=128 / iops, util=1.0, queue=128)


def write_cap(_t, rng):
    # writes pinned at 300/s with 128 waiting; an independent read load runs fast and noisy
    r = 1300 if (_t // STEP) % 2 else 2700
    return Sample(r=r, w=300, rb=r * 4096, wb=300 * 4096, r_await=0.0005, w_await=128 / 300, util=1.0, queue=128 + r * 0.0005)


def burst_then_cap(t, _rng):
    # burst credits: 3000 IOPS at 2 ms for 5 minutes, then the 300 IOPS baseline with the same 6 in flight
    if t < ONSET + 300:
        return Sample(r=3000, rb=3000 * 4096, r_await=0.002, util=1.0, queue=6)
    return Sample(r=300, rb=300 * 4096, r_await=0.02, util=1.0, queue=6)


def bursty_under_cap(t, _rng):
    # a bursty writer on a 500 IOPS sliced limit: 900/s in one scrape, idle in the next (450/s on average)
    busy = (t // STEP) % 2 == 0
    w = 900 if busy else 10
    return Sample(w=w, wb=w * 4096, w_await=0.02 if busy else 0.001, util=0.9 if busy else 0.05, queue=18 if busy else 0.01)


def healthy_deep_queue(_t, rng):
    # NVMe saturated by a deep-queue job: tens of thousands of IOPS, aqu-sz 50, await ~1.25 ms
    r = 40000 + rng.uniform(-8000, 8000)
    return Sample(r=r, rb=r * 4096, r_await=50 / r, util=0.97, queue=50)


def alternating_uncapped(t, rng):
    size = 4096 if (t // 30) % 2 == 0 else 262144
    iops = (20000 if size == 4096 else 1200) * (1 + rng.uniform(-0.15, 0.15))
    return Sample(r=iops, rb=iops * size, r_await=4 / iops, util=0.95, queue=4)


def hdd_normal(_t, rng):
    r = 40 + rng.uniform(-5, 5)
    return Sample(r=r, rb=r * 65536, r_await=0.04, util=0.4, queue=r * 0.04)


def hdd_steady(_t, _rng):
    # slow by nature: 100 IOPS flat at 150 ms (its normal under light load is 40 ms: under 5x)
    return Sample(r=100, rb=100 * 65536, r_await=0.15, util=1.0, queue=15)


def costly_queue_before(_t, rng):
    r = 800 + rng.uniform(-350, 350)
    return Sample(r=r, rb=r * 4096, r_await=0.001, util=0.4, queue=r * 0.001)


def costly_queue(t, _rng):
    # a degrading disk: the same ~800 IOPS, now 64 in flight at ~80 ms (swinging per scrape: no ceiling)
    r = 450 if (t // STEP) % 2 else 1150
    return Sample(r=r, rb=r * 4096, r_await=64 / r, util=1.0, queue=64)


def raid1_write_cap(capped_leg: bool):
    # md RAID1 with LVM on top, the cap on one leg: every layer above sees the cap; the other leg waits, fast
    def model(_t, _rng):
        if capped_leg:
            return capped(0, 300, 4096, 64)
        return Sample(w=300, wb=300 * 4096, w_await=0.0005, util=0.15, queue=0.15)
    return model


def varying_demand(t, rng):
    # a healthy disk whose load follows its users: IOPS rise and fall over minutes, await stays near normal
    r = 600 + 500 * ((t // 60) % 6) / 5 + rng.uniform(-120, 120)
    return Sample(r=r, rb=r * 8192, r_await=0.0012, util=min(0.97, r / 1200), queue=r * 0.0012)


def nightly_backup(t, rng):
    # a sequential backup (1 MiB reads, one or two in flight), paced by its compression: the rate follows the data
    rb = (170 + rng.uniform(-45, 45)) * 1e6
    r = rb / MIB
    return Sample(r=r, rb=rb, r_await=1.5 / r, util=0.96, queue=1.5)


def writeback_background(_t, rng):
    # a database's steady write-back (64 KiB at 14 ms on a slow volume) beside a few 4 KiB reads at 0.4 ms: the
    # device's mean normal (~13 ms) is the writes'; the reads' own normal is 0.4 ms
    r, w = 10 + rng.uniform(-2, 2), 100 + rng.uniform(-10, 10)
    return Sample(r=r, w=w, rb=r * 4096, wb=w * 65536, r_await=0.0004, w_await=0.014, util=0.3, queue=w * 0.014 + r * 0.0004)


def nvme_streaming(_t, _rng):
    # a local NVMe streaming 1 MiB reads at its own maximum, 3 GB/s flat, 32 in flight
    rb = 3e9
    r = rb / MIB
    return Sample(r=r, rb=rb, r_await=32 / r, util=1.0, queue=32)


EBS = ("NVMe", "Amazon Elastic Block Store")
SAMSUNG = ("NVMe", "Samsung SSD 980 PRO")
CAPPED = "{host}/{device}"
SCENARIOS = [
    Scenario("IOPS cap (700 r/s + 300 w/s)", [Device("s1", "vdb", after_onset(iops_cap))],
             {n.ALERT_DISK_THROTTLED: ("s1/vdb", "reads flat at ~700/s, writes flat at ~300/s (no limit declared)")},
             {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("IOPS cap, kernel without discard/flush series", [Device("s2", "vdb", after_onset(iops_cap), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("s2/vdb", "reads flat at ~700/s, writes flat at ~300/s")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("bandwidth cap 40 MiB/s, 4k and 256k alternating", [Device("s3", "vdb", after_onset(bandwidth_cap))],
             {n.ALERT_DISK_THROTTLED: ("s3/vdb", "read throughput flat at ~40MiB/s")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("write-only cap 300 w/s, independent noisy reads", [Device("s4", "vdb", after_onset(write_cap))],
             {n.ALERT_DISK_THROTTLED: ("s4/vdb", "is throttled at its provider's cap: writes flat at ~300/s (")},
             {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("burst 3000 IOPS for 5 min, then capped at 300", [Device("s5", "vdb", after_onset(burst_then_cap))],
             {n.ALERT_DISK_THROTTLED_AFTER_BURST: ("s5/vdb", "IOPS fell from ~3k to ~300/s")},
             {n.ALERT_DISK_THROTTLED_AFTER_BURST: 300 + 120}, episode=(ONSET + 300, END)),
    Scenario("fio job on a capped device", [Device("s6", "vdb", after_onset(iops_cap)), Device("s6", "vdc", after_onset(iops_cap))],
             {n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD: ("s6/vdb", "reads flat at ~700/s"),
              n.ALERT_DISK_THROTTLED: ("s6/vdc", "reads flat at ~700/s")},
             {n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD: 60, n.ALERT_DISK_THROTTLED: FIRST_PAGE}, fio=[("s6", "vdb")],
             note="fio loads vdb only: vdb gets the fio-load alert, vdc (same host, not loaded by fio) the any-workload one"),
    Scenario("costly queue: 64 in flight at 80 ms, no more IOPS", [Device("s7", "vdb", after_onset(costly_queue, costly_queue_before))],
             {n.ALERT_DISK_QUEUE_EXPLODING: ("s7/vdb", "against a normal of 1ms")}, {n.ALERT_DISK_QUEUE_EXPLODING: 420}),
    Scenario("healthy: NVMe saturated, deep queue (aqu-sz 50, 1.25 ms)", [Device("h1", "nvme0n1", after_onset(healthy_deep_queue))], {}),
    Scenario("healthy: 4k/256k alternating, uncapped", [Device("h2", "vdb", after_onset(alternating_uncapped))], {}),
    Scenario("healthy: bursty writer under its cap", [Device("h3", "vdb", after_onset(bursty_under_cap))], {}),
    Scenario("healthy: slow-by-nature HDD at a steady rate", [Device("h4", "sda", after_onset(hdd_steady, hdd_normal))], {}),
    Scenario("LVM on md RAID1, cap on one leg (one page)",
             [Device("s8", "vda", after_onset(raid1_write_cap(True))), Device("s8", "vdb", after_onset(raid1_write_cap(False))),
              Device("s8", "md0", after_onset(raid1_write_cap(True))), Device("s8", "dm-0", after_onset(raid1_write_cap(True)))],
             {n.ALERT_DISK_THROTTLED: ("s8/vda", "writes flat at ~300/s")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE},
             topology=[("s8", "md0", "vda"), ("s8", "md0", "vdb"), ("s8", "dm-0", "md0")]),
    Scenario("LVM on md RAID1 under fio, cap on one leg (one page)",
             [Device("s9", "vda", after_onset(raid1_write_cap(True))), Device("s9", "vdb", after_onset(raid1_write_cap(False))),
              Device("s9", "md0", after_onset(raid1_write_cap(True))), Device("s9", "dm-0", after_onset(raid1_write_cap(True)))],
             {n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD: ("s9/vda", "writes flat at ~300/s")}, {n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD: 60},
             fio=[("s9", "dm-0")],
             topology=[("s9", "md0", "vda"), ("s9", "md0", "vdb"), ("s9", "dm-0", "md0")],
             note="fio's target is on dm-0 (the exporter labels its series so); vda, two layers down, carries the load and pages"),
    Scenario("gp3 dual cap 3000 IOPS + 125 MiB/s, 16k/1M every 30 s, qd 32",
             [Device("d1", "nvme1n1", after_onset(dual_cap(3000, 125 * MIB, (16384, MIB), 30, 32), light_fast), hardware=EBS,
                     discards=False)],
             {n.ALERT_DISK_THROTTLED: ("d1/nvme1n1", "read throughput at ~125MiB/s, reads at ~3k/s")},
             {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("gp3 dual cap under fio, 16k/1M every 30 s, qd 32",
             [Device("d2", "vdb", after_onset(dual_cap(3000, 125 * MIB, (16384, MIB), 30, 32), light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD: ("d2/vdb", "at ~3k/s")},
             {n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD: 60}, fio=[("d2", "vdb")]),
    Scenario("dual cap, additive formula (5000 IOPS, 200 MiB/s), 4k/1M every 30 s",
             [Device("d3", "vdb", after_onset(dual_cap(5000, 200 * MIB, (4096, MIB), 30, 64, additive=True), light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("d3/vdb", "reads at ~")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("dual cap on writes (3000 w/s + 125 MiB/s), 16k/1M every 45 s, qd 16",
             [Device("d4", "vdb", after_onset(dual_cap(3000, 125 * MIB, (16384, MIB), 45, 16, direction="w"), light_fast), discards=False)],
             # the first evaluation on 2.42 names the total ("IOPS at ~3k/s, throughput at ~125MiB/s"), the writes' own
             # ceiling a scrape later: both true of a write-only load
             {n.ALERT_DISK_THROTTLED: ("d4/vdb", "throughput at ~125MiB/s")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("bandwidth cap 40 MiB/s, 4k/256k every 20 s, qd 32 (await 6 ms)",
             [Device("d5", "vdb", after_onset(dual_cap(1e9, 40 * MIB, (4096, 262144), 20, 32), light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("d5/vdb", "read throughput flat at ~40MiB/s")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("bandwidth cap 40 MiB/s, 4k/256k every 2 min, qd 128",
             [Device("d6", "vdb", after_onset(dual_cap(1e9, 40 * MIB, (4096, 262144), 120, 128), light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("d6/vdb", "is throttled at its provider's cap: ")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE},
             note="IOPS swing 64x with the phases: the old step-down test held the alert back at every large-request phase"),
    Scenario("EBS volume at its cap named by its model (700 r/s + 300 w/s)",
             [Device("d7", "nvme2n1", after_onset(iops_cap, light_fast), hardware=EBS, discards=False)],
             {n.ALERT_DISK_THROTTLED: ("d7/nvme2n1", "is throttled at its provider's cap: reads flat at ~700/s")},
             {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("local NVMe (Samsung 980 PRO) at its physical maximum, 3 GB/s",
             [Device("h5", "nvme0n1", after_onset(nvme_streaming, light_nvme), hardware=SAMSUNG, discards=False)],
             {n.ALERT_DISK_AT_PHYSICAL_MAXIMUM: ("h5/nvme0n1", "runs at its own physical maximum")}),
    Scenario("healthy: load rises and falls with demand", [Device("h6", "vdb", after_onset(varying_demand), discards=False)], {}),
    Scenario("healthy: nightly sequential backup", [Device("h7", "vdb", after_onset(nightly_backup, light_fast), discards=False)], {}),
    Scenario("bandwidth cap 20 MiB/s on reads, 4k/256k every 10 s, qd 128, after a write-back set the device's normal at 13 ms",
             [Device("d8", "vdb", after_onset(dual_cap(1e9, 20 * MIB, (4096, 262144), 10, 128), writeback_background),
                     discards=False)],
             {n.ALERT_DISK_THROTTLED: ("d8/vdb", "r_await ")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE},
             note="the reads' await (~50 ms) is under 5x the device's mean normal: it is judged against the reads' own"),
]

# ---------------------------------------------------------------------------- device class from the machine (issue 25)
# A device's class comes from the machine's DMI identity and the device's model (docs/device-class.md): NVMe-attached
# remote volumes on each cloud's identity page at their cap; instance storage at its maximum, and an unknown NVMe on
# bare metal, get only the info alert. Added after every other scenario, so that their seeds stay as they are.
GCP = ("fioscope", {"sys_vendor": "Google", "product_name": "Google Compute Engine", "chassis_asset_tag": ""})
AZURE = ("node", {"system_vendor": "Microsoft Corporation", "product_name": "Virtual Machine",
                  "chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77"})  # node_exporter's dmi collector names it
AWS = ("fioscope", {"sys_vendor": "Amazon EC2", "product_name": "m6id.large", "chassis_asset_tag": "Amazon EC2"})
BARE_METAL = ("fioscope", {"sys_vendor": "Supermicro", "product_name": "SYS-1029U-TRT", "chassis_asset_tag": "To be filled by O.E.M."})
CAP_250 = dual_cap(1e9, 250 * MIB, (MIB,), 30, 32)  # a 250 MiB/s volume cap, 1 MiB reads, 32 in flight


def _remote(name: str, host: str, device: str, model: str, machine) -> Scenario:
    return Scenario(name, [Device(host, device, after_onset(CAP_250, light_fast), hardware=("", model), machine=machine,
                                  discards=False)],
                    {n.ALERT_DISK_THROTTLED: (f"{host}/{device}", "is throttled at its provider's cap: reads flat at ~250/s")},
                    {n.ALERT_DISK_THROTTLED: FIRST_PAGE})


def _local(name: str, host: str, device: str, model: str, machine) -> Scenario:
    return Scenario(name, [Device(host, device, after_onset(nvme_streaming, light_nvme), hardware=("", model), machine=machine,
                                  discards=False)],
                    {n.ALERT_DISK_AT_PHYSICAL_MAXIMUM: (f"{host}/{device}", "runs at its own physical maximum")})


DEVICE_CLASS_SCENARIOS = [
    _remote("GCP Persistent Disk over NVMe (nvme_card-pd) capped at 250 MiB/s", "c1", "nvme0n2", "nvme_card-pd", GCP),
    _remote("Azure remote NVMe disk (MSFT NVMe Accelerator v1.0) capped at 250 MiB/s", "c2", "nvme0n2",
            "MSFT NVMe Accelerator v1.0", AZURE),
    _remote("Azure remote NVMe disk, model in upper case, capped at 250 MiB/s", "c3", "nvme0n3", "MSFT NVME ACCELERATOR V1.0", AZURE),
    _remote("EBS volume on an AWS identity capped at 250 MiB/s", "c4", "nvme1n1", "Amazon Elastic Block Store", AWS),
    _remote("unknown NVMe model on a GCP identity capped at 250 MiB/s", "c5", "nvme0n3", "nvme_card-hd", GCP),
    _local("AWS instance store at its physical maximum", "c6", "nvme1n1", "Amazon EC2 NVMe Instance Storage", AWS),
    _local("GCP Local SSD (nvme_card0, C3) at its physical maximum", "c7", "nvme1n1", "nvme_card0", GCP),
    _local("Azure local NVMe (Microsoft NVMe Direct Disk v2) at its physical maximum", "c8", "nvme1n1",
           "Microsoft NVMe Direct Disk v2", AZURE),
    _local("unknown NVMe on bare metal at its physical maximum", "c9", "nvme0n1", "Micron_7450_MTFDKBG3T8TFR", BARE_METAL),
]


# ---------------------------------------------------------------------------- issue 25: one alert per episode, enough
# samples, stalls, paced loads (the rule side of the issue; the device class from DMI identity has its own block)
def write_cap_random_reads(_t, rng):
    """Writes capped at 400/s flat, 64 waiting; reads from an independent client at random between 300 and 2,500/s."""
    r = rng.uniform(300, 2500)
    return Sample(r=r, w=400, rb=r * 4096, wb=400 * 4096, r_await=0.0005, w_await=64 / 400, util=1.0, queue=64 + r * 0.0005)


def cap_with_pauses(t, _rng):
    """A 3000-IOPS cap whose application pauses 15 s every 2 minutes (per second: a pause inside a scrape halves it)."""
    def at(second: int) -> Sample:
        if (second - ONSET) % 120 >= 105:
            return Sample(r=5, rb=5 * 4096, r_await=0.0004, util=0.002, queue=0.002)
        return Sample(r=3000, rb=3000 * 16384, r_await=32 / 3000, util=1.0, queue=32)
    return mixed(t, at)


def noisy_neighbour(_t, rng):
    """No ceiling: a neighbour on the same host slows the disk; reads follow their users (800-1,400/s), busy and slow."""
    r = rng.uniform(800, 1400)
    return Sample(r=r, rb=r * 4096, r_await=0.01, util=0.97, queue=r * 0.01)


def stalled(_t, _rng):
    """Nothing completes: 32 requests in flight, 0.5 reads/s (each waited a minute). The kernel updates busy time only when a
    request starts or completes: util reads 25 % and aqu-sz 2.9, node_disk_io_now 32."""
    return Sample(r=0.5, rb=0.5 * 4096, r_await=60.0, util=0.25, queue=2.9, in_flight=32)


def collapsing(_t, _rng):
    """Throughput collapses to 6 reads/s with 16 in flight, each waiting ~2.7 s (a failing device retrying)."""
    return Sample(r=6, rb=6 * 4096, r_await=16 / 6, util=1.0, queue=16)


def busy_before_collapse(_t, rng):
    r = 800 + rng.uniform(-100, 100)
    return Sample(r=r, rb=r * 4096, r_await=0.001, util=0.5, queue=r * 0.001)


def paced_flat(_t, rng):
    """An application paced at 2,000 reads/s by itself (a token bucket of its own) on a fast NVMe: flat, busy, at its normal."""
    return Sample(r=2000 + rng.uniform(-10, 10), rb=2000 * 4096, r_await=0.0004, util=0.95, queue=0.8)


GAP = (ONSET + 6 * 60, ONSET + 8 * 60)  # a two-minute scrape gap
RESTART = (ONSET + 6 * 60, ONSET + 6 * 60 + 30)  # node_exporter restarted: two scrapes missed
NEW_TARGET = ONSET + 4 * 60  # a target added while its load runs
ISSUE25 = [
    Scenario("write cap 400 w/s, reads at random 300-2,500/s beside it (one alert)",
             [Device("e1", "vdb", after_onset(write_cap_random_reads, light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("e1/vdb", "writes flat at ~400/s")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("cap 3000 IOPS, the application pauses 15 s every 2 min (one alert)",
             [Device("e2", "vdb", after_onset(cap_with_pauses, light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("e2/vdb", "reads flat at ~")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("healthy: light load, 2-minute scrape gap", [Device("g1", "vdb", light, gaps=(GAP,))], {}),
    Scenario("healthy: noisy neighbour (busy, slow, no ceiling), 2-minute scrape gap",
             [Device("g2", "vdb", after_onset(noisy_neighbour), gaps=(GAP,))], {}),
    Scenario("healthy: light load, node_exporter restarted", [Device("g3", "vdb", light, gaps=(RESTART,))], {}),
    Scenario("healthy: noisy neighbour, node_exporter restarted", [Device("g4", "vdb", after_onset(noisy_neighbour), gaps=(RESTART,))], {}),
    Scenario("healthy: noisy neighbour, a new target", [Device("g5", "vdb", after_onset(noisy_neighbour), first_scrape=NEW_TARGET)], {}),
    Scenario("stalled: 32 in flight, 0.5 completions/s (util reads 25 %)",
             [Device("t1", "vdb", after_onset(stalled), discards=False)],
             {n.ALERT_DISK_STALLED: ("t1/vdb", "32 requests in flight")}, {n.ALERT_DISK_STALLED: 90}),
    Scenario("stalling: 800 reads/s collapse to 6/s, await 2.7 s",
             [Device("t2", "vdb", after_onset(collapsing, busy_before_collapse), discards=False)],
             {n.ALERT_DISK_STALLED: ("t2/vdb", "await 2.667s")}, {n.ALERT_DISK_STALLED: 90}),
    Scenario("healthy: paced application at a flat 2,000 reads/s on a fast NVMe",
             [Device("p1", "nvme0n1", after_onset(paced_flat, light_nvme), discards=False)], {}),
    # the backup on more seeds (each device its own): a stream on its own pace, flat by chance now and then
    Scenario("healthy: nightly sequential backup, six more seeds",
             [Device("h8", f"vd{c}", after_onset(nightly_backup, light_fast), discards=False) for c in "bcdefg"], {}),
]


def backup_seeds(count: int) -> list[Scenario]:
    """The nightly backup control on ``count`` seeds, one scenario each (scenarios.py --backup-seeds)."""
    return [Scenario(f"healthy: nightly sequential backup, seed {i}",
                     [Device(f"b{i}", "vdb", after_onset(nightly_backup, light_fast), discards=False)], {}) for i in range(count)]


def _random_rate(sc: Scenario) -> bool:
    """The control's load differs between seeds over its episode (a rate drawn at random, not a fixed shape)."""
    def episode(dev: Device, seed: int) -> list[Sample]:
        rng = random.Random(seed)
        return [dev.model(t, rng) for t in range(0, END, STEP)][ONSET // STEP:]
    return any(episode(dev, 1) != episode(dev, 2) for dev in sc.devices)


def control_seeds(count: int) -> list[Scenario]:
    """Every healthy control whose rate is random, each on ``count`` seeds (scenarios.py --control-seeds): demand noise is
    flat in a window now and then by chance, which must never page. Seed k of a control is a scenario of its own, its
    devices renamed <host>x<k>: every seed gets its own series (seeds are per scenario index) in one promtool run."""
    out = []
    for sc in SCENARIOS:
        if sc.expect or not _random_rate(sc):
            continue
        out += [Scenario(f"{sc.name}, seed {k}", [replace(d, host=f"{d.host}x{k}") for d in sc.devices], {}, note=sc.name)
                for k in range(count)]
    return out


SCENARIOS += ISSUE25
# the device-class block after the issue-25 block: each keeps the seeds it was tuned and observed with
SCENARIOS += DEVICE_CLASS_SCENARIOS


def write_cap_reads_by_minute(t, rng):
    """Writes capped at 400/s flat, 64 waiting; an independent client's reads drawn per minute, not per scrape: about
    two minutes in five 1,800-2,500/s, the others 300-450/s (HllHlllHllHHHlllll from onset), so the device's total IOPS
    and bytes/s fall 3-4x for one to five minutes at a time (as on lab disks, where the reads hold a rate for 15-30 s):
    no step-down of the write cap, and no plateau under the writes' own peak."""
    high = random.Random(f"minute-{t // 60}").random() < 0.4
    r = rng.uniform(1800, 2500) if high else rng.uniform(300, 450)
    return Sample(r=r, w=400, rb=r * 4096, wb=400 * 4096, r_await=0.0005, w_await=64 / 400, util=1.0, queue=64 + r * 0.0005)


# after the device-class block: every earlier scenario keeps its seed (seeds follow the scenario's index)
SCENARIOS += [
    Scenario("write cap 400 w/s, reads fall 4x for minutes at a time beside it (one alert)",
             [Device("e3", "vdb", after_onset(write_cap_reads_by_minute, light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("e3/vdb", "writes flat at ~400/s")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
]


def neighbour_takes_a_share(t, rng):
    """A victim paced at 1,000 reads/s at 30 % util for 6 minutes; a neighbour on its backend then leaves it a steady
    420/s at full util and 19 ms (8 in flight) for 4 minutes; then it is alone again. The plateau is flat, but under the
    rate the victim did minutes before at low util: no ceiling (a ceiling is the most the device did lately, busy or
    not; judged on the busy scrapes only, the plateau was its peak and paged as a cap)."""
    if ONSET + 6 * 60 <= t < ONSET + 10 * 60:
        r = 420 * (1 + rng.uniform(-0.02, 0.02))
        return Sample(r=r, rb=r * 4096, r_await=8 / r, util=0.98, queue=8)
    r = 1000 * (1 + rng.uniform(-0.02, 0.02))
    return Sample(r=r, rb=r * 4096, r_await=0.0003, util=0.3, queue=0.3)


SCENARIOS += [
    Scenario("healthy: a neighbour leaves a 1,000 reads/s victim a flat 420/s for 4 minutes",
             [Device("e4", "vdb", after_onset(neighbour_takes_a_share, light_fast), discards=False)], {}),
]

# last, so that every earlier scenario keeps its seeds: the noisy neighbour after a scrape gap on eight more seeds (each
# device its own). Its rate is random, flat by chance in one window now and then: without the held-at-its-level test
# some of these seeds paged "reads flat" (throttle.held_at_level: false)
SCENARIOS += [
    Scenario("healthy: noisy neighbour after a 2-minute scrape gap, eight more seeds",
             [Device("g6", f"vd{c}", after_onset(noisy_neighbour), gaps=(GAP,)) for c in "bcdefghi"], {}),
]


# ---------------------------------------------------------------------------- issue 53: caps as they move
# Real caps move a few per cent per scrape (token buckets refill in slices; the scrape's own timing adds to it): the
# held-out shapes of issue 53, each a regression of its own (alerts/tests/random_scenarios.py draws the whole space).
# Last, so that every earlier scenario keeps its seeds.
def jittered_cap(cap: float, read_share: float, jitter: float, queue: float, size: int = 4096, drift: float = 0.0):
    """A shared r+w IOPS cap whose delivered IOPS move by U(-jitter, jitter) a scrape, the read share drifting by
    ``drift`` over the episode."""
    def model(t, rng):
        total = cap * (1 + rng.uniform(-jitter, jitter))
        share = min(1.0, max(0.0, read_share + drift * (t - ONSET) / (END - ONSET)))
        return capped(total * share, total * (1 - share), size, queue)
    return model


def lab_shaped_cap(t, rng):
    """The lab's blkio cap: 700 reads/s and 300 writes/s, each +-3 % a scrape, each direction's await 0.3-2.5x the
    queue's share (the queue follows by Little's law)."""
    r, w = 700 * (1 + rng.uniform(-0.03, 0.03)), 300 * (1 + rng.uniform(-0.03, 0.03))
    base = 32 / (r + w)
    ra, wa = base * 10 ** rng.uniform(-0.523, 0.398), base * 10 ** rng.uniform(-0.523, 0.398)
    return Sample(r=r, w=w, rb=r * 4096, wb=w * 4096, r_await=ra, w_await=wa, util=1.0, queue=r * ra + w * wa)


def jittered_pauses(t, rng):
    """cap_with_pauses, its rate +-3 % a scrape."""
    out = cap_with_pauses(t, rng)
    j = 1 + rng.uniform(-0.03, 0.03)
    out.r, out.rb = out.r * j, out.rb * j
    return out


def jittered_bandwidth(t, rng):
    """A 250 MiB/s volume cap, 1 MiB reads, 32 in flight, +-3 % a scrape."""
    out = CAP_250(t, rng)
    j = 1 + rng.uniform(-0.03, 0.03)
    out.r, out.rb, out.r_await = out.r * j, out.rb * j, out.r_await / j
    return out


def drifting_paused_cap(t, rng):
    """A shared r+w cap of 1,700 IOPS of 64 KiB, qd 13, the read share drifting 65 -> 28 % over the episode, the
    application idle 10 s every 233 s (alerts/tests/random_scenarios.py's paused 14): the reads fall under the most
    they did minutes ago while the total holds the cap."""
    def at(second: int) -> Sample:
        if (second - ONSET) % 233 >= 223:
            return Sample(r=5, rb=5 * 4096, r_await=0.0004, util=0.002, queue=0.002)
        share = 0.65 - 0.37 * (second - ONSET) / (END - ONSET)
        return capped(1700 * share, 1700 * (1 - share), 65536, 13.3)
    return mixed(t, at)


# a cap moving up to +-4.5 % a scrape in a fixed pattern: its first four scrapes 8.9 % apart, over the start's band
JITTER_PATTERN = (1.045, 0.96, 1.0, 1.03, 0.955, 1.02, 0.99, 1.04, 0.97, 1.01)


def wide_jitter_cap(t, _rng):
    j = JITTER_PATTERN[max(0, t - ONSET) // STEP % len(JITTER_PATTERN)]
    return capped(1400 * j, 600 * j, 4096, 16)


def token_bucket_then_cap(t, rng):
    """A token bucket's burst: the load's first 8 s at 3x a 2,000 IOPS cap (70/30, qd 16), then the cap, +-2 % a scrape
    (random_scenarios.py's burst family)."""
    cap = jittered_cap(2000, 0.7, 0.02, 16)(t, rng)
    fast = capped(cap.r * 3, cap.w * 3, 4096, 16)
    out = mixed(t, lambda x: fast if x - ONSET < 8 else cap)
    return out


SCENARIOS += [
    *(Scenario(f"IOPS cap 2,000 (70/30, qd 16), {j} % jitter a scrape (one alert)",
               [Device(f"j{j}", "vdb", after_onset(jittered_cap(2000, 0.7, j / 100, 16), light_fast), discards=False)],
               {n.ALERT_DISK_THROTTLED: (f"j{j}/vdb", "is throttled at its provider's cap: ")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE})
      for j in (2, 3, 4, 5)),
    Scenario("shared r+w cap 2,000 IOPS, the read share drifting 90 -> 50 %, 2 % jitter (one alert)",
             [Device("j6", "vdb", after_onset(jittered_cap(2000, 0.9, 0.02, 32, drift=-0.4), light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("j6/vdb", "is throttled at its provider's cap: ")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("cap 3000 IOPS, pauses 15 s every 2 min, 3 % jitter (one alert)",
             [Device("j7", "vdb", after_onset(jittered_pauses, light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("j7/vdb", "reads flat at ~")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("GCP Persistent Disk over NVMe capped at 250 MiB/s, 3 % jitter (one alert)",
             [Device("j8", "nvme0n2", after_onset(jittered_bandwidth, light_fast), hardware=("", "nvme_card-pd"), machine=GCP,
                     discards=False)],
             {n.ALERT_DISK_THROTTLED: ("j8/nvme0n2", "is throttled at its provider's cap: ")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("Azure remote NVMe capped at 250 MiB/s, 3 % jitter (one alert)",
             [Device("j9", "nvme0n2", after_onset(jittered_bandwidth, light_fast), hardware=("", "MSFT NVMe Accelerator v1.0"),
                     machine=AZURE, discards=False)],
             {n.ALERT_DISK_THROTTLED: ("j9/nvme0n2", "is throttled at its provider's cap: ")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    Scenario("lab-shaped cap 700 r/s + 300 w/s, +-3 %, await spread 0.3-2.5x (one alert)",
             [Device("j10", "vdb", after_onset(lab_shaped_cap, light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("j10/vdb", "reads flat at ~7")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    # issue 53's item 5: a host that runs node_exporter only; its own node_disk_info names the device's model
    Scenario("local NVMe (Samsung 980 PRO) at its physical maximum, node_exporter only (node_disk_info)",
             [Device("j11", "nvme0n1", after_onset(nvme_streaming, light_nvme), node_model="Samsung SSD 980 PRO", discards=False)],
             {n.ALERT_DISK_AT_PHYSICAL_MAXIMUM: ("j11/nvme0n1", "runs at its own physical maximum")}),
    Scenario("EBS volume at its cap, node_exporter only (node_disk_info names it)",
             [Device("j12", "nvme1n1", after_onset(iops_cap, light_fast), node_model="Amazon Elastic Block Store", discards=False)],
             {n.ALERT_DISK_THROTTLED: ("j12/nvme1n1", "reads flat at ~700/s")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE}),
    # the draws of random_scenarios.py that missed (issue 53's second round)
    Scenario("shared cap 1,700 IOPS of 64 KiB, the read share drifting 65 -> 28 %, pauses 10 s every 233 s (one alert)",
             [Device("j13", "vdc", after_onset(drifting_paused_cap, light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("j13/vdc", "is throttled at its provider's cap: ")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE},
             note="the reads' ceiling falls under its 5-minute peak: the total's at its own (was 35 % of the episode in one firing)"),
    Scenario("bandwidth cap 62 MiB/s, 4k/16k every 92 s, qd 128, the first window in the 4k phase",
             [Device("j14", "xvdf", after_onset(dual_cap(1e9, 62 * MIB, (4096, 16384), 92, 128, offset=36), light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("j14/xvdf", "is throttled at its provider's cap: ")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE},
             note="an IOPS ceiling named first, its bytes/s held (was 75 s)"),
    Scenario("IOPS cap 2,000 (70/30, qd 16) moving +-4.5 % a scrape, its first four scrapes 8.9 % apart",
             [Device("j15", "vdb", after_onset(wide_jitter_cap, light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("j15/vdb", "is throttled at its provider's cap: ")}, {n.ALERT_DISK_THROTTLED: 90},
             note="six scrapes within the held band (11 %): 90 s, two scrapes over the minute (was 210 s, three windows in)"),
    Scenario("IOPS cap 2,000 (70/30, qd 16) after a token bucket's burst: its first 8 s at 3x, +-2 % a scrape (one alert)",
             [Device("j16", "vdb", after_onset(token_bucket_then_cap, light_fast), discards=False)],
             {n.ALERT_DISK_THROTTLED: ("j16/vdb", "is throttled at its provider's cap: ")}, {n.ALERT_DISK_THROTTLED: FIRST_PAGE + 15},
             note="a minute after the burst's scrape (throttle.short_burst; was 330 s: the burst stood as the recent peak and in "
                  "the held test's range for the whole lookback)"),
]

COUNTERS = [  # node_exporter counter, per-second increment from a Sample
    ("node_disk_reads_completed_total", lambda s: s.r),
    ("node_disk_writes_completed_total", lambda s: s.w),
    ("node_disk_read_bytes_total", lambda s: s.rb),
    ("node_disk_written_bytes_total", lambda s: s.wb),
    ("node_disk_reads_merged_total", lambda s: 0.0),
    ("node_disk_writes_merged_total", lambda s: 0.0),
    ("node_disk_read_time_seconds_total", lambda s: s.r * s.r_await),
    ("node_disk_write_time_seconds_total", lambda s: s.w * s.w_await),
    ("node_disk_io_time_seconds_total", lambda s: s.util),
    ("node_disk_io_time_weighted_seconds_total", lambda s: s.queue),
]
DISCARD_COUNTERS = ["node_disk_discards_completed_total", "node_disk_discarded_sectors_total", "node_disk_discard_time_seconds_total",
                    "node_disk_flush_requests_total", "node_disk_flush_requests_time_seconds_total"]


def series_of(dev: Device, seed: int) -> list[dict]:
    rng = random.Random(seed)
    samples = [dev.model(i * STEP, rng) for i in range(MINUTES * 60 // STEP + 1)]
    labels = f'job="node",instance="{dev.host}:9100",host="{dev.host}",device="{dev.device}"'

    def scraped(values: list[str]) -> str:
        """The values as Prometheus stored them: nothing before the target's first scrape, nothing in a gap (the
        first missed scrape a staleness marker, as a failed scrape writes)."""
        out = []
        for i, v in enumerate(values):
            t = i * STEP
            gap = next((g for g in dev.gaps if g[0] <= t < g[1]), None)
            if t < dev.first_scrape:
                v = "_"
            elif gap:
                v = "stale" if t - STEP < gap[0] else "_"
            out.append(v)
        return " ".join(out)

    out = []
    for name, per_second in COUNTERS:
        total, values = 0.0, []
        for s in samples:
            values.append(f"{total:.12g}")
            total += per_second(s) * STEP
        out.append({"series": f"{name}{{{labels}}}", "values": scraped(values)})
    out.append({"series": f"node_disk_io_now{{{labels}}}",
                "values": scraped([f"{s.queue if s.in_flight is None else s.in_flight:.6g}" for s in samples])})
    if dev.discards:
        out += [{"series": f"{name}{{{labels}}}", "values": scraped(["0"] * len(samples))} for name in DISCARD_COUNTERS]
    return out


def input_series(only: list[Scenario] | None = None) -> list[dict]:
    out: list[dict] = []
    for i, sc in enumerate(SCENARIOS):
        if only is not None and sc not in only:
            continue
        for j, dev in enumerate(sc.devices):
            out += series_of(dev, 1000 * i + j)
        steps = MINUTES * 60 // STEP
        on, off = ONSET // STEP, END // STEP
        for host, device in sc.fio:
            labels = f'job="fioscope",instance="{host}:7963",host="{host}",target="t-{device}",device="{device}",hostname="",jobname="load"'
            out.append({"series": f"fio_run_running{{{labels}}}", "values": f"0x{on - 1} 1x{off - on - 1} 0x{steps - off}"})
        for dev in sc.devices:
            if dev.hardware:
                labels = (f'job="fioscope",instance="{dev.host}:7963",host="{dev.host}",device="{dev.device}",'
                          f'vendor="{dev.hardware[0]}",model="{dev.hardware[1]}"')
                out.append({"series": f"fioscope_disk_model_info{{{labels}}}", "values": f"1x{steps}"})
        for dev in sc.devices:
            if dev.node_model is not None:
                labels = (f'job="node",instance="{dev.host}:9100",host="{dev.host}",device="{dev.device}",major="259",minor="0",'
                          f'model="{dev.node_model}",path="pci-0000:00:04.0-nvme-1",revision="1B2QGXA7",serial="S1",wwn=""')
                out.append({"series": f"node_disk_info{{{labels}}}", "values": f"1x{steps}"})
        for host, (job, identity) in {d.host: d.machine for d in sc.devices if d.machine}.items():
            metric, port = ("fioscope_machine_info", 7963) if job == "fioscope" else ("node_dmi_info", 9100)
            labels = f'job="{job}",instance="{host}:{port}",host="{host}",' + ",".join(f'{k}="{v}"' for k, v in identity.items())
            out.append({"series": f"{metric}{{{labels}}}", "values": f"1x{steps}"})
        for host, device, parent in sc.topology:
            labels = f'job="fioscope",instance="{host}:7963",host="{host}",device="{device}",parent="{parent}"'
            out.append({"series": f"fioscope_disk_parent_info{{{labels}}}", "values": f"1x{steps}"})
    return out


def _labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def duration(seconds: int) -> str:
    return f"{seconds // 60}m{seconds % 60}s" if seconds % 60 else f"{seconds // 60}m"


def seconds(text: str) -> int:
    """duration()'s inverse ("31m15s" -> 1875)."""
    return sum(int(v) * {"h": 3600, "m": 60, "s": 1}[u] for v, u in re.findall(r"(\d+)([hms])", text))


# ---------------------------------------------------------------------------- what promtool says fires
def group_order(rules_dir: Path) -> list[str]:
    """The rule groups in the order the rule files list them. promtool otherwise evaluates a cycle's groups in a
    random order (as Prometheus does not order them either), which moves a first firing by an interval from run to
    run; the pinned order makes the generated test reproducible (the rules that must agree share one group)."""
    return [g["name"] for f in RULE_FILES for g in yaml.safe_load((rules_dir / f).read_text())["groups"]]


def promtool_of(line: str) -> str | None:
    """promtool of Prometheus ``line``: Debian's 2.42 on PATH, 3.x from the cache (FIOSCOPE_PROMETHEUS3_CACHE)."""
    if line == "2":
        return shutil.which("promtool")
    path = Path(os.environ.get("FIOSCOPE_PROMETHEUS3_CACHE", PROMETHEUS3_DIR)) / "promtool"
    return str(path) if os.access(path, os.X_OK) else None


def phased(series: list[dict]) -> tuple[str, list[dict]]:
    """promtool's input interval and ``series`` (values one per STEP) scraped PHASE seconds after each evaluation: at
    a 1 s interval, each value PHASE seconds into its step (unchanged at PHASE 0)."""
    if not PHASE:
        return f"{STEP}s", series

    def values(text: str) -> str:
        samples: list[str] = []
        for token in text.split():
            value, _, repeats = token.partition("x")
            samples += [value] * (int(repeats) + 1 if repeats else 1)
        return f"_x{PHASE} " + f" _x{STEP - 1} ".join(samples)
    return "1s", [{**one, "values": values(one["values"])} for one in series]


def add_phase_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--phase", type=int, default=0, metavar="SECONDS",
                        help="each scrape this many seconds after an evaluation (under --step; only with --check or --matrix): "
                             "a live host's scrapes keep an offset of their own to the rule groups")


def set_phase(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """PHASE from --phase: 1 to STEP - 1 seconds, only where the result is judged or printed (never written)."""
    global PHASE
    if args.phase and not (0 < args.phase < STEP and (args.check or args.matrix)):
        parser.error(f"--phase {args.phase}: between 1 and {STEP - 1} s, with --check or --matrix")
    PHASE = args.phase


# devices a promtool run observes: promtool's engine loads at most 10,000 samples a
# query, and the held band's subqueries load a few points an evaluation of their lookback for every saturated device
OBSERVE_DEVICES = 24


def observe(rules_dir: Path, promtool: str, watched: list[str] = WATCHED) -> dict[tuple[str, str], list[tuple[int, dict]]]:
    """(alert, "host/device") -> [(seconds, annotations)] for every evaluation from the onset on, of the ``watched``
    alerts (a device's each): the scenarios in chunks of OBSERVE_DEVICES devices, a promtool run each, side by side."""
    size, chunks, chunk = OBSERVE_DEVICES, [], []
    for scenario in SCENARIOS:
        if chunk and sum(len(s.devices) for s in chunk) + len(scenario.devices) > size:
            chunks.append(chunk)
            chunk = []
        chunk.append(scenario)
    chunks += [chunk] if chunk else []
    fired: dict[tuple[str, str], list[tuple[int, dict]]] = {}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for part in pool.map(lambda c: _observe_chunk(rules_dir, promtool, c, watched), chunks):
            fired.update(part)
    return fired


def _observe_chunk(rules_dir: Path, promtool: str, chunk: list[Scenario],
                   watched: list[str]) -> dict[tuple[str, str], list[tuple[int, dict]]]:
    times = list(range(ONSET - 60, END + RESOLVE + 60 + 1, STEP))
    interval, series = phased(input_series(only=chunk))
    test = {"rule_files": [str(rules_dir / f) for f in RULE_FILES],
            "evaluation_interval": f"{STEP}s", "group_eval_order": group_order(rules_dir),
            "tests": [{"interval": interval, "input_series": series,
                       "alert_rule_test": [{"eval_time": duration(t), "alertname": a, "exp_alerts": []} for t in times for a in watched]}]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "observe.test.yaml"
        path.write_text(yaml.safe_dump(test, width=1 << 20))
        proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    # a rule that fails to evaluate (promtool's sample limit, a bad query) records nothing: its alerts would read as
    # silent or resolved, so it stops the observation
    errors = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if ", err: " in line]
    if errors:
        raise RuntimeError(f"{promtool}: {len(errors)} rule evaluations failed, the first: {errors[0]}")
    fired: dict[tuple[str, str], list[tuple[int, dict]]] = {}
    # promtool: "alertname: X, time: 31m15s, \n exp:..., \n got:[\n0:\n  Labels:{...}\n  Annotations:{...}\n]"
    for block in re.split(r"\n\s*alertname: ", proc.stdout + proc.stderr)[1:]:
        head = re.match(r"(\w+), time: (\S+?),", block)
        if not head:
            continue
        name, when = head.group(1), head.group(2)
        at = seconds(when)
        got = block.split("got:", 1)[1]
        for labels, notes in re.findall(r"Labels:\{(.*?)\}\s*Annotations:\{(.*?)\},?\n", got, re.S):
            lab = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels))
            ann = {k: bytes(v, "utf-8").decode("unicode_escape") for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', notes)}
            fired.setdefault((name, f"{lab['host']}/{lab['device']}"), []).append((at, ann))
    return fired


@dataclass
class Row:
    """One line of the detection matrix."""

    scenario: str
    alert: str
    device: str
    expected: bool
    seconds: int | None  # after the onset; None: never fired
    description: str
    share: float | None = None  # of the episode after the first firing, the share of evaluations firing
    firings: int = 0  # separate firings (each resolve and re-fire is a notification)
    resolved_after: int | None = None  # seconds after the episode's end the alert stopped firing


def episode_stats(times: list[int], episode: tuple[int, int]) -> tuple[float | None, int, int | None]:
    """(share of the episode firing from the first firing on, separate firings, seconds after its end the last firing)."""
    if not times:
        return None, 0, None
    firings = 1 + sum(1 for a, b in zip(times, times[1:]) if b - a > STEP)
    span = [t for t in range(times[0], episode[1], STEP)]
    share = sum(1 for t in span if t in set(times)) / len(span) if span else 1.0
    return share, firings, max(times) - episode[1]


def target(sc: Scenario, alert: str, default: int) -> int:
    """Seconds after onset by which ``alert`` must fire on ``sc`` at this STEP's scrapes (``default`` if no target).
    FioscopeDiskThrottled decides on the any-workload window, which holds window_scrapes scrapes: its target scales
    with the scrape interval; the other alerts' windows (fio's, the stall's, the queue's) are fixed spans. Scraped
    PHASE seconds after the evaluations, the load's first scrape is seen one evaluation later: one STEP more."""
    if alert not in sc.within:
        return default
    late = STEP if PHASE else 0
    if alert == n.ALERT_DISK_THROTTLED:
        return sc.within[alert] * PAGE_TARGET[STEP] // PAGE_TARGET[15] + late
    return sc.within[alert] + late


def names(hits: list[tuple[int, dict]], phrase: str) -> bool:
    """Whether the alert's first description names ``phrase``. At 15 s scrapes the window spans a minute, both
    phases of the alternating shapes; at 5 s it holds 20 s, one phase: the first page names that phase's ceiling,
    and the ceiling is judged on the descriptions of the minute the 15 s window would have seen."""
    span = 0 if STEP == 15 else PAGE_TARGET[15]
    return any(phrase in ann.get("description", "") for t, ann in hits if t <= hits[0][0] + span)


def rules_at(step: int, out: Path) -> Path:
    """The rule files generated for a stack scraping and evaluating every ``step`` seconds, under ``out``."""
    overrides = [f"stack.scrape_interval={step}s", f"stack.evaluation_interval={step}s"]
    for rel, text in prometheus.render(load_settings(overrides)).items():
        if Path(rel).name in RULE_FILES:
            (out / Path(rel).name).write_text(text)
    return out


def judge(fired) -> tuple[list[Row], list[str]]:
    """Per scenario and alert: fired?, seconds after onset, description; and every contradiction of the expectations."""
    rows: list[Row] = []
    problems: list[str] = []
    for sc in SCENARIOS:
        for alert in WATCHED:
            for key in sorted({f"{d.host}/{d.device}" for d in sc.devices}):
                hits = fired.get((alert, key), [])
                want_key, phrase = sc.expect.get(alert, ("", ""))
                row = Row(sc.name, alert, key, want_key == key, hits[0][0] - sc.episode[0] if hits else None,
                          hits[0][1].get("description", "") if hits else "")
                row.share, row.firings, row.resolved_after = episode_stats([t for t, _ in hits], sc.episode)
                if hits or row.expected:
                    rows.append(row)
                if row.expected and row.seconds is None:
                    problems.append(f"{sc.name}: {alert} on {key} never fired")
                elif row.expected and not names(hits, phrase):
                    problems.append(f"{sc.name}: {alert} on {key}: {phrase!r} not in {row.description!r}")
                elif row.expected and row.seconds is not None and row.seconds > target(sc, alert, row.seconds):
                    problems.append(f"{sc.name}: {alert} on {key} fired after {row.seconds} s (target {target(sc, alert, 0)} s)")
                elif row.expected and (row.firings > 1 or (row.share or 0) < 0.95):
                    problems.append(f"{sc.name}: {alert} on {key} fired {row.firings} times, {100 * (row.share or 0):.0f} % of the episode"
                                    " after its first firing (one alert, >= 95 %)")
                elif row.expected and (row.resolved_after or 0) > RESOLVE:
                    problems.append(f"{sc.name}: {alert} on {key} still firing {row.resolved_after} s after the episode")
                elif hits and not row.expected and alert in THROTTLE_ALERTS + INFO_ALERTS:
                    problems.append(f"{sc.name}: {alert} on {key} fired ({row.description[:120]})")
                elif hits and key in {f"{h}/{d}" for h, d, _ in sc.topology}:  # a layer above the cap: one page, the lowest
                    problems.append(f"{sc.name}: {alert} on {key}, above the capped disk, fired")
    return rows, problems


def firing_at(fired, alert: str, t: int, keys: set[str]) -> list[dict]:
    """Every alert ``alert`` promtool saw firing at ``t`` on ``keys``, as promtool test expects them."""
    out = []
    for (name, key), hits in sorted(fired.items()):
        for seconds, ann in hits:
            if name == alert and seconds == t and key in keys:
                host, device = key.split("/")
                critical = alert.endswith("FioLoad") or alert == n.ALERT_DISK_STALLED
                severity = "critical" if critical else "info" if alert in INFO_ALERTS else "warning"
                labels = {"severity": severity, "instance": f"{host}:9100", "job": "node", "host": host, "device": device}
                out.append({"exp_labels": labels, "exp_annotations": ann})
    return out


def _settled(fired, alert: str, keys: set[str], start: int) -> int | None:
    """The first evaluation from ``start`` on at which every ``alert`` on ``keys`` reads the same one interval
    either side (a description quoting a phase's await changes with the phase; promtool may shift by one interval)."""
    def seen(t: int) -> dict:
        return {k: ann for (a, k), hits in fired.items() if a == alert and k in keys for s, ann in hits if s == t}
    for t in range(start, END - STEP, STEP):
        if seen(t) and seen(t - STEP) == seen(t) == seen(t + STEP):
            return t
    return None


def build_test(fired, rules_dir: Path) -> dict:
    """One test over every scenario's series, as observe ran them: promtool evaluates every rule at every step of a
    test, so one test costs the scenarios' minutes once, not once per scenario. The group order is pinned, so the
    evaluations are promtool's own of the observation: each check lists every alert of its name firing at its time,
    on any scenario's device."""
    everywhere = {f"{d.host}/{d.device}" for sc in SCENARIOS for d in sc.devices}
    firsts = {k: hits[0][0] for k, hits in fired.items()}
    checks: dict[tuple[int, str], dict] = {}

    def check(t: int, alert: str) -> None:
        checks[(t, alert)] = {"eval_time": duration(t), "alertname": alert, "exp_alerts": firing_at(fired, alert, t, everywhere)}

    for sc in SCENARIOS:
        keys = {f"{d.host}/{d.device}" for d in sc.devices}
        settled: list[int] = []
        for alert in list(sc.expect) + [n.ALERT_DISK_LATENCY_ABOVE_SLA]:
            mine = [f for (a, k), f in firsts.items() if a == alert and k in keys]
            if not mine:
                continue
            if alert in sc.expect:
                check(min(mine) - STEP, alert)  # not yet, one evaluation before
            at = _settled(fired, alert, keys, max(mine) + 6 * STEP)  # firing, naming the ceiling (the 1m averages settled)
            if at is not None:
                check(at, alert)
                settled.append(at)
        for alert in THROTTLE_ALERTS + INFO_ALERTS:  # and every other throttling alert silent on these devices: one cap, one page
            if settled and alert not in sc.expect:
                check(max(settled), alert)
    # the healthy controls: silent for every throttling alert (exactly the alerts the other devices fire), every 2 minutes
    # from the onset to the last check (the whole run is judged, and refused on any page, when this file is generated)
    last = max([t for t, _ in checks] + [seconds(VALUE_AT)])
    for t in range(ONSET, last + 1, 120):
        for alert in THROTTLE_ALERTS + INFO_ALERTS:
            check(t, alert)
    controls = "; ".join(sc.name for sc in SCENARIOS if not sc.expect)
    return {"rule_files": [f"../{f}" for f in RULE_FILES], "evaluation_interval": f"{STEP}s",
            "group_eval_order": group_order(rules_dir),
            "tests": [{"name": f"every scenario: each cap fires once, naming its ceiling; silent: {controls}; values",
                       "interval": f"{STEP}s", "input_series": input_series(),
                       "alert_rule_test": [checks[k] for k in sorted(checks)], "promql_expr_test": VALUE_CHECKS}]}


# values of the rules the alerts build on, ten minutes after the onset; s2's node_exporter has no discard/flush series
# (kernel < 4.18)
VALUE_AT, BEFORE_ONSET = duration(ONSET + 600), duration(ONSET - 120)
_S2 = {"job": "node", "instance": "s2:9100", "host": "s2", "device": "vdb"}
_H1 = {"job": "node", "instance": "h1:9100", "host": "h1", "device": "nvme0n1"}
VALUE_CHECKS = [
    # rounded: Prometheus 3 extrapolates a rate in another order (999.9999999999998)
    {"expr": 'round(fioscope:disk_iops{host="s2"}, 0.001)', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": _labels(_S2), "value": 1000}]},
    {"expr": f'round({n.DISK_BYTES_PER_SECOND}{{host="s2"}})', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": _labels(_S2), "value": 4096000}]},
    {"expr": 'round(fioscope:disk_await_seconds{host="s2"}, 0.0001)', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": _labels(_S2), "value": 0.256}]},
    {"expr": 'fioscope:disk_iops:irate{host="s2"}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": f"fioscope:disk_iops:irate{_labels(_S2)}", "value": 1000}]},
    *[{"expr": f'{name}{{host="s2"}}', "eval_time": VALUE_AT, "exp_samples": [{"labels": f"{name}{_labels(_S2)}", "value": v}]}
      for name, v in ((n.DISK_READ_IOPS_IRATE, 700),
                      (n.DISK_WRITE_IOPS_IRATE, 300), (n.DISK_READ_BYTES_PER_SECOND_IRATE, 2867200),
                      (n.DISK_WRITE_BYTES_PER_SECOND_IRATE, 1228800), (n.DISK_BYTES_PER_SECOND_IRATE, 4096000),
                      (n.DISK_UTIL_RATIO_IRATE, 1))],
    {"expr": 'fioscope:disk_ceiling{host="s2",window="long"}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_CEILING + _labels({**_S2, "window": "long", "dimension": d, "unit": "/s", "shape": "flat"}),
                      "value": v}
                     for d, v in (("reads", 700), ("writes", 300))]},
    # ... two ceilings of the device, counted once per evaluation (a ceiling held over evaluations, whichever it names)
    {"expr": f'{n.DISK_CEILING_COUNT}{{host="s2",window="long"}}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_CEILING_COUNT + _labels({**_S2, "window": "long"}), "value": 2}]},
    # s2's envelope: one request size, reads flat at their window's peaks
    *[{"expr": f'{name}{{host="s2",ddir="read",window="long"}}', "eval_time": VALUE_AT,
       "exp_samples": [{"labels": f"{name}{_labels({**_S2, 'ddir': 'read', 'window': 'long'})}", "value": v}]}
      for name, v in ((n.DISK_ENVELOPE_IOPS_RATIO, 1), (n.DISK_ENVELOPE_BYTES_RATIO, 1))],
    {"expr": 'fioscope:disk_envelope_ratio{host="s2",ddir="read",window="long"}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_ENVELOPE_RATIO + _labels({**_S2, "ddir": "read", "window": "long"}), "value": 1}]},
    {"expr": 'fioscope:disk_request_size_bytes:irate{host="s2",ddir="read"}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": f"fioscope:disk_request_size_bytes:irate{_labels({**_S2, 'ddir': 'read'})}", "value": 4096}]},
    # d1 (EBS by its model) is a provider's volume, h5 (a Samsung 980 PRO) local hardware; of the device-class
    # scenarios, the instance storage and the bare-metal NVMe (the ones expected to reach their physical maximum)
    {"expr": n.DISK_PHYSICAL_DEVICE, "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_PHYSICAL_DEVICE + _labels({"host": "h5", "device": "nvme0n1"}), "value": 1}]
     + [{"labels": n.DISK_PHYSICAL_DEVICE + _labels({"host": d.host, "device": d.device}), "value": 1}
        for sc in DEVICE_CLASS_SCENARIOS if n.ALERT_DISK_AT_PHYSICAL_MAXIMUM in sc.expect for d in sc.devices]
     + [{"labels": n.DISK_PHYSICAL_DEVICE + _labels({"host": "j11", "device": "nvme0n1"}), "value": 1}]},
    # s2's windows: all their scrapes and the one half a scrape before (counted over the window and half a scrape, as the
    # newest may be in flight live), util saturated in each (every envelope of the window requires it); its busy
    # per-scrape rates, what the envelope's windows read
    {"expr": f'{n.DISK_SATURATED_WINDOW_SCRAPES}{{host="s2"}}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_SATURATED_WINDOW_SCRAPES + _labels({**_S2, "window": w}), "value": v + 1}
                     for w, v in (("long", int(_DEFAULTS["windowSamples"])), ("short", int(_DEFAULTS["fioWindowSamples"])))]},
    *[{"expr": f'{name}{{host="s2"}}', "eval_time": VALUE_AT, "exp_samples": [{"labels": f"{name}{_labels(_S2)}", "value": v}]}
      for name, v in ((n.DISK_BUSY_READ_IOPS_IRATE, 700), (n.DISK_BUSY_IOPS_IRATE, 1000),
                      (n.DISK_BUSY_BYTES_PER_SECOND_IRATE, 4096000))],
    # s2's reads hold their envelope over the minute: the ceilings read this await
    {"expr": 'round(fioscope:disk_at_envelope_await_seconds{host="s2",ddir="read",window="long"}, 0.0001)', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": _labels({**_S2, "ddir": "read", "window": "long"}), "value": 0.256}]},
    # ... and its reads' rate flat there: the mean the ceiling names (its bytes/s too; no such mean for a direction not held)
    {"expr": f'{n.DISK_HELD_FLAT_MEAN}{{host="s2",ddir="read",window="long"}}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_HELD_FLAT_MEAN + _labels({**_S2, "ddir": "read", "window": "long", "rate": r}), "value": v}
                     for r, v in (("bytes", 2867200), ("iops", 700))]},
    {"expr": f'{n.DISK_HELD_FLAT_MEAN}{{host="h1"}}', "eval_time": VALUE_AT, "exp_samples": []},
    # s2's saturated scrapes' IOPS, each direction's, and their spread over the lookback: every scrape at its cap (1: none)
    {"expr": f'{n.DISK_SATURATED_IOPS_IRATE}{{host="s2"}}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_SATURATED_IOPS_IRATE + _labels({**_S2, "ddir": d}), "value": v}
                     for d, v in (("all", 1000), ("read", 700), ("write", 300))]},
    {"expr": f'{n.DISK_IOPS_SPREAD_RATIO}{{host="s2"}}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_IOPS_SPREAD_RATIO + _labels({**_S2, "ddir": d}), "value": 1} for d in ("all", "read", "write")]},
    # ... their median over the lookback, where the band is; the band starts at the lookback's first scrape (the cap
    # began ten minutes ago: 5 minutes back, or a scrape less where a range leaves its start out), nothing before it;
    # their extremes and quantiles from there
    {"expr": f'{n.DISK_SATURATED_MEDIAN}{{host="s2"}}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_SATURATED_MEDIAN + _labels({**_S2, "ddir": d, "rate": r}), "value": v * size}
                     for d, v in (("all", 1000), ("read", 700), ("write", 300)) for r, size in (("bytes", 4096), ("iops", 1))]},
    {"expr": f'count({n.DISK_HELD_BAND_START}{{host="s2"}} >= {ONSET + 600 - 300} <= {ONSET + 600 - 285})',
     "eval_time": VALUE_AT, "exp_samples": [{"labels": "{}", "value": 6}]},
    {"expr": f'round({n.DISK_HELD_BAND}{{host="s2",ddir="read",rate="iops",stat=~"max|min|upper|lower|before"}}, 0.001)',
     "eval_time": VALUE_AT,
     "exp_samples": [{"labels": _labels({**_S2, "ddir": "read", "rate": "iops", "stat": st}), "value": 700}
                     for st in ("lower", "max", "min", "upper")]},
    # j16 a minute and a half after its onset: the token bucket's burst (8 s at 3x) is the one scrape before the band,
    # and no level it held: the recent peak is the cap's (2,000 +-2 %), not the burst's
    {"expr": f'{n.DISK_HELD_BAND}{{host="j16",ddir="all",rate="iops",stat="before"}}', "eval_time": duration(ONSET + 90),
     "exp_samples": [{"labels": n.DISK_HELD_BAND + _labels({**_S2, "host": "j16", "instance": "j16:9100", "ddir": "all", "rate": "iops",
                                                            "stat": "before"}), "value": 1}]},
    {"expr": f'count({n.DISK_RECENT_PEAK}{{host="j16",ddir="all",rate="iops"}} < 2100)', "eval_time": duration(ONSET + 90),
     "exp_samples": [{"labels": "{}", "value": 1}]},
    {"expr": f'count({n.DISK_HELD_LEVEL}{{host="j16",ddir="all",rate="iops"}} > 1900 < 2100)', "eval_time": duration(ONSET + 90),
     "exp_samples": [{"labels": "{}", "value": 1}]},
    # ... and their bytes/s (4 KiB requests), within their band too
    {"expr": f'{n.DISK_SATURATED_BYTES_PER_SECOND_IRATE}{{host="s2"}}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_SATURATED_BYTES_PER_SECOND_IRATE + _labels({**_S2, "ddir": d}), "value": v * 4096}
                     for d, v in (("all", 1000), ("read", 700), ("write", 300))]},
    {"expr": f'{n.DISK_BYTES_SPREAD_RATIO}{{host="s2"}}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_BYTES_SPREAD_RATIO + _labels({**_S2, "ddir": d}), "value": 1} for d in ("all", "read", "write")]},
    # s2 capped: saturated (util 1, a deep queue) and slow in each direction
    {"expr": 'round(fioscope:disk_slow_saturated_await_seconds{host="s2"}, 0.0001)', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": _labels({**_S2, "ddir": d}), "value": v} for d, v in (("read", 0.256), ("write", 0.256), ("all", 0.256))]},
    # h1, a healthy NVMe: saturated with a deep queue, but at its normal await
    {"expr": 'fioscope:disk_slow_saturated_await_seconds{host="h1"}', "eval_time": VALUE_AT, "exp_samples": []},
    # s7's queue of 64 at 80 ms, ten times its normal, with no more IOPS: long and costly; h1's deep queue at its normal: not
    {"expr": f'round({n.DISK_COSTLY_QUEUE_SIZE}{{host=~"s7|h1"}}, 0.01)', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": _labels({**_S2, "host": "s7", "instance": "s7:9100"}), "value": 64}]},
    # ... what they read: the saturated devices' queues and awaits (s2; h1, which only reads), none of a light device (h3)
    {"expr": f'round({n.DISK_SATURATED_QUEUE_SIZE}{{host=~"s2|h1|h3"}}, 0.01)', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": _labels(labels), "value": v} for labels, v in ((_S2, 256), (_H1, 50))]},
    {"expr": f'round({n.DISK_SATURATED_AWAIT_SECONDS}{{host=~"s2|h1|h3"}}, 0.0001)', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": _labels({**labels, "ddir": d}), "value": v}
                     for labels, awaits in ((_S2, (0.256, 0.256, 0.256)), (_H1, (0.0012, 0, 0.0012)))
                     for d, v in zip(("read", "write", "all"), awaits)]},
    # the layers above s8's capped leg: md0 (on vda) and dm-0 (on md0) know a device below them is at a ceiling
    {"expr": 'fioscope:disk_ceiling_below{host="s8",window="long"}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_CEILING_BELOW + _labels({"host": "s8", "device": d, "window": "long"}), "value": 300}
                     for d in ("dm-0", "md0")]},
    # s9's fio job runs on dm-0 (LVM on md0 on vda+vdb): the load reaches every layer below
    {"expr": 'fioscope:disk_fio_load{host="s9"}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_FIO_LOAD + _labels({"host": "s9", "device": d}), "value": 1}
                     for d in ("dm-0", "md0", "vda", "vdb")]},
    # s5 five minutes after its burst: the rate is a tenth of its peak, in the reads (its only direction) and in all
    {"expr": 'round(fioscope:disk_step_down_ratio{host="s5"}, 0.001)', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": _labels({**_S2, "host": "s5", "instance": "s5:9100", "ddir": d}), "value": 10}
                     for d in ("all", "read")]},
    # ... whose peaks are the burst's in the two-minute maxima of the lookback: these hold the cap's rates by now (reads only)
    *({"expr": f'round({name}{{host="s5"}}, 0.001)', "eval_time": VALUE_AT,
       "exp_samples": [{"labels": _labels({**_S2, "host": "s5", "instance": "s5:9100"}), "value": v}]}
      for name, v in ((n.DISK_READ_IOPS_MAX2M, 300), (n.DISK_WRITE_IOPS_MAX2M, 0), (n.DISK_IOPS_MAX2M, 300),
                      (n.DISK_READ_BYTES_PER_SECOND_MAX2M, 300 * 4096), (n.DISK_WRITE_BYTES_PER_SECOND_MAX2M, 0),
                      (n.DISK_BYTES_PER_SECOND_MAX2M, 300 * 4096))),
    # s2's peaks over the lookback, which its capped windows are at: the reads' and the total's IOPS and bytes/s
    {"expr": f'{n.DISK_RECENT_PEAK}{{host="s2",ddir=~"read|all"}}', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_RECENT_PEAK + _labels({**_S2, "ddir": d, "rate": r}), "value": v}
                     for d, r, v in (("read", "iops", 700), ("read", "bytes", 2867200), ("all", "iops", 1000), ("all", "bytes", 4096000))]},
    # e3 three minutes into its reads' five low minutes: the reads and the total stepped down, the capped writes not
    {"expr": 'count by (ddir) (fioscope:disk_step_down_ratio{host="e3"})', "eval_time": duration(28 * 60),
     "exp_samples": [{"labels": _labels({"ddir": d}), "value": 1} for d in ("all", "read")]},
    # t1 stalled: 32 requests in flight on average, 0.5 completions a second; e1's writes capped, not stalled
    {"expr": 'fioscope:disk_stalled_in_flight', "eval_time": VALUE_AT,
     "exp_samples": [{"labels": n.DISK_STALLED_IN_FLIGHT + _labels({**_S2, "host": h, "instance": f"{h}:9100"}), "value": v}
                     for h, v in (("t1", 32), ("t2", 16))]},
    {"expr": 'round(1e6 * fioscope:disk_await_unsaturated_seconds{host="s2"})', "eval_time": BEFORE_ONSET,
     "exp_samples": [{"labels": _labels(_S2), "value": 1000}]},
]


def named(description: str) -> str:
    """The ceilings an alert's description names: the text between the first ': ' and the declared limits."""
    return description.split(": ", 1)[-1].split(" (", 1)[0] if description else ""


LINE_NAMES = {"2": "2.42", "3": "3.x"}


def markdown(rows_of: dict[str, list[Row]]) -> str:
    """The matrix for docs/runbook.md: every scenario, every alert that fired on it (or that it should have), on each
    Prometheus line: fired?, seconds from onset to the first alert, share of the episode firing after it, separate firings."""
    lines_ = list(rows_of)
    both = " / ".join(LINE_NAMES[line] for line in lines_)
    out = [f"| scenario | alert | device | fired ({both}) | s to first alert | share of episode firing | firings | ceilings named "
           "| false positive |",
           "|---|---|---|---|---|---|---|---|---|"]
    for sc in SCENARIOS:
        keys = sorted({(r.alert, r.device) for rows in rows_of.values() for r in rows
                       if r.scenario == sc.name and r.alert != n.ALERT_DISK_LATENCY_ABOVE_SLA}, key=lambda k: (k[1], k[0]))
        if not keys:
            out.append(f"| {sc.name} | (none) | | {' / '.join('no' for _ in lines_)} | | | | | no |")
        for alert, device in keys:
            per = [next((r for r in rows_of[line] if (r.scenario, r.alert, r.device) == (sc.name, alert, device)), None) for line in lines_]
            seen = next(r for r in per if r is not None)
            ceiling = named(seen.description) if "burst" not in alert.lower() else seen.description.split(": ", 2)[-1].split(" (", 1)[0]
            if alert == n.ALERT_DISK_STALLED:
                ceiling = seen.description.split(": ", 1)[-1].split(" (", 1)[0]
            fp = "no" if seen.expected or alert not in THROTTLE_ALERTS else "**yes**"

            def each(f: Callable[[Row], str], per: list[Row | None] = per) -> str:
                return " / ".join(f(r) if r is not None and r.seconds is not None else "" for r in per)
            fired = " / ".join("yes" if r is not None and r.seconds is not None else "**no**" for r in per)
            out.append(f"| {sc.name} | {alert} | {device} | {fired} | {each(lambda r: str(r.seconds))} | "
                       f"{each(lambda r: f'{100 * (r.share or 0):.0f} %')} | {each(lambda r: str(r.firings))} | {ceiling} | {fp} |")
    return "\n".join(out)


def seed_report(rows_of: dict[str, list[Row]], count: int) -> str:
    """Per random control and Prometheus line: on how many of ``count`` seeds a disk alert fired, and the first such page."""
    out = []
    for control in dict.fromkeys(sc.note for sc in SCENARIOS):
        seeds = {sc.name for sc in SCENARIOS if sc.note == control}
        for line, rows in rows_of.items():
            pages = [r for r in rows if r.scenario in seeds and not r.expected and r.alert in THROTTLE_ALERTS + INFO_ALERTS]
            paged = {r.scenario for r in pages}
            first = f" (e.g. {pages[0].scenario.rsplit(', ', 1)[-1]}: {pages[0].alert}, {named(pages[0].description)})" if pages else ""
            out.append(f"Prometheus {LINE_NAMES[line]}: {control}: paged on {len(paged)} of {count} seeds{first}")
    return "\n".join(out)


HEADER = ("# Generated by alerts/tests/scenarios.py (the scenarios and why they must or must not page are there);\n"
          "# regenerate with `python3 alerts/tests/scenarios.py` after changing the rules.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the rules contradict an expectation")
    parser.add_argument("--matrix", action="store_true", help="print the detection matrix")
    parser.add_argument("--markdown", action="store_true", help="print the detection matrix as a Markdown table (docs/runbook.md)")
    parser.add_argument("--rules", type=Path, default=HERE.parent, help="directory with the generated rule files")
    parser.add_argument("--line", action="append", choices=sorted(OUT),
                        help="Prometheus line(s) to observe (default: 2.42 and, where built, 3.x)")
    parser.add_argument("--backup-seeds", type=int, metavar="N",
                        help="observe only the nightly backup control, on N seeds, and report how many page")
    parser.add_argument("--control-seeds", type=int, metavar="N",
                        help="observe only the healthy controls with a random rate, each on N seeds, and report per control "
                             "how many seeds page")
    parser.add_argument("--step", type=int, choices=sorted(PAGE_TARGET), default=15,
                        help="seconds per scrape and evaluation; other than 15, the rules are generated for it (unless --rules) "
                             "and nothing is written (the committed tests are at 15 s)")
    add_phase_argument(parser)
    args = parser.parse_args(argv)
    global STEP
    STEP = args.step
    set_phase(parser, args)
    if STEP != 15 and not (args.matrix or args.markdown or args.check or args.backup_seeds or args.control_seeds):
        parser.error(f"--step {STEP}: only with --check, --matrix, --markdown or the seed reports (the committed tests are at 15 s)")
    generated = None  # the rules for another scrape interval, removed when main returns
    if STEP != 15 and args.rules == HERE.parent:
        generated = tempfile.TemporaryDirectory(prefix="fioscope-rules-")
        args.rules = rules_at(STEP, Path(generated.name))
    for flag, value in (("--backup-seeds", args.backup_seeds), ("--control-seeds", args.control_seeds)):
        if value is not None and value < 1:
            parser.error(f"{flag}: {value}: needs at least one seed")
    if args.backup_seeds:
        SCENARIOS[:] = backup_seeds(args.backup_seeds)
    elif args.control_seeds:
        SCENARIOS[:] = control_seeds(args.control_seeds)
    lines_ = args.line or [line for line in sorted(OUT) if line == "2" or promtool_of(line)]
    if not args.line and len(lines_) < len(OUT):
        print(f"scenarios.py: Prometheus 3 is not built ({PROMETHEUS3_DIR}/promtool): observing 2.42 only", file=sys.stderr)
    rows_of: dict[str, list[Row]] = {}
    fired_of = {}
    problems: list[str] = []
    for line in lines_:
        promtool = promtool_of(line)
        if not promtool:
            raise SystemExit(f"scenarios.py: promtool of Prometheus {LINE_NAMES[line]} is not installed")
        fired_of[line] = observe(args.rules, promtool)
        rows_of[line], found = judge(fired_of[line])
        problems += [f"Prometheus {LINE_NAMES[line]}: {p}" for p in found]
    if args.matrix:
        for line, rows in rows_of.items():
            print(f"Prometheus {LINE_NAMES[line]}")
            print(f"{'scenario':58} {'alert':36} {'device':12} fired  s-after-onset share firings  description")
            for r in rows:
                secs = "-" if r.seconds is None else str(r.seconds)
                flag = ("yes" if r.seconds is not None else "NO ") + ("" if r.expected or r.alert not in THROTTLE_ALERTS else " (FP)")
                share = "" if r.share is None else f"{100 * r.share:.0f}%"
                print(f"{r.scenario[:58]:58} {r.alert:36} {r.device:12} {flag:6} {secs:>13} {share:>5} {r.firings:>7}  "
                      f"{r.description[:150]}")
            for sc in SCENARIOS:
                if not any(r.scenario == sc.name for r in rows):
                    print(f"{sc.name[:58]:58} {'(nothing fires)':36}")
    if args.markdown:
        print(markdown(rows_of))
    for p in problems if not args.control_seeds else []:  # (there, the report below counts them per control)
        print(f"scenarios.py: {p}", file=sys.stderr)
    if args.backup_seeds:
        for line in lines_:
            paged = {r.device for r in rows_of[line] if not r.expected and r.alert in THROTTLE_ALERTS}
            print(f"Prometheus {LINE_NAMES[line]}: the backup control paged on {len(paged)} of {args.backup_seeds} seeds")
        return 1 if problems else 0
    if args.control_seeds:
        print(seed_report(rows_of, args.control_seeds))
        return 1 if problems else 0
    if problems:
        return 1
    if args.check:  # the expectations hold; the committed tests themselves run with the other promtool tests
        missing = [str(OUT[line]) for line in lines_ if not OUT[line].exists()]
        if missing:
            print(f"scenarios.py: {', '.join(missing)} missing (run python3 alerts/tests/scenarios.py)", file=sys.stderr)
            return 1
        return 0
    if not (args.matrix or args.markdown):
        for line in lines_:
            OUT[line].write_text(HEADER + yaml.safe_dump(build_test(fired_of[line], args.rules), sort_keys=False, width=160))
    return 0


if __name__ == "__main__":
    sys.exit(main())
