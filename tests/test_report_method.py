"""Issue 18: a diagnosis a support engineer can hand over, from real iostat captures and real fio output.

What the picture shows is checked through report.json (every point drawn, every run window, each
device's verdict) and the rendered page in headless Chromium (network blocked); the capture
command end to end without root (fio on /var/tmp), Ctrl-C included. The lab runs are in
tests/test_e2e_reports.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fioscope_testkit.cli import fioscope
from fioscope_testkit.paths import FIXTURES, IOSTAT, checkout_env
from helpers.report_page import Verdicts, lab_device, open_in_chromium

COLUMNS = ("r/s", "w/s", "rkB/s", "wkB/s", "r_await", "w_await", "aqu-sz", "util")


def _env() -> dict[str, str]:
    env = checkout_env()
    env.pop("CI", None)
    return env


def _iostat_samples(path: Path, device: str) -> list[tuple[str, dict]]:
    host = json.loads(path.read_text())["sysstat"]["hosts"][0]
    return [(s["timestamp"], d) for s in host["statistics"][1:] for d in s["disk"] if d["disk_device"] == device]


def _peak(dev: dict) -> tuple[float, float]:
    """(time, r/s + w/s) of the highest point drawn."""
    points = [(t, r + w) for (t, r), (_, w) in zip(dev["series"]["r/s"], dev["series"]["w/s"])]
    return max(points, key=lambda p: p[1])


@pytest.fixture(scope="module")
def capped_report(tmp_path_factory):
    """The capped capture, plus an idle device (all zeros) and a second, 2 s run of the same profile in the idle lead-in."""
    tmp = tmp_path_factory.mktemp("capped")
    doc = json.loads((IOSTAT / "capped.json").read_text())
    for stat in doc["sysstat"]["hosts"][0]["statistics"]:
        stat["disk"].append({**{k: 0.0 for k in stat["disk"][0] if k != "disk_device"}, "disk_device": "loop7"})
    iostat = tmp / "capped.json"
    iostat.write_text(json.dumps(doc))
    results = tmp / "results"
    results.mkdir()
    [original] = list((IOSTAT / "capped-results").glob("*.json"))
    shutil.copy(original, results / original.name)
    short = json.loads(original.read_text())
    first = _iostat_samples(IOSTAT / "capped.json", "loop0")[0][0]
    import datetime as dt

    lead_in = dt.datetime.fromisoformat(first).timestamp()
    short["timestamp_ms"] = int((lead_in + 12) * 1000)  # a 2 s run ending 12 s after the first sample
    short["timestamp"] = int(lead_in + 12)
    for job in short["jobs"]:
        job["elapsed"], job["job_runtime"] = 2, 2000
    (results / "rand-read-iops-short.json").write_text(json.dumps(short))
    out = tmp / "report"
    proc = fioscope("report", "--iostat", str(iostat), "--results", str(results), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    return out, json.loads((out / "report.json").read_text()), json.loads(original.read_text()), lead_in


def test_report_json_holds_every_iostat_sample_and_every_run(capped_report):
    out, report, fio, lead_in = capped_report
    device = lab_device(IOSTAT / "capped-results")
    [dev] = [d for d in report["devices"] if d["device"] == device]
    assert set(dev["series"]) >= set(COLUMNS)
    samples = _iostat_samples(IOSTAT / "capped.json", device)
    # every iostat sample at the interval it was taken: the same count, the same values, the same times
    assert [v for _, v in dev["series"]["r/s"]] == [d["r/s"] for _, d in samples]
    assert [v for _, v in dev["series"]["util"]] == [d["util"] for _, d in samples]
    gaps = {round(b[0] - a[0]) for a, b in zip(dev["series"]["r/s"], dev["series"]["r/s"][1:])}
    assert gaps == {5}  # capture.sh: iostat 5
    # both runs of the one profile, exactly as they ran: the long one from fio's own end stamp and runtime
    runs = sorted(report["runs"], key=lambda r: r["start"])
    assert [r["job"] for r in runs] == ["rand-read-iops", "rand-read-iops"]
    assert all(isinstance(r["start"], float) and isinstance(r["end"], float) for r in runs)
    assert runs[0]["end"] - runs[0]["start"] == pytest.approx(2.0) and runs[0]["end"] == pytest.approx(lead_in + 12)
    end = fio["timestamp_ms"] / 1000
    # 8 jobs under group_reporting: job_runtime adds the clones up, so the wall-clock length is fio's elapsed
    assert runs[1]["end"] == pytest.approx(end) and runs[1]["end"] - runs[1]["start"] == pytest.approx(fio["jobs"][0]["elapsed"])
    # the load's peak lies inside its run window (a sample covers the interval before its stamp) and matches fio's IOPS
    t, peak = _peak(dev)
    fio_iops = fio["jobs"][0]["read"]["iops"] + fio["jobs"][0]["write"]["iops"]
    print(f"\n[capped fixture] peak {peak:.0f} IO/s at +{t - runs[1]['start']:.0f} s of the run; fio {fio_iops:.0f} IOPS")
    assert runs[1]["start"] <= t <= runs[1]["end"] + 5
    assert abs(peak - fio_iops) <= 0.1 * fio_iops
    # the verdict: throttled, in a headline sentence
    assert dev["verdict"].startswith(f"{device} was throttled by its provider for ") and "reads/s" in dev["verdict"]
    assert "Throttled from" in dev["verdict"]
    loads = [p for p in dev["phases"] if p["kind"] == "load"]
    assert len(loads) == 2 and [p["kind"] for p in dev["phases"]].count("idle") >= 2


def test_idle_device_is_one_line_and_not_charted(capped_report):
    out, report, _, _ = capped_report
    [idle] = [d for d in report["devices"] if d["device"] == "loop7"]
    assert idle["charted"] is False and all(points == [] for points in idle["series"].values())
    assert not list(out.glob("*loop7*.png"))
    [line] = [v for v in report["verdicts"] if v["kind"] == "idle-devices"]
    assert "loop7" in line["text"] and line["ok"] is None
    # avg-cpu once per host, not once per device
    assert len(list(out.glob("cpu-*.png"))) == 1


def test_page_reads_verdict_first_with_binary_units(capped_report, tmp_path):
    out, report, _, _ = capped_report
    shot = tmp_path / "diagnosis.png"
    dom, console = open_in_chromium(out / "report.html", shot)
    shutil.copy(shot, out / "screenshot-diagnosis.png")
    assert console == []
    page = Verdicts(dom)
    assert page.external == []
    device = lab_device(IOSTAT / "capped-results")
    assert page.items[0]["data-kind"] == "headline" and page.items[0]["data-device"] == device
    assert page.items[0]["data-ok"] == "false" and "was throttled by its provider" in page.items[0]["text"]
    assert dom.index('id="headline"') < dom.index('class="summary"') < dom.index('id="verdicts"')
    html = (out / "report.html").read_text()
    assert "MB/s" not in page.text and "mIO/s" not in page.text and "MiB/s" in page.text
    # the phase table: idle and load side by side with the method's columns
    for column in ("IOPS (peak)", "MiB/s", "r_await", "util", "aqu-sz"):
        assert f"<th>{column}</th>" in html
    # both runs are labelled (profile and rate) in the page
    assert html.count("rand-read-iops 200 IOPS") >= 1 and "runs" in report


def test_two_runs_of_one_profile_make_one_running_series():
    """Two results of one profile share their labels: fio_run_running must stay one series with one value per time
    (it held two interleaved lists, so the rules saw no fio load at all)."""
    from fioscope.reporting.offline.counters import fio_series
    from fioscope.reporting.offline.load import FioRun

    runs = [FioRun("rand-read-iops", "t", "loop0", 100.0, 102.0, None, {}), FioRun("rand-read-iops", "t", "loop0", 150.0, 190.0, None, {})]
    [(labels, points)] = fio_series(runs, "vm", 90.0, 200.0)["fio_run_running"].items()
    times = [t for t, _ in points]
    assert len(times) == len(set(times))
    assert dict(points)[100.0] == 1.0 and dict(points)[160.0] == 1.0 and dict(points)[120.0] == 0.0


def test_no_data_is_grey_never_green():
    from fioscope.reporting.diagnosis import await_verdict
    from fioscope.reporting.phases import evidence
    from fioscope.reporting.timeline import Timeline
    from fioscope.reporting.wording import headline
    from fioscope.thresholds import shipped

    quiet = Timeline("vm", "vdb", {c: [(float(t), 0.0) for t in range(10)] for c in COLUMNS}, 1.0)
    verdict = await_verdict("vdb", "vdb", quiet, [], shipped().sla_seconds("vdb"))
    assert verdict.ok is None and "no data" in verdict.text
    assert evidence(Timeline("vm", "vdb", {c: [] for c in COLUMNS}), [], []) == (None, "no data")
    assert headline("vdb", None, "no data") == "vdb: no data"


def test_an_alert_that_began_as_its_load_ended_reads_at_a_time_not_an_empty_interval():
    """The alert's window (a rate window behind) begins just after the load: it counts for the load, as one instant."""
    from fioscope.reporting.phases import Phase, evidence, throttled_spans
    from fioscope.reporting.timeline import Timeline

    timeline = Timeline("vm", "vdb", {c: [(float(t), 700.0 if c == "r/s" else 1.0) for t in range(100, 201)] for c in COLUMNS}, 1.0)
    load = Phase("load", "cloud-sla-70-30", 100.0, 200.0)
    spans = throttled_spans([(200.6, 380.0)], [load], slack=1.0)
    assert spans == [(200.0, 200.0)]
    ok, text = evidence(timeline, [load], spans)
    assert ok is False and text.startswith("Throttled at 00:03:20 UTC: "), text
    assert "from 00:03:20 to 00:03:20" not in text
    ok, text = evidence(timeline, [load], [(150.0, 200.0)])
    assert text.startswith("Throttled from 00:02:30 to 00:03:20 UTC: "), text


