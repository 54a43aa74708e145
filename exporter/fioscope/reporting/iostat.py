"""Offline diagnosis from ``iostat -x -t -o JSON`` files (+ optional fio result files).

Design: the verdicts must come from the project's own rules, not from a second heuristic
written in Python. So the iostat samples become what the rules read and Prometheus evaluates
them:

1. Each iostat interval is turned back into the node_exporter counters it was computed from
   (``r/s`` x interval -> reads completed, ``r_await`` x ``r/s`` -> time reading, ``aqu-sz`` -> weighted
   time in flight, ``%util`` -> time busy, avg-cpu -> CPU seconds per mode: fioscope_mixin.columns), with
   ``job="node"``, ``instance="iostat:<nodename>"`` and ``host=<nodename>``; a rate is
   constant within an interval, so an interval longer than ``MAX_SAMPLE_GAP`` gets
   interpolated counter samples at each evaluation instant in it and half a rate window
   before (the rules' ``rate(...[1m])`` always see two). fio result files add
   ``fio_run_running`` (1 while the run lasted) and the fdatasync p99
   (``fio_run_latency_seconds``) the fsync alert reads.
   Hostile input is bounded while loading (``load_iostat``, ``check_bounds``): file size,
   devices, time span, stretches between gaps; a gap in time is left empty, never filled;
   a value that is not a rate leaves its device's sample out, counted per reason; a large
   capture has consecutive reports merged (the counters end exactly where they would have).
2. The series are written as OpenMetrics, as they are produced, and backfilled into a
   temporary TSDB with ``promtool tsdb create-blocks-from openmetrics`` (one block for the
   whole capture: promtool reads its input once per block); a temporary Prometheus
   (loopback, free port) serves it.
3. The recording rules of alerts/recording.rules.yaml are evaluated by that Prometheus as
   range queries of their ``expr`` on the evaluation grid (the stack's evaluation interval;
   a multiple of it for long captures, see ``evaluation_grid``) over the stretches that
   have data, and their output is backfilled the same way, one dependency level at a time (a rule that
   reads another rule's output needs that output in the TSDB first; Prometheus restarts in
   between to load the new blocks). ``promtool tsdb create-blocks-from rules`` would do the
   same but stamps samples off the grid, so rules of different levels would not line up.
4. Every alert of alerts/alerts.rules.yaml is evaluated as a range query of its own ``expr``
   at the evaluation interval; an alert *fired* where its condition held for its ``for:``
   duration — the pending/firing state machine of Prometheus' rule manager.
5. ``diagnosis.diagnose`` then judges what that Prometheus gives exactly as it judges a live one's.

Timestamps: ``S_TIME_FORMAT=ISO`` iostat output carries its UTC offset; the locale format
(``11/22/26 20:26:41``) does not and is read as UTC (the report says so).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fioscope_mixin import columns
from fioscope_mixin.columns import CPU_MODES
from fioscope_mixin.prometheus import rule_groups
from fioscope_mixin.settings import SettingsError
from fioscope_mixin.units import UnitError, parse_duration

from ..thresholds import Thresholds, shipped
from . import ReportError
from .cause import cause_findings
from .diagnosis import DiagnosisInput, Firing, cause_settings, device_names, diagnose, fio_figures, spans
from .html import Report
from .phases import RunWindow
from .prometheus import Prometheus
from .results import read_runs
from .timeline import CpuTimeline, from_iostat_samples

log = logging.getLogger("fioscope.report")

MAX_SAMPLE_GAP = 20.0  # a longer interval gets interpolated counter samples (rate windows of 1m see >= 2)
RATE_WINDOW = 60.0  # the rules' rate(...[1m])
MIN_GRID_STEP = 15.0  # the stack's evaluation interval (alerts/config.yaml); coarser for long captures
_LOCALE_FORMATS = ("%m/%d/%y %H:%M:%S", "%m/%d/%Y %H:%M:%S", "%m/%d/%y %I:%M:%S %p", "%m/%d/%Y %I:%M:%S %p")

# node_exporter counter <- (iostat column, scale): the counter grows by column / scale per second (fioscope_mixin.columns)
DISK_COUNTERS = {c.series: (c.column, c.scale) for c in columns.DISK if not c.per}
# await (ms) x completions/s: time spent by requests per second; counter <- (await column, its completions' column)
DISK_TIME_COUNTERS = {c.series: (c.column, columns.BY_COUNTER[c.per].column) for c in columns.DISK if c.per}
# sysstat < 12 names (no discard/flush columns there: they stay 0)
COLUMN_ALIASES = {"avgqu-sz": "aqu-sz", "%util": "util"}


MAX_FILE_BYTES = 512 * 2**20  # a day at 1 s of 8 devices is ~300 MiB of iostat JSON
MAX_DEVICES = 64  # (host, device) pairs in one report; --device picks some
MAX_SPAN = 31 * 86400.0  # first to last sample
MAX_DEVICE_SAMPLES = 60_000  # kept (sample x device) rows; beyond, consecutive samples are merged (exact sums)
GAP_FACTOR, GAP_MIN = 10.0, 300.0  # an interval this much longer than the one before is a gap, not a long interval
MAX_UTIL = 110.0  # %util: sysstat caps it at 100; older kernels overshoot a little
MAX_RATE = 1e12  # no disk completes, merges or moves this much per second (kB, IO, ms)
REQUIRED = ("r/s", "w/s", "r_await", "w_await", "aqu-sz", "util")
USED = sorted({c for c, _ in DISK_COUNTERS.values()} | {c for pair in DISK_TIME_COUNTERS.values() for c in pair})


@dataclass
class IostatSample:
    timestamp: float
    cpu: dict[str, float]  # empty: no valid avg-cpu in this sample
    disks: dict[str, dict[str, float]]
    interval: float = 0.0  # seconds the rates cover, ending at timestamp (0: up to the previous sample)


@dataclass
class IostatCapture:
    path: str
    host: str
    samples: list[IostatSample] = field(default_factory=list)
    assumed_utc: bool = False
    skipped: Counter = field(default_factory=Counter)  # reason -> count of values or samples left out
    gaps: int = 0
    merged: int = 1  # consecutive samples merged into one (a large capture)


def _parse_time(raw: str, path: str) -> tuple[float, bool]:
    with contextlib.suppress(ValueError):
        parsed = dt.datetime.fromisoformat(raw)
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp(), parsed.tzinfo is None
    for fmt in _LOCALE_FORMATS:
        with contextlib.suppress(ValueError):
            return dt.datetime.strptime(raw, fmt).replace(tzinfo=dt.UTC).timestamp(), True
    raise ReportError(f"--iostat {path}: timestamp {raw!r} not understood (run iostat with -t; S_TIME_FORMAT=ISO is best)")


def _read(path: str) -> str:
    """The file, at most MAX_FILE_BYTES (a FIFO or /dev/zero included: read no further than the bound)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(64)
            if head.strip() and not head.lstrip().startswith("{"):
                raise ReportError(f"--iostat {path}: not JSON (it does not start with '{{')")
            data = head + f.read(MAX_FILE_BYTES + 1 - len(head))
    except OSError as exc:
        raise ReportError(f"--iostat {path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ReportError(f"--iostat {path}: larger than {MAX_FILE_BYTES // 2**20} MiB "
                          "(split the capture, or name the devices: iostat -x DEV...)")
    return data


def invalid(column: str, value: object) -> str | None:
    """Why an iostat value cannot be used, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{column} not a number"
    if not math.isfinite(value):
        return f"{column} NaN or infinite"
    if value < 0:
        return f"{column} negative"
    if value > (MAX_UTIL if column == "util" else MAX_RATE):
        return f"{column} above {MAX_UTIL:g} %" if column == "util" else f"{column} absurdly large"
    return None


def _disk_row(disk: dict, skipped: Counter) -> dict[str, float] | None:
    if "avgqu-sz" in disk or "%util" in disk:
        disk = {COLUMN_ALIASES.get(str(k), str(k)): v for k, v in disk.items()}
    row = {c: disk[c] for c in USED if c in disk}
    values = row.values()
    try:  # the common case at once: every value a number in range (NaN compares false)
        if all(c in row for c in REQUIRED) and all(0.0 <= v <= MAX_RATE for v in values) and row["util"] <= MAX_UTIL \
                and not any(isinstance(v, bool) for v in values):
            return {c: float(v) for c, v in row.items()}
    except TypeError:
        pass
    for column in (*REQUIRED, *row):
        reason = invalid(column, row.get(column))
        if reason:
            skipped[reason] += 1
            return None
    return {c: float(v) for c, v in row.items()}


def _cpu_row(cpu: object, skipped: Counter) -> dict[str, float]:
    if not isinstance(cpu, dict):
        return {}
    for mode in CPU_MODES:
        if mode in cpu:
            reason = invalid(f"%{mode}", cpu[mode]) or (f"%{mode} above 100 %" if float(cpu[mode]) > 100.5 else None)
            if reason:
                skipped[reason] += 1
                return {}
    return {m: float(cpu.get(m, 0.0)) for m in CPU_MODES}


class _Merger:
    """Turns iostat reports, in file order, into kept samples: out-of-order ones skipped, gaps marked,
    ``k`` consecutive reports merged into one (rates weighted by time, awaits by completions: the
    counters the rules read grow exactly as they would have)."""

    def __init__(self, capture: IostatCapture, k: int):
        self.capture, self.k = capture, k
        self.last_t: float | None = None
        self.last_dt = 0.0
        self.pending: list[tuple[float, float, dict, dict]] = []  # (t, dt, cpu, disks) not merged yet
        self.first = True  # the first report of a host: averages since boot, dropped

    def add(self, t: float, cpu: dict[str, float], disks: dict[str, dict[str, float]]) -> None:
        cap = self.capture
        if self.last_t is not None and t <= self.last_t:
            cap.skipped["sample not later than the one before"] += 1
            return
        dt_ = 0.0 if self.last_t is None else t - self.last_t
        if self.last_dt and dt_ > max(GAP_FACTOR * self.last_dt, self.last_dt + GAP_MIN):
            cap.gaps += 1
            self.flush()
            dt_ = self.last_dt  # after a gap the report covers one usual interval
        elif dt_:
            self.last_dt = dt_
        samples = self.capture.samples
        if dt_ and len(samples) == 1 and not samples[0].interval:
            samples[0].interval = dt_  # the first kept report covers as long as the one after it
        self.last_t = t
        self.pending.append((t, dt_, cpu, disks))
        if len(self.pending) >= self.k or not dt_:  # the first report stays alone: its length is known only later
            self.flush()

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        if not pending:
            return
        total = sum(p[1] for p in pending)
        if len(pending) == 1 or total <= 0:
            t, dt_, cpu, disks = pending[-1]
            self.capture.samples.append(IostatSample(t, cpu, disks, dt_))
            return
        cpu = {m: sum(p[2][m] * p[1] for p in pending) / total for m in CPU_MODES} if all(p[2] for p in pending) else {}
        merged_disks: dict[str, dict[str, float]] = {}
        for name in {d for p in pending for d in p[3]}:
            rows: list[tuple[float, dict[str, float]]] = [(p[1], p[3][name]) for p in pending if name in p[3]]
            if len(rows) < len(pending):
                continue  # the device missed a report: left out of this merged one (a gap for it)
            row = {c: sum(r[c] * w for w, r in rows) / total for c in USED if all(c in r for _, r in rows)}
            for await_col, rate_col in DISK_TIME_COUNTERS.values():
                done = sum(r.get(rate_col, 0.0) * w for w, r in rows)
                if await_col in row:
                    row[await_col] = sum(r.get(await_col, 0.0) * r.get(rate_col, 0.0) * w for w, r in rows) / done if done else 0.0
            merged_disks[name] = row
        self.capture.samples.append(IostatSample(pending[-1][0], cpu, merged_disks, total))


def load_iostat(path: str, devices: list[str] | None = None) -> list[IostatCapture]:
    """One capture per host in the file; the first report (averages since boot) is dropped.

    Bounded: the file's size, the number of devices, the time from the first sample to the last;
    values that are not usable rates (NaN, inf, negative, absurd) skip their device's sample, counted
    per reason; a capture larger than MAX_DEVICE_SAMPLES rows has consecutive reports merged."""
    data = _read(path)
    # merge k reports into one where the capture is large (counted before parsing: one pass, bounded memory)
    k = max(1, math.ceil(data.count('"disk_device"') / MAX_DEVICE_SAMPLES))
    captures: list[IostatCapture] = []
    wanted = set(devices) if devices else None
    state: dict[str, _Merger | None] = {"merger": None}
    assumed = [False]

    def hook(obj: dict) -> object:
        # called for every object, innermost first and in file order: a statistics entry (it has a
        # timestamp) is folded into the current host's merger at once; the host object closes it
        if "disk_device" in obj:
            return obj
        if "timestamp" in obj and ("disk" in obj or "avg-cpu" in obj):
            merger = state["merger"]
            if merger is None:
                merger = state["merger"] = _Merger(IostatCapture(path, ""), k)
            if merger.first:
                merger.first = False
                return None
            ts, assume = _parse_time(str(obj["timestamp"]), path)
            assumed[0] |= assume
            entries: list = obj["disk"] if isinstance(obj.get("disk"), list) else []
            if entries and isinstance(entries[0], dict) and "r_await" not in entries[0]:
                raise ReportError(f"--iostat {path}: no extended statistics: run iostat with -x")
            disks = {}
            for d in entries:
                if isinstance(d, dict) and d.get("disk_device") and (wanted is None or str(d["disk_device"]) in wanted):
                    row = _disk_row(d, merger.capture.skipped)
                    if row is not None:
                        disks[str(d["disk_device"])] = row
            merger.add(ts, _cpu_row(obj.get("avg-cpu"), merger.capture.skipped), disks)
            return None
        if "statistics" in obj and isinstance(obj.get("statistics"), list):
            merger = state["merger"] or _Merger(IostatCapture(path, ""), k)
            state["merger"] = None
            if any(isinstance(x, dict) for x in obj["statistics"]):
                raise ReportError(f"--iostat {path}: samples without timestamps: run iostat with -t")
            merger.flush()
            merger.capture.host = str(obj.get("nodename", "")) or "unknown"
            merger.capture.assumed_utc = assumed[0]
            if merger.capture.samples or merger.capture.skipped:
                captures.append(merger.capture)
            return None
        return obj

    try:
        doc = json.loads(data, object_hook=hook)
    except ValueError as exc:
        hint = "truncated (iostat stopped before it finished?)" if data.lstrip().startswith("{") else "not JSON"
        raise ReportError(f"--iostat {path}: {hint}: {exc}") from None
    del data
    hosts = doc.get("sysstat", {}).get("hosts") if isinstance(doc, dict) and isinstance(doc.get("sysstat"), dict) else None
    if not isinstance(hosts, list):
        raise ReportError(f"--iostat {path}: not `iostat -o JSON` output (no sysstat.hosts)")
    for capture in captures:
        capture.merged = k
        if capture.skipped:
            log.warning("--iostat %s: host %s: left out %s", path, capture.host, skipped_text(capture.skipped))
    captures = [c for c in captures if c.samples]
    if not captures:
        raise ReportError(f"--iostat {path}: no samples after the first report (give iostat an interval and a count >= 2)")
    return captures


def skipped_text(skipped: Counter) -> str:
    return ", ".join(f"{n} x {reason}" for reason, n in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])))


def check_bounds(captures: list[IostatCapture]) -> None:
    """One line for what makes a report too large to build within bounds: devices, time span."""
    pairs = {(c.host, d) for c in captures for s in c.samples for d in s.disks}
    if len(pairs) > MAX_DEVICES:
        raise ReportError(f"--iostat {', '.join(sorted({c.path for c in captures}))}: {len(pairs)} devices; "
                          f"at most {MAX_DEVICES} in one report (choose with --device)")
    first = min(captures, key=lambda c: c.samples[0].timestamp)
    last = max(captures, key=lambda c: c.samples[-1].timestamp)
    a, b = first.samples[0].timestamp, last.samples[-1].timestamp
    if b - a > MAX_SPAN:
        raise ReportError(f"--iostat {first.path}: the samples span {(b - a) / 86400:.0f} days ({_iso(a)} to {_iso(b)}, in {last.path}); "
                          f"at most {MAX_SPAN / 86400:.0f} days in one report (a wrong timestamp? split the capture)")
    stretches = len(coverage(captures))
    if stretches > MAX_SPANS:
        raise ReportError(f"--iostat {first.path}: {stretches} separate stretches of samples (gaps in time between them); "
                          f"at most {MAX_SPANS} in one report (split the capture)")


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _steps(prev: float, now: float, grid: Grid) -> list[float]:
    """Times at which to write a counter sample for the interval (prev, now]: its end, and where it is
    long, at each evaluation instant in it and half a rate window before (so every ``rate(...[1m])``
    the rules evaluate sees two samples): the points written are bounded by the grid, not the gap."""
    if now - prev <= MAX_SAMPLE_GAP:
        return [now]
    half = min(RATE_WINDOW / 2, grid.step / 2)
    first = math.floor((prev - grid.start) / grid.step) + 1
    out = {now}
    g = grid.start + first * grid.step
    while g < now:
        out.update(x for x in (g - half, g) if prev < x < now)
        g += grid.step
    return sorted(out)


@dataclass
class Grid:
    """The instants the rules are evaluated at: ``start + i * step``."""

    start: float
    step: float


def counter_points(capture: IostatCapture, grid: Grid) -> Iterator[tuple[str, str, list[tuple[float, float]]]]:
    """(metric name, label text, [(t, counter value)]) rebuilt from the per-interval rates, one metric at a time.

    A sample covers ``interval`` seconds before its timestamp. Where that does not start at the previous
    sample of its series: after a gap the counter restarts flat (nothing is made up for the gap); after a
    report left out for a bad value (less than a rate window) the next report's rate covers both."""
    base = {"job": "node", "instance": f"iostat:{capture.host}", "host": capture.host}
    samples = capture.samples
    first_interval = next((s.interval for s in samples if s.interval > 0), 10.0)
    spans = [(s.timestamp - (s.interval or first_interval), s.timestamp) for s in samples]
    steps = [_steps(a, b, grid) for a, b in spans]

    def series(rates: Iterable[tuple[int, float]]) -> list[tuple[float, float]]:
        points: list[tuple[float, float]] = []
        value, end = 0.0, None
        for i, rate in rates:
            a, b = spans[i]
            ts = steps[i]
            if end is not None and end + 1e-6 < a <= end + RATE_WINDOW:
                a, ts = end, _steps(end, b, grid)  # a report left out (a bad value): the next one's rate stands in for it
            elif end is None or a > end + 1e-6:
                points.append((a, value))
            share = (b - a) / len(ts)
            for t in ts:
                value += rate * share
                points.append((t, value))
            end = b
        return points

    devices = sorted({d for s in samples for d in s.disks})
    for name, (col, scale) in DISK_COUNTERS.items():
        for device in devices:
            yield name, _labels(**base, device=device), series(
                (i, s.disks[device].get(col, 0.0) / scale) for i, s in enumerate(samples) if device in s.disks)
    for name, (await_col, rate_col) in DISK_TIME_COUNTERS.items():
        scale = columns.BY_COLUMN[await_col].scale
        for device in devices:
            yield name, _labels(**base, device=device), series(
                (i, s.disks[device].get(await_col, 0.0) / scale * s.disks[device].get(rate_col, 0.0))
                for i, s in enumerate(samples) if device in s.disks)
    for mode in CPU_MODES:
        yield columns.CPU_SERIES, _labels(**base, cpu="all", mode=mode), series(
            (i, s.cpu[mode] / 100) for i, s in enumerate(samples) if s.cpu)


def counter_series(capture: IostatCapture, grid: Grid | None = None) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """metric name -> label text -> [(t, counter value)] (``counter_points`` as one mapping)."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for name, labels, points in counter_points(capture, grid or Grid(capture.samples[0].timestamp, MIN_GRID_STEP)):
        if points:
            out.setdefault(name, {})[labels] = points
    return out


@dataclass
class FioRun:
    jobname: str
    target: str
    device: str
    start: float
    end: float
    fsync_p99: float | None
    limits: dict
    clat_p99: dict[str, float] = field(default_factory=dict)  # ddir -> seconds
    sla_seconds: float = 0.0
    iops: float | None = None  # fio's own, read + write + trim
    asked: str = ""  # rate_iops, where the job paced itself
    profile: str = ""
    failed: str = ""  # the runner's failure note, or fio's job error

    def window(self, host: str = "") -> RunWindow:
        return RunWindow(self.jobname, self.start, self.end, self.device, host, self.profile, self.target, self.iops, self.asked,
                         self.failed)


def load_fio_runs(directory: str | None) -> list[FioRun]:
    """When the fio runs of ``--results`` happened (the report's end stamp minus the longest job's wall clock),
    read through the exporter's parser as the performance report reads them; a bad file is skipped, named."""
    if not directory:
        return []
    runs = []
    for run in read_runs(directory)[0]:
        note = run.annotation
        for job in run.jobs:
            clat: dict[str, float] = {}
            for ddir in ("read", "write", "trim"):
                p99 = job.percentile(ddir, "clat") if ddir in job.directions and job.directions[ddir].total_ios else None
                if p99 is not None:
                    clat[ddir] = p99
            runs.append(FioRun(job.jobname, note.target, note.device, run.start_timestamp, run.end_timestamp,
                               job.percentile("sync", "lat"), note.limits.as_dict() if note.limits else {},
                               clat, note.sla_latency_seconds, job.total_iops, job.options.get("rate_iops", ""),
                               note.profile or Path(run.source).stem,
                               note.failed or (f"fio error {job.error} in {job.jobname}" if job.error else "")))
    return runs


def fio_series(runs: list[FioRun], host: str, start: float, end: float,
               times: list[float] | None = None) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """``times``: where to write the series (default every 5 s from start to end; offline: where iostat has data)."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    times = times if times is not None else [start + i * 5.0 for i in range(int((end - start) // 5.0) + 1)]
    for run in runs:
        base = {"job": "fioscope", "instance": f"fioscope:{host}", "host": host, "jobname": run.jobname,
                "target": run.target, "device": run.device}
        # two runs of one profile share their labels: one series, 1 wherever either ran (not two interleaved series)
        running = out.setdefault("fio_run_running", {}).setdefault(_labels(**base), [(t, 0.0) for t in times])
        running[:] = [(t, 1.0 if v or run.start <= t <= run.end else 0.0) for t, v in running]
        after = [t for t in times if t >= run.end]
        for ddir, p99 in run.clat_p99.items():
            clat_series = _labels(**base, ddir=ddir, stage="clat", quantile="0.99")
            out.setdefault("fio_run_latency_seconds", {})[clat_series] = [(t, p99) for t in after]
        if run.sla_seconds:
            out.setdefault("fio_sla_latency_seconds", {})[_labels(**base)] = [(t, run.sla_seconds) for t in after]
        if run.fsync_p99 is not None:
            out.setdefault("fio_run_latency_seconds", {})[_labels(**base, ddir="sync", stage="lat", quantile="0.99")] = \
                [(t, run.fsync_p99) for t in times if t >= run.end]
    up = out.setdefault("up", {})
    for job in ("node", "fioscope"):
        up[_labels(job=job, instance=f"{job}:{host}", host=host)] = [(t, 1.0) for t in times]
    return out


def _number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


Family = dict[str, dict[str, list[tuple[float, float]]]]  # metric name -> label text -> [(t, value)]


def merged(families: Iterable[Family]) -> Family:
    out: Family = {}
    for family in families:
        for name, series in family.items():
            out.setdefault(name, {}).update(series)
    return out


def write_openmetrics(path: Path, families: Iterable[Family], counters: Iterable[tuple[str, str, list[tuple[float, float]]]] = ()) -> None:
    """Families as they come (a metric name in one family only: OpenMetrics keeps a metric together),
    then ``counter_points`` series (grouped by name already); written as produced, never all in memory."""
    with path.open("w") as f:
        for family in families:
            for name in sorted(family):
                for labels, points in family[name].items():
                    f.writelines(_lines(f"{name}{labels} ", sorted(points)))
        for name, labels, points in counters:
            f.writelines(_lines(f"{name}{labels} ", points))
        f.write("# EOF\n")


def _lines(prefix: str, points: Iterable[tuple[float, float]]) -> Iterator[str]:
    for t, v in points:
        text = repr(v)
        yield f"{prefix}{text if text[-1] not in 'nf' else _number(v)} {t:.3f}\n"  # nan, inf: OpenMetrics spells them NaN, +Inf


def backfill(source: Path, blocks: Path, what: str) -> None:
    # one block for the whole capture (at most MAX_SPAN): promtool reads its input once per block
    _run(["promtool", "tsdb", "create-blocks-from", "openmetrics", f"--max-block-duration={int(MAX_SPAN // 3600) + 24}h",
          str(source), str(blocks)], what)


def _run(cmd: list[str], what: str) -> None:
    try:
        # a session of its own: a Ctrl-C at the terminal is fioscope's to handle (capture finishes its report)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, start_new_session=True)
    except FileNotFoundError:
        raise ReportError(f"offline diagnosis needs {cmd[0]} (Debian: apt-get install prometheus)") from None
    if proc.returncode != 0:
        raise ReportError(f"{what} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['?']}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TemporaryPrometheus:
    """A Prometheus on loopback over a TSDB directory, restartable to pick up new blocks."""

    def __init__(self, data: Path, workdir: Path):
        self.data = data
        self.config = workdir / "prometheus.yml"
        self.config.write_text("global: {}\n")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.grid = Grid(0.0, MIN_GRID_STEP)  # set by backfilled()

    def start(self) -> None:
        cmd = [shutil.which("prometheus") or "prometheus", f"--config.file={self.config}", f"--storage.tsdb.path={self.data}",
               f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=100y", "--log.level=error",
               # a backfilled series has no staleness marker: a recorded series that stopped (a slow episode's end)
               # would read as holding for the default 5 minutes; two grid steps reach the last sample of any series
               f"--query.lookback-delta={math.ceil(2 * max(self.grid.step, MAX_SAMPLE_GAP))}s"]
        try:
            # a session of its own: a Ctrl-C at the terminal does not kill it under a report being finished; stop() does
            self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        except FileNotFoundError:
            raise ReportError("offline diagnosis needs prometheus (Debian: apt-get install prometheus)") from None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                stderr = self.process.stderr.read() if self.process.stderr else ""
                raise ReportError(f"temporary Prometheus exited: {stderr.strip()[-300:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.2)
        raise ReportError("temporary Prometheus did not become ready in 60 s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            except BaseException:  # interrupted while waiting: never left running
                process.kill()
                process.wait()
                raise


MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def _may_match(expr: str, name: str, labels: dict) -> bool:
    """Whether a selector of ``name`` in ``expr`` may select a rule's output with these static labels."""
    for m in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])(\{{[^}}]*\}})?", expr):
        ok = True
        for key, op, value in MATCHER.findall(m.group(1) or ""):
            if key in labels:
                hit = re.fullmatch(value, str(labels[key])) is not None if "~" in op else str(labels[key]) == value
                ok = ok and hit == (op in ("=", "=~"))
        if ok:
            return True
    return False


