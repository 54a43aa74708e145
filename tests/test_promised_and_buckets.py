"""Promised-IOPS arithmetic and the histogram's resolution near the etcd lines."""

from __future__ import annotations

import pytest

from fioscope.config import Limits
from fioscope.histogram import BUCKET_BOUNDS, bucket_counts
from fioscope.parser import parse_file
from fioscope.promised import fio_size_bytes, promised_iops, write_share
from conftest import FIO_OUTPUTS


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


def test_buckets_resolve_ten_ms_within_ten_percent():
    bounds = list(BUCKET_BOUNDS)
    assert bounds == sorted(bounds)
    for lower, upper in zip(bounds, bounds[1:]):
        if 0.005 <= lower < 0.030:
            assert (upper - lower) / lower <= 0.10 + 1e-9, (lower, upper)
    assert 0.010 in bounds and 0.025 in bounds


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