def test_downsampling_keeps_each_buckets_minimum_and_maximum():
    from fioscope.reporting.timeline import MAX_POINTS, Timeline, limit

    points = [(float(t), 10.0 + (t % 7)) for t in range(20_000)]
    points[12_345] = (12_345.0, 9000.0)  # one 2 s spike in a day
    points[777] = (777.0, 0.0)
    drawn = limit(Timeline("vm", "vdb", {"r/s": points}, 2.0))
    assert drawn.downsampled and len(drawn.series["r/s"]) <= MAX_POINTS
    assert (12_345.0, 9000.0) in drawn.series["r/s"] and (777.0, 0.0) in drawn.series["r/s"]


def test_kernel_counters_become_iostat_columns_and_round_trip_through_iostat_json(tmp_path):
    """capture's /proc/diskstats reading -> iostat's columns (as iostat computes them) -> iostat.json -> the offline reader."""
    from fioscope.reporting.iostat_json import iostat_document, parse_cpu, parse_diskstats
    from fioscope.reporting.offline.load import load_iostat

    line = "   7       0 loop0 {r} 0 {rs} {rt} {w} 0 {ws} {wt} 0 {io} {wio} 0 0 0 0 0 0"
    a = parse_diskstats(line.format(r=1000, rs=8000, rt=500, w=10, ws=80, wt=20, io=1000, wio=3000), {"loop0"})
    b = parse_diskstats(line.format(r=1700, rs=13600, rt=2600, w=310, ws=2480, wt=3020, io=2990, wio=9000), {"loop0"})
    cpu0 = parse_cpu("cpu  100 0 50 800 10 0 0 0 0 0\n")
    cpu1 = parse_cpu("cpu  120 0 70 940 30 5 5 0 0 0\n")
    doc = iostat_document("vm", [(1000.0, a, cpu0), (1002.0, b, cpu1)])
    path = tmp_path / "iostat.json"
    path.write_text(json.dumps(doc))
    [capture] = load_iostat(str(path))
    [sample] = capture.samples
    cols = sample.disks["loop0"]
    assert cols["r/s"] == pytest.approx(350) and cols["w/s"] == pytest.approx(150)
    assert cols["rkB/s"] == pytest.approx(5600 * 512 / 1024 / 2) and cols["r_await"] == pytest.approx(3.0)
    assert cols["w_await"] == pytest.approx(10.0) and cols["util"] == pytest.approx(99.5) and cols["aqu-sz"] == pytest.approx(3.0)
    # system holds irq and softirq, as iostat counts it: 20 + 5 + 5 of 210 ticks
    assert sample.cpu["iowait"] == pytest.approx(100 * 20 / 210, abs=0.01)
    assert sample.cpu["system"] == pytest.approx(100 * 30 / 210, abs=0.01)


