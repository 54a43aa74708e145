"""Counters built once (issue 26 item 3): ``fioscope capture`` hands the kernel's counters to the offline backfill; only a
plain iostat file (rates, no counters) has its counters rebuilt from the rates."""

from __future__ import annotations

import json

import pytest
from helpers.bundles import kernel_samples, write_bundle


@pytest.mark.parametrize("interval", [2.0, 45.0])  # 45 s: longer than MAX_SAMPLE_GAP, instants inside each interval
def test_a_captures_counters_reach_the_backfill_as_counted(tmp_path, interval):
    """The series backfilled for a capture are the kernel's counters at the instants an iostat file's rebuilt ones
    take, and they move as the rebuilt ones do (but for iostat.json's rounding): the rules judge the same."""
    from fioscope.reporting.iostat_json import iostat_document
    from fioscope.reporting.offline.counters import Grid, counter_points
    from fioscope.reporting.offline.load import load_iostat

    kernel = kernel_samples(40, interval)
    path = tmp_path / "iostat.json"
    path.write_text(json.dumps(iostat_document("vm1", kernel)))
    [capture] = load_iostat(str(path))
    grid = Grid(capture.samples[0].timestamp - 2 * interval, 15.0)
    rebuilt, counted = list(counter_points(capture, grid)), list(counter_points(capture, grid, kernel))
    assert [(n, labels) for n, labels, _ in rebuilt] == [(n, labels) for n, labels, _ in counted]
    reads = next(points for name, labels, points in counted if name == "node_disk_reads_completed_total")
    # at each sample the counter the kernel counted (the rebuilt one starts at 0)
    for t, disks, _ in kernel[1:]:
        [value] = [v for ts, v in reads if abs(ts - t) < 0.002]
        assert value == disks["loop0"].reads
    cpu = {}
    for (name, labels, a), (_, _, b) in zip(rebuilt, counted):
        assert [t for t, _ in a] == [t for t, _ in b], (name, labels)
        if name == "node_cpu_seconds_total":
            cpu[labels] = (a, b)
            continue
        for (t0, a0), (t1, a1), (_, b0), (_, b1) in zip(a, a[1:], b, b[1:]):  # iostat.json rounds to 4 decimals
            assert (b1 - b0) / (t1 - t0) == pytest.approx((a1 - a0) / (t1 - t0), rel=1e-3, abs=2e-4), (name, t1)
    # CPU: seconds of all CPUs counted, a share of one rebuilt; the avg-cpu ratios the rules take agree
    for i in range(1, len(next(iter(cpu.values()))[0])):
        total = [sum(s[k][i][1] - s[k][i - 1][1] for s in cpu.values()) for k in (0, 1)]
        for a, b in cpu.values():
            assert (b[i][1] - b[i - 1][1]) / total[1] == pytest.approx((a[i][1] - a[i - 1][1]) / total[0], abs=1e-4)


def test_a_bundles_own_counters_serve_a_report_on_it(tmp_path, caplog):
    """``fioscope report --iostat bundle/iostat.json``: the bundle's raw samples are its counters (the report judges
    them as the capture did); a plain iostat file has none; a damaged line is one warning, left out (issue 51: as
    iostat.json's values are), and the other samples serve; a file with fewer than two samples left, the rates serve."""
    from fioscope.reporting.offline.load import bundle_counters, load_iostat

    kernel = kernel_samples(20, 2.0)
    counted = write_bundle(tmp_path / "bundle", kernel)
    path = str(tmp_path / "bundle" / "iostat.json")
    got = bundle_counters([path], load_iostat(path))[path]
    assert [(t, d["loop0"].reads) for t, d, _ in got] == [(t, float(round(d["loop0"].reads))) for t, d, _ in kernel] == \
        [(t, d["loop0"].reads) for t, d, _ in counted]
    plain = tmp_path / "plain" / "iostat.json"
    plain.parent.mkdir()
    plain.write_text((tmp_path / "bundle" / "iostat.json").read_text())
    assert bundle_counters([str(plain)], load_iostat(str(plain))) == {}
    later = write_bundle(tmp_path / "later", [(t + 3600, d, c) for t, d, c in kernel])  # the same host an hour later
    both = [path, str(tmp_path / "later" / "iostat.json")]
    assert bundle_counters(both, [c for p in both for c in load_iostat(p)]) == {both[0]: counted, both[1]: later}
    raw = tmp_path / "bundle" / "samples" / "diskstats.jsonl"
    raw.write_text(raw.read_text() + '{"t": "soon", "diskstats": [], "stat": ""}\n')
    assert bundle_counters([path], load_iostat(path)) == {path: counted}
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"{raw}: line 21:" in warning and "left out" in warning, warning
    caplog.clear()
    raw.write_text(raw.read_text().splitlines()[0] + "\n" + '{"t": "soon", "diskstats": [], "stat": ""}\n')
    assert bundle_counters([path], load_iostat(path)) == {}
    assert any("fewer than two samples" in r.getMessage() and "rebuilt from" in r.getMessage() for r in caplog.records)


@pytest.mark.slow  # a temporary Prometheus and three offline diagnoses: ~15 s
def test_a_capture_judged_from_its_counters_reads_as_from_its_rates(tmp_path, caplog):
    """The temporary Prometheus serves the kernel's counters a capture hands over, and the report is the one its
    iostat.json alone gives (the same figures and verdicts: issue 26 changes no report): handed over in process (the
    capture's own report), read from the bundle (a report on it later), or rebuilt from the rates (a plain copy)."""
    from fioscope.reporting.offline.load import load_iostat
    from fioscope.reporting.offline.pipeline import backfilled, offline_diagnosis
    from fioscope.reporting.offline.rules import generate_rules
    from fioscope.thresholds import shipped
    from fioscope.reporting.prometheus_api import Prometheus
    from fioscope.reporting.reportjson import report_json

    kernel = write_bundle(tmp_path / "bundle", kernel_samples(200, 2.0))
    path = str(tmp_path / "bundle" / "iostat.json")
    plain = tmp_path / "plain.json"
    plain.write_text((tmp_path / "bundle" / "iostat.json").read_text())
    end = load_iostat(path)[0].samples[-1].timestamp
    with backfilled(load_iostat(path), [], tmp_path / "work", generate_rules(shipped()), kernel={path: kernel}) as server:
        [reads] = Prometheus(server.url).instant('node_disk_reads_completed_total{device="loop0"}', end)
    assert reads.values[0] == kernel[-1][1]["loop0"].reads
    reports = [json.loads(report_json(offline_diagnosis(*args, **kw))) for args, kw in (
        (([path], None, None, shipped()), {"kernel": {path: kernel}}), (([path], None, None, shipped()), {}),
        (([str(plain)], None, None, shipped()), {}))]
    assert reports[2].pop("title").endswith("plain.json") and reports[0].pop("title") == reports[1].pop("title")
    assert reports[0] == reports[1] == reports[2]
    assert reports[0]["devices"][0]["series"]["r/s"] and any(v["kind"] == "alerts" for v in reports[0]["verdicts"])
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
