"""End-to-end reports on lab disks (root; `flock /tmp/fioscope-lab.lock pytest -m e2e tests/test_e2e_reports.py`).

A diagnosis report from the live native stack over a throttled disk under overload and a
healthy one, opened in headless Chromium; a performance report from a real sweep on a lab
disk; a comparison of capped against uncapped. The live diagnosis' stack also proves the live alerts on its disks (the
capped disk's 10x overload pages within 2 minutes; the healthy disk saturated by rand-read-iops pages nothing): one
stack for what tests/test_e2e.py once checked on two stacks of its own.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import time
from pathlib import Path

import pytest
from fioscope_mixin.units import parse_duration
from fioscope_testkit.cli import fioscope
from fioscope_testkit.net import wait_for
from helpers.lab import CAP_SCRAPE_INTERVAL, THROTTLE, lab_stack, require_root_lab
from helpers.report_page import rendered
from helpers.scenarios import device_timeline

pytestmark = pytest.mark.e2e

SCRAPE = parse_duration(CAP_SCRAPE_INTERVAL)
CAP_IOPS = 700 + 300  # the throttled lab disk: 700 read + 300 write IOPS; cloud-sla-70-30 reads 70 %


@pytest.fixture(scope="module", autouse=True)
def root_lab():
    require_root_lab()


def test_diagnosis_report_from_the_live_stack(tmp_path):
    disks = {"reports-capped": {"kind": "throttled", "limits": {"read_iops": 700, "write_iops": 300, "independent": True}},
             "reports-fast": {"kind": "healthy"}}
    schedule = [
        {"job": "cloud-sla-70-30", "target": "reports-capped", "start_delay": "3s",
         "env": {"READ_IOPS": "7000", "WRITE_IOPS": "3000", "RUNTIME": "90", "SIZE": "512m"}},
        # 8 jobs x 128m fits the 2G lab disk; 90 s: a healthy disk saturated as long as the overload ran
        {"job": "rand-read-iops", "target": "reports-fast", "start_delay": "100s", "env": {"RUNTIME": "90", "SIZE": "128m"}},
    ]
    # scraped every 5 s, as every test that needs the cap seen as a ceiling (lab_stack): at 1 s the 700/s cap's 100 ms
    # slices read +/-10 % on some kernels, and CI's report once found no ceiling (no alert) on the capped disk
    with lab_stack(tmp_path, disks, schedule, scrape_interval=CAP_SCRAPE_INTERVAL) as (made, stack, webhook, prom):
        start = time.time()
        capped, fast = made["reports-capped"].device_name, made["reports-fast"].device_name
        # the live stack pages the capped disk under its 10x overload within 2 minutes of the load's start
        load_start = wait_for(lambda: prom.value('fio_run_start_timestamp_seconds{jobname="cloud-sla-70-30"} and on (jobname) '
                                                 'fio_run_running == 1'), 30, what="the capped disk's load")
        fired = wait_for(lambda: webhook.first("FioscopeDiskThrottledUnderFioLoad", device=capped), 150, interval=0.5,
                         what="the throttling alert at Alertmanager's webhook")
        util = prom.value(f'fioscope:disk_util_ratio{{device="{capped}"}}') or 0.0
        print(f"\n[capped 10x] throttling alert at Alertmanager {fired - load_start:.0f} s after load start; util {util:.2f}")
        assert fired - load_start <= 120
        assert util > 0.9
        fast_start = wait_for(lambda: prom.value('fio_run_running{jobname="rand-read-iops"}') == 1 and time.time(), 180,
                              what="the healthy disk's load")
        wait_for(lambda: prom.value('fio_run_running{jobname="rand-read-iops"}') == 0, 150, what="the end of the healthy load")
        time.sleep(5)
        # the healthy disk saturated pages nothing (every evaluation of its run, and the webhook), and it was loaded
        fast_end = time.time()
        throttle = "|".join(THROTTLE)
        flagged = prom.query_range(f'ALERTS{{alertname=~"{throttle}",alertstate="firing",device="{fast}"}}', fast_start, fast_end, 1)
        peaks = {key: prom.value(f'max_over_time({series}{{device="{fast}"}}[{fast_end - fast_start:.0f}s])') or 0.0
                 for key, series in (("util", "fioscope:disk_util_ratio"), ("iops", "fioscope:disk_iops"),
                                     ("await", "fioscope:disk_await_seconds"), ("queue", "fioscope:disk_queue_size"))}
        delivered = sorted(webhook.names())
        print(f"[healthy saturated] peaks: util {peaks['util']:.2f}, IOPS {peaks['iops']:.0f}, aqu-sz {peaks['queue']:.1f}, "
              f"await {peaks['await'] * 1000:.2f} ms; alerts delivered: {delivered or 'none'}")
        assert not flagged and not [a for _, a in webhook.received if a["labels"].get("device") == fast
                                    and a["labels"].get("alertname") in THROTTLE], f"throttling alert on a healthy disk: {flagged}"
        assert peaks["iops"] > 1000 and peaks["util"] > 0.5  # it was really loaded
        assert "FioscopeFioRunFailed" not in delivered
        out = tmp_path / "diagnosis"
        proc = fioscope("report", "--prometheus.url", stack.url("prometheus"), "--from", f"{start - 30:.0f}", "--to", f"{time.time():.0f}",
                        "--output", str(out), "--pdf")
        assert proc.returncode == 0, proc.stderr
        page = rendered(out, tmp_path)
        [throttled] = page.of("throttled", device=capped)
        print(f"\n[report] capped {capped}: {throttled['text']}")
        assert throttled["data-ok"] == "false", device_timeline(prom, capped, start, time.time(), 5, window="short",
                                                               alert="FioscopeDiskThrottledUnderFioLoad")
        assert abs(float(throttled["data-ceiling-iops"]) - CAP_IOPS) <= 0.1 * CAP_IOPS
        [healthy] = page.of("throttled", device=fast)
        print(f"[report] healthy {fast}: {healthy['text']}")
        assert healthy["data-ok"] == "true"
        [sla] = page.of("fio-sla", jobname="cloud-sla-70-30")
        print(f"[report] {sla['text']}")
        assert sla["data-ok"] == "false"  # the targets declare 30 ms; behind the cap p99 is far above
        assert page.of("alerts")[0]["data-ok"] == "false"  # the throttling alert is listed with its time
        html = (out / "report.html").read_text()
        assert "FioscopeDiskThrottledUnderFioLoad" in html and "cloud-sla-70-30" in html and "rand-read-iops" in html
        assert (out / "report.pdf").stat().st_size > 10_000
        # report.json: per-scrape rates, each run where it ran, shaded only on the device it loaded
        report = json.loads((out / "report.json").read_text())
        runs = {r["job"]: r for r in report["runs"]}
        assert runs["cloud-sla-70-30"]["device"] == capped and runs["rand-read-iops"]["device"] == fast
        devices = {d["device"]: d for d in report["devices"]}
        for device, job in ((capped, "cloud-sla-70-30"), (fast, "rand-read-iops")):
            run, dev = runs[job], devices[device]
            fio_iops = prom.value(f'sum(fio_iops{{jobname="{job}",ddir!="sync"}})')  # fio's own, as published
            assert run["iops"] == pytest.approx(fio_iops, rel=0.01)
            assert dev["charted"] and dev["interval"] <= SCRAPE + 0.5  # one point per scrape: rates between scrapes
            t, peak = peak_between(dev, run["start"] - 20, run["end"] + 20)
            print(f"[report live] {device} {job}: peak {peak:.0f} IO/s at +{t - run['start']:.0f} s of "
                  f"{run['end'] - run['start']:.0f} s; fio {fio_iops:.0f} IOPS")
            assert run["start"] <= t <= run["end"] + dev["interval"] + 1
            during = [v for _, v in points_between(dev, run["start"] + dev["interval"], run["end"])]
            mean = sum(during) / len(during)
            print(f"[report live] {device} {job}: mean {mean:.0f} IO/s over {len(during)} points (median {sorted(during)[len(during) // 2]:.0f})")
            # fio's IOPS are its run's mean: so the points'. An unpaced load's per-scrape rate moves with the CPU the
            # machine's other loads leave it (CI: fio 68.8k, the points' median 80.8k: its slower scrapes pulled fio's mean down)
            assert abs(mean - fio_iops) <= 0.1 * fio_iops
            if job == "cloud-sla-70-30":  # a paced load at a known rate: its peak too (an unpaced one swings with the CPU)
                assert abs(peak - fio_iops) <= 0.1 * fio_iops
            # no load outside the run: the samples drawn after it ended are idle again
            assert all(v < 0.05 * fio_iops for t, v in points_between(dev, run["end"] + 2 * dev["interval"], run["end"] + 20))
        [headline] = page.of("headline", device=capped)
        assert headline["data-ok"] == "false" and "Throttled from" in headline["text"]
        shutil.copy(tmp_path / "screenshot.png", out / "screenshot-live.png")


def points_between(dev: dict, start: float, end: float) -> list[tuple[float, float]]:
    """(time, r/s + w/s) of the points drawn in [start, end]."""
    return [(t, r + w) for (t, r), (_, w) in zip(dev["series"]["r/s"], dev["series"]["w/s"]) if start <= t <= end]


def peak_between(dev: dict, start: float, end: float) -> tuple[float, float]:
    """(time, r/s + w/s) of the highest point drawn in [start, end]."""
    return max(points_between(dev, start, end), key=lambda p: p[1])


def test_capture_on_a_throttled_lab_disk(tmp_path):
    """The method in one command on a disk capped at 700 read + 300 write IOPS: idle, the SLA load (700+300, at the
    cap), idle, the overload (1400+600), idle. From report.json: each load's peak inside its run window and within
    10 % of fio's IOPS, idle phases idle, every run listed and labelled, idle devices not charted; the overload at the cap."""
    from fioscope import lab

    state = tmp_path / "lab"
    disk = lab.up("throttled", name="reports-capture", size="1G", state_dir=state)
    out = tmp_path / "bundle"
    started = time.time()
    try:
        # the idle after the SLA load lasts 40 s: the device's normal await is what it did a minute before, while its
        # util stayed low (fioscope:disk_await_unsaturated_seconds), so the overload must start over 20 s after the
        # 40 s load's end for the SLA load to be its normal (with 20 s the one before was the capture's layout, which
        # ran the job for a second then; a fresh lab disk has nothing else)
        proc = fioscope("capture", "--target.dir", disk.mountpoint, "--target.cgroup", disk.cgroup, "--output", str(out),
                        "--idle", "40s", "--load", "40s", "--env", "SIZE=64m", timeout=600)
    finally:
        lab.down(disk.name, state)
    took = time.time() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    device = Path(disk.loop_device).name
    report = json.loads((out / "report.json").read_text())
    runs = sorted(report["runs"], key=lambda r: r["start"])
    assert [r["job"] for r in runs] == ["cloud-sla-70-30", "cloud-sla-70-30"] and all(r["device"] == device for r in runs)
    dev = next(d for d in report["devices"] if d["device"] == device)
    assert dev["charted"] and list(out.glob(f"*-{device}-iops.png"))
    edges = [report["window"]["start"]] + [r["start"] for r in runs[1:]]
    for run, lo, hi in zip(runs, edges, [r["start"] for r in runs[1:]] + [report["window"]["end"]]):
        t, peak = peak_between(dev, lo, hi)
        print(f"\n[capture] {run['label']}: peak {peak:.0f} IO/s at +{t - run['start']:.1f} s of {run['end'] - run['start']:.1f} s; "
              f"fio {run['iops']:.0f} IOPS")
        assert run["start"] <= t <= run["end"] + dev["interval"] + 0.5
        assert abs(peak - run["iops"]) <= 0.1 * run["iops"]
    idle = [p for p in dev["phases"] if p["kind"] == "idle"]
    print("[capture] idle phases: " + "; ".join(f"{p['label']} {p['iops']:.1f} IO/s util {p['util']:.1f} %" for p in idle)
          + f"; verdict: {dev['verdict']}; {took:.0f} s in all")
    assert len(idle) == 3 and all(p["iops"] < 50 and p["util"] < 5 for p in idle)
    assert "idle periods were clean" in dev["verdict"]
    # a capped disk is never "load, not a fault": named the cap, or slow at the ceiling the throttling check names
    verdict = dev["verdict"]
    assert "not a fault" not in verdict and ("provider's cap" in verdict or "slow at the ceiling" in verdict), verdict
    # the overload asked for twice the cap and got the cap (the rules need ~2 min of load to call it throttled: the
    # live test and the capped fixture check that verdict; the default plan's loads are long enough)
    overload = [p for p in dev["phases"] if p["kind"] == "load"][-1]
    assert runs[-1]["iops"] <= 1.1 * 1000 and overload["util"] > 90
    # issue 27: where the rules call it throttled, the headline's window is when the alert held, inside the overload
    # (± one sample), never from the SLA load's start; a check whose rule needs longer than the loads is not decided
    for a, b in dev["throttled"]:
        assert overload["start"] - dev["interval"] <= a <= b <= overload["end"] + dev["interval"], (a, b, overload)
    checks = {v["kind"]: v for v in report["verdicts"] if v["kind"] in ("sla", "iowait") and v["data"].get("device") in (None, device)}
    assert all(v["decided"] is False and v["ok"] is None and "not decided" in v["text"] for v in checks.values()), checks
    html = (out / "report.html").read_text()
    assert all(r["label"] in html for r in runs)
    # issue 27: per phase the request sizes (4 KiB here: an IOPS cap's load, not a bandwidth cap's) and the avg-cpu line,
    # in report.json and the page's phase table; the disk under the loop device compares the same phases
    for load in (p for p in dev["phases"] if p["kind"] == "load"):
        assert 3.5 <= load["rareq-sz"] <= 4.5 and 3.5 <= load["wareq-sz"] <= 4.5, load
        assert all(isinstance(load[k], float) for k in ("rrqm/s", "wrqm/s", "%iowait", "%steal", "%system")), load
    assert all(column in html for column in ("rareq-sz", "wareq-sz", "%iowait", "%steal"))
    under = [d for d in report["devices"] if d["charted"] and d["device"] != device]
    assert any(sum(p["kind"] == "load" and f"on {device}" in p["label"] for p in d["phases"]) == 2 for d in under), \
        [(d["device"], [p["label"] for p in d["phases"]]) for d in under]
    for other in report["devices"]:
        if not other["charted"]:
            assert not list(out.glob(f"*-{other['device']}-*.png")) and all(v == [] for v in other["series"].values())
    page = rendered(out, tmp_path)
    [headline] = page.of("headline", device=device)
    assert page.items[0]["data-kind"] == "headline" and headline["text"] == dev["verdict"]
    shutil.copy(tmp_path / "screenshot.png", out / "screenshot-capture.png")
    for name in ("iostat.json", "phases.json", "samples/diskstats.jsonl"):
        assert (out / name).is_file()
    assert len(list((out / "results").glob("cloud-sla-70-30-*.json"))) == 2


