"""End-to-end detection of every cap shape on lab disks (root; `pytest -m e2e`, under flock /tmp/fioscope-lab.lock).

Real fio loads a lab disk from inside its cgroup (an application's workload, not a fioscope
job: the any-workload alerts), real node_exporter, Prometheus with the project's rules and
Alertmanager delivering to a webhook, at 5 s scrapes with the default windows and `for:` durations
(alerts/config.yaml overrides set the intervals); each test prints the time from load start to the
alert at the webhook and the ceiling its description names (run with -s).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

import pytest
from helpers.cli import fioscope
from helpers.lab import Webhook, e2e_overrides, fio_in_cgroup, fio_job, lay_out, require_root_lab, stop_fio
from helpers.native_stack import NativeStack
from helpers.net import wait_for
from helpers.prometheus import PromClient
from helpers.results import config_with_targets

pytestmark = pytest.mark.e2e

# 5 s scrapes and evaluations (the tests of 1 s scrapes hid slow detection), the default windows and `for:` durations;
# only the step-down lookback is shorter (the burst allowance is a minute, not hours)
SETTINGS = [
    "stack.scrape_interval=5s", "stack.evaluation_interval=5s", "stack.rate_window=1m",
    "thresholds.throttle.step_down_lookback=3m", "stack.alertmanager_group_interval=5s",
]
THROTTLE = ("FioscopeDiskThrottledUnderFioLoad", "FioscopeDiskThrottled", "FioscopeDiskThrottledAfterBurst", "FioscopeDiskQueueExploding")
MIB = 1048576


@contextlib.contextmanager
def detection_stack(tmp_path: Path, name: str, kind: str, **limits):
    """One lab disk named detect-<name> and the native stack watching it."""
    from fioscope import lab

    require_root_lab()
    state, webhook, stack, disk = tmp_path / "lab", Webhook(), None, None
    try:
        disk = lab.up(kind, name=f"detect-{name}", size="2G", state_dir=state, **limits)
        config = config_with_targets(tmp_path / "fioscope.yaml", [{"name": name, "directory": disk.mountpoint}])
        stack = NativeStack(tmp_path / "stack", e2e_overrides(webhook.url, extra=SETTINGS), fioscope_config=config)
        stack.start()
        prom = PromClient(stack.url("prometheus"))
        wait_for(lambda: prom.value(f'node_disk_reads_completed_total{{device="{disk.device_name}"}}') is not None, 60,
                 what="node_exporter scraped")
        yield disk, webhook, prom
    finally:
        if stack:
            stack.stop()
        webhook.close()
        if disk:
            lab.down(disk.name, state)


def load(disk, tmp_path: Path, sections: list[str]) -> subprocess.Popen:
    """fio with the given job sections inside the lab disk's cgroup (an application's load), its files laid out first."""
    job = fio_job(tmp_path / "load.fio", disk.mountpoint, sections)
    lay_out(job)
    return fio_in_cgroup(disk.cgroup, job)


def alternating_sections(rounds: int, phase: int = 10, depth: int = 128) -> list[str]:
    """4k random reads and 256k reads (a scan) taking turns every ``phase`` seconds."""
    return [f"[{'small' if i % 2 == 0 else 'scan'}{i}]\nrw=randread\nbs={'4k' if i % 2 == 0 else '256k'}\nsize=256m\n"
            f"iodepth={depth}\nruntime={phase}\nstonewall\nfilename=alt.dat" for i in range(rounds)]


def first_alert(webhook: Webhook, device: str, names=THROTTLE) -> tuple[float, dict] | None:
    for when, alert in webhook.received:
        if alert["labels"].get("alertname") in names and alert["labels"].get("device") == device:
            return when, alert
    return None


def watch(webhook: Webhook, device: str, start: float, expect: str | None, seconds: float) -> tuple[float, dict] | None:
    """Wait for ``expect`` on ``device`` (or watch ``seconds`` for any throttling alert when None)."""
    if expect:
        wait_for(lambda: first_alert(webhook, device, (expect,)), seconds, interval=0.5, what=f"{expect} on {device}")
    else:
        time.sleep(seconds)
    return first_alert(webhook, device, (expect,) if expect else THROTTLE)


def report(label: str, start: float, hit: tuple[float, dict] | None) -> None:
    if hit:
        print(f"\n[{label}] {hit[1]['labels']['alertname']} at the webhook {hit[0] - start:.0f} s after load start: "
              f"{hit[1]['annotations']['description']}")
    else:
        print(f"\n[{label}] no throttling alert")


def others(webhook: Webhook, device: str, allowed: str | None) -> list[str]:
    return sorted({a["labels"]["alertname"] for _, a in webhook.received
                   if a["labels"].get("device") == device and a["labels"]["alertname"] in THROTTLE and a["labels"]["alertname"] != allowed})


CAPS = {  # shape: (lab kind, limits, fio sections, the alert, phrase its description must hold, phrase it must not)
    "bandwidth-capped, 4k/256k alternating": (
        "bandwidth-capped", {"read_bps": 20 * MIB, "write_bps": 20 * MIB}, alternating_sections(30), "FioscopeDiskThrottled",
        # a bytes-per-second ceiling ("read throughput" or, with the file system's few writes, "throughput"), not IOPS
        "throughput flat at ~", "reads flat"),
    "write-capped, independent reads and writes": (
        "write-capped", {"write_iops": 300},
        ["[reads]\nrw=randread\nbs=4k\nsize=256m\niodepth=8\nruntime=300\nfilename=r.dat",
         "[writes]\nrw=randwrite\nbs=4k\nsize=256m\niodepth=64\nruntime=300\nfilename=w.dat"],
        "FioscopeDiskThrottled", "writes flat at ~", "reads flat"),
    # the burst allowance runs from `lab up`: the load starts right away, fast for 60 s, then capped
    "burst then cap (60 s burst)": (
        "burst-then-cap", {"read_iops": 300, "write_iops": 300, "burst_seconds": 60},
        ["[reads]\nrw=randread\nbs=4k\nsize=256m\niodepth=16\nruntime=300\nfilename=r.dat"],
        "FioscopeDiskThrottledAfterBurst", "burst credits exhausted", "no such phrase"),
}


@pytest.mark.parametrize("shape", list(CAPS))
def test_cap_fires_its_alert_naming_the_ceiling(tmp_path, shape):
    kind, limits, sections, alert, must, must_not = CAPS[shape]
    with detection_stack(tmp_path, kind, kind, **limits) as (disk, webhook, prom):
        start = time.time()
        fio = load(disk, tmp_path, sections)
        try:
            hit = watch(webhook, disk.device_name, start, alert, 240)
        finally:
            stop_fio(fio)
        report(shape, start, hit)
        description = hit[1]["annotations"]["description"] if hit else ""
        assert must in description and must_not not in description, description
        assert not others(webhook, disk.device_name, alert), "one cap, one page"
        if kind == "burst-then-cap":
            assert hit[0] - start > limits["burst_seconds"], "fired before the cap"
        else:  # any workload: flagged within two minutes of onset at the default windows
            assert hit[0] - start <= 120, f"{hit[0] - start:.0f} s to the webhook"


@pytest.mark.parametrize("control", ["saturated", "alternating", "bursty-under-cap"])
def test_healthy_controls_stay_silent(tmp_path, control):
    kind, limits = ("write-capped", {"write_iops": 500}) if control == "bursty-under-cap" else ("healthy", {})
    with detection_stack(tmp_path, control, kind, **limits) as (disk, webhook, prom):
        start = time.time()
        if control == "saturated":
            sections = ["[sat]\nrw=randread\nbs=4k\nsize=128m\niodepth=64\nnumjobs=4\nruntime=120\nfilename=s.dat"]
        elif control == "alternating":
            sections = alternating_sections(12)
        else:  # 300 writes as fast as the cap lets them, then a second's pause: ~250/s on average under the 500 cap
            sections = ["[bursty]\nrw=randwrite\nbs=4k\nsize=128m\niodepth=8\nthinktime=1s\nthinktime_blocks=300\n"
                        "runtime=120\nfilename=b.dat"]
        fio = load(disk, tmp_path, sections)
        try:
            hit = watch(webhook, disk.device_name, start, None, 120)
            iops = prom.value(f'max_over_time(fioscope:disk_iops{{device="{disk.device_name}"}}[2m])') or 0.0
        finally:
            stop_fio(fio)
        report(f"healthy control: {control}", start, hit)
        assert hit is None, hit
        assert iops > 100, "the control was not loaded"


def test_burst_timer_caps_later_and_lab_down_removes_it(tmp_path):
    """The timer outlives `lab up` (as after a crash), writes the caps after the burst, and `down` kills a pending one."""
    from fioscope import lab

    require_root_lab()
    state = tmp_path / "lab"

    def up(name: str, seconds: int) -> dict:
        made = fioscope("lab", "--state-dir", str(state), "up", "burst-then-cap", "--name", name, "--burst-seconds", str(seconds),
                        "--write-iops", "123")
        assert made.returncode == 0, made.stderr
        return json.loads(made.stdout)

    def timers() -> list[str]:
        return subprocess.run(["pgrep", "-f", f"import time.*{lab.TIMER_MARK}"], capture_output=True, text=True).stdout.split()

    try:
        quick, pending = up("detect-timer-quick", 2), up("detect-timer-pending", 600)
        throttle = Path(quick["cgroup"]) / ("io.max" if lab.cgroup_version() == 2 else "blkio.throttle.write_iops_device")
        wait_for(lambda: "123" in throttle.read_text(), 20, what="the caps written after the burst")
        assert len(timers()) == 1  # the quick one is done; the pending one waits
        down = fioscope("lab", "--state-dir", str(state), "down", "--all")
        assert down.returncode == 0 and "removed burst timer" in down.stdout, down.stdout + down.stderr
        assert not timers() and not Path(pending["cgroup"]).exists()
    finally:
        lab.down_all(state)
