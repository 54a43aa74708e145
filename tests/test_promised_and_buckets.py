"""Promised-IOPS arithmetic and the histogram's resolution near the etcd lines."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from fioscope.config import Limits
from fioscope.histogram import BUCKET_BOUNDS, bucket_counts
from fioscope.parser import parse_file, percentile_from_bins
from fioscope.promised import fio_size_bytes, promised_iops, write_share
from fioscope_testkit.histogram import histogram_quantile, tolerance
from fioscope_testkit.paths import FIO_OUTPUTS


def test_iops_and_bandwidth_combine_per_direction():
    # 1 / (1/3000 + 4096/(100 MiB/s)) for 4k reads
    limits = Limits(read_iops=3000, read_bandwidth_bytes=100 * 2**20)
    expected = 1 / (1 / 3000 + 4096 / (100 * 2**20))
    assert promised_iops(limits, {"rw": "randread", "bs": "4k"}) == pytest.approx(expected)
    # large blocks are bandwidth-bound: 4 MiB at 100 MiB/s is at most 25/s
    assert promised_iops(limits, {"rw": "read", "bs": "4M"}) == pytest.approx(1 / (1 / 3000 + 1 / 25))


def test_shared_budget_mix():
    limits = Limits(read_iops=1000, write_iops=500)
    # 30 % writes: 1 / (0.3/500 + 0.7/1000)
    assert promised_iops(limits, {"rw": "randrw", "rwmixread": "70", "bs": "4k"}) == pytest.approx(1 / (0.3 / 500 + 0.7 / 1000))


def test_independent_caps_mix():
    limits = Limits(read_iops=700, write_iops=300, independent=True)
    assert promised_iops(limits, {"rw": "randrw", "rwmixread": "70", "bs": "4k"}) == pytest.approx(1000)
    assert promised_iops(limits, {"rw": "randrw", "rwmixread": "50", "bs": "4k"}) == pytest.approx(600)


def test_combined_cap_and_undeclared():
    assert promised_iops(Limits(iops=1000), {"rw": "randrw", "bs": "4k"}) == pytest.approx(1000)
    assert promised_iops(Limits(), {"rw": "randrw", "bs": "4k"}) == 0
    assert promised_iops(Limits(read_iops=5), {"rw": "trim"}) == 0


@pytest.mark.parametrize("value,size", [("4k", 4096), ("2300", 2300), ("4M", 4 * 2**20), ("8KiB", 8192), ("4k,8k", 4096)])
def test_fio_sizes(value, size):
    assert fio_size_bytes(value) == size


def test_write_share():
    assert write_share({"rw": "randrw", "rwmixwrite": "30"}) == pytest.approx(0.3)
    assert write_share({"rw": "rw"}) == 0.5


def fio_bin_value(index: int) -> int:
    """fio's plat_idx_to_val (stat.c): the value fio writes for a json+ bin, in ns."""
    if index < 128:
        return index
    error_bits = (index >> 6) - 1
    return int((1 << (error_bits + 6)) + ((index % 64) + 0.5) * (1 << error_bits))


def fio_bin_index(value_ns: int) -> int:
    """fio's plat_val_to_idx."""
    msb = value_ns.bit_length() - 1 if value_ns else 0
    if msb <= 6:
        return value_ns
    error_bits = msb - 6
    return (error_bits + 1) * 64 + ((value_ns >> error_bits) & 63)


LINE = 0.010  # the shipped fsync line: the fine buckets span a factor 4 each side of it


def test_bucket_layout_and_cost():
    bounds = list(BUCKET_BOUNDS)
    assert bounds == sorted(bounds) and LINE in bounds and 0.025 in bounds
    for lower, upper in itertools.pairwise(bounds):
        if LINE / 4 <= lower < LINE * 4:
            assert upper / lower <= 2 ** (1 / 8) * 1.001, (lower, upper)
        elif 19e-6 <= lower < 5.0:
            assert upper / lower <= 2 ** (1 / 2) * 1.001, (lower, upper)  # (bounds are rounded to 4 digits)
    assert all(tolerance(s, BUCKET_BOUNDS) <= 0.10 for s in (LINE / 3.9, LINE, 0.025, LINE * 3.9))
    # series per (target, job, hostname, ddir, stage): buckets, +Inf, _sum, _count (155 when every bucket was fine: the
    # fdatasync p99 record reads each of them once a minute)
    assert len(bounds) + 3 <= 72


@pytest.mark.parametrize("median", [30e-6, 50e-6, 120e-6, 430e-6, 1.1e-3, 4e-3, 9.7e-3, 10.4e-3, 24e-3, 26e-3, 80e-3, 300e-3, 1.2, 2.0])
def test_histogram_quantiles_within_a_bucket_of_fio(median):
    """fio bins of a log-normal latency spread around ``median``: histogram_quantile's p99 vs fio's own p99, within 10 %
    near the fsync line and within 41 % beyond."""
    rng = random.Random(int(median * 1e9))
    bins: dict[int, int] = {}
    for _ in range(20000):
        value = int(rng.lognormvariate(math.log(median * 1e9), 0.3))
        bin_value = fio_bin_value(fio_bin_index(value))
        bins[bin_value] = bins.get(bin_value, 0) + 1
    for q in (0.5, 0.99, 0.999):
        fio = percentile_from_bins(bins, q) / 1e9
        ours = histogram_quantile(q, BUCKET_BOUNDS, bucket_counts(bins))
        assert abs(ours - fio) / fio <= tolerance(fio, BUCKET_BOUNDS), (q, fio, ours)


@pytest.mark.parametrize("version", ["fio-3.33", "fio-3.42"])
@pytest.mark.parametrize("name", ["etcd.json+", "lat_percentiles.json+"])
def test_histogram_p99_of_real_fio_output(version, name):
    [run] = parse_file(FIO_OUTPUTS / version / name)
    checked = 0
    for direction in run.jobs[0].directions.values():
        for lat in direction.latencies.values():
            if lat.bins_ns and "0.99" in lat.percentiles:
                fio = lat.percentiles["0.99"]
                ours = histogram_quantile(0.99, BUCKET_BOUNDS, bucket_counts(lat.bins_ns))
                assert abs(ours - fio) / fio <= tolerance(fio, BUCKET_BOUNDS), (fio, ours)
                checked += 1
    assert checked


def test_bins_land_in_buckets():
    [run] = parse_file(FIO_OUTPUTS / "fio-3.33" / "etcd.json+")
    lat = run.jobs[0].directions["sync"].latencies["lat"]
    counts = bucket_counts(lat.bins_ns)
    assert sum(counts) == lat.count
    # every fio bin value v lands in the first bucket whose bound is >= v
    for value_ns, n in lat.bins_ns.items():
        seconds = value_ns / 1e9
        index = next(i for i, b in enumerate(BUCKET_BOUNDS) if seconds <= b)
        assert counts[index] >= n


def test_exact_bounds_follow_the_settings():
    """The fsync line and the commit line are exact bounds wherever alerts/config.yaml puts them (were fixed at 10/25 ms)."""
    import copy

    from fioscope.histogram import bucket_bounds
    from fioscope_mixin.settings import load_settings

    settings = load_settings()
    assert bucket_bounds(settings) == BUCKET_BOUNDS
    moved = copy.deepcopy(settings)
    moved["thresholds"].update(etcd_fsync_p99_seconds=0.008, etcd_backend_commit_p99_seconds=0.02)
    bounds = bucket_bounds(moved)
    assert 0.008 in bounds and 0.02 in bounds and 0.01 not in bounds and len(bounds) == len(BUCKET_BOUNDS)
