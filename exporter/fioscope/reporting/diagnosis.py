"""Diagnosis report: what the disks did over a window, and the verdicts of fioscope's rules.

Every verdict comes from the project's alert rules (alerts/alerts.rules.yaml): on a live
stack from the ``ALERTS`` series Prometheus wrote while evaluating them, offline from the same
rules evaluated over backfilled iostat data (see ``offline``). What is drawn and cut into idle and
load phases is the data at its own resolution (``timeline``): offline every iostat sample, live
node_exporter's raw counters between scrapes; runs are shaded as they ran (``phases``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
import statistics
from dataclasses import dataclass, field

from fioscope_mixin import columns
from fioscope_mixin import names as n
from fioscope_mixin.prometheus import rule_groups
from fioscope_mixin.settings import SettingsError, duration
from fioscope_mixin.units import format_duration, parse_duration
from matplotlib.ticker import PercentFormatter

from ..thresholds import Thresholds, shipped
from ..verdicts import etcd_fsync
from . import ReportError, humanize, reportjson
from .cause_episodes import CauseFindings, cause_findings
from .charts import Line, Window, time_chart
from .html import Report, Section, Table, Verdict
from .phases import (
    IDLE_DEVICE_UTIL,
    IDLE_IOPS,
    PHASE_COLUMNS,
    Phase,
    RunWindow,
    borrowed_loads,
    headline,
    idle_is_clean,
    is_idle_device,
    median_in,
    phase_rows,
    phases,
    throttled_spans,
)
from .prometheus_api import Prometheus, Series, spans, step_for
from .prometheus_api import where_device as _key
from .timeline import MAX_POINTS, TRACKED_COUNTERS, CpuTimeline, DiskCounters, Timeline, cpu_from_counters, from_counters, limit

log = logging.getLogger("fioscope.report")

# which alert says what: fioscope_mixin.names (one list of the throttling alerts for the rules, dashboards and reports)
THROTTLE_ALERTS, SLA_ALERTS, FSYNC_ALERTS, IOWAIT_ALERTS = n.THROTTLING_ALERTS, n.SLA_ALERTS, n.FSYNC_ALERTS, n.IOWAIT_ALERTS


@dataclass
class Firing:
    alertname: str
    labels: dict[str, str]
    start: float
    end: float


def firings_from_alerts(prom: Prometheus, start: float, end: float, step: float, matchers: str) -> list[Firing]:
    """What the live Prometheus's rule evaluation recorded: the ALERTS series."""
    result = []
    for s in prom.range(f'ALERTS{{alertstate="firing"{matchers}}}', start, end, step):
        for a, b in spans(s.times, step):
            result.append(Firing(s.labels.get("alertname", ""), s.labels, a, b))
    return result


