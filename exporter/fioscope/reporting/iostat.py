"""Offline diagnosis from ``iostat -x -t -o JSON`` files (+ optional fio result files).

Design: the verdicts must come from the project's own rules, not from a second heuristic
written in Python. So the iostat samples become what the rules read and Prometheus evaluates
them:

1. Each iostat interval is turned back into the node_exporter counters it was computed from
   (``r/s`` x interval -> ``node_disk_reads_completed_total``, ``r_await`` x ``r/s`` ->
   ``node_disk_read_time_seconds_total``, ``aqu-sz`` -> ``..._io_time_weighted_seconds_total``,
   ``%util`` -> ``..._io_time_seconds_total``, avg-cpu -> ``node_cpu_seconds_total``), with
   ``job="node"``, ``instance="iostat:<nodename>"`` and ``host=<nodename>``; a rate is
   constant within an interval, so long intervals get interpolated counter samples every
   ``MAX_SAMPLE_GAP`` seconds and the rules' ``rate(...[1m])`` windows always see data. fio
   result files add ``fio_run_running`` (1 while the run lasted) and the fdatasync p99
   (``fio_run_latency_seconds``) the fsync alert reads.
2. The series are written as OpenMetrics and backfilled into a temporary TSDB with
   ``promtool tsdb create-blocks-from openmetrics``; a temporary Prometheus (loopback, free
   port) serves it.
3. The recording rules of alerts/recording.rules.yaml are evaluated by that Prometheus as
   range queries of their ``expr`` on the evaluation grid (the stack's evaluation interval)
   and their output is backfilled the same way, one dependency level at a time (a rule that
   reads another rule's output needs that output in the TSDB first; Prometheus restarts in
   between to load the new blocks). ``promtool tsdb create-blocks-from rules`` would do the
   same but stamps samples off the grid, so rules of different levels would not line up.
4. Every alert of alerts/alerts.rules.yaml is evaluated as a range query of its own ``expr``
   at the evaluation interval; an alert *fired* where its condition held for its ``for:``
   duration — the pending/firing state machine of Prometheus' rule manager.
5. ``diagnosis.diagnosis_report`` then reads that Prometheus exactly as it reads a live one.

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fioscope_mixin.prometheus import rule_groups
from fioscope_mixin.settings import SettingsError, load_settings
from fioscope_mixin.units import UnitError, parse_duration

from . import ReportError
from .diagnosis import Firing, diagnosis_report, spans
from .phases import RunWindow
from .prometheus import Prometheus
from .results import read_runs
from .timeline import CpuTimeline, from_iostat_samples

log = logging.getLogger("fioscope.report")

MAX_SAMPLE_GAP = 5.0
_LOCALE_FORMATS = ("%m/%d/%y %H:%M:%S", "%m/%d/%Y %H:%M:%S", "%m/%d/%y %I:%M:%S %p", "%m/%d/%Y %I:%M:%S %p")

# node_exporter counter <- (iostat column, factor): the counter grows by column x factor x seconds
DISK_COUNTERS: dict[str, list[tuple[str, float]]] = {
    "node_disk_reads_completed_total": [("r/s", 1)],
    "node_disk_writes_completed_total": [("w/s", 1)],
    "node_disk_discards_completed_total": [("d/s", 1)],
    "node_disk_flush_requests_total": [("f/s", 1)],
    "node_disk_read_bytes_total": [("rkB/s", 1024)],
    "node_disk_written_bytes_total": [("wkB/s", 1024)],
    "node_disk_discarded_sectors_total": [("dkB/s", 2)],
    "node_disk_reads_merged_total": [("rrqm/s", 1)],
    "node_disk_writes_merged_total": [("wrqm/s", 1)],
    "node_disk_io_time_seconds_total": [("util", 0.01)],
    "node_disk_io_time_weighted_seconds_total": [("aqu-sz", 1)],
}
# await (ms) x completions/s: time spent by requests per second
DISK_TIME_COUNTERS = {
    "node_disk_read_time_seconds_total": ("r_await", "r/s"),
    "node_disk_write_time_seconds_total": ("w_await", "w/s"),
    "node_disk_discard_time_seconds_total": ("d_await", "d/s"),
    "node_disk_flush_requests_time_seconds_total": ("f_await", "f/s"),
}
CPU_MODES = ("user", "nice", "system", "iowait", "steal", "idle")
# sysstat < 12 names (no discard/flush columns there: they stay 0)
COLUMN_ALIASES = {"avgqu-sz": "aqu-sz", "%util": "util"}


@dataclass
class IostatSample:
    timestamp: float
    cpu: dict[str, float]
    disks: dict[str, dict[str, float]]


@dataclass
class IostatCapture:
    path: str
    host: str
    samples: list[IostatSample] = field(default_factory=list)
    assumed_utc: bool = False


def _parse_time(raw: str, path: str) -> tuple[float, bool]:
    with contextlib.suppress(ValueError):
        parsed = dt.datetime.fromisoformat(raw)
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp(), parsed.tzinfo is None
    for fmt in _LOCALE_FORMATS:
        with contextlib.suppress(ValueError):
            return dt.datetime.strptime(raw, fmt).replace(tzinfo=dt.UTC).timestamp(), True
    raise ReportError(f"--iostat {path}: timestamp {raw!r} not understood (run iostat with -t; S_TIME_FORMAT=ISO is best)")


def load_iostat(path: str) -> list[IostatCapture]:
    """One capture per host in the file; the first report (averages since boot) is dropped."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise ReportError(f"--iostat {path}: cannot read: {exc.strerror}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        hint = "truncated (iostat stopped before it finished?)" if text.lstrip().startswith("{") else "not JSON"
        raise ReportError(f"--iostat {path}: {hint}: {exc}") from None
    hosts = doc.get("sysstat", {}).get("hosts") if isinstance(doc, dict) and isinstance(doc.get("sysstat"), dict) else None
    if not isinstance(hosts, list):
        raise ReportError(f"--iostat {path}: not `iostat -o JSON` output (no sysstat.hosts)")
    captures = []
    for host in hosts:
        capture = IostatCapture(path, str(host.get("nodename", "")) or "unknown")
        for stat in (host.get("statistics") or [])[1:]:
            if "timestamp" not in stat:
                raise ReportError(f"--iostat {path}: samples without timestamps: run iostat with -t")
            ts, assumed = _parse_time(str(stat["timestamp"]), path)
            capture.assumed_utc |= assumed
            disks = {str(d.get("disk_device")): {COLUMN_ALIASES.get(k, k): float(v) for k, v in d.items() if isinstance(v, (int, float))}
                     for d in stat.get("disk", []) if d.get("disk_device")}
            if disks and "r_await" not in next(iter(disks.values())):
                raise ReportError(f"--iostat {path}: no extended statistics: run iostat with -x")
            capture.samples.append(IostatSample(ts, {k: float(v) for k, v in (stat.get("avg-cpu") or {}).items()}, disks))
        if capture.samples:
            captures.append(capture)
    if not captures:
        raise ReportError(f"--iostat {path}: no samples after the first report (give iostat an interval and a count >= 2)")
    return captures


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _steps(prev: float, now: float) -> Iterator[float]:
    """Times at which to write a counter sample for the interval (prev, now]."""
    n = max(1, int((now - prev) // MAX_SAMPLE_GAP + (1 if (now - prev) % MAX_SAMPLE_GAP else 0)))
    for i in range(1, n + 1):
        yield prev + (now - prev) * i / n


def counter_series(capture: IostatCapture) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """metric name -> label text -> [(t, counter value)] rebuilt from the per-interval rates."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    base = {"job": "node", "instance": f"iostat:{capture.host}", "host": capture.host}
    first = capture.samples[0]
    # the first kept report covers the interval before its timestamp; its length is the next gap
    interval = (capture.samples[1].timestamp - first.timestamp) if len(capture.samples) > 1 else 10.0
    prev_t = first.timestamp - interval

    def add(name: str, labels: str, increments: list[tuple[float, float]]) -> None:
        series = out.setdefault(name, {}).setdefault(labels, [(prev_t0, 0.0)])
        for t, inc in increments:
            series.append((t, series[-1][1] + inc))

    prev_t0 = prev_t
    for sample in capture.samples:
        span = sample.timestamp - prev_t
        if span <= 0:
            continue
        ts = list(_steps(prev_t, sample.timestamp))
        share = span / len(ts)
        for device, cols in sample.disks.items():
            labels = _labels(**base, device=device)
            for name, parts in DISK_COUNTERS.items():
                rate = sum(cols.get(col, 0.0) * factor for col, factor in parts)
                add(name, labels, [(t, rate * share) for t in ts])
            for name, (await_col, rate_col) in DISK_TIME_COUNTERS.items():
                rate = cols.get(await_col, 0.0) / 1000 * cols.get(rate_col, 0.0)
                add(name, labels, [(t, rate * share) for t in ts])
        for mode in CPU_MODES:
            add("node_cpu_seconds_total", _labels(**base, cpu="all", mode=mode),
                [(t, sample.cpu.get(mode, 0.0) / 100 * share) for t in ts])
        prev_t = sample.timestamp
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

    def window(self, host: str = "") -> RunWindow:
        return RunWindow(self.jobname, self.start, self.end, self.device, host, self.profile, self.target, self.iops, self.asked)


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
                               note.profile or Path(run.source).stem))
    return runs


def fio_series(runs: list[FioRun], host: str, start: float, end: float) -> dict[str, dict[str, list[tuple[float, float]]]]:
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    times = [start + i * MAX_SAMPLE_GAP for i in range(int((end - start) // MAX_SAMPLE_GAP) + 1)]
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


def write_openmetrics(path: Path, families: list[dict[str, dict[str, list[tuple[float, float]]]]]) -> None:
    merged: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for family in families:
        for name, series in family.items():
            merged.setdefault(name, {}).update(series)
    with path.open("w") as f:
        for name in sorted(merged):
            for labels, points in merged[name].items():
                for t, v in sorted(points):
                    f.write(f"{name}{labels} {_number(v)} {t:.3f}\n")
        f.write("# EOF\n")


def _run(cmd: list[str], what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
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

    def start(self) -> None:
        cmd = [shutil.which("prometheus") or "prometheus", f"--config.file={self.config}", f"--storage.tsdb.path={self.data}",
               f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=100y", "--log.level=error"]
        try:
            self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def rule_levels(groups: list[dict]) -> list[list[dict]]:
    """Recording rules ordered so that each level reads only raw series and lower levels."""
    rules = [r for g in groups for r in g.get("rules", []) if "record" in r]
    names = {r["record"] for r in rules}
    level: dict[str, int] = {}

    def depth(rule: dict, seen: frozenset = frozenset()) -> int:
        if rule["record"] in level:
            return level[rule["record"]]
        deps = [n for n in names if n != rule["record"] and re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", rule["expr"])]
        by_name = {r["record"]: r for r in rules}
        level[rule["record"]] = 1 + max((depth(by_name[d], seen | {rule["record"]}) for d in deps if d not in seen), default=-1)
        return level[rule["record"]]

    for r in rules:
        depth(r)
    out: list[list[dict]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for r in rules:
        out[level[r["record"]]].append(r)
    return out


def evaluate_recording(prom: Prometheus, rule: dict, start: float, end: float,
                       step: float) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """A recording rule's output over the window, as the rule manager would have recorded it."""
    out: dict[str, list[tuple[float, float]]] = {}
    for series in prom.range(rule["expr"], start, end, step):
        labels = {k: v for k, v in series.labels.items() if k != "__name__"} | {k: str(v) for k, v in (rule.get("labels") or {}).items()}
        out[_labels(**labels)] = list(zip(series.times, series.values))
    return {rule["record"]: out}


def _load_rules(name: str) -> list[dict]:
    """The groups of alerts/<name> as the mixin generates them from alerts/config.yaml; every alert's ``for:`` checked up front."""
    try:
        groups = rule_groups(load_settings())[f"alerts/{name}"]
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


def offline_diagnosis(paths: list[str], results: str | None, devices: list[str] | None):
    captures = [c for p in paths for c in load_iostat(p)]
    start = min(c.samples[0].timestamp for c in captures)
    end = max(c.samples[-1].timestamp for c in captures)
    runs = [r for r in load_fio_runs(results) if r.end >= start and r.start <= end]
    hosts = sorted({c.host for c in captures})
    recording, alerting = _load_rules("recording.rules.yaml"), _load_rules("alerts.rules.yaml")
    # the rules are evaluated on the grid the stack evaluates them on
    eval_interval = parse_duration(load_settings()["stack"]["evaluation_interval"], positive=True)
    with tempfile.TemporaryDirectory(prefix="fioscope-report-") as tmp:
        work = Path(tmp)
        data = work / "data"
        om = work / "series.om"
        write_openmetrics(om, [counter_series(c) for c in captures] + [fio_series(runs, hosts[0], start - 60, end)])
        _run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)], "backfilling the iostat samples")
        om.unlink()
        prom_server = TemporaryPrometheus(data, work)
        try:
            prom_server.start()
            prom = Prometheus(prom_server.url, flag="temporary Prometheus")
            grid_start = start - 60
            for i, rules in enumerate(rule_levels(recording)):
                recorded = work / f"level{i}.om"
                write_openmetrics(recorded, [evaluate_recording(prom, rule, grid_start, end, eval_interval) for rule in rules])
                blocks = work / f"blocks{i}"
                _run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(recorded), str(blocks)],
                     f"backfilling recording rules (level {i})")
                prom_server.stop()
                for block in blocks.iterdir():
                    block.rename(data / block.name)
                prom_server.start()
            prom = Prometheus(prom_server.url, flag="temporary Prometheus")
            declared = {r.device: ", ".join(f"{k} {v}" for k, v in r.limits.items() if v) for r in runs if r.device and r.limits}
            source = ", ".join(paths) + (f" + fio results {results}" if results else "")
            timelines = [t for c in captures for t in from_iostat_samples(c.host, [(s.timestamp, s.disks) for s in c.samples])]
            cpus = [CpuTimeline(c.host, {m: [(s.timestamp, s.cpu.get(m, 0.0)) for s in c.samples] for m in CPU_MODES}) for c in captures]
            report = diagnosis_report(prom, start, end, None, devices,
                                      firings=lambda step: evaluate_alerts(prom, alerting, start, end, step),
                                      source=f"offline from {source}", declared=declared, min_step=eval_interval,
                                      timelines=timelines, cpus=cpus, runs=[r.window(hosts[0]) for r in runs],
                                      resolution="every iostat sample")
        finally:
            prom_server.stop()
    report.summary.insert(0, f"Offline: {sum(len(c.samples) for c in captures)} iostat samples from host(s) {', '.join(hosts)}; "
                             "verdicts by fioscope's alert rules evaluated over them in a temporary Prometheus.")
    if any(c.assumed_utc for c in captures):
        report.summary.append("iostat timestamps carry no time zone: read as UTC.")
    return report
