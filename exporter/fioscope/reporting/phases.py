"""Run windows, the idle and load phases they cut a device's timeline into, and the evidence under the headline.

The support engineer's method compares idle with load: a device's timeline is cut at the
windows of the fio runs that loaded it (each run exactly as it ran, from its start and end),
the gaps between them are idle phases, and each phase gets the method's figures side by side:
IOPS, MiB/s, await, util, aqu-sz. A sample stamped ``t`` covers ``(t - interval, t]``: it counts
for a load phase where at least half its interval lies inside the run (or half of a run shorter
than one interval lies inside it), and for an idle phase only where its interval touches no run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from fioscope_mixin.columns import CHARTS, DISK, Counter, charted, reported, tracked

from . import humanize
from .timeline import CpuTimeline, Timeline, ratio
from .wording import THROTTLED, cap, hhmmss, spans_text

# an idle phase is clean below these (background noise of a quiet system)
IDLE_IOPS = 50.0
IDLE_UTIL = 5.0
# a device no run loaded, no alert named, whose util stayed below this and whose IOPS below IDLE_IOPS is idle: one line,
# no charts (util alone is not enough: a host-cached virtual disk under a loop device did 1,009 IO/s at 2 % util)
IDLE_DEVICE_UTIL = 5.0


@dataclass
class RunWindow:
    """One fio job of one run, as it ran."""

    job: str  # fio's jobname (the profile's section)
    start: float
    end: float
    device: str = ""  # the device holding the target ("" unknown: shaded on every device)
    host: str = ""
    profile: str = ""
    target: str = ""
    iops: float | None = None  # what fio measured (read + write)
    asked: str = ""  # fio's rate_iops, where the job paced itself
    failed: str = ""  # why this run is not the load it was meant to be (fio failed, ran far shorter than its phase)

    @property
    def label(self) -> str:
        if self.failed:  # no figure for a run that failed: "2,034 IOPS" of a 28 ms run reads as a healthy disk
            return f"{self.job} (load failed)"
        rate = f"{humanize.count(self.iops)} IOPS" if self.iops is not None else ""
        if self.asked:
            rate += f" (asked {self.asked})"
        return f"{self.job} {rate}".strip()

    def loads(self, device: str) -> bool:
        return not self.device or self.device == device


@dataclass
class Phase:
    kind: str  # idle, load
    label: str
    start: float
    end: float
    stats: dict[str, float] = field(default_factory=dict)  # mean of each column; "peak-iops"; "samples"
    failed: str = ""  # a load phase whose load failed: why
    job: str = ""  # a load phase's fio job and the rate it asked for (rate_iops, "700,300"; "" unpaced)
    asked: str = ""

    @property
    def demand(self) -> float:
        """The IOPS the load asked for (read + write of rate_iops), 0 where it did not pace itself."""
        try:
            return sum(float(x) for x in self.asked.split(",") if x.strip())
        except ValueError:
            return 0.0


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


# per phase: the request sizes (kB per request over the phase: its kB over its requests, as iostat's rareq-sz is per
# interval) and the host's avg-cpu groups that tell waiting from working, as iostat's text names them
REQUEST_SIZES = {"rareq-sz": ("rkB/s", "r/s"), "wareq-sz": ("wkB/s", "w/s")}
CPU_STATS = {"%iowait": "iowait", "%steal": "steal", "%system": "system"}


def phase_stats(timeline: Timeline, keep, cpu: CpuTimeline | None = None) -> dict[str, float]:
    """Means of the columns over the samples ``keep(t)`` selects, the request sizes and the avg-cpu groups of CPU_STATS
    (``cpu``: the host's; NaN without), plus peak IOPS and the sample count."""
    stats: dict[str, float] = {}
    for column, points in timeline.series.items():
        stats[column] = _mean([v for t, v in points if keep(t)])
    for name, (kb, requests) in REQUEST_SIZES.items():
        stats[name] = ratio(stats.get(kb, float("nan")), stats.get(requests, float("nan")))
    for name, mode in CPU_STATS.items():
        stats[name] = _mean([v for t, v in (cpu.series.get(mode, []) if cpu else []) if keep(t)])
    iops = [v for t, v in timeline.iops() if keep(t)]
    stats["iops"] = _mean(iops)
    stats["peak-iops"] = max(iops) if iops else float("nan")
    stats["samples"] = float(len(iops))
    return stats


def phases(timeline: Timeline, runs: list[RunWindow], start: float, end: float, cpu: CpuTimeline | None = None) -> list[Phase]:
    """Idle and load phases of one device over [start, end], in time order; ``cpu``: its host's avg-cpu."""
    interval = timeline.interval or 1.0
    mine = sorted((r for r in runs if r.loads(timeline.device)), key=lambda r: r.start)
    out: list[Phase] = []
    cursor = start
    for run in mine:
        if run.start - cursor >= interval:
            out.append(Phase("idle", "idle", cursor, run.start))
        out.append(Phase("load", run.label, run.start, run.end, failed=run.failed, job=run.job, asked=run.asked))
        cursor = max(cursor, run.end)
    if end - cursor >= interval:
        out.append(Phase("idle", "idle", cursor, end))

    def touches_run(t: float) -> bool:
        return any(r.start < t and t - interval < r.end for r in mine)

    for i, phase in enumerate(out):
        if phase.kind == "load":
            # at least half the sample's interval inside the run, or half the run inside the sample (a 2 s run, 5 s samples)
            phase.stats = phase_stats(timeline, lambda t, p=phase: min(t, p.end) - max(t - interval, p.start)
                                      >= min(interval, p.end - p.start) / 2, cpu)
        else:
            phase.stats = phase_stats(timeline, lambda t, p=phase: p.start < t <= p.end + interval and not touches_run(t), cpu)
            phase.label = f"idle {sum(1 for q in out[:i + 1] if q.kind == 'idle')}"
    return [p for p in out if p.stats.get("samples")]


def borrowed_loads(timeline: Timeline, runs: list[RunWindow]) -> list[RunWindow]:
    """The loads a device with no fio run of its own lived through: the runs on other devices of its host (the disk under
    a loop device, LVM or md carries their I/O), each as a load of this device named by the device it ran on, so its idle
    and load phases compare as the loaded device's do. Empty where a run loaded it."""
    if any(r.loads(timeline.device) for r in runs):
        return []
    return [replace(r, device=timeline.device, job=f"{r.job} on {r.device}") for r in runs
            if not r.host or not timeline.host or r.host == timeline.host]


def idle_is_clean(phase: Phase) -> bool:
    return phase.stats["iops"] < IDLE_IOPS and phase.stats["util"] < IDLE_UTIL


def is_idle_device(timeline: Timeline, runs: list[RunWindow], named_by_alerts: bool) -> bool:
    if named_by_alerts or any(r.device == timeline.device for r in runs):
        return False
    util = [v for _, v in timeline.values("util")]
    iops = [v for _, v in timeline.iops()]
    return not util or (max(util) < IDLE_DEVICE_UTIL and max(iops, default=0.0) < IDLE_IOPS)


def throttled_spans(firing_windows: list[tuple[float, float]], device_phases: list[Phase],
                    slack: float = 0.0) -> list[tuple[float, float]]:
    """When the device was throttled: when the throttling alert held, within the load phase it held in (it holds a rate
    window, live its keep_firing_for too, past the run's end: cut at the phase's end); ``slack`` (one sample or
    evaluation step) lets a firing that starts just after a load's end count for that load. A firing outside fio's
    load stays as it is."""
    out = set()
    for a, b in firing_windows:
        loads = [p for p in device_phases if p.kind == "load" and p.start <= b and a <= p.end + slack]
        out |= {(min(max(a, p.start), p.end), min(b, p.end)) for p in loads} or {(a, b)}
    return sorted(out)


def evidence(timeline: Timeline, device_phases: list[Phase], throttled: list[tuple[float, float]]) -> tuple[bool | None, str]:
    """What the headline's sentence (``wording.headline``) stands on: (ok, text), each load in words and the idle periods;
    ok None where there is no data. ``throttled``: ``throttled_spans``."""
    if not any(timeline.series.values()):
        return None, "no data"
    idle = [p for p in device_phases if p.kind == "idle"]
    loads = [p for p in device_phases if p.kind == "load"]
    if idle:
        noisy = [p for p in idle if not idle_is_clean(p)]
        noise = "; ".join(f"{p.label}: {humanize.count(p.stats['iops'])} IO/s, util {p.stats['util']:.0f} %" for p in noisy[:3])
        idle_text = "idle periods were clean" if not noisy else f"idle periods were not quiet ({noise})"
    else:
        idle_text = "no idle period to compare with"
    # each load in words, in time order: what it asked and what the disk did (the cap where the throttling alert held)
    many = sum(1 for p in loads if _inside(p, throttled)) > 1  # then each load's clause says its own window
    clauses = [_load_clause(timeline, p, loads[0], throttled, many) for p in loads if not p.failed]
    if throttled:
        if not any(_inside(p, throttled) for p in loads):  # throttled outside fio's loads: the customer's own workload
            clauses.append(_cap_clause(timeline, throttled))
        return False, f"{THROTTLED.capitalize()} {spans_text(throttled)} UTC: " + "; ".join(clauses) + f"; {idle_text}"
    if clauses:
        return True, "; ".join(clauses) + f"; {idle_text}"
    iops = [v for _, v in timeline.iops()]
    util = [v for _, v in timeline.values("util")]
    return True, (f"No fio run on it; {humanize.count(_mean(iops))} IO/s and util {_mean(util):.0f} % on average "
                  f"(peak {humanize.count(max(iops, default=0))} IO/s)")


def _inside(phase: Phase, spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(a, b) for a, b in spans if phase.start <= a and b <= phase.end]


def median_in(timeline: Timeline, column: str, spans: list[tuple[float, float]]) -> float:
    return statistics.median([v for t, v in timeline.values(column) if any(a <= t <= b for a, b in spans)] or [0.0])


def _cap_clause(timeline: Timeline, spans: list[tuple[float, float]]) -> str:
    """What the throttled samples show: the IOPS they stayed at, the wait behind the cap, the cap per direction."""
    r, w = median_in(timeline, "r/s", spans), median_in(timeline, "w/s", spans)
    waits = " and ".join(f"{c} {humanize.latency(median_in(timeline, c, spans) / 1000)}" for c, rate in (("r_await", r), ("w_await", w))
                         if rate >= 1) or "no await"
    return f"it stayed at ~{humanize.approx(r + w)} IOPS with {waits} — a cap at {cap(r, w)}"


def _load_clause(timeline: Timeline, phase: Phase, first: Phase, throttled: list[tuple[float, float]], when: bool = False) -> str:
    """One load phase in words: what it asked, what the disk did (the cap where the throttling alert held in it)."""
    s = phase.stats
    asked = f"{phase.job or phase.label} asking {humanize.count(phase.demand)} IOPS" if phase.demand else (phase.job or phase.label)
    if phase.demand and first.demand and phase is not first and abs(phase.demand / first.demand - 1) > 0.05:
        asked += f" ({phase.demand / first.demand:.2g}× the first load's demand)"
    spans = _inside(phase, throttled)
    if spans:
        return f"{asked}: {_cap_clause(timeline, spans)}" + (f", {spans_text(spans)}" if when else "")
    iops, r, w = s["iops"], s["r/s"], s["w/s"]
    wait = (s["r_await"] * r + s["w_await"] * w) / (r + w) if r + w > 0 else float("nan")
    did = ("met it" if phase.demand and iops >= 0.9 * phase.demand
           else f"got {humanize.count(iops)} of them" if phase.demand else f"~{humanize.count(iops)} IOPS")
    return f"{asked}: {did}" + (f" at ~{humanize.count(iops)} IOPS" if did == "met it" else "") + f", await {humanize.latency(wait / 1000)}"


def table_only(table: tuple[Counter, ...] = DISK) -> tuple[str, ...]:
    """The columns the phase table shows that no chart draws (the merges): the column table's ``phase`` ones."""
    return tuple(c for c in tracked(table) if c not in reported(table))


# a phase's mean of a drawn column, by the unit the column table gives it
FIGURE: dict[str, Callable[[float], str]] = {"IO/s": humanize.count, "ms": lambda v: humanize.latency(v / 1000),
                                             "%": lambda v: f"{v:.0f} %", "requests": lambda v: f"{v:.1f}"}


def drawn(table: tuple[Counter, ...] = DISK) -> list[tuple[str, tuple[str, ...]]]:
    """The phase table's figures of the drawn columns, chart by chart (the page's order): (heading, the columns it sums).
    A throughput chart's columns (kB/s) read as one MiB/s figure, read + write; every other column is its own."""
    units = {c.column: c.unit for c in table}
    out: list[tuple[str, tuple[str, ...]]] = []
    for chart in CHARTS:
        columns = charted(chart, table)
        if columns and all(units[c] == "kB/s" for c in columns):
            out.append(("MiB/s", columns))
        else:
            out += [(c, (c,)) for c in columns]
    return out


def phase_columns(table: tuple[Counter, ...] = DISK) -> list[str]:
    """The phase table's header (the column table's: ``drawn``, then its undrawn ``phase`` columns), request sizes, CPU."""
    return ["phase", "from–to (UTC)", "IOPS (peak)", *(heading for heading, _ in drawn(table)), *table_only(table),
            *REQUEST_SIZES, *CPU_STATS]


PHASE_COLUMNS = phase_columns()


def _figure(value: float, text) -> str:
    return "–" if math.isnan(value) else text(value)


def phase_rows(device_phases: list[Phase], table: tuple[Counter, ...] = DISK) -> list[list[str]]:
    """One row per phase, the cells in ``phase_columns``' order."""
    units = {c.column: c.unit for c in table}
    figures = drawn(table)
    rows = []
    for p in device_phases:
        s = p.stats
        rows.append([p.label, f"{hhmmss(p.start)}–{hhmmss(p.end)}", f"{humanize.count(s['iops'])} ({humanize.count(s['peak-iops'])})",
                     *(f"{sum(s[c] for c in columns) / 1024:.1f}" if heading == "MiB/s" else FIGURE[units[columns[0]]](s[columns[0]])
                       for heading, columns in figures),
                     *(_figure(s.get(c, math.nan), humanize.count) for c in table_only(table)),
                     *(_figure(s[c], lambda v: f"{v:.1f} kB") for c in REQUEST_SIZES),
                     *(_figure(s[c], lambda v: f"{v:.1f} %") for c in CPU_STATS)])
    return rows
