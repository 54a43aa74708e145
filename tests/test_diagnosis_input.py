"""The diagnosis in one pass (issue 26 item 3): one DiagnosisInput, a pure diagnose() that needs no Prometheus, and a
report whole when it is made (its caller's title and summary lines go in, nothing is patched afterwards)."""

from __future__ import annotations

from fioscope_testkit.paths import IOSTAT


def test_diagnose_is_pure_and_takes_its_callers_title_and_lines(monkeypatch):
    import socket

    from fioscope.reporting.diagnosis import DiagnosisInput, FioFigures, Firing, diagnose
    from fioscope.reporting.diagnosis_page import diagnosis_report
    from fioscope.reporting.offline.load import load_iostat
    from fioscope.reporting.timeline import from_iostat_samples
    from fioscope.thresholds import load_thresholds

    def no_network(*args, **kwargs):
        raise AssertionError("diagnose() opened a connection")

    monkeypatch.setattr(socket, "create_connection", no_network)
    [capture] = load_iostat(str(IOSTAT / "healthy.json"))
    timelines = from_iostat_samples(capture.host, [(s.timestamp, s.disks) for s in capture.samples])
    start, end = capture.samples[0].timestamp, capture.samples[-1].timestamp
    device = timelines[0].device
    fired = [Firing("FioscopeDiskLatencyAboveSla", {"host": capture.host, "device": device}, start + 60, start + 120)]
    inp = DiagnosisInput(start=start, end=end, step=15.0, timelines=timelines, cpus=[], runs=[], fired=fired, names={}, declared={},
                         fio=FioFigures(fsync=[({"jobname": "etcd-wal"}, 0.012)]),
                         thresholds=load_thresholds(["thresholds.etcd_fsync_p99_seconds=0.02"]), summaries={}, title="Capture on vm",
                         lead=["Phases: idle"], notes=["left out: nothing"])
    report = diagnosis_report(diagnose(inp))
    assert report.title == "Capture on vm"
    assert report.summary[0] == "Phases: idle" and report.summary[1].startswith("Window ") and report.summary[-1] == "left out: nothing"
    sla = [v for v in report.verdicts if v.kind == "sla" and v.data.get("device") == device]
    assert sla and sla[0].ok is False and sla[0].data["alerts"] == "FioscopeDiskLatencyAboveSla"
    # the input's thresholds judge: 12 ms passes a 20 ms line (the shipped 10 ms line would fail it)
    [fsync] = [v for v in report.verdicts if v.kind == "etcd-fsync"]
    assert fsync.ok is True and "20.00 ms" in fsync.text
