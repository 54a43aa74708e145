"""Diagnosis report: what the disks did over a window, and the verdicts of fioscope's rules.

Every verdict comes from the project's alert rules (alerts/alerts.rules.yaml): on a live
stack from the ``ALERTS`` series Prometheus wrote while evaluating them, offline from the same
rules evaluated over backfilled iostat data (see ``iostat``). This module only reads what the
rules decided and the ``fioscope:*`` recording rules (the iostat columns) to draw and quote.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from . import ReportError
from .charts import Chart, Line, Window, time_chart
from .html import Report, Section, Table, Verdict
from .performance import fmt_eng
from .prometheus import Prometheus, Series, step_for

log = logging.getLogger("fioscope.report")

THROTTLE_ALERTS = ("FioscopeDiskThrottledUnderFioLoad", "FioscopeDiskThrottled")
SLA_ALERTS = ("FioscopeDiskLatencyAboveSla",)
FSYNC_ALERTS = ("FioscopeFsyncTooSlowForEtcd", "FioscopeFsyncHistogramTooSlowForEtcd", "FioscopeEtcdWalFsyncSlow")
IOWAIT_ALERTS = ("FioscopeHighIowaitIdleCpu",)

# chart -> (title, unit, percent?, [(label, recording rule)])
CPU_RULES = [("user", "fioscope:cpu_user_ratio"), ("system", "fioscope:cpu_system_ratio"), ("iowait", "fioscope:cpu_iowait_ratio"),
             ("steal", "fioscope:cpu_steal_ratio"), ("idle", "fioscope:cpu_idle_ratio")]
DISK_CHARTS = [
    ("util", "%util and merges", "", True, [("%util", "fioscope:disk_util_ratio"), ("%rrqm", "fioscope:disk_read_merges_ratio"),
                                            ("%wrqm", "fioscope:disk_write_merges_ratio")]),
    ("iops", "IOPS", "IO/s", False, [("r/s", "fioscope:disk_read_iops"), ("w/s", "fioscope:disk_write_iops"),
                                     ("d/s", "fioscope:disk_discard_iops"), ("f/s", "fioscope:disk_flush_iops"),
                                     ("rrqm/s", "fioscope:disk_read_merges_per_second"),
                                     ("wrqm/s", "fioscope:disk_write_merges_per_second")]),
    ("await", "await", "s", False, [("r_await", "fioscope:disk_read_await_seconds"), ("w_await", "fioscope:disk_write_await_seconds"),
                                    ("d_await", "fioscope:disk_discard_await_seconds"), ("f_await", "fioscope:disk_flush_await_seconds")]),
    ("reqsz", "request size", "B", False, [("rareq-sz", "fioscope:disk_read_request_size_bytes"),
                                           ("wareq-sz", "fioscope:disk_write_request_size_bytes")]),
    ("queue", "queue size (aqu-sz)", "", False, [("aqu-sz", "fioscope:disk_queue_size")]),
    ("throughput", "throughput", "B/s", False, [("rB/s", "fioscope:disk_read_bytes_per_second"),
                                                ("wB/s", "fioscope:disk_write_bytes_per_second")]),
]


@dataclass
class Firing:
    alertname: str
    labels: dict[str, str]
    start: float
    end: float


def spans(times: list[float], step: float) -> list[tuple[float, float]]:
    """Runs of consecutive sample times (a gap of more than 1.5 steps ends a run)."""
    out: list[tuple[float, float]] = []
    for t in times:
        if out and t - out[-1][1] <= 1.5 * step:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


def firings_from_alerts(prom: Prometheus, start: float, end: float, step: float, matchers: str) -> list[Firing]:
    """What the live Prometheus's rule evaluation recorded: the ALERTS series."""
    result = []
    for s in prom.range(f'ALERTS{{alertstate="firing"{matchers}}}', start, end, step):
        for a, b in spans(s.times, step):
            result.append(Firing(s.labels.get("alertname", ""), s.labels, a, b))
    return result


