"""The reports read fio results only through the exporter's parser (fioscope.parser / resultfile): one reader,
one size cap, client_stats understood; a file the exporter rejects is skipped by the reports with one warning
naming it, and the report states how many were left out (issue 16 item 9, issue 19 item 2)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fioscope_testkit.paths import FIO_OUTPUTS, REPO

RANDRW = FIO_OUTPUTS / "fio-3.33" / "randrw.json"


def results_dir(tmp_path: Path, **bad: str) -> Path:
    """A results directory with the real randrw run at qd 4 and 16 (the second a rescaled copy), plus ``bad`` files."""
    root = tmp_path / "results"
    root.mkdir()
    shutil.copy(RANDRW, root / "a-qd4.json")
    doc = json.loads(RANDRW.read_text())
    job = doc["jobs"][0]
    job["job options"]["iodepth"] = "16"
    for ddir in ("read", "write"):
        job[ddir]["iops"] *= 1.5
        job[ddir]["clat_ns"]["mean"] *= 3
    (root / "b-qd16.json").write_text(json.dumps(doc))
    for name, text in bad.items():
        (root / f"{name}.json").write_text(text)
    return root


def with_read(change) -> str:
    doc = json.loads(RANDRW.read_text())
    doc["jobs"][0]["job options"]["iodepth"] = "64"
    change(doc["jobs"][0]["read"])
    return json.dumps(doc)  # NaN is written as the literal NaN, as json.dumps does


def report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fioscope", "report", *args], capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("bad", [
    with_read(lambda r: r.__setitem__("iops", [1])),  # aborted the whole report (TypeError)
    with_read(lambda r: r.__setitem__("iops", math.nan)),  # was a "0 IOPS" point that became the knee
])
def test_one_bad_file_is_skipped_named_and_stated(tmp_path, caplog, bad):
    from fioscope.reporting.performance import performance_report
    from fioscope.thresholds import shipped
    from fioscope.reporting.results import load_results

    root = results_dir(tmp_path, zz_bad=bad)
    with caplog.at_level("WARNING", logger="fioscope.report"):
        samples = load_results(root)
    assert {Path(s.source).name for s in samples} == {"a-qd4.json", "b-qd16.json"}
    assert all(math.isfinite(s.iops) and s.iops > 0 for s in samples)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "zz_bad.json" in warnings[0] and "skipped" in warnings[0], warnings
    perf = performance_report(samples, str(root), None, shipped())
    assert any(line.startswith("1 result file(s) skipped") and "zz_bad.json" in line for line in perf.summary), perf.summary
    for section in perf.sections:
        [knee] = [v for v in section.verdicts if v.kind == "knee"]
        assert knee.data["depth"] in (4, 16) and "nan" not in knee.data["iops"]
    out = tmp_path / "out"
    proc = report("--results", str(root), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    html = (out / "report.html").read_text()
    assert "1 result file(s) skipped" in html and "zz_bad.json" in html and "qd 64" not in html


def test_fio_2_output_is_skipped_not_shown_as_zero_latency(tmp_path):
    """fio 2.x has latencies in microseconds under other keys: the reports read it as 0 s; now skipped, named."""
    from fioscope.reporting.offline.load import load_fio_runs
    from fioscope.reporting.results import load_results

    root = results_dir(tmp_path, old=(FIO_OUTPUTS / "fio-2.21" / "randrw.json").read_text())
    samples = load_results(root)
    assert "old.json" not in {Path(s.source).name for s in samples} and all(s.lat_mean > 0 and s.lat_p99 > 0 for s in samples)
    assert [s.split(":")[0] for s in samples.skipped] == ["old.json"] and "fio-2.21" in samples.skipped[0]
    assert all(r.clat_p99 and all(v > 0 for v in r.clat_p99.values()) for r in load_fio_runs(str(root)))
    only_old = tmp_path / "only-old"
    only_old.mkdir()
    for path in (FIO_OUTPUTS / "fio-2.21").glob("*.json"):
        shutil.copy(path, only_old)
    proc = report("--results", str(only_old), "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and "no fio results" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out" / "report.html").exists()


def test_client_server_output_reaches_both_reports(tmp_path):
    """client_stats (fio --client): the diagnosis' fio runs were read from ``jobs`` only and came out empty."""
    from fioscope.reporting.offline.load import load_fio_runs
    from fioscope.reporting.results import load_results

    root = tmp_path / "cs"
    root.mkdir()
    shutil.copy(FIO_OUTPUTS / "fio-3.33" / "clientserver.json", root)
    samples = load_results(root)
    runs = load_fio_runs(str(root))
    assert samples and all(s.workload.hostname for s in samples)
    assert runs and {r.jobname for r in runs} == {s.jobname for s in samples}
    assert all(r.end > r.start for r in runs)


def test_one_size_cap_for_every_reader(tmp_path, caplog):
    """resultfile's cap (16 MiB) holds for the reports too: the performance report allowed 64 MiB, the diagnosis any size."""
    from fioscope.reporting.offline.load import load_fio_runs
    from fioscope.reporting.results import load_results
    from fioscope.resultfile import MAX_FILE_BYTES

    root = results_dir(tmp_path)
    (root / "zz-huge.json").write_text(RANDRW.read_text() + " " * MAX_FILE_BYTES)
    with caplog.at_level("WARNING", logger="fioscope.report"):
        samples = load_results(root)
        runs = load_fio_runs(str(root))
    assert "zz-huge.json" not in {Path(s.source).name for s in samples} and len(runs) == 2
    warnings = [r.getMessage() for r in caplog.records if "zz-huge.json" in r.getMessage()]
    assert len(warnings) == 2 and all("byte cap" in w for w in warnings), warnings


def test_the_reports_have_no_fio_json_reader_of_their_own():
    """No raw fio keys or document splitting in reporting/: a fio quirk handled in parser.py is handled for the reports."""
    offenders = []
    for path in (REPO / "exporter" / "fioscope" / "reporting").glob("*.py"):
        code = "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith(("#", '"', "`")))
        if re.search(r"split_documents|\"99\.0+\"|\"clat_ns\"|\"job_runtime\"|\"client_stats\"|\"fio version\"", code):
            offenders.append(path.name)
    assert offenders == [], offenders
