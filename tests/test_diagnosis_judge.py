"""The diagnosis's judge and its pages apart (issue 54 item 1): ``diagnose`` returns a plain ``Diagnosis`` and its module
imports no rendering code; report.json and report.html render from a ``Diagnosis`` built by hand (no Prometheus)."""

from __future__ import annotations

import json
import subprocess
import sys

from fioscope_testkit.paths import REPO
from helpers.report_page import rendered

RENDERING = ("matplotlib", "jinja2", "fioscope.reporting.html", "fioscope.reporting.charts", "fioscope.reporting.diagnosis_page")


def test_the_judge_imports_no_rendering_code(tmp_path):
    """Import the judge alone in a fresh interpreter and read what came with it (sys.modules: the whole import graph)."""
    code = ("import sys, fioscope.reporting.diagnosis\n"
            f"print('\\n'.join(m for m in sys.modules if m.startswith({RENDERING!r})))\n")
    env = {"PYTHONPATH": f"{REPO / 'exporter'}:{REPO / 'mixin'}", "PATH": "/usr/bin:/bin", "MPLCONFIGDIR": str(tmp_path / "mpl")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [], f"the judge imports rendering code: {proc.stdout.split()}"


def _hand_built():
    """A Diagnosis as diagnose would return it, written out: loop0 throttled under one load, sda idle."""
    from fioscope.reporting.diagnosis import DeviceDiagnosis, Diagnosis, Firing
    from fioscope.reporting.phases import RunWindow, phases
    from fioscope.reporting.timeline import COLUMNS, CpuTimeline, Timeline
    from fioscope.verdicts import Verdict

    t0 = 1_700_000_000.0
    values = {"r/s": (5.0, 700.0), "w/s": (1.0, 300.0), "rkB/s": (20.0, 2800.0), "wkB/s": (4.0, 1200.0),
              "r_await": (0.5, 40.0), "w_await": (0.5, 60.0), "aqu-sz": (0.01, 50.0), "util": (1.0, 100.0),
              "rrqm/s": (0.0, 0.0), "wrqm/s": (0.0, 0.0)}
    series = {c: [(t0 + t, v[1] if 60 < t <= 180 else v[0]) for t in range(2, 242, 2)] for c, v in values.items()}
    timeline = Timeline("vm", "loop0", series, 2.0)
    run = RunWindow("capped-randrw", t0 + 60, t0 + 180, device="loop0", host="vm", iops=1000.0, asked="700,300")
    cpu = CpuTimeline("vm", {"iowait": [(t0 + t, 3.0) for t in range(2, 242, 2)], "idle": [(t0 + t, 90.0) for t in range(2, 242, 2)]})
    cut = phases(timeline, [run], t0, t0 + 240, cpu)
    held = [(t0 + 90, t0 + 180)]
    headline = Verdict("headline", False, "loop0 has been throttled by its provider since 00:14 at ~700 reads/s + ~300 writes/s",
                       {"device": "loop0", "host": "vm"})
    verdicts = [headline, Verdict("throttled", False, "loop0: THROTTLED", {"device": "loop0", "alerts": "FioscopeDiskThrottled"}),
                Verdict("idle-devices", None, "Idle, not charted: sda", {"count": 1})]
    fired = [Firing("FioscopeDiskThrottled", {"host": "vm", "device": "loop0", "severity": "warning"}, t0 + 90, t0 + 180)]
    devices = [DeviceDiagnosis("vm", "loop0", "loop0", timeline, headline=headline, phases=cut, throttled=held, shaded=[run],
                               cause={"key": "provider_cap"}, cause_episodes=[{"cause": "provider_cap", "start": t0 + 90}]),
               DeviceDiagnosis("vm", "sda", "sda", Timeline("vm", "sda", {c: [] for c in COLUMNS}), idle=True)]
    return Diagnosis("Disk diagnosis by hand", t0, t0 + 240, ["Window by hand"], verdicts, devices, [run], [cpu], fired,
                     {"FioscopeDiskThrottled": "Disk throttled"}), series


def test_report_json_and_html_render_from_a_hand_built_diagnosis(tmp_path):
    from fioscope.reporting.diagnosis_page import diagnosis_report
    from fioscope.reporting.html import write_report

    diagnosis, series = _hand_built()
    out = tmp_path / "out"
    write_report(diagnosis_report(diagnosis), out)
    doc = json.loads((out / "report.json").read_text())
    assert doc["kind"] == "diagnosis" and doc["title"] == "Disk diagnosis by hand" and doc["summary"] == ["Window by hand"]
    assert [v["kind"] for v in doc["verdicts"]] == ["headline", "throttled", "idle-devices"]
    loop0, sda = doc["devices"]
    assert loop0["verdict"] == diagnosis.verdicts[0].text and loop0["ok"] is False and loop0["charted"] is True
    assert loop0["series"]["r/s"] == [list(p) for p in series["r/s"]]  # every point (fewer than MAX_POINTS)
    assert loop0["throttled"] == [[diagnosis.start + 90, diagnosis.start + 180]] and loop0["cause"] == {"key": "provider_cap"}
    assert [p["label"] for p in loop0["phases"]] == ["idle 1", "capped-randrw 1,000 IOPS (asked 700,300)", "idle 2"]
    assert sda["idle"] is True and sda["series"]["r/s"] == []
    assert doc["alerts"] == [{"alert": "FioscopeDiskThrottled", "summary": "Disk throttled", "start": diagnosis.start + 90,
                              "end": diagnosis.start + 180, "labels": {"host": "vm", "device": "loop0", "severity": "warning"}}]
    assert len(list(out.glob("*.png"))) == 5 + 1  # loop0's five charts, avg-cpu once
    page = rendered(out, tmp_path)
    [headline] = page.of("headline", device="loop0")
    assert headline["text"].strip().startswith("loop0 has been throttled by its provider since 00:14")
    assert "capped-randrw 1,000 IOPS (asked 700,300)" in page.text and "Disk throttled" in page.text


def _capped_input(throttled: bool):
    """loop0 under one load from 03:35 to the window's end at 03:45, capped at 700 reads/s + 300 writes/s; the throttling
    alert held from 03:39 (``throttled``), the cause the rules named: the provider's cap, at 873.5x its normal await."""
    import datetime as dt

    from fioscope.reporting.cause_episodes import CauseEpisode, CauseFindings
    from fioscope.reporting.diagnosis import DiagnosisInput, FioFigures, Firing
    from fioscope.reporting.live import alert_summaries
    from fioscope.reporting.phases import RunWindow
    from fioscope.reporting.timeline import Timeline
    from fioscope.thresholds import shipped

    t0 = dt.datetime(2026, 12, 6, 3, 30, tzinfo=dt.UTC).timestamp()
    start, end, capped = t0 + 300, t0 + 900, t0 + 540
    load = {"r/s": 700.0, "w/s": 300.0, "rkB/s": 2800.0, "wkB/s": 1200.0, "r_await": 873.5, "w_await": 900.0, "aqu-sz": 64.0,
            "util": 100.0, "rrqm/s": 0.0, "wrqm/s": 0.0}
    series = {c: [(t0 + t, v if t0 + t > start else 0.0) for t in range(2, 902, 2)] for c, v in load.items()}
    timeline = Timeline("vm", "loop0", series, 2.0)
    run = RunWindow("capped-randrw", start, end, device="loop0", host="vm", iops=1000.0, asked="1400,600")
    labels = {"host": "vm", "device": "loop0"}
    fired = [Firing("FioscopeDiskThrottledUnderFioLoad", labels, capped, end)] if throttled else []
    figures = {"await_seconds": 0.8735, "normal_await_seconds": 0.001, "iops": 1000.0, "normal_iops": 1000.0}
    causes = CauseFindings([CauseEpisode("vm", "loop0", capped, end, "provider_cap", figures=figures)] if throttled else [])
    return DiagnosisInput(start=t0, end=end, step=15.0, timelines=[timeline], cpus=[], runs=[run], fired=fired, names={},
                          declared={}, fio=FioFigures(), thresholds=shipped(), summaries=alert_summaries(shipped()), causes=causes)


def test_the_headline_is_one_short_sentence_then_its_evidence(tmp_path):
    """Item 3: what, since when, why, at which ceiling, in one short sentence; the evidence after it; the headline, the
    verdict table's throttling line and report.json say the same words (one writer: reporting.wording)."""
    from fioscope.reporting.diagnosis import diagnose
    from fioscope.reporting.diagnosis_page import diagnosis_report
    from fioscope.reporting.reportjson import report_json

    diagnosis = diagnose(_capped_input(throttled=True))
    [headline] = [v for v in diagnosis.verdicts if v.kind == "headline"]
    sentence, _, evidence = headline.text.partition(". ")
    print(f"\n[headline] {headline.text}")
    assert sentence == "loop0 has been throttled by its provider since 03:39 UTC at ~700 reads/s + ~300 writes/s"
    assert len(sentence.split()) <= 20 and headline.ok is False
    # the evidence: the load, the idle period, the cause with its figures read as a chart reads them
    assert evidence.startswith("Throttled from 03:39:00 to 03:45:00 UTC: capped-randrw asking 2,000 IOPS: it stayed at ~1,000 IOPS")
    assert "slow because of the provider's cap on the volume" in evidence and "870x its normal of 1 ms" in evidence
    assert "873.5x" not in headline.text
    [row] = [v for v in diagnosis.verdicts if v.kind == "throttled"]
    assert row.text.startswith("loop0: THROTTLED — IOPS flat at a ceiling of 1,000/s (2026-12-06 03:39:00–03:45:00 UTC)")
    doc = json.loads(report_json(diagnosis_report(diagnosis)))
    assert doc["devices"][0]["verdict"] == headline.text and doc["verdicts"][0]["text"] == headline.text

    calm = diagnose(_capped_input(throttled=False))
    [headline] = [v for v in calm.verdicts if v.kind == "headline"]
    assert headline.text.startswith("loop0 is not throttled. capped-randrw asking 2,000 IOPS: got 1,000 of them"), headline.text
    [row] = [v for v in calm.verdicts if v.kind == "throttled"]
    assert row.text == "loop0: not throttled (no throttling signature in the window)"


def test_the_phase_table_fits_the_page_at_1280_px(tmp_path):
    """Item 3: the phase table's 17 columns fit the page's width in Chromium at 1,280 px (its columns past rrqm/s were
    cut: 200-400 px past the page). A copy of the page gets a script that writes each table's overflow into the DOM."""
    import re
    import subprocess

    from fioscope.reporting.diagnosis_page import diagnosis_report
    from fioscope.reporting.html import write_report
    from helpers.report_page import chromium

    diagnosis, _ = _hand_built()
    for p in diagnosis.devices[0].phases:  # a capture's long names: the disk under the load borrows them
        p.label = f"cloud-sla-70-30 on loop0 {p.label}"
    out = tmp_path / "out"
    write_report(diagnosis_report(diagnosis), out)
    probe = tmp_path / "probe.html"
    probe.write_text((out / "report.html").read_text().replace("</body>", (
        '<script>document.body.setAttribute("data-overflow", JSON.stringify([...document.querySelectorAll("table")]'
        '.map(t => [t.className, t.parentElement.scrollWidth - t.parentElement.clientWidth])));</script></body>')))
    dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=127.0.0.1:9",
                          "--window-size=1280,2400", "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    tables = json.loads(re.search(r'data-overflow="([^"]*)"', dom.stdout).group(1).replace("&quot;", '"'))
    print(f"\n[phase table] overflow per table (class, px): {tables}")
    assert [c for c, _ in tables] == ["phases", "alerts"] and all(px == 0 for _, px in tables), tables
