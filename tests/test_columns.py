"""The one table of iostat columns (fioscope_mixin.columns, issue 26 item 2): the only module of exporter/ and mixin/
that names a node_exporter disk or CPU series or parses a /proc/diskstats field, and what it says agrees with the kernel
and with the formulas the reports used before it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fioscope_testkit.paths import REPO

TABLE = REPO / "mixin" / "fioscope_mixin" / "columns.py"
# a node_exporter disk or CPU series, or a diskstats line cut into its fields (text.split() then [3:14]-style indexing)
NAMES = re.compile(r"node_disk_\w+|node_cpu_seconds_total|\bdiskstats\b.*\bsplit\(|\b\w+\[3:1[0-9]\]")


def sources() -> list[Path]:
    return sorted(p for root in (REPO / "exporter" / "fioscope", REPO / "mixin" / "fioscope_mixin") for p in root.rglob("*.py"))


def test_the_column_table_is_the_only_place_naming_a_disk_series_or_diskstats_field():
    found = {str(p.relative_to(REPO)): sorted(set(NAMES.findall(p.read_text()))) for p in sources() if p != TABLE}
    assert not {k: v for k, v in found.items() if v}, found
    assert len(set(NAMES.findall(TABLE.read_text()))) >= 16  # the table itself: 15 disk counters and the CPU series


def test_the_table_reads_diskstats_as_the_reports_did():
    """Counters from a diskstats line become iostat's columns by the table: the figures the reports had before."""
    from fioscope.reporting.iostat_json import parse_cpu, parse_diskstats
    from fioscope.reporting.timeline import iostat_columns

    line = "   7       0 loop0 {r} 0 {rs} {rt} {w} 0 {ws} {wt} 0 {io} {wio} 0 0 0 0 0 0\n"
    a = parse_diskstats(line.format(r=1000, rs=8000, rt=500, w=10, ws=80, wt=20, io=1000, wio=3000), {"loop0"})["loop0"]
    b = parse_diskstats(line.format(r=1700, rs=13600, rt=2600, w=310, ws=2480, wt=3020, io=2990, wio=9000), {"loop0"})["loop0"]
    assert (a.read_bytes, a.read_seconds, a.io_seconds) == (8000 * 512, 0.5, 1.0)
    cols = iostat_columns(a, b, 2.0)
    assert cols == pytest.approx({"r/s": 700 / 2.0, "w/s": 300 / 2.0, "rkB/s": 5600 * 512 / 1024 / 2.0, "wkB/s": 2400 * 512 / 1024 / 2.0,
                    "r_await": 2.1 * 1000 / 700, "w_await": 3.0 * 1000 / 300, "aqu-sz": 6.0 / 2.0, "util": 99.5})
    # irq and softirq count as system, as iostat counts them; guest time is inside user already
    assert parse_cpu("cpu  120 1 70 940 30 5 6 2 9 0\n") == {"user": 120, "nice": 1, "system": 81, "iowait": 30, "steal": 2, "idle": 940}


def test_every_diskstats_field_of_the_table_is_a_counter_of_this_kernel():
    from fioscope_mixin.columns import DISK

    fields = [c.field for c in DISK]
    assert len(set(fields)) == len(fields) and 9 not in fields  # field 9: requests in flight now, a gauge
    longest = max(len(line.split()) for line in Path("/proc/diskstats").read_text().splitlines())
    assert max(fields) <= longest - 3, "a field this kernel's /proc/diskstats does not have"
