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

import functools
import json
import math
import re
from decimal import Decimal
from pathlib import Path

from .model import DDIRS, STAGES, Direction, JobResult, Latency, RunResult
from .resultfile import (
    RESULT_KEY,
    Annotation,
    ResultFileError,
    check_label,
    check_list,
    check_mapping,
    check_number,
    check_text,
    check_timestamp,
    read_bytes,
)

_DECODER = json.JSONDecoder()
# fio options published as labels (fio_run_info) or used as the target: held to label length
LABEL_OPTIONS = frozenset({"rw", "readwrite", "bs", "iodepth", "numjobs", "ioengine", "directory", "filename"})
# fio's json+ has at most FIO_IO_U_PLAT_NR (1856) bins per latency
MAX_BINS = 4096
# jobs (or client_stats entries) in one report; the exporter takes the config's max_jobs_per_file
MAX_JOBS = 1000


class ParseError(ResultFileError):
    """The text is not usable fio output; the message says why in one line."""


class TruncatedError(ParseError):
    """The text ends inside a JSON document (a file still being written, or cut short)."""


def parse_file(path: str | Path, max_jobs: int = MAX_JOBS) -> list[RunResult]:
    """Every report in a file read the safe way (resultfile.read_bytes: no symlink, FIFO or huge file)."""
    return parse_text(read_bytes(Path(path)).decode("utf-8", errors="replace"), source=str(path), max_jobs=max_jobs)


def parse_text(text: str, source: str = "", max_jobs: int = MAX_JOBS) -> list[RunResult]:
    """All fio reports in ``text``, oldest first. Raises ParseError if there is none, or one has more than ``max_jobs`` jobs."""
    runs = [parse_document(doc, source, max_jobs) for doc in split_documents(text)]
    if not runs:
        lines = sum(1 for ln in text.splitlines() if ln.strip())
        if lines:  # the content is never quoted: a *.json that is not fio's may hold anything (secrets reach the log)
            raise ParseError(f"no fio JSON document found ({lines} non-empty line{'s' * (lines != 1)} of other text)")
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
        except RecursionError:
            raise ParseError(f"JSON document at offset {start} is nested too deeply") from None
        except json.JSONDecodeError as exc:
            if _only_whitespace_after_error(text, exc):
                raise TruncatedError(f"JSON document at offset {start} is truncated (file still being written?)") from None
            raise ParseError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise ParseError(f"invalid JSON at offset {start}: {str(exc)[:120]}") from None
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


def parse_document(doc: dict, source: str, max_jobs: int = MAX_JOBS) -> RunResult:
    """One fio report, validated completely: a wrong type or an insane value raises ParseError."""
    try:
        return _parse_document(doc, source, max_jobs)
    except ResultFileError as exc:
        raise ParseError(str(exc)) from None


def _parse_document(doc: dict, source: str, max_jobs: int) -> RunResult:
    version = doc.get("fio version", "")
    if not version:
        raise ParseError("JSON document has no 'fio version': not fio output")
    version = check_label(version, "fio version")
    if version.startswith("fio-2."):
        raise ParseError(f"{version} output (latencies in microseconds, no clat_ns) is not supported: need fio >= 3.0")
    global_opts = _options(doc.get("global options"), "global options")
    if "client_stats" in doc:
        entries = [check_mapping(e, "client_stats[]") for e in check_list(doc["client_stats"], "client_stats")]
        entries = [e for e in entries if e.get("jobname") != "All clients"]
    elif "jobs" in doc:
        entries = [check_mapping(e, "jobs[]") for e in check_list(doc["jobs"], "jobs")]
    else:
        raise ParseError(f"{version} document has neither 'jobs' nor 'client_stats'")
    if len(entries) > max_jobs:  # checked before any job is read: 5,000 jobs made every scrape 245 MiB
        raise ParseError(f"{len(entries)} jobs: more than the {max_jobs} a result file may hold (max_jobs_per_file)")
    timestamp = check_number(doc.get("timestamp_ms", 0), "timestamp_ms") / 1000
    timestamp = check_timestamp(timestamp or doc.get("timestamp", 0), "timestamp")
    annotation = Annotation.from_json(doc.get(RESULT_KEY))

    by_name: dict[tuple[str, str], list[JobResult]] = {}
    for entry in entries:
        job = _parse_job(entry, global_opts)
        by_name.setdefault((job.jobname, job.hostname), []).append(job)
    jobs = [group[0] if len(group) == 1 else _merge_jobs(group) for group in by_name.values()]
    return RunResult(fio_version=version, timestamp=timestamp, jobs=jobs, source=source, annotation=annotation)


