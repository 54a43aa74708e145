"""Everything the collector publishes, fed by result files and live status reports.

The results directory is the one source of truth: a finished run is "a result file
appears", whether fioscope's runner wrote it or anybody else dropped it there.
A restart re-reads the directory and publishes the same figures again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .config import Config, Limits, parse_limits
from .histogram import BUCKET_BOUNDS, bucket_counts
from .model import JobResult, RunResult
from .parser import ParseError, TruncatedError, parse_file
from .promised import promised_iops

log = logging.getLogger("fioscope.store")

FAILURE_KEY = "fioscope_failure"  # a record the runner writes when fio itself failed
# a truncated file younger than this is taken to be still being written
WRITE_GRACE_SECONDS = 10.0


@dataclass
class Published:
    """The last finished run of one job."""

    job: JobResult
    fio_version: str
    end_timestamp: float
    target: str
    promised_iops: float = 0.0
    sla_latency_seconds: float = 0.0


@dataclass
class HistogramState:
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKET_BOUNDS) + 1))
    sum_seconds: float = 0.0


@dataclass
class JobState:
    last: Published | None = None
    live: JobResult | None = None  # the running job's latest status report (rates are per interval)
    running: bool = False
    start_timestamp: float = 0.0
    end_timestamp: float = 0.0
    runs: int = 0
    failures: int = 0
    version: int = 0  # bumped on every change, so a scrape re-renders only changed jobs


class Store:
    def __init__(self, config: Config):
        self.config = config
        self._lock = threading.Lock()
        self.jobs: dict[str, JobState] = {}
        self.histograms: dict[tuple[str, str, str], HistogramState] = {}
        self.parse_errors = 0
        self.last_scan_timestamp = 0.0
        self._seen: dict[str, tuple[int, int]] = {}  # path -> (mtime_ns, size) already handled
        self._published: set[str] = set()  # paths whose result is published
        # the runner and the scan loop may both see a new file: one ingests it, once
        self._ingest_lock = threading.Lock()

    # ---- reading files ---------------------------------------------------------------
    def scan(self) -> None:
        """Ingest every new or changed ``*.json`` in the results directory."""
        directory = self.config.results_dir
        try:
            paths = sorted(directory.glob("*.json"))
        except OSError as exc:
            log.error("%s: cannot list results directory: %s", directory, exc)
            return
        for path in paths:
            self.ingest_file(path)
        self.last_scan_timestamp = time.time()

    def ingest_file(self, path: Path) -> bool:
        """Parse and publish one file once per version of it; False if it was rejected."""
        with self._ingest_lock:
            return self._ingest_file(path)

    def _ingest_file(self, path: Path) -> bool:
        try:
            st = path.stat()
        except OSError:
            return False
        signature = (st.st_mtime_ns, st.st_size)
        key = str(path)
        if self._seen.get(key) == signature:
            return True
        try:
            if path.name.endswith(".failure.json"):
                self._ingest_failure(path)
            else:
                runs = parse_file(path)
                self._ingest_run(runs[-1])  # with --status-interval the last report is the final one
        except TruncatedError as exc:
            if time.time() - st.st_mtime < WRITE_GRACE_SECONDS:
                return False  # still being written: look again on the next scan
            self._reject(path, signature, exc)
            return False
        except (ParseError, ValueError, KeyError, TypeError) as exc:
            self._reject(path, signature, exc)
            return False
        self._seen[key] = signature
        with self._lock:
            self._published.add(key)
        return True

    def _reject(self, path: Path, signature: tuple[int, int], exc: Exception) -> None:
        self._seen[str(path)] = signature  # count a bad file once, not on every scan
        log.error("%s: rejected: %s", path, exc)
        with self._lock:
            self.parse_errors += 1

    def _ingest_failure(self, path: Path) -> None:
        record = json.loads(path.read_text())[FAILURE_KEY]
        with self._lock:
            for name in record["jobnames"]:
                state = self.jobs.setdefault(name, JobState())
                state.runs += 1
                state.failures += 1
                state.end_timestamp = max(state.end_timestamp, float(record["timestamp"]))
                state.version += 1

    def _ingest_run(self, run: RunResult) -> None:
        annotations = run.annotations
        with self._lock:
            for job in run.jobs:
                state = self.jobs.setdefault(job.jobname, JobState())
                state.runs += 1
                state.version += 1
                if job.error or annotations.get("failed"):
                    state.failures += 1
                for ddir, direction in job.directions.items():
                    for stage, lat in direction.latencies.items():
                        if not lat.bins_ns:
                            continue
                        hist = self.histograms.setdefault((job.jobname, ddir, stage), HistogramState())
                        for i, n in enumerate(bucket_counts(lat.bins_ns)):
                            hist.buckets[i] += n
                        hist.sum_seconds += lat.sum_seconds
                        lat.bins_ns = {}  # counted into the histogram; the raw bins are not kept
                if state.last is None or run.timestamp >= state.last.end_timestamp:
                    state.last = self._publish(job, run, annotations)
                    if not state.running:
                        state.end_timestamp = run.timestamp
                        state.start_timestamp = run.timestamp - job.runtime_seconds

    def _publish(self, job: JobResult, run: RunResult, annotations: dict) -> Published:
        target_name = annotations.get("target", "")
        limits = Limits()
        sla = float(annotations.get("sla_latency_seconds", 0) or 0)
        if annotations.get("limits"):
            limits = parse_limits(annotations["limits"], f"{run.source}: fioscope.limits")
        else:
            target = self.config.target_for_directory(job.options.get("directory", ""))
            if target is not None:
                target_name, limits, sla = target.name, target.limits, target.sla_latency_seconds
        return Published(
            job=job,
            fio_version=run.fio_version,
            end_timestamp=run.timestamp,
            target=target_name or job.options.get("directory", job.options.get("filename", "")),
            promised_iops=promised_iops(limits, job.options),
            sla_latency_seconds=sla,
        )

    # ---- live runs ---------------------------------------------------------------------
    def start_run(self, jobnames: list[str]) -> None:
        now = time.time()
        with self._lock:
            for name in jobnames:
                state = self.jobs.setdefault(name, JobState())
                state.running, state.live, state.start_timestamp = True, None, now
                state.version += 1

    def update_live(self, run: RunResult) -> None:
        """A periodic status report: figures since the previous report, not since the start."""
        with self._lock:
            for job in run.jobs:
                state = self.jobs.get(job.jobname)
                if state is None or not state.running:
                    continue
                previous = state.live
                if previous is not None:
                    elapsed = job.runtime_seconds - previous.runtime_seconds
                    for ddir, direction in job.directions.items():
                        before = previous.directions.get(ddir)
                        if before is not None and elapsed > 0:
                            direction.iops = (direction.total_ios - before.total_ios) / elapsed
                            direction.bandwidth_bytes = (direction.io_bytes - before.io_bytes) / elapsed
                state.live = job
                state.version += 1

    def finish_run(self, jobnames: list[str]) -> None:
        now = time.time()
        with self._lock:
            for name in jobnames:
                state = self.jobs.setdefault(name, JobState())
                state.running, state.live = False, None
                state.end_timestamp = now
                state.version += 1

    # ---- for the collector -------------------------------------------------------------
    def snapshot(self, unchanged: dict[str, int] | None = None) -> tuple[dict[str, JobState], dict[tuple[str, str, str], HistogramState]]:
        """Copies taken under the lock, so a scrape never sees half an update.

        Histograms are copied only for jobs whose version differs from ``unchanged``.
        """
        unchanged = unchanged or {}
        with self._lock:
            jobs = {name: JobState(**vars(s)) for name, s in self.jobs.items()}
            hists = {k: HistogramState(list(h.buckets), h.sum_seconds) for k, h in self.histograms.items()
                     if unchanged.get(k[0]) != jobs[k[0]].version}
        return jobs, hists

    def health(self) -> dict[str, float]:
        with self._lock:
            return {
                "parse_errors": self.parse_errors,
                "result_files": len(self._published),
                "last_scan": self.last_scan_timestamp,
            }