# ---- etcd: the fdatasync verdict wherever an etcd-wal result appears ---------------------------------

def test_etcd_tiers_and_a_users_threshold_named_as_theirs():
    from fioscope.etcd import fsync_verdict
    from fioscope.thresholds import shipped

    t = shipped()
    assert fsync_verdict(0.007, t).level == "pass"
    warning = fsync_verdict(0.0085, t)
    assert warning.level == "warning" and warning.ok is True and "WARNING" in warning.text and "8.00 ms" in warning.text
    assert fsync_verdict(0.0101, t).level == "fail" and fsync_verdict(0.0101, t).ok is False
    mine = fsync_verdict(0.0002, t, 0.0003)
    assert "your threshold 0.30 ms" in mine.text and "etcd" not in mine.text
    assert fsync_verdict(None, t).ok is None


def test_run_summary_names_the_users_fsync_threshold_as_theirs():
    from fioscope.parser import parse_file
    from fioscope.verdicts import job_verdicts

    [run] = parse_file(FIXTURES / "fio-outputs" / "fio-3.33" / "etcd.json+")
    from fioscope.config import Limits

    from fioscope.thresholds import shipped

    texts = [v.text for job in run.jobs for v in job_verdicts(job, Limits(), 0.0, 0.0003, shipped())]
    assert any("your threshold 0.30 ms" in t for t in texts) and not any("etcd needs" in t for t in texts), texts
    tiered = [v.text for job in run.jobs for v in job_verdicts(job, Limits(), 0.0, None, shipped())]
    assert any("etcd: warning from 8.00 ms, fail above 10.00 ms" in t for t in tiered), tiered