def _options(raw, where: str) -> dict[str, str]:
    """fio's option strings; numbers are taken as fio prints them, anything else rejects the file."""
    options = {}
    for key, value in check_mapping(raw if raw is not None else {}, where).items():
        check_label(key, f"{where} key")
        if (isinstance(value, int) and not isinstance(value, bool) and value.bit_length() < 64) or \
                (isinstance(value, float) and math.isfinite(value)):
            value = str(value)
        options[key] = check_label(value, f"{where}.{key}") if key in LABEL_OPTIONS else check_text(value, f"{where}.{key}")
    return options


def _number(section: dict, key: str, where: str, *, integer: bool = False) -> float:
    value = section.get(key)
    return 0 if value is None else check_number(value, f"{where}.{key}", integer=integer)


def _parse_job(entry: dict, global_opts: dict[str, str]) -> JobResult:
    name = entry.get("jobname")
    if not isinstance(name, str):
        raise ParseError("job entry without 'jobname'")
    name = check_label(name, "jobname")
    where = f"job {name!r}"
    options = {**global_opts, **_options(entry.get("job options"), f"{where} job options")}
    job = JobResult(
        jobname=name,
        error=int(_number(entry, "error", where, integer=True)),
        runtime_seconds=_number(entry, "job_runtime", where) / 1000,
        options=options,
        hostname=check_label(entry.get("hostname", ""), f"{where} hostname"),
        elapsed_seconds=_number(entry, "elapsed", where),
    )
    for ddir in DDIRS:
        section = entry.get(ddir)
        if section is None:
            continue
        direction = _parse_direction(check_mapping(section, f"{where} {ddir}"), ddir, f"{where} {ddir}")
        if direction.total_ios or direction.latencies:  # skip directions the job never used
            job.directions[ddir] = direction
    sync = entry.get("sync")
    if sync is not None:
        sync = check_mapping(sync, f"{where} sync")
        if sync.get("lat_ns") is not None:
            lat = _parse_latency(check_mapping(sync["lat_ns"], f"{where} sync.lat_ns"),
                                 int(_number(sync, "total_ios", f"{where} sync", integer=True)), f"{where} sync.lat_ns")
            if lat is not None:
                job.directions["sync"] = Direction(
                    iops=lat.count / job.runtime_seconds if job.runtime_seconds else 0.0,
                    bandwidth_bytes=0.0,
                    io_bytes=0,
                    total_ios=lat.count,
                    latencies={"lat": lat},
                )
    return job


def _parse_direction(section: dict, ddir: str, where: str) -> Direction:
    if "clat_ns" not in section:
        raise ParseError(f"{where}: no 'clat_ns' (fio older than 3.0?)")
    total_ios = int(_number(section, "total_ios", where, integer=True))
    bandwidth = _number(section, "bw_bytes", where) if "bw_bytes" in section else _number(section, "bw", where) * 1024
    direction = Direction(
        iops=_number(section, "iops", where),
        bandwidth_bytes=bandwidth,
        io_bytes=int(_number(section, "io_bytes", where, integer=True)),
        total_ios=total_ios,
        iops_stddev=_number(section, "iops_stddev", where),
        bandwidth_stddev_bytes=_number(section, "bw_dev", where) * 1024,  # fio's bw_dev is in KiB/s
    )
    for stage in STAGES:
        raw = section.get(f"{stage}_ns")
        if raw is not None:
            lat = _parse_latency(check_mapping(raw, f"{where}.{stage}_ns"), total_ios, f"{where}.{stage}_ns")
            if lat is not None:
                direction.latencies[stage] = lat
    return direction


