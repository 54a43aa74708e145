"""Prometheus' histogram_quantile in Python, to judge the exporter's buckets without a Prometheus."""

from __future__ import annotations

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
