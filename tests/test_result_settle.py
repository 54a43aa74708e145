"""fio writing straight into the results directory (``fio --status-interval=N --output=results/x.json``: one JSON
document appended per interval) is published exactly once, when fio has finished the file (issue 24, item 5).

The rule (docs/contracts.md section 2): a file fioscope did not write is finished when it has not changed
for the settle time and no process holds it open for writing (fio keeps --output open until it exits);
where other processes' descriptors cannot be seen (fioscope not root), when it has not changed for longer
than its documents say another could still come (the widest gap between them, or the one document's
elapsed time, plus the settle time). The status documents carry no mark of their own: a final report of
fio 3.33 has the same keys as a status report.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from fioscope import ingest
from fioscope.config import load_config
from fioscope.parser import split_documents
from fioscope.store import Store
from fioscope_testkit.binaries import require
from fioscope_testkit.net import wait_for
from helpers.exposition import sample


def _fio(results, target, runtime: int, interval: int) -> subprocess.Popen:
    return subprocess.Popen([shutil.which("fio") or "fio", "--name=direct", f"--filename={target / 'f'}", "--size=4m", "--rw=randread",
                             "--bs=4k", f"--runtime={runtime}", "--time_based", "--rate_iops=500", "--output-format=json+",
                             f"--status-interval={interval}", f"--output={results / 'direct.json'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _final_ios(path) -> int:
    doc = split_documents(path.read_text())[-1]
    return sum(job["read"]["total_ios"] for job in doc["jobs"])


def _runs(store: Store) -> list[int]:
    """fio_runs_total of the job ``direct`` (whatever target its file resolves to)."""
    return [state.runs for key, state in store.jobs.items() if key[1] == "direct"]


def _histogram_count(store: Store) -> int:
    [hists] = [h for key, h in store.histograms.items() if key[1] == "direct"]
    return sum(hists[("read", "clat")].buckets)


@pytest.mark.parametrize("writers_visible", [True, False], ids=["root-sees-the-writer", "writer-unseen"])
def test_a_file_fio_writes_with_status_interval_is_published_once_when_finished(tmp_path, monkeypatch, writers_visible):
    """Real fio, the store's own scan (settle time shortened to half a status interval, as 10 s is to 12 s)."""
    require("fio")
    monkeypatch.setattr(ingest, "SETTLE_SECONDS", 0.5)
    if not writers_visible:  # as an unprivileged fioscope: other users' descriptors are closed to it
        monkeypatch.setattr(ingest, "files_open_for_writing", lambda: None)
    results, target = tmp_path / "results", tmp_path / "t"
    results.mkdir()
    target.mkdir()
    store = Store(load_config(None, str(results)))
    fio = _fio(results, target, runtime=4, interval=1)
    published_while_running = []
    while fio.poll() is None:
        store.scan()
        published_while_running += _runs(store)
        time.sleep(0.2)
    assert fio.returncode == 0
    assert not published_while_running, f"published while fio still wrote the file: runs {published_while_running}"
    deadline = time.monotonic() + 10
    while not _runs(store) and time.monotonic() < deadline:
        store.scan()
        time.sleep(0.2)
    for _ in range(5):
        store.scan()
    path = results / "direct.json"
    assert len(split_documents(path.read_text())) >= 4  # status documents and the final one
    assert _runs(store) == [1] and store.parse_errors == 0
    assert _histogram_count(store) == _final_ios(path)  # fio's own I/O count, not the sum of the status documents


@pytest.mark.slow
def test_serve_publishes_a_12s_status_interval_file_once(tmp_path, exporter_factory):
    """The issue's case against a real exporter: fio --status-interval=12 --output=results/x.json (past the 10 s settle time)."""
    require("fio")
    target = tmp_path / "t"
    target.mkdir()
    config = tmp_path / "fioscope.yaml"
    config.write_text(f"results_dir: {tmp_path / 'results'}\nscan_interval: 1s\n")  # a scan within every quiet gap
    exp = exporter_factory(config=config)
    fio = _fio(exp.results, target, runtime=26, interval=12)
    try:
        runs = []
        while fio.poll() is None:
            runs += [v for (name, labels), v in exp.metrics().items() if name == "fio_runs_total" and dict(labels)["jobname"] == "direct"]
            time.sleep(1)
        assert not any(runs), f"published while fio still wrote the file: {runs}"
        wait_for(lambda: sample(exp.metrics(), "fio_runs_total", jobname="direct") == 1, 20, what="the finished run")
        time.sleep(3)
        m = exp.metrics()
        assert sample(m, "fio_runs_total", jobname="direct") == 1
        count = sample(m, "fio_latency_seconds_count", jobname="direct", ddir="read", stage="clat")
        assert count == _final_ios(exp.results / "direct.json")
    finally:
        fio.kill()
        fio.wait()
