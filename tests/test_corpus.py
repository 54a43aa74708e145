"""The hostile corpus (testkit/fioscope_testkit/corpus.py, fixed seed) dropped into a live exporter process.

The server keeps serving (/metrics 200, valid for promtool), every file is either
published exactly or counted once as rejected, and no earlier result changes.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.error

from fioscope_testkit import corpus
from fioscope_testkit.net import http_get, wait_for
from fioscope_testkit.paths import FIO_OUTPUTS
from helpers.exposition import parse_exposition, promtool_check_metrics, sample
from helpers.results import settle


def _series_of(metrics: dict, jobname: str) -> dict:
    return {k: v for k, v in metrics.items() if dict(k[1]).get("jobname") == jobname}


def test_hostile_corpus_into_live_exporter(tmp_path, exporter_factory):
    results = tmp_path / "results"
    results.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    config = tmp_path / "fioscope.yaml"
    config.write_text(f"results_dir: {results}\nscan_interval: 1s\n")
    baseline = json.loads((FIO_OUTPUTS / "fio-3.33" / "etcd.json+").read_text())
    baseline["jobs"][0]["jobname"] = "baseline"
    (results / "baseline.json").write_text(json.dumps(baseline))
    settle(results / "baseline.json")
    exp = exporter_factory(config=config)
    before = _series_of(exp.metrics(), "baseline")
    assert sample(before, "fio_runs_total", jobname="baseline") == 1

    # scrape all the time while the storm lands: every answer is a 200
    failures, scrapes, stop = [], [], threading.Event()

    def scraper():
        while not stop.is_set():
            try:
                scrapes.append(len(http_get(exp.url(), timeout=10)))
            except (urllib.error.URLError, OSError) as exc:
                failures.append(repr(exc))
            time.sleep(0.1)

    thread = threading.Thread(target=scraper)
    thread.start()
    files = corpus.generate()
    past = time.time() - 3600
    corpus.write(files, results, past)
    # special files: read nothing through them, never block, never copy a line from outside into the log
    (outside / "secret.json").write_text("SECRET-FIRST-LINE-FROM-OUTSIDE\n" + json.dumps(baseline))
    os.symlink(outside / "secret.json", results / "outside.json")
    os.symlink("/dev/zero", results / "zero.json")
    os.mkfifo(results / "fifo.json")
    with open(results / "huge.json", "wb") as f:
        f.truncate(65 * 2**20)  # sparse: bigger than the cap, costs no disk
    (results / "dir.json").mkdir()
    for name in ("outside.json", "zero.json", "fifo.json", "huge.json", "dir.json"):
        os.utime(results / name, (past, past), follow_symlinks=False)
    specials = 5

    rejected = sum(f.expected == "reject" for f in files)
    published = [f for f in files if f.expected == "ok"]
    m = wait_for(lambda: (m := exp.metrics()) and sample(m, "fioscope_result_parse_errors_total") >= rejected + specials and m,
                 60, what="every bad file counted")
    time.sleep(2.5)  # more scans: nothing is counted twice
    stop.set()
    thread.join()
    text = exp.metrics_text()
    m = parse_exposition(text)
    check = promtool_check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert not failures and len(scrapes) > 5
    assert exp.proc.poll() is None and sample(m, "fioscope_up") == 1
    assert sample(m, "fioscope_result_parse_errors_total") == rejected + specials
    assert sample(m, "fioscope_result_files") == 1 + len(published)

    # every good file published exactly once, under its own name; no ghost jobs from rejected files
    jobnames = {dict(k[1])["jobname"] for k in m if k[0] == "fio_runs_total"}
    assert jobnames == {"baseline"} | {f.jobname for f in published}
    for f in published:
        counter = "fio_run_failures_total" if f.name.endswith(".failure.json") else "fio_runs_total"
        assert sum(v for k, v in m.items() if k[0] == counter and dict(k[1])["jobname"] == f.jobname) == 1, f.name
    assert _series_of(m, "baseline") == before  # earlier results unchanged

    # one log line per rejected file naming it; nothing from outside the results directory
    logs = exp.logs()
    assert "SECRET-FIRST-LINE" not in logs
    for f in files:
        if f.expected == "reject":
            assert sum(f.name in line and "rejected" in line for line in logs.splitlines()) == 1, f.name
    for name in ("outside.json", "zero.json", "fifo.json", "huge.json"):
        assert sum(name in line and "rejected" in line for line in logs.splitlines()) == 1, name
    print(f"corpus: {len(files) + specials} files tried, {len(published)} published, {rejected + specials} rejected, "
          f"crashes 0, {len(scrapes)} scrapes all 200")


def test_results_dir_deleted_and_recreated(tmp_path, exporter_factory):
    results = tmp_path / "results"
    results.mkdir()
    config = tmp_path / "fioscope.yaml"
    config.write_text(f"results_dir: {results}\nscan_interval: 1s\n")
    settle(shutil.copy(FIO_OUTPUTS / "fio-3.33" / "randrw.json", results / "a.json"))
    exp = exporter_factory(config=config)
    assert sample(exp.metrics(), "fio_runs_total", jobname="randrw") == 1
    shutil.rmtree(results)
    time.sleep(2.5)
    m = exp.metrics()
    assert sample(m, "fio_runs_total", jobname="randrw") == 1  # earlier results stay
    assert exp.proc.poll() is None
    results.mkdir()
    settle(shutil.copy(FIO_OUTPUTS / "fio-3.33" / "randrw.json", results / "a.json"))  # the same content again: not a new run
    settle(shutil.copy(FIO_OUTPUTS / "fio-3.42" / "randrw.json", results / "b.json"))
    wait_for(lambda: sample(exp.metrics(), "fio_runs_total", jobname="randrw") == 2, 10, what="new file after recreation")
    time.sleep(1.5)
    m = exp.metrics()
    assert sample(m, "fio_runs_total", jobname="randrw") == 2
    assert sample(m, "fioscope_result_parse_errors_total") == 0
    assert sample(m, "fioscope_last_scan_timestamp_seconds") > time.time() - 5
    assert sum("cannot list results directory" in line for line in exp.logs().splitlines()) == 1


def test_jobs_per_file_and_series_per_exporter_are_bounded(tmp_path, exporter_factory):
    """A file with more jobs than max_jobs_per_file is rejected (one line naming it, counted); past max_series a
    job new to the exporter is not published (one line naming it, counted); what was published stays."""
    results = tmp_path / "results"
    results.mkdir()
    config = tmp_path / "fioscope.yaml"
    config.write_text(f"results_dir: {results}\nscan_interval: 1s\nmax_jobs_per_file: 20\nmax_series: 6000\n")
    past = time.time() - 3600
    files = {"a-20.json": corpus.many_jobs(20, "a"), "b-21.json": corpus.many_jobs(21, "b"),
             "c-20.json": corpus.many_jobs(20, "c"), "d-5000.json": corpus.many_jobs(5000, "d", "fio-3.33/randrw.json")}
    corpus.write([corpus.CorpusFile(name, data, "") for name, data in files.items()], results, past)
    exp = exporter_factory(config=config)
    text = exp.metrics_text()
    m = parse_exposition(text)
    check = promtool_check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    jobs = {dict(k[1])["jobname"] for k in m if k[0] == "fio_runs_total"}
    series = sum(1 for k in m if not k[0].startswith("fioscope_"))
    per_job = series // max(1, len(jobs))
    assert sample(m, "fioscope_result_parse_errors_total") == 2  # b (21 jobs) and d (5000 jobs)
    # a's 20 jobs fit (~190 series each); of c's, only those that fit under 6,000 series
    assert {j for j in jobs if j.startswith("a-")} == {f"a-{i}" for i in range(20)}
    assert not any(j.startswith(("b-", "d-")) for j in jobs)
    assert series <= 6000 and 6000 - series < per_job, (series, per_job)
    refused = 40 - len(jobs)
    assert refused > 0 and sample(m, "fioscope_series_limit_refused_jobs_total") == refused
    logs = exp.logs().splitlines()
    for name, n in (("b-21.json", 21), ("d-5000.json", 5000)):
        assert sum(name in line and "rejected" in line and f"{n} jobs" in line for line in logs) == 1, name
    assert sum("max_series" in line and f"{refused} job(s) not published" in line for line in logs) == 1
    time.sleep(2.5)  # more scans and scrapes: nothing counted twice, nothing published changes
    m2 = exp.metrics()
    assert sample(m2, "fioscope_series_limit_refused_jobs_total") == refused
    def fio(metrics: dict) -> dict:
        return {k: v for k, v in metrics.items() if not k[0].startswith("fioscope_")}

    assert fio(m2) == fio(m)


def test_a_5000_job_file_is_rejected_by_default(tmp_path, exporter_factory):
    results = tmp_path / "results"
    results.mkdir()
    many = corpus.many_jobs(5000, "j", "fio-3.33/randrw.json")
    corpus.write([corpus.CorpusFile("jobs-5000.json", many, "")], results, time.time() - 3600)
    exp = exporter_factory()
    m = exp.metrics()
    assert sample(m, "fioscope_result_parse_errors_total") == 1
    assert not any(k[0] == "fio_runs_total" for k in m)
