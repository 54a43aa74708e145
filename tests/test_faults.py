"""Faults with real processes and real files: identity per target, counted once, interrupted runs, health."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time

from fioscope.blockdev import device_for_path
from fioscope.config import load_config
from fioscope.parser import split_documents
from fioscope.scanner import ScanLoop, effective_interval
from fioscope.store import Store
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import fioscope
from fioscope_testkit.net import wait_for
from fioscope_testkit.paths import FIO_OUTPUTS
from helpers.exposition import parse_exposition, promtool_check_metrics, sample
from helpers.results import settle


def _store(results) -> Store:
    return Store(load_config(None, str(results)))


def test_same_profile_on_two_targets_side_by_side(tmp_path, exporter_factory):
    """issue 10: runs against two targets live side by side with exact fio values; histograms stay per target."""
    require("fio")
    results = tmp_path / "results"
    dirs = {name: tmp_path / name for name in ("before", "after")}
    for d in dirs.values():
        d.mkdir()
    config = tmp_path / "fioscope.yaml"
    config.write_text(f"results_dir: {results}\ntargets:\n"
                      + "".join(f"  - name: {n}\n    directory: {d}\n" for n, d in dirs.items()))
    for name in dirs:
        proc = fioscope("run", "etcd-wal", "--config.file", str(config), "--target", name, "--env", "SIZE=512k", timeout=120)
        assert proc.returncode in (0, 1), proc.stderr
    exp = exporter_factory(config=config)
    text = exp.metrics_text()
    assert promtool_check_metrics(text).returncode == 0
    m = parse_exposition(text)
    for name, directory in dirs.items():
        [path] = results.glob(f"etcd-wal-{name}-*.json")
        doc = json.loads(path.read_text())
        assert doc["fioscope"]["target"] == name and doc["fioscope"]["device"] == device_for_path(directory)
        sync = doc["jobs"][0]["sync"]["lat_ns"]
        labels = {"jobname": "etcd-wal", "target": name, "device": device_for_path(directory), "hostname": ""}
        assert sample(m, "fio_runs_total", **labels) == 1
        assert sample(m, "fio_iops", ddir="write", **labels) == doc["jobs"][0]["write"]["iops"]
        assert sample(m, "fio_run_latency_seconds", ddir="sync", stage="lat", quantile="0.99", **labels) == \
            sync["percentile"]["99.000000"] / 1e9
        assert sample(m, "fio_latency_seconds_count", ddir="sync", stage="lat", **labels) == sync["N"]
        assert sample(m, "fio_latency_seconds_bucket", ddir="sync", stage="lat", le="+Inf", **labels) == sync["N"]


def test_touched_file_counts_once(tmp_path):
    path = tmp_path / "etcd.json"
    settle(shutil.copy(FIO_OUTPUTS / "fio-3.33" / "etcd.json+", path))
    store = _store(tmp_path)
    store.scan()
    for offset in (10, 20, 30):
        os.utime(path, (time.time() - 100 + offset,) * 2)
        store.scan()
    shutil.copy(path, tmp_path / "copy.json")  # the same bytes under another name: the same run
    settle(tmp_path / "copy.json")
    store.scan()
    [state] = store.jobs.values()
    [hists] = store.histograms.values()
    assert state.runs == 1 and sum(hists[("sync", "lat")].buckets) == 1823
    assert store.parse_errors == 0


def test_growing_status_interval_file_counts_one_run(tmp_path):
    text = (FIO_OUTPUTS / "fio-3.42" / "status.json").read_text()
    docs = split_documents(text)
    assert len(docs) == 5
    path = tmp_path / "status.json"
    store = _store(tmp_path)
    written = ""
    for doc in docs:  # fio appends a report every interval; the exporter scans in between
        written += json.dumps(doc, indent=1) + "\n"
        path.write_text(written)
        store.scan()
        store.scan()
    assert not store.jobs  # not counted while the writer may still be at it
    settle(path)
    store.scan()
    store.scan()
    [state] = store.jobs.values()
    assert state.runs == 1
    assert state.last.job.directions["read"].iops == docs[-1]["jobs"][0]["read"]["iops"]
    assert store.parse_errors == 0


def test_absurd_first_timestamp_cannot_hide_later_results(tmp_path):
    raw = json.loads((FIO_OUTPUTS / "fio-3.33" / "randrw.json").read_text())
    for i, ts in enumerate(("NaN", "Infinity", "1e30", str(int((time.time() + 10 * 86400) * 1000)))):
        path = tmp_path / f"a{i}.json"
        path.write_text(json.dumps(raw).replace(f'"timestamp_ms": {raw["timestamp_ms"]}', f'"timestamp_ms": {ts}'))
        settle(path)
    later = dict(raw, timestamp_ms=raw["timestamp_ms"] + 1000)
    later["jobs"][0]["read"]["iops"] = 123.0
    (tmp_path / "z.json").write_text(json.dumps(later))
    settle(tmp_path / "z.json")
    store = _store(tmp_path)
    store.scan()
    [state] = store.jobs.values()
    assert store.parse_errors == 4
    assert state.runs == 1 and state.last.job.directions["read"].iops == 123.0
    assert state.end_timestamp == later["timestamp_ms"] / 1000


def test_rejected_file_changes_nothing(tmp_path):
    """A file valid up to its last job is rejected whole: no run counted, no histogram added."""
    raw = json.loads((FIO_OUTPUTS / "fio-3.33" / "etcd.json+").read_text())
    bad = json.loads(json.dumps(raw))
    bad["jobs"].append(dict(bad["jobs"][0], jobname="second", error=-1))
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    settle(tmp_path / "bad.json")
    store = _store(tmp_path)
    store.scan()
    assert store.parse_errors == 1 and not store.jobs and not store.histograms


def test_scan_loop_survives_any_interval_and_reports_health(tmp_path):
    for value, expected in ((0, 5.0), (float("inf"), 5.0), (float("nan"), 5.0), (-1, 5.0), (0.01, 0.5), (1e9, 3600.0), (2, 2.0)):
        assert effective_interval(value) == expected
    store = _store(tmp_path)
    stop = threading.Event()
    loop = ScanLoop(store, float("inf"), stop)
    loop.interval_seconds = 0.05  # as fast as a test allows
    loop.start()

    def explode():
        raise RecursionError("a bug the store did not contain")
    original, store.scan = store.scan, explode
    time.sleep(0.3)
    assert loop.is_alive()
    store.scan = original
    wait_for(lambda: store.last_scan_timestamp > time.time() - 1, 5, what="scans resume")
    stop.set()
    loop.join(2)

    from fioscope.collector import Exposition
    from fioscope.collector.exporter import ScrapeTimer
    health = parse_exposition(Exposition(store, ScrapeTimer(), loop).render().decode())
    assert sample(health, "fioscope_up") == 0  # the loop has stopped
    assert sample(health, "fioscope_scan_interval_seconds") == 0.05
    assert not [k for k in health if k[0] == "fioscope_scheduler_running"]


def test_exporter_health_with_schedule(tmp_path, exporter_factory):
    target = tmp_path / "t"
    target.mkdir()
    config = tmp_path / "fioscope.yaml"
    config.write_text(f"""
