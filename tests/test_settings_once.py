"""Settings loaded once per command and passed down (issue 26 item 4): importing the package reads no settings file,
and a live report judges by the thresholds its --set gives, as the stack's rules were generated with them."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import fioscope
from fioscope_testkit.paths import IOSTAT, REPO

# every module of both packages a command may import: none may open alerts/config.yaml (or any YAML) on import
IMPORTS = ("import pkgutil, importlib, fioscope, fioscope_mixin\n"
           "for pkg in (fioscope, fioscope_mixin):\n"
           "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
           "        if m.name not in ('fioscope.__main__', 'fioscope_mixin.__main__'):\n"
           "            importlib.import_module(m.name)\n")


def test_importing_the_packages_reads_no_settings_file(tmp_path):
    strace = require("strace")
    trace = tmp_path / "trace"
    # a cache of its own: with the checkout's __pycache__ (any earlier run writes it) only .pyc files are opened
    env = {"PYTHONPATH": f"{REPO / 'exporter'}:{REPO / 'mixin'}", "PATH": "/usr/bin:/bin", "MPLCONFIGDIR": str(tmp_path / "mpl"),
           "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache")}
    proc = subprocess.run([strace, "-f", "-qq", "-e", "trace=openat", "-o", str(trace), sys.executable, "-c", IMPORTS],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    opened = re.findall(r'openat\(AT_FDCWD, "([^"]+)"', trace.read_text())
    assert any(p.endswith("fioscope/histogram.py") for p in opened), "the trace saw the imports"
    read = [p for p in opened if p.endswith((".yaml", ".yml", "runbook.md"))]
    assert not read, read


def test_a_bad_set_is_one_line_naming_the_key(tmp_path):
    proc = fioscope("report", "--results", str(IOSTAT / "healthy-results"), "--set", "thresholds.disk_latency_sla_secs=1",
                    "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "thresholds.disk_latency_sla_secs" in proc.stderr and "disk_latency_sla_seconds" in proc.stderr


@pytest.mark.slow  # a temporary Prometheus backfilled with a capture, two reports: ~20 s
def test_a_live_report_judges_by_the_thresholds_set_with_set(tmp_path):
    from fioscope.reporting.offline.load import load_iostat
    from fioscope.reporting.offline.pipeline import backfilled
    from fioscope.reporting.offline.rules import generate_rules
    from fioscope.thresholds import shipped

    captures = load_iostat(str(IOSTAT / "healthy.json"))
    start, end = captures[0].samples[0].timestamp, captures[0].samples[-1].timestamp
    texts = {}
    with backfilled(captures, [], tmp_path / "work", generate_rules(shipped())) as server:
        for name, sets in (("default", []), ("set", ["--set", "thresholds.disk_latency_sla_seconds=0.25"])):
            out = tmp_path / name
            proc = fioscope("report", "--prometheus.url", server.url, "--from", str(start - 30), "--to", str(end), *sets,
                            "--output", str(out))
            assert proc.returncode == 0, proc.stderr
            texts[name] = [v["text"] for v in json.loads((out / "report.json").read_text())["verdicts"] if v["kind"] == "sla"]
    assert texts["default"] and all("30 ms" in t for t in texts["default"]), texts
    assert texts["set"] and all("250 ms" in t and "30 ms" not in t for t in texts["set"]), texts