def _parse_latency(raw: dict, total_ios: int, where: str) -> Latency | None:
    bins: dict[int, int] = {}
    raw_bins = check_mapping(raw.get("bins") if raw.get("bins") is not None else {}, f"{where}.bins")
    if len(raw_bins) > MAX_BINS:
        raise ParseError(f"{where}.bins: {len(raw_bins)} bins, fio writes at most {MAX_BINS}")
    counts = list(raw_bins.values())
    if all(type(n) is int for n in counts) and (not counts or (min(counts) >= 0 and max(counts) <= 1e18)) \
            and all(key.isascii() and key.isdigit() and len(key) <= 16 for key in raw_bins):
        bins = dict(zip(map(int, raw_bins), counts))  # the common case, checked in bulk: json+ has ~1000 bins per latency
    else:
        for key, n in raw_bins.items():
            if not (key.isascii() and key.isdigit() and len(key) <= 16):
                raise ParseError(f"{where}.bins: key {key[:40]!r} is not a latency in nanoseconds")
            bins[int(key)] = int(check_number(n, f"{where}.bins[{key}]", integer=True))
    percentiles = {}
    for key, value in check_mapping(raw.get("percentile") if raw.get("percentile") is not None else {}, f"{where}.percentile").items():
        percentiles[quantile_label(key)] = check_number(value, f"{where}.percentile[{key}]") / 1e9
    lat = Latency(
        count=0,
        mean_seconds=_number(raw, "mean", where) / 1e9,
        min_seconds=_number(raw, "min", where) / 1e9,
        max_seconds=_number(raw, "max", where) / 1e9,
        stddev_seconds=_number(raw, "stddev", where) / 1e9,
        percentiles=percentiles,
        bins_ns=bins,
    )
    if "N" in raw:
        lat.count = int(check_number(raw["N"], f"{where}.N", integer=True))
    elif bins:
        lat.count = sum(bins.values())
    else:  # fio 3.0-3.17: no N
        lat.count = total_ios
    # a stage that did not happen (e.g. slat of a sync engine) is left out; older fio leaves zeros
    return lat if lat.count > 0 else None


# fio prints percentile keys with "%f": "99.000000", "99.990000", "100.000000"
_PERCENT_KEY = re.compile(r"[0-9]{1,3}\.[0-9]{6}", re.ASCII)


@functools.lru_cache(maxsize=1024)  # fio repeats the same ~20 keys in every latency object
def quantile_label(percent: str) -> str:
    """fio's "99.990000" -> "0.9999" (exact decimal, no float noise); ParseError unless fio's format in (0, 100].

    Only fio's own format: a key like "1e-999990" is in range, yet its exact label has a million digits.
    """
    if not isinstance(percent, str) or not _PERCENT_KEY.fullmatch(percent):
        raise ParseError(f"percentile key {str(percent)[:40]!r} is not a percentage as fio writes it (e.g. 99.000000)")
    value = Decimal(percent)
    if not 0 < value <= 100:
        raise ParseError(f"percentile key {percent!r} is not in (0, 100]")
    return format((value / 100).normalize(), "f")  # at most 10 characters: "0.00000001"


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
        elapsed_seconds=max(j.elapsed_seconds for j in group),
        entries=len(group),
    )
    ddirs = {d for j in group for d in j.directions}
    for ddir in ddirs:
        parts = [j.directions[ddir] for j in group if ddir in j.directions]
        direction = Direction(
            iops=sum(p.iops for p in parts),
            bandwidth_bytes=sum(p.bandwidth_bytes for p in parts),
            io_bytes=sum(p.io_bytes for p in parts),
            total_ios=sum(p.total_ios for p in parts),
            # independent threads: variances add
            iops_stddev=math.sqrt(sum(p.iops_stddev ** 2 for p in parts)),
            bandwidth_stddev_bytes=math.sqrt(sum(p.bandwidth_stddev_bytes ** 2 for p in parts)),
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
        # pooled within-thread spread, weighted by count
        stddev_seconds=math.sqrt(sum(lat.stddev_seconds ** 2 * lat.count for lat in lats) / count),
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
        self.last_run: RunResult | None = None  # the last document parsed; None if that one is unreadable

    def feed(self, text: str) -> list[RunResult]:
        self._buffer += text
        runs: list[RunResult] = []
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
            except RecursionError:
                raise ParseError("status report nested too deeply") from None
            except json.JSONDecodeError:
                self._buffer = self._buffer[start:]  # incomplete: wait for more text
                return runs
            self._buffer = self._buffer[end:]
            if isinstance(doc, dict):
                self.last_document, self.last_run = doc, None
                self.last_run = parse_document(doc, self.source)
                runs.append(self.last_run)
