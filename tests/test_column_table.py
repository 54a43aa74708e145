"""One table drives the report's columns (issue 54 item 2): fioscope_mixin.columns names, per iostat column, its
node_exporter series, its place in the reports, the chart that draws it, its unit and whether the offline reader needs it;
the timeline, the phase table, the charts, report.json and the offline reader's required fields derive from it."""

from __future__ import annotations


def test_the_shipped_table_gives_the_contracts_columns():
    """report.json's series (docs/contracts.md) and the offline reader's required fields, as they were written by hand."""
    from fioscope.reporting.offline.load import REQUIRED
    from fioscope.reporting.phases import PHASE_COLUMNS
    from fioscope.reporting.timeline import COLUMNS, TRACKED
    from fioscope_mixin import columns

    assert COLUMNS == ("r/s", "w/s", "rkB/s", "wkB/s", "r_await", "w_await", "aqu-sz", "util")
    assert TRACKED == (*COLUMNS, "rrqm/s", "wrqm/s")
    assert REQUIRED == ("r/s", "w/s", "r_await", "w_await", "aqu-sz", "util")
    assert PHASE_COLUMNS == ["phase", "from–to (UTC)", "IOPS (peak)", "r/s", "w/s", "MiB/s", "r_await", "w_await", "util", "aqu-sz",
                             "rrqm/s", "wrqm/s", "rareq-sz", "wareq-sz", "%iowait", "%steal", "%system"]
    assert [columns.charted(c) for c in ("iops", "throughput", "await", "util", "queue")] == [
        ("r/s", "w/s"), ("rkB/s", "wkB/s"), ("r_await", "w_await"), ("util",), ("aqu-sz",)]
    assert {columns.BY_COLUMN[c].series for c in COLUMNS} <= set(columns.SERIES.values())


def test_a_column_added_to_a_copy_of_the_table_reaches_every_consumer():
    """A drawn fake column (fk/s, on the IOPS chart, required) and a phase-table-only one (fkrqm/s) in a copy of the table:
    the timeline carries both, the phase table shows both (header and row), report.json carries the first's points and
    both phase means, the offline reader requires the first, the IOPS chart draws it."""
    from fioscope.reporting import reportjson
    from fioscope.reporting.phases import RunWindow, phase_columns, phase_rows, phases
    from fioscope.reporting.timeline import from_iostat_samples, limit
    from fioscope_mixin import columns

    drawn = columns.Counter("fakes", 99, "count", "node_disk_fakes_total", "fk/s", report=9, chart="iops", unit="IO/s", required=True)
    table_only = columns.Counter("fake_merges", 98, "count", "node_disk_fake_merges_total", "fkrqm/s", unit="IO/s", phase=True)
    table = (*columns.DISK, drawn, table_only)
    assert columns.reported(table)[-1] == "fk/s" and columns.tracked(table)[-1] == "fkrqm/s"
    assert columns.required(table) == (*columns.required(), "fk/s")
    assert columns.charted("iops", table) == ("r/s", "w/s", "fk/s")

    row = {"r/s": 100.0, "w/s": 50.0, "rkB/s": 400.0, "wkB/s": 200.0, "r_await": 1.0, "w_await": 2.0, "aqu-sz": 0.5, "util": 40.0,
           "rrqm/s": 0.0, "wrqm/s": 0.0, "fk/s": 7.0, "fkrqm/s": 3.0}
    samples = [(float(t), {"loop0": row}) for t in range(2, 22, 2)]
    [timeline] = from_iostat_samples("vm", samples, columns.tracked(table))
    assert timeline.values("fk/s") == [(t, 7.0) for t, _ in samples] and timeline.values("fkrqm/s")
    cut = phases(timeline, [RunWindow("job", 6.0, 14.0, device="loop0")], 0.0, 20.0)
    header = phase_columns(table)
    assert header[3:6] == ["r/s", "w/s", "fk/s"] and "fkrqm/s" in header  # the IOPS chart's columns, then the undrawn ones
    load = [r for p, r in zip(cut, phase_rows(cut, table)) if p.kind == "load"][0]
    assert len(load) == len(header) and load[header.index("fk/s")] == "7.0" and load[header.index("fkrqm/s")] == "3.0"
    doc = reportjson.charted_device(timeline, limit(timeline), "loop0 is not throttled", True, None, cut, [], None, [],
                                    columns.reported(table))
    assert doc["series"]["fk/s"] == [[t, 7.0] for t, _ in samples]
    assert all(p["fk/s"] == 7.0 and p["fkrqm/s"] == 3.0 for p in doc["phases"])


def test_each_column_names_its_record_and_the_rules_record_it_from_its_own_counter():
    """The column table names each column's recording rule (issue 54 item 2: source, record, heading, unit, chart in one
    entry); the generated recording rules record every one, by that name, from the column's node_exporter counter
    (directly, or through the counter's own rate record: an await is its time's rate per completion)."""
    from fioscope_mixin import columns
    from fioscope_mixin.prometheus import rule_groups
    from fioscope_mixin.settings import load_settings

    rules = {r["record"]: r["expr"] for groups in rule_groups(load_settings()).values() for g in groups
             for r in g["rules"] if "record" in r}
    named = [c for c in columns.DISK if c.record]
    assert {c.column for c in named} >= set(columns.reported()) | {c.column for c in columns.DISK if c.phase}, \
        "a drawn or phase-table column without its record"
    for c in named:
        assert c.record in rules, f"{c.column}: {c.record} is not recorded"
        expr = rules[c.record]
        own_rate = [record for record, e in rules.items() if c.series in e and record.endswith(":rate")]
        assert c.series in expr or any(r in expr for r in own_rate), f"{c.column}: {c.record} does not read {c.series}: {expr}"
