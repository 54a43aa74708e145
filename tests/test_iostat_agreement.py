"""The recording rules against `iostat -x -o JSON`, on real disks under real fio load.

Real node_exporter -> real Prometheus (the repository's rules, 1 s scrapes, 40 s rate window) against iostat sampling
the same 40 s on two lab loop disks at once (root; part of the end-to-end suite, `pytest -m e2e`: it loads them for
about 90 s): a healthy one under a mix that exercises every column (merges, flushes, discards), and a throttled one
(700 + 300 IOPS) under a 3x cloud-sla-70-30 overload, the guest-side signature: its reads flat at the cap, util
saturated. Every iostat -x column and the avg-cpu figures must agree within 5 %, or within a small absolute tolerance
near zero (iostat prints two decimals). Per-request columns of a direction with fewer than MIN_REQUESTS requests in the
window (sparse flushes) only have to be of the same order: one request more or less in a window swings their mean.
"""

from __future__ import annotations

import pytest
from fioscope_testkit.paths import FIXTURES, REPO
from helpers.iostat import agree, print_table, sample_agreement
from helpers.lab import lab_disks, lab_lock, require_root_lab


@pytest.mark.e2e
@pytest.mark.beside_episode("machine_limit")
def test_recording_rules_agree_with_iostat(tmp_path):
    require_root_lab()
    with lab_lock(), lab_disks(tmp_path / "lab") as up:  # one lab user at a time on this machine (the e2e suites take the same lock)
        healthy, capped = up("healthy", "iostat"), up("throttled", "iostat-capped")
        rows = sample_agreement(tmp_path, [
            (healthy, [str(FIXTURES / "jobs" / "iostat-mix.fio")], {}),
            (capped, [str(REPO / "fio-jobs" / "cloud-sla-70-30.fio")], {"SIZE": "512m", "READ_IOPS": "2100", "WRITE_IOPS": "900"})])
    for disk, what in ((healthy, "healthy lab disk, iostat-mix"), (capped, "throttled lab disk, cloud-sla-70-30 at 3x its cap")):
        print(f"\n[iostat agreement, {what}]")
        print_table(rows[disk.device_name])
    for disk in (healthy, capped):
        missing = [r[0] for r in rows[disk.device_name] if r[2] is None]
        assert not missing, f"{disk.name}: no Prometheus value for {missing}"
        off = [r for r in rows[disk.device_name] if not agree(r[1], r[2], r[3])]
        assert not off, f"{disk.name}: disagree with iostat: {off}"
    values = {r[0]: r[1] for r in rows[healthy.device_name]}
    # the load really exercised the columns (a comparison of zeros proves nothing)
    assert values["r/s"] > 300 and values["w/s"] > 200 and values["f/s"] > 10
    assert values["rrqm/s"] > 100 and values["wrqm/s"] > 100
    values = {r[0]: r[1] for r in rows[capped.device_name]}
    assert 650 < values["r/s"] < 750 and values["util"] > 90  # flat at the cap, saturated
