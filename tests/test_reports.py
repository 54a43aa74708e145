"""``fioscope report`` and the command-line sweep, against real fio, Prometheus and Chromium.

Fast: tiny fio runs in /var/tmp, the iostat captures recorded on lab disks
(tests/fixtures/iostat, see capture.sh), one headless Chromium per rendered report.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fioscope_testkit.cli import fioscope
from fioscope_testkit.net import free_port
from fioscope_testkit.paths import IOSTAT, REPO
from fioscope_testkit.prometheus import Prometheus
from helpers.report_page import lab_device, rendered

LAB_CAP_IOPS = 200  # capture.sh: --read-iops 200


# ---- offline diagnosis from real iostat captures -----------------------------------------------

@pytest.mark.slow
def test_offline_diagnosis_capped_disk_is_throttled_at_the_lab_cap(tmp_path):
    out, results = tmp_path / "capped", tmp_path / "results"
    results.mkdir()
    for path in (IOSTAT / "capped-results").glob("*.json"):  # the run as if its target declared a 30 ms SLA
        doc = json.loads(path.read_text())
        doc["fioscope"]["sla_latency_seconds"] = 0.03
        (results / path.name).write_text(json.dumps(doc))
    proc = fioscope("report", "--iostat", str(IOSTAT / "capped.json"), "--results", str(results), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    page = rendered(out, tmp_path)
    device = lab_device(IOSTAT / "capped-results")
    [throttled] = page.of("throttled", device=device)
    assert throttled["data-ok"] == "false", throttled["text"]
    assert abs(float(throttled["data-ceiling-iops"]) - LAB_CAP_IOPS) <= 0.1 * LAB_CAP_IOPS
    assert throttled["data-alerts"] == "FioscopeDiskThrottledUnderFioLoad"  # the rule by name beside the plain words
    # issue 29: the capture of a capped lab disk names the provider's cap as the slow episode's cause, and nothing else
    [headline] = page.of("headline", device=device)
    assert "slow because of the provider's cap on the volume" in headline["text"], headline["text"]
    [capped] = [d for d in json.loads((out / "report.json").read_text())["devices"] if d["device"] == device]
    assert capped["cause"]["key"] == "provider_cap" and capped["cause_episodes"], capped["cause"]
    assert {e["cause"] for e in capped["cause_episodes"]} == {"provider_cap"}, capped["cause_episodes"]
    [sla] = page.of("fio-sla", jobname="rand-read-iops")
    assert sla["data-ok"] == "false" and "SLA its target declares (30 ms)" in sla["text"]  # ~640 ms p99 behind the cap
    # the host's own disk carried no capped load
    assert all(v["data-ok"] == "true" for v in page.of("throttled") if v["data-device"] != device)
    assert len(list(out.glob("*.png"))) == 5 * 2 + 1  # five iostat charts per device, avg-cpu once for the host
    assert "rand-read-iops" in (out / "report.html").read_text()  # the fio run is shaded and labelled


@pytest.mark.slow
def test_offline_diagnosis_healthy_disk_is_not_throttled(tmp_path):
    from fioscope.reporting.offline.pipeline import offline_diagnosis
    from fioscope.thresholds import shipped

    report = offline_diagnosis([str(IOSTAT / "healthy.json")], str(IOSTAT / "healthy-results"), None, shipped())
    throttled = [v for v in report.verdicts if v.kind == "throttled"]
    assert throttled and all(v.ok for v in throttled), [v.text for v in throttled]
    headlines = [v.text for v in report.verdicts if v.kind == "headline"]
    assert headlines and not any("slow because" in text for text in headlines), headlines  # no cause on a healthy disk
    assert [v.ok for v in report.verdicts if v.kind == "alerts"] == [True]


def burst_then_cap_capture(path: Path, step: int = 5) -> Path:
    """An iostat -x -t -o JSON capture of vdb: light reads for 12 min, a 3000 IOPS burst at 2 ms for 5 min
    (burst credits), then capped at 300 IOPS with the same 6 in flight for 6 min (the scenarios' burst_then_cap)."""
    start = dt.datetime(2026, 11, 22, 20, 0, tzinfo=dt.UTC)
    stats: list[dict] = []
    for i in range(23 * 60 // step):
        t = i * step
        if t < 12 * 60:
            r, await_ms, util, queue = 50.0, 1.0, 5.0, 0.05
        elif t < 17 * 60:
            r, await_ms, util, queue = 3000.0, 2.0, 100.0, 6.0
        else:
            r, await_ms, util, queue = 300.0, 20.0, 100.0, 6.0
        disk = {"disk_device": "vdb", "r/s": r, "w/s": 0.0, "d/s": 0.0, "f/s": 0.0, "rkB/s": r * 4, "wkB/s": 0.0, "dkB/s": 0.0,
                "rrqm/s": 0.0, "wrqm/s": 0.0, "drqm/s": 0.0, "rrqm": 0.0, "wrqm": 0.0, "drqm": 0.0, "r_await": await_ms,
                "w_await": 0.0, "d_await": 0.0, "f_await": 0.0, "rareq-sz": 4.0, "wareq-sz": 0.0, "dareq-sz": 0.0,
                "aqu-sz": queue, "util": util}
        stats.append({"timestamp": (start + dt.timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%S+0000"),
                      "avg-cpu": {"user": 5.0, "nice": 0.0, "system": 5.0, "iowait": 20.0, "steal": 0.0, "idle": 70.0}, "disk": [disk]})
    host = {"nodename": "vm", "sysname": "Linux", "release": "6.1", "machine": "x86_64", "number-of-cpus": 2, "date": "2026-11-22",
            "statistics": stats}
    path.write_text(json.dumps({"sysstat": {"hosts": [host]}}))
    return path


def test_offline_diagnosis_burst_then_cap_is_throttled(tmp_path):
    """Burst credits spent: FioscopeDiskThrottledAfterBurst fires, so the verdict says throttled (it said
    "not throttled" while its own alert list fired that alert: the diagnosis had its own list of throttling alerts)."""
    from fioscope.reporting.offline.pipeline import offline_diagnosis
    from fioscope.thresholds import shipped
    from fioscope_mixin.names import ALERT_DISK_THROTTLED_AFTER_BURST

    report = offline_diagnosis([str(burst_then_cap_capture(tmp_path / "burst.json"))], None, None, shipped())
    [alerts] = [v for v in report.verdicts if v.kind == "alerts"]
    assert ALERT_DISK_THROTTLED_AFTER_BURST in alerts.data["alerts"]  # by name in report.json; the page says what it means
    [throttled] = [v for v in report.verdicts if v.kind == "throttled"]
    assert not throttled.ok and ALERT_DISK_THROTTLED_AFTER_BURST in throttled.data["alerts"], throttled.text


def test_iostat_counters_rebuild_the_iostat_columns():
    """The counters the rules read give back iostat's own figures for each interval."""
    from fioscope.reporting.offline.counters import counter_series
    from fioscope.reporting.offline.load import load_iostat

    [capture] = load_iostat(str(IOSTAT / "capped.json"))
    series = counter_series(capture)
    device = lab_device(IOSTAT / "capped-results")
    labels = next(k for k in series["node_disk_reads_completed_total"] if f'device="{device}"' in k)
    sample = capture.samples[10]
    reads = dict(series["node_disk_reads_completed_total"][labels])
    busy = dict(series["node_disk_read_time_seconds_total"][labels])
    before = max(t for t in reads if t < capture.samples[9].timestamp + 1e-6)
    dt = sample.timestamp - before
    r_per_s = (reads[sample.timestamp] - reads[before]) / dt
    await_s = (busy[sample.timestamp] - busy[before]) / (reads[sample.timestamp] - reads[before])
    assert r_per_s == pytest.approx(sample.disks[device]["r/s"], rel=1e-6)
    assert await_s == pytest.approx(sample.disks[device]["r_await"] / 1000, rel=1e-6)


# ---- performance and comparison from real fio runs ----------------------------------------------

@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A real sweep (qd 1, 16; twice) run through `fioscope run` under a terminal."""
    base = Path(tempfile_dir()) / f"reports-sweep-{os.getpid()}"
    target, results = base / "target", base / "results"
    target.mkdir(parents=True, exist_ok=True)
    proc = fioscope("run", "iodepth-sweep", "--target.dir", str(target), "--results.dir", str(results), "--iodepth", "1,16",
                    "--repeat", "2", "--env", "RUNTIME=1", "--env", "RAMP=1", "--env", "SIZE=8m", tty=True)
    yield proc, results, base
    shutil.rmtree(base, ignore_errors=True)


def tempfile_dir() -> str:
    return "/var/tmp" if os.path.isdir("/var/tmp") else "/tmp"


def test_sweep_from_the_command_line_with_progress_on_a_terminal(sweep):
    proc, results, _ = sweep
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\[\d/4\] sweep-qd1-r1, ETA \d+s", proc.stdout), proc.stdout  # script(1) merges stderr
    result = json.loads(next(results.glob("iodepth-sweep-*.json")).read_text())["jobs"]
    assert [j["jobname"] for j in result] == ["sweep-qd1-r1", "sweep-qd16-r1", "sweep-qd1-r2", "sweep-qd16-r2"]
    assert {j["job options"]["iodepth"] for j in result} == {"1", "16"}
    assert all(j["job options"].get("ramp_time") == "1" or "ramp_time" not in j["job options"] for j in result)


def test_run_is_quiet_in_a_pipe(tmp_path):
    proc = fioscope("run", "iodepth-sweep", "--target.dir", str(tmp_path), "--results.dir", str(tmp_path / "r"),
                    "--iodepth", "1", "--env", "RUNTIME=1", "--env", "RAMP=0", "--env", "SIZE=4m")
    assert proc.returncode == 0, proc.stderr
    assert "ETA" not in proc.stderr + proc.stdout and "\r" not in proc.stderr


def test_performance_report_has_error_bars_knee_and_table(sweep, tmp_path):
    from fioscope.reporting.performance import is_steep, performance_report
    from fioscope.thresholds import shipped
    from fioscope.reporting.results import curves, load_results

    _, results, _ = sweep
    samples = load_results(results)
    [points] = curves(samples).values()
    assert [(p.depth, p.repeats) for p in points] == [(1, 2), (16, 2)]
    report = performance_report(samples, str(results), latency_target=0.05, thresholds=shipped())
    [section] = report.sections
    [knee] = [v for v in section.verdicts if v.kind == "knee"]
    # the knee is the point before the first steep step, read from the data
    steep = [is_steep(a, b, False) for a, b in itertools.pairwise(points)]
    expected = points[steep.index(True)] if True in steep else points[-1]
    assert knee.data["depth"] == expected.depth
    axes = section.charts[0].figure.axes[0]
    bars = [c for c in axes.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars) == 2 and all(c.has_xerr and c.has_yerr for c in bars)
    assert all(p.iops_sd > 0 and p.lat_sd > 0 for p in points)  # spread across the two repeats
    proc = fioscope("report", "--results", str(results), "--output", str(tmp_path / "perf"), "--latency-target", "50ms", "--pdf")
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "perf" / "report.html").read_text()
    assert html.count("<tr>") == 1 + len(points) and "queue depth" in html
    assert (tmp_path / "perf" / "report.pdf").read_bytes().startswith(b"%PDF")


@pytest.fixture(scope="module")
def capped_sweep(sweep):
    """The same sweep under fio's own rate cap (rate_iops): a real, slower candidate, at a tenth of the slowest baseline
    point (a fixed 300/s is no deficit on a disk that does ~300/s at qd 1)."""
    _, results, base = sweep
    slowest = min(job["read"]["iops"] for path in results.glob("*.json") for job in json.loads(path.read_text())["jobs"])
    capped, job = base / "capped-results", base / "iodepth-sweep.fio"
    job.write_text((REPO / "fio-jobs" / "iodepth-sweep.fio").read_text().replace(
        "[global]\n", f"[global]\nrate_iops={max(10, int(slowest / 10))}\n"))
    proc = fioscope("run", str(job), "--target.dir", str(base / "target"), "--results.dir", str(capped), "--iodepth", "1,16",
                    "--repeat", "2", "--env", "RUNTIME=1", "--env", "RAMP=0", "--env", "SIZE=8m")
    assert proc.returncode == 0, proc.stderr
    return capped


@pytest.mark.slow
def test_comparison_rate_capped_candidate_is_significantly_worse(sweep, capped_sweep, tmp_path):
    _, baseline, _ = sweep
    capped = capped_sweep
    out = tmp_path / "cmp"
    proc = fioscope("report", "--baseline", str(baseline), "--candidate", str(capped), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    page = rendered(out, tmp_path)
    [verdict] = page.of("comparison")
    assert verdict["data-significant"] == "true"
    # significant where the baseline's repeats agree (this machine is shared: a noisy depth may not be)
    assert re.search(r"lower IOPS at qd", verdict["text"]) and "higher IOPS" not in verdict["text"], verdict["text"]
    # fio's rate cap spaces requests out rather than queueing them: latency is no worse (the lab e2e checks that side)
    html = (out / "report.html").read_text()
    assert 'class="significant"' in html
    # baseline and candidate named as such; a summary table first, better/worse per metric and depth
    assert f"baseline {baseline}" in html and f"candidate {capped}" in html
    assert html.index("Summary: candidate against baseline") < html.index("<img")
    assert "worse at qd" in html and "MB/s" not in page.text
    shutil.copy(tmp_path / "screenshot.png", out / "screenshot-comparison.png")


def test_comparison_of_two_tags_in_one_results_dir(sweep, capped_sweep, tmp_path):
    _, baseline, _ = sweep
    both = tmp_path / "both"
    both.mkdir()
    for source, tag in ((baseline, "plain"), (capped_sweep, "capped")):
        for path in source.glob("*.json"):
            doc = json.loads(path.read_text())
            doc["fioscope"]["tags"] = {"config": tag}
            (both / f"{tag}-{path.name}").write_text(json.dumps(doc))
    out = tmp_path / "tags"
    proc = fioscope("report", "--results", str(both), "--baseline", "tag:config=plain", "--candidate", "tag:config=capped",
                    "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    # the same verdicts as the two directories compared: the tags chose exactly each side's results
    # (whether the cap's deficit is significant depends on this machine's noise: the slow test judges that)
    by_dirs = fioscope("report", "--baseline", str(baseline), "--candidate", str(capped_sweep), "--output", str(tmp_path / "dirs"))
    assert by_dirs.returncode == 0, by_dirs.stderr
    tagged, dirs = (comparison_verdicts(d) for d in (out, tmp_path / "dirs"))
    assert tagged and tagged == dirs, (tagged, dirs)
    assert "fio comparison — baseline tag:config=plain vs candidate tag:config=capped" in (out / "report.html").read_text()
    missing = fioscope("report", "--results", str(both), "--baseline", "tag:config=nope", "--candidate", "tag:config=capped",
                       "--output", str(tmp_path / "none"))
    assert_one_line_failure(missing, tmp_path / "none", "--baseline", "no result matches")


def comparison_verdicts(out: Path) -> list[tuple[str, dict]]:
    """The comparison verdicts of a report (report.json, as the page shows them): text and data (significance)."""
    verdicts = json.loads((out / "report.json").read_text())["verdicts"]
    return [(v["text"], v["data"]) for v in verdicts if v["kind"] == "comparison"]


def test_comparison_same_directory_is_no_significant_difference(sweep, tmp_path):
    _, results, _ = sweep
    proc = fioscope("report", "--baseline", str(results), "--candidate", str(results), "--output", str(tmp_path / "same"))
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "same" / "report.html").read_text()
    assert "no significant difference" in html and 'data-significant="true"' not in html


def test_comparison_names_each_direction_with_its_own_depths():
    """A p99 that fell at one depth and rose at others reads as both, worse first, never a blended "changed"
    (the lab sweep of a capped disk: the cap binds from qd 4, qd 1 is as fast or faster)."""
    from fioscope.reporting.comparison import conclusion

    def row(depth, iops, p99):
        return depth, {"iops": iops, "lat_p99": p99, "bw": iops}

    rows = [row(1, (0.01, False), (-0.18, True)), row(4, (-0.15, True), (1.5, True)),
            row(16, (-0.45, True), (4.0, True)), row(64, (-0.58, True), (15.0, True))]
    assert conclusion(rows) == ("candidate 15–58 % lower IOPS at qd 4–64 (worse); "
                                "150–1500 % higher p99 latency at qd 4–64 (worse), 18 % lower at qd 1 (better); "
                                "15–58 % lower bandwidth at qd 4–64 (worse)")
    # a range never claims a depth it skips
    gaps = [row(1, (-0.2, True), (0, False)), row(4, (0.0, False), (0, False)), row(16, (-0.3, True), (0, False))]
    assert conclusion(gaps) == "candidate 20–30 % lower IOPS at qd 1, 16 (worse); 20–30 % lower bandwidth at qd 1, 16 (worse)"
    assert conclusion([row(1, (0.01, False), (0.02, False))]) == "no significant difference"
    # a small significant change is not "0 %"; a change from a zero baseline has a direction
    assert conclusion([row(1, (-0.004, True), (math.inf, True))]) == \
        "candidate 0.4 % lower IOPS at qd 1 (worse); ∞ % higher p99 latency at qd 1 (worse); 0.4 % lower bandwidth at qd 1 (worse)"


# ---- bad input: one line, non-zero, no traceback, no file ----------------------------------------

def assert_one_line_failure(proc: subprocess.CompletedProcess, out: Path, *words: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert not (out / "report.html").exists() and not list(out.glob("*.png")) if out.exists() else True


def test_reports_read_the_annotation_as_the_exporter_does(sweep, tmp_path, caplog):
    """Both report readers take the fioscope annotation through resultfile.Annotation: its target and tags
    are used, and a malformed one skips its file with one warning naming it (the others still count)."""
    from fioscope.reporting.offline.load import load_fio_runs
    from fioscope.reporting.results import load_results

    _, results, _ = sweep
    mixed = tmp_path / "results"
    shutil.copytree(results, mixed)
    first = sorted(mixed.glob("*.json"))[0]
    doc = json.loads(first.read_text())
    doc["fioscope"] = {**doc.get("fioscope", {}), "target": "tagged", "tags": {"build": "candidate"}}
    (mixed / "zz-tagged.json").write_text(json.dumps(doc))
    doc["fioscope"] = {**doc["fioscope"], "limits": {"read_iops": "lots"}}
    (mixed / "zz-malformed.json").write_text(json.dumps(doc))
    good = load_results(results)
    with caplog.at_level("WARNING", logger="fioscope.report"):
        samples = load_results(mixed)
        runs = load_fio_runs(str(mixed))
    tagged = [s for s in samples if s.workload.target == "tagged"]
    assert len(samples) == len(good) + len(tagged) and tagged and all(s.tags == {"build": "candidate"} for s in tagged)
    assert not [s for s in samples if "zz-malformed" in s.source]
    assert {r.target for r in runs} >= {"tagged"} and len(runs) == len(load_fio_runs(str(results))) + len(tagged)
    warnings = [r.getMessage() for r in caplog.records if "zz-malformed.json" in r.getMessage()]
    assert len(warnings) == 2 and all("read_iops" in w for w in warnings), warnings


def test_empty_results_dir(tmp_path):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    assert_one_line_failure(fioscope("report", "--results", str(tmp_path / "empty"), "--output", str(out)), out, "--results", "no fio results")


def test_prometheus_down(tmp_path):
    out = tmp_path / "out"
    proc = fioscope("report", "--prometheus.url", f"http://127.0.0.1:{free_port()}", "--last", "1h", "--output", str(out))
    assert_one_line_failure(proc, out, "--prometheus.url", "cannot reach Prometheus")


def test_window_with_no_data(tmp_path):
    server = Prometheus.scraping(tmp_path / "prometheus", [])
    try:
        out = tmp_path / "out"
        proc = fioscope("report", "--prometheus.url", server.url, "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T01:00:00Z",
                        "--output", str(out))
    finally:
        server.stop()
    assert_one_line_failure(proc, out, "no disk data in the window")


@pytest.mark.parametrize("content, words", [
    (lambda: (IOSTAT / "capped.json").read_text()[:5000], ("truncated",)),
    (lambda: next((IOSTAT / "capped-results").glob("*.json")).read_text(), ("not `iostat -o JSON` output",)),
    (lambda: "hello", ("not JSON",)),
])
def test_bad_iostat_file(tmp_path, content, words):
    bad = tmp_path / "bad.json"
    bad.write_text(content())
    out = tmp_path / "out"
    assert_one_line_failure(fioscope("report", "--iostat", str(bad), "--output", str(out)), out, "--iostat", str(bad), *words)


def test_no_report_kind_and_bad_flags(tmp_path):
    out = tmp_path / "out"
    assert_one_line_failure(fioscope("report", "--output", str(out)), out, "say what to report on")
    assert_one_line_failure(fioscope("report", "--prometheus.url", "ftp://x", "--output", str(out)), out, "not an http(s) URL")
    assert_one_line_failure(fioscope("report", "--results", str(tmp_path), "--latency-target", "soon", "--output", str(out)), out)


# ---- the sweep's job file -----------------------------------------------------------------------

def test_sweep_expansion_is_a_valid_job_file(tmp_path):
    from fioscope.jobs import load_job
    from fioscope.sweep import parse_depths, write_sweep

    path = write_sweep(REPO / "fio-jobs" / "iodepth-sweep.fio", parse_depths("4,64"), 3, tmp_path)
    job = load_job(path, {"TARGET_DIR": str(tmp_path)})
    assert job.jobnames == [f"sweep-qd{d}-r{r}" for r in (1, 2, 3) for d in (4, 64)]
    assert [job.option(n, "iodepth") for n in job.jobnames[:2]] == ["4", "64"]
    assert job.option("sweep-qd4-r1", "ramp_time") == "5" and "stonewall" in job.sections["global"]
    assert {job.option(n, "filename") for n in job.jobnames} == {"sweep.dat"}  # one file, laid out once
    with pytest.raises(Exception, match="--iodepth"):
        parse_depths("1,x")


def test_window_and_downsampling_step():
    from fioscope.reporting import ReportError
    from fioscope.reporting.prometheus_api import MAX_POINTS, step_for, window

    assert window(None, None, "24h", now=1_800_000_000) == (1_800_000_000 - 86400, 1_800_000_000)
    with pytest.raises(ReportError, match="empty"):
        window("2026-05-01T12:00:00Z", "2026-05-01T13:00:00+01:00", None)
    with pytest.raises(ReportError, match="--from"):
        window("yesterday", None, None)
    assert step_for(0, 3600) == 15  # an hour: every evaluation
    assert 86400 / step_for(0, 86400) <= MAX_POINTS  # a day: capped, one point per minute or so
