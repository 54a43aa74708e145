"""The judge: what the disks did over a window and the verdicts of fioscope's rules, as a plain value (``Diagnosis``).

Every verdict comes from the project's alert rules (alerts/alerts.rules.yaml): on a live stack from the ``ALERTS`` series
Prometheus wrote while evaluating them (``live``), offline from the same rules evaluated over backfilled iostat data
(``offline``); each builds one ``DiagnosisInput`` and ``diagnose`` judges it. What is cut into idle and load phases is the
data at its own resolution (``timeline``, ``phases``). Nothing here draws or writes a page: ``diagnosis_page`` renders
a ``Diagnosis`` (report.html, its charts, report.json), and this module imports no rendering code (tests/test_diagnosis_judge.py).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from fioscope_mixin import names as n
from fioscope_mixin.settings import duration
from fioscope_mixin.units import format_duration

from ..thresholds import Thresholds
from ..verdicts import Verdict, etcd_fsync
from . import ReportError, humanize, wording
from .cause_episodes import CauseFindings
from .phases import (
    IDLE_DEVICE_UTIL,
    IDLE_IOPS,
    Phase,
    RunWindow,
    borrowed_loads,
    evidence,
    idle_is_clean,
    is_idle_device,
    median_in,
    phases,
    throttled_spans,
)
from .prometheus_api import where_device as _key
from .timeline import MAX_POINTS, CpuTimeline, Timeline, too_long
from .wording import fmt_time

# which alert says what: fioscope_mixin.names (one list of the throttling alerts for the rules, dashboards and reports)
THROTTLE_ALERTS, SLA_ALERTS, FSYNC_ALERTS, IOWAIT_ALERTS = n.THROTTLING_ALERTS, n.SLA_ALERTS, n.FSYNC_ALERTS, n.IOWAIT_ALERTS


@dataclass
class Firing:
    alertname: str
    labels: dict[str, str]
    start: float
    end: float




@dataclass
class FioFigures:
    """What the window's fio results say, as the Prometheus serving them has it: per job the SLA its target declared, its
    worst p99 completion latency, whether it measured fdatasync; every fdatasync p99 (labels, seconds)."""

    sla: dict[str, float] = field(default_factory=dict)
    worst: dict[str, float] = field(default_factory=dict)
    sync_jobs: set[str] = field(default_factory=set)
    fsync: list[tuple[dict[str, str], float]] = field(default_factory=list)


@dataclass(kw_only=True)
class DiagnosisInput:
    """Everything a diagnosis judges, built once, by name, live (``live.live_input``) or offline
    (``offline.pipeline.offline_input``): the pure ``diagnose`` turns it into a ``Diagnosis``. Every setting arrives here:
    ``thresholds`` (the command's, as the rules were generated with them) and ``summaries`` (each alert's summary, from
    those rules)."""

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
    summaries: dict[str, str]  # alert name -> its summary in plain words, as the rules say it (the page shows these)
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


@dataclass
class DeviceDiagnosis:
    """One device's judgement: shown as idle in one line, or charted with its headline, phases and throttled spans."""

    host: str
    device: str
    label: str  # the device as the page names it: kernel name, (human name), on host
    timeline: Timeline  # every sample (the pages draw it downsampled: ``timeline.limit``)
    idle: bool = False
    has_data: bool = True
    headline: Verdict | None = None  # a charted device's first verdict (also report.json's "verdict" and "ok")
    load_failed: str | None = None
    phases: list[Phase] = field(default_factory=list)  # the phase table's rows and report.json's phases
    throttled: list[tuple[float, float]] = field(default_factory=list)  # when its throttling alert held
    shaded: list[RunWindow] = field(default_factory=list)  # the runs shaded on its charts
    cause: dict | None = None  # the dominant cause of its slow episodes (report.json)
    cause_episodes: list[dict] = field(default_factory=list)


@dataclass
class Diagnosis:
    """What ``diagnose`` decided: words and figures, no HTML, no chart. ``verdicts`` in the page's order."""

    title: str
    start: float
    end: float
    summary: list[str]
    verdicts: list[Verdict]
    devices: list[DeviceDiagnosis]  # in report.json's order (idle and charted)
    runs: list[RunWindow]
    cpus: list[CpuTimeline]
    fired: list[Firing]  # in time order
    summaries: dict[str, str]  # alert name -> what it says


