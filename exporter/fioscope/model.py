"""Plain data objects shared by the parser, the store and the collector."""

from __future__ import annotations

from dataclasses import dataclass, field

from fioscope_mixin.units import UnitError, parse_duration

from .resultfile import Annotation

# fio's data directions as they appear in its JSON; `mixed` comes from
# unified_rw_reporting, `sync` holds the fsync/fdatasync latencies.
DDIRS = ("read", "write", "trim", "mixed")
STAGES = ("slat", "clat", "lat")


@dataclass
class Latency:
    """One latency section of fio (e.g. write.clat_ns), converted to seconds."""

    count: int
    mean_seconds: float
    min_seconds: float
    max_seconds: float
    stddev_seconds: float = 0.0  # fio's standard deviation of this latency over the run
    # quantile (0.99, as a string label "0.99") -> seconds, exactly as fio reported
    percentiles: dict[str, float] = field(default_factory=dict)
    # fio json+ bins: upper-ish value in nanoseconds -> count (empty for plain json)
    bins_ns: dict[int, int] = field(default_factory=dict)

    @property
    def sum_seconds(self) -> float:
        return self.mean_seconds * self.count


@dataclass
class Direction:
    """What fio reported for one data direction of one job."""

    iops: float
    bandwidth_bytes: float
    io_bytes: int
    total_ios: int
    latencies: dict[str, Latency] = field(default_factory=dict)  # stage -> Latency
    # fio's spread of its per-interval samples (iops_stddev, bw_dev): the reports' error bars of a single run
    iops_stddev: float = 0.0
    bandwidth_stddev_bytes: float = 0.0


@dataclass
class JobResult:
    """One job of one fio run (entries of a numjobs job are merged)."""

    jobname: str
    error: int
    runtime_seconds: float
    options: dict[str, str]
    directions: dict[str, Direction] = field(default_factory=dict)  # ddir -> Direction
    hostname: str = ""
    elapsed_seconds: float = 0.0  # wall clock from the job's start, ramp included (fio's ``elapsed``)
    entries: int = 1  # fio entries merged into this job (numjobs without group_reporting)

    @property
    def total_iops(self) -> float:
        return sum(d.iops for k, d in self.directions.items() if k in ("read", "write", "trim"))

    @property
    def wall_seconds(self) -> float:
        """How long the job did I/O, ramp included: fio's job_runtime plus ramp_time where that is one job's time
        (job_runtime adds up numjobs clones under group_reporting), else the whole seconds of ``elapsed`` (which also
        counts fio's setup, e.g. laying out files)."""
        try:
            ramp = parse_duration(self.options.get("ramp_time", 0) or 0)
        except UnitError:
            ramp = 0.0
        if self.runtime_seconds and (not self.elapsed_seconds or self.runtime_seconds + ramp <= self.elapsed_seconds + 1):
            return self.runtime_seconds + ramp
        return self.elapsed_seconds or self.runtime_seconds

    def percentile(self, ddir: str, stage: str, quantile: str = "0.99") -> float | None:
        """A latency percentile in seconds (``quantile`` as a label: "0.99"), None where fio gave none."""
        direction = self.directions.get(ddir)
        latency = direction.latencies.get(stage) if direction else None
        return latency.percentiles.get(quantile) if latency else None


@dataclass
class RunResult:
    """One fio output document: the jobs it reports and when it ended."""

    fio_version: str
    timestamp: float  # unix seconds at which fio wrote the report (end of run)
    jobs: list[JobResult]
    source: str = ""  # file the result came from
    # what fioscope wrote beside fio's report: target, device, declared limits, SLA
    annotation: Annotation = field(default_factory=lambda: Annotation(present=False))

    @property
    def end_timestamp(self) -> float:
        return self.timestamp

    @property
    def start_timestamp(self) -> float:
        """When the run began: its end minus its longest job's wall clock."""
        return self.timestamp - max((j.wall_seconds for j in self.jobs), default=0.0)
