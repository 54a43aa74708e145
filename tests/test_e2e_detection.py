"""End-to-end detection of every cap shape on lab disks (root; `pytest -m e2e`, under flock /tmp/fioscope-lab.lock).

Real fio loads a lab disk from inside its cgroup (an application's workload, not a fioscope
job: the any-workload alerts), real node_exporter, Prometheus with the project's rules and
Alertmanager delivering to a webhook, at 5 s scrapes with the default windows and `for:` durations
(alerts/config.yaml overrides set the intervals); each test prints the time from load start to the
alert at the webhook and the ceiling its description names (run with -s).

The scenarios run side by side with the other lab scenarios under one stack per scrape interval
(tests/helpers/scenarios.py, the session's ``scenario_lab``): the capped disks at once, the write cap's uncapped
reads and the burst after them, the uncapped controls one at a time; each test asserts on its own device.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fioscope_testkit.cli import fioscope
from fioscope_testkit.net import wait_for
from helpers.lab import require_root_lab
from helpers.scenarios import Run, Scenario, once_paged, timeline

pytestmark = pytest.mark.e2e

THROTTLE = ("FioscopeDiskThrottledUnderFioLoad", "FioscopeDiskThrottled", "FioscopeDiskThrottledAfterBurst", "FioscopeDiskQueueExploding")
MIB = 1048576
WAIT = 240  # a cap's load runs until its alert is at the webhook, this long at most


def alternating_sections(rounds: int, phase: int = 10, depth: int = 128) -> list[str]:
    """4k random reads and 256k reads (a scan) taking turns every ``phase`` seconds."""
    return [f"[{'small' if i % 2 == 0 else 'scan'}{i}]\nrw=randread\nbs={'4k' if i % 2 == 0 else '256k'}\nsize=256m\n"
            f"iodepth={depth}\nruntime={phase}\nstonewall\nfilename=alt.dat" for i in range(rounds)]


def report(label: str, start: float, hit: tuple[float, dict] | None) -> None:
    if hit:
        print(f"\n[{label}] {hit[1]['labels']['alertname']} at the webhook {hit[0] - start:.0f} s after load start: "
              f"{hit[1]['annotations']['description']}")
    else:
        print(f"\n[{label}] no throttling alert")


def others(run: Run, allowed: str | None) -> list[str]:
    """The throttling pages on the scenario's device while its load ran (and one evaluation after), but ``allowed``."""
    return sorted({a["labels"]["alertname"] for _, a in run.pages("5s", THROTTLE, run.start, run.end + 5)} - {allowed})


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
    # the burst allowance runs from the load's start: fast for 60 s, then capped
    "burst then cap (60 s burst)": (
        "burst-then-cap", {"read_iops": 300, "write_iops": 300},
        ["[reads]\nrw=randread\nbs=4k\nsize=256m\niodepth=16\nruntime=300\nfilename=r.dat"],
        "FioscopeDiskThrottledAfterBurst", "burst credits exhausted", "no such phrase"),
}
BURST_SECONDS = 60
CONTROLS = {
    "saturated": ("healthy", {}, ["[sat]\nrw=randread\nbs=4k\nsize=128m\niodepth=64\nnumjobs=4\nruntime=120\nfilename=s.dat"]),
    "alternating": ("healthy", {}, alternating_sections(12)),
    # 300 writes as fast as the cap lets them, then a second's pause: ~250/s on average under the 500 cap
    "bursty-under-cap": ("write-capped", {"write_iops": 500},
                         ["[bursty]\nrw=randwrite\nbs=4k\nsize=128m\niodepth=8\nthinktime=1s\nthinktime_blocks=300\n"
                          "runtime=120\nfilename=b.dat"]),
}
# An uncapped loop disk runs into this VM's own virtual disk, which *is* a provider's cap. Sizes that take turns at that
# disk's own maximum sit on its IOPS ceiling in one phase and its bytes/s ceiling in the next: a dual cap's envelope,
# which pages whenever the phase changes fall near the scrapes (CI paged it at 5 s scrapes). Declared local hardware
# (thresholds.disk_cap_per_device) as the envelope twins are: it may get the info alert, never a page (the queue alert
# still judges it). The saturated control stays a provider's volume: one size at the maximum is no envelope.
PHYSICAL_CONTROLS = {"alternating"}
SCENARIOS = {
    # the bandwidth cap is cheap beside the other capped disks; the write cap's uncapped reads and the burst take a core
    # each, so they start once the cheap caps are done, and the uncapped controls one at a time after them
    **{f"detection: {shape}": Scenario(
        kind, [sections], WAIT, limits=limits, stop=once_paged((alert,)), phase=0 if kind == "bandwidth-capped" else 1,
        cap_after=BURST_SECONDS if kind == "burst-then-cap" else None)
       for shape, (kind, limits, sections, alert, _, _) in CAPS.items()},
    **{f"detection control: {control}": Scenario(kind, [sections], 120, limits=limits, phase=0 if kind != "healthy" else 2,
                                                 alone=kind == "healthy", physical=control in PHYSICAL_CONTROLS)
       for control, (kind, limits, sections) in CONTROLS.items()},
}


@pytest.mark.parametrize("scenario", [f"detection: {shape}" for shape in CAPS])
def test_cap_fires_its_alert_naming_the_ceiling(scenario_lab, scenario):
    shape = scenario.removeprefix("detection: ")
    kind, limits, sections, alert, must, must_not = CAPS[shape]
    run = scenario_lab.finished(scenario)
    hit = run.first_page("5s", (alert,))
    report(shape, run.start, hit)
    description = hit[1]["annotations"]["description"] if hit else ""
    assert hit, f"no {alert} on {run.disk.device_name} in {WAIT} s\n{timeline(run, '5s')}"
    assert must in description and must_not not in description, description
    assert not others(run, alert), "one cap, one page"
    if kind == "burst-then-cap":
        assert hit[0] - run.start > BURST_SECONDS, "fired before the cap"
    else:  # any workload: flagged within two minutes of onset at the default windows
        assert hit[0] - run.start <= 120, f"{hit[0] - run.start:.0f} s to the webhook"


@pytest.mark.parametrize("scenario", [f"detection control: {control}" for control in CONTROLS])
def test_healthy_controls_stay_silent(scenario_lab, scenario):
    run = scenario_lab.finished(scenario)
    pages = run.pages("5s", THROTTLE, run.start, run.end + 5)
    iops = run.stacks["5s"].prom.value(f'max_over_time(fioscope:disk_iops{{device="{run.disk.device_name}"}}[2m])', at=run.end) or 0.0
    report(f"healthy control: {scenario.removeprefix('detection control: ')}", run.start, pages[0] if pages else None)
    assert not pages, f"{pages}\n{timeline(run, '5s')}"
    assert iops > 100, "the control was not loaded"


@pytest.mark.beside_scenarios
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
