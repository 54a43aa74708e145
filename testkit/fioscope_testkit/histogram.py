"""Prometheus' histogram_quantile in Python, to judge the exporter's buckets without a Prometheus."""

from __future__ import annotations

import bisect
import math


def histogram_quantile(q: float, bounds, counts) -> float:
    """Prometheus' bucketQuantile (promql/quantile.go) over per-bucket ``counts`` (last: +Inf)."""
    cumulative, total = [], 0
    for n in counts:
        total += n
        cumulative.append(total)
    if total == 0:
        return math.nan
    rank = q * total
    b = next(i for i, c in enumerate(cumulative[:-1] + [math.inf]) if c >= rank)
    if b == len(cumulative) - 1:
        return bounds[-1]
    start, end, count = 0.0, bounds[b], cumulative[b]
    if b > 0:
        start = bounds[b - 1]
        count -= cumulative[b - 1]
        rank -= cumulative[b - 1]
    return start + (end - start) * (rank / count)


def tolerance(seconds: float, bounds) -> float:
    """How far histogram_quantile may be from fio's own figure at ``seconds``: the width of the bucket (lo, hi] holding it,
    (hi - lo) / lo, and a tenth more for fio's own bins (1.6 % wide): 10 % near the fsync line, 45 % beyond."""
    i = bisect.bisect_left(bounds, seconds)
    lo, hi = bounds[max(i - 1, 0)], bounds[min(i, len(bounds) - 1)]
    return 1.1 * (hi - lo) / lo
