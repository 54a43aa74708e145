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
