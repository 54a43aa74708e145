"""The store's parts keep to their jobs: a scrape's snapshot changes no state, a live report is not
rewritten under its caller, a parsed file is applied without changing it; the zero-once rule lives
in the exposition and still shows a new series at zero exactly once (real fio outputs, real render)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from fioscope.config import Config
from fioscope.parser import parse_file
from fioscope.store import Store
from fioscope_testkit.paths import FIO_OUTPUTS
from helpers.exposition import parse_exposition

ETCD = FIO_OUTPUTS / "fio-3.33" / "etcd.json+"
STATUS = FIO_OUTPUTS / "fio-3.33" / "status.json"


def settled_copy(source: Path, results: Path, name: str) -> Path:
    results.mkdir(exist_ok=True)
    path = results / name
    shutil.copy(source, path)
    old = time.time() - 3600  # anybody's fio output counts once settled
    os.utime(path, (old, old))
    return path


def test_snapshot_changes_nothing(tmp_path):
    results = tmp_path / "results"
    store = Store(Config(results_dir=results))
    store.scan()
    store.hold_new_series()  # the startup scan is done: a new result is shown at zero once
    settled_copy(ETCD, results, "etcd.json")
    store.scan()
    [key] = store.jobs
    before = (store.jobs[key].version, store.jobs[key].counters_held, [h.held for h in store.histograms[key].values()])
    first, second = store.snapshot(), store.snapshot()
    after = (store.jobs[key].version, store.jobs[key].counters_held, [h.held for h in store.histograms[key].values()])
    assert after == before and before[1] is True
    assert first[0][key].runs == second[0][key].runs == 1  # the state as it is; what a scrape shows is the exposition's


def test_zero_once_in_the_exposition(tmp_path):
    from fioscope.collector.fio import FioCollector

    results = tmp_path / "results"
    store = Store(Config(results_dir=results))
    store.scan()
    store.hold_new_series()
    settled_copy(ETCD, results, "etcd.json")
    store.scan()
    fio = FioCollector(store)

    def runs_and_count(text: str) -> tuple[float, float]:
        samples = parse_exposition(text)
        runs = next(v for (name, _), v in samples.items() if name == "fio_runs_total")
        count = next(v for (name, labels), v in samples.items() if name == "fio_latency_seconds_count" and ("ddir", "sync") in labels)
        return runs, count

    assert runs_and_count(fio.render()) == (0, 0)  # first scrape: at zero
    assert runs_and_count(fio.render()) == (1, 1823)  # then the counts
    assert runs_and_count(fio.render()) == (1, 1823)  # and no zero again (the cache holds the real text)
    assert runs_and_count("".join(_text(fio.collect()))) == (1, 1823)  # collect() shares the rule: no second zero


def _text(families) -> list[str]:
    from fioscope.collector.fio import sample_lines

    return [sample_lines(f) for f in families]


def test_update_live_keeps_its_callers_report(tmp_path):
    runs = parse_file(STATUS)
    store = Store(Config(results_dir=tmp_path))
    names = [j.jobname for j in runs[0].jobs]
    store.start_run(names)
    fio_figures = [[(d.iops, d.bandwidth_bytes) for d in r.jobs[0].directions.values()] for r in runs]
    for run in runs:
        store.update_live(run)
    assert [[(d.iops, d.bandwidth_bytes) for d in r.jobs[0].directions.values()] for r in runs] == fio_figures
    live = store.jobs[("", names[0], "")].live
    assert live is not None and live is not runs[-1].jobs[0]
    assert live.directions["read"].iops != runs[-1].jobs[0].directions["read"].iops  # per interval, not since the start


def test_applying_a_file_keeps_the_parsed_run():
    from fioscope.resolve import Resolver
    from fioscope.state import run_contributions

    [run] = parse_file(ETCD)
    bins = {ddir: {s: len(lat.bins_ns) for s, lat in d.latencies.items()} for ddir, d in run.jobs[0].directions.items()}
    [contribution] = run_contributions(run, Resolver(Config()).place)
    assert {ddir: {s: len(lat.bins_ns) for s, lat in d.latencies.items()} for ddir, d in run.jobs[0].directions.items()} == bins
    assert bins["sync"]["lat"] > 0 and contribution.histograms[("sync", "lat")][0]
    published = contribution.published
    assert published is not None and not any(lat.bins_ns for d in published.job.directions.values() for lat in d.latencies.values())


def test_runner_takes_the_streams_report_as_is():
    """runner.py re-parsed fio's final report because update_live had rewritten the stream's copy."""
    source = (Path(__file__).resolve().parents[1] / "exporter" / "fioscope" / "runner.py").read_text()
    assert "parse_document" not in source and "parse_text" not in source