results_dir: {tmp_path / 'results'}
scan_interval: 2s
targets: [{{name: disk, directory: {target}}}]
schedule:
  - {{job: etcd-wal, target: disk, start_delay: 1h}}
""")
    exp = exporter_factory(config=config)
    m = exp.metrics()
    assert sample(m, "fioscope_up") == 1
    assert sample(m, "fioscope_scan_interval_seconds") == 2
    assert sample(m, "fioscope_scheduler_running") == 1
    first = sample(m, "fioscope_last_scan_timestamp_seconds")
    wait_for(lambda: sample(exp.metrics(), "fioscope_last_scan_timestamp_seconds") > first, 10, what="scans go on")


def test_exporter_killed_mid_run_counts_the_run_as_failed(tmp_path, exporter_factory):
    require("fio")
    target = tmp_path / "t"
    target.mkdir()
    results = tmp_path / "results"
    base = f"results_dir: {results}\nscan_interval: 1s\nstatus_interval: 1s\ntargets: [{{name: disk, directory: {target}}}]\n"
    config = tmp_path / "fioscope.yaml"
    config.write_text(base + """schedule:
  - {job: etcd-wal, target: disk, env: {SIZE: 512k}}
  - {job: cloud-sla-70-30, target: disk, start_delay: 1s, env: {RUNTIME: "60", SIZE: 16m, IODEPTH: "4", READ_IOPS: "100", WRITE_IOPS: "50"}}
""")
    exp = exporter_factory(config=config)
    wait_for(lambda: sample(exp.metrics(), "fio_run_running", jobname="cloud-sla-70-30") == 1, 30, what="second run going")
    finished = {k: v for k, v in exp.metrics().items() if k[0] in ("fio_iops", "fio_runs_total") and dict(k[1])["jobname"] == "etcd-wal"}
    assert list(results.glob("cloud-sla-70-30-disk-*.running"))
    fio_pids = subprocess.run(["pgrep", "-P", str(exp.proc.pid)], capture_output=True, text=True, check=False).stdout.split()
    exp.proc.send_signal(signal.SIGKILL)
    exp.proc.wait(10)
    for pid in fio_pids:  # fio would die of a broken pipe at its next report anyway
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass

    config.write_text(base)  # restarted without the schedule
    again = exporter_factory(config=config)
    m = again.metrics()
    assert sample(m, "fio_run_failures_total", jobname="cloud-sla-70-30") == 1
    assert sample(m, "fio_runs_total", jobname="cloud-sla-70-30") == 1
    assert {k: v for k, v in m.items() if k in finished} == finished  # the finished run comes back
    assert not list(results.glob("*.running"))
    [record] = results.glob("cloud-sla-70-30-disk-*.failure.json")
    assert "interrupted" in json.loads(record.read_text())["fioscope_failure"]["message"]


def test_running_marker_of_a_live_process_is_left_alone(tmp_path):
    from fioscope.resultfile import Annotation, recover_interrupted, write_running

    marker = write_running(tmp_path, ["etcd-wal"], Annotation(target="disk", profile="etcd-wal"))
    assert recover_interrupted(tmp_path) == [] and marker.exists()  # this process is alive: the run goes on
    data = json.loads(marker.read_text())
    data["fioscope_running"]["pid"] = 2**22 + 12345  # above pid_max: no such process
    marker.write_text(json.dumps(data))
    [record] = recover_interrupted(tmp_path)
    assert not marker.exists() and record.name == marker.name.replace(".running", ".failure.json")
    store = _store(tmp_path)
    store.scan()
    assert store.jobs[("disk", "etcd-wal", "")].failures == 1
