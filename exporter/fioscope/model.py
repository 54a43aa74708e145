"""Plain data objects shared by the parser, the store and the collector."""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class JobResult:
    """One job of one fio run (entries of a numjobs job are merged)."""

    jobname: str
    error: int
    runtime_seconds: float
    options: dict[str, str]
    directions: dict[str, Direction] = field(default_factory=dict)  # ddir -> Direction
    hostname: str = ""

    @property
    def total_iops(self) -> float:
        return sum(d.iops for k, d in self.directions.items() if k in ("read", "write", "trim"))


@dataclass
class RunResult:
    """One fio output document: the jobs it reports and when it ended."""

    fio_version: str
    timestamp: float  # unix seconds at which fio wrote the report (end of run)
    jobs: list[JobResult]
    source: str = ""  # file the result came from
    # what fioscope wrote beside fio's report: target, device, declared limits, SLA
    annotation: Annotation = field(default_factory=lambda: Annotation(present=False))
