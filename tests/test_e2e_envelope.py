"""End-to-end: the throttling envelope on lab disks at the scrape intervals users run (root; `pytest -m e2e -s`).

The cases of the envelope issue, each a capped lab disk and an uncapped twin under the same load:

- IOPS and bytes/s capped at once (the `dual-capped` kind, the default cloud volume scaled to a lab host), under
  16 KiB random reads and 1 MiB reads taking turns every 30 s at queue depth 32;
- bytes/s capped, under 4 KiB random reads and 256 KiB reads taking turns every 20 s, at queue depth 128 and 32.

Real fio runs inside the lab disk's cgroup (an application's load, not a fioscope job: the any-workload alert), real
node_exporter, Prometheus with the project's rules at their default windows and `for:` durations, and Alertmanager
delivering to a webhook; scrapes and evaluations every 5 s and every 15 s (the stack's default): one lab disk per shape,
watched by both stacks at once. Each capped disk must have FioscopeDiskThrottled firing by its stack's deadline
(40 s after load start at 5 s scrapes, 100 s at 15 s), naming its ceilings near the caps, and at the webhook the page's
group_wait (`stack.alertmanager_page_group_wait`, 1 s) and Prometheus's send later at most; each twin stays silent. Run with -s for the figures (seconds from load start to firing and to the
webhook, the description).

The shapes run side by side with the other lab scenarios (tests/helpers/scenarios.py): the capped disks at once; the
twins, whose uncapped 4 KiB phases take a core each (two cores cannot drive them beside the caps: the 4 KiB phases
become CPU-bound and miss the cap), one at a time after the capped disks, each as long as its capped disk took to page
on both stacks and 20 s more (90 s at least). The twins are declared local hardware (thresholds.disk_cap_per_device): an
uncapped loop disk runs into this VM's own virtual disk, which *is* a provider's cap; declared physical, a twin may get
the info alert, never a page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from fioscope_mixin.settings import load_settings
from fioscope_mixin.units import parse_duration
from fioscope_testkit.prometheus import PromClient
from helpers.scenarios import (
    Scenario,
    as_long_as,
    once_paged,
    scrape_before_load,
    timeline,
    twin_of,
)

pytestmark = pytest.mark.e2e

MIB = 1048576
PAGES = ("FioscopeDiskThrottledUnderFioLoad", "FioscopeDiskThrottled", "FioscopeDiskThrottledAfterBurst", "FioscopeDiskQueueExploding")
TWIN_WATCH = 20  # the twin is watched this long past the capped disk's alert (and at least 90 s of load)
# any workload: the first alert after load start. The rules decide on four scrapes of the cap (60 s at 15 s, 20 s at
# 5 s: promtool's 60 s after an onset at a scrape); on a live stack the load starts anywhere within a scrape interval
# and each group's records reach the next group up to an evaluation later (promtool evaluates every group at one
# instant): measured 24-29 s at 5 s scrapes, 69-70 s at 15 s on Prometheus 2.42; 24-27 s and 69-70 s on 3.x (PATH with
# its prometheus first; 2026-11-28, a956fb8); a later run on 2.42 29-32 s and 82-83 s, 31-35 s and 88 s after the scrape
# before the load's first (the onset as Prometheus saw it: the groups' lag is the 28 s over promtool's 60 s). The
# deadlines leave more than a scrape for a slower machine or a later phase.
DEADLINE = {"5s": 40, "15s": 100}
# a page leaves Alertmanager after its own group_wait, and Prometheus sends it after its group's evaluation (a few s)
PAGE_SENT = parse_duration(load_settings([])["stack"]["alertmanager_page_group_wait"]) + 4
LOAD_LIMIT = 120 + 45 + TWIN_WATCH  # the longest a capped load runs waiting for its pages


def alternating(small: str, large: str, phase: int, depth: int, rounds: int) -> list[str]:
    """Small random reads and large reads (a scan) taking turns every ``phase`` seconds, over a 64 MiB file: laid out
    beside the cap just before the load, a 256 MiB file's burst stood as the device's 5-minute peak, which the capped
    load never reaches (no page: a ceiling is the most the device did lately)."""
    return [f"[{'small' if i % 2 == 0 else 'large'}{i}]\nrw={'randread' if i % 2 == 0 else 'read'}\n"
            f"bs={small if i % 2 == 0 else large}\nsize=64m\niodepth={depth}\nruntime={phase}\nstonewall\nfilename=alt.dat"
            for i in range(rounds)]


@dataclass(frozen=True)
class Shape:
    kind: str
    limits: dict
    sections: list[str]
    ceilings: dict[str, float]  # dimension the description must name -> the cap it should be near


# the bandwidth cap is 20 MiB/s (5k IOPS of 4 KiB): the twin's uncapped 4 KiB phase takes most of a core beside it
SHAPES = {
    "dual 1000 IOPS + 40 MiB/s, 16k/1M every 30 s, qd 32": Shape(
        "dual-capped", {"read_iops": 1000, "write_iops": 1000, "read_bps": 40 * MIB, "write_bps": 40 * MIB},
        alternating("16k", "1m", 30, 32, 8), {"reads": 1000, "read throughput": 40 * MIB}),
    "bandwidth 20 MiB/s, 4k/256k every 20 s, qd 128": Shape(
        "bandwidth-capped", {"read_bps": 20 * MIB, "write_bps": 20 * MIB},
        alternating("4k", "256k", 20, 128, 12), {"read throughput": 20 * MIB}),
    "bandwidth 20 MiB/s, 4k/256k every 20 s, qd 32": Shape(
        "bandwidth-capped", {"read_bps": 20 * MIB, "write_bps": 20 * MIB},
        alternating("4k", "256k", 20, 32, 12), {"read throughput": 20 * MIB}),
}
INTERVALS = ("5s", "15s")
UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB}
SCENARIOS = {
    f"envelope: {name}": Scenario(
        shape.kind, [shape.sections], LOAD_LIMIT, intervals=INTERVALS, limits=shape.limits, learn=True,
        stop=once_paged(("FioscopeDiskThrottled",), then=TWIN_WATCH, at_least=90),
        twin=Scenario("healthy", [shape.sections], LOAD_LIMIT, intervals=INTERVALS, learn=True, physical=True,
                      phase=2, alone=True, stop=as_long_as(f"envelope: {name}", "FioscopeDiskThrottled", TWIN_WATCH, 90,
                                                           LOAD_LIMIT)))
    for name, shape in SHAPES.items()}


def named_ceilings(description: str) -> dict[str, float]:
    """{dimension: value} of the ceilings a description names ("reads at ~1k/s, read throughput flat at ~40MiB/s")."""
    found = re.findall(r"((?:read |write )?throughput|reads|writes|IOPS) (?:flat )?at ~([\d.]+)(Ki|Mi|Gi|k|M|G)?B?/s", description)
    return {dim: float(value) * UNITS[unit] for dim, value, unit in found}


def fired_at(prom: PromClient, alertname: str, device: str, start: float, end: float) -> float | None:
    """When Prometheus first had the alert firing after ``start``: the oldest sample of its ALERTS series (written at each
    evaluation) in [start, end]."""
    series = prom.query(f'ALERTS{{alertname="{alertname}",alertstate="firing",device="{device}"}}[{end - start + 1:.0f}s]', at=end)
    return min((float(t) for one in series for t, _ in one["values"] if float(t) >= start), default=None)


@pytest.mark.parametrize("interval", INTERVALS)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_capped_disk_pages_naming_its_ceilings_and_its_twin_stays_silent(scenario_lab, scenario, interval):
    capped, twin = scenario_lab.finished(scenario), scenario_lab.finished(twin_of(scenario))
    shape = scenario.removeprefix("envelope: ")
    spec = SHAPES[shape]
    group_wait = parse_duration(interval)
    hit = capped.first_page(interval, ("FioscopeDiskThrottled",))
    twin_pages = [a["labels"]["alertname"] for _, a in twin.pages(interval, PAGES, twin.start, twin.end + group_wait)]
    others = sorted({a["labels"]["alertname"] for _, a in capped.pages(interval, PAGES, capped.start, capped.end + group_wait)}
                    - {"FioscopeDiskThrottled"})
    description = hit[1]["annotations"]["description"] if hit else ""
    fired = fired_at(capped.stacks[interval].prom, "FioscopeDiskThrottled", capped.disk.device_name, capped.start, capped.end)
    start = capped.start
    onset = scrape_before_load(capped.stacks[interval].prom, [capped.disk.device_name], start, capped.end)
    print(f"\n[{interval} scrapes] {shape}: " + (
        f"FioscopeDiskThrottled firing {fired - start:.0f} s after load start"
        + (f" ({fired - onset:.0f} s after the scrape before the load's first)" if onset else "")
        + f", at the webhook {hit[0] - start:.0f} s: {description}"
        if hit and fired else "no FioscopeDiskThrottled") + f" | twin ({twin.end - twin.start:.0f} s of the same load): "
        f"{', '.join(twin_pages) or 'silent'}")
    # the capped load never enters the device's normal (the slow test's yardstick): its first scrape, evaluated by the
    # baseline group before the envelope group had recorded that scrape's util, once did (a read normal of 2.7-11 ms for
    # 0.1 ms, and the reads' slow test failed at 5x)
    read_normal = f'fioscope:disk_read_await_baseline_seconds{{device="{capped.disk.device_name}"}}'
    prom = capped.stacks[interval].prom
    normal_before, normal_after = prom.value(read_normal, at=capped.start), prom.value(read_normal, at=capped.end)
    assert normal_before and normal_after and normal_after <= 1.5 * normal_before, (
        f"{shape} at {interval}: the read normal moved under the capped load: {normal_before} s at its start, {normal_after} s at its end")
    assert hit and fired, f"{shape} at {interval}: no FioscopeDiskThrottled on {capped.disk.device_name} in {capped.end - start:.0f} s\n{timeline(capped, interval)}"
    # the alert by its deadline; at the webhook the page's own group_wait later, not an evaluation's
    assert fired - start <= DEADLINE[interval], f"firing {fired - start:.0f} s after load start: {description}"
    assert hit[0] - fired <= PAGE_SENT, f"at the webhook {hit[0] - fired:.0f} s after it fired: {description}"
    named = named_ceilings(description)
    # a page names the ceilings its window saw: at 15 s scrapes the 60 s window spans both request-size phases, so every
    # cap is named; at 5 s the window is four scrapes (20 s) and the first page comes inside one phase, where one cap binds
    # (within one phase of one request size an IOPS cap and a bandwidth cap look the same: the IOPS are named)
    expected = spec.ceilings if parse_duration(interval) >= 15 else {d: c for d, c in spec.ceilings.items() if d in named}
    assert expected or named, f"no ceiling named: {description}"
    if "read throughput" not in named and "throughput" in named:
        # a read-only load with the file system's few writes: the device's throughput is its reads' (named either way)
        named["read throughput"] = named["throughput"]
    for dimension, cap in expected.items():
        assert dimension in named, f"{dimension} not named: {description}"
        assert 0.75 * cap <= named[dimension] <= 1.25 * cap, f"{dimension} named at {named[dimension]:g}, the cap is {cap:g}: {description}"
    assert not others, f"one cap, one page: {others}"
    assert not twin_pages, f"the uncapped twin paged: {twin_pages}"
    # issue 29 on a plain capped disk: the slow episode's cause is the provider's cap and nothing else (at 15 s scrapes
    # the load may stop before the cause's hold has passed: never another cause); the twin's printed
    capped_causes, twin_causes = (causes_named(prom, run.disk.device_name, loaded_from(prom, run, group_wait), run.end + group_wait)
                                  for run in (capped, twin))
    print(f"[{interval} scrapes] {shape}: causes named: capped {sorted(capped_causes) or 'none'}, twin {sorted(twin_causes) or 'none'}")
    assert capped_causes <= {"provider_cap"}, capped_causes
    if parse_duration(interval) < 15:
        assert capped_causes == {"provider_cap"}, capped_causes


def loaded_from(prom: PromClient, run, interval: float) -> float:
    """When the chain's records can first show the run's load: two evaluations after its first scrape (the iostat
    group's records, then the cause group's, each group at its own offset). Before, the device carried the learning
    phase's light load (50 reads/s), which on a CPU the session starves is a wait above the disk, rightly (CI, CPU
    pressure 65 %: named on every lightly loaded lab disk at once, up to the evaluation after the capped load's launch)."""
    before = scrape_before_load(prom, [run.disk.device_name], run.start, run.end, min_rate=200)
    return run.start if before is None else before + 3 * interval


def causes_named(prom: PromClient, device: str, start: float, end: float) -> set[str]:
    """The causes ``fioscope:disk_slow_cause`` named for ``device`` at any evaluation in [start, end]."""
    return {s["metric"]["cause"] for s in prom.query(f'fioscope:disk_slow_cause{{device="{device}"}}[{end - start + 1:.0f}s]', at=end)}


@pytest.mark.beside_scenarios
def test_named_ceilings_reads_the_descriptions_units():
    """The parser the end-to-end checks rely on: humanize's k and humanize1024's MiB."""
    got = named_ceilings("loop3 on local is throttled at its provider's cap: read throughput at ~40MiB/s, reads at ~1k/s (no limit "
                         "declared)")
    assert got == {"read throughput": 40 * MIB, "reads": 1000}
    assert named_ceilings("writes flat at ~299.5/s, throughput flat at ~17.78MiB/s") == {"writes": 299.5, "throughput": 17.78 * MIB}
