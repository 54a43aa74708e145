"""The exporter as a real process with real fio runs: values equal fio's own JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
from fioscope.blockdev import device_for_path
from fioscope.histogram import BUCKET_BOUNDS
from fioscope_testkit.binaries import require
from fioscope_testkit.cli import fioscope
from fioscope_testkit.net import wait_for
from fioscope_testkit.paths import FIO_OUTPUTS, FIXTURES
from helpers.exposition import parse_exposition, promtool_check_metrics, sample
from helpers.results import config_with_schedule, result_docs, settle


def test_scheduled_runs_live_and_final(tmp_path, exporter_factory):
    require("fio")
    config, target = config_with_schedule(tmp_path, """
  - job: cloud-sla-70-30
    target: disk
    env: {RUNTIME: "5", SIZE: 16m, IODEPTH: "4"}
  - job: etcd-wal
    target: disk
    start_delay: 1s
    repeat: 2
    idle: 1s
    env: {SIZE: 1m}
""", limits="limits: {read_iops: 700, write_iops: 300, independent: true}\n    sla_latency: 30ms")
    exp = exporter_factory(config=config)

    # live: while fio runs, the job is marked running and per-interval IOPS move
    wait_for(lambda: sample(exp.metrics(), "fio_run_running", jobname="cloud-sla-70-30") == 1, 10, what="running=1")
    live = wait_for(lambda: sample(exp.metrics(), "fio_iops", jobname="cloud-sla-70-30", ddir="read"), 10, what="live iops")
    assert 400 < live < 1000  # paced at 700/s; an interval rate, not a cumulative average
    m = exp.metrics()
    assert sample(m, "fio_run_start_timestamp_seconds", jobname="cloud-sla-70-30") <= time.time()

    wait_for(lambda: sample(exp.metrics(), "fio_runs_total", jobname="etcd-wal") == 2, 60, what="two etcd runs")
    text = exp.metrics_text()
    check = promtool_check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    m = parse_exposition(text)

    [sla_doc] = result_docs(exp.results, "cloud-sla-70-30")
    job = sla_doc["jobs"][0]
    assert sample(m, "fio_run_running", jobname="cloud-sla-70-30") == 0
    assert sample(m, "fio_iops", jobname="cloud-sla-70-30", ddir="read") == pytest.approx(job["read"]["iops"])
    assert sample(m, "fio_bandwidth_bytes_per_second", jobname="cloud-sla-70-30", ddir="write") == pytest.approx(job["write"]["bw_bytes"])
    for q, key in (("0.5", "50.000000"), ("0.99", "99.000000"), ("0.9999", "99.990000")):
        assert sample(m, "fio_run_latency_seconds", jobname="cloud-sla-70-30", ddir="read", stage="clat", quantile=q) == \
            pytest.approx(job["read"]["clat_ns"]["percentile"][key] / 1e9)
    assert sample(m, "fio_run_latency_seconds_count", jobname="cloud-sla-70-30", ddir="read", stage="clat") == job["read"]["clat_ns"]["N"]
    assert sample(m, "fio_promised_iops", jobname="cloud-sla-70-30") == pytest.approx(1000)
    assert sample(m, "fio_sla_latency_seconds", jobname="cloud-sla-70-30") == pytest.approx(0.03)
    assert sample(m, "fio_run_end_timestamp_seconds", jobname="cloud-sla-70-30") > sample(m, "fio_run_start_timestamp_seconds", jobname="cloud-sla-70-30")
    info = [labels for (name, labels) in m if name == "fio_run_info" and dict(labels)["jobname"] == "cloud-sla-70-30"]
    assert dict(info[0]) == {"jobname": "cloud-sla-70-30", "target": "disk", "rw": "randrw", "bs": "4k", "iodepth": "4",
                             "numjobs": "1", "ioengine": "libaio", "fio_version": "fio-3.33", "hostname": "",
                             "device": device_for_path(target)}

    # the histogram counts every fdatasync of both etcd runs; the summary holds the last run only
    etcd_docs = result_docs(exp.results, "etcd-wal")
    assert len(etcd_docs) == 2
    total = sum(d["jobs"][0]["sync"]["lat_ns"]["N"] for d in etcd_docs)
    assert sample(m, "fio_latency_seconds_count", jobname="etcd-wal", ddir="sync", stage="lat") == total
    assert sample(m, "fio_latency_seconds_bucket", jobname="etcd-wal", ddir="sync", stage="lat", le="+Inf") == total
    assert sample(m, "fio_latency_seconds_sum", jobname="etcd-wal", ddir="sync", stage="lat") == pytest.approx(
        sum(d["jobs"][0]["sync"]["lat_ns"]["mean"] * d["jobs"][0]["sync"]["lat_ns"]["N"] / 1e9 for d in etcd_docs))
    last = max(etcd_docs, key=lambda d: d["timestamp_ms"])["jobs"][0]["sync"]["lat_ns"]
    assert sample(m, "fio_run_latency_seconds_count", jobname="etcd-wal", ddir="sync", stage="lat") == last["N"]
    assert sample(m, "fio_run_latency_seconds", jobname="etcd-wal", ddir="sync", stage="lat", quantile="0.99") == \
        pytest.approx(last["percentile"]["99.000000"] / 1e9)
    buckets = [sample(m, "fio_latency_seconds_bucket", jobname="etcd-wal", ddir="sync", stage="lat", le=repr(b)) for b in BUCKET_BOUNDS]
    assert buckets == sorted(buckets) and buckets[-1] <= total
    assert sample(m, "fioscope_result_parse_errors_total") == 0

    # a restart publishes the same figures from the results directory
    exp.stop()
    again = exporter_factory(results=exp.results).metrics()
    for key in ("fio_iops", "fio_run_latency_seconds", "fio_latency_seconds_count", "fio_runs_total", "fio_latency_seconds_bucket"):
        before = {k: v for k, v in m.items() if k[0] == key}
        assert before and before == {k: v for k, v in again.items() if k[0] == key}, key


def test_bad_files_are_counted_and_earlier_results_kept(tmp_path, exporter_factory):
    results = tmp_path / "results"
    results.mkdir()
    settle(shutil.copy(FIO_OUTPUTS / "fio-3.33" / "randrw.json", results / "good.json"))
    exp = exporter_factory(results=results)
    assert sample(exp.metrics(), "fio_iops", jobname="randrw", ddir="read") > 0

    shutil.copy(FIO_OUTPUTS / "fio-2.21" / "randrw.json", results / "old-fio.json")
    shutil.copy(FIO_OUTPUTS / "fio-3.33" / "missingdir.txt", results / "fio-error.json")
    (results / "empty.json").write_text("")
    truncated = results / "truncated.json"
    truncated.write_text((FIO_OUTPUTS / "fio-3.33" / "etcd.json+").read_text()[:5000])
    settle(*(results / n for n in ("old-fio.json", "fio-error.json", "empty.json", "truncated.json")))  # not "still being written"
    m = wait_for(lambda: (m := exp.metrics()) and sample(m, "fioscope_result_parse_errors_total") == 4 and m, 15, what="4 errors")
    assert sample(m, "fio_iops", jobname="randrw", ddir="read") > 0  # earlier result kept
    assert sample(m, "fioscope_up") == 1
    logs = exp.logs()
    for name, reason in (("old-fio.json", "fio-2.21 output"), ("fio-error.json", "no fio JSON document found"),
                         ("empty.json", "empty file"), ("truncated.json", "truncated")):
        [line] = [ln for ln in logs.splitlines() if name in ln]
        assert "rejected" in line and reason in line
    time.sleep(2.5)  # more scans: each bad file is counted once, not per scan
    assert sample(exp.metrics(), "fioscope_result_parse_errors_total") == 4


def test_file_still_being_written_is_picked_up_when_complete(tmp_path, exporter_factory):
    results = tmp_path / "results"
    results.mkdir()
    exp = exporter_factory(results=results)
    text = (FIO_OUTPUTS / "fio-3.42" / "status.json").read_text()
    growing = results / "growing.json"
    growing.write_text(text[: len(text) // 2])
    time.sleep(2.5)
    m = exp.metrics()
    assert sample(m, "fioscope_result_parse_errors_total") == 0
    assert ("fio_iops", frozenset({"jobname": "randrw-status", "ddir": "read"}.items())) not in m
    growing.write_text(text)
    settle(growing)  # the writer is done
    wait_for(lambda: sample(exp.metrics(), "fio_runs_total", jobname="randrw-status") == 1, 10, what="ingested")
    raw_last = json.loads(text[text.rindex('{\n  "fio version"'):])
    assert sample(exp.metrics(), "fio_iops", jobname="randrw-status", ddir="read") == pytest.approx(raw_last["jobs"][0]["read"]["iops"])


def test_corpus_dropped_in_is_published(tmp_path, exporter_factory):
    results = tmp_path / "results"
    results.mkdir()
    for version in ("fio-3.33", "fio-3.42"):
        for name in ("etcd.json+", "mixed_both.json", "numjobs2.json", "clientserver.json", "lat_percentiles.json+", "preamble_output.json"):
            settle(shutil.copy(FIO_OUTPUTS / version / name, results / f"{version}-{name.replace('+', 'plus')}.json"))
    exp = exporter_factory(results=results)
    text = exp.metrics_text()
    check = promtool_check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    m = parse_exposition(text)
    assert sample(m, "fioscope_result_parse_errors_total") == 0
    assert sample(m, "fioscope_result_files") == 12
    assert sample(m, "fio_runs_total", jobname="etcd-wal") == 2
    assert sample(m, "fio_latency_seconds_count", jobname="etcd-wal", ddir="sync", stage="lat") == 2 * 1823
    assert sample(m, "fio_iops", jobname="randrw-both", ddir="mixed") > 0
    assert sample(m, "fio_iops", jobname="cs-randrw", ddir="read", hostname="/srv/fio-corpus/fio-3.33.sock") > 0
    assert sample(m, "fio_run_latency_seconds", jobname="randwrite-pct", ddir="write", stage="slat", quantile="0.99") > 0
    # the newer of the two etcd runs is "the last run"
    newest = max((json.loads((FIO_OUTPUTS / v / "etcd.json+").read_text()) for v in ("fio-3.33", "fio-3.42")), key=lambda d: d["timestamp_ms"])
    assert sample(m, "fio_run_latency_seconds", jobname="etcd-wal", ddir="sync", stage="lat", quantile="0.99") == \
        pytest.approx(newest["jobs"][0]["sync"]["lat_ns"]["percentile"]["99.000000"] / 1e9)


def test_failed_fio_runs_are_counted(tmp_path, exporter_factory):
    require("fio")
    config, target = config_with_schedule(tmp_path, f"""
  - job: {FIXTURES / 'jobs' / 'badopt.fio'}
    target: disk
  - job: etcd-wal
    target: gone
    start_delay: 1s
    env: {{SIZE: 1m}}