def _sweep(made_dir: str, cgroup: str, results) -> None:
    proc = fioscope("run", "iodepth-sweep", "--target.dir", made_dir, "--target.cgroup", cgroup, "--results.dir", str(results),
                    "--iodepth", "1,4,16,64", "--repeat", "2", "--env", "RUNTIME=5", "--env", "RAMP=2", "--env", "SIZE=128m", timeout=600)
    assert proc.returncode == 0, proc.stderr


def test_performance_and_comparison_from_lab_sweeps(tmp_path):
    from fioscope import lab
    from fioscope.reporting.performance import (
        is_steep,
        performance_report,
    )
    from fioscope.reporting.results import curves, load_results
    from fioscope.thresholds import shipped

    state = tmp_path / "lab"
    made = {}
    try:
        made["fast"] = lab.up("healthy", name="reports-sweep-fast", size="1G", state_dir=state)
        _sweep(made["fast"].mountpoint, made["fast"].cgroup, tmp_path / "fast")
        # The cap sits between what this machine's loop disk does at qd 1 and at qd 4 (a fixed
        # figure was above qd 4 on a faster CI machine, so the knee fell where no cap was).
        [fast] = curves(load_results(tmp_path / "fast")).values()
        sweep_cap = round(math.sqrt(fast[0].iops * fast[1].iops))
        made["capped"] = lab.up("throttled", name="reports-sweep-capped", size="1G", state_dir=state,
                                read_iops=sweep_cap, write_iops=sweep_cap)
        _sweep(made["capped"].mountpoint, made["capped"].cgroup, tmp_path / "capped")
    finally:
        for disk in made.values():
            lab.down(disk.name, state)

    samples = load_results(tmp_path / "capped")
    [points] = curves(samples).values()
    report = performance_report(samples, "capped", latency_target=None, thresholds=shipped())
    knee_depth = next(v for v in report.sections[0].verdicts if v.kind == "knee").data["depth"]
    knee = next(i for i, p in enumerate(points) if p.depth == knee_depth)
    print(f"\n[sweep capped {sweep_cap} IOPS; uncapped qd1 {fast[0].iops:.0f}, qd4 {fast[1].iops:.0f}] "
          + "; ".join(f"qd{p.depth}: {p.iops:.0f}±{p.iops_sd:.0f} IOPS, {p.lat_mean * 1000:.2f} ms" for p in points)
          + f"; knee qd{knee_depth}")
    # Once the cap binds, more queue depth only adds latency: every later step is steep, so the knee (the
    # first steep step's start) is found at the cap or before it (latency may outgrow throughput earlier).
    at_cap = next(i for i, p in enumerate(points) if p.iops >= 0.9 * sweep_cap)
    assert at_cap < len(points) - 1, "the cap never bound before the deepest queue"
    assert knee <= at_cap
    assert not any(is_steep(a, b, False) for a, b in itertools.pairwise(points[:knee + 1]))
    assert is_steep(points[knee], points[knee + 1], False)
    assert all(is_steep(a, b, False) for a, b in itertools.pairwise(points[at_cap:]))
    assert all(p.iops <= sweep_cap * 1.1 for p in points)
    out = tmp_path / "perf"
    proc = fioscope("report", "--results", str(tmp_path / "capped"), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    rendered(out, tmp_path)

    out = tmp_path / "cmp"
    proc = fioscope("report", "--baseline", str(tmp_path / "fast"), "--candidate", str(tmp_path / "capped"), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    page = rendered(out, tmp_path)
    [verdict] = page.of("comparison")
    print(f"[compare fast vs capped] {verdict['text']}")
    assert verdict["data-significant"] == "true"
    assert "lower IOPS" in verdict["text"] and "higher p99 latency" in verdict["text"]

    out = tmp_path / "same"
    proc = fioscope("report", "--baseline", str(tmp_path / "capped"), "--candidate", str(tmp_path / "capped"), "--output", str(out))
    assert proc.returncode == 0 and "no significant difference" in (out / "report.html").read_text()