def diagnose(inp: DiagnosisInput) -> Diagnosis:
    """The diagnosis over [start, end]: what the disks did and the rules' verdicts (no query, no file: only ``inp``)."""
    start, end, host, devices, fired, names, limits = inp.start, inp.end, inp.host, inp.devices, inp.fired, inp.names, inp.declared
    timelines, runs = inp.timelines, inp.runs
    if devices:
        timelines = [t for t in timelines if t.device in devices]
    if not timelines:
        where = " on host " + host if host else ""
        raise ReportError(f"no disk data in the window {fmt_time(start)} – {fmt_time(end)} UTC{where}"
                          f"{' for device ' + ','.join(devices) if devices else ''}"
                          " (is node_exporter scraped and are the fioscope rules loaded?)")
    interval = statistics.median([t.interval for t in timelines if t.interval] or [0.0])
    summary = list(inp.lead)
    verdicts: list[Verdict] = []
    summary.append(f"Window {fmt_time(start)} – {fmt_time(end)} UTC ({format_duration(round(end - start))}); "
                          f"{inp.resolution or 'every sample'} at its own interval ({interval:g} s); {len(timelines)} device(s)."
                          + (f" Long series are downsampled to at most {MAX_POINTS} points, keeping each bucket's minimum"
                             " and maximum (peaks survive)." if any(too_long(t) for t in timelines) else ""))
    if not names:
        summary.append("Devices are shown by their kernel names (no volume names, such as LVM or md, were found).")
    idle: list[str] = []
    judged: list[DeviceDiagnosis] = []
    for timeline in sorted(timelines, key=lambda t: (t.host, t.device)):
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
            judged.append(DeviceDiagnosis(timeline.host, device, label, timeline, idle=True, has_data=has_data,
                                          cause=inp.causes.dominant(*key), cause_episodes=[e.json() for e in inp.causes.of(*key)]))
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
        ok, shown = evidence(timeline, device_phases, held)
        why = inp.causes.verdict(*key, held)  # the cause of its slow episodes, in plain words
        cause = inp.causes.dominant(*key)
        # "has been throttled since" where it held to the window's end (a step's slack) with no phase after it (an idle one
        # after the load it held in: it was throttled, and is no longer)
        after = held and any(p.start >= held[-1][1] - 1 for p in device_phases)
        text = wording.headline(device, ok, f"{shown}; {why}" if why else shown, throttled=held, until=math.inf if after else end - slack,
                                reads=median_in(timeline, "r/s", held), writes=median_in(timeline, "w/s", held), cause=cause,
                                slow_since=next((e.start for e in inp.causes.of(*key) if cause and e.cause == cause["key"]), None))
        if failed:
            ok, text = False, wording.inconclusive(device, failed[0], len(failed) - 1) + (f"; {why}" if why else "")
            mark_failed(device_phases, [(a, b, reason) for a, b, reason, dev in inp.failed_loads if not dev or dev == device])
        first = Verdict("headline", ok, text, {"device": device, "host": timeline.host})
        extra: list[Verdict] = [first]
        if throttle:
            ceiling = statistics.median([v for t, v in timeline.iops() if any(a <= t <= b for a, b in held)] or [0.0])
            extra.append(Verdict("throttled", False, wording.throttled_row(label, ceiling, windows, limits.get(device, "")),
                                 {"device": device, "ceiling-iops": f"{ceiling:.1f}", "alerts": alerts}))
        else:
            extra.append(Verdict("throttled", True, wording.not_throttled_row(label, limits.get(device, "")), {"device": device}))
        above_sla = [f for f in mine if f.alertname in SLA_ALERTS]
        extra.append(await_verdict(label, device, timeline, above_sla, inp.thresholds.sla_seconds(device),
                                   duration(inp.thresholds.settings, "durations", "latency_sla"), Measured.of(start, end, device_phases)))
        verdicts += extra
        judged.append(DeviceDiagnosis(timeline.host, device, label, timeline, headline=first, load_failed=failed[0] if failed else None,
                                      phases=compared, throttled=held, shaded=borrowed or [r for r in runs if r.loads(device)],
                                      cause=cause, cause_episodes=[e.json() for e in inp.causes.of(*key)]))
    if idle:
        verdicts.append(Verdict("idle-devices", None, (f"Idle, not charted (no fio run, util below {IDLE_DEVICE_UTIL:g} % "
                                                              f"and under {IDLE_IOPS:g} IO/s): ") + ", ".join(idle), {"count": len(idle)}))
    verdicts += fio_sla_verdicts(inp.fio)
    verdicts += fsync_verdicts(inp.fio, fired, inp.thresholds)
    verdicts.append(iowait_verdict(inp.cpus, fired, inp.thresholds, Measured.of(start, end)))
    names_fired = sorted({f.alertname for f in fired})
    said = list(dict.fromkeys(inp.summaries.get(name) or name for name in names_fired))
    verdicts.append(Verdict("alerts", not fired, f"alerts that fired: {'; '.join(said) if said else 'none'}"
                                   + (" (the rules by name: Details, at the end)" if fired else ""),
                                   {"count": len(fired), "alerts": ", ".join(names_fired)}))
    if runs:
        summary.append(f"{len(runs)} fio run(s) in the window, each shaded on the charts of the device it loaded: "
                              + "; ".join(f"{r.label} on {r.device or 'an unknown device'} {fmt_time(r.start)[11:]}–{fmt_time(r.end)[11:]}"
                                          for r in runs[:10]) + ("; ..." if len(runs) > 10 else ""))
    return Diagnosis(inp.title, start, end, [*summary, *inp.notes], verdicts, judged, runs, inp.cpus,
                     sorted(fired, key=lambda f: f.start), inp.summaries)


def rule_summaries(groups: list[dict]) -> dict[str, str]:
    """Each alert's summary in plain words ("Disk throttled while fio loads it") as ``groups`` (alerts.rules.yaml, generated
    from the command's settings) say it: what the page shows in place of the rule's name."""
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


def await_verdict(label: str, device: str, timeline: Timeline, above: list[Firing], sla: float,
                  hold: float = 0.0, measured: Measured | None = None) -> Verdict:
    """The latency SLA rule's verdict (``sla``: the device's in seconds, from the command's settings), with the await the
    samples show; no samples is "no data", never a pass. ``hold``: the rule's ``for:``; where ``measured`` is shorter
    the rule could not fire, and a check it did not fail is "not decided"."""
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

