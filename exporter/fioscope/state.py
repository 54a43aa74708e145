"""What the exporter knows, per (target, jobname, hostname): the last finished run, the live one,
the run and failure counters and the cumulative latency histograms (docs/contracts.md section 1).

A validated result file becomes a list of ``Contribution`` (computed before anything changes, from
copies: the parsed run is never modified), applied at once under the lock. ``snapshot`` only copies:
what a scrape shows of new series (the zero-once rule) is decided by the collector
(collector/exposition.py), not here.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .config import Limits
from .histogram import bucket_counts, shipped_bounds
from .model import Direction, JobResult, RunResult
from .promised import promised_iops
from .resultfile import Annotation, FailureRecord

JobKey = tuple[str, str, str]  # (target, jobname, hostname)
HistKey = tuple[str, str]  # (ddir, stage)


@dataclass(frozen=True)
class Placement:
    """Where a job of a result file ran, and what its target declares (see resolve.py)."""

    target: str
    device: str
    limits: Limits = Limits()
    sla_latency_seconds: float = 0.0


@dataclass
class Published:
    """The last finished run of one job (its latencies without json+ bins: those went into the histograms)."""

    job: JobResult
    fio_version: str
    end_timestamp: float
    promised_iops: float = 0.0
    sla_latency_seconds: float = 0.0


@dataclass
class HistogramState:
    bounds: tuple[float, ...]  # the le bounds (the thresholds' fsync line anchors them): one tuple shared by all
    buckets: list[int] = field(default_factory=list)  # per bucket, +Inf last; empty: all zero
    sum_seconds: float = 0.0
    held: bool = False  # appeared after the startup scan: the collector shows it at zero once

    def __post_init__(self) -> None:
        self.buckets = self.buckets or [0] * (len(self.bounds) + 1)


@dataclass
class JobState:
    device: str = ""
    last: Published | None = None
    live: JobResult | None = None  # the running job's latest status report, rates per interval
    running: bool = False
    start_timestamp: float = 0.0
    end_timestamp: float = 0.0
    runs: int = 0
    failures: int = 0
    version: int = 0  # bumped on every change, so a scrape re-renders only changed jobs
    counters_held: bool = False  # appeared after the startup scan: the collector shows runs/failures at zero once


@dataclass
class Contribution:
    """What one job of one file adds."""

    key: JobKey
    device: str
    failed: bool
    published: Published | None = None
    start_timestamp: float = 0.0
    end_timestamp: float = 0.0
    histograms: dict[HistKey, tuple[list[int], float]] = field(default_factory=dict)


def failure_contributions(record: FailureRecord) -> list[Contribution]:
    return [Contribution(key=(record.target, name, ""), device=record.device, failed=True, end_timestamp=record.timestamp)
            for name in dict.fromkeys(record.jobnames)]


def run_contributions(run: RunResult, place: Callable[[Annotation, JobResult], Placement],
                      bounds: tuple[float, ...] | None = None) -> list[Contribution]:
    out = []
    for job in run.jobs:
        where = place(run.annotation, job)
        c = Contribution(key=(where.target, job.jobname, job.hostname), device=where.device,
                         failed=bool(job.error or run.annotation.failed))
        for ddir, direction in job.directions.items():
            for stage, lat in direction.latencies.items():
                if lat.bins_ns:
                    c.histograms[(ddir, stage)] = (bucket_counts(lat.bins_ns, bounds), lat.sum_seconds)
        c.published = Published(job=_without_bins(job), fio_version=run.fio_version, end_timestamp=run.timestamp,
                                promised_iops=_promised(where.limits, job.options), sla_latency_seconds=where.sla_latency_seconds)
        c.start_timestamp, c.end_timestamp = max(0.0, run.timestamp - job.wall_seconds), run.timestamp
        out.append(c)
    return out


def _without_bins(job: JobResult) -> JobResult:
    """A copy of the job for publishing: the raw bins are counted into the histograms, not kept (~1000 per latency)."""
    return replace(job, directions={ddir: replace(d, latencies={s: replace(lat, bins_ns={}) for s, lat in d.latencies.items()})
                                    for ddir, d in job.directions.items()})


def _promised(limits: Limits, options: dict[str, str]) -> float:
    """promised_iops, or 0 where the job's own options make no sense of it (rwmixread=abc)."""
    try:
        value = promised_iops(limits, options)
    except (ValueError, ArithmeticError):
        return 0.0
    return value if math.isfinite(value) and value >= 0 else 0.0


