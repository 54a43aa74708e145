"""Everything the collector publishes, fed by result files and live status reports.

The results directory is the one source of truth: a finished run is "a result file
appears", whether fioscope's runner wrote it or anybody else dropped it there.
A restart re-reads the directory and publishes the same figures again.

A result is keyed by (target, jobname, hostname) (docs/contracts.md section 1).
Ingestion of a file is all or nothing: the file is read (resultfile.read_bytes), parsed
and validated, and its whole contribution computed, before any state changes; any
exception is contained to that file, which is then counted once as rejected.
The same content (sha256 of the bytes) is counted once, whatever its name or mtime.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .blockdev import device_for_path
from .config import Config, Limits
from .histogram import BUCKET_BOUNDS, bucket_counts
from .model import JobResult, RunResult
from .parser import parse_text
from .promised import promised_iops
from .resultfile import FailureRecord, is_failure_name, read_bytes, recover_interrupted

log = logging.getLogger("fioscope.store")

# a file fioscope did not write (no annotation) is judged once it has not changed for this long:
# fio --status-interval appends a report every interval and only the final one is the run, and
# a file being written is empty or truncated for a while
SETTLE_SECONDS = 10.0

JobKey = tuple[str, str, str]  # (target, jobname, hostname)
HistKey = tuple[str, str]  # (ddir, stage)


@dataclass
class Published:
    """The last finished run of one job."""

    job: JobResult
    fio_version: str
    end_timestamp: float
    promised_iops: float = 0.0
    sla_latency_seconds: float = 0.0


@dataclass
class HistogramState:
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKET_BOUNDS) + 1))
    sum_seconds: float = 0.0
    held: bool = False  # new since the startup scan: shown at zero once (see Store.snapshot)


@dataclass
class JobState:
    device: str = ""
    last: Published | None = None
    live: JobResult | None = None  # the running job's latest status report (rates are per interval)
    running: bool = False
    start_timestamp: float = 0.0
    end_timestamp: float = 0.0
    runs: int = 0
    failures: int = 0
    version: int = 0  # bumped on every change, so a scrape re-renders only changed jobs
    counters_held: bool = False  # new since the startup scan: runs and failures shown at zero once


@dataclass
class _JobContribution:
    """What one job of one file adds, computed before anything changes."""

    key: JobKey
    device: str
    failed: bool
    published: Published | None = None
    start_timestamp: float = 0.0
    end_timestamp: float = 0.0
    histograms: dict[HistKey, tuple[list[int], float]] = field(default_factory=dict)


def _shown(path: Path) -> str:
    """A path as it goes into a log line: control characters in a file name are escaped."""
    text = str(path)
    return text if text.isprintable() else ascii(text)


class Store:
    def __init__(self, config: Config):
        self.config = config
        self._lock = threading.Lock()
        self.jobs: dict[JobKey, JobState] = {}
        self.histograms: dict[JobKey, dict[HistKey, HistogramState]] = {}
        self.parse_errors = 0
        self.last_scan_timestamp = 0.0
        self._seen: dict[str, tuple[int, int, int]] = {}  # path -> (inode, mtime_ns, size) already handled
        self._counted: set[bytes] = set()  # sha256 of every content counted
        self._published: set[str] = set()  # paths whose result is published
        self._devices: dict[str, str] = {}  # directory -> device, for one scan
        self._dir_missing = False
        self._hold_new = False  # set once the startup scan is published: series new after it start at zero
        # the runner and the scan loop may both see a new file: one ingests it, once
        self._ingest_lock = threading.Lock()

    # ---- reading files ---------------------------------------------------------------
    def scan(self) -> None:
        """Ingest every new or changed ``*.json`` directly in the results directory. Never raises."""
        directory = self.config.results_dir
        self._devices.clear()
        try:
            recover_interrupted(directory)
            names = sorted(e.name for e in os.scandir(directory) if e.name.endswith(".json"))
        except OSError as exc:
            if not self._dir_missing:
                log.error("%s: cannot list results directory: %s", _shown(directory), exc.strerror)
            self._dir_missing = True
            names = []
        else:
            if self._dir_missing:
                log.info("%s: results directory is back", _shown(directory))
            self._dir_missing = False
        for name in names:
            self.ingest_file(directory / name)
        self.last_scan_timestamp = time.time()

    def ingest_file(self, path: Path, settled: bool = False) -> bool:
        """Publish one file once per content; False if it was rejected or is not complete yet.

        ``settled``: the writer is done with it (fioscope's runner renames a finished file into place).
        """
        with self._ingest_lock:
            try:
                return self._ingest_file(Path(path), settled)
            except Exception as exc:  # noqa: BLE001 - nothing a file holds may stop the scan
                self._reject(Path(path), None, exc)
                return False

    def _ingest_file(self, path: Path, settled: bool) -> bool:
        try:
            st = os.lstat(path)
        except OSError:
            return False  # gone since the listing
        signature = (st.st_ino, st.st_mtime_ns, st.st_size)
        key = str(path)
        if self._seen.get(key) == signature:
            return key in self._published
        settled = settled or time.time() - st.st_mtime >= SETTLE_SECONDS
        try:
            data = read_bytes(path)
            digest = hashlib.sha256(data).digest()
            if digest in self._counted:  # touched, copied or rewritten with the same bytes: counted once
                self._seen[key] = signature
                with self._lock:
                    self._published.add(key)
                return True
            text = data.decode("utf-8", errors="replace")
            if is_failure_name(path.name):
                contributions = self._failure_contributions(FailureRecord.from_json(json.loads(text)))
            else:
                # with --status-interval the last report is the final one
                run = parse_text(text, source=key, max_jobs=self.config.max_jobs_per_file)[-1]
                if not (settled or run.annotation.present):
                    return False  # anybody's fio output counts once its writer is done with it
                contributions = self._run_contributions(run)
        except Exception as exc:  # noqa: BLE001 - RecursionError, MemoryError, ValueError ...: this file only
            if not settled:
                return False  # still being written, perhaps: judged once it stops changing
            self._reject(path, signature, exc)
            return False
        with self._lock:
            self._apply(contributions)
            self._published.add(key)
        self._counted.add(digest)
        self._seen[key] = signature
        return True

    def _reject(self, path: Path, signature: tuple[int, int, int] | None, exc: BaseException) -> None:
        if signature is not None:
            self._seen[str(path)] = signature  # count a bad file once, not on every scan
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        log.error("%s: rejected: %s", _shown(path), reason if reason.isprintable() else ascii(reason))
        with self._lock:
            self.parse_errors += 1

    # ---- contributions: computed from a validated file, applied under the lock --------------
    def _device(self, directory: str) -> str:
        if directory not in self._devices:
            self._devices[directory] = device_for_path(directory) if directory.startswith("/") else ""
        return self._devices[directory]

    def _failure_contributions(self, record: FailureRecord) -> list[_JobContribution]:
        out = []
        for name in dict.fromkeys(record.jobnames):
            out.append(_JobContribution(key=(record.target, name, ""), device=record.device, failed=True,
                                        end_timestamp=record.timestamp))
        return out

    def _run_contributions(self, run: RunResult) -> list[_JobContribution]:
        ann = run.annotation
        out = []
        for job in run.jobs:
            directory = job.options.get("directory", "")
            configured = self.config.target_for_directory(directory) if directory else None
            if ann.present and ann.target:
                target, device = ann.target, ann.device
                if not device:
                    named = next((t for t in self.config.targets if t.name == target), None)
                    device = self._device(str(named.directory)) if named else ""
            elif configured is not None:
                target, device = configured.name, self._device(str(configured.directory))
            else:
                target, device = directory or job.options.get("filename", ""), self._device(directory)
            limits, sla = Limits(), 0.0
            if ann.limits is not None or ann.sla_latency_seconds:
                limits, sla = ann.limits or Limits(), ann.sla_latency_seconds
            elif configured is not None and configured.name == target:
                limits, sla = configured.limits, configured.sla_latency_seconds
            c = _JobContribution(key=(target, job.jobname, job.hostname), device=device, failed=bool(job.error or ann.failed))
            for ddir, direction in job.directions.items():
                for stage, lat in direction.latencies.items():
                    if lat.bins_ns:
                        c.histograms[(ddir, stage)] = (bucket_counts(lat.bins_ns), lat.sum_seconds)
                        lat.bins_ns = {}  # counted into the histogram; the raw bins are not kept
            c.published = Published(job=job, fio_version=run.fio_version, end_timestamp=run.timestamp,
                                    promised_iops=_promised(limits, job.options), sla_latency_seconds=sla)
            c.start_timestamp, c.end_timestamp = max(0.0, run.timestamp - job.runtime_seconds), run.timestamp
            out.append(c)
        return out

    def _apply(self, contributions: list[_JobContribution]) -> None:
        for c in contributions:
            state = self.jobs.get(c.key)
            if state is None:
                state = self.jobs[c.key] = JobState(counters_held=self._hold_new)
            state.runs += 1
            state.version += 1
            if c.failed:
                state.failures += 1
            if c.device or not state.device:
                state.device = c.device
            if c.published is None:  # a failure record: fio left no report
                state.end_timestamp = max(state.end_timestamp, c.end_timestamp)
                continue
            hists = self.histograms.setdefault(c.key, {})
            for hkey, (counts, total) in c.histograms.items():
                hist = hists.get(hkey)
                if hist is None:
                    hist = hists[hkey] = HistogramState(held=self._hold_new)
                hist.buckets = [a + b for a, b in zip(hist.buckets, counts)]
                hist.sum_seconds += total
            if state.last is None or c.published.end_timestamp >= state.last.end_timestamp:
                state.last = c.published
                if not state.running:
                    state.end_timestamp = c.end_timestamp
                    state.start_timestamp = c.start_timestamp

    # ---- live runs ---------------------------------------------------------------------
    def start_run(self, jobnames: list[str], target: str = "", device: str = "") -> None:
        now = time.time()
        with self._lock:
            for name in jobnames:
                state = self.jobs.setdefault((target, name, ""), JobState(device=device, counters_held=self._hold_new))
                state.running, state.live, state.start_timestamp = True, None, now
                state.device = device or state.device
                state.version += 1

    def update_live(self, run: RunResult, target: str = "") -> None:
        """A periodic status report: figures since the previous report, not since the start."""
        with self._lock:
            for job in run.jobs:
                state = self.jobs.get((target, job.jobname, job.hostname))
                if state is None or not state.running:
                    continue
                previous = state.live
                if previous is not None:
                    elapsed = job.runtime_seconds - previous.runtime_seconds
                    for ddir, direction in job.directions.items():
                        before = previous.directions.get(ddir)
                        if before is not None and elapsed > 0:
                            direction.iops = max(0.0, (direction.total_ios - before.total_ios) / elapsed)
                            direction.bandwidth_bytes = max(0.0, (direction.io_bytes - before.io_bytes) / elapsed)
                state.live = job
                state.version += 1

    def finish_run(self, jobnames: list[str], target: str = "") -> None:
        now = time.time()
        with self._lock:
            for name in jobnames:
                state = self.jobs.setdefault((target, name, ""), JobState(counters_held=self._hold_new))
                state.running, state.live = False, None
                state.end_timestamp = now
                state.version += 1

    # ---- for the collector -------------------------------------------------------------
    def hold_new_series(self) -> None:
        """From now on a new counter or histogram is shown at zero once (see ``snapshot``).

        Called after the startup scan: what it read is shown with its totals at once, since
        Prometheus saw them before the restart and a zero would read as a counter reset.
        """
        with self._lock:
            self._hold_new = True

    def snapshot(self, unchanged: dict[JobKey, int] | None = None
                 ) -> tuple[dict[JobKey, JobState], dict[JobKey, dict[HistKey, HistogramState]]]:
        """Copies taken under the lock, so a scrape never sees half an update.

        Histograms are copied only for jobs whose version differs from ``unchanged``.

        A counter or histogram that appears after ``hold_new_series()`` is shown at zero in
        the next snapshot and with its counts from the one after: ``rate()`` and ``increase()``
        cannot see an increase from nothing, so without the zero a result's first run (and a
        job's first failure) would count nowhere.
        """
        unchanged = unchanged or {}
        with self._lock:
            jobs: dict[JobKey, JobState] = {}
            hists: dict[JobKey, dict[HistKey, HistogramState]] = {}
            for key, state in self.jobs.items():
                shown = jobs[key] = JobState(**vars(state))
                if state.counters_held:
                    shown.runs = shown.failures = 0
                    state.counters_held = False
                    state.version += 1  # so the next scrape renders the real counts
                if unchanged.get(key) == shown.version:
                    continue
                hists[key] = {}
                for hkey, hist in self.histograms.get(key, {}).items():
                    if hist.held:
                        hists[key][hkey] = HistogramState()
                        hist.held = False
                        state.version += 1
                    else:
                        hists[key][hkey] = HistogramState(list(hist.buckets), hist.sum_seconds)
        return jobs, hists

    def health(self) -> dict[str, float]:
        with self._lock:
            return {
                "parse_errors": self.parse_errors,
                "result_files": len(self._published),
                "last_scan": self.last_scan_timestamp,
            }


def _promised(limits: Limits, options: dict[str, str]) -> float:
    """promised_iops, or 0 where the job's own options make no sense of it (rwmixread=abc)."""
    try:
        value = promised_iops(limits, options)
    except (ValueError, ArithmeticError):
        return 0.0
    return value if math.isfinite(value) and value >= 0 else 0.0
