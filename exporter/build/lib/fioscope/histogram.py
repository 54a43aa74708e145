"""Bucket bounds of ``fio_latency_seconds`` and the mapping of fio json+ bins onto them.

fio's own bins are log-linear (64 sub-buckets per power of two, about 1.6 % wide).
Prometheus needs fixed bounds, and ``histogram_quantile`` interpolates linearly
inside a bucket, so its error is at most one bucket's width. The bounds are:

- 1 us .. 1 ms:     1-2-5 steps (sub-millisecond I/O is never the question here)
- 1 ms .. 5 ms:     0.5 ms steps (10-50 %)
- 5 ms .. 15 ms:    0.5 ms steps: at most 10 % wide, 5 % at the 10 ms etcd line
- 15 ms .. 20 ms:   1 ms steps; 20 ms .. 30 ms: 2 ms steps: at most 10 % wide up to
                    etcd's 25 ms backend-commit line
- 30 ms .. 10 s:    coarse 1-2-3-5 steps: throttled disks, hung I/O

A p99 near 10 ms is therefore resolved within 5 %, plus fio's own bin width (< 2 %).
"""

from __future__ import annotations

import bisect


def _ms(*values: float) -> list[float]:
    # via the decimal string, so the `le` labels read 0.0105, not 0.010499999999999999
    return [float(f"{v:g}e-3") for v in values]


def _steps(start_ms: float, stop_ms: float, step_ms: float) -> list[float]:
    return _ms(*(start_ms + i * step_ms for i in range(round((stop_ms - start_ms) / step_ms))))


BUCKET_BOUNDS: tuple[float, ...] = tuple(sorted(set(
    _ms(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
    + _steps(1, 5, 0.5)
    + _steps(5, 15, 0.5)
    + _steps(15, 20, 1)
    + _steps(20, 30, 2)
    + _ms(25)  # etcd's backend-commit line, exactly
    + _ms(30, 40, 50, 75, 100, 150, 200, 300, 500, 750)
    + [1.0, 2.0, 3.0, 5.0, 10.0]
)))


def bucket_counts(bins_ns: dict[int, int]) -> list[int]:
    """Per-bucket (not cumulative) counts; the last entry is the +Inf bucket."""
    counts = [0] * (len(BUCKET_BOUNDS) + 1)
    for value_ns, n in bins_ns.items():
        # le semantics: a value equal to a bound belongs to that bucket
        counts[bisect.bisect_left(BUCKET_BOUNDS, value_ns * 1e-9)] += n
    return counts