def per_interval(job: JobResult, previous: JobResult) -> JobResult:
    """A status report's rates since the ``previous`` one (fio's are since the start); a new object, ``job`` is kept."""
    elapsed = job.runtime_seconds - previous.runtime_seconds
    directions: dict[str, Direction] = {}
    for ddir, direction in job.directions.items():
        before = previous.directions.get(ddir)
        if before is not None and elapsed > 0:
            direction = replace(direction, iops=max(0.0, (direction.total_ios - before.total_ios) / elapsed),
                                bandwidth_bytes=max(0.0, (direction.io_bytes - before.io_bytes) / elapsed))
        directions[ddir] = direction
    return replace(job, directions=directions)


class State:
    def __init__(self, bounds: tuple[float, ...] | None = None) -> None:
        """``bounds``: the histograms' (Thresholds.bucket_bounds); default the shipped settings' ones."""
        self.bounds = bounds or shipped_bounds()
        self.lock = threading.Lock()
        self.jobs: dict[JobKey, JobState] = {}
        self.histograms: dict[JobKey, dict[HistKey, HistogramState]] = {}
        self._hold_new = False  # set once the startup scan is published: series new after it start at zero
        # bumped (under the lock) by every change of a job or histogram: the /metrics page is rendered again
        # only when it moved (collector/__init__.py)
        self.generation = 0

    def apply(self, contributions: list[Contribution]) -> None:
        with self.lock:
            for c in contributions:
                self._apply(c)
            self.generation += 1

    def _apply(self, c: Contribution) -> None:
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
            return
        hists = self.histograms.setdefault(c.key, {})
        for hkey, (counts, total) in c.histograms.items():
            hist = hists.get(hkey)
            if hist is None:
                hist = hists[hkey] = HistogramState(self.bounds, held=self._hold_new)
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
        with self.lock:
            for name in jobnames:
                state = self.jobs.setdefault((target, name, ""), JobState(device=device, counters_held=self._hold_new))
                state.running, state.live, state.start_timestamp = True, None, now
                state.device = device or state.device
                state.version += 1
            self.generation += 1

    def update_live(self, run: RunResult, target: str = "") -> None:
        """A periodic status report: shown with its figures since the previous report, not since the start."""
        with self.lock:
            for job in run.jobs:
                state = self.jobs.get((target, job.jobname, job.hostname))
                if state is None or not state.running:
                    continue
                state.live = job if state.live is None else per_interval(job, state.live)
                state.version += 1
                self.generation += 1

    def finish_run(self, jobnames: list[str], target: str = "") -> None:
        now = time.time()
        with self.lock:
            for name in jobnames:
                state = self.jobs.setdefault((target, name, ""), JobState(counters_held=self._hold_new))
                state.running, state.live = False, None
                state.end_timestamp = now
                state.version += 1
            self.generation += 1

    def live_jobs(self) -> dict[JobKey, tuple[str, JobResult]]:
        """The running jobs' device and latest status report, its rates since the report before (what the exporter
        publishes while fio runs)."""
        with self.lock:
            return {key: (state.device, state.live) for key, state in self.jobs.items() if state.running and state.live is not None}

    def hold_new_series(self) -> None:
        """From now on a new job's counters and a new histogram are marked held (shown at zero once).

        Called after the startup scan: what it read is shown with its totals at once, since
        Prometheus saw them before the restart and a zero would read as a counter reset.
        """
        with self.lock:
            self._hold_new = True

    def snapshot(self, unchanged: dict[JobKey, int] | None = None
                 ) -> tuple[dict[JobKey, JobState], dict[JobKey, dict[HistKey, HistogramState]]]:
        """Copies taken under the lock, so a scrape never sees half an update; nothing here changes.

        Histograms are copied only for jobs whose version differs from ``unchanged``.
        """
        unchanged = unchanged or {}
        with self.lock:
            jobs = {key: replace(state) for key, state in self.jobs.items()}
            hists = {key: {hkey: replace(h, buckets=list(h.buckets)) for hkey, h in self.histograms.get(key, {}).items()}
                     for key, state in self.jobs.items() if unchanged.get(key) != state.version}
        return jobs, hists
