"""Issue 51 item 6 and a low item: a capture bundle given to ``fioscope report`` is bounded as its iostat.json is.

``samples/fio.jsonl`` and ``samples/diskstats.jsonl`` written by hand, hostile: a time in year 3.2 billion (promtool's
backfill spun until the report's 600 s timeout), NaN, inf, negative and falling counters (loaded without a word),
20,000 directions, job names or devices (20,024 series), a lone surrogate in a job name (the whole report failed).
The real ``fioscope report`` (its temporary Prometheus and promtool) runs on them: it finishes within a bound, names
each bad line in one warning, says what it left out on the page, and keeps the series within the budget.
"""

from __future__ import annotations

import json
import resource
import subprocess
import time
from pathlib import Path

import pytest
from fioscope_testkit.cli import fioscope_command
from fioscope_testkit.paths import checkout_env
from helpers.bundles import kernel_samples, write_bundle

REPORT_SECONDS = 120  # a clean bundle of this size reports in ~15 s here; t=1e17 kept promtool busy 600 s


def _diskstats_line(t: float, fields: list, devices: str = "loop0") -> str:
    line = f"   7       0 {devices} " + " ".join(str(v) for v in fields)
    return json.dumps({"t": t, "diskstats": [line], "stat": "cpu  100 0 50 1000 10 0 0 0 0 0"})


def _hostile_bundle(directory: Path) -> tuple[Path, dict[str, list[int]]]:
    """A bundle of 40 good samples; bad lines appended to its samples files. -> iostat.json, {file: bad line numbers}."""
    kernel = kernel_samples(40, 2.0)
    write_bundle(directory, kernel)
    t0, t_end = kernel[0][0], kernel[-1][0]
    raw = directory / "samples" / "diskstats.jsonl"
    good = raw.read_text().splitlines()
    last = json.loads(good[-1])
    fields = last["diskstats"][0].split()[3:]
    bad_disk = [
        _diskstats_line(t_end + 1, ["nan"] * len(fields)),
        _diskstats_line(t_end + 1.5, ["inf"] * len(fields)),
        _diskstats_line(t_end + 1.7, ["-5"] * len(fields)),
        _diskstats_line(t_end + 1.9, ["1"] * len(fields)),  # every counter falling to 1
        _diskstats_line(1e17, fields),
    ]
    # 20,000 devices the bundle's iostat.json does not have beside its own: a sample of loop0 alone (no series added)
    many = json.dumps({"t": t_end + 2.1, "diskstats": last["diskstats"] + [f"   7 {i} loop{i + 100} " + " ".join(fields)
                                                                            for i in range(20_000)], "stat": last["stat"]})
    raw.write_text("\n".join([*good, *bad_disk, many]) + "\n")
    fio = directory / "samples" / "fio.jsonl"
    rate = {"target": "capture", "device": "loop0", "jobname": "randrw", "bytes_per_second": {"read": 1e6, "write": 2e6}}
    lines = [json.dumps({**rate, "t": t0 + 10 + i}) for i in range(20)]
    lines.append(json.dumps({**rate, "t": t0 + 30.5, "jobname": "lone\udcffsurrogate"}))  # json.dumps escapes it: \udcff
    lines += [json.dumps({**rate, "t": 1e17}),  # year 3.2 billion
              json.dumps({**rate, "t": t0 + 31, "bytes_per_second": {"read": float("nan")}}),
              json.dumps({**rate, "t": t0 + 32, "bytes_per_second": {f"d{i}": 1.0 for i in range(20_000)}})]
    lines += [json.dumps({**rate, "t": t0 + 33, "jobname": f"job{i}"}) for i in range(20_000)]
    fio.write_text("\n".join(lines) + "\n")
    # fio.jsonl: randrw and the lone surrogate are 2 jobs, job0..job61 the other 62 of the budget: job62 (line 87) on are not
    return directory / "iostat.json", {str(raw): list(range(41, 46)), str(fio): [22, 23, 24, *range(87, 20_025)]}


def test_hostile_bundle_lines_are_left_out_each_named_and_bounded(tmp_path):
    from fioscope.reporting.offline.counters import fio_rate_series
    from fioscope.reporting.offline.load import MAX_FIO_JOBS, bundle_counters, bundle_fio_rates, input_notes, load_iostat

    iostat, bad = _hostile_bundle(tmp_path / "bundle")
    captures = load_iostat(str(iostat))
    counters = bundle_counters([str(iostat)], captures)[str(iostat)]
    assert len(counters) == 41 and all(set(d) == {"loop0"} for _, d, _ in counters)  # the good samples, the one device
    series = fio_rate_series(bundle_fio_rates([str(iostat)], captures), "vm1")["fio_bandwidth_bytes_per_second"]
    assert len(series) <= 2 * MAX_FIO_JOBS  # read and write of at most MAX_FIO_JOBS jobs (was 20,024)
    assert not [labels for labels in series if "\udcff" in labels]
    assert [labels for labels in series if "lone\\\\xffsurrogate" in labels]  # escaped as the exporter escapes names
    notes = " ".join(input_notes(captures))
    assert "diskstats.jsonl line: time outside the capture" in notes and "fio.jsonl line: time outside the capture" in notes
    assert "counters iostat.json would refuse" in notes and "the series budget" in notes


def _far_future_bundle(directory: Path) -> tuple[Path, dict[str, list[int]]]:
    """Good but for one fio.jsonl line at t=1e17 (alone: a damaged line after it refused the whole file before)."""
    iostat, _ = _hostile_bundle(directory)
    fio = directory / "samples" / "fio.jsonl"
    lines = fio.read_text().splitlines()
    fio.write_text("\n".join([*lines[:20], lines[21]]) + "\n")
    return iostat, {str(fio): [21]}


@pytest.mark.slow  # the real report: a temporary Prometheus and promtool, ~20 s each
@pytest.mark.parametrize("bundle", [_hostile_bundle, _far_future_bundle])
def test_report_on_a_hostile_bundle_finishes_and_names_each_bad_line(tmp_path, bundle):
    iostat, bad = bundle(tmp_path / "bundle")
    out = tmp_path / "out"
    started = time.monotonic()
    proc = subprocess.run(fioscope_command("report", "--iostat", iostat, "--output", out), capture_output=True, text=True,
                          timeout=REPORT_SECONDS, env=checkout_env(), check=False)
    took = time.monotonic() - started
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest process it ran (Prometheus, promtool)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert took < REPORT_SECONDS and rss < 2 << 30, (took, rss)
    warnings = [line for line in proc.stderr.splitlines() if "left out" in line]
    for path, lines in bad.items():
        named = [n for n in lines if any(f"{path}: line {n}:" in w for w in warnings)]
        assert named == lines[:len(named)] and len(named) >= min(len(lines), 6), (path, lines, warnings)
    if bundle is _hostile_bundle:  # 19,939 job names past the budget: one line, not 19,939
        assert any("more line(s) left out" in w for w in warnings)
    assert len(proc.stderr.splitlines()) < 60, proc.stderr[-3000:]
    assert "time outside the capture" in (out / "report.html").read_text()
