"""``fioscope report`` on hostile input (tests/hostile_reports.py): names that try to run scripts in the
report, iostat values that are not numbers, captures that are huge or decades long, names that collide.

Rendered in a real headless Chromium with the network off (test_reports.open_in_chromium); the offline
diagnosis runs the real promtool and Prometheus.
"""

from __future__ import annotations

import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import hostile_reports as hostile
import pytest
from test_reports import fioscope, open_in_chromium


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


def test_offline_diagnosis_of_hostile_names_runs_no_script(tmp_path):
    capture = hostile.hostile_capture(tmp_path / "capture.json")
    results = hostile.hostile_capped_results(tmp_path / "results")
    out = tmp_path / "out"
    proc = fioscope("report", "--iostat", str(capture), "--results", str(results), "--output", str(out), "--pdf")
    assert proc.returncode == 0, proc.stderr
    page = assert_inert(out, tmp_path, hostile.HOST, hostile.THROTTLED_DEVICE, hostile.OTHER_DEVICE, hostile.JOBNAME)
    assert "THROTTLED" in page.text  # the hostile name did not change the verdict
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 14 and all(n.isascii() and "<" not in n and '"' not in n and "$" not in n for n in pngs), pngs
    assert sorted(f"{c}.png" for c in page.charts) == pngs  # each section shows its own chart file


def test_live_diagnosis_of_hostile_labels_runs_no_script(tmp_path):
    """A live Prometheus whose series carry hostile labels: ALERTS, fioscope_disk_info names, fio runs."""
    from fioscope.reporting.iostat import backfilled, load_iostat

    captures = load_iostat(str(hostile.hostile_capture(tmp_path / "capture.json")))
    start, end = captures[0].samples[0].timestamp, captures[0].samples[-1].timestamp
    labels = {"job": "node", "instance": f"iostat:{hostile.HOST}", "host": hostile.HOST, "device": hostile.THROTTLED_DEVICE}
    alert = {**labels, "alertname": "FioscopeDiskThrottled", "alertstate": "firing", "severity": f"warning{hostile.SVG}"}
    info = {**labels, "name": f"vg0-{hostile.SCRIPT}"}
    times = [start + 15 * i for i in range(int((end - start) // 15))]
    extra = {"ALERTS": {_labels(alert): [(t, 1.0) for t in times]},
             "fioscope_disk_info": {_labels(info): [(t, 1.0) for t in times]}}
    with backfilled(captures, [], tmp_path / "work", extra) as server:
        out = tmp_path / "out"
        proc = fioscope("report", "--prometheus.url", server.url, "--from", str(start - 30), "--to", str(end), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    page = assert_inert(out, tmp_path, hostile.HOST, hostile.THROTTLED_DEVICE, f"vg0-{hostile.SCRIPT}", f"warning{hostile.SVG}")
    assert "THROTTLED" in page.text


def _labels(labels: dict[str, str]) -> str:
    from fioscope.reporting.iostat import _labels as om_labels

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