""")
    config.write_text(config.read_text().replace("targets:", f"targets:\n  - name: gone\n    directory: {tmp_path / 'missing'}"))
    exp = exporter_factory(config=config)
    m = wait_for(lambda: (m := exp.metrics()) and sample(m, "fio_run_failures_total", jobname="etcd-wal") == 1 and m, 30, what="failures")
    assert sample(m, "fio_run_failures_total", jobname="badopt") == 1
    assert sample(m, "fio_runs_total", jobname="badopt") == 1
    assert sample(m, "fio_run_running", jobname="badopt") == 0
    assert "badopt" in exp.logs() and "failed" in exp.logs()
    # failures persist as records in the results directory: a restart still counts them
    exp.stop()
    assert sample(exporter_factory(results=exp.results).metrics(), "fio_run_failures_total", jobname="badopt") == 1


def test_run_prints_summary_and_verdicts(tmp_path):
    require("fio")
    target = tmp_path / "t"
    target.mkdir()
    results = tmp_path / "r"
    ok = fioscope("run", "etcd-wal", "--target.dir", str(target), "--results.dir", str(results), "--env", "SIZE=1m")
    [doc] = result_docs(results, "etcd-wal")
    p99_ms = doc["jobs"][0]["sync"]["lat_ns"]["percentile"]["99.000000"] / 1e6
    assert f"fdatasync p99 {p99_ms:.2f} ms" in ok.stdout
    # the verdict is etcd's tier of fio's own p99 (this disk's, whatever it is): warning from 8 ms, fail above 10 ms
    tier = "FAIL" if p99_ms > 10 else "WARNING" if p99_ms >= 8 else "pass"
    assert f"fail above 10.00 ms): {tier}" in ok.stdout, ok.stdout
    assert ok.returncode == (1 if tier == "FAIL" else 0), ok.stderr
    # an impossible threshold fails the verdict and the exit code
    strict = fioscope("run", "etcd-wal", "--target.dir", str(target), "--results.dir", str(results), "--env", "SIZE=1m", "--fsync.threshold", "1us")
    assert strict.returncode == 1 and "FAIL" in strict.stdout
    sla = fioscope("run", "cloud-sla-70-30", "--target.dir", str(target), "--results.dir", str(results),
                  "--env", "RUNTIME=2", "--env", "SIZE=16m", "--env", "IODEPTH=4",
                  "--limit", "read_iops=700", "--limit", "write_iops=300", "--limit", "independent=true", "--sla.latency", "30ms")
    assert sla.returncode == 0, sla.stdout + sla.stderr
    assert "% of the promised 1000 IOPS" in sla.stdout and "(SLA 30.00 ms): pass" in sla.stdout


def test_run_refuses_unsafe_job_and_writes_nothing(tmp_path):
    target = tmp_path / "t"
    target.mkdir()
    proc = fioscope("run", str(FIXTURES / "jobs" / "outside.fio"), "--target.dir", str(target), "--results.dir", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "outside the target directory" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not os.path.exists("/etc/fioscope-must-not-write")
    assert not (tmp_path / "r").exists()


def test_run_reports_fio_failure(tmp_path):
    require("fio")
    proc = fioscope("run", str(FIXTURES / "jobs" / "badopt.fio"), "--target.dir", str(tmp_path), "--results.dir", str(tmp_path / "r"))
    assert proc.returncode == 1
    assert "badopt failed: fio exited" in proc.stderr
    assert len(list((tmp_path / "r").glob("*.failure.json"))) == 1


def test_fast_render_equals_client_python_encoder(tmp_path):
    """/metrics' cached renderer must write exactly what generate_latest writes for the same families."""
    from fioscope.collector import Exposition
    from fioscope.collector.exporter import ScrapeTimer
    from fioscope.config import load_config
    from fioscope.store import Store
    from prometheus_client import CollectorRegistry, generate_latest

    for version in ("fio-3.33", "fio-3.42"):
        for path in (FIO_OUTPUTS / version).iterdir():
            if path.name.split(".")[-1] in ("json", "json+", "txt"):
                settle(shutil.copy(path, tmp_path / f"{version}-{path.name}.json"))
    store = Store(load_config(None, str(tmp_path)))
    store.scan()
    store.start_run(["randrw"], "/srv/fio-corpus/tgt")  # a running job too
    exposition = Exposition(store, ScrapeTimer())
    registry = CollectorRegistry()
    registry.register(exposition.fio)
    assert exposition.fio.render().encode() == generate_latest(registry)
    assert exposition.fio.render() == exposition.fio.render()  # cached path


