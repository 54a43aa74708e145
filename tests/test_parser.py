"""The parser against real fio output of 2.21, 3.33 and 3.42, and against broken files."""

from __future__ import annotations

import json

import pytest
from fioscope.parser import (
    DocumentStream,
    ParseError,
    TruncatedError,
    parse_file,
    parse_text,
    quantile_label,
)
from fioscope_testkit.paths import FIO_OUTPUTS

V3 = ["fio-3.33", "fio-3.42"]



@pytest.mark.parametrize("version", V3)
def test_randrw_values_equal_fio_json(version):
    path = FIO_OUTPUTS / version / "randrw.json"
    raw = json.loads(path.read_text())["jobs"][0]
    [run] = parse_file(path)
    [job] = run.jobs
    assert job.jobname == "randrw"
    for ddir in ("read", "write"):
        d = job.directions[ddir]
        assert d.iops == raw[ddir]["iops"]
        assert d.bandwidth_bytes == raw[ddir]["bw_bytes"]
        clat = d.latencies["clat"]
        assert clat.count == raw[ddir]["clat_ns"]["N"]
        assert clat.mean_seconds == pytest.approx(raw[ddir]["clat_ns"]["mean"] / 1e9)
        assert clat.percentiles["0.99"] == raw[ddir]["clat_ns"]["percentile"]["99.000000"] / 1e9
        assert clat.percentiles["0.9999"] == raw[ddir]["clat_ns"]["percentile"]["99.990000"] / 1e9
    assert "trim" not in job.directions  # never used: not published
    assert run.fio_version == version


@pytest.mark.parametrize("version", V3)
def test_etcd_sync_counted_from_N_not_total_ios(version):
    path = FIO_OUTPUTS / version / "etcd.json+"
    raw = json.loads(path.read_text())["jobs"][0]["sync"]
    assert raw["total_ios"] == 0
    [run] = parse_file(path)
    sync = run.jobs[0].directions["sync"].latencies["lat"]
    assert sync.count == raw["lat_ns"]["N"] == 1823
    assert sum(sync.bins_ns.values()) == 1823
    assert sync.percentiles["0.99"] == raw["lat_ns"]["percentile"]["99.000000"] / 1e9


@pytest.mark.parametrize("version", V3)
def test_status_interval_gives_every_report(version):
    runs = parse_file(FIO_OUTPUTS / version / "status.json")
    assert len(runs) == 5
    ios = [r.jobs[0].directions["read"].total_ios for r in runs]
    assert ios == sorted(ios) and ios[-1] == 2000


@pytest.mark.parametrize("version", V3)
@pytest.mark.parametrize("name", ["preamble.txt", "preamble_output.json", "preamble_verify.txt"])
def test_text_before_json_is_skipped(version, name):
    [run] = parse_file(FIO_OUTPUTS / version / name)
    assert run.jobs[0].jobname.startswith("preamble")


@pytest.mark.parametrize("version", V3)
def test_numjobs_without_group_reporting_is_merged(version):
    raw = json.loads((FIO_OUTPUTS / version / "numjobs2.json").read_text())["jobs"]
    [run] = parse_file(FIO_OUTPUTS / version / "numjobs2.json")
    [job] = run.jobs
    read = job.directions["read"]
    assert read.iops == pytest.approx(sum(e["read"]["iops"] for e in raw))
    assert read.latencies["clat"].count == sum(e["read"]["clat_ns"]["N"] for e in raw)
    worst = max(e["read"]["clat_ns"]["percentile"]["99.000000"] for e in raw) / 1e9
    assert read.latencies["clat"].percentiles["0.99"] == worst  # no bins: the upper bound
    [grouped] = parse_file(FIO_OUTPUTS / version / "numjobs2_grouped.json")[0].jobs
    assert grouped.directions["read"].total_ios == read.total_ios


@pytest.mark.parametrize("version", V3)
def test_unified_rw_reporting(version):
    [mixed] = parse_file(FIO_OUTPUTS / version / "mixed.json")[0].jobs
    assert set(mixed.directions) == {"mixed"}
    [both] = parse_file(FIO_OUTPUTS / version / "mixed_both.json")[0].jobs
    assert {"read", "write", "mixed"} <= set(both.directions)
    assert both.directions["mixed"].total_ios == both.directions["read"].total_ios + both.directions["write"].total_ios


@pytest.mark.parametrize("version", V3)
@pytest.mark.parametrize("name", ["clientserver.json", "clientserver_stdout.txt"])
def test_client_server(version, name):
    [job] = parse_file(FIO_OUTPUTS / version / name)[0].jobs
    assert job.jobname == "cs-randrw"
    assert job.hostname.endswith(".sock")
    assert job.options["ioengine"] == "libaio"  # from the top-level 'global options'


