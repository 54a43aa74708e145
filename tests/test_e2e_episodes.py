"""End-to-end: an alert per episode on lab disks at 15 s scrapes (issue 25; root; `pytest -m e2e -s`).

- A write cap under a load above it for 20 minutes, beside reads from an independent client whose rate changes at random
  every 15-30 s: one FioscopeDiskThrottled from its first firing until the load stops, never resolved in between.
- A stalled lab disk (`fioscope lab up stalled`: 2 IOPS each way) under a queue of 32: what the kernel reports for it
  (requests in flight, util, aqu-sz, r/s), and the critical FioscopeDiskStalled.

Both run side by side with the other lab scenarios (tests/helpers/scenarios.py), under the stack that scrapes every 15 s.
The 20-minute episode runs only with FIOSCOPE_E2E_LONG=1 (not in CI: 20 minutes; measured figures at its test).
"""

from __future__ import annotations

import os
import random

import pytest
from helpers.scenarios import Scenario, episodes, firing_samples, once_paged, timeline

pytestmark = pytest.mark.e2e

EPISODE_SECONDS = 1200
LONG = os.environ.get("FIOSCOPE_E2E_LONG") == "1"
WRITE_CAP = 400
SEED = 25
DEADLINE = 120  # the first alert within two minutes of onset, as for every cap
STALL_WAIT = 240  # the stall's load runs until its alert is at the webhook (and 15 s more), this long at most
STALL = "FioscopeDiskStalled"
EVAL = 5  # the alerts' group runs three times an interval at 15 s scrapes


def random_reads(seconds: int, seed: int = SEED, low: int = 300, high: int = 2500) -> list[str]:
    """An independent reader: 4 KiB random reads whose rate changes at random (``low``..``high``/s) every 15-30 s."""
    rng, sections, total = random.Random(seed), [], 0
    while total < seconds:
        run = rng.randint(15, 30)
        sections.append(f"[reads{len(sections)}]\nrw=randread\nbs=4k\nsize=256m\niodepth=16\nrate_iops={rng.randint(low, high)}\n"
                        f"runtime={run}\nstonewall\nfilename=r.dat")
        total += run
    return sections


SCENARIOS = {
    "episode: write cap beside random reads, 20 min": Scenario(
        "write-capped", [[f"[writes]\nrw=randwrite\nbs=4k\nsize=256m\niodepth=32\nruntime={EPISODE_SECONDS}\nfilename=w.dat"],
                         random_reads(EPISODE_SECONDS)],
        EPISODE_SECONDS, intervals=("15s",), limits={"write_iops": WRITE_CAP}, learn=True, gate=False),
    "episode: stalled disk, queue of 32": Scenario(
        "stalled", [["[stall]\nrw=randread\nbs=4k\nsize=64m\niodepth=32\nruntime=600\nfilename=s.dat"]], STALL_WAIT,
        intervals=("15s",), stop=once_paged((STALL,), then=15), gate=False),
}