def descendants(pid: int) -> list[int]:
    children = [int(c) for c in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]
    return children + [d for c in children for d in descendants(c)]


def test_killed_fio_is_a_failed_run(tmp_path, exporter_factory):
    require("fio")
    config, _ = config_with_schedule(tmp_path, """
  - job: cloud-sla-70-30
    target: disk
    env: {RUNTIME: "60", SIZE: 16m, IODEPTH: "4", READ_IOPS: "100", WRITE_IOPS: "50"}
""")
    exp = exporter_factory(config=config)
    wait_for(lambda: sample(exp.metrics(), "fio_iops", jobname="cloud-sla-70-30", ddir="read") > 0, 20, what="live figures")
    # this exporter's fio and its job processes only: other fio runs on the machine are not ours to kill
    fio_pids = descendants(exp.proc.pid)
    assert fio_pids
    for pid in fio_pids:
        os.kill(int(pid), 9)
    m = wait_for(lambda: (m := exp.metrics()) and sample(m, "fio_run_failures_total", jobname="cloud-sla-70-30") == 1 and m, 20, what="failure")
    assert sample(m, "fio_runs_total", jobname="cloud-sla-70-30") == 1
    assert sample(m, "fio_run_running", jobname="cloud-sla-70-30") == 0
    assert sample(m, "fio_iops", jobname="cloud-sla-70-30", ddir="read") > 0  # the last status report is kept
    assert "fio exited -9" in exp.logs()


def test_concurrent_ingestion_counts_a_file_once(tmp_path):
    """The runner and the scan loop may both see a new result file: its I/Os are counted once."""
    import threading

    from fioscope.config import load_config
    from fioscope.store import Store

    path = tmp_path / "etcd.json"
    settle(shutil.copy(FIO_OUTPUTS / "fio-3.33" / "etcd.json+", path))
    for _ in range(20):
        store = Store(load_config(None, str(tmp_path)))
        start = threading.Barrier(4)

        def ingest(start=start, store=store):  # this iteration's, bound (the threads are joined within it anyway)
            start.wait()
            store.ingest_file(path)

        threads = [threading.Thread(target=ingest) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        key = ("/srv/fio-corpus/tgt", "etcd-wal", "")  # no config: the target is fio's directory
        assert sum(store.histograms[key][("sync", "lat")].buckets) == 1823
        assert store.jobs[key].runs == 1
    # touched (a new mtime, the same bytes): still one run, one result file
    os.utime(path, (time.time() - 100, time.time() - 100))
    store.ingest_file(path)
    assert store.jobs[key].runs == 1 and store.health()["result_files"] == 1
