"""The recording rules against `iostat -x -o JSON`, on a real disk under real fio load.

Real node_exporter -> real Prometheus (the repository's rules, 1 s scrapes, 40 s rate
window) against iostat sampling the same 40 s on the same lab loop disk (root; part of the
end-to-end suite, `pytest -m e2e`: it loads a disk for about 90 s). Every iostat -x
column and the avg-cpu figures must agree within 5 %, or within a small absolute
tolerance near zero (iostat prints two decimals). Per-request columns of a direction with
fewer than MIN_REQUESTS requests in the window (sparse flushes) only have to be of the
same order: one request more or less in a window swings their mean.
"""

from __future__ import annotations

import pytest
from fioscope_testkit.paths import FIXTURES
from helpers.iostat import agree, print_table, sample_agreement
from helpers.lab import lab_lock, require_root_lab


@pytest.mark.e2e
def test_recording_rules_agree_with_iostat(tmp_path):
    require_root_lab()
    from fioscope import lab

    with lab_lock():  # one lab user at a time on this machine (the e2e suites take the same lock)
        disk = lab.up("healthy", name="iostat", size="1G", state_dir=tmp_path / "lab")
        try:
            rows = sample_agreement(tmp_path, disk, [str(FIXTURES / "jobs" / "iostat-mix.fio")])
        finally:
            lab.down("iostat", tmp_path / "lab")
    print_table(rows)
    missing = [r[0] for r in rows if r[2] is None]
    assert not missing, f"no Prometheus value for {missing}"
    off = [r for r in rows if not agree(r[1], r[2], r[3])]
    assert not off, f"disagree with iostat: {off}"
    values = {r[0]: r[1] for r in rows}
    # the load really exercised the columns (a comparison of zeros proves nothing)
    assert values["r/s"] > 300 and values["w/s"] > 200 and values["f/s"] > 10
    assert values["rrqm/s"] > 100 and values["wrqm/s"] > 100
