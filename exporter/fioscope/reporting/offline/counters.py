"""The series the temporary Prometheus serves: node_exporter's counters with ``job="node"``,
``instance="iostat:<host>"``, ``host=<host>``, and the fio runs' series.

Counters are built once: a capture's are the kernel's, as counted (``fioscope capture`` hands them over, a bundle keeps
them). A plain iostat file has rates only: each interval is turned back into the counters it was computed from
(``counter_points``, fioscope_mixin.columns); a rate is constant within an interval, so an interval longer than
``MAX_SAMPLE_GAP`` gets interpolated counter samples at each evaluation instant in it and half a rate window before
(the rules' ``rate(...[1m])`` always see two).
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from fioscope_mixin import columns
from fioscope_mixin.columns import CPU_MODES

from ..timeline import Points
from .load import DISK_COUNTERS, DISK_TIME_COUNTERS, RATE_WINDOW, FioRate, FioRun, IostatCapture, IostatSample, KernelSamples

MAX_SAMPLE_GAP = 20.0  # a longer interval gets interpolated counter samples (rate windows of 1m see >= 2)
MIN_GRID_STEP = 15.0  # the stack's evaluation interval (alerts/config.yaml); coarser for long captures
READ_SLACK = 0.002  # seconds between a counter's read and the iostat timestamp written from it (whole ms)
COUNTER_OF = {c.series: c.counter for c in columns.DISK}  # node_exporter series -> the kernel counter (DiskCounters' field)


@dataclass
class Grid:
    """The instants the rules are evaluated at: ``start + i * step``."""

    start: float
    step: float


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _steps(prev: float, now: float, grid: Grid) -> list[float]:
    """Times at which to write a counter sample for the interval (prev, now]: its end, and where it is
    long, at each evaluation instant in it and half a rate window before (so every ``rate(...[1m])``
    the rules evaluate sees two samples): the points written are bounded by the grid, not the gap."""
    if now - prev <= MAX_SAMPLE_GAP:
        return [now]
    half = min(RATE_WINDOW / 2, grid.step / 2)
    first = math.floor((prev - grid.start) / grid.step) + 1
    out = {now}
    g = grid.start + first * grid.step
    while g < now:
        out.update(x for x in (g - half, g) if prev < x < now)
        g += grid.step
    return sorted(out)


def counter_points(capture: IostatCapture, grid: Grid,
                   kernel: KernelSamples | None = None) -> Iterator[tuple[str, str, list[tuple[float, float]]]]:
    """(metric name, label text, [(t, counter value)]), one metric at a time: the kernel's own counters where the
    capture has them (``kernel``: ``fioscope capture``'s samples of its host), else rebuilt from the per-interval rates
    of an iostat file (the only input without counters).

    Either way the points are written at the same instants. A sample covers ``interval`` seconds before its timestamp.
    Where that does not start at the previous sample of its series: after a gap the counter restarts flat (nothing is
    made up for the gap); after a report left out for a bad value (less than a rate window) the next report's rate
    covers both."""
    base = {"job": "node", "instance": f"iostat:{capture.host}", "host": capture.host}
    samples = capture.samples
    first_interval = next((s.interval for s in samples if s.interval > 0), 10.0)
    spans = [(s.timestamp - (s.interval or first_interval), s.timestamp) for s in samples]
    steps = [_steps(a, b, grid) for a, b in spans]

    def instants(present: Iterable[int]) -> Iterator[tuple[int, float, float]]:
        """(sample, instant, seconds of the sample's rate that end at the instant: 0 where a stretch starts flat)."""
        end = None
        for i in present:
            a, b = spans[i]
            ts = steps[i]
            if end is not None and end + 1e-6 < a <= end + RATE_WINDOW:
                a, ts = end, _steps(end, b, grid)  # a report left out (a bad value): the next one's rate stands in for it
            elif end is None or a > end + 1e-6:
                yield i, a, 0.0
            share = (b - a) / len(ts)
            for t in ts:
                yield i, t, share
            end = b

    def series(rates: Iterable[tuple[int, float]]) -> list[tuple[float, float]]:
        rate = dict(rates)
        points: list[tuple[float, float]] = []
        value = 0.0
        for i, t, share in instants(rate):
            value += rate[i] * share
            points.append((t, value))
        return points

    devices = sorted({d for s in samples for d in s.disks})
    if kernel is not None:
        yield from _kernel_points(kernel, base, devices, samples, instants)
        return
    for name, (col, scale) in DISK_COUNTERS.items():
        for device in devices:
            yield name, _labels(**base, device=device), series(
                (i, s.disks[device].get(col, 0.0) / scale) for i, s in enumerate(samples) if device in s.disks)
    for name, (await_col, rate_col) in DISK_TIME_COUNTERS.items():
        scale = columns.BY_COLUMN[await_col].scale
        for device in devices:
            yield name, _labels(**base, device=device), series(
                (i, s.disks[device].get(await_col, 0.0) / scale * s.disks[device].get(rate_col, 0.0))
                for i, s in enumerate(samples) if device in s.disks)
    for mode in CPU_MODES:
        yield columns.CPU_SERIES, _labels(**base, cpu="all", mode=mode), series(
            (i, s.cpu[mode] / 100) for i, s in enumerate(samples) if s.cpu)


def _kernel_points(kernel: KernelSamples, base: dict[str, str], devices: list[str], samples: list[IostatSample],
                   instants: Callable[[Iterable[int]], Iterator[tuple[int, float, float]]]) -> Iterator[tuple[str, str, Points]]:
    """``counter_points`` from the kernel's counters, as counted (``_valued``)."""
    for name in (*DISK_COUNTERS, *DISK_TIME_COUNTERS):
        counter = COUNTER_OF[name]
        for device in devices:
            # a counter the capture does not read (merges, discards, flushes) stays 0, as an iostat file's missing column
            read = [(t, float(getattr(disks[device], counter, 0.0))) for t, disks, _ in kernel if device in disks]
            yield name, _labels(**base, device=device), _valued(
                instants(i for i, s in enumerate(samples) if device in s.disks), read)
    tick = 1 / os.sysconf("SC_CLK_TCK")  # /proc/stat counts in USER_HZ ticks; node_exporter in seconds
    for mode in CPU_MODES:
        read = [(t, cpu[mode] * tick) for t, _, cpu in kernel if cpu]
        yield columns.CPU_SERIES, _labels(**base, cpu="all", mode=mode), _valued(instants(i for i, s in enumerate(samples) if s.cpu), read)


def _valued(instants: Iterable[tuple[int, float, float]], read: Points) -> Points:
    """The instants of a series valued from its counter's reads: where a stretch starts, the counter then; at a sample's
    end, the counter read then; the instants inside a long sample share its growth equally, as ``counter_points``
    shares a rate (the two ways write the same instants, moving alike but for iostat.json's rounding)."""
    points: Points = []
    for _, group in itertools.groupby(instants, key=lambda x: x[0]):
        steps = []
        for _, t, share in group:
            if share:
                steps.append(t)
            else:
                points.append((t, _value_at(read, t)))
        before, after = points[-1][1], _value_at(read, steps[-1])
        points += [(t, before + (after - before) * k / len(steps)) for k, t in enumerate(steps[:-1], 1)]
        points.append((steps[-1], after))
    return points


def _value_at(read: Points, t: float) -> float:
    """A counter at ``t`` from its reads [(t, value)] in time order: the read at ``t`` (within READ_SLACK: an iostat
    file's timestamps are whole milliseconds), else the straight line through the reads around it."""
    if not read:
        return 0.0
    i = bisect.bisect_left(read, (t - READ_SLACK,))
    if i < len(read) and abs(read[i][0] - t) <= READ_SLACK:
        return read[i][1]
    if len(read) == 1:
        return read[0][1]
    # before the first read (the first interval is taken as long as the next, as iostat's first report): its line
    (t0, v0), (t1, v1) = read[min(max(i, 1), len(read) - 1) - 1], read[min(max(i, 1), len(read) - 1)]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def counter_series(capture: IostatCapture, grid: Grid | None = None) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """metric name -> label text -> [(t, counter value)] (``counter_points`` as one mapping)."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for name, labels, points in counter_points(capture, grid or Grid(capture.samples[0].timestamp, MIN_GRID_STEP)):
        if points:
            out.setdefault(name, {})[labels] = points
    return out


def fio_labels(host: str, target: str, device: str, jobname: str) -> dict[str, str]:
    """A fio job's labels as the stack's exporter has them (docs/contracts.md section 1), without ``hostname``: the
    run's series and its live rates join on them."""
    return {"job": "fioscope", "instance": f"fioscope:{host}", "host": host, "jobname": jobname, "target": target, "device": device}


def fio_rate_series(rates: list[FioRate], host: str) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """``fio_bandwidth_bytes_per_second`` at each status report, as the exporter shows it while the job runs."""
    out: dict[str, list[tuple[float, float]]] = {}
    for rate in sorted(rates, key=lambda r: r.t):
        for ddir, value in rate.bytes_per_second.items():
            out.setdefault(_labels(**fio_labels(host, rate.target, rate.device, rate.jobname), ddir=ddir), []).append((rate.t, value))
    return {"fio_bandwidth_bytes_per_second": out} if out else {}


def fio_series(runs: list[FioRun], host: str, start: float, end: float,
               times: list[float] | None = None) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """``times``: where to write the series (default every 5 s from start to end; offline: where iostat has data)."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    times = times if times is not None else [start + i * 5.0 for i in range(int((end - start) // 5.0) + 1)]
    for run in runs:
        base = fio_labels(host, run.target, run.device, run.jobname)
        # two runs of one profile share their labels: one series, 1 wherever either ran (not two interleaved series)
        running = out.setdefault("fio_run_running", {}).setdefault(_labels(**base), [(t, 0.0) for t in times])
        running[:] = [(t, 1.0 if v or run.start <= t <= run.end else 0.0) for t, v in running]
        after = [t for t in times if t >= run.end]
        for ddir, p99 in run.clat_p99.items():
            clat_series = _labels(**base, ddir=ddir, stage="clat", quantile="0.99")
            out.setdefault("fio_run_latency_seconds", {})[clat_series] = [(t, p99) for t in after]
        # the run's median completion latency while it runs, as the exporter's live figures give it (from the final
        # result, not a live one): what the wait-above-disk cause compares with the device's await
        during = [t for t in times if run.start <= t <= run.end]
        for ddir, p50 in run.clat_p50.items():
            median_series = _labels(**base, ddir=ddir, stage="clat", quantile="0.5")
            medians = out.setdefault("fio_run_latency_seconds", {}).setdefault(median_series, [])
            medians[:] = sorted([*medians, *((t, p50) for t in during)])
        if run.sla_seconds:
            out.setdefault("fio_sla_latency_seconds", {})[_labels(**base)] = [(t, run.sla_seconds) for t in after]
        if run.fsync_p99 is not None:
            out.setdefault("fio_run_latency_seconds", {})[_labels(**base, ddir="sync", stage="lat", quantile="0.99")] = \
                [(t, run.fsync_p99) for t in times if t >= run.end]
    up = out.setdefault("up", {})
    for job in ("node", "fioscope"):
        up[_labels(job=job, instance=f"{job}:{host}", host=host)] = [(t, 1.0) for t in times]
    return out


Family = dict[str, dict[str, list[tuple[float, float]]]]  # metric name -> label text -> [(t, value)]


def merged(families: Iterable[Family]) -> Family:
    out: Family = {}
    for family in families:
        for name, series in family.items():
            out.setdefault(name, {}).update(series)
    return out