def test_lat_and_slat_percentiles_are_stages():
    [job] = parse_file(FIO_OUTPUTS / "fio-3.42" / "lat_percentiles.json+")[0].jobs
    stages = job.directions["write"].latencies
    assert set(stages) == {"slat", "clat", "lat"}
    assert all(stage.bins_ns and stage.percentiles for stage in stages.values())


@pytest.mark.parametrize("name", ["randrw.json", "etcd.json+", "status.json", "numjobs2.json"])
def test_fio2_is_rejected_clearly(name):
    with pytest.raises(ParseError, match=r"fio-2\.21 output .* not supported"):
        parse_file(FIO_OUTPUTS / "fio-2.21" / name)


@pytest.mark.parametrize("version", ["fio-2.21", *V3])
def test_fio_error_text_is_rejected(version):
    with pytest.raises(ParseError, match=r"no fio JSON document found \(\d+ non-empty lines? of other text\)") as caught:
        parse_file(FIO_OUTPUTS / version / "missingdir.txt")
    assert "directory" not in str(caught.value)  # the content is never quoted (issue 24: secrets reached the log)


def test_truncated_file():
    text = (FIO_OUTPUTS / "fio-3.33" / "randrw.json").read_text()
    with pytest.raises(TruncatedError):
        parse_text(text[: len(text) // 2])


@pytest.mark.parametrize("text,message", [
    ("", "empty file"),
    ("   \n\n", "empty file"),
    ('{"hello": 1}\n', "no 'fio version'"),
    ('{"fio version": "fio-3.33"}\n', "neither 'jobs' nor 'client_stats'"),
    ('{"fio version": "fio-3.33", "jobs": [}\n', "invalid JSON"),
])
def test_malformed(text, message):
    with pytest.raises(ParseError, match=message):
        parse_text(text)


def test_document_stream_splits_incrementally():
    text = (FIO_OUTPUTS / "fio-3.33" / "status.json").read_text()
    stream = DocumentStream()
    seen = []
    for i in range(0, len(text), 777):  # arbitrary chunking, documents cut mid-way
        seen += stream.feed(text[i:i + 777])
    assert len(seen) == 5
    assert stream.last_document["jobs"][0]["read"]["total_ios"] == 2000


@pytest.mark.parametrize("percent,label", [("50.000000", "0.5"), ("99.000000", "0.99"), ("99.900000", "0.999"),
                                           ("99.990000", "0.9999"), ("1.000000", "0.01"), ("99.950000", "0.9995")])
def test_quantile_labels(percent, label):
    assert quantile_label(percent) == label


@pytest.mark.parametrize("percent", ["1e-999990", "1E-5", "5e1", "99.9", "99", "0.000000", "100.000001", "101.000000",
                                     "1000.000000", " 99.000000", "99.000000\n", "+99.000000", "-1.000000", "99.0000000",
                                     "Infinity", "NaN", "９９.000000", "99_0.000000", "0x1p-3"])
def test_percentile_keys_outside_fios_format_are_refused(percent):
    """fio prints percentile keys as "%f" (NN.NNNNNN, 0 < p <= 100); anything else would become a label of any length."""
    with pytest.raises(ParseError, match="percentile key"):
        quantile_label(percent)
    doc = json.loads((FIO_OUTPUTS / "fio-3.33" / "randrw.json").read_text())
    doc["jobs"][0]["read"]["clat_ns"]["percentile"][percent] = 1000
    with pytest.raises(ParseError, match="percentile key"):
        parse_text(json.dumps(doc))


def test_smallest_and_largest_percentile_keys_make_short_labels():
    assert quantile_label("0.000001") == "0.00000001" and quantile_label("100.000000") == "1"


def test_fio_before_3_18_without_N():
    """fio 3.0-3.17 has no N in latency objects: counts come from the json+ bins, else total_ios."""
    def strip_n(node):
        if isinstance(node, dict):
            return {k: strip_n(v) for k, v in node.items() if k != "N"}
        return node

    doc = strip_n(json.loads((FIO_OUTPUTS / "fio-3.33" / "etcd.json+").read_text()))
    doc["fio version"] = "fio-3.4"
    [job] = parse_text(json.dumps(doc))[0].jobs
    assert job.directions["sync"].latencies["lat"].count == 1823  # from the bins (sync.total_ios is 0)
    assert job.directions["write"].latencies["clat"].count == 1823
    plain = strip_n(json.loads((FIO_OUTPUTS / "fio-3.33" / "randrw.json").read_text()))
    [job] = parse_text(json.dumps(plain))[0].jobs
    assert job.directions["read"].latencies["clat"].count == job.directions["read"].total_ios == 1500
