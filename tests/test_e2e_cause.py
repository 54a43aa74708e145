"""End-to-end: the cause of a slow episode on lab disks (root; `pytest -m e2e`, under flock /tmp/fioscope-lab.lock).

A noisy neighbour: two lab disks whose backing files share one file system (one backing device), and one cgroup cap
on that device (1.5x the victim's pace) over both workloads: the victim reads at a paced rate on its disk (at most
1,000 IOPS, lower where the backing device is slow: its util must stay under the baseline's 45 %), then a
neighbour saturates the other disk. The victim's own load does not grow, its reads complete slower and fewer: the
rules must name a noisy neighbour within 2 minutes at 15 s scrapes, and nothing else, and the alert must give the
evidence. Real fio, node_exporter (with its pressure collector where the kernel has PSI) and Prometheus with the
project's rules at their default windows (alerts/config.yaml overrides set the intervals). Run with -s for figures.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

import pytest
from helpers.lab import e2e_overrides, fio_in_cgroup, fio_job, lab_disks, lay_out, require_root_lab, started, stop_fio
from helpers.native_stack import NativeStack
from helpers.net import wait_for
from helpers.prometheus import PromClient
from helpers.results import config_with_targets

pytestmark = pytest.mark.e2e

SCRAPE = "15s"
# 15 s scrapes and evaluations, the default windows and thresholds but one: a machine shared with other tests runs at
# a CPU pressure near 100 % (measured: PSI cpu some avg60 93.7 %), which names a wait above the disk for any light load
# (its rule, tested in alerts/tests/cause.test.yaml); the neighbour is isolated here
SETTINGS = ["stack.alertmanager_group_interval=5s", "thresholds.cause.cpu_pressure_ratio=1.5"]
MAX_PACE = 1000  # the victim's reads/s where the backing device is fast: under the cap alone, at its normal latency
PACE_UTIL = 0.15  # ... and at most this busy share of the victim's disk (the baseline records only under 45 % util: on
# CI's machine a 1,000 IOPS pace kept the victim's disk above it and no normal was ever recorded)
NAMED_WITHIN = 120
WATCH = 240  # seconds of the episode watched for any other cause


def causes(prom: PromClient, device: str) -> set[str]:
    return {r["metric"]["cause"] for r in prom.query(f'fioscope:disk_slow_cause{{device="{device}"}}')}


def alert(prom: PromClient, name: str, device: str) -> dict | None:
    for a in prom._get("/api/v1/alerts")["alerts"]:
        if a["labels"].get("alertname") == name and a["labels"].get("device") == device and a["state"] == "firing":
            return a
    return None


def read_latency_seconds(directory: str, tmp_path: Path) -> float:
    """Mean completion latency of 4k random reads at queue depth 1 for 3 s in ``directory`` (its own job file: a job
    section's options override the command line's, so the neighbour's runtime=600 would win over --runtime)."""
    job = fio_job(tmp_path / "calibrate.fio", directory,
                  ["[calibrate]\nrw=randread\nbs=4k\nsize=256m\niodepth=1\nruntime=3\nfilename=n.dat"])
    out = subprocess.run(["fio", "--output-format=json", str(job)], check=True, capture_output=True, text=True, timeout=60).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]["read"]["clat_ns"]["mean"] / 1e9


