"""One duration parser, one size parser, one YAML loader (fioscope_mixin.units / .yamlfile) behind every
entry point of the exporter: the config file, the flags of ``run``/``report``/the sweep, the offline
diagnosis' ``for:``. ``1d`` and ``1h30m`` work wherever Prometheus accepts them; ``abc`` is one clear error;
a duplicate YAML key is refused wherever the exporter reads YAML.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fioscope_testkit.cli import fioscope
from fioscope_testkit.paths import REPO


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# ---- the config file ----------------------------------------------------------------------------

def write_config(tmp_path: Path, scan: str = "5s", idle: str = "60s", limit: str = "700") -> Path:
    path = tmp_path / "fioscope.yaml"
    path.write_text(f"results_dir: {tmp_path / 'results'}\nscan_interval: {scan}\n"
                    f"targets:\n  - name: t\n    directory: {tmp_path / 'target'}\n    limits: {{read_bandwidth_bytes: {limit}}}\n"
                    f"schedule:\n  - job: etcd-wal\n    target: t\n    idle: {idle}\n    every: 1d\n")
    return path


def test_config_durations_take_prometheus_format(tmp_path):
    from fioscope.config import load_config

    cfg = load_config(write_config(tmp_path, scan="1h30m", idle="1d", limit="125MB/s"))
    assert cfg.scan_interval_seconds == 5400
    [entry] = cfg.schedule
    assert (entry.idle_seconds, entry.every_seconds) == (86400, 86400)
    assert cfg.targets[0].limits.read_bandwidth_bytes == 125e6  # declared limits: a bare M is 1000-based


@pytest.mark.parametrize("field,value", [("scan", "abc"), ("idle", "abc"), ("limit", "9" * 400)])
def test_config_bad_value_is_one_line_exit_2(tmp_path, field, value):
    path = write_config(tmp_path, **{field: value})
    proc = fioscope("check", "--config.file", str(path))
    line = one_line(proc)
    assert proc.returncode == 2 and str(path) in line and ("'abc' is not a duration" in line or "is not a number" in line), line


# ---- flags ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--sla.latency", "--fsync.threshold"])
def test_run_duration_flags(tmp_path, flag):
    # a good value gets past the flag (to the unknown profile); a bad one is refused naming the flag
    ok = fioscope("run", "no-such-profile", "--target.dir", str(tmp_path), "--results.dir", str(tmp_path / "r"), flag, "1h30m")
    assert ok.returncode == 2 and "no such job file or profile" in one_line(ok)
    bad = fioscope("run", "no-such-profile", "--target.dir", str(tmp_path), "--results.dir", str(tmp_path / "r"), flag, "abc")
    assert bad.returncode == 2 and f"{flag}: 'abc' is not a duration" in one_line(bad)


def test_report_last_takes_days(tmp_path):
    from fioscope_testkit.net import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    ok = fioscope("report", "--prometheus.url", dead, "--last", "1d", "--output", str(tmp_path / "out"))
    assert ok.returncode == 2 and "cannot reach Prometheus" in one_line(ok)  # --last 1d was taken
    bad = fioscope("report", "--prometheus.url", dead, "--last", "abc", "--output", str(tmp_path / "out"))
    assert bad.returncode == 2 and "--last: 'abc' is not a duration" in one_line(bad)
    target = fioscope("report", "--results", str(tmp_path), "--latency-target", "abc", "--output", str(tmp_path / "out"))
    assert target.returncode == 2 and "--latency-target: 'abc' is not a duration" in one_line(target)


def test_sweep_runtime_in_days_and_a_bad_one(tmp_path):
    from fioscope.jobs import JobFileError, load_job
    from fioscope.sweep import Progress, parse_depths, write_sweep

    path = write_sweep(REPO / "fio-jobs" / "iodepth-sweep.fio", parse_depths("1,4"), 1, tmp_path)
    progress = Progress(load_job(path, {"TARGET_DIR": str(tmp_path), "RUNTIME": "1d", "RAMP": "1m"}))
    assert list(progress.planned.values()) == [86400 + 60, 86400 + 60]  # was 0 + 60: "1d" read as nothing
    with pytest.raises(JobFileError, match=r"runtime: 'abc' is not a duration"):
        Progress(load_job(path, {"TARGET_DIR": str(tmp_path), "RUNTIME": "abc"}))
    proc = fioscope("run", "iodepth-sweep", "--target.dir", str(tmp_path), "--results.dir", str(tmp_path / "r"),
                    "--iodepth", "1", "--env", "RUNTIME=abc")
    assert proc.returncode == 2 and "runtime: 'abc' is not a duration" in one_line(proc)
    assert not list((tmp_path / "r").glob("*.json")) if (tmp_path / "r").exists() else True


# ---- the offline diagnosis' rules ----------------------------------------------------------------

@pytest.mark.parametrize("override,message", [
    ("durations.throttled=5 minutes", "durations.throttled: '5 minutes' is not a Prometheus duration"),
    ("thresholds.throttle.window=0.5m", "thresholds.throttle.window: '0.5m' is not a Prometheus duration"),
])
def test_a_mistyped_rule_duration_is_refused_where_the_rules_come_from(override, message):
    """The offline diagnosis evaluates the rules the mixin generates from the settings: a mistyped ``for:`` or window
    is refused by the one settings loader (it was read as 0 s: the alert counted as fired at once)."""
    from fioscope_mixin.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match=message):
        load_settings([override])


def test_offline_rules_mistyped_for_is_an_error_naming_the_alert():
    from fioscope.reporting import ReportError
    from fioscope.reporting.offline.rules import rule_hold

    with pytest.raises(ReportError, match="alert 'Mistyped': for: '5 minutes' is not a duration"):
        rule_hold({"alert": "Mistyped", "for": "5 minutes"}, "alerts/alerts.rules.yaml")


# ---- YAML ----------------------------------------------------------------------------------------

def test_web_config_duplicate_key_is_refused(tmp_path):
    from fioscope.webconfig import WebConfigError, load_web_config

    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users: {}\nbasic_auth_users: {}\n")
    with pytest.raises(WebConfigError, match=r"web.yml: not valid YAML at line 2: duplicate key 'basic_auth_users'"):
        load_web_config(path)


def test_no_other_yaml_loader_or_unit_parser_in_the_exporter():
    """Every YAML read goes through fioscope_mixin.yamlfile; no module keeps its own unit regex."""
    import re

    exporter = REPO / "exporter" / "fioscope"
    offenders = []
    for path in exporter.rglob("*.py"):
        if path.name == "settings.py":  # moving into fioscope_mixin (issue 19), with the same loader
            continue
        text = path.read_text()
        if re.search(r"yaml\.(safe_load|load)\(|SafeLoader", text) or re.search(r"\(ms\|s\|m\|h", text):
            offenders.append(path.name)
    assert offenders == []