def rule_levels(groups: list[dict]) -> list[list[dict]]:
    """Recording rules ordered so that each level reads only raw series and lower levels. A rule reading its own record
    name (the causes ``unless`` a higher cause; a two-dimension ceiling ``unless`` a one-dimension one) reads what the rules
    before it in its group recorded in the same evaluation: it comes after those its selector may match."""
    rules = [r for g in groups for r in g.get("rules", []) if "record" in r]
    by_name: dict[str, list[int]] = {}
    for i, r in enumerate(rules):
        by_name.setdefault(r["record"], []).append(i)
    level: dict[int, int] = {}

    def depth(i: int, seen: frozenset = frozenset()) -> int:
        if i in level:
            return level[i]
        expr, record = rules[i]["expr"], rules[i]["record"]
        deps = [j for name, ids in by_name.items() if re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr)
                for j in ids if name != record or (j < i and _may_match(expr, name, rules[j].get("labels") or {}))]
        level[i] = 1 + max((depth(j, seen | {i}) for j in deps if j not in seen), default=-1)
        return level[i]

    for i in range(len(rules)):
        depth(i)
    out: list[list[dict]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for i, r in enumerate(rules):
        out[level[i]].append(r)
    return out


def evaluate_recording(prom: Prometheus, rule: dict, start: float, end: float,
                       step: float) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """A recording rule's output over the window, as the rule manager would have recorded it."""
    out: dict[str, list[tuple[float, float]]] = {}
    for series in prom.range(rule["expr"], start, end, step):
        labels = {k: v for k, v in series.labels.items() if k != "__name__"} | {k: str(v) for k, v in (rule.get("labels") or {}).items()}
        out[_labels(**labels)] = list(zip(series.times, series.values))
    return {rule["record"]: out}


def _load_rules(name: str, thresholds: Thresholds) -> list[dict]:
    """The groups of alerts/<name> as the mixin generates them from the command's settings; every alert's ``for:`` checked up front."""
    try:
        groups = rule_groups(thresholds.settings)[f"alerts/{name}"]
    except SettingsError as exc:
        raise ReportError(f"cannot generate the rules: {exc}") from None
    for rule in (r for g in groups for r in g.get("rules", []) if "alert" in r):
        rule_hold(rule, f"alerts/{name}")
    return groups


def rule_hold(rule: dict, source: str = "the alert rules") -> float:
    """An alert's ``for:`` in seconds (the one duration parser: Prometheus's ``1h30m``, ``1d``); a mistyped one is an
    error naming the alert, never 0 s (the alert would count as fired at once)."""
    try:
        return parse_duration(rule.get("for", "0s"))
    except UnitError as exc:
        raise ReportError(f"{source}: alert {rule.get('alert')!r}: for: {exc}") from None


def evaluate_alerts(prom: Prometheus, groups: list[dict], start: float, end: float, step: float) -> list[Firing]:
    """Each alert's expr over the window; fired where it held for its ``for:`` duration."""
    fired = []
    for rule in (r for g in groups for r in g.get("rules", []) if "alert" in r):
        hold = rule_hold(rule)
        for series in prom.range(rule["expr"], start, end, step):
            labels = {**series.labels, **(rule.get("labels") or {}), "alertname": rule["alert"]}
            for a, b in spans(series.times, step):
                if b - a >= hold:
                    fired.append(Firing(rule["alert"], labels, a + hold, b))
    return fired


def coverage(captures: list[IostatCapture]) -> list[tuple[float, float]]:
    """The time the captures have data for, as (start, end) spans: gaps left out, a rate window of margin."""
    spans = []
    for c in captures:
        first_interval = next((s.interval for s in c.samples if s.interval > 0), 10.0)
        spans += [(s.timestamp - (s.interval or first_interval) - RATE_WINDOW, s.timestamp) for s in c.samples]
    merged: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1] + RATE_WINDOW:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def evaluation_grid(spans: list[tuple[float, float]], series: int, interval: float = MIN_GRID_STEP) -> Grid:
    """The stack's evaluation interval, coarser (a multiple of it) where the captures cover a long time or
    many devices: a recording rule's output stays within RULE_BUDGET samples (gaps cost nothing)."""
    covered = sum(b - a for a, b in spans)
    points = max(100, RULE_BUDGET // max(1, series))
    step = max(interval, math.ceil(covered / points / interval) * interval)
    return Grid(spans[0][0], step)


def on_grid(spans: list[tuple[float, float]], grid: Grid, step: float) -> Iterator[tuple[float, float]]:
    """Each span from its first grid instant, so every piece of the evaluation lines up."""
    for a, b in spans:
        yield grid.start + math.ceil((a - grid.start) / step) * step, b


def evaluate_recording_over(prom: Prometheus, rule: dict, spans: list[tuple[float, float]], grid: Grid) -> Family:
    """``evaluate_recording`` over each covered span (nothing is evaluated in a gap), one family."""
    out: dict[str, list[tuple[float, float]]] = {}
    for a, b in on_grid(spans, grid, grid.step):
        for labels, points in evaluate_recording(prom, rule, a, b, grid.step)[rule["record"]].items():
            out.setdefault(labels, []).extend(points)
    return {rule["record"]: out}


RULE_BUDGET = 80_000  # samples one recording rule may produce over the captures (all its series)
MAX_SPANS = 100  # separate stretches of data (a gap starts a new one)


@contextlib.contextmanager
def backfilled(captures: list[IostatCapture], runs: list[FioRun], work: Path, extra: Family | None = None,
               thresholds: Thresholds | None = None) -> Iterator[TemporaryPrometheus]:
    """A temporary Prometheus serving the captures as node_exporter counters, the fio runs, ``extra``
    series, and the recording rules' output on the evaluation grid (``server.grid``); ``thresholds``: the command's settings
    (default the shipped ones)."""
    thresholds = thresholds or shipped()
    check_bounds(captures)
    end = max(c.samples[-1].timestamp for c in captures)
    hosts = sorted({c.host for c in captures})
    devices = len({(c.host, d) for c in captures for s in c.samples for d in s.disks}) + len(hosts)
    spans = coverage(captures)
    grid = evaluation_grid(spans, devices, thresholds.evaluation_interval)
    recording = _load_rules("recording.rules.yaml", thresholds)
    work.mkdir(parents=True, exist_ok=True)
    data, om = work / "data", work / "series.om"
    fine = min(5.0, grid.step / 3)  # fio runs: when one starts and ends, finer than the grid
    times = [t for a, b in on_grid(spans, grid, fine) for t in _range(a, b, fine)]
    raw = merged([fio_series(runs, hosts[0], grid.start, end, times), *([extra] if extra else [])])
    write_openmetrics(om, [raw], (p for c in captures for p in counter_points(c, grid)))
    backfill(om, data, "backfilling the iostat samples")
    om.unlink()
    server = TemporaryPrometheus(data, work)
    server.grid = grid
    try:
        server.start()
        prom = Prometheus(server.url, flag="temporary Prometheus")
        for i, rules in enumerate(rule_levels(recording)):
            recorded = work / f"level{i}.om"
            write_openmetrics(recorded, (evaluate_recording_over(prom, rule, spans, grid) for rule in rules))
            blocks = work / f"blocks{i}"
            backfill(recorded, blocks, f"backfilling recording rules (level {i})")
            recorded.unlink()
            server.stop()
            for block in blocks.iterdir():
                block.rename(data / block.name)
            server.start()
        yield server
    finally:
        server.stop()


def _range(a: float, b: float, step: float) -> Iterator[float]:
    t = a
    while t <= b:
        yield t
        t += step


def offline_diagnosis(paths: list[str], results: str | None, devices: list[str] | None, thresholds: Thresholds | None = None,
                      title: str = "", lead: list[str] | None = None,
                      failed_loads: list[tuple[float, float, str, str]] | None = None) -> Report:
    """The diagnosis of iostat files (+ fio results): ``title`` and ``lead`` (summary lines first) where a caller has its
    own (``fioscope capture``), so the report is whole when it is made. ``failed_loads``: (start, end, reason, device)
    of loads that failed (capture's phases); a run within one counts as failed, and the device's verdict is inconclusive."""
    thresholds = thresholds or shipped()
    captures = [c for p in paths for c in load_iostat(p, devices)]
    check_bounds(captures)
    start = min(c.samples[0].timestamp for c in captures)
    end = max(c.samples[-1].timestamp for c in captures)
    runs = [r for r in load_fio_runs(results) if r.end >= start and r.start <= end]
    for run in runs:
        run.failed = run.failed or next((why for a, b, why, _ in failed_loads or [] if a - 1 <= run.start and run.end <= b + 1), "")
    hosts = sorted({c.host for c in captures})
    alerting = _load_rules("alerts.rules.yaml", thresholds)
    with tempfile.TemporaryDirectory(prefix="fioscope-report-") as tmp, \
            backfilled(captures, runs, Path(tmp), thresholds=thresholds) as server:
        prom = Prometheus(server.url, flag="temporary Prometheus")
        declared = {r.device: ", ".join(f"{k} {v}" for k, v in r.limits.items() if v) for r in runs if r.device and r.limits}
        source = ", ".join(paths) + (f" + fio results {results}" if results else "")
        timelines = [t for c in captures for t in from_iostat_samples(c.host, [(s.timestamp, s.disks) for s in c.samples])]
        cpus = [CpuTimeline(c.host, {m: [(s.timestamp, s.cpu.get(m, 0.0)) for s in c.samples] for m in CPU_MODES}) for c in captures]
        step = server.grid.step
        offline = (f"Offline: {sum(len(c.samples) for c in captures)} iostat samples from host(s) {', '.join(hosts)}; "
                   "verdicts by fioscope's alert rules evaluated over them in a temporary Prometheus.")
        inp = DiagnosisInput(start, end, step, timelines, cpus, [r.window(hosts[0]) for r in runs],
                             evaluate_alerts(prom, alerting, start, end, step), device_names(prom, end, ""), declared,
                             fio_figures(prom, start, end, ""), thresholds, None, devices, resolution="every iostat sample",
                             title=title or f"Disk diagnosis — offline from {source}", lead=[*(lead or []), offline],
                             notes=input_notes(captures), failed_loads=list(failed_loads or []),
                             causes=cause_findings(prom, start, end, step, "", "", *cause_settings(thresholds)))
    return diagnose(inp)


def input_notes(captures: list[IostatCapture]) -> list[str]:
    """What the report left out or changed of its input, said on the page (stderr said it once already)."""
    notes = []
    if any(c.assumed_utc for c in captures):
        notes.append("iostat timestamps carry no time zone: read as UTC.")
    for c in captures:
        if c.skipped:
            notes.append(f"Left out of {c.path} (host {c.host}), not usable: {skipped_text(c.skipped)}.")
        if c.gaps:
            notes.append(f"{c.path} (host {c.host}): {c.gaps} gap(s) in time (left empty, not filled).")
        if c.merged > 1:
            notes.append(f"{c.path}: a large capture; every {c.merged} consecutive iostat reports read as one.")
    return notes
