"""fio result files -> measured points of response curves.

Reads fioscope's result files and anybody's fio JSON (``--output-format=json`` or ``json+``,
fio >= 3.0) through the exporter's own parser (``fioscope.parser``), so a report sees exactly
what ``/metrics`` shows and a file the exporter rejects is skipped here too (fio 2.x, a
non-number, NaN). A point is one job of one run, in one data direction: IOPS, bandwidth, mean
and p99 completion latency, each with fio's own spread (``iops_stddev``, ``bw_dev``, the
``clat_ns`` standard deviation). Points of the same workload at the same queue depth are
repeats. Identity follows docs/contracts.md: a result is keyed by (target, jobname, hostname);
the target comes from the ``fioscope`` annotation, else from the job's ``directory``.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..model import DDIRS, RunResult
from ..parser import parse_file
from ..resultfile import ResultFileError, is_failure_name
from . import ReportError

log = logging.getLogger("fioscope.report")


@dataclass(frozen=True)
class Workload:
    """What a response curve is drawn for: one access pattern on one target."""

    target: str
    hostname: str
    rw: str
    bs: str
    ddir: str

    @property
    def title(self) -> str:
        where = self.target + (f" on {self.hostname}" if self.hostname else "")
        return f"{self.rw} {self.bs} {self.ddir} — {where or 'unknown target'}"

    @property
    def slug(self) -> str:
        raw = "-".join(x for x in (self.target, self.hostname, self.rw, self.bs, self.ddir) if x)
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in raw)[:120] or "workload"


@dataclass
class Sample:
    """One job of one run, one data direction."""

    workload: Workload
    depth: int  # iodepth x numjobs: requests the workload keeps in flight
    jobname: str
    source: str
    iops: float
    iops_sd: float
    bw_bytes: float
    bw_sd_bytes: float
    lat_mean: float  # seconds, completion latency
    lat_sd: float
    lat_p99: float
    tags: dict = field(default_factory=dict)


@dataclass
class Point:
    """All repeats of one workload at one queue depth, with the spread to draw as error bars."""

    depth: int
    samples: list[Sample]

    def _mean(self, attr: str) -> float:
        return statistics.fmean(getattr(s, attr) for s in self.samples)

    def _spread(self, attr: str, fio_sd: str | None) -> float:
        """Across repeats where there are some; else fio's own interval standard deviation."""
        if len(self.samples) > 1:
            return statistics.stdev(getattr(s, attr) for s in self.samples)
        return getattr(self.samples[0], fio_sd) if fio_sd else 0.0

    @property
    def repeats(self) -> int:
        return len(self.samples)

    @property
    def iops(self) -> float:
        return self._mean("iops")

    @property
    def iops_sd(self) -> float:
        return self._spread("iops", "iops_sd")

    @property
    def bw(self) -> float:
        return self._mean("bw_bytes")

    @property
    def bw_sd(self) -> float:
        return self._spread("bw_bytes", "bw_sd_bytes")

    @property
    def lat_mean(self) -> float:
        return self._mean("lat_mean")

    @property
    def lat_sd(self) -> float:
        return self._spread("lat_mean", "lat_sd")

    @property
    def lat_p99(self) -> float:
        return self._mean("lat_p99")

    @property
    def p99_sd(self) -> float:
        # fio gives no spread of a percentile; one run's clat stddev bounds it from above
        return self._spread("lat_p99", "lat_sd")


def curves(samples: Iterable[Sample]) -> dict[Workload, list[Point]]:
    """Samples grouped per workload, one point per queue depth, by rising depth."""
    grouped: dict[Workload, dict[int, list[Sample]]] = {}
    for s in samples:
        grouped.setdefault(s.workload, {}).setdefault(s.depth, []).append(s)
    return {w: [Point(d, ss) for d, ss in sorted(by_depth.items())] for w, by_depth in sorted(grouped.items(), key=lambda kv: kv[0].title)}


class Results(list[Sample]):
    """The samples of a results directory, and the files that were skipped (``"name: why"``), for the report to state."""

    def __init__(self, samples: Iterable[Sample] = (), skipped: Iterable[str] = ()):
        super().__init__(samples)
        self.skipped = list(skipped)


