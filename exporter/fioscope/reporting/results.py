"""fio result files -> measured points of response curves.

Reads fioscope's result files and anybody's fio JSON (``--output-format=json`` or ``json+``,
fio >= 3.0). A point is one job of one run, in one data direction: IOPS, bandwidth, mean and
p99 completion latency, each with fio's own spread (``iops_stddev``, ``bw_dev``, the
``clat_ns`` standard deviation). Points of the same workload at the same queue depth are
repeats. Identity follows docs/contracts.md: a result is keyed by (target, jobname, hostname);
the target comes from the ``fioscope`` annotation, else from the job's ``directory``.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..model import DDIRS
from ..parser import split_documents
from ..resultfile import RESULT_KEY, Annotation
from . import ReportError

log = logging.getLogger("fioscope.report")

MAX_FILE_BYTES = 64 * 2**20


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


def load_results(directory: str | Path, flag: str = "--results") -> list[Sample]:
    """Every point in the ``*.json`` files directly in ``directory``; a bad file is logged and skipped."""
    root = Path(directory)
    if not root.is_dir():
        raise ReportError(f"{flag} {directory}: not a directory")
    samples: list[Sample] = []
    for path in sorted(root.glob("*.json")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            samples.extend(_load_file(path))
        except (OSError, ValueError) as exc:
            log.warning("%s: skipped: %s", path, exc)
    if not samples:
        raise ReportError(f"{flag} {directory}: no fio results (no *.json file with fio jobs that did I/O)")
    return samples


def _load_file(path: Path) -> list[Sample]:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
    text = path.read_text(errors="replace")
    if path.name.endswith(".failure.json"):
        return []
    docs = [d for d in split_documents(text) if isinstance(d, dict) and d.get("fio version")]
    if not docs:
        raise ValueError("not fio JSON output")
    doc = docs[-1]  # the final report; earlier ones are --status-interval snapshots
    annotation = Annotation.from_json(doc.get(RESULT_KEY), RESULT_KEY)  # a malformed one skips the file, as the exporter does
    global_opts = {str(k): str(v) for k, v in (doc.get("global options") or {}).items()}
    entries = doc.get("client_stats") or doc.get("jobs") or []
    groups: dict[tuple[str, str], list[dict]] = {}
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("jobname"), str) and entry.get("jobname") != "All clients":
            groups.setdefault((entry["jobname"], str(entry.get("hostname", ""))), []).append(entry)
    samples = []
    for (jobname, hostname), group in groups.items():
        options = {**global_opts, **{str(k): str(v) for k, v in (group[0].get("job options") or {}).items()}}
        target = annotation.target or options.get("directory") or options.get("filename") or ""
        for ddir in DDIRS:
            sections = [e[ddir] for e in group if isinstance(e.get(ddir), dict) and e[ddir].get("total_ios")]
            if sections:
                samples.append(_sample(sections, Workload(target, hostname, options.get("rw", options.get("readwrite", "read")),
                                                          options.get("bs", "4k"), ddir),
                                       options, len(group), jobname, str(path), annotation))
    return samples


def _sample(sections: list[dict], workload: Workload, options: dict[str, str], entries: int, jobname: str,
            source: str, annotation: Annotation) -> Sample:
    """fio's figures for one direction; several entries (numjobs without group_reporting) add up."""
    def num(section: dict, *keys: str) -> float:
        value: object = section
        for key in keys:
            value = value.get(key, 0) if isinstance(value, dict) else 0
        return float(value or 0)  # type: ignore[arg-type]

    ios = [num(s, "total_ios") for s in sections]
    weight = sum(ios) or 1.0
    numjobs = int(options.get("numjobs", "1") or 1) if entries == 1 else entries
    return Sample(
        workload=workload,
        depth=int(options.get("iodepth", "1") or 1) * numjobs,
        jobname=jobname,
        source=source,
        iops=sum(num(s, "iops") for s in sections),
        iops_sd=math.sqrt(sum(num(s, "iops_stddev") ** 2 for s in sections)),
        bw_bytes=sum(num(s, "bw_bytes") or num(s, "bw") * 1024 for s in sections),
        bw_sd_bytes=math.sqrt(sum((num(s, "bw_dev") * 1024) ** 2 for s in sections)),
        lat_mean=sum(num(s, "clat_ns", "mean") * n for s, n in zip(sections, ios)) / weight / 1e9,
        lat_sd=math.sqrt(sum(num(s, "clat_ns", "stddev") ** 2 * n for s, n in zip(sections, ios)) / weight) / 1e9,
        lat_p99=max(num(s, "clat_ns", "percentile", "99.000000") for s in sections) / 1e9,
        tags=dict(annotation.tags),
    )


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
    return chosen

