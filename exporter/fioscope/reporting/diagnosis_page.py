"""The diagnosis's pages: report.html's sections and charts and report.json, rendered from a ``Diagnosis`` (what
``diagnosis.diagnose`` decided); nothing here judges."""

from __future__ import annotations

from fioscope_mixin.columns import charted
from matplotlib.ticker import PercentFormatter

from . import humanize, reportjson
from .charts import Line, Window, count_axis, latency_axis, time_chart
from .diagnosis import Diagnosis
from .html import Report, Section, Table
from .phases import PHASE_COLUMNS, Phase, RunWindow, median_in, phase_rows
from .timeline import MAX_POINTS, Timeline, limit
from .wording import fmt_time


def diagnosis_report(d: Diagnosis) -> Report:
    """The page of ``d``: its summary and verdicts as decided; a section per charted device (charts, phase table), the
    avg-cpu chart per host, the rules that fired by name (folded); report.json (``reportjson``)."""
    report = Report("diagnosis", d.title, list(d.summary), list(d.verdicts))
    devices_json: list[dict] = []
    for dev in d.devices:
        if dev.idle or dev.headline is None:
            devices_json.append(reportjson.idle_device(dev.device, dev.host, dev.has_data, dev.cause, dev.cause_episodes))
            continue
        shown = limit(dev.timeline)
        report.sections.append(device_section(dev.label, shown, dev.shaded, dev.phases, (d.start, d.end), dev.throttled))
        devices_json.append(reportjson.charted_device(dev.timeline, shown, dev.headline.text, dev.headline.ok, dev.load_failed,
                                                      dev.phases, dev.throttled, dev.cause, dev.cause_episodes))
    for cpu in sorted(d.cpus, key=lambda c: c.host):  # avg-cpu once per host
        lines = [Line(mode, [t for t, _ in points], [v for _, v in points]) for mode, points in cpu.series.items() if mode != "nice"]
        report.sections.append(Section(f"avg-cpu ({cpu.host})", charts=[time_chart(
            _slug(f"cpu-{cpu.host}"), f"avg-cpu ({cpu.host})", lines, "", [Window(r.label, r.start, r.end) for r in d.runs],
            formatter=PercentFormatter(100), span=(d.start, d.end))]))
    if d.fired:  # the rules by name, for a colleague who knows them: last, folded (report.json has them too)
        rows = [[f.alertname, d.summaries.get(f.alertname, ""), f.labels.get("severity", ""),
                 ", ".join(f"{k}={v}" for k, v in sorted(f.labels.items()) if k in ("host", "instance", "device", "jobname", "target")),
                 fmt_time(f.start), fmt_time(f.end)] for f in d.fired]
        report.sections.append(Section("Details: the alert rules that fired", details=True, tables=[
            Table(["alert", "what it says", "severity", "where", "from (UTC)", "to (UTC)"], rows, kind="alerts")]))
    report.json = reportjson.diagnosis(d.start, d.end, d.runs, devices_json, [
        {"alert": f.alertname, "summary": d.summaries.get(f.alertname, ""),
         "labels": {k: v for k, v in f.labels.items() if k != "__name__"}, "start": f.start, "end": f.end} for f in d.fired])
    return report


def device_section(label: str, timeline: Timeline, runs: list[RunWindow], device_phases: list[Phase],
                   span: tuple[float, float], held: list[tuple[float, float]] | None = None) -> Section:
    """``held``: when the device was throttled; its IOPS chart then marks the cap per direction the headline names."""
    slug = _slug(f"{timeline.host}-{timeline.device}")
    shaded = [Window(r.label, r.start, r.end) for r in runs]

    def lines(*columns: str, scale: float = 1.0, labels: tuple[str, ...] = ()) -> list[Line]:
        return [Line(label, [t for t, _ in timeline.values(c)], [v * scale for _, v in timeline.values(c)])
                for c, label in zip(columns, labels or columns)]

    caps = [(f"cap ~{humanize.approx(v)} {c}", v) for c in ("r/s", "w/s") if (v := median_in(timeline, c, held or [])) >= 1]
    # each chart draws the columns the column table gives it (fioscope_mixin.columns.charted)
    charts = [
        time_chart(f"{slug}-iops", f"{timeline.device} IOPS", lines(*charted("iops")), "", shaded, formatter=count_axis("IO/s"),
                   ylabel="IO/s", span=span, levels=caps),
        # iostat's rkB/s and wkB/s, drawn in MiB/s: named by what the axis shows
        time_chart(f"{slug}-throughput", f"{timeline.device} throughput (MiB/s)",
                   lines(*charted("throughput"), scale=1 / 1024,
                         labels=tuple(f"{'read' if c.startswith('r') else 'write'} MiB/s" for c in charted("throughput"))),
                   "", shaded, formatter=count_axis("MiB/s"), ylabel="MiB/s", span=span),
        time_chart(f"{slug}-await", f"{timeline.device} await", lines(*charted("await")), "", shaded,
                   formatter=latency_axis(), span=span),
        time_chart(f"{slug}-util", f"{timeline.device} %util", lines(*charted("util")), "", shaded, formatter=PercentFormatter(100),
                   span=span),
        time_chart(f"{slug}-queue", f"{timeline.device} queue size (aqu-sz)", lines(*charted("queue")), "", shaded,
                   formatter=count_axis(""), span=span),
    ]
    table = Table(PHASE_COLUMNS, phase_rows(device_phases), failed={i for i, p in enumerate(device_phases) if p.failed}, kind="phases")
    note = [f"Downsampled: at most {MAX_POINTS} points per series, each bucket's minimum and maximum kept."] if timeline.downsampled else []
    return Section(label, charts=charts, tables=[table] if device_phases else [], lines=note)



def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)

