"""Disk and CPU timelines at the data's own resolution, in iostat's own units.

Three sources give the same shape: an ``iostat -x -o JSON`` file (every sample at the
interval it was taken), kernel counters sampled by ``fioscope capture`` (``/proc/diskstats``,
``/proc/stat``) and node_exporter's raw counter samples from a live Prometheus (one point per
scrape). Counters become iostat's columns by the formulas iostat itself uses, per interval
between two samples: no 1-minute rate windows, so a 30 s load shows where it ran.

A long window is downsampled by keeping, per bucket, the sample with the minimum and the one
with the maximum (peaks survive); ``Timeline.downsampled`` says so for the report.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

from fioscope_mixin.columns import BY_COLUMN, CPU_MODES, IOSTAT_JSON_DISK, MERGED_SHARE, REQUEST_SIZE, reported, tracked

# the iostat columns the reports draw, as iostat prints them (report.json uses exactly these names and units): the
# column table's (fioscope_mixin.columns: each column's counter, kernel field, node_exporter series, place, chart, unit)
COLUMNS = reported()
# a timeline carries these too: the phase table's merges (request sizes follow from rkB/s and r/s per phase)
TRACKED = tracked()
# the counters behind TRACKED (what a live diagnosis asks node_exporter for)
TRACKED_COUNTERS = tuple(dict.fromkeys(n for c in TRACKED for n in (BY_COLUMN[c].counter, BY_COLUMN[c].per) if n))
MAX_POINTS = 1500  # per series; beyond it min/max buckets

Points = list[tuple[float, float]]


@dataclass
class Timeline:
    """One device's iostat columns over time: column -> [(unix seconds, value)]."""

    host: str
    device: str
    series: dict[str, Points] = field(default_factory=dict)
    interval: float = 0.0  # seconds between samples (median)
    downsampled: bool = False

    def values(self, column: str) -> Points:
        return self.series.get(column, [])

    def iops(self) -> Points:
        """r/s + w/s per sample."""
        return [(t, r + w) for (t, r), (_, w) in zip(self.values("r/s"), self.values("w/s"))]


@dataclass
class CpuTimeline:
    host: str
    series: dict[str, Points] = field(default_factory=dict)  # mode -> percent


@dataclass
class DiskCounters:
    """The kernel counters behind iostat -x's columns (cumulative), in base units; the names are fioscope_mixin.columns's.
    Those past COLUMNS' default to 0 (a source without them: iostat prints 0 for a counter the kernel lacks)."""

    reads: float
    writes: float
    read_bytes: float
    write_bytes: float
    read_seconds: float  # time reads spent (sum over requests)
    write_seconds: float
    io_seconds: float  # time the device had I/O in flight (%util)
    weighted_seconds: float  # time-weighted requests in flight (aqu-sz)
    read_merges: float = 0.0
    write_merges: float = 0.0
    discards: float = 0.0
    discard_merges: float = 0.0
    discard_sectors: float = 0.0
    discard_seconds: float = 0.0
    flushes: float = 0.0
    flush_seconds: float = 0.0

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


