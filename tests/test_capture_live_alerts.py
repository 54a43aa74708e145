"""Issue 51 item 5: a capture scraped live pages nobody for a scanner it does not have.

A real ``fioscope capture --web.listen-address`` and a real ``fioscope serve`` are scraped; their expositions are
replayed through the shipped rules by promtool (Prometheus 2.42 and 3.x): the capture's for 20 minutes pages
nothing, the serve's with its scan frozen (a stalled scan loop) still pages FioscopeResultScanStalled.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from fioscope_mixin import names as n
from fioscope_testkit.binaries import PROMETHEUS_LINES, require, require_prometheus
from fioscope_testkit.cli import fioscope_command, run
from fioscope_testkit.net import free_port, http_get
from fioscope_testkit.paths import REPO, checkout_env
from prometheus_client.parser import text_string_to_metric_families

JOB = """[livejob]
directory=${TARGET_DIR}
rw=randread
bs=4k
size=4m
runtime=30
time_based
ioengine=psync
"""
LABELS = {"job": "fioscope", "instance": "capture:9100", "host": "capture"}
MINUTES = 20


def _scrape_capture(tmp: Path) -> str:
    """/metrics of a real capture while its load runs (its listener up from before the layout to the report)."""
    require("fio")
    job = tmp / "livejob.fio"
    job.write_text(JOB)
    plan = tmp / "plan.yaml"
    plan.write_text(f"phases:\n  - idle: 1s\n  - {{job: {job}, duration: 30s}}\n")
    target = Path("/var/tmp") / f"capture-live-{os.getpid()}-{time.monotonic_ns()}"
    target.mkdir(parents=True)
    port = free_port()
    env = {**checkout_env(), "TMPDIR": str(tmp)}
    proc = subprocess.Popen(fioscope_command("capture", "--target.dir", target, "--output", tmp / "bundle", "--plan", plan,
                                             "--web.listen-address", f"127.0.0.1:{port}"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        text = ""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                text = http_get(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                text = ""
            if 'fio_run_running{' in text and "} 1" in text.split("fio_run_running{", 1)[1].split("\n", 1)[0]:
                break  # the load phase is running: the figures a stack sees mid-capture
            time.sleep(0.5)
        assert "fioscope_up" in text, (proc.poll(), text)
        return text
    finally:
        for _ in range(2):  # two: abort without a report (not what is tested here)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                time.sleep(0.3)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(target, ignore_errors=True)


def _series(exposition: str, frozen_scan: bool) -> list[dict]:
    """Every finite sample of ``exposition`` as a promtool input series, constant for MINUTES (the scraped values as
    the stack keeps seeing them); ``frozen_scan``: the last scan put at the replay's start (then never again)."""
    out = []
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            value = sample.value
            if not math.isfinite(value):
                continue
            if frozen_scan and sample.name == "fioscope_last_scan_timestamp_seconds":
                value = 0.0  # promtool's clock starts at 0: the scan loop's last scan, at the first scrape
            labels = {**sample.labels, **LABELS}
            selector = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
            out.append({"series": f"{sample.name}{{{selector}}}", "values": f"{value!r}x{MINUTES}"})
    return out


def _promtool_alerts(promtool: str, tmp: Path, series: list[dict], expected: list[dict]) -> subprocess.CompletedProcess:
    rules = tmp / "rules"
    rules.mkdir(exist_ok=True)
    for path in (REPO / "alerts").glob("*.rules.yaml"):
        shutil.copy(path, rules / path.name)
    test = {"rule_files": sorted(p.name for p in rules.glob("*.rules.yaml")), "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series,
                       "alert_rule_test": [{"eval_time": "1m", "alertname": n.ALERT_RESULT_SCAN_STALLED, "exp_alerts": []},
                                           {"eval_time": "5m", "alertname": n.ALERT_RESULT_SCAN_STALLED,
                                            "exp_alerts": expected}]}]}
    path = rules / "live.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return run([promtool, "test", "rules", str(path)], timeout=120)


@pytest.fixture(scope="module")
def capture_exposition(tmp_path_factory) -> str:
    return _scrape_capture(tmp_path_factory.mktemp("capture"))


@pytest.mark.parametrize("line", PROMETHEUS_LINES)
def test_a_capture_scraped_live_pages_no_stalled_scan(capture_exposition, tmp_path, line):
    promtool = require_prometheus("promtool", line)
    assert "fio_" in capture_exposition  # the capture's own figures were there to scrape
    proc = _promtool_alerts(promtool, tmp_path, _series(capture_exposition, frozen_scan=False), [])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("line", PROMETHEUS_LINES)
def test_a_stalled_serve_still_pages(exporter_factory, tmp_path, line):
    promtool = require_prometheus("promtool", line)
    exposition = exporter_factory().metrics_text()
    assert "fioscope_last_scan_timestamp_seconds" in exposition
    rule = next(r for path in (REPO / "alerts").glob("*.rules.yaml") for g in yaml.safe_load(path.read_text())["groups"]
                for r in g["rules"] if r.get("alert") == n.ALERT_RESULT_SCAN_STALLED)
    annotations = {k: v.replace("{{ $labels.instance }}", LABELS["instance"]).replace("{{ $value | humanizeDuration }}", "5m 0s")
                   for k, v in rule["annotations"].items()}  # at 5 min: the scan frozen at 0 is 5 min old
    expected = [{"exp_labels": {"severity": "critical", **LABELS}, "exp_annotations": annotations}]
    proc = _promtool_alerts(promtool, tmp_path, _series(exposition, frozen_scan=True), expected)
    assert proc.returncode == 0, proc.stdout + proc.stderr
