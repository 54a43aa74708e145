"""The live diagnosis's input: what the stack's Prometheus recorded over a window, as one ``DiagnosisInput``.

node_exporter's raw counters per scrape (``live_timelines``), the exporter's run windows (``live_runs``), the ALERTS series
its rule evaluation wrote, the cause series the recording rules wrote, fio's figures. Nothing here judges
(``diagnosis.diagnose``) or renders (``diagnosis_page``).
"""

from __future__ import annotations

import json
import re
import statistics

from fioscope_mixin import columns
from fioscope_mixin.prometheus import rule_groups
from fioscope_mixin.settings import SettingsError
from fioscope_mixin.units import parse_duration

from ..thresholds import Thresholds
from .cause_episodes import cause_findings
from .diagnosis import DiagnosisInput, FioFigures, Firing, rule_summaries
from .phases import RunWindow
from .prometheus_api import Prometheus, Series, spans, step_for
from .prometheus_api import where_device as _key
from .timeline import TRACKED_COUNTERS, CpuTimeline, DiskCounters, Timeline, cpu_from_counters, from_counters


def firings_from_alerts(prom: Prometheus, start: float, end: float, step: float, matchers: str) -> list[Firing]:
    """What the live Prometheus's rule evaluation recorded: the ALERTS series."""
    result = []
    for s in prom.range(f'ALERTS{{alertstate="firing"{matchers}}}', start, end, step):
        for a, b in spans(s.times, step):
            result.append(Firing(s.labels.get("alertname", ""), s.labels, a, b))
    return result



def _matchers(host: str | None, devices: list[str] | None, by_instance: bool = False) -> tuple[str, str]:
    """Label matchers (with a leading comma) for host-level and device-level series. Without the
    ``host`` label (a stack older than the fleet topology) the host is the instance's address."""
    host_m = (f",instance=~`{re.escape(host)}(:[0-9]+)?`" if by_instance else f",host={json.dumps(host)}") if host else ""
    device_m = host_m + (f",device=~`{'|'.join(re.escape(d) for d in devices)}`" if devices else "")
    return host_m, device_m



def live_input(prom: Prometheus, start: float, end: float, host: str | None, devices: list[str] | None,
               thresholds: Thresholds, min_step: float = 15.0) -> DiagnosisInput:
    """The live stack's window: node_exporter's raw counters per scrape, the exporter's run windows, ALERTS."""
    step = step_for(start, end, min_step)
    host_m, device_m = _matchers(host, devices)
    timelines, cpus, by_instance = live_timelines(prom, start, end, host, devices)
    if by_instance:
        host_m, device_m = _matchers(host, devices, by_instance=True)
    return DiagnosisInput(start=start, end=end, step=step, timelines=timelines, cpus=cpus,
                          runs=live_runs(prom, start, end, step, host_m), fired=firings_from_alerts(prom, start, end, step, host_m),
                          names=device_names(prom, end, host_m), declared=declared_limits(prom, start, end, device_m),
                          fio=fio_figures(prom, start, end, host_m), thresholds=thresholds, summaries=alert_summaries(thresholds),
                          host=host, devices=devices,
                          resolution="one point per scrape, at least every 2 s (rates of node_exporter's counters between scrapes)",
                          causes=cause_findings(prom, start, end, step, host_m, device_m, *cause_settings(thresholds)))


def cause_settings(thresholds: Thresholds) -> tuple[str, float, float]:
    """The rules' ``thresholds.cause.demand_lookback`` (the load a device carried at its normal latency is averaged over
    it), ``durations.cause`` in seconds (how long a cause holds before its alert pages) and ``demand_tolerance``."""
    cause = thresholds.settings["thresholds"]["cause"]
    return (str(cause["demand_lookback"]), parse_duration(str(thresholds.settings["durations"]["cause"])),
            float(cause["demand_tolerance"]))



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



def alert_summaries(thresholds: Thresholds) -> dict[str, str]:
    """Each alert's summary as the rules generated from ``thresholds`` say it (the stack's were generated from the same
    settings); offline, the rules it evaluates give them (``offline.rules.generate_rules``)."""
    try:
        return rule_summaries(rule_groups(thresholds.settings)["alerts/alerts.rules.yaml"])
    except (SettingsError, KeyError):
        return {}
