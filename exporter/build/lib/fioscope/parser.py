"""fio JSON / json+ text -> RunResult objects. Pure: no I/O besides reading a file.

Every quirk of fio's output is handled here, once:
- text before the JSON (``note: ...``, ``fio: ...`` warnings) is skipped;
- ``--status-interval`` writes several documents back to back: each becomes a RunResult;
- a truncated document (a file still being written) raises ``TruncatedError``;
- ``numjobs`` without ``group_reporting`` gives several entries with one name: they are merged;
- ``unified_rw_reporting`` gives a ``mixed`` direction;
- client/server output has ``client_stats`` (with ``hostname``) instead of ``jobs``;
- fio 2.x (latencies in microseconds, no ``*_ns`` keys) is rejected, not misread;
- ``sync.total_ios`` is 0 even when fdatasync ran: counts come from ``lat_ns.N`` or the bins.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path

from .model import DDIRS, Direction, JobResult, Latency, RunResult

_DECODER = json.JSONDecoder()


class ParseError(ValueError):
    """The text is not usable fio output; the message says why in one line."""


class TruncatedError(ParseError):
    """The text ends inside a JSON document (a file still being written, or cut short)."""


def parse_file(path: str | Path) -> list[RunResult]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ParseError(f"cannot read: {exc.strerror}") from exc
    return parse_text(text, source=str(path))


def parse_text(text: str, source: str = "") -> list[RunResult]:
    """All fio reports in ``text``, oldest first. Raises ParseError if there is none."""
    runs = [parse_document(doc, source) for doc in split_documents(text)]
    if not runs:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        if first:
            raise ParseError(f"no fio JSON document found (starts with: {first[:120]!r})")
        raise ParseError("empty file")
    return runs


def split_documents(text: str) -> list[dict]:
    """JSON objects that start a line, in order; lines of other text between them are skipped."""
    docs = []
    pos = 0
    n = len(text)
    while pos < n:
        start = _next_object_start(text, pos)
        if start < 0:
            break
        try:
            doc, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            if _only_whitespace_after_error(text, exc):
                raise TruncatedError(f"JSON document at offset {start} is truncated (file still being written?)") from None
            raise ParseError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        if isinstance(doc, dict):
            docs.append(doc)
        pos = end
    return docs


def _next_object_start(text: str, pos: int) -> int:
    """Offset of the next '{' that begins a line (fio starts every document on its own line)."""
    while True:
        idx = text.find("{", pos)
        if idx < 0:
            return -1
        line_start = text.rfind("\n", 0, idx) + 1
        if text[line_start:idx].strip() == "":
            return idx
        pos = text.find("\n", idx)
        if pos < 0:
            return -1


def _only_whitespace_after_error(text: str, exc: json.JSONDecodeError) -> bool:
    """Did the text simply end (a number or string cut short), rather than go wrong mid-way?"""
    end = len(text.rstrip())
    if exc.msg.startswith("Unterminated string") or exc.pos >= end:
        return True
    return exc.pos >= end - 2 and text[exc.pos] not in "}]"


def parse_document(doc: dict, source: str) -> RunResult:
    version = str(doc.get("fio version", ""))
    if not version:
        raise ParseError("JSON document has no 'fio version': not fio output")
    if version.startswith("fio-2."):
        raise ParseError(f"{version} output (latencies in microseconds, no clat_ns) is not supported: need fio >= 3.0")
    if "client_stats" in doc:
        entries = [e for e in doc["client_stats"] if e.get("jobname") != "All clients"]
        global_opts = doc.get("global options", {})
    elif "jobs" in doc:
        entries = doc["jobs"]
        global_opts = doc.get("global options", {})
    else:
        raise ParseError(f"{version} document has neither 'jobs' nor 'client_stats'")
    timestamp = float(doc.get("timestamp_ms", 0)) / 1000 or float(doc.get("timestamp", 0))

    by_name: dict[tuple[str, str], list[JobResult]] = {}
    for entry in entries:
        job = _parse_job(entry, global_opts)
        by_name.setdefault((job.jobname, job.hostname), []).append(job)
    jobs = [group[0] if len(group) == 1 else _merge_jobs(group) for group in by_name.values()]
    return RunResult(fio_version=version, timestamp=timestamp, jobs=jobs, source=source,
                     annotations=doc.get("fioscope") or {})


def _parse_job(entry: dict, global_opts: dict) -> JobResult:
    name = entry.get("jobname")
    if not isinstance(name, str):
        raise ParseError("job entry without 'jobname'")
    options = {str(k): str(v) for k, v in global_opts.items()}
    options.update({str(k): str(v) for k, v in entry.get("job options", {}).items()})
    job = JobResult(
        jobname=name,
        error=int(entry.get("error", 0) or 0),
        runtime_seconds=float(entry.get("job_runtime", 0) or 0) / 1000,
        options=options,
        hostname=str(entry.get("hostname", "")),
    )
    for ddir in DDIRS:
        section = entry.get(ddir)
        if isinstance(section, dict):
            direction = _parse_direction(section, ddir, name)
            if direction.total_ios or direction.latencies:  # skip directions the job never used
                job.directions[ddir] = direction
    sync = entry.get("sync")
    if isinstance(sync, dict) and isinstance(sync.get("lat_ns"), dict):
        lat = _parse_latency(sync["lat_ns"], int(sync.get("total_ios", 0) or 0))
        if lat is not None:
            job.directions["sync"] = Direction(
                iops=lat.count / job.runtime_seconds if job.runtime_seconds else 0.0,
                bandwidth_bytes=0.0,
                io_bytes=0,
                total_ios=lat.count,
                latencies={"lat": lat},
            )
    return job


def _parse_direction(section: dict, ddir: str, jobname: str) -> Direction:
    if "clat_ns" not in section:
        raise ParseError(f"job {jobname!r} {ddir}: no 'clat_ns' (fio older than 3.0?)")
    total_ios = int(section.get("total_ios", 0) or 0)
    direction = Direction(
        iops=float(section.get("iops", 0) or 0),
        bandwidth_bytes=float(section.get("bw_bytes", float(section.get("bw", 0) or 0) * 1024)),
        io_bytes=int(section.get("io_bytes", 0) or 0),
        total_ios=total_ios,
    )
    for stage in ("slat", "clat", "lat"):
        raw = section.get(f"{stage}_ns")
        if isinstance(raw, dict):
            lat = _parse_latency(raw, total_ios)
            if lat is not None:
                direction.latencies[stage] = lat
    return direction


def _parse_latency(raw: dict, total_ios: int) -> Latency | None:
    bins = {int(k): int(v) for k, v in (raw.get("bins") or {}).items()}
    if "N" in raw:
        count = int(raw["N"])
    elif bins:
        count = sum(bins.values())
    else:  # fio 3.0-3.17: no N
        count = total_ios
    if count <= 0:
        return None  # the stage did not happen (e.g. slat of a sync engine); older fio leaves zeros
    percentiles = {
        quantile_label(p): float(v) / 1e9 for p, v in (raw.get("percentile") or {}).items()
    }
    return Latency(
        count=count,
        mean_seconds=float(raw.get("mean", 0)) / 1e9,
        min_seconds=float(raw.get("min", 0)) / 1e9,
        max_seconds=float(raw.get("max", 0)) / 1e9,
        percentiles=percentiles,
        bins_ns=bins,
    )


def quantile_label(percent: str) -> str:
    """fio's "99.990000" -> "0.9999" (exact decimal, no float noise)."""
    value = (Decimal(percent) / 100).normalize()
    return format(value, "f")