def victim_pace(latency: float) -> int:
    """The victim's reads/s: its disk busy at most PACE_UTIL of the time (util ~ IOPS x latency), in 50s."""
    return max(100, min(MAX_PACE, int(PACE_UTIL / latency) // 50 * 50))


def test_noisy_neighbour_on_a_shared_backend(tmp_path: Path):
    require_root_lab()
    loads: list = []
    with contextlib.ExitStack() as stack_of:
        up = stack_of.enter_context(lab_disks(tmp_path / "lab"))
        neighbour = up("healthy", "nn-neighbour")
        neighbour_job = fio_job(tmp_path / "neighbour.fio", neighbour.mountpoint,
                                ["[neighbour]\nrw=randread\nbs=4k\nsize=256m\niodepth=32\nruntime=600\nfilename=n.dat"])
        lay_out(neighbour_job)
        # the backing device's speed sets the pace; the one cgroup cap over both workloads is 1.5x that pace, so the
        # neighbour (twice the victim's queue) leaves the victim about half its pace
        latency = read_latency_seconds(neighbour.mountpoint, tmp_path)
        pace = victim_pace(latency)
        shared_cap = pace * 3 // 2
        print(f"\n[noisy neighbour] backing read latency {latency * 1e3:.2f} ms: victim paced at {pace} IOPS, shared cap {shared_cap}")
        victim = up("read-capped", "nn-victim", read_iops=shared_cap)
        assert victim.backing_device == neighbour.backing_device, "both backing files must share one device"
        config = config_with_targets(tmp_path / "fioscope.yaml", [{"name": "victim", "directory": victim.mountpoint},
                                                                 {"name": "neighbour", "directory": neighbour.mountpoint}])
        stack = stack_of.enter_context(started(NativeStack(tmp_path / "stack", e2e_overrides(rate_window="1m", extra=SETTINGS,
                                                                                              scrape_interval=SCRAPE),
                                                           fioscope_config=config)))
        prom = PromClient(stack.url("prometheus"))
        dev = victim.device_name
        wait_for(lambda: prom.value(f'node_disk_reads_completed_total{{device="{dev}"}}') is not None, 90, interval=1,
                 what="node_exporter scraped")
        if Path("/proc/pressure/io").exists():  # node_exporter's pressure collector is on where the kernel has PSI
            wait_for(lambda: prom.value("fioscope:io_pressure_ratio") is not None, 90, interval=1, what="PSI recorded")

        victim_job = fio_job(tmp_path / "victim.fio", victim.mountpoint,
                             [f"[victim]\nrw=randread\nbs=4k\nsize=256m\niodepth=16\nrate_iops={pace}\nruntime=1200\nfilename=v.dat"])
        lay_out(victim_job)
        try:
            # the victim alone: its normal latency and the load it asks at it (the baseline needs unsaturated minutes)
            loads.append(fio_in_cgroup(victim.cgroup, victim_job))
            try:
                wait_for(lambda: prom.value(f'fioscope:disk_await_baseline_seconds{{device="{dev}"}}') is not None, 300, interval=5,
                         what="the victim's normal await")
            except AssertionError as exc:
                util = prom.value(f'max_over_time(fioscope:disk_util_ratio:irate{{device="{dev}"}}[2m])')
                raise AssertionError(f"{exc}; the victim's util peaked at {util} over the last 2 minutes "
                                     "(the baseline needs < 0.45)") from None
            wait_for(lambda: prom.value(f'fioscope:disk_normal_iops{{device="{dev}"}}') is not None, 120, interval=5,
                     what="the victim's load at normal latency")
            time.sleep(60)
            before = {k: prom.value(f'{k}{{device="{dev}"}}') for k in ("fioscope:disk_iops", "fioscope:disk_await_seconds",
                                                                         "fioscope:disk_await_baseline_seconds")}
            assert not causes(prom, dev), f"the victim alone is slow: {causes(prom, dev)} ({before})"

            # the neighbour, in the same cgroup: it takes most of the shared cap
            onset = time.time()
            loads.append(fio_in_cgroup(victim.cgroup, neighbour_job))
            seen: dict[str, float] = {}
            while time.time() - onset < WATCH:
                for cause in causes(prom, dev):
                    seen.setdefault(cause, time.time() - onset)
                time.sleep(5)
            after = {k: prom.value(f'{k}{{device="{dev}"}}') for k in ("fioscope:disk_iops", "fioscope:disk_await_seconds",
                                                                        "fioscope:disk_queue_size")}
            fired = alert(prom, "FioscopeDiskCauseNoisyNeighbour", dev)
        finally:
            for proc in loads:
                stop_fio(proc)
        print(f"\n[noisy neighbour] victim {dev} before: {before}; during: {after}; causes named (s after onset): {seen}")
        if fired:
            print(f"[noisy neighbour] {fired['annotations']['summary']}: {fired['annotations']['description']}")
        assert "noisy_neighbour" in seen, f"no noisy neighbour named in {WATCH} s (named: {seen}; victim {after})"
        assert seen["noisy_neighbour"] <= NAMED_WITHIN + 15, f"named {seen['noisy_neighbour']:.0f} s after onset"
        assert set(seen) == {"noisy_neighbour"}, f"other causes named for the victim: {seen}"
        assert fired, "FioscopeDiskCauseNoisyNeighbour did not fire"
        assert "no ceiling" in fired["annotations"]["description"] and "at its normal latency" in fired["annotations"]["description"]
