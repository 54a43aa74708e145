"""Performance report: the response curve of every workload in a results directory.

The usable maximum is read off the curve as storage engineers do: the *knee* is the last
point before latency starts to climb steeply — the first step (to the next queue depth) where
mean latency grows by more than ``STEEP_FACTOR`` times as much as throughput, and by at least
``STEEP_MIN_RISE`` — and, beside it, the first point reaching ``PEAK_SHARE`` (70 %) of the peak throughput.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..thresholds import Thresholds
from . import humanize
from .charts import response_chart, uses_bandwidth
from .fsync import fsync_verdicts
from .html import Report, Section, Table, Verdict
from .results import Point, Sample, Workload, curves, skipped_lines

STEEP_FACTOR = 2.0  # latency grows at least twice as fast as throughput ...
STEEP_MIN_RISE = 0.2  # ... and by at least 20 % in one step
PEAK_SHARE = 0.7
PEAK_LABEL = f"{PEAK_SHARE:.0%} of peak".replace("%", " %")  # "70 % of peak": the verdict and the chart mark


@dataclass
class CurveFacts:
    knee: Point
    peak: Point
    at_70: Point
    meets_target: Point | None


def throughput(p: Point, bandwidth: bool) -> float:
    return p.bw if bandwidth else p.iops


def is_steep(before: Point, after: Point, bandwidth: bool) -> bool:
    gain = throughput(after, bandwidth) / max(throughput(before, bandwidth), 1e-12) - 1
    rise = after.lat_mean / max(before.lat_mean, 1e-12) - 1
    return rise >= STEEP_MIN_RISE and rise > STEEP_FACTOR * max(gain, 0.0)


def knee(points: list[Point], bandwidth: bool) -> Point:
    for before, after in itertools.pairwise(points):
        if is_steep(before, after, bandwidth):
            return before
    return points[-1]


def facts(points: list[Point], bandwidth: bool, latency_target: float | None) -> CurveFacts:
    peak = max(points, key=lambda p: throughput(p, bandwidth))
    at_70 = next(p for p in points if throughput(p, bandwidth) >= PEAK_SHARE * throughput(peak, bandwidth))
    meeting = [p for p in points if latency_target and p.lat_p99 <= latency_target]
    best = max(meeting, key=lambda p: throughput(p, bandwidth)) if meeting else None
    return CurveFacts(knee(points, bandwidth), peak, at_70, best)


def fmt_point(p: Point, bandwidth: bool) -> str:
    rate = humanize.mib_per_s(p.bw) if bandwidth else humanize.count(p.iops, "IOPS")
    return f"qd {p.depth}: {rate} at mean {humanize.latency(p.lat_mean)}, p99 {humanize.latency(p.lat_p99)}"


def point_table(points: list[Point]) -> Table:
    rows = [[str(p.depth), str(p.repeats), f"{humanize.count(p.iops)} ± {humanize.count(p.iops_sd)}",
             f"{humanize.mib_per_s(p.bw)} ± {humanize.mib_per_s(p.bw_sd)}",
             f"{humanize.latency(p.lat_mean)} ± {humanize.latency(p.lat_sd)}", humanize.latency(p.lat_p99)] for p in points]
    return Table(["queue depth", "runs", "IOPS", "bandwidth", "mean latency", "p99 latency"], rows)


def workload_section(workload: Workload, points: list[Point], latency_target: float | None) -> Section:
    bandwidth = uses_bandwidth(workload.bs)
    f = facts(points, bandwidth, latency_target)
    verdicts = [
        Verdict("knee", None, f"Knee (last point before latency climbs steeply): {fmt_point(f.knee, bandwidth)}",
                {"depth": f.knee.depth, "iops": f"{f.knee.iops:.1f}"}),
        Verdict("peak-70", None, f"{PEAK_LABEL} ({fmt_point(f.peak, bandwidth)}) first reached at {fmt_point(f.at_70, bandwidth)}",
                {"depth": f.at_70.depth}),
    ]
    if latency_target:
        verdicts.append(Verdict("latency-target", f.meets_target is not None,
                                f"Best point with p99 ≤ {humanize.latency(latency_target)}: {fmt_point(f.meets_target, bandwidth)}"
                                if f.meets_target else f"No point meets p99 ≤ {humanize.latency(latency_target)}",
                                {"depth": f.meets_target.depth} if f.meets_target else {}))
    chart = response_chart(f"curve-{workload.slug}", workload.title, [("", points)], bandwidth,
                           marks=[("knee", f.knee), (PEAK_LABEL, f.at_70)], latency_target=latency_target)
    return Section(workload.title, charts=[chart], verdicts=verdicts, tables=[point_table(points)])


def performance_report(samples: list[Sample], source: str, latency_target: float | None, thresholds: Thresholds) -> Report:
    by_workload = curves(samples)
    report = Report("performance", f"fio performance — {source}")
    files = len({s.source for s in samples})
    report.summary.append(f"{len(samples)} job results from {files} file(s) in {source}, {len(by_workload)} workload(s). "
                          "Error bars: the standard deviation across repeated runs where a point was run more than once, "
                          "else fio's own (iops_stddev / bw_dev over its samples, clat_ns stddev).")
    report.summary += skipped_lines(samples)
    report.sections = [workload_section(w, points, latency_target) for w, points in by_workload.items()]
    report.verdicts += fsync_verdicts([s.source for s in samples], thresholds)  # an etcd-wal result is judged on fdatasync, not clat
    return report