def fmt_time(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _key(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("host") or labels.get("instance", ""), labels.get("device", "")


def _matchers(host: str | None, devices: list[str] | None, by_instance: bool = False) -> tuple[str, str]:
    """Label matchers (with a leading comma) for host-level and device-level series. Without the
    ``host`` label (a stack older than the fleet topology) the host is the instance's address."""
    host_m = (f",instance=~`{re.escape(host)}(:[0-9]+)?`" if by_instance else f",host={json.dumps(host)}") if host else ""
    device_m = host_m + (f",device=~`{'|'.join(re.escape(d) for d in devices)}`" if devices else "")
    return host_m, device_m


def _values_in(series: Series | None, windows: Iterable[tuple[float, float]]) -> list[float]:
    if series is None:
        return []
    return [v for t, v in zip(series.times, series.values) if any(a <= t <= b for a, b in windows)]


def sla_seconds(device: str) -> float | None:
    """The await SLA the rules were generated with (alerts/config.yaml, through fioscope.settings)."""
    from ..settings import SettingsError, load_settings

    try:
        thresholds = load_settings()["thresholds"]
        return float((thresholds.get("disk_latency_sla_per_device") or {}).get(device, thresholds["disk_latency_sla_seconds"]))
    except (SettingsError, KeyError, TypeError, ValueError):
        return None


def diagnosis_report(prom: Prometheus, start: float, end: float, host: str | None, devices: list[str] | None,
                     firings: Callable[[float], list[Firing]] | None = None, source: str = "",
                     declared: dict[str, str] | None = None, min_step: float = 15.0, step: float | None = None) -> Report:
    """The report over [start, end]. ``firings(step)`` gives the alerts the rules fired (default: ALERTS).
    ``step``: one point per step (offline: the grid the rules were evaluated on), else from the window's length."""
    step = step or step_for(start, end, min_step)
    host_m, device_m = _matchers(host, devices)
    by_rule: dict[str, dict[tuple[str, str], Series]] = {}

    def fetch(rule: str, matchers: str) -> dict[tuple[str, str], Series]:
        if rule not in by_rule:
            by_rule[rule] = {_key(s.labels): s for s in prom.range(f"{rule}{{{matchers.lstrip(',')}}}", start, end, step)}
        return by_rule[rule]

    disks = fetch("fioscope:disk_util_ratio", device_m)
    if not disks and host:
        host_m, device_m = _matchers(host, devices, by_instance=True)
        by_rule.clear()
        disks = fetch("fioscope:disk_util_ratio", device_m)
    if not disks:
        where = " on host " + host if host else ""
        raise ReportError(f"no disk data in the window {fmt_time(start)} – {fmt_time(end)} UTC{where}"
                          f"{' for device ' + ','.join(devices) if devices else ''}"
                          " (is node_exporter scraped and are the fioscope rules loaded?)")
    fired = firings(step) if firings else firings_from_alerts(prom, start, end, step, host_m)
    runs = fio_windows(prom, start, end, step, host_m)
    names = device_names(prom, end, host_m)
    limits = declared if declared is not None else declared_limits(prom, start, end, device_m)
    report = Report("diagnosis", "Disk diagnosis" + (f" — {source}" if source else ""))
    report.summary.append(f"Window {fmt_time(start)} – {fmt_time(end)} UTC ({fmt_eng(end - start, 's')}); one point per {step:g} s"
                          + (" (downsampled: the window is long)" if step > min_step else "") + f"; {len(disks)} device(s).")
    if not names:
        report.summary.append("Device names: fioscope_disk_info not found, kernel names only.")
    iops = fetch("fioscope:disk_iops", device_m)
    awaits = fetch("fioscope:disk_await_seconds", device_m)
    for key in sorted(disks):
        _, device = key
        label = device + (f" ({names[device]})" if names.get(device) else "") + (f" on {key[0]}" if key[0] else "")
        throttle = [f for f in fired if f.alertname in THROTTLE_ALERTS and _key(f.labels) == key]
        windows = [(f.start, f.end) for f in throttle]
        if throttle:
            ceiling = statistics.median(_values_in(iops.get(key), windows) or [0.0])
            when = ", ".join(f"{fmt_time(a)}–{fmt_time(b)[11:]}" for a, b in sorted(set(windows))[:4])
            alerts = ", ".join(sorted({f.alertname for f in throttle}))
            text = (f"{label}: THROTTLED — IOPS flat at a ceiling of {ceiling:.0f}/s ({when} UTC; {alerts})"
                    f"; declared limit: {limits.get(device) or 'none declared'}")
            report.verdicts.append(Verdict("throttled", False, text, {"device": device, "ceiling-iops": f"{ceiling:.1f}"}))
        else:
            report.verdicts.append(Verdict("throttled", True, f"{label}: not throttled (no throttling signature in the window)"
                                           + (f"; declared limit: {limits[device]}" if limits.get(device) else ""), {"device": device}))
        sla = sla_seconds(device)
        above = [f for f in fired if f.alertname in SLA_ALERTS and _key(f.labels) == key]
        await_series = awaits.get(key)
        samples = sorted(v for v in (await_series.values if await_series else []) if not math.isnan(v))
        worst = samples[min(len(samples) - 1, int(0.99 * len(samples)))] if samples else None
        figures = f"await p99 {fmt_eng(worst, 's')}" if worst is not None else "no await samples"
        sla_text = fmt_eng(sla, "s") if sla else "(threshold unknown)"
        verdict = (f"NOT met: await above {sla_text} from {fmt_time(above[0].start)} UTC ({above[0].alertname})" if above
                   else f"met: no sustained await above {sla_text}")
        report.verdicts.append(Verdict("sla", not above, f"{label}: latency SLA {verdict}; {figures} over the window",
                                       {"device": device}))
    report.verdicts += fio_sla_verdicts(prom, start, end, host_m)
    report.verdicts.append(fsync_verdict(prom, fired, start, end, host_m))
    iowait = [f for f in fired if f.alertname in IOWAIT_ALERTS]
    report.verdicts.append(Verdict("iowait", not iowait, f"iowait episodes: {len(iowait)}" + "".join(
        f"; {fmt_time(f.start)}–{fmt_time(f.end)[11:]} on {f.labels.get('host') or f.labels.get('instance', '')}" for f in iowait[:5])))
    names_fired = sorted({f.alertname for f in fired})
    report.verdicts.append(Verdict("alerts", not fired, f"alerts that fired: {', '.join(names_fired) if names_fired else 'none'}",
                                   {"count": len(fired)}))
    if fired:
        rows = [[f.alertname, f.labels.get("severity", ""), ", ".join(f"{k}={v}" for k, v in sorted(f.labels.items())
                                                                  if k in ("host", "instance", "device", "jobname", "target")),
                 fmt_time(f.start), fmt_time(f.end)] for f in sorted(fired, key=lambda f: f.start)]
        report.sections.append(Section("Alerts that fired", tables=[Table(["alert", "severity", "where", "from (UTC)", "to (UTC)"], rows)]))
    shaded = [Window(label, a, b) for label, a, b in runs]
    if runs:
        report.summary.append(f"{len(runs)} fio run(s) in the window, shaded on every chart: "
                              + "; ".join(f"{label} {fmt_time(a)[11:]}–{fmt_time(b)[11:]}" for label, a, b in runs[:10])
                              + ("; ..." if len(runs) > 10 else ""))
    for key in sorted(disks):
        report.sections.append(device_section(key, disks[key].labels.get("instance", ""), names.get(key[1], ""), fetch, device_m, shaded))
    return report


def device_section(key: tuple[str, str], instance: str, name: str, fetch, device_m: str, shaded: list[Window]) -> Section:
    where, device = key
    slug = f"{where}-{device}"  # html.write_report turns it into a safe file name, distinct for sd-a and sd_a
    charts: list[Chart] = []
    # the CPU rules aggregate by (instance, job): no host label, matched on the disk's instance
    cpu = [Line(label, *_xy({(s.labels.get("instance", ""), ""): s for s in fetch(rule, "").values()}, (instance, "")))
           for label, rule in CPU_RULES]
    charts.append(time_chart(f"{slug}-cpu", f"avg-cpu ({where})", cpu, "", shaded, percent=True))
    for chart_id, title, unit, percent, rules in DISK_CHARTS:
        lines = [Line(label, *_xy(fetch(rule, device_m), key)) for label, rule in rules]
        charts.append(time_chart(f"{slug}-{chart_id}", f"{device} {title}", lines, unit, shaded, percent=percent))
    title = f"{device}" + (f" ({name})" if name else "") + (f" on {where}" if where else "")
    return Section(title, charts=charts)


def _xy(series_by_key: dict[tuple[str, str], Series], key: tuple[str, str]) -> tuple[list[float], list[float]]:
    s = series_by_key.get(key)
    return (s.times, s.values) if s else ([], [])


def fio_windows(prom: Prometheus, start: float, end: float, step: float, host_m: str) -> list[tuple[str, float, float]]:
    out = []
    for s in prom.range(f'fio_run_running{{{host_m.lstrip(",")}}} == 1', start, end, step):
        label = s.labels.get("jobname", "fio") + (f" ({s.labels['target']})" if s.labels.get("target") else "")
        out += [(label, a, b) for a, b in spans(s.times, step)]
    return sorted(out, key=lambda r: r[1])


def device_names(prom: Prometheus, at: float, host_m: str) -> dict[str, str]:
    """Human names (LVM, md) from fioscope_disk_info, where the exporter publishes it."""
    query = f'last_over_time(fioscope_disk_info{{{host_m.lstrip(",")}}}[1h])'
    return {s.labels["device"]: s.labels.get("name", "") for s in prom.instant(query, at)
            if s.labels.get("device") and s.labels.get("name") not in ("", s.labels.get("device"))}


def declared_limits(prom: Prometheus, start: float, end: float, device_m: str) -> dict[str, str]:
    """The target's declared IOPS limit, as fio jobs published it (fio_promised_iops)."""
    q = f'max by (device) (max_over_time(fio_promised_iops{{{device_m.lstrip(",")}}}[{int(end - start) + 1}s]))'
    return {s.labels.get("device", ""): f"{s.values[0]:.0f} IOPS" for s in prom.instant(q, end) if s.values[0] > 0}


def fio_sla_verdicts(prom: Prometheus, start: float, end: float, host_m: str) -> list[Verdict]:
    """fio's own p99 completion latency in the window against the target's declared SLA."""
    window = f"{int(end - start) + 1}s"
    sla = {s.labels.get("jobname", ""): s.values[0] for s in prom.instant(
        f'max by (jobname) (max_over_time(fio_sla_latency_seconds{{{host_m.lstrip(",")}}}[{window}]))', end) if s.values[0] > 0}
    worst = {s.labels.get("jobname", ""): s.values[0] for s in prom.instant(
        f'max by (jobname) (max_over_time(fio_run_latency_seconds{{stage="clat",quantile="0.99",ddir!="sync"{host_m}}}[{window}]))', end)}
    return [Verdict("fio-sla", worst[job] <= line, f"fio {job}: p99 {fmt_eng(worst[job], 's')} against its SLA {fmt_eng(line, 's')}: "
                    + ("met" if worst[job] <= line else "NOT met"), {"jobname": job}) for job, line in sorted(sla.items()) if job in worst]


def fsync_verdict(prom: Prometheus, fired: list[Firing], start: float, end: float, host_m: str) -> Verdict:
    slow = [f for f in fired if f.alertname in FSYNC_ALERTS]
    if slow:
        return Verdict("etcd-fsync", False, f"etcd fsync: FAIL ({slow[0].alertname} from {fmt_time(slow[0].start)} UTC)")
    q = f'max(max_over_time(fio_run_latency_seconds{{ddir="sync",stage="lat",quantile="0.99"{host_m}}}[{int(end - start) + 1}s]))'
    measured = prom.instant(q, end)
    if not measured:
        return Verdict("etcd-fsync", None, "etcd fsync: no fdatasync measurement in the window")
    return Verdict("etcd-fsync", True, f"etcd fsync: pass (fdatasync p99 at most {fmt_eng(measured[0].values[0], 's')})")
