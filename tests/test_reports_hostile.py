"""``fioscope report`` on hostile input (tests/helpers/hostile_reports.py): names that try to run scripts in the
report, iostat values that are not numbers, captures that are huge or decades long, names that collide.

Rendered in a real headless Chromium with the network off (helpers.report_page.open_in_chromium); the offline
diagnosis runs the real promtool and Prometheus.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fioscope_testkit.cli import fioscope, fioscope_command
from fioscope_testkit.paths import IOSTAT, checkout_env
from helpers import hostile_reports as hostile
from helpers.report_page import open_in_chromium


class Page(HTMLParser):
    """What a browser made of the report: title, scripts, event handlers, images, visible text."""

    def __init__(self, dom: str):
        super().__init__()
        self.title = ""
        self.scripts = 0
        self.handlers: list[str] = []
        self.images: list[str] = []
        self.charts: list[str] = []
        self.text = ""
        self._in_title = False
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.scripts += tag == "script"
        self.handlers += [f"{tag} {k}" for k in a if k.startswith("on") or k == "autofocus"]
        if tag == "img":
            self.images.append(a.get("src") or "")
            self.charts.append(a.get("data-chart") or "")
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        self.text += data


def assert_inert(out: Path, tmp_path: Path, *visible: str) -> Page:
    """No payload ran (the title is not PWNED, no script element, no handler) and the names read as text."""
    dom, console = open_in_chromium(out / "report.html", tmp_path / "screenshot.png")
    page = Page(dom)
    assert page.title != hostile.PWNED and page.scripts == 0 and page.handlers == [], (page.title, page.scripts, page.handlers)
    assert console == [], console  # a broken-out <img src=x> would log net::ERR_FILE_NOT_FOUND
    assert page.images and all(src.startswith("data:image/png;base64,") for src in page.images)
    for name in visible:
        assert name in page.text, name
    return page


@pytest.mark.slow
def test_offline_diagnosis_of_hostile_names_runs_no_script(tmp_path):
    capture = hostile.hostile_capture(tmp_path / "capture.json")
    results = hostile.hostile_capped_results(tmp_path / "results")
    out = tmp_path / "out"
    proc = fioscope("report", "--iostat", str(capture), "--results", str(results), "--output", str(out), "--pdf")
    assert proc.returncode == 0, proc.stderr
    page = assert_inert(out, tmp_path, hostile.HOST, hostile.THROTTLED_DEVICE, hostile.OTHER_DEVICE, hostile.JOBNAME)
    assert "THROTTLED" in page.text  # the hostile name did not change the verdict
    pngs = sorted(p.name for p in out.glob("*.png"))
    # one avg-cpu chart per host and five per charted device (sd-a and sd_a each their own)
    assert len(pngs) == 1 + 5 * 2 and all(n.isascii() and "<" not in n and '"' not in n and "$" not in n for n in pngs), pngs
    assert sorted(f"{c}.png" for c in page.charts) == pngs  # each section shows its own chart file


@pytest.mark.slow
def test_live_diagnosis_of_hostile_labels_runs_no_script(tmp_path):
    """A live Prometheus whose series carry hostile labels: ALERTS, fioscope_disk_info names, fio runs."""
    from fioscope.reporting.offline.load import load_iostat
    from fioscope.reporting.offline.pipeline import backfilled
    from fioscope.reporting.offline.rules import generate_rules
    from fioscope.thresholds import shipped

    captures = load_iostat(str(hostile.hostile_capture(tmp_path / "capture.json")))
    start, end = captures[0].samples[0].timestamp, captures[0].samples[-1].timestamp
    labels = {"job": "node", "instance": f"iostat:{hostile.HOST}", "host": hostile.HOST, "device": hostile.THROTTLED_DEVICE}
    alert = {**labels, "alertname": "FioscopeDiskThrottled", "alertstate": "firing", "severity": f"warning{hostile.SVG}"}
    info = {**labels, "name": f"vg0-{hostile.SCRIPT}"}
    times = [start + 15 * i for i in range(int((end - start) // 15))]
    extra = {"ALERTS": {_labels(alert): [(t, 1.0) for t in times]},
             "fioscope_disk_info": {_labels(info): [(t, 1.0) for t in times]}}
    with backfilled(captures, [], tmp_path / "work", generate_rules(shipped()), extra) as server:
        out = tmp_path / "out"
        proc = fioscope("report", "--prometheus.url", server.url, "--from", str(start - 30), "--to", str(end), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    page = assert_inert(out, tmp_path, hostile.HOST, hostile.THROTTLED_DEVICE, f"vg0-{hostile.SCRIPT}", f"warning{hostile.SVG}")
    assert "THROTTLED" in page.text


def _labels(labels: dict[str, str]) -> str:
    from fioscope.reporting.offline.counters import _labels as om_labels

    return om_labels(**labels)


def test_performance_and_comparison_of_hostile_fio_names_run_no_script(tmp_path):
    results = hostile.hostile_fio_results(tmp_path / hostile.SVG)
    for args, name, visible in ((["--results", str(results)], "perf", (hostile.DIRECTORY, hostile.HOSTNAME, hostile.RW)),
                                (["--baseline", str(results), "--candidate", str(results)], "cmp", (hostile.RW, hostile.SVG))):
        out = tmp_path / name
        proc = fioscope("report", *args, "--output", str(out), "--pdf")
        assert proc.returncode == 0, proc.stderr
        assert_inert(out, tmp_path, *visible)
        assert all(p.name.isascii() and "<" not in p.name for p in out.iterdir()), list(out.iterdir())


# ---- item 4: values that are not rates -----------------------------------------------------------

@pytest.mark.slow
def test_invalid_iostat_values_are_skipped_counted_and_said(tmp_path):
    """NaN, inf, negative and 1e308 values in the throttled window: left out with their reason, counted, said once on
    stderr and on the page; the verdict stays THROTTLED at the lab cap (before: "not throttled", "nan/s", OverflowError)."""
    capture = hostile.invalid_values_capture(tmp_path / "capture.json")
    out = tmp_path / "out"
    proc = fioscope("report", "--iostat", str(capture), "--results", str(hostile.IOSTAT / "capped-results"), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    [warning] = [ln for ln in proc.stderr.splitlines() if str(capture) in ln]
    for reason in ("r/s NaN or infinite", "aqu-sz NaN or infinite", "util negative", "r_await negative", "util above 110 %"):
        assert f"1 x {reason}" in warning, warning
    html = (out / "report.html").read_text()
    assert "Left out of" in html and "1 x util above 110 %" in html
    page = assert_inert(out, tmp_path)
    [throttled] = [ln for ln in page.text.splitlines() if ln.startswith(hostile.LAB_DEVICE) and "THROTTLED" in ln]
    assert "THROTTLED" in throttled and "nan" not in throttled.lower(), throttled
    ceiling = float(json.loads(json.dumps(_data(html, "ceiling-iops"))))
    assert abs(ceiling - 200) <= 20, ceiling


def _data(html: str, key: str) -> str:
    import re

    return re.search(rf'data-{key}="([^"]*)"', html).group(1)  # type: ignore[union-attr]


def test_invalid_values_unit_reasons():
    from fioscope.reporting.offline.load import invalid

    assert [invalid("r/s", v) for v in (0, 1.5, 1e6)] == [None, None, None]
    assert invalid("r/s", float("nan")) == invalid("r/s", float("-inf")) == "r/s NaN or infinite"
    assert invalid("aqu-sz", -0.01) == "aqu-sz negative"
    assert invalid("util", 1e308) == "util above 110 %" and invalid("r/s", 1e308) == "r/s absurdly large"
    assert invalid("w/s", "12") == invalid("w/s", True) == invalid("w/s", None) == "w/s not a number"


# ---- item 3: bounded time, size and devices ------------------------------------------------------

def timed(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float, float]:
    """(process, wall seconds, peak RSS in MiB) of `fioscope report ...` under /usr/bin/time -v."""
    import re
    import sys
    import time

    env = checkout_env()
    began = time.monotonic()
    proc = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "fioscope", "report", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1)) / 1024  # type: ignore[union-attr]
    proc.stderr = "\n".join(ln for ln in proc.stderr.splitlines() if not ln.startswith("\t") and not ln.startswith("Command "))
    return proc, time.monotonic() - began, rss


@pytest.mark.parametrize("seconds, words", [(365 * 86400, "span 365 days"), (-1_790_000_000, "not later than")])
@pytest.mark.slow
def test_a_sample_decades_away_is_one_line_not_gigabytes(tmp_path, seconds, words):
    capture = hostile.one_late_sample_capture(tmp_path / "capture.json", seconds)
    out = tmp_path / "out"
    proc, took, rss = timed("--iostat", str(capture), "--output", str(out))
    if seconds > 0:  # a year later: the capture is refused, one line naming the file and both ends
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and str(capture) in proc.stderr, proc.stderr
        assert words in proc.stderr and "at most 31 days" in proc.stderr, proc.stderr
        assert not out.exists()
    else:  # back to 1970: out of order, left out and said
        assert proc.returncode == 0, proc.stderr
        assert "1 x sample not later than the one before" in proc.stderr
    assert rss < 400 and took < 60, (rss, took)


@pytest.mark.slow
def test_a_30_day_gap_stays_a_gap(tmp_path):
    from fioscope.reporting.offline.counters import Grid, counter_series
    from fioscope.reporting.offline.load import load_iostat

    capture = hostile.with_gap_capture(tmp_path / "capture.json", 30)
    [loaded] = load_iostat(str(capture))
    assert loaded.gaps == 1
    series = counter_series(loaded, Grid(loaded.samples[0].timestamp, 15))
    half = len(loaded.samples) // 2
    first_end, second_start = loaded.samples[half - 1].timestamp, loaded.samples[half].timestamp
    assert second_start - first_end > 29 * 86400
    for points in series["node_disk_reads_completed_total"].values():
        inside = [t for t, _ in points if first_end < t < second_start - 60]
        assert inside == [], "nothing is written inside the gap"
    assert sum(len(p) for s in series.values() for p in s.values()) < 3000
    out = tmp_path / "out"
    proc, took, rss = timed("--iostat", str(capture), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "1 gap(s) in time" in (out / "report.html").read_text()
    assert rss < 600 and took < 90, (rss, took)


def test_dev_zero_and_other_non_json_input_is_one_fast_line(tmp_path):
    out = tmp_path / "out"
    proc, took, rss = timed("--iostat", "/dev/zero", "--output", str(out), timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["fioscope report: --iostat /dev/zero: not JSON (it does not start with '{')"]
    assert took < 20 and rss < 200, (took, rss)


def test_too_large_a_file_is_one_line(tmp_path, monkeypatch):
    from fioscope.reporting import ReportError
    from fioscope.reporting.offline import load as iostat

    monkeypatch.setattr(iostat, "MAX_FILE_BYTES", 10_000)  # the real bound is 512 MiB: too large for a test file
    with pytest.raises(ReportError, match=r"--iostat .*capped.json: larger than"):
        iostat.load_iostat(str(hostile.IOSTAT / "capped.json"))


def test_too_many_devices_is_one_line_and_device_picks_some(tmp_path):
    from fioscope.reporting.offline.load import MAX_DEVICES, check_bounds, load_iostat

    capture = hostile.many_devices_capture(tmp_path / "capture.json", MAX_DEVICES + 1)
    out = tmp_path / "out"
    proc, took, rss = timed("--iostat", str(capture), "--output", str(out))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"{MAX_DEVICES + 1} devices; at most {MAX_DEVICES}" in proc.stderr and "--device" in proc.stderr
    assert took < 30 and not out.exists()
    picked = load_iostat(str(capture), ["sd1", "sd2"])
    check_bounds(picked)
    assert {d for s in picked[0].samples for d in s.disks} == {"sd1", "sd2"}


def test_merging_a_large_capture_keeps_the_counters_exact(tmp_path, monkeypatch):
    """A capture over MAX_DEVICE_SAMPLES rows reads k reports as one: every counter ends where it would have."""
    from fioscope.reporting.offline import load as iostat
    from fioscope.reporting.offline.counters import Grid, counter_series

    capture = str(hostile.IOSTAT / "capped.json")
    [whole] = iostat.load_iostat(capture)
    monkeypatch.setattr(iostat, "MAX_DEVICE_SAMPLES", 20)
    [merged] = iostat.load_iostat(capture)
    assert merged.merged > 1 and len(merged.samples) < len(whole.samples)
    grid = Grid(whole.samples[0].timestamp, 15)
    a, b = counter_series(whole, grid), counter_series(merged, grid)
    for name in a:
        for labels in a[name]:
            assert b[name][labels][-1][1] == pytest.approx(a[name][labels][-1][1], rel=1e-9, abs=1e-9), (name, labels)


@pytest.mark.slow
def test_a_capture_longer_than_one_range_query(tmp_path):
    """50 h at 60 s (before: "exceeded maximum resolution of 11,000 points" past ~46 h)."""
    capture = hostile.long_capture(tmp_path / "capture.json", 50)
    out = tmp_path / "out"
    proc, took, rss = timed("--iostat", str(capture), "--output", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    html = (out / "report.html").read_text()
    # the rules saw all 50 h: the window is whole and the SLA rule fired on the one loaded device
    assert "(2d1h59m)" in html and "loop0: latency SLA NOT met" in html
    assert rss < 700, rss


# ---- item 9: chart file names, partial files -------------------------------------------------------

def test_devices_whose_names_differ_in_punctuation_get_their_own_charts(tmp_path):
    capture = hostile.colliding_devices_capture(tmp_path / "capture.json")
    out = tmp_path / "out"
    proc = fioscope("report", "--iostat", str(capture), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    page = assert_inert(out, tmp_path, "sd-a", "sd_a")
    assert len(page.charts) == len(set(page.charts)) == 1 + 5 * 2 and len(list(out.glob("*.png"))) == 1 + 5 * 2
    assert sorted(f"{c}.png" for c in page.charts) == sorted(p.name for p in out.glob("*.png"))


def test_targets_whose_names_differ_in_punctuation_get_their_own_charts(tmp_path):
    results = hostile.colliding_targets_results(tmp_path / "results")
    out = tmp_path / "out"
    proc = fioscope("report", "--results", str(results), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    page = assert_inert(out, tmp_path, "/a/b", "/a_b")
    assert len(page.charts) == len(set(page.charts)) == 4 and len(list(out.glob("*.png"))) == 4  # randrw: read and write each


def test_a_failed_report_leaves_no_file_and_the_previous_report_whole(tmp_path):
    """A chart that fails to draw (here: mathtext that does not parse, put on the axes directly) half-way through."""
    from fioscope.reporting.charts import Line, time_chart
    from fioscope.reporting.html import Report, Section, write_report

    def report(broken: bool) -> Report:
        charts = [time_chart(f"c{i}", "ok", [Line("x", [1e9, 1e9 + 60], [1, 2])], "", []) for i in range(3)]
        if broken:
            charts[1].figure.axes[0].set_title("$\\undefinedcmd$")
        return Report("diagnosis", "t", sections=[Section("s", charts=charts)])

    fresh = tmp_path / "fresh"
    with pytest.raises(ValueError):
        write_report(report(True), fresh)
    assert not fresh.exists() and sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())
    previous = tmp_path / "previous"
    write_report(report(False), previous, pdf=True)
    before = {p.name: p.read_bytes() for p in previous.iterdir()}
    with pytest.raises(ValueError):
        write_report(report(True), previous, pdf=True)
    assert {p.name: p.read_bytes() for p in previous.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["previous"]


def test_a_killed_report_leaves_no_temporary_prometheus(tmp_path):
    """SIGKILL to ``fioscope report`` while its temporary Prometheus runs: the Prometheus ends too (its death signal),
    no orphan holding a port and the TSDB."""
    report = subprocess.Popen(fioscope_command("report", "--iostat", IOSTAT / "capped.json", "--output", tmp_path / "out"),
                              env=checkout_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if stat.rsplit(")", 1)[1].split()[1] == str(report.pid) and "prometheus" in stat.split(")")[0]:
                    found.append(int(entry.name))
        return found

    try:
        deadline = time.monotonic() + 120
        while not (prometheus := children()) and report.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert prometheus, "the report never started its temporary Prometheus"
        report.kill()
        report.wait()
        deadline = time.monotonic() + 20
        while Path(f"/proc/{prometheus[0]}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = Path(f"/proc/{prometheus[0]}").exists() and "Z" not in Path(f"/proc/{prometheus[0]}/stat").read_text().split(")")[1][:3]
        if alive:
            os.kill(prometheus[0], signal.SIGKILL)
        assert not alive, "the temporary Prometheus outlived its killed report"
    finally:
        if report.poll() is None:
            report.kill()
