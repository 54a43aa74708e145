#!/usr/bin/env python3
"""Slow-disk scenarios for the cause records (fioscope:disk_slow_cause) and the cause alerts, as a promtool test.

Each scenario is a device modelled per 15 s scrape with scenarios.py's machinery (its Sample models become
node_exporter counters), plus what the causes read beside the disk counters: requests in flight
(node_disk_io_now), the host's CPU modes and pressure (PSI), and a fio job's series. One promtool run shows which
cause each device gets at every evaluation; from that:

    python3 alerts/tests/cause_scenarios.py            # write alerts/tests/cause.test.yaml (2.42) and cause.prometheus3.test.yaml (3.x)
    python3 alerts/tests/cause_scenarios.py --check    # exit 1 if the rules contradict a scenario's expectation
    python3 alerts/tests/cause_scenarios.py --matrix   # print scenario, cause, seconds to naming, alerts

Generation refuses a result that contradicts an expectation: a cause not named within two minutes of its episode's
onset, another cause ever named for the device, any cause on a healthy control, or a throttling alert on a device that
no cap holds (a neighbour, a stall or a wait above the disk is never paged as a cap).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scenarios as sc  # noqa: E402  (alerts/tests is no package: the scenario machinery is imported by path)
from fioscope_mixin import names as n  # noqa: E402
from scenarios import MIB, ONSET, STEP, Device, Sample, duration, light, light_fast, light_nvme, seconds  # noqa: E402

HERE = Path(__file__).resolve().parent
# one generated test per Prometheus line (3.x range selectors are left-open: evaluations differ by one step)
OUT = {"2": HERE / "cause.test.yaml", "3": HERE / "cause.prometheus3.test.yaml"}
MINUTES = sc.MINUTES
END = sc.END
NAMED_WITHIN = 120  # seconds after the episode's onset
CAUSE_EXPR = n.DISK_SLOW_CAUSE


@dataclass
class Host:
    """The host's CPU per scrape interval: shares of one CPU's time (user, system, steal; idle is the rest) and the
    PSI "some" shares of CPU and I/O. Absent: the host exports neither (an old kernel, no pressure collector)."""

    cpu: Callable[[int], tuple[float, float, float]]
    cpu_pressure: Callable[[int], float]
    io_pressure: Callable[[int], float]


@dataclass
class Fio:
    """A fio job on the device from ``start`` to ``stop``: its median read clat and its write bandwidth per scrape."""

    start: int
    stop: int
    clat: Callable[[int], float] | None = None
    write_bw: Callable[[int], float] | None = None


@dataclass
class Case:
    name: str
    device: Device
    cause: str | None  # None: a healthy control, never a cause
    onset: int = ONSET  # the slow episode's onset (the naming deadline counts from here)
    in_flight: Callable[[int, Sample], float] | None = None  # node_disk_io_now; default: the queue, rounded
    host: Host | None = None
    fio: Fio | None = None
    alert: tuple[str, str] | None = None  # (alert, severity) that must fire for it
    phrase: str = ""  # ... whose description contains this
    pages: tuple[str, ...] = ()  # the throttling alerts that page for it (none other may fire on the device)
    note: str = ""
    extra: dict = field(default_factory=dict)


def window(load, start: int, stop: int, before=light, after=None):
    """``load`` from ``start`` to ``stop``, ``before`` until then and ``after`` (default ``before``) after."""
    def model(t: int, rng: random.Random) -> Sample:
        if start <= t < stop:
            return load(t, rng)
        return (after or before)(t, rng) if t >= stop else before(t, rng)
    return model


# ---------------------------------------------------------------------------- the slow episodes
def closed_loop(iops: float, await_s: float, util: float, size: int = 4096, jitter: float = 0.0):
    """An application keeping the same queue: IOPS = queue / await (Little's law); ``jitter`` swings IOPS per scrape."""
    queue = iops * await_s

    def model(_t: int, rng: random.Random) -> Sample:
        r = iops * (1 + rng.uniform(-jitter, jitter))
        return Sample(r=r, rb=r * size, r_await=queue / r, util=util, queue=queue)
    return model


NEIGHBOUR_BEFORE = closed_loop(4000, 0.0005, 0.35, jitter=0.05)
# the held-out shape: own demand steady (the same 2 in flight), IOPS from 4,000 to ~1,500 +- 30 %, await ~3x
NEIGHBOUR = closed_loop(1500, 2 / 1500, 0.9, jitter=0.3)
PACED_BEFORE = closed_loop(1500, 0.00009, 0.13, jitter=0.02)
# the lab's victim: a paced 1,500 reads/s beside a neighbour saturating the backing device: 636 r/s at 6.2 ms
PACED_VICTIM = closed_loop(636, 0.0062, 0.95, jitter=0.3)
FIO_VICTIM_BEFORE = closed_loop(750, 0.0003, 0.2, jitter=0.02)
FIO_VICTIM = closed_loop(420, 16 / 420, 0.97, jitter=0.2)


def at_cap_level_normal(_t, rng):
    # 700 reads/s + 300 writes/s at the device's normal latency: the demand the cap will meet later (a capture's SLA load)
    j = 1 + rng.uniform(-0.02, 0.02)
    return Sample(r=700 * j, w=300 * j, rb=700 * j * 4096, wb=300 * j * 4096, r_await=0.0002, w_await=0.0002, util=0.14, queue=0.2)


def stalled(_t, _rng):
    # a cap of 2 IOPS under a queue of 32: one completion every 2 s, each after 16 s; util and aqu-sz under-report it
    return Sample(r=0.5, rb=0.5 * 4096, r_await=16.0, util=0.25, queue=2.9)


def ssd_fast_writes(_t, rng):
    # a local SSD absorbing 128 KiB writes in its cache at 1.2 GB/s (not saturated: the cache keeps up)
    wb = 1.2e9 * (1 + rng.uniform(-0.03, 0.03))
    w = wb / 131072
    return Sample(w=w, wb=wb, w_await=8 / w, util=0.8, queue=8)


def ssd_cliff(_t, rng):
    # ... its write cache full: 250 MB/s, every request waits on the flash
    wb = 2.5e8 * (1 + rng.uniform(-0.03, 0.03))
    w = wb / 131072
    return Sample(w=w, wb=wb, w_await=32 / w, util=1.0, queue=32)


def capped_writeback(_t, _rng):
    # the page cache's write-back onto a volume capped at 24 MiB/s (256 KiB writes): flat from the start
    return Sample(w=96, wb=96 * 262144, w_await=32 / 96, util=1.0, queue=32)


def fio_on_fast_device(_t, rng):
    # the device does 1,000 reads/s at 0.3 ms: it is not the problem
    r = 1000 * (1 + rng.uniform(-0.05, 0.05))
    return Sample(r=r, rb=r * 4096, r_await=0.0003, util=0.3, queue=0.3)


def idle_light(_t, rng):
    # a light load at its normal 1 ms (the CPU-starved host's disk)
    return light(_t, rng)


def io_bound_reader(_t, rng):
    # a single-stream reader at the device's normal latency: I/O pressure near 100 % on a healthy disk
    r = 900 * (1 + rng.uniform(-0.05, 0.05))
    return Sample(r=r, rb=r * 4096, r_await=0.001, util=0.9, queue=0.9)


def idle(_t, _rng):
    return Sample()


def paced_fast(_t, rng):
    # a paced application at a flat 2,000 reads/s on a fast device, at its normal
    return Sample(r=2000, rb=2000 * 4096, r_await=0.0004, util=0.4, queue=0.8)


def steady_cpu(share_user: float, pressure: float, steal: float = 0.0) -> Host:
    return Host(cpu=lambda t: (share_user, 0.05, steal), cpu_pressure=lambda t: pressure, io_pressure=lambda t: 0.05)


def from_onset(during: Host, before: Host, at: int = ONSET) -> Host:
    def pick(attr):
        return lambda t: getattr(during if t >= at else before, attr)(t)
    return Host(cpu=pick("cpu"), cpu_pressure=pick("cpu_pressure"), io_pressure=pick("io_pressure"))


QUIET = steady_cpu(0.1, 0.02)
CLIFF_AT = ONSET + 180
EPISODE_END = ONSET + 10 * 60
C = n.ALERT_DISK_CAUSE_NOISY_NEIGHBOUR
CASES = [
    Case("noisy neighbour: own queue steady, IOPS 4,000 -> ~1,500 +-30 %, await ~3x, no ceiling",
         Device("c1", "vdb", window(NEIGHBOUR, ONSET, EPISODE_END, NEIGHBOUR_BEFORE), discards=False), "noisy_neighbour",
         alert=(C, "warning"), phrase="x the device's normal of "),
    Case("noisy neighbour (lab shape): a paced 1,500 reads/s victim at 6.2 ms and 636 r/s",
         Device("c2", "vdb", window(PACED_VICTIM, ONSET, EPISODE_END, PACED_BEFORE), discards=False), "noisy_neighbour",
         alert=(C, "warning"), phrase="IO/s it carried on average at its normal latency"),
    Case("stall: 32 in flight, 0.5 completions/s, util 25 %", Device("c3", "vdb", window(stalled, ONSET, EPISODE_END)), "stall",
         in_flight=lambda t, s: 32 if ONSET <= t < EPISODE_END else round(s.queue),
         alert=(n.ALERT_DISK_CAUSE_STALL, "info"), phrase="32 requests in flight"),
    Case("CPU starved (steal 40 %, CPU pressure 70 %) while the disk idles",
         Device("c4", "vdb", idle_light), "wait_above_disk", host=from_onset(steady_cpu(0.55, 0.7, 0.4), QUIET),
         alert=(n.ALERT_DISK_CAUSE_WAIT_ABOVE_DISK, "warning"), phrase="steal 40%"),
    Case("fio's clat 25 ms on a device answering in 0.3 ms",
         Device("c5", "vdb", window(fio_on_fast_device, ONSET, EPISODE_END)), "wait_above_disk",
         fio=Fio(ONSET, EPISODE_END, clat=lambda t: 0.025), alert=(n.ALERT_DISK_CAUSE_WAIT_ABOVE_DISK, "warning"),
         phrase="fio's median completion latency 25ms"),
    Case("write-back cliff on a local SSD: 1.2 GB/s, then 250 MB/s once its cache fills",
         Device("c6", "nvme0n1", window(window(ssd_cliff, CLIFF_AT, EPISODE_END, ssd_fast_writes), ONSET, EPISODE_END, light_nvme),
                hardware=sc.SAMSUNG, discards=False), "writeback_cliff", onset=CLIFF_AT,
         alert=(n.ALERT_DISK_CAUSE_WRITEBACK_CLIFF, "warning"), phrase="a write-back cliff"),
    Case("write-back cliff through the page cache onto a capped volume: fio writes 96 MiB/s, then 24 MiB/s",
         Device("c7", "vdb", window(capped_writeback, ONSET, EPISODE_END), discards=False), "writeback_cliff",
         fio=Fio(ONSET, EPISODE_END + 30, write_bw=lambda t: 96 * MIB if t < ONSET + 30 else 24 * MIB),
         alert=(n.ALERT_DISK_CAUSE_WRITEBACK_CLIFF, "info"), phrase="; the fio job writes at 24MiB/s (its peak in the last 10m: 96MiB/s)",
         pages=(n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD,),
         note="the cap pages (FioscopeDiskThrottledUnderFioLoad), fio's cliff too: the cause alert is info"),
    Case("provider cap: 700 r/s + 300 w/s", Device("c8", "vdb", window(sc.iops_cap, ONSET, END)), "provider_cap",
         alert=(n.ALERT_DISK_CAUSE_PROVIDER_CAP, "info"), phrase="the provider's cap on the volume", pages=(n.ALERT_DISK_THROTTLED,)),
    Case("provider cap: burst credits spent (3,000 IOPS for 5 min, then 300)",
         Device("c9", "vdb", window(sc.burst_then_cap, ONSET, END)), "provider_cap", onset=ONSET + 300,
         alert=(n.ALERT_DISK_CAUSE_PROVIDER_CAP, "info"), phrase="burst credits exhausted", pages=(n.ALERT_DISK_THROTTLED_AFTER_BURST,)),
    Case("device maximum: a local NVMe streaming 3 GB/s", Device("c10", "nvme0n1", window(sc.nvme_streaming, ONSET, END, light_nvme),
                                                                 hardware=sc.SAMSUNG, discards=False), "device_max",
         alert=(n.ALERT_DISK_CAUSE_DEVICE_MAX, "info"), phrase="the device's own maximum"),
    # the healthy controls: none may get a cause
    Case("healthy: NVMe saturated, deep queue (aqu-sz 50, 1.25 ms)",
         Device("k1", "nvme0n1", window(sc.healthy_deep_queue, ONSET, END)), None),
    Case("healthy: 4k/256k alternating, uncapped", Device("k2", "vdb", window(sc.alternating_uncapped, ONSET, END)), None),
    Case("healthy: bursty writer under its cap", Device("k3", "vdb", window(sc.bursty_under_cap, ONSET, END)), None),
    Case("healthy: slow-by-nature HDD at a steady rate", Device("k4", "sda", window(sc.hdd_steady, ONSET, END, sc.hdd_normal)), None),
    Case("healthy: load rises and falls with demand", Device("k5", "vdb", window(sc.varying_demand, ONSET, END), discards=False), None),
    Case("healthy: nightly sequential backup (await 22x the normal, at the backup's own demand)",
         Device("k6", "vdb", window(sc.nightly_backup, ONSET, END, light_fast), discards=False), None),
    Case("healthy: busy CPU (user 90 %, CPU pressure 20 %, no steal), light disk", Device("k7", "vdb", idle_light), None,
         host=from_onset(steady_cpu(0.9, 0.2), QUIET)),
    Case("healthy: I/O-bound single reader at the device's normal (I/O pressure 95 %)",
         Device("k8", "vdb", window(io_bound_reader, ONSET, END)), None,
         host=from_onset(Host(cpu=lambda t: (0.2, 0.1, 0.0), cpu_pressure=lambda t: 0.05, io_pressure=lambda t: 0.95), QUIET)),
    Case("healthy: a paced application at a flat 2,000 reads/s on a fast device",
         Device("k9", "vdb", window(paced_fast, ONSET, END, light_fast), discards=False), None),
    Case("healthy: fio job at the device's own latency", Device("k10", "vdb", window(fio_on_fast_device, ONSET, END)), None,
         fio=Fio(ONSET, END, clat=lambda t: 0.0004)),
    # last, so that the cases above keep their seeds: the capture's overload on a capped volume. The device carried
    # 700 + 300 IO/s at its normal latency, then twice the demand meets a cap at that very level: the same IOPS, await
    # 128 ms. Unchanged load, slower: a neighbour's signature until the flat ceiling is held, but a ceiling at the most
    # the device did lately is the cap's, never a neighbour's.
    Case("provider cap met by twice the demand: 700 r/s + 300 w/s at the normal, then the same at the cap",
         Device("c11", "vdb", window(sc.iops_cap, ONSET, END, at_cap_level_normal)), "provider_cap",
         alert=(n.ALERT_DISK_CAUSE_PROVIDER_CAP, "info"), phrase="the provider's cap on the volume", pages=(n.ALERT_DISK_THROTTLED,)),
    # the lab's neighbour under a capture: the victim is a fio job (fio's two-scrape window decides at 15 s), paced at
    # 750 reads/s, then a bursty neighbour leaves it a drifting 420 +- 20 % at its queue of 16. Two scrapes within 5 %
    # happen by chance: a "ceiling" under the rate the victim did before, never a cap (the provider's cap was named
    # for 15-30 s stretches, which split the neighbour's episode)
    Case("noisy neighbour under a fio job: a paced 750 reads/s victim, then 420 r/s +-20 % at its queue of 16",
         Device("c12", "vdb", window(FIO_VICTIM, ONSET, EPISODE_END, FIO_VICTIM_BEFORE), discards=False), "noisy_neighbour",
         fio=Fio(ONSET - 15 * 60, END, clat=lambda t: 0.0003 + (16 / 420 - 0.0003) * min(1, max(0, t - ONSET) / 60) * (t < EPISODE_END)),
         alert=(C, "warning"), phrase="no ceiling"),
    # the lab's write-back cliff stopped as a person stops it: the writer ends 3 minutes in, the page cache's backlog
    # drains at the cap 2 minutes more (the lab's: ~110 s). The drain is the cliff's episode, not a provider's cap of its
    # own (the cause alert stays info through it: fio's write-cliff alert paged for the cliff), and one page: the cap's
    # under fio's load, bridged through the drain (FioscopeDiskThrottled, silent within disk_keep_firing_for of fio's
    # load, paged a second time once the drain outlasted the long window)
    Case("write-back cliff whose writer stops before the cache drains: fio 96 -> 24 MiB/s, stopped; the drain at the cap",
         Device("c13", "vdb", window(capped_writeback, ONSET, ONSET + 5 * 60), discards=False), "writeback_cliff",
         fio=Fio(ONSET, ONSET + 3 * 60, write_bw=lambda t: 96 * MIB if t < ONSET + 30 else 24 * MIB),
         alert=(n.ALERT_DISK_CAUSE_WRITEBACK_CLIFF, "info"), phrase="a write-back cliff",
         pages=(n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD,)),
    # a load starting from idle on a host whose CPU a batch job keeps busy (CPU pressure 70 % from 5 minutes before): the
    # load's first scrapes, diluted in the rate window by the idle ones before, read as a light load at the normal
    # latency, which on a starved CPU is a wait above the disk. The lab's capped disks, starting beside CI's slow suite,
    # were named so for an evaluation; the light load must hold throughout the window
    Case("healthy: a paced 2,000 reads/s starting from idle while a batch job starves the CPU (CPU pressure 70 %)",
         Device("k11", "vdb", window(paced_fast, ONSET, END, window(idle, ONSET - 600, ONSET, light_fast)), discards=False), None,
         host=from_onset(steady_cpu(0.9, 0.7), QUIET, at=ONSET - 300)),
]


# ---------------------------------------------------------------------------- input series
def samples_of(case: Case, seed: int) -> list[Sample]:
    """The device's samples as scenarios.series_of draws them (same model, same seed)."""
    rng = random.Random(seed)
    return [case.device.model(i * STEP, rng) for i in range(MINUTES * 60 // STEP + 1)]


def _counter(per_second: list[float]) -> str:
    total, values = 0.0, []
    for v in per_second:
        values.append(f"{total:.12g}")
        total += v * STEP
    return " ".join(values)


def case_series(case: Case, seed: int) -> list[dict]:
    dev = case.device
    # the case's own in-flight count replaces the queue's that series_of draws (a series given twice is one series
    # to promtool, the last; two to other engines' test tools)
    out = [s for s in sc.series_of(dev, seed) if not s["series"].startswith("node_disk_io_now{")]
    samples = samples_of(case, seed)
    node = f'job="node",instance="{dev.host}:9100",host="{dev.host}"'
    in_flight = case.in_flight or (lambda _t, s: round(s.queue))
    out.append({"series": f'node_disk_io_now{{{node},device="{dev.device}"}}',
                "values": " ".join(f"{in_flight(i * STEP, s):g}" for i, s in enumerate(samples))})
    times = [i * STEP for i in range(len(samples))]
    if dev.hardware:
        out.append({"series": (f'fioscope_disk_model_info{{job="fioscope",instance="{dev.host}:7963",host="{dev.host}",'
                               f'device="{dev.device}",vendor="{dev.hardware[0]}",model="{dev.hardware[1]}"}}'),
                    "values": f"1x{len(samples) - 1}"})
    if case.host:
        h = case.host
        shares = [h.cpu(t) for t in times]
        for mode, share in (("user", [s[0] for s in shares]), ("system", [s[1] for s in shares]), ("steal", [s[2] for s in shares]),
                            ("idle", [max(0.0, 1 - sum(s)) for s in shares]), ("iowait", [0.0] * len(shares))):
            out.append({"series": f'node_cpu_seconds_total{{{node},cpu="0",mode="{mode}"}}', "values": _counter(share)})
        out.append({"series": f"node_pressure_cpu_waiting_seconds_total{{{node}}}", "values": _counter([h.cpu_pressure(t) for t in times])})
        out.append({"series": f"node_pressure_io_waiting_seconds_total{{{node}}}", "values": _counter([h.io_pressure(t) for t in times])})
    if case.fio:
        f = case.fio
        labels = (f'job="fioscope",instance="{dev.host}:7963",host="{dev.host}",target="t-{dev.device}",device="{dev.device}",'
                  f'hostname="",jobname="load"')
        running = [f.start <= t < f.stop for t in times]
        out.append({"series": f"fio_run_running{{{labels}}}", "values": " ".join("1" if r else "0" for r in running)})
        if f.clat:
            out.append({"series": f'fio_run_latency_seconds{{{labels},ddir="read",stage="clat",quantile="0.5"}}',
                        "values": " ".join(f"{f.clat(t):g}" if r else "_" for t, r in zip(times, running))})
        if f.write_bw:
            out.append({"series": f'fio_bandwidth_bytes_per_second{{{labels},ddir="write"}}',
                        "values": " ".join(f"{f.write_bw(t):g}" if r else "_" for t, r in zip(times, running))})
    return out


def input_series() -> list[dict]:
    return [s for i, case in enumerate(CASES) for s in case_series(case, 5000 + i)]


# ---------------------------------------------------------------------------- what promtool says
Seen = dict[int, dict[str, str]]  # time -> {"host/device": cause}


def _labels_of(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', text))


# the cause alerts, and the throttling alerts: a neighbour, a stall or a wait above the disk is never paged as a cap
OBSERVED_ALERTS = (*n.CAUSE_ALERTS, *n.THROTTLING_ALERTS)


def observe(rules_dir: Path, line: str = "2") -> tuple[Seen, dict[tuple[str, str, int], list[dict]]]:
    """Every evaluation's causes per device, and every cause or throttling alert firing: (alert, "host/device", t) ->
    [labels, annotations]."""
    interval, series = sc.phased(input_series())
    return observe_causes(rules_dir, line, "cause_scenarios.py", CAUSE_EXPR, OBSERVED_ALERTS, interval, series,
                          list(range(ONSET - 120, END + 1, STEP)), STEP)


# hosts a promtool run observes: promtool's engine loads at most 10,000 samples a query, and the held band's
# subqueries load a few points an evaluation of their lookback for every saturated device
OBSERVE_HOSTS = 16


def observe_causes(rules_dir: Path, line: str, who: str, cause_expr: str, alert_names: tuple[str, ...] | list[str],
                   interval: str, series: list[dict], times: list[int], step: int) -> tuple[Seen, dict[tuple[str, str, int], list[dict]]]:
    """The observing promtool runs of ``series`` (sampled every ``interval``) against the rules in ``rules_dir``, the
    hosts in chunks of OBSERVE_HOSTS side by side: the cause ``cause_expr`` names per "host/device" at each of
    ``times``, and every firing of ``alert_names`` as (alert, "host/device" ("host/" for a host's alert), t) ->
    [labels, annotations]. ``who`` names the caller in errors."""
    promtool = sc.promtool_of(line)
    if not promtool:
        raise SystemExit(f"{who}: promtool of Prometheus {sc.LINE_NAMES[line]} is not installed")
    host_of = {id(one): m.group(1) if (m := re.search(r'host="([^"]*)"', one["series"])) else None for one in series}
    hosts = sorted({h for h in host_of.values() if h is not None})
    chunks = [set(hosts[i:i + OBSERVE_HOSTS]) for i in range(0, len(hosts), OBSERVE_HOSTS)] or [set()]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        texts = list(pool.map(lambda mine: _promtool_observing(
            promtool, who, rules_dir, cause_expr, alert_names, interval, [one for one in series if host_of[id(one)] in mine | {None}],
            times, step), chunks))
    seen: Seen = {t: {} for t in times}
    alerts: dict[tuple[str, str, int], list[dict]] = {}
    for text in texts:
        _read_observation(text, seen, alerts)
    return seen, alerts


def _promtool_observing(promtool: str, who: str, rules_dir: Path, cause_expr: str, alert_names: tuple[str, ...] | list[str],
                        interval: str, series: list[dict], times: list[int], step: int) -> str:
    test = {"rule_files": [str(rules_dir / f) for f in sc.RULE_FILES], "evaluation_interval": f"{step}s",
            "group_eval_order": sc.group_order(rules_dir),
            "tests": [{"interval": interval, "input_series": series,
                       "promql_expr_test": [{"expr": cause_expr, "eval_time": duration(t), "exp_samples": []} for t in times],
                       "alert_rule_test": [{"eval_time": duration(t), "alertname": a, "exp_alerts": []}
                                           for t in times for a in alert_names]}]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "observe.test.yaml"
        path.write_text(yaml.safe_dump(test, width=1 << 20))
        proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    if "FAILED" not in text and "SUCCESS" not in text:
        raise SystemExit(f"{who}: promtool failed: {text[-2000:]}")
    # a rule that fails to evaluate (promtool's sample limit, a bad query) records nothing: a cause or alert would read
    # as never named
    errors = [one.strip() for one in text.splitlines() if ", err: " in one]
    if errors:
        raise SystemExit(f"{who}: {len(errors)} rule evaluations failed, the first: {errors[0]}")
    return text


def _read_observation(text: str, seen: Seen, alerts: dict[tuple[str, str, int], list[dict]]) -> None:
    for when, got in re.findall(r'expr: "[^"]*", time: (\S+?),\s*exp:.*?\n\s*got: (.*?)\n', text):
        for labels in re.findall(r"\{(.*?)\} [-+.0-9Ee]+", got):
            lab = _labels_of(labels)
            seen[seconds(when)][f"{lab['host']}/{lab['device']}"] = lab["cause"]
    for block in re.split(r"\n\s*alertname: ", text)[1:]:
        head = re.match(r"(\w+), time: (\S+?),", block)
        if not head:
            continue
        got = block.split("got:", 1)[1]
        for labels, notes in re.findall(r"Labels:\{(.*?)\}\s*Annotations:\{(.*?)\},?\n", got, re.S):
            lab = _labels_of(labels)
            lab.pop("alertname", None)
            ann = {k: bytes(v, "utf-8").decode("unicode_escape") for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', notes)}
            key = (head.group(1), f"{lab['host']}/{lab.get('device', '')}", seconds(head.group(2)))
            alerts.setdefault(key, []).append({"exp_labels": lab, "exp_annotations": ann})


@dataclass
class Row:
    case: Case
    named_after: int | None  # seconds after the episode's onset; None: never
    others: set[str]
    alert_after: int | None
    description: str


def judge(seen: Seen, alerts) -> tuple[list[Row], list[str]]:
    rows, problems = [], []
    for case in CASES:
        key = f"{case.device.host}/{case.device.device}"
        causes = {t: c[key] for t, c in seen.items() if key in c}
        named = sorted(t for t, c in causes.items() if c == case.cause)
        others = {c for c in causes.values() if c != case.cause}
        mine = sorted((t, a) for (name, k, t), a in alerts.items() if k == key and case.alert and name == case.alert[0]
                      and any(x["exp_labels"]["severity"] == case.alert[1] for x in a))
        row = Row(case, named[0] - case.onset if named else None, others, mine[0][0] - case.onset if mine else None,
                  mine[0][1][0]["exp_annotations"]["description"] if mine else "")
        rows.append(row)
        if case.cause and row.named_after is None:
            problems.append(f"{case.name}: {case.cause} never named")
        # scraped sc.PHASE after the evaluations, the episode's first scrape is seen one evaluation later
        elif case.cause and row.named_after is not None and not 0 <= row.named_after <= NAMED_WITHIN + (STEP if sc.PHASE else 0):
            problems.append(f"{case.name}: {case.cause} named {row.named_after} s after the onset (target 0-{NAMED_WITHIN} s)")
        if others:
            expected = f"expected only {case.cause}" if case.cause else "a healthy control"
            problems.append(f"{case.name}: named {sorted(others)} ({expected})")
        if case.alert and row.alert_after is None:
            problems.append(f"{case.name}: {case.alert[0]} ({case.alert[1]}) never fired")
        elif case.alert and case.phrase not in row.description:
            problems.append(f"{case.name}: {case.phrase!r} not in {row.description!r}")
        fired = {name for (name, k, _t) in alerts if k == key}
        for name in sorted(fired - {case.alert[0] if case.alert else "", *case.pages}):
            problems.append(f"{case.name}: {name} fired")
        for name in sorted(set(case.pages) - fired):
            problems.append(f"{case.name}: {name} never paged")
    return rows, problems


def build_test(seen: Seen, alerts, rules_dir: Path) -> dict:
    """The causes of every device every minute and at each episode's naming (and one evaluation before); each cause
    and throttling alert where it first fires (every device it fires on then) and where it is silent."""
    times = set(range(ONSET - 60, END + 1, 60))
    for case in CASES:
        key = f"{case.device.host}/{case.device.device}"
        named = sorted(t for t, c in seen.items() if c.get(key) == case.cause) if case.cause else []
        if named:
            times |= {named[0] - STEP, named[0]}

    def samples(t: int) -> list[dict]:
        return [{"labels": CAUSE_EXPR + sc._labels({"job": "node", "instance": f"{k.split('/')[0]}:9100", "host": k.split("/")[0],
                                                     "device": k.split("/")[1], "cause": c}), "value": 1}
                for k, c in sorted(seen[t].items())]

    expr_tests = [{"expr": CAUSE_EXPR, "eval_time": duration(t), "exp_samples": samples(t)} for t in sorted(times)]
    alert_tests = []
    for name in OBSERVED_ALERTS:
        fired = sorted({t for (a, _k, t) in alerts if a == name})
        if not fired:
            continue
        # settled: a minute after the first firing, every device it fires on (a description quoting a 1m average settles)
        for t in (fired[0] - STEP, min(fired[0] + 4 * STEP, max(fired)), ONSET - 60):
            exp = [x for (a, _k, at), xs in sorted(alerts.items()) if a == name and at == t for x in xs]
            alert_tests.append({"eval_time": duration(t), "alertname": name, "exp_alerts": exp})
    return {"rule_files": [f"../{f}" for f in sc.RULE_FILES], "evaluation_interval": f"{STEP}s",
            "group_eval_order": sc.group_order(rules_dir),
            "tests": [{"name": "every slow episode named by exactly one cause within 2 minutes; no cause on the healthy controls",
                       "interval": f"{STEP}s", "input_series": input_series(), "promql_expr_test": expr_tests,
                       "alert_rule_test": alert_tests, **VALUES}]}


# the evidence records' values, five minutes into the episodes (each on the device that shows it)
AT = duration(ONSET + 300)
VALUES = {"promql_expr_test_extra": [
    # the capped device: 256 ms against its normal of 1 ms
    {"expr": f'round({n.DISK_SLOW_AWAIT_RATIO}{{host="c8"}})', "eval_time": AT,
     "exp_samples": [{"labels": '{device="vdb", host="c8", instance="c8:9100", job="node"}', "value": 256}]},
    # ... at its ceiling, recorded once for the provider-cap and device-max causes; the noisy neighbour's victim at none
    {"expr": f'{n.DISK_CAUSE_CEILING}{{host=~"c8|c1"}}', "eval_time": AT,
     "exp_samples": [{"labels": f'{n.DISK_CAUSE_CEILING}{{device="vdb", host="c8", instance="c8:9100", job="node"}}', "value": 1}]},
    # the paced victim's demand at normal latency: 1,500 reads/s of 4 KiB
    {"expr": f'round({n.DISK_NORMAL_IOPS}{{host="c2"}}, 100)', "eval_time": duration(ONSET - 60),
     "exp_samples": [{"labels": '{device="vdb", host="c2", instance="c2:9100", job="node"}', "value": 1500}]},
    {"expr": f'round({n.DISK_NORMAL_BYTES_PER_SECOND}{{host="c2"}} / 4096, 100)', "eval_time": duration(ONSET - 60),
     "exp_samples": [{"labels": '{device="vdb", host="c2", instance="c2:9100", job="node"}', "value": 1500}]},
    # ... and their means over the hour, once a minute: what the noisy-neighbour test compares the load with (the
    # victim's first loaded minutes paced lower: 1,407 on Prometheus 2, 1,415 on 3, whose windows leave out their start)
    {"expr": f'round({n.DISK_NORMAL_IOPS_MEAN}{{host="c2"}}, 50)', "eval_time": duration(ONSET - 60),
     "exp_samples": [{"labels": '{device="vdb", host="c2", instance="c2:9100", job="node"}', "value": 1400}]},
    {"expr": f'round({n.DISK_NORMAL_BYTES_PER_SECOND_MEAN}{{host="c2"}} / 4096, 50)', "eval_time": duration(ONSET - 60),
     "exp_samples": [{"labels": '{device="vdb", host="c2", instance="c2:9100", job="node"}', "value": 1400}]},
    # the devices the noisy neighbour's demand test holds for, before the slow episode and the precedence: its three victims
    {"expr": f'count by (cause, host) ({n.DISK_CAUSE_CONDITION})', "eval_time": AT,
     "exp_samples": [{"labels": f'{{cause="noisy_neighbour", host="{host}"}}', "value": 1} for host in ("c1", "c12", "c2")]},
    {"expr": f'{n.DISK_STALL_IN_FLIGHT}{{host="c3"}}', "eval_time": AT,
     "exp_samples": [{"labels": f'{n.DISK_STALL_IN_FLIGHT}{{device="vdb", host="c3", instance="c3:9100", job="node"}}', "value": 32}]},
    # the stalled device, recorded once for every cause below the stall; the capped one completes 1,000 a second: none
    {"expr": f'{n.DISK_NEAR_STALL}{{host=~"c3|c8"}}', "eval_time": AT,
     "exp_samples": [{"labels": f'{n.DISK_NEAR_STALL}{{device="vdb", host="c3", instance="c3:9100", job="node"}}', "value": 1}]},
    {"expr": f'round({n.CPU_PRESSURE_RATIO}{{host="c4"}}, 0.01)', "eval_time": AT,
     "exp_samples": [{"labels": '{host="c4", instance="c4:9100", job="node"}', "value": 0.7}]},
    {"expr": f'round({n.IO_PRESSURE_RATIO}{{host="k8"}}, 0.01)', "eval_time": AT,
     "exp_samples": [{"labels": '{host="k8", instance="k8:9100", job="node"}', "value": 0.95}]},
    {"expr": f'{n.FIO_CLAT_P50_SECONDS}{{host="c5"}}', "eval_time": AT,
     "exp_samples": [{"labels": f'{n.FIO_CLAT_P50_SECONDS}{{device="vdb", host="c5"}}', "value": 0.025}]},
]}


def dashboard_check(seen: Seen) -> dict:
    """The Disk under load dashboard's cause timeline, its variables matching every device, five minutes into the
    episodes: each device's state is its cause's (0: not slow)."""
    from fioscope_mixin import dashboards
    from fioscope_mixin.settings import load_settings

    expr = dashboards.slow_cause(dashboards.scope(load_settings())).build().targets[0].expr
    for var in ("host", "device"):
        expr = expr.replace(f'=~"${var}"', '=~".+"')
    state = {cause: i for i, (cause, _, _) in enumerate(dashboards.CAUSE_STATES, 1)}
    t = seconds(AT)
    return {"expr": expr, "eval_time": AT,
            "exp_samples": [{"labels": sc._labels({"host": c.device.host, "device": c.device.device}),
                             "value": state.get(seen[t].get(f"{c.device.host}/{c.device.device}", ""), 0)} for c in CASES]}


def _merge_values(test: dict, seen: Seen) -> dict:
    group = test["tests"][0]
    group["promql_expr_test"] += group.pop("promql_expr_test_extra") + [dashboard_check(seen)]
    return test


HEADER = ("# Generated by alerts/tests/cause_scenarios.py (the cases and the cause each must get are there);\n"
          "# regenerate with `python3 alerts/tests/cause_scenarios.py` after changing the rules.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the rules contradict an expectation")
    parser.add_argument("--matrix", action="store_true", help="print each case's cause, seconds to naming and alert")
    parser.add_argument("--rules", type=Path, default=HERE.parent, help="directory with the generated rule files")
    sc.add_phase_argument(parser)
    args = parser.parse_args(argv)
    sc.set_phase(parser, args)
    failed = False
    for line, out in OUT.items():
        seen, alerts = observe(args.rules, line)
        rows, problems = judge(seen, alerts)
        if args.matrix:
            print(f"Prometheus {sc.LINE_NAMES[line]}:\n"
                  "| case | cause | named (s after onset) | other causes | alert | fired (s after onset) |\n|---|---|---|---|---|---|")
            for r in rows:
                print(f"| {r.case.name} | {r.case.cause or '(none)'} | {'' if r.named_after is None else r.named_after} | "
                      f"{', '.join(sorted(r.others)) or 'none'} | {' '.join(r.case.alert) if r.case.alert else ''} | "
                      f"{'' if r.alert_after is None else r.alert_after} |")
        for p in problems:
            print(f"cause_scenarios.py: Prometheus {sc.LINE_NAMES[line]}: {p}", file=sys.stderr)
        failed |= bool(problems)
        if not (problems or args.check or args.matrix):
            out.write_text(HEADER + yaml.safe_dump(_merge_values(build_test(seen, alerts, args.rules), seen), sort_keys=False, width=160))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