def test_performance_report_of_an_etcd_wal_result_judges_fdatasync(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(FIXTURES / "fio-outputs" / "fio-3.33" / "etcd.json+", results / "etcd-wal.json")
    doc = json.loads((results / "etcd-wal.json").read_text())
    p99 = doc["jobs"][0]["sync"]["lat_ns"]["percentile"]["99.000000"] / 1e9
    out = tmp_path / "perf"
    proc = fioscope("report", "--results", str(results), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    dom, console = open_in_chromium(out / "report.html", tmp_path / "perf.png")
    shutil.copy(tmp_path / "perf.png", out / "screenshot-performance.png")
    page = Verdicts(dom)
    [etcd] = page.of("etcd-fsync")
    assert float(etcd["data-p99-seconds"]) == pytest.approx(p99, rel=1e-3) and "fdatasync p99" in etcd["text"]
    assert "results results" not in page.text and "MB/s" not in page.text


# ---- capture without root: bad input, and Ctrl-C still writes the report --------------------------------

def test_capture_bad_plan_and_flags_one_line(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("phases:\n  - idle: soon\n")
    target = tmp_path / "t"
    target.mkdir()
    for args, words in ((["--plan", str(plan)], ("--plan", "phases[0].idle")),
                        (["--idle", "0s"], ("--idle",)),
                        (["--plan", str(tmp_path / "missing.yaml")], ("--plan",))):
        proc = fioscope("capture", "--target.dir", str(target), "--output", str(tmp_path / "out"), *args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr and all(w in lines[0] for w in words), proc.stderr
    assert not (tmp_path / "out" / "report.html").exists()


@pytest.mark.slow
def test_capture_ctrl_c_still_writes_the_report(tmp_path):
    """Interrupted during its first load phase, capture stops fio and writes the bundle of what was captured."""
    target = Path("/var/tmp") / f"capture-ctrlc-{os.getpid()}"
    target.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "bundle"
    cmd = [sys.executable, "-m", "fioscope", "capture", "--target.dir", str(target), "--output", str(out), "--idle", "4s",
           "--load", "30s", "--interval", "1s", "--env", "SIZE=16m", "--env", "IODEPTH=4"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert proc.stderr is not None
        seen = ""
        deadline = time.monotonic() + 120
        while "[2/5]" not in seen and time.monotonic() < deadline:
            seen += proc.stderr.readline()
        assert "[2/5]" in seen, seen
        time.sleep(6)  # fio runs
        interrupted = time.time()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(target, ignore_errors=True)
    assert proc.returncode == 130, seen + stderr
    assert "Traceback" not in seen + stderr
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.html").is_file() and (out / "iostat.json").is_file() and (out / "samples" / "diskstats.jsonl").is_file()
    [run] = report["runs"]  # the interrupted load phase, up to where fio was stopped
    assert run["job"] == "cloud-sla-70-30" and run["end"] <= interrupted + 3
    assert "interrupted" in " ".join(report["summary"])
    assert any(d["charted"] for d in report["devices"])


@pytest.mark.slow
def test_capture_shows_progress_on_a_terminal(tmp_path):
    """The whole default plan, shortened, under a pseudo-terminal: a progress line per phase, then the bundle."""
    target = Path("/var/tmp") / f"capture-tty-{os.getpid()}"
    target.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "bundle"
    try:
        proc = fioscope("capture", "--target.dir", str(target), "--output", str(out), "--idle", "2s", "--load", "3s",
                        "--interval", "1s", "--env", "SIZE=8m", "--env", "IODEPTH=4", tty=True, timeout=300)
    finally:
        shutil.rmtree(target, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for phase in ("[1/5] idle", "[2/5] cloud-sla-70-30 at 700+300 IOPS", "[4/5] cloud-sla-70-30 at 1400+600 IOPS", "[5/5] idle"):
        assert phase in proc.stdout, proc.stdout  # script(1) merges stderr
    assert "all done in" in proc.stdout and "\x1b[K" in proc.stdout  # rewritten in place (text mode reads \r as \n)
    report = json.loads((out / "report.json").read_text())
    assert [r["job"] for r in report["runs"]] == ["cloud-sla-70-30"] * 2


@pytest.mark.parametrize(("reads_per_second", "util", "idle"), [(1.0, 2.0, True), (1009.0, 2.0, False), (1.0, 30.0, False)])
def test_a_device_is_idle_only_at_low_util_and_few_requests(reads_per_second, util, idle):
    """A host-cached virtual disk under a loop device did 1,009 IO/s at 2 % util: loaded, charted, not 'idle'."""
    from fioscope.reporting.phases import is_idle_device
    from fioscope.reporting.timeline import Timeline

    times = [1000.0 + i for i in range(10)]
    timeline = Timeline("h", "vda", {"r/s": [(t, reads_per_second) for t in times], "w/s": [(t, 0.0) for t in times],
                                     "util": [(t, util) for t in times]}, interval=1.0)
    assert is_idle_device(timeline, [], named_by_alerts=False) is idle
