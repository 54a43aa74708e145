"""Bucket bounds of ``fio_latency_seconds`` and the mapping of fio json+ bins onto them.

fio's own bins are log-linear (64 sub-buckets per power of two, about 1.6 % wide), and fio's
percentile is the value of the bin where the rank is reached. That bin value falls into one
of our buckets (lo, hi]; ``histogram_quantile`` interpolates inside the same bucket, so its
estimate differs from fio's figure by at most (hi - lo) / lo.

The bounds are log-spaced and anchored at the settings' fsync line
(``thresholds.etcd_fsync_p99_seconds``, etcd's 10 ms), in two widths:

- fine, 2^(1/8) (9.05 %), within 2 doublings of the line (2.5 to 40 ms at 10 ms): where etcd's
  verdict and its margin are read, a p99 is within 10 % of fio's;
- outer, 2^(1/2) (41 %), out to 9 doublings each way (19.5 us to 5.12 s): a fast disk's or a
  stalled one's p99 within 41 %, which says what it is (NVMe-fast, seconds) at half the series.

The verdict itself is exact at any width: the line is a bound, so the p99 exceeds it exactly
when fewer than 99 % of the requests fall in the buckets up to it. The backend-commit line
(``thresholds.etcd_backend_commit_p99_seconds``, 25 ms) is added as an exact bound too, so the
alerts and dashboards that count requests under either line read an exact bucket. Below and
above, a few coarse bounds (1, 2, 5, 10 us; 10, 30 s) keep outliers visible. Bounds are rounded
to 4 significant digits so ``le`` reads 0.01091, not 0.010905077326652577.

Cost: len(bounds) + 1 buckets + _sum + _count = 71 series per (target, job, hostname, ddir,
stage) that has json+ bins (155 when every bucket was fine); a typical job has 1 to 3 such
stages. The fdatasync p99 record reads every bucket of every result once a minute: on
Prometheus 2 its cost is those series (docs/fleet.md).
"""

from __future__ import annotations

import bisect
import functools

RATIO_EXPONENT = 8  # fine bounds per doubling: 2^(1/8) = 9.05 % per bucket
FINE_DOUBLINGS = 2  # ... within this many doublings of the fsync line
OUTER_EXPONENT = 2  # outer bounds per doubling: 2^(1/2) = 41 % per bucket
RANGE_DOUBLINGS = 9  # ... out to this many doublings each way
COARSE_BOUNDS = (1e-6, 2e-6, 5e-6, 1e-5, 10.0, 30.0)


def _round(value: float) -> float:
    return float(f"{value:.4g}")


def bucket_bounds(settings: dict) -> tuple[float, ...]:
    """The ``le`` bounds for these settings: log-spaced around the fsync line (fine near it, outer beyond), exact at
    the fsync and commit lines."""
    thresholds = settings["thresholds"]
    anchor = float(thresholds["etcd_fsync_p99_seconds"])
    exact = {anchor, float(thresholds["etcd_backend_commit_p99_seconds"])}
    def spaced(per_doubling: int, doublings: int) -> set[float]:
        return {_round(anchor * 2 ** (k / per_doubling)) for k in range(-doublings * per_doubling, doublings * per_doubling + 1)}

    return tuple(sorted(spaced(RATIO_EXPONENT, FINE_DOUBLINGS) | spaced(OUTER_EXPONENT, RANGE_DOUBLINGS) | exact | set(COARSE_BOUNDS)))


@functools.cache
def shipped_bounds() -> tuple[float, ...]:
    """The bounds of alerts/config.yaml as shipped, for a caller given none (read on first use, never at import)."""
    from fioscope_mixin.settings import load_settings

    return bucket_bounds(load_settings())


def __getattr__(name: str) -> tuple[float, ...]:
    # BUCKET_BOUNDS: the shipped bounds, computed on first use (a module attribute would read the settings at import)
    if name == "BUCKET_BOUNDS":
        return shipped_bounds()
    raise AttributeError(name)


def bucket_counts(bins_ns: dict[int, int], bounds: tuple[float, ...] | None = None) -> list[int]:
    """Per-bucket (not cumulative) counts over ``bounds`` (default: the shipped ones); the last entry is the +Inf bucket."""
    bounds = bounds or shipped_bounds()
    counts = [0] * (len(bounds) + 1)
    for value_ns, n in bins_ns.items():
        # le semantics: a value equal to a bound belongs to that bucket
        counts[bisect.bisect_left(bounds, value_ns * 1e-9)] += n
    return counts