def _median_gap(times: Sequence[float]) -> float:
    gaps = sorted(b - a for a, b in itertools.pairwise(times) if b > a)
    return gaps[len(gaps) // 2] if gaps else 0.0


def iostat_columns(before: DiskCounters, after: DiskCounters, seconds: float,
                   wanted: Sequence[str] = COLUMNS) -> dict[str, float] | None:
    """iostat -x's columns (``wanted``: counter columns of fioscope_mixin.columns) for one interval; None where a counter
    went backwards (a reset)."""
    d = {k: getattr(after, k) - getattr(before, k) for k in DiskCounters.fields()}
    if seconds <= 0 or any(v < 0 for v in d.values()):
        return None
    out = {}
    for column in wanted:
        c = BY_COLUMN[column]
        if c.per:  # an await: 0.00 without a completion, as iostat prints it
            out[column] = d[c.counter] * c.scale / d[c.per] if d[c.per] else 0.0
        else:
            out[column] = d[c.counter] * c.scale / seconds
    if "util" in out:
        out["util"] = min(100.0, out["util"])  # the kernel's busy time may overrun a short interval by a tick
    return out


def ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def iostat_row(before: DiskCounters, after: DiskCounters, seconds: float) -> dict[str, float] | None:
    """One disk entry of ``iostat -x -o JSON`` for one interval: every column, in iostat's order; None on a reset."""
    cols = iostat_columns(before, after, seconds, [c for c in IOSTAT_JSON_DISK if c in BY_COLUMN])
    if cols is None:
        return None
    cols.update({name: ratio(cols[kb], cols[n]) for name, (kb, n) in REQUEST_SIZE.items()})
    cols.update({name: 100 * ratio(cols[m], cols[m] + cols[n]) for name, (m, n) in MERGED_SHARE.items()})
    return {c: cols[c] for c in IOSTAT_JSON_DISK}


def from_counters(host: str, device: str, samples: Sequence[tuple[float, DiskCounters]], min_interval: float = 0.0) -> Timeline:
    """Per-interval iostat columns from cumulative counters; each point is stamped at its interval's end.

    ``min_interval``: an interval spans as many samples as it takes to last that long. A scrape's
    timestamp is when Prometheus started it, not when node_exporter read the counters; on a busy
    host that gap varies by a tenth of a second, a 10 % error on a 1 s interval, 5 % on 2 s."""
    kept: list[tuple[float, DiskCounters]] = []
    for t, c in samples:
        if not kept or t - kept[-1][0] >= min_interval - 1e-6:
            kept.append((t, c))
    timeline = Timeline(host, device, {c: [] for c in TRACKED}, _median_gap([t for t, _ in kept]))
    for (t0, c0), (t1, c1) in itertools.pairwise(kept):
        columns = iostat_columns(c0, c1, t1 - t0, TRACKED)
        if columns is not None:
            for name, value in columns.items():
                timeline.series[name].append((t1, value))
    return timeline


def cpu_from_counters(host: str, samples: Sequence[tuple[float, dict[str, float]]]) -> CpuTimeline:
    """avg-cpu percentages from cumulative per-mode CPU seconds (or ticks: only ratios count)."""
    out = CpuTimeline(host, {m: [] for m in CPU_MODES})
    for (_, a), (t1, b) in itertools.pairwise(samples):
        deltas = {m: b.get(m, 0.0) - a.get(m, 0.0) for m in set(a) | set(b)}
        total = sum(deltas.values())
        if total <= 0 or any(v < 0 for v in deltas.values()):
            continue
        for mode in CPU_MODES:
            out.series[mode].append((t1, 100 * deltas.get(mode, 0.0) / total))
    return out


def downsample(points: Points, max_points: int = MAX_POINTS) -> Points:
    """At most ``max_points``: per bucket the minimum and the maximum sample, in time order."""
    if len(points) <= max_points:
        return list(points)
    buckets = max(1, max_points // 2)
    size = len(points) / buckets
    out: Points = []
    for i in range(buckets):
        chunk = points[int(i * size):int((i + 1) * size)]
        if chunk:
            low, high = min(chunk, key=lambda p: p[1]), max(chunk, key=lambda p: p[1])
            out += sorted({low, high})
    return out


def too_long(timeline: Timeline, max_points: int = MAX_POINTS) -> bool:
    """Whether ``limit`` downsamples it."""
    return any(len(p) > max_points for p in timeline.series.values())


def limit(timeline: Timeline, max_points: int = MAX_POINTS) -> Timeline:
    """The timeline as drawn: downsampled (min/max per bucket) where it is longer than ``max_points``."""
    if not too_long(timeline, max_points):
        return timeline
    return Timeline(timeline.host, timeline.device, {c: downsample(p, max_points) for c, p in timeline.series.items()},
                    timeline.interval, downsampled=True)


def from_iostat_samples(host: str, samples: Iterable[tuple[float, dict[str, dict[str, float]]]],
                        wanted: Sequence[str] = TRACKED) -> list[Timeline]:
    """iostat's own figures, sample by sample: ``samples`` is [(t, {device: {column: value}})]; ``wanted``: the column
    table's tracked ones."""
    by_device: dict[str, Timeline] = {}
    times = []
    for t, disks in samples:
        times.append(t)
        for device, columns in disks.items():
            timeline = by_device.setdefault(device, Timeline(host, device, {c: [] for c in wanted}))
            for column in wanted:
                if column in columns:
                    timeline.series[column].append((t, float(columns[column])))
    gap = _median_gap(times)
    for timeline in by_device.values():
        timeline.interval = gap
    return [by_device[d] for d in sorted(by_device)]