def read_runs(directory: str | Path, flag: str = "--results") -> tuple[list[RunResult], list[str]]:
    """The final fio report of every ``*.json`` file directly in ``directory``, read by the exporter's own parser
    (resultfile's size cap, no symlinks, every fio quirk handled once); a bad file is skipped with one warning
    naming it, and listed in the second value."""
    root = Path(directory)
    if not root.is_dir():
        raise ReportError(f"{flag} {directory}: not a directory")
    runs: list[RunResult] = []
    skipped: list[str] = []
    for path in sorted(root.glob("*.json")):
        if is_failure_name(path.name) or path.is_symlink() or not path.is_file():
            continue
        try:
            runs.append(parse_file(path)[-1])  # earlier reports are --status-interval snapshots
        except ResultFileError as exc:
            log.warning("%s: skipped: %s", path, exc)
            skipped.append(f"{path.name}: {exc}")
    return runs, skipped


def load_results(directory: str | Path, flag: str = "--results") -> Results:
    """Every point in the ``*.json`` files directly in ``directory``; a bad file is logged, skipped and counted."""
    runs, skipped = read_runs(directory, flag)
    samples = Results((s for run in runs for s in run_samples(run)), skipped)
    if not samples:
        raise ReportError(f"{flag} {directory}: no fio results (no *.json file with fio jobs that did I/O)")
    return samples


MAX_NAMED_SKIPS = 5


def skipped_lines(*sides: list[Sample]) -> list[str]:
    """The result files left out (not fio >= 3 output, a non-number or NaN figure...): counted, the first few named."""
    skipped = [s for side in sides for s in getattr(side, "skipped", [])]
    if not skipped:
        return []
    more = f"; {len(skipped) - MAX_NAMED_SKIPS} more in the log" if len(skipped) > MAX_NAMED_SKIPS else ""
    return [f"{len(skipped)} result file(s) skipped, not usable: " + "; ".join(skipped[:MAX_NAMED_SKIPS]) + more]


def run_samples(run: RunResult) -> list[Sample]:
    """One sample per job and data direction that did I/O."""
    samples = []
    for job in run.jobs:
        options = job.options
        target = run.annotation.target or options.get("directory") or options.get("filename") or ""
        numjobs = int(options.get("numjobs", "1") or 1) if job.entries == 1 else job.entries
        for ddir in DDIRS:
            direction = job.directions.get(ddir)
            if direction is None or not direction.total_ios:
                continue
            clat = direction.latencies.get("clat")
            workload = Workload(target, job.hostname, options.get("rw", options.get("readwrite", "read")), options.get("bs", "4k"), ddir)
            samples.append(Sample(
                workload=workload,
                depth=int(options.get("iodepth", "1") or 1) * numjobs,
                jobname=job.jobname,
                source=run.source,
                iops=direction.iops,
                iops_sd=direction.iops_stddev,
                bw_bytes=direction.bandwidth_bytes,
                bw_sd_bytes=direction.bandwidth_stddev_bytes,
                lat_mean=clat.mean_seconds if clat else 0.0,
                lat_sd=clat.stddev_seconds if clat else 0.0,
                lat_p99=job.percentile(ddir, "clat") or 0.0,
                tags=dict(run.annotation.tags),
            ))
    return samples


def select(samples: list[Sample], selector: str, flag: str) -> list[Sample]:
    """``target=NAME`` or ``tag:KEY=VALUE`` picks samples of one results directory."""
    key, sep, value = selector.partition("=")
    if not sep:
        raise ReportError(f"{flag} {selector!r}: expected a directory, target=NAME or tag:KEY=VALUE")
    if key == "target":
        chosen = [s for s in samples if s.workload.target == value]
    elif key.startswith("tag:"):
        chosen = [s for s in samples if s.tags.get(key[4:]) == value]
    else:
        raise ReportError(f"{flag} {selector!r}: expected target=NAME or tag:KEY=VALUE")
    if not chosen:
        raise ReportError(f"{flag} {selector!r}: no result matches")
    return Results(chosen, getattr(samples, "skipped", []))

