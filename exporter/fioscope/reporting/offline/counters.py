"""The series the temporary Prometheus serves: node_exporter's counters with ``job="node"``,
``instance="iostat:<host>"``, ``host=<host>``, and the fio runs' series.

A plain iostat file has rates only: each interval is turned back into the counters it was computed from
(``counter_points``, fioscope_mixin.columns); a rate is constant within an interval, so an interval longer than
``MAX_SAMPLE_GAP`` gets interpolated counter samples at each evaluation instant in it and half a rate window before
(the rules' ``rate(...[1m])`` always see two).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from fioscope_mixin import columns
from fioscope_mixin.columns import CPU_MODES

from .load import DISK_COUNTERS, DISK_TIME_COUNTERS, RATE_WINDOW, FioRun, IostatCapture

MAX_SAMPLE_GAP = 20.0  # a longer interval gets interpolated counter samples (rate windows of 1m see >= 2)
MIN_GRID_STEP = 15.0  # the stack's evaluation interval (alerts/config.yaml); coarser for long captures


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


def counter_points(capture: IostatCapture, grid: Grid) -> Iterator[tuple[str, str, list[tuple[float, float]]]]:
    """(metric name, label text, [(t, counter value)]) rebuilt from the per-interval rates, one metric at a time.

    A sample covers ``interval`` seconds before its timestamp. Where that does not start at the previous
    sample of its series: after a gap the counter restarts flat (nothing is made up for the gap); after a
    report left out for a bad value (less than a rate window) the next report's rate covers both."""
    base = {"job": "node", "instance": f"iostat:{capture.host}", "host": capture.host}
    samples = capture.samples
    first_interval = next((s.interval for s in samples if s.interval > 0), 10.0)
    spans = [(s.timestamp - (s.interval or first_interval), s.timestamp) for s in samples]
    steps = [_steps(a, b, grid) for a, b in spans]

    def series(rates: Iterable[tuple[int, float]]) -> list[tuple[float, float]]:
        points: list[tuple[float, float]] = []
        value, end = 0.0, None
        for i, rate in rates:
            a, b = spans[i]
            ts = steps[i]
            if end is not None and end + 1e-6 < a <= end + RATE_WINDOW:
                a, ts = end, _steps(end, b, grid)  # a report left out (a bad value): the next one's rate stands in for it
            elif end is None or a > end + 1e-6:
                points.append((a, value))
            share = (b - a) / len(ts)
            for t in ts:
                value += rate * share
                points.append((t, value))
            end = b
        return points

    devices = sorted({d for s in samples for d in s.disks})
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


def counter_series(capture: IostatCapture, grid: Grid | None = None) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """metric name -> label text -> [(t, counter value)] (``counter_points`` as one mapping)."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for name, labels, points in counter_points(capture, grid or Grid(capture.samples[0].timestamp, MIN_GRID_STEP)):
        if points:
            out.setdefault(name, {})[labels] = points
    return out


def fio_series(runs: list[FioRun], host: str, start: float, end: float,
               times: list[float] | None = None) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """``times``: where to write the series (default every 5 s from start to end; offline: where iostat has data)."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    times = times if times is not None else [start + i * 5.0 for i in range(int((end - start) // 5.0) + 1)]
    for run in runs:
        base = {"job": "fioscope", "instance": f"fioscope:{host}", "host": host, "jobname": run.jobname,
                "target": run.target, "device": run.device}
        # two runs of one profile share their labels: one series, 1 wherever either ran (not two interleaved series)
        running = out.setdefault("fio_run_running", {}).setdefault(_labels(**base), [(t, 0.0) for t in times])
        running[:] = [(t, 1.0 if v or run.start <= t <= run.end else 0.0) for t, v in running]
        after = [t for t in times if t >= run.end]
        for ddir, p99 in run.clat_p99.items():
            clat_series = _labels(**base, ddir=ddir, stage="clat", quantile="0.99")
            out.setdefault("fio_run_latency_seconds", {})[clat_series] = [(t, p99) for t in after]
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