def fmt_time(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _matchers(host: str | None, devices: list[str] | None, by_instance: bool = False) -> tuple[str, str]:
    """Label matchers (with a leading comma) for host-level and device-level series. Without the
    ``host`` label (a stack older than the fleet topology) the host is the instance's address."""
    host_m = (f",instance=~`{re.escape(host)}(:[0-9]+)?`" if by_instance else f",host={json.dumps(host)}") if host else ""
    device_m = host_m + (f",device=~`{'|'.join(re.escape(d) for d in devices)}`" if devices else "")
    return host_m, device_m


@dataclass
class FioFigures:
    """What the window's fio results say, as the Prometheus serving them has it: per job the SLA its target declared, its
    worst p99 completion latency, whether it measured fdatasync; every fdatasync p99 (labels, seconds)."""

    sla: dict[str, float] = field(default_factory=dict)
    worst: dict[str, float] = field(default_factory=dict)
    sync_jobs: set[str] = field(default_factory=set)
    fsync: list[tuple[dict[str, str], float]] = field(default_factory=list)


@dataclass
class DiagnosisInput:
    """Everything a diagnosis judges, built once, live (``live_input``) or offline (``reporting.offline``): the pure
    ``diagnose`` turns it into the report, which nothing changes afterwards."""

    start: float
    end: float
    step: float  # one point per step (offline: the grid the rules were evaluated on)
    timelines: list[Timeline]  # what is drawn and cut into phases, at the data's own resolution
    cpus: list[CpuTimeline]
    runs: list[RunWindow]
    fired: list[Firing]  # the alerts the rules fired
    names: dict[str, str]  # device -> its human name (fioscope_disk_info)
    declared: dict[str, str]  # device -> its declared limit, as text
    fio: FioFigures
    thresholds: Thresholds  # what the rules were generated with (the command's)
    host: str | None = None
    devices: list[str] | None = None
    resolution: str = ""
    title: str = "Disk diagnosis"
    lead: list[str] = field(default_factory=list)  # summary lines before the window's (offline: the input; capture: its phases)
    notes: list[str] = field(default_factory=list)  # summary lines after the rest (what the input left out)
    # (start, end, reason, device) of loads that failed (capture's phases); each run's own ``failed`` counts too: such a
    # device's verdict is "inconclusive — the load failed", never a pass
    failed_loads: list[tuple[float, float, str, str]] = field(default_factory=list)
    causes: CauseFindings = field(default_factory=CauseFindings)  # why each device was slow, per episode (``cause_episodes``)


def live_input(prom: Prometheus, start: float, end: float, host: str | None, devices: list[str] | None,
               thresholds: Thresholds | None = None, min_step: float = 15.0) -> DiagnosisInput:
    """The live stack's window: node_exporter's raw counters per scrape, the exporter's run windows, ALERTS."""
    step = step_for(start, end, min_step)
    host_m, device_m = _matchers(host, devices)
    timelines, cpus, by_instance = live_timelines(prom, start, end, host, devices)
    if by_instance:
        host_m, device_m = _matchers(host, devices, by_instance=True)
    return DiagnosisInput(start, end, step, timelines, cpus, live_runs(prom, start, end, step, host_m),
                          firings_from_alerts(prom, start, end, step, host_m), device_names(prom, end, host_m),
                          declared_limits(prom, start, end, device_m), fio_figures(prom, start, end, host_m),
                          thresholds or shipped(), host, devices,
                          resolution="one point per scrape, at least every 2 s (rates of node_exporter's counters between scrapes)",
                          causes=cause_findings(prom, start, end, step, host_m, device_m, *cause_settings(thresholds or shipped())))


def cause_settings(thresholds: Thresholds) -> tuple[str, float, float]:
    """The rules' ``thresholds.cause.demand_lookback`` (the load a device carried at its normal latency is averaged over
    it), ``durations.cause`` in seconds (how long a cause holds before its alert pages) and ``demand_tolerance``."""
    cause = thresholds.settings["thresholds"]["cause"]
    return (str(cause["demand_lookback"]), parse_duration(str(thresholds.settings["durations"]["cause"])),
            float(cause["demand_tolerance"]))


def diagnose(inp: DiagnosisInput) -> Report:
    """The report over [start, end]: what the disks did and the rules' verdicts (no query, no file: only ``inp``)."""
    start, end, host, devices, fired, names, limits = inp.start, inp.end, inp.host, inp.devices, inp.fired, inp.names, inp.declared
    timelines, runs = inp.timelines, inp.runs
    if devices:
        timelines = [t for t in timelines if t.device in devices]
    if not timelines:
        where = " on host " + host if host else ""
        raise ReportError(f"no disk data in the window {fmt_time(start)} – {fmt_time(end)} UTC{where}"
                          f"{' for device ' + ','.join(devices) if devices else ''}"
                          " (is node_exporter scraped and are the fioscope rules loaded?)")
    report = Report("diagnosis", inp.title)
    drawn = [limit(t) for t in timelines]
    interval = statistics.median([t.interval for t in timelines if t.interval] or [0.0])
    report.summary += inp.lead
    report.summary.append(f"Window {fmt_time(start)} – {fmt_time(end)} UTC ({format_duration(round(end - start))}); "
                          f"{inp.resolution or 'every sample'} at its own interval ({interval:g} s); {len(timelines)} device(s)."
                          + (f" Long series are downsampled to at most {MAX_POINTS} points, keeping each bucket's minimum"
                             " and maximum (peaks survive)." if any(t.downsampled for t in drawn) else ""))
    if not names:
        report.summary.append("Devices are shown by their kernel names (no volume names, such as LVM or md, were found).")
    idle: list[str] = []
    devices_json: list[dict] = []
    for timeline, shown in sorted(zip(timelines, drawn), key=lambda p: (p[0].host, p[0].device)):
        key = (timeline.host, timeline.device)
        device = timeline.device
        label = device + (f" ({names[device]})" if names.get(device) else "") + (f" on {key[0]}" if key[0] and len(
            {t.host for t in timelines}) > 1 else "")
        mine = [f for f in fired if _key(f.labels) == key]
        throttle = [f for f in mine if f.alertname in THROTTLE_ALERTS]
        windows = sorted({(f.start, f.end) for f in throttle})
        failed = load_failures(device, runs, inp.failed_loads)
        if not failed and is_idle_device(timeline, runs, bool(mine)):
            util = max((v for _, v in timeline.values("util")), default=0.0)
            iops = max((v for _, v in timeline.iops()), default=0.0)
            has_data = bool(timeline.values("util"))
            idle.append(f"{label} (peak {humanize.count(iops)} IO/s, util {util:.0f} %)" if has_data else f"{label} (no data)")
            devices_json.append(reportjson.idle_device(device, timeline.host, has_data, inp.causes.dominant(*key),
                                                       [e.json() for e in inp.causes.of(*key)]))
            continue
        cpu = next((c for c in inp.cpus if c.host == timeline.host), None)
        device_phases = phases(timeline, runs, start, end, cpu)
        # a device that moved without a fio run of its own (the disk under the loaded one): its phases are the capture's
        # loads, for the table, the shading and report.json; its verdicts stay its own (no fio run on it)
        borrowed = borrowed_loads(timeline, runs)
        compared = phases(timeline, borrowed, start, end, cpu) if borrowed else device_phases
        alerts = ", ".join(sorted({f.alertname for f in throttle}))  # report.json and the details section; plain words on the page
        slack = max(timeline.interval, inp.step)  # one sample (or evaluation step) either side of the alert's window
        held = throttled_spans(windows, device_phases, slack)
        ok, text = headline(timeline, device_phases, held)
        if failed:
            more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
            ok, text = False, f"{device}: inconclusive — the load failed: {failed[0]}{more}"
            mark_failed(device_phases, [(a, b, why) for a, b, why, dev in inp.failed_loads if not dev or dev == device])
        if why := inp.causes.verdict(*key, held):  # the cause of its slow episodes, in plain words
            text = f"{text}; {why}"
        report.verdicts.append(Verdict("headline", ok, text, {"device": device, "host": timeline.host}))
        extra: list[Verdict] = []
        if throttle:
            ceiling = statistics.median([v for t, v in timeline.iops() if any(a <= t <= b for a, b in held)] or [0.0])
            extra.append(Verdict("throttled", False, f"{label}: THROTTLED — IOPS flat at a ceiling of {humanize.count(ceiling)}/s "
                                 f"({', '.join(f'{fmt_time(a)}–{fmt_time(b)[11:]}' for a, b in windows[:4])} UTC); "
                                 f"declared limit: {limits.get(device) or 'none declared'}",
                                 {"device": device, "ceiling-iops": f"{ceiling:.1f}", "alerts": alerts}))
        else:
            extra.append(Verdict("throttled", True, f"{label}: not throttled (no throttling signature in the window)"
                                 + (f"; declared limit: {limits[device]}" if limits.get(device) else ""), {"device": device}))
        above_sla = [f for f in mine if f.alertname in SLA_ALERTS]
        extra.append(await_verdict(label, device, timeline, above_sla, inp.thresholds.sla_seconds(device),
                                   duration(inp.thresholds.settings, "durations", "latency_sla"), Measured.of(start, end, device_phases)))
        report.verdicts += extra
        section = device_section(label, shown, borrowed or [r for r in runs if r.loads(device)], compared, (start, end), held)
        report.sections.append(section)
        devices_json.append(reportjson.charted_device(timeline, shown, text, ok, failed[0] if failed else None, compared, held,
                                                      inp.causes.dominant(*key), [e.json() for e in inp.causes.of(*key)]))
    if idle:
        report.verdicts.append(Verdict("idle-devices", None, (f"Idle, not charted (no fio run, util below {IDLE_DEVICE_UTIL:g} % "
                                                              f"and under {IDLE_IOPS:g} IO/s): ") + ", ".join(idle), {"count": len(idle)}))
    report.verdicts += fio_sla_verdicts(inp.fio)
    report.verdicts += fsync_verdicts(inp.fio, fired, inp.thresholds)
    report.verdicts.append(iowait_verdict(inp.cpus, fired, inp.thresholds, Measured.of(start, end)))
    names_fired = sorted({f.alertname for f in fired})
    meaning = alert_summaries(inp.thresholds)
    said = list(dict.fromkeys(meaning.get(name) or name for name in names_fired))
    report.verdicts.append(Verdict("alerts", not fired, f"alerts that fired: {'; '.join(said) if said else 'none'}"
                                   + (" (the rules by name: Details, at the end)" if fired else ""),
                                   {"count": len(fired), "alerts": ", ".join(names_fired)}))
    if runs:
        report.summary.append(f"{len(runs)} fio run(s) in the window, each shaded on the charts of the device it loaded: "
                              + "; ".join(f"{r.label} on {r.device or 'an unknown device'} {fmt_time(r.start)[11:]}–{fmt_time(r.end)[11:]}"
                                          for r in runs[:10]) + ("; ..." if len(runs) > 10 else ""))
    for cpu in sorted(inp.cpus, key=lambda c: c.host):  # avg-cpu once per host
        lines = [Line(mode, [t for t, _ in points], [v for _, v in points]) for mode, points in cpu.series.items() if mode != "nice"]
        report.sections.append(Section(f"avg-cpu ({cpu.host})", charts=[time_chart(
            _slug(f"cpu-{cpu.host}"), f"avg-cpu ({cpu.host})", lines, "", [Window(r.label, r.start, r.end) for r in runs],
            formatter=PercentFormatter(100), span=(start, end))]))
    if fired:  # the rules by name, for a colleague who knows them: last, folded (report.json has them too)
        rows = [[f.alertname, meaning.get(f.alertname, ""), f.labels.get("severity", ""),
                 ", ".join(f"{k}={v}" for k, v in sorted(f.labels.items()) if k in ("host", "instance", "device", "jobname", "target")),
                 fmt_time(f.start), fmt_time(f.end)] for f in sorted(fired, key=lambda f: f.start)]
        report.sections.append(Section("Details: the alert rules that fired", details=True, tables=[
            Table(["alert", "what it says", "severity", "where", "from (UTC)", "to (UTC)"], rows)]))
    report.json = reportjson.diagnosis(start, end, runs, devices_json, [
        {"alert": f.alertname, "summary": meaning.get(f.alertname, ""),
         "labels": {k: v for k, v in f.labels.items() if k != "__name__"}, "start": f.start, "end": f.end}
        for f in sorted(fired, key=lambda f: f.start)])
    report.summary += inp.notes
    return report


def alert_summaries(thresholds: Thresholds) -> dict[str, str]:
    """Each alert's summary, in plain words ("Disk throttled while fio loads it"), as the rules generated from ``thresholds``
    say it: what the page shows in place of the rule's name."""
    try:
        groups = rule_groups(thresholds.settings)["alerts/alerts.rules.yaml"]
    except (SettingsError, KeyError):
        return {}
    return {r["alert"]: str(r.get("annotations", {}).get("summary", "")) for g in groups for r in g.get("rules", []) if "alert" in r}


def load_failures(device: str, runs: list[RunWindow], failed_loads: list[tuple[float, float, str, str]]) -> list[str]:
    """Why the loads of ``device`` failed, each reason once, in time order ("" device: the target's device is unknown)."""
    reasons = [(r.start, r.failed) for r in runs if r.failed and r.loads(device)]
    reasons += [(a, why) for a, _, why, dev in failed_loads if not dev or dev == device]
    return list(dict.fromkeys(why for _, why in sorted(reasons)))


def mark_failed(device_phases: list[Phase], windows: list[tuple[float, float, str]]) -> None:
    """A load phase inside a failed load's window failed too (its run's own ``failed`` is set already)."""
    for p in device_phases:
        if p.kind == "load" and not p.failed:
            p.failed = next((why for a, b, why in windows if a - 1 <= p.start and p.end <= b + 1), "")


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


@dataclass
class Measured:
    """How long a check's rule could watch: ``seconds`` and the words for it ("the longest load lasted 2m30s")."""

    seconds: float
    what: str

    @classmethod
    def of(cls, start: float, end: float, device_phases: list[Phase] | None = None) -> Measured:
        """The longest load phase of a device that carried fio loads and was quiet between them (the rule's await then
        judges only the loads), else the window (a device with its own traffic: the rule watched all of it)."""
        loads = [p.end - p.start for p in device_phases or [] if p.kind == "load"]
        if loads and all(idle_is_clean(p) for p in device_phases or [] if p.kind == "idle"):
            return cls(max(loads), f"the longest load lasted {humanize.span(max(loads))}" if len(loads) > 1
                       else f"the load lasted {humanize.span(loads[0])}")
        return cls(end - start, f"the samples cover {humanize.span(end - start)}")

    def too_short(self, hold: float) -> bool:
        return self.seconds < hold


def undecided(kind: str, text: str, hold: float, measured: Measured, data: dict) -> Verdict:
    """A check whose rule needs ``hold`` (its ``for:``) but had only ``measured``: it could not fail, so it is not decided."""
    return Verdict(kind, None, f"{text}; the rule needs {humanize.span(hold)}, {measured.what}", data, decided=False)


def await_verdict(label: str, device: str, timeline: Timeline, above: list[Firing], sla: float | None = None,
                  hold: float = 0.0, measured: Measured | None = None) -> Verdict:
    """The latency SLA rule's verdict (``sla``: the device's in seconds, default the shipped settings'), with the await the
    samples show; no samples is "no data", never a pass. ``hold``: the rule's ``for:``; where ``measured`` is shorter
    the rule could not fire, and a check it did not fail is "not decided"."""
    sla = shipped().sla_seconds(device) if sla is None else sla
    reads, writes = timeline.values("r/s"), timeline.values("w/s")
    r_await, w_await = timeline.values("r_await"), timeline.values("w_await")
    samples = sorted((ra * r + wa * w) / (r + w) for (_, r), (_, w), (_, ra), (_, wa) in zip(reads, writes, r_await, w_await)
                     if r + w > 0 and not math.isnan(ra + wa))
    sla_text = humanize.latency(sla) if sla else "(threshold unknown)"
    if above:
        return Verdict("sla", False, f"{label}: latency SLA NOT met: await above {sla_text} from {fmt_time(above[0].start)} UTC",
                       {"device": device, "alerts": above[0].alertname})
    if not samples:
        return Verdict("sla", None, f"{label}: latency SLA: no data (no I/O completed, so no await)", {"device": device})
    worst = samples[min(len(samples) - 1, int(0.99 * len(samples)))]
    above_s = sum(1 for x in samples if sla and x / 1000 > sla) * (timeline.interval or 0)
    if measured and measured.too_short(hold):
        exceeded = f"{sla_text} exceeded for {humanize.span(above_s)}" if above_s else f"never above {sla_text}"
        return undecided("sla", f"{label}: latency SLA not decided: await p99 {humanize.latency(worst / 1000)}; {exceeded}",
                         hold, measured, {"device": device})
    if above_s:  # above the line, but not for as long as the rule's for: asks
        return Verdict("sla", None, f"{label}: latency SLA not failed by the rule: await above {sla_text} for about "
                       f"{format_duration(above_s)}, shorter than the rule asks before it fires; "
                       f"await p99 {humanize.latency(worst / 1000)}",
                       {"device": device})
    return Verdict("sla", True, f"{label}: latency SLA met: no sustained await above {sla_text}; "
                   f"await p99 {humanize.latency(worst / 1000)} "
                   "over the samples with I/O", {"device": device})


def iowait_verdict(cpus: list[CpuTimeline], fired: list[Firing], thresholds: Thresholds, measured: Measured) -> Verdict:
    """The iowait rule's verdict with the figure it judges: how long iowait stood above its line while the CPUs were
    otherwise idle, and its peak. Where the window is shorter than the rule's ``for:`` it could not fire: not decided."""
    episodes = [f for f in fired if f.alertname in IOWAIT_ALERTS]
    t = thresholds.settings.get("thresholds", {})
    line, busy = 100 * float(t.get("iowait_ratio", 0.2)), 100 * float(t.get("iowait_busy_cpu_ratio", 0.2))
    hold = duration(thresholds.settings, "durations", "iowait")
    figures = []
    for cpu in sorted(cpus, key=lambda c: c.host):
        points = list(zip(*(cpu.series.get(m, []) for m in ("iowait", "user", "system"))))
        if not points:
            continue
        times = [p[0][0] for p in points]
        step = statistics.median([b - a for a, b in zip(times, times[1:])] or [0.0])
        above = sum(1 for (_, io), (_, us), (_, sy) in points if io > line and us + sy < busy) * step
        peak = max(io for (_, io), _, _ in points)
        figures.append(f"iowait peak {peak:.0f} %" + (f", above {line:.0f} % with the CPUs otherwise idle for {humanize.span(above)}"
                                                     if above else f", never above {line:.0f} % with the CPUs otherwise idle")
                       + (f" on {cpu.host}" if len(cpus) > 1 else ""))
    figure = "; ".join(figures) or "no CPU figures"
    data = {"count": len(episodes)}
    if episodes:
        return Verdict("iowait", False, f"iowait episodes: {len(episodes)}" + "".join(
            f"; {fmt_time(f.start)}–{fmt_time(f.end)[11:]} on {f.labels.get('host') or f.labels.get('instance', '')}"
            for f in episodes[:5]), data)
    if measured.too_short(hold):
        return undecided("iowait", f"iowait: not decided: {figure}", hold, measured, data)
    return Verdict("iowait", True, f"iowait episodes: 0 ({figure})", data)


def device_section(label: str, timeline: Timeline, runs: list[RunWindow], device_phases: list[Phase],
                   span: tuple[float, float], held: list[tuple[float, float]] | None = None) -> Section:
    """``held``: when the device was throttled; its IOPS chart then marks the cap per direction the headline names."""
    slug = _slug(f"{timeline.host}-{timeline.device}")
    shaded = [Window(r.label, r.start, r.end) for r in runs]

    def lines(*columns: str, scale: float = 1.0, labels: tuple[str, ...] = ()) -> list[Line]:
        return [Line(label, [t for t, _ in timeline.values(c)], [v * scale for _, v in timeline.values(c)])
                for c, label in zip(columns, labels or columns)]

    caps = [(f"cap ~{humanize.approx(v)} {c}", v) for c in ("r/s", "w/s") if (v := median_in(timeline, c, held or [])) >= 1]
    charts = [
        time_chart(f"{slug}-iops", f"{timeline.device} IOPS", lines("r/s", "w/s"), "", shaded, formatter=humanize.count_axis("IO/s"),
                   ylabel="IO/s", span=span, levels=caps),
        # iostat's rkB/s and wkB/s, drawn in MiB/s: named by what the axis shows
        time_chart(f"{slug}-throughput", f"{timeline.device} throughput (MiB/s)",
                   lines("rkB/s", "wkB/s", scale=1 / 1024, labels=("read MiB/s", "write MiB/s")), "", shaded,
                   formatter=humanize.count_axis("MiB/s"), ylabel="MiB/s", span=span),
        time_chart(f"{slug}-await", f"{timeline.device} await", lines("r_await", "w_await"), "", shaded,
                   formatter=humanize.latency_axis(), span=span),
        time_chart(f"{slug}-util", f"{timeline.device} %util", lines("util"), "", shaded, formatter=PercentFormatter(100), span=span),
        time_chart(f"{slug}-queue", f"{timeline.device} queue size (aqu-sz)", lines("aqu-sz"), "", shaded,
                   formatter=humanize.count_axis(""), span=span),
    ]
    table = Table(PHASE_COLUMNS, phase_rows(device_phases), failed={i for i, p in enumerate(device_phases) if p.failed})
    note = [f"Downsampled: at most {MAX_POINTS} points per series, each bucket's minimum and maximum kept."] if timeline.downsampled else []
    return Section(label, charts=charts, tables=[table] if device_phases else [], lines=note)


MIN_LIVE_INTERVAL = 2.0  # below it a rate spans two scrapes (see timeline.from_counters): iostat's customary 2 s
COUNTERS = {f: columns.BY_COUNTER[f].series for f in TRACKED_COUNTERS}  # DiskCounters field <- node_exporter counter


def live_timelines(prom: Prometheus, start: float, end: float, host: str | None,
                   devices: list[str] | None) -> tuple[list[Timeline], list[CpuTimeline], bool]:
    """node_exporter's raw counter samples -> per-scrape iostat columns, per (host, device); and avg-cpu per host."""
    for by_instance in (False, True):
        host_m, device_m = _matchers(host, devices, by_instance)
        raw: dict[tuple[str, str], dict[float, dict[str, float]]] = {}
        for field_name, metric in COUNTERS.items():
            for s in prom.samples(f"{metric}{{{device_m.lstrip(',')}}}", start, end):
                by_time = raw.setdefault(_key(s.labels), {})
                for t, v in zip(s.times, s.values):
                    by_time.setdefault(t, {})[field_name] = v
        if raw or not host:
            break
    timelines = []
    for (where, device), by_time in raw.items():
        samples = [(t, DiskCounters(**c)) for t, c in sorted(by_time.items()) if len(c) == len(COUNTERS)]
        timelines.append(from_counters(where, device, samples, MIN_LIVE_INTERVAL))
    cpu_raw: dict[str, dict[float, dict[str, float]]] = {}
    for s in prom.samples(f"{columns.CPU_SERIES}{{{host_m.lstrip(',')}}}", start, end):
        mode = columns.CPU_MODE_OF.get(s.labels.get("mode", ""))
        if mode:
            by_time = cpu_raw.setdefault(_key(s.labels)[0], {})
            for t, v in zip(s.times, s.values):
                by_time.setdefault(t, {})[mode] = by_time.get(t, {}).get(mode, 0.0) + v
    cpus = [cpu_from_counters(where, sorted(by_time.items())) for where, by_time in cpu_raw.items()]
    return timelines, cpus, by_instance


def live_runs(prom: Prometheus, start: float, end: float, step: float, host_m: str) -> list[RunWindow]:
    """Every run in the window from the exporter's run windows (start and end as published), plus one still running."""
    selector = host_m.lstrip(",")
    runs: dict[tuple, RunWindow] = {}
    # one step past the window: the end gauge of a run that ended in the last step is published after the window's
    # last grid instant (the run would otherwise come only from fio_run_running, without fio's own IOPS)
    starts = {_run_id(s.labels): s for s in prom.range(f"fio_run_start_timestamp_seconds{{{selector}}}", start, end + step, step)}
    ends = {_run_id(s.labels): s for s in prom.range(f"fio_run_end_timestamp_seconds{{{selector}}}", start, end + step, step)}
    iops = {_run_id(s.labels): s for s in prom.range(f"sum by (host, instance, target, device, hostname, jobname) "
                                                     f"(fio_iops{{ddir!=\"sync\"{host_m}}})", start, end + step, step)}
    for run_id, s in starts.items():
        end_series = ends.get(run_id)
        for t, a in zip(s.times, s.values):
            b = _value_at(end_series, t)
            if b is None or b < a or not (start <= b and a <= end) or a <= 0:
                continue
            if (run_id, a) not in runs:
                measured = _value_at(iops.get(run_id) or next((x for k, x in iops.items() if k[3:] == run_id[3:]), None),
                                     b + step, after=True)
                runs[(run_id, a)] = RunWindow(run_id[4], a, b, device=run_id[3], host=run_id[0], target=run_id[2], iops=measured)
    # fio_run_running, scrape by scrape: the run as the exporter saw it. The start gauge is fio's end minus its
    # runtime, which leaves file layout out and, for numjobs under group_reporting, counts every clone's runtime;
    # a span with no published window is a run still in progress
    for s in prom.samples(f"fio_run_running{{{selector}}}", start, end):
        run_id = _run_id(s.labels)
        on = [t for t, v in zip(s.times, s.values) if v == 1]
        gap = statistics.median([b - a for a, b in zip(s.times, s.times[1:])] or [step])
        for a, b in spans(on, gap):  # from the first to the last scrape that saw it running
            matched = [r for (rid, _), r in runs.items() if rid == run_id and r.start <= b + gap and a <= r.end + gap]
            for r in matched:  # the published start/end where they agree with what the scrapes saw, else the scrapes
                r.start = r.start if a - gap < r.start <= a else a
                r.end = r.end if b <= r.end <= b + gap else b
            if not matched:
                runs[(run_id, a)] = RunWindow(run_id[4], a, min(b, end), device=run_id[3], host=run_id[0], target=run_id[2])
    return sorted(runs.values(), key=lambda r: r.start)


def _run_id(labels: dict[str, str]) -> tuple[str, str, str, str, str]:
    return (labels.get("host") or labels.get("instance", ""), labels.get("hostname", ""), labels.get("target", ""),
            labels.get("device", ""), labels.get("jobname", "fio"))


def _value_at(series: Series | None, t: float, after: bool = False) -> float | None:
    if series is None:
        return None
    for ts, v in zip(series.times, series.values):
        if ts >= t if after else abs(ts - t) < 1e-6:
            return v
    return series.values[-1] if after and series.values else None


def device_names(prom: Prometheus, at: float, host_m: str) -> dict[str, str]:
    """Human names (LVM, md) from fioscope_disk_info, where the exporter publishes it."""
    query = f'last_over_time(fioscope_disk_info{{{host_m.lstrip(",")}}}[1h])'
    return {s.labels["device"]: s.labels.get("name", "") for s in prom.instant(query, at)
            if s.labels.get("device") and s.labels.get("name") not in ("", s.labels.get("device"))}


def declared_limits(prom: Prometheus, start: float, end: float, device_m: str) -> dict[str, str]:
    """The target's declared IOPS limit, as fio jobs published it (fio_promised_iops)."""
    q = f'max by (device) (max_over_time(fio_promised_iops{{{device_m.lstrip(",")}}}[{int(end - start) + 1}s]))'
    return {s.labels.get("device", ""): f"{s.values[0]:.0f} IOPS" for s in prom.instant(q, end) if s.values[0] > 0}


def fio_figures(prom: Prometheus, start: float, end: float, host_m: str) -> FioFigures:
    """The window's fio figures the verdicts judge (``FioFigures``)."""
    window = f"{int(end - start) + 1}s"
    sync_jobs = {s.labels.get("jobname", "") for s in prom.instant(
        f'max by (jobname) (max_over_time(fio_run_latency_seconds{{ddir="sync"{host_m}}}[{window}]))', end)}
    sla = {s.labels.get("jobname", ""): s.values[0] for s in prom.instant(
        f'max by (jobname) (max_over_time(fio_sla_latency_seconds{{{host_m.lstrip(",")}}}[{window}]))', end) if s.values[0] > 0}
    worst = {s.labels.get("jobname", ""): s.values[0] for s in prom.instant(
        f'max by (jobname) (max_over_time(fio_run_latency_seconds{{stage="clat",quantile="0.99",ddir!="sync"{host_m}}}[{window}]))', end)}
    q = (f'max by (jobname, target, device) (max_over_time(fio_run_latency_seconds{{ddir="sync",stage="lat",quantile="0.99"{host_m}}}'
         f'[{window}]))')
    fsync = [(s.labels, s.values[0]) for s in sorted(prom.instant(q, end), key=lambda s: sorted(s.labels.items()))]
    return FioFigures(sla, worst, sync_jobs, fsync)


def fio_sla_verdicts(fio: FioFigures) -> list[Verdict]:
    """fio's own p99 completion latency against the SLA its target declared; only where one is declared, and never for
    a job that measures fdatasync (etcd-wal): that one is judged by etcd's line."""
    worst = fio.worst
    return [Verdict("fio-sla", worst[job] <= line, f"fio {job}: p99 {humanize.latency(worst[job])} against the SLA its target declares "
                    f"({humanize.latency(line)}): " + ("met" if worst[job] <= line else "NOT met"), {"jobname": job})
            for job, line in sorted(fio.sla.items()) if job in worst and job not in fio.sync_jobs]


def fsync_verdicts(fio: FioFigures, fired: list[Firing], thresholds: Thresholds) -> list[Verdict]:
    """Every fdatasync measurement in the window (etcd-wal) with etcd's tiered verdict; the fsync alerts that fired."""
    slow = [f for f in fired if f.alertname in FSYNC_ALERTS]
    out = []
    for labels, p99 in fio.fsync:
        where = " on ".join(x for x in (labels.get("target", ""), labels.get("device", "")) if x)
        jobname = labels.get("jobname", "")
        out.append(etcd_fsync(p99, thresholds, f"etcd fsync: {jobname}{' (' + where + ')' if where else ''}", {"jobname": jobname}))
    if slow:
        out.append(Verdict("etcd-fsync", False, f"etcd fsync: FAIL (fdatasync too slow for etcd from {fmt_time(slow[0].start)} UTC)",
                           {"level": "fail", "alerts": slow[0].alertname}))
    if not out:
        out.append(Verdict("etcd-fsync", None, "etcd fsync: no data (no fdatasync measurement in the window)", {"level": "no data"}))
    return out