def _merge_jobs(group: list[JobResult]) -> JobResult:
    """numjobs without group_reporting: sum throughput, merge latencies.

    Means are weighted by count; merged json+ bins give exact percentiles;
    without bins the worst per-thread percentile is kept (an upper bound).
    """
    first = group[0]
    merged = JobResult(
        jobname=first.jobname,
        error=max(j.error for j in group),
        runtime_seconds=max(j.runtime_seconds for j in group),
        options=first.options,
        hostname=first.hostname,
    )
    ddirs = {d for j in group for d in j.directions}
    for ddir in ddirs:
        parts = [j.directions[ddir] for j in group if ddir in j.directions]
        direction = Direction(
            iops=sum(p.iops for p in parts),
            bandwidth_bytes=sum(p.bandwidth_bytes for p in parts),
            io_bytes=sum(p.io_bytes for p in parts),
            total_ios=sum(p.total_ios for p in parts),
        )
        stages = {s for p in parts for s in p.latencies}
        for stage in stages:
            lats = [p.latencies[stage] for p in parts if stage in p.latencies]
            direction.latencies[stage] = _merge_latencies(lats)
        merged.directions[ddir] = direction
    return merged


def _merge_latencies(lats: list[Latency]) -> Latency:
    count = sum(lat.count for lat in lats)
    bins: dict[int, int] = {}
    for lat in lats:
        for value, n in lat.bins_ns.items():
            bins[value] = bins.get(value, 0) + n
    labels = set().union(*(lat.percentiles for lat in lats))
    if bins and all(lat.bins_ns for lat in lats):
        percentiles = {q: percentile_from_bins(bins, float(q)) / 1e9 for q in labels}
    else:
        percentiles = {q: max(lat.percentiles.get(q, 0.0) for lat in lats) for q in labels}
    return Latency(
        count=count,
        mean_seconds=sum(lat.mean_seconds * lat.count for lat in lats) / count,
        min_seconds=min(lat.min_seconds for lat in lats),
        max_seconds=max(lat.max_seconds for lat in lats),
        percentiles=percentiles,
        bins_ns=bins,
    )


def percentile_from_bins(bins_ns: dict[int, int], quantile: float) -> float:
    """The bin value at which the cumulative count reaches ``quantile`` (fio's own method)."""
    total = sum(bins_ns.values())
    rank = max(1, math.ceil(quantile * total))
    seen = 0
    for value in sorted(bins_ns):
        seen += bins_ns[value]
        if seen >= rank:
            return float(value)
    return float(max(bins_ns))


class DocumentStream:
    """Incremental splitter for fio's stdout under --status-interval: feed text, get finished reports."""

    def __init__(self, source: str = "fio stdout"):
        self.source = source
        self._buffer = ""
        self.last_document: dict | None = None

    def feed(self, text: str) -> list[RunResult]:
        self._buffer += text
        runs = []
        # fio closes each document with "}" at the start of a line: decode only then,
        # not on every line of a large json+ report
        if not (text.startswith("}") or "\n}" in text):
            return runs
        while True:
            start = _next_object_start(self._buffer, 0)
            if start < 0:
                # keep a partial last line: it may become the start of a document
                self._buffer = self._buffer[self._buffer.rfind("\n") + 1:]
                return runs
            try:
                doc, end = _DECODER.raw_decode(self._buffer, start)
            except json.JSONDecodeError:
                self._buffer = self._buffer[start:]  # incomplete: wait for more text
                return runs
            self._buffer = self._buffer[end:]
            if isinstance(doc, dict):
                self.last_document = doc
                runs.append(parse_document(doc, self.source))
