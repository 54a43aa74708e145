"""End-to-end: the throttling envelope on lab disks at the scrape intervals users run (root; `pytest -m e2e -s`).

The cases of the envelope issue, each a capped lab disk and an uncapped twin under the same load:

- IOPS and bytes/s capped at once (the `dual-capped` kind, the default cloud volume scaled to a lab host), under
  16 KiB random reads and 1 MiB reads taking turns every 30 s at queue depth 32;
- bytes/s capped, under 4 KiB random reads and 256 KiB reads taking turns every 20 s, at queue depth 128 and 32.

Real fio runs inside the lab disk's cgroup (an application's load, not a fioscope job: the any-workload alert), real
node_exporter, Prometheus with the project's rules at their default windows and `for:` durations, and Alertmanager
delivering to a webhook; scrapes and evaluations every 5 s, then every 15 s (the stack's default). Each capped disk must
have FioscopeDiskThrottled firing within two minutes of load start, naming its ceilings near the caps, and at the webhook
Alertmanager's group_wait (the evaluation interval) later at most; each twin stays silent. Run with -s for the figures
(seconds from load start to firing and to the webhook, the description).

The pairs run one after another: two cores cannot drive six loop disks at once (the 4 KiB phases become CPU-bound and
miss the cap). The twins are declared local hardware (thresholds.disk_cap_per_device): an uncapped loop disk runs into
this VM's own virtual disk, which *is* a provider's cap; declared physical, a twin may get the info alert, never a page.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from fioscope_mixin.units import parse_duration
from helpers.lab import (
    Webhook,
    e2e_overrides,
    fio_in_cgroup,
    fio_job,
    lab_disks,
    lab_lock,
    lay_out,
    require_root_lab,
    started,
    stop_fio,
    webhook_receiver,
)
from helpers.native_stack import NativeStack
from helpers.net import wait_for
from helpers.prometheus import PromClient
from helpers.results import config_with_targets

pytestmark = pytest.mark.e2e

MIB = 1048576
PAGES = ("FioscopeDiskThrottledUnderFioLoad", "FioscopeDiskThrottled", "FioscopeDiskThrottledAfterBurst", "FioscopeDiskQueueExploding")
DEADLINE = 120  # any workload: first alert within two minutes of onset
TWIN_WATCH = 20  # the twin is watched this long past the capped disk's alert (and at least 90 s of load)


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
INTERVALS = ["5s", "15s"]
FIGURES: list[str] = []
UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB}


def named_ceilings(description: str) -> dict[str, float]:
    """{dimension: value} of the ceilings a description names ("reads at ~1k/s, read throughput flat at ~40MiB/s")."""
    found = re.findall(r"((?:read |write )?throughput|reads|writes|IOPS) (?:flat )?at ~([\d.]+)(Ki|Mi|Gi|k|M|G)?B?/s", description)
    return {dim: float(value) * UNITS[unit] for dim, value, unit in found}


@pytest.fixture(scope="module", params=INTERVALS)
def envelope_lab(request, tmp_path_factory):
    """Every shape's capped disk and its uncapped twin, and the native stack watching them at one scrape interval.
    Yields (interval, {shape: (capped disk, twin)}, webhook, PromClient)."""
    require_root_lab()
    interval, tmp = request.param, tmp_path_factory.mktemp(f"envelope-{request.param}")
    with lab_lock(), lab_disks(tmp / "lab") as up, webhook_receiver() as webhook:
        try:
            pairs = {name: (up(shape.kind, f"env-{interval}-{i}", **shape.limits), up("healthy", f"env-{interval}-{i}-twin"))
                     for i, (name, shape) in enumerate(SHAPES.items())}
            disks = [d for pair in pairs.values() for d in pair]
            config = config_with_targets(tmp / "fioscope.yaml", [{"name": d.name, "directory": d.mountpoint} for d in disks])
            settings = [f"stack.scrape_interval={interval}", f"stack.evaluation_interval={interval}", "stack.rate_window=1m",
                        "stack.alertmanager_group_interval=5s",
                        # the device's normal from 20 s averages (not 1 min): a fresh stack learns it sooner
                        "thresholds.throttle.baseline_interval=20s",
                        *[f"thresholds.disk_cap_per_device.{twin.device_name}=physical" for _, twin in pairs.values()]]
            overrides = e2e_overrides(webhook.url, rate_window="1m", extra=settings)
            with started(NativeStack(tmp / "stack", overrides, fioscope_config=config)) as stack:
                prom = PromClient(stack.url("prometheus"))
                learn_normals(prom, disks, tmp)
                yield interval, pairs, webhook, prom
        finally:
            if request.param == INTERVALS[-1]:
                print("\n" + "\n".join(FIGURES))


def learn_normals(prom: PromClient, disks, tmp: Path) -> None:
    """A light random-read load (50/s, one in flight) on every disk until each has its reads' normal await. A device
    without one is judged by the absolute floor instead (10 ms)."""
    light = []
    try:
        for d in disks:
            job = fio_job(tmp / f"light-{d.name}.fio", d.mountpoint,
                          ["[light]\nrw=randread\nbs=4k\nsize=64m\niodepth=1\nrate_iops=50\nruntime=600\nfilename=light.dat"])
            lay_out(job)
            light.append(fio_in_cgroup(d.cgroup, job))
        devices = "|".join(d.device_name for d in disks)
        # the loads below are reads: their await is judged against the reads' normal
        wait_for(lambda: len(prom.query(f'fioscope:disk_read_await_baseline_seconds{{device=~"{devices}"}}')) == len(disks), 240,
                 interval=2, what="every lab disk's normal read await")
    finally:
        for proc in light:
            stop_fio(proc)


def fired_at(prom: PromClient, alertname: str, device: str) -> float | None:
    """When Prometheus first had the alert firing: the oldest sample of its ALERTS series (written at each evaluation)."""
    series = prom.query(f'ALERTS{{alertname="{alertname}",alertstate="firing",device="{device}"}}[15m]')
    return min((float(t) for one in series for t, _ in one["values"]), default=None)


def first_page(webhook: Webhook, device: str, names=PAGES) -> tuple[float, dict] | None:
    return next(((when, a) for when, a in webhook.received
                 if a["labels"].get("alertname") in names and a["labels"].get("device") == device), None)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_capped_disk_pages_naming_its_ceilings_and_its_twin_stays_silent(envelope_lab, shape):
    interval, pairs, webhook, prom = envelope_lab
    capped, twin = pairs[shape]
    spec = SHAPES[shape]
    jobs = []
    for disk in (capped, twin):
        job = fio_job(Path(disk.state_dir) / "load.fio", disk.mountpoint, spec.sections)
        lay_out(job)
        jobs.append(job)
    start = time.time()
    loads = [fio_in_cgroup(disk.cgroup, job) for disk, job in zip((capped, twin), jobs)]
    try:
        hit = None
        while time.time() - start < DEADLINE + 45 and hit is None:
            hit = first_page(webhook, capped.device_name, ("FioscopeDiskThrottled",))
            time.sleep(0.5)
        until = max(start + 90, (hit[0] if hit else time.time()) + TWIN_WATCH)
        while time.time() < until:
            time.sleep(0.5)
    finally:
        for proc in loads:
            stop_fio(proc)
    twin_pages = [a["labels"]["alertname"] for _, a in webhook.received
                  if a["labels"].get("device") == twin.device_name and a["labels"]["alertname"] in PAGES]
    others = sorted({a["labels"]["alertname"] for _, a in webhook.received
                     if a["labels"].get("device") == capped.device_name and a["labels"]["alertname"] in PAGES}
                    - {"FioscopeDiskThrottled"})
    description = hit[1]["annotations"]["description"] if hit else ""
    fired = fired_at(prom, "FioscopeDiskThrottled", capped.device_name)
    FIGURES.append(f"[{interval} scrapes] {shape}: " + (
        f"FioscopeDiskThrottled firing {fired - start:.0f} s after load start, at the webhook {hit[0] - start:.0f} s: {description}"
        if hit and fired else "no FioscopeDiskThrottled") + f" | twin: {', '.join(twin_pages) or 'silent'}")
    assert hit and fired, f"{shape} at {interval}: no FioscopeDiskThrottled on {capped.device_name} in {DEADLINE + 45} s"
    # the alert within two minutes; the page after Alertmanager's group_wait (the evaluation interval) more
    assert fired - start <= DEADLINE, f"firing {fired - start:.0f} s after load start: {description}"
    assert hit[0] - start <= DEADLINE + parse_duration(interval), f"{hit[0] - start:.0f} s to the webhook: {description}"
    named = named_ceilings(description)
    for dimension, cap in spec.ceilings.items():
        assert dimension in named, f"{dimension} not named: {description}"
        assert 0.75 * cap <= named[dimension] <= 1.25 * cap, f"{dimension} named at {named[dimension]:g}, the cap is {cap:g}: {description}"
    assert not others, f"one cap, one page: {others}"
    assert not twin_pages, f"the uncapped twin paged: {twin_pages}"


def test_named_ceilings_reads_the_descriptions_units():
    """The parser the end-to-end checks rely on: humanize's k and humanize1024's MiB."""
    got = named_ceilings("loop3 on local is throttled at its provider's cap: read throughput at ~40MiB/s, reads at ~1k/s (no limit "
                         "declared)")
    assert got == {"read throughput": 40 * MIB, "reads": 1000}
    assert named_ceilings("writes flat at ~299.5/s, throughput flat at ~17.78MiB/s") == {"writes": 299.5, "throughput": 17.78 * MIB}