# Not in CI (FIOSCOPE_E2E_LONG=1 runs it): 20 minutes of CI time. The reads change rate every 15-30 s between 300 and
# 2,500/s, so the device's total IOPS and bytes/s fall 4x for a minute or more now and then. On the rules before the
# step-down and the recent peak were judged per direction (a per-device test read the fall as a step-down and
# FioscopeDiskThrottled yielded to it): first firing at 95 s, 85.5 % of the episode in 2 firings, [(95, 780), (875, 1125)] s.
# Measured with them (FIOSCOPE_E2E_LONG=1 python3 -m pytest -m e2e tests/test_e2e_episodes.py -s, 2026-11-25): writes
# averaged 390/s; first firing at 90 s, one firing [(90, 1200)] s, 100 % of the episode after it, 1 activation, 1
# startsAt at the webhook; FioscopeDiskThrottledAfterBurst 0 s. (promtool: scenarios e1, per-scrape reads, and e3,
# reads drawn per minute, 3-4x lower for one to five minutes at a time.)
@pytest.mark.skipif(not LONG, reason="20 minutes (CI time): FIOSCOPE_E2E_LONG=1 runs it")
@pytest.mark.parametrize("scenario", ["episode: write cap beside random reads, 20 min"])
def test_a_cap_under_a_varying_load_is_one_alert_until_the_load_stops(scenario_lab, scenario):
    run = scenario_lab.finished(scenario)
    prom, device = run.stacks["15s"].prom, run.disk.device_name
    firing = firing_samples(prom, "FioscopeDiskThrottled", device, run.start, run.end, EVAL)
    runs = episodes(firing, EVAL)
    activations = {float(v) for one in prom.query(f'ALERTS_FOR_STATE{{alertname="FioscopeDiskThrottled",device="{device}"}}'
                                                  f'[{run.end - run.start:.0f}s]', at=run.end) for _, v in one["values"]}
    notified = {a["startsAt"] for _, a in run.pages("15s", ("FioscopeDiskThrottled",), run.start, run.end)}
    first = firing[0] if firing else None
    share = len(firing) * EVAL / (run.end - first) if first else 0.0
    writes = prom.value(f'avg_over_time(fioscope:disk_write_iops{{device="{device}"}}[{run.end - run.start:.0f}s])', at=run.end)
    print(f"\n[episode, 15 s scrapes] writes capped at {WRITE_CAP}/s (averaged {writes or 0:.0f}/s) beside random reads (seed {SEED}) "
          f"for {run.end - run.start:.0f} s: " + (
              f"FioscopeDiskThrottled firing {first - run.start:.0f} s after load start, firing {share:.1%} of the time after, "
              f"{len(runs)} separate firing(s) {[(round(a - run.start), round(b - run.start)) for a, b in runs]}, "
              f"{len(activations)} activation(s) in ALERTS_FOR_STATE, {len(notified)} distinct startsAt at the webhook"
              if first else "FioscopeDiskThrottled never fired"))
    assert first, f"no FioscopeDiskThrottled on {device} in {run.end - run.start:.0f} s\n{timeline(run, '15s')}"
    assert first - run.start <= DEADLINE, f"first firing {first - run.start:.0f} s after load start"
    assert len(runs) == 1, f"resolved and fired again: {len(runs)} firings"
    assert runs[0][1] >= run.end - 30, f"resolved {run.end - runs[0][1]:.0f} s before the load stopped"
    assert share >= 0.95, f"firing {share:.1%} of the episode"
    assert len(activations) == 1, f"{len(activations)} activations"
    assert len(notified) == 1, f"{len(notified)} separate notifications"
    # the reads' falls are no step-down of the capped writes: the burst alert stays silent
    burst = firing_samples(prom, "FioscopeDiskThrottledAfterBurst", device, run.start, run.end, EVAL)
    print(f"[episode, 15 s scrapes] FioscopeDiskThrottledAfterBurst firing {len(burst) * EVAL} s of the episode")
    assert not burst, f"FioscopeDiskThrottledAfterBurst fired {len(burst) * EVAL} s: a fall of the reads taken for a step-down"


@pytest.mark.parametrize("scenario", ["episode: stalled disk, queue of 32"])
def test_a_stalled_disk_is_a_critical_stall_alert(scenario_lab, scenario):
    run = scenario_lab.finished(scenario)
    prom, device = run.stacks["15s"].prom, run.disk.device_name
    # what the kernel reports a minute into the stall (iostat's columns from node_exporter's counters)
    at = min(run.end - 5, run.start + 90)
    kernel = {label: prom.value(expr.format(device=device), at=at) for label, expr in (
        ("in flight (node_disk_io_now)", 'node_disk_io_now{{device="{device}"}}'),
        ("r/s", 'rate(node_disk_reads_completed_total{{device="{device}"}}[1m])'),
        ("util", 'rate(node_disk_io_time_seconds_total{{device="{device}"}}[1m])'),
        ("aqu-sz", 'rate(node_disk_io_time_weighted_seconds_total{{device="{device}"}}[1m])'),
        ("r_await s", 'rate(node_disk_read_time_seconds_total{{device="{device}"}}[1m]) / '
                      'rate(node_disk_reads_completed_total{{device="{device}"}}[1m])'))}
    hit = run.first_page("15s", (STALL,))
    others = sorted({a["labels"]["alertname"] for when, a in run.stacks["15s"].webhook.received
                     if a["labels"].get("device") == device and run.start <= when <= run.end} - {STALL})
    print(f"\n[stalled disk, 15 s scrapes] kernel at +{at - run.start:.0f} s: "
          + ", ".join(f"{k} {v:.3g}" if v is not None else f"{k} n/a" for k, v in kernel.items())
          + (f"; {STALL} at the webhook {hit[0] - run.start:.0f} s after load start ({hit[1]['labels'].get('severity')}): "
             f"{hit[1]['annotations'].get('description')}" if hit else f"; no {STALL}") + f"; other alerts: {others or 'none'}")
    # the lab disk is a stall: a queue held, almost nothing completing
    assert (kernel["in flight (node_disk_io_now)"] or 0) >= 16 and (kernel["r/s"] or 0) <= 3, kernel
    assert hit, f"no {STALL} on {device} in {run.end - run.start:.0f} s\n{timeline(run, '15s')}"
    assert hit[1]["labels"].get("severity") == "critical", hit[1]["labels"]
