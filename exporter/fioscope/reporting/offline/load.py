"""The offline diagnosis's input: ``iostat -x -t -o JSON`` files read into bounded captures, and the fio runs of
``--results``.

Hostile input is bounded while loading (``load_iostat``, ``check_bounds``): file size, devices, time span, stretches
between gaps; a gap in time is left empty, never filled; a value that is not a rate leaves its device's sample out,
counted per reason; a large capture has consecutive reports merged (the counters end exactly where they would have).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fioscope_mixin import columns
from fioscope_mixin.columns import CPU_MODES

from ...resultfile import MAX_LABEL_CHARS, printable
from .. import ReportError
from ..iostat_json import parse_cpu, parse_diskstats
from ..phases import RunWindow
from ..results import read_runs
from ..timeline import DiskCounters, iostat_row

log = logging.getLogger("fioscope.report")

RATE_WINDOW = 60.0  # the rules' rate(...[1m])
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
MAX_KERNEL_ROWS = 2_000_000  # (sample x device) rows of a bundle's counters; beyond, its iostat.json's rates serve
GAP_FACTOR, GAP_MIN = 10.0, 300.0  # an interval this much longer than the one before is a gap, not a long interval
MAX_UTIL = 110.0  # %util: sysstat caps it at 100; older kernels overshoot a little
MAX_RATE = 1e12  # no disk completes, merges or moves this much per second (kB, IO, ms)
REQUIRED = columns.required()  # the column table's (fioscope_mixin.columns)
USED = sorted({c for c, _ in DISK_COUNTERS.values()} | {c for pair in DISK_TIME_COUNTERS.values() for c in pair})
MAX_SPANS = 100  # separate stretches of data (a gap starts a new one)
# a bundle's samples/*.jsonl: what a line may add (the series: fio's directions, jobs and their names' length)
FIO_DIRECTIONS = ("read", "write", "trim")
MAX_FIO_JOBS = 64
MAX_LINE_WARNINGS = 10  # bad lines named one by one; past these, one line counts the rest

# ``fioscope capture``'s samples of one host: (unix seconds, device -> its counters, avg-cpu group -> ticks)
KernelSamples = list[tuple[float, dict[str, DiskCounters], dict[str, float]]]
BUNDLE_COUNTERS = Path("samples") / "diskstats.jsonl"  # beside a capture bundle's iostat.json (docs/contracts.md section 5)
BUNDLE_FIO_RATES = Path("samples") / "fio.jsonl"  # ... and fio's status reports' rates (capture.FioRates)


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


def invalid(column: str, value: object, counter: bool = False) -> str | None:
    """Why an iostat value (``counter``: a bundle's raw counter, which has no upper bound) cannot be used, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{column} not a number"
    if not math.isfinite(value):
        return f"{column} NaN or infinite"
    if value < 0:
        return f"{column} negative"
    if not counter and value > (MAX_UTIL if column == "util" else MAX_RATE):
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
    clat_p50: dict[str, float] = field(default_factory=dict)  # ddir -> seconds: the median the wait-above-disk cause reads

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
            median: dict[str, float] = {}
            for ddir in ("read", "write", "trim"):
                if ddir not in job.directions or not job.directions[ddir].total_ios:
                    continue
                for into, quantile in ((clat, "0.99"), (median, "0.5")):
                    if (value := job.percentile(ddir, "clat", quantile)) is not None:
                        into[ddir] = value
            runs.append(FioRun(job.jobname, note.target, note.device, run.start_timestamp, run.end_timestamp,
                               job.percentile("sync", "lat"), note.limits.as_dict() if note.limits else {},
                               clat, note.sla_latency_seconds, job.total_iops, job.options.get("rate_iops", ""),
                               note.profile or Path(run.source).stem,
                               note.failed or (f"fio error {job.error} in {job.jobname}" if job.error else ""), median))
    return runs


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


def bundle_file(path: str, captures: list[IostatCapture], name: Path) -> Path | None:
    """``name`` beside the iostat file ``path`` where it is a ``fioscope capture`` bundle's: a bundle's iostat.json has its
    one host (two bundles of one host: each its own files)."""
    raw = Path(path).parent / name
    return raw if len({c.host for c in captures if c.path == path}) == 1 and raw.is_file() else None


class BundleLines:
    """A bundle file's lines left out, as iostat.json's values are: each one warning naming the line and why (the first
    MAX_LINE_WARNINGS; the rest one summary line), counted per reason in its capture's ``skipped`` (the report's notes)."""

    def __init__(self, path: str, skipped: Counter | None = None):
        self.path, self.skipped, self.count = path, skipped, 0

    def leave_out(self, n: int, reason: str, detail: str = "") -> None:
        self.count += 1
        if self.count <= MAX_LINE_WARNINGS:
            log.warning("%s: line %d: %s%s; left out", self.path, n, reason, f" ({detail})" if detail else "")
        if self.skipped is not None:
            self.skipped[f"{Path(self.path).name} line: {reason}"] += 1

    def done(self) -> None:
        if self.count > MAX_LINE_WARNINGS:
            log.warning("%s: %d more line(s) left out (%d in all)", self.path, self.count - MAX_LINE_WARNINGS, self.count)


@dataclass
class BundleBounds:
    """What a bundle file's lines must keep to: the time of its iostat.json (``window``) and its devices (the series)."""

    window: tuple[float, float] = (-math.inf, math.inf)
    devices: set[str] | None = None
    skipped: Counter | None = None


def bundle_bounds(path: str, captures: list[IostatCapture]) -> BundleBounds:
    """The bounds of the bundle files beside the iostat file ``path``: its samples' time (with the sampler's first
    interval, which iostat.json drops, and a rate window of margin) and devices; what is left out counts in its notes."""
    mine = [c for c in captures if c.path == path]
    margin = RATE_WINDOW + max((s.interval for c in mine for s in c.samples[:2]), default=0.0)
    return BundleBounds((min(c.samples[0].timestamp for c in mine) - margin, max(c.samples[-1].timestamp for c in mine) + margin),
                        {d for c in mine for s in c.samples for d in s.disks}, mine[0].skipped)


def bundle_counters(paths: list[str], captures: list[IostatCapture]) -> dict[str, KernelSamples]:
    """iostat file -> the kernel counters of a ``fioscope capture`` bundle, read from the raw samples beside its iostat.json
    (``BUNDLE_COUNTERS``), so a report on the bundle judges the counters as counted, as the capture's own report did.
    Nothing for another iostat file; a bad line is left out (``BundleLines``); a file that cannot be read is one
    warning, and the rates serve."""
    out: dict[str, KernelSamples] = {}
    for path in paths:
        if (raw := bundle_file(path, captures, BUNDLE_COUNTERS)) is None:
            continue
        try:
            out[path] = read_bundle_counters(str(raw), bundle_bounds(path, captures))
        except ReportError as exc:
            log.warning("%s; the counters are rebuilt from %s's rates", exc, path)
    return out


def _counters_invalid(t: float, disks: dict[str, DiskCounters], cpu: dict[str, float],
                      before: tuple[float, dict[str, DiskCounters], dict[str, float]] | None) -> str | None:
    """Why a sample's counters cannot be used, by iostat.json's checks (``invalid``; and, against the sample kept
    before, the iostat row they make: ``_disk_row``): a counter not a finite non-negative number, one falling, a rate
    no disk has."""
    for device, counters in disks.items():
        for name in DiskCounters.fields():
            if reason := invalid(f"{device} {name}", getattr(counters, name), counter=True):
                return reason
    for mode, ticks in cpu.items():
        if reason := invalid(f"cpu {mode}", ticks, counter=True):
            return reason
    if before is None:
        return None
    for device in disks.keys() & before[1].keys():
        row = iostat_row(before[1][device], disks[device], t - before[0])
        if row is None:
            return f"{device}: a counter falling"
        why: Counter = Counter()
        if _disk_row(row, why) is None:
            return f"{device}: {next(iter(why))}"
    return None


def read_bundle_counters(path: str, bounds: BundleBounds | None = None) -> KernelSamples:
    """``samples/diskstats.jsonl``: one JSON object per sample (``t``, ``diskstats`` lines, ``stat`` line), in time order;
    a line out of ``bounds`` or with counters iostat.json would refuse is left out (``BundleLines``); ReportError naming
    the file where it cannot be read or fewer than two samples are left."""
    bounds = bounds or BundleBounds()
    bad = BundleLines(path, bounds.skipped)
    samples: KernelSamples = []
    rows = 0
    for n, line in enumerate(_read(path).splitlines(), 1):
        try:
            obj = json.loads(line)
            t, lines, stat = float(obj["t"]), obj["diskstats"], str(obj["stat"])
            if not (math.isfinite(t) and isinstance(lines, list) and all(isinstance(x, str) for x in lines)):
                raise ValueError("t, diskstats or stat of the wrong kind")
            # the devices of the bundle's iostat.json only: a line naming 20,000 others adds no series
            named = {f[2] for f in (x.split() for x in lines) if len(f) > 2}
            disks = parse_diskstats("\n".join(lines), named if bounds.devices is None else named & bounds.devices)
            cpu = parse_cpu(stat)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            bad.leave_out(n, "not a sample", str(exc)[:200])
            continue
        if not bounds.window[0] <= t <= bounds.window[1]:
            bad.leave_out(n, "time outside the capture", f"t={t:g}")
            continue
        if samples and t <= samples[-1][0]:
            bad.leave_out(n, "not later than the sample before")
            continue
        if reason := _counters_invalid(t, disks, cpu, samples[-1] if samples else None):
            bad.leave_out(n, "counters iostat.json would refuse", reason)
            continue
        rows += len(disks)
        if rows > MAX_KERNEL_ROWS:
            raise ReportError(f"{path}: more than {MAX_KERNEL_ROWS} (sample x device) rows")
        samples.append((t, disks, cpu))
    bad.done()
    if len(samples) < 2:
        raise ReportError(f"{path}: fewer than two samples")
    return samples


@dataclass
class FioRate:
    """One fio status report's rates of one job (``samples/fio.jsonl``): bytes per second by direction."""

    t: float
    target: str
    device: str
    jobname: str
    bytes_per_second: dict[str, float]


def bundle_fio_rates(paths: list[str], captures: list[IostatCapture]) -> list[FioRate]:
    """The fio rates of the ``fioscope capture`` bundles among ``paths`` (``BUNDLE_FIO_RATES`` beside a bundle's
    iostat.json): a bad line is left out (``BundleLines``); a file that cannot be read is one warning, and the report
    goes on without it."""
    out: list[FioRate] = []
    for path in paths:
        if (raw := bundle_file(path, captures, BUNDLE_FIO_RATES)) is None:
            continue
        try:
            out += read_fio_rates(str(raw), bundle_bounds(path, captures))
        except ReportError as exc:
            log.warning("%s; the report goes on without fio's live rates", exc)
    return out


def read_fio_rates(path: str, bounds: BundleBounds | None = None) -> list[FioRate]:
    """``samples/fio.jsonl``: a line out of ``bounds`` (its time; fio's directions; at most MAX_FIO_JOBS jobs, labels of
    at most MAX_LABEL_CHARS: the series) or not finite non-negative rates is left out (``BundleLines``); ReportError
    naming the file where it cannot be read."""
    bounds = bounds or BundleBounds()
    bad = BundleLines(path, bounds.skipped)
    rates: list[FioRate] = []
    jobs: set[tuple[str, str, str]] = set()
    for n, line in enumerate(_read(path).splitlines(), 1):
        try:
            obj = json.loads(line)
            # names escaped as the exporter escapes a file name's (a lone surrogate failed the whole report)
            rate = FioRate(float(obj["t"]), printable(str(obj["target"])), printable(str(obj["device"])),
                           printable(str(obj["jobname"])), {str(k): float(v) for k, v in obj["bytes_per_second"].items()})
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            bad.leave_out(n, "not a status report", str(exc)[:200])
            continue
        job = (rate.target, rate.device, rate.jobname)
        if not (math.isfinite(rate.t) and all(math.isfinite(v) and v >= 0 for v in rate.bytes_per_second.values())):
            bad.leave_out(n, "a time or rate that is not a finite, non-negative number")
        elif not bounds.window[0] <= rate.t <= bounds.window[1]:
            bad.leave_out(n, "time outside the capture", f"t={rate.t:g}")
        elif not rate.bytes_per_second.keys() <= set(FIO_DIRECTIONS):
            bad.leave_out(n, "directions fio does not report", f"{len(rate.bytes_per_second)} directions")
        elif max(map(len, job)) > MAX_LABEL_CHARS:
            bad.leave_out(n, f"a name longer than {MAX_LABEL_CHARS} characters")
        elif job not in jobs and len(jobs) >= MAX_FIO_JOBS:
            bad.leave_out(n, f"more than {MAX_FIO_JOBS} jobs (the series budget)")
        else:
            jobs.add(job)
            rates.append(rate)
        if len(rates) > MAX_KERNEL_ROWS:
            raise ReportError(f"{path}: more than {MAX_KERNEL_ROWS} lines")
    bad.done()
    return rates
