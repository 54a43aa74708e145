"""The result-file format (docs/contracts.md section 2): the one module that writes and reads it.

- a **result** ``<profile>-<target>-<stamp>.json``: fio's report plus the ``fioscope`` annotation;
- a **failure record** ``<profile>-<target>-<stamp>.failure.json``: fio left no report;
- a **running marker** ``<profile>-<target>-<stamp>.running``: a run in progress. Not ``*.json``,
  so never read as a result; a marker whose writer died becomes a failure record
  (``recover_interrupted``), so a run cut short by a crash is counted as failed, not lost.

Reading is defensive: only regular files directly in the results directory, never through a
symlink, at most ``MAX_FILE_BYTES``; every field is validated before anything uses it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import stat
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from .config import ConfigError, Limits, parse_limits
from .lifetime import reap

log = logging.getLogger("fioscope.resultfile")

SCHEMA = 1
RESULT_KEY = "fioscope"
FAILURE_KEY = "fioscope_failure"
RUNNING_KEY = "fioscope_running"
FAILURE_SUFFIX = ".failure.json"
RUNNING_SUFFIX = ".running"
# a larger file is rejected unread: fio's json+ writes only the bins it filled, so a real report
# is tens of KiB per job; parsing costs ~10x the file size in memory (a 50 MB file: ~500 MiB)
MAX_FILE_BYTES = 16 * 2**20
# label values (job names, targets, fio options shown as labels) longer than this are rejected
MAX_LABEL_CHARS = 256
# other text (fio option values, messages) is bounded too
MAX_TEXT_CHARS = 4096
# a timestamp further ahead than this is not a clock skew but garbage
MAX_FUTURE_SECONDS = 86400.0


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class ResultFileError(ValueError):
    """The file or one of its fields is unusable; the message says which and why, in one line."""


# ---- validation of values read from a file ---------------------------------------------------
def check_text(value, where: str, limit: int = MAX_TEXT_CHARS) -> str:
    """Text that can go into a log line or a label: str, bounded, no lone surrogates or controls."""
    if not isinstance(value, str):
        raise ResultFileError(f"{where}: expected text, got {type(value).__name__}")
    if len(value) > limit:
        raise ResultFileError(f"{where}: text longer than {limit} characters")
    bad = _UNPRINTABLE.search(value)
    if bad:
        raise ResultFileError(f"{where}: contains control character or lone surrogate {bad.group()!a}")
    return value


def printable(text: str) -> str:
    """``text`` with lone surrogates (undecodable bytes of a file name) and control characters escaped
    (``\\xff``): safe for a label, a log line, JSON and a terminal."""
    return text if not _UNPRINTABLE.search(text) else _UNPRINTABLE.sub(lambda m: ascii(m.group())[1:-1].replace("\\udc", "\\x"), text)


def check_label(value, where: str) -> str:
    return check_text(value, where, MAX_LABEL_CHARS)


def check_number(value, where: str, *, integer: bool = False, limit: float = 1e18) -> float:
    """A finite, non-negative JSON number below ``limit`` (NaN, 1e400, -1, "5" and true are rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ResultFileError(f"{where}: expected a number, got {type(value).__name__}")
    if isinstance(value, int):
        if not 0 <= value <= limit:
            raise ResultFileError(f"{where}: {value if abs(value) < 1e30 else 'huge number'} out of range [0, {limit:g}]")
        return int(value) if integer else float(value)
    if not math.isfinite(value) or not 0 <= value <= limit:
        raise ResultFileError(f"{where}: {value!r} is not a finite number in [0, {limit:g}]")
    if integer:
        if value != int(value):
            raise ResultFileError(f"{where}: {value!r} is not a whole number")
        return int(value)
    return float(value)


def check_timestamp(value, where: str) -> float:
    """Unix seconds, not NaN, not negative, not far in the future (it would hide later results)."""
    seconds = check_number(value, where, limit=time.time() + MAX_FUTURE_SECONDS)
    return float(seconds)


def check_mapping(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise ResultFileError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def check_list(value, where: str) -> list:
    if not isinstance(value, list):
        raise ResultFileError(f"{where}: expected a list, got {type(value).__name__}")
    return value


# ---- the annotation -------------------------------------------------------------------------
@dataclass(frozen=True)
class Annotation:
    """What fioscope writes beside fio's report (the ``fioscope`` key)."""

    target: str = ""
    device: str = ""
    directory: str = ""
    profile: str = ""
    limits: Limits | None = None
    sla_latency_seconds: float = 0.0
    failed: str = ""  # fio failed but left a report: counted as a failed run
    tags: dict[str, str] = field(default_factory=dict)  # free-form, for reports; never a label
    present: bool = True  # False: a file without the key (anybody's fio output)

    def to_json(self) -> dict:
        out: dict = {"schema": SCHEMA, "target": self.target, "device": self.device,
                     "directory": self.directory, "profile": self.profile}
        if self.limits is not None and self.limits.declared():
            out["limits"] = self.limits.as_dict()
        if self.sla_latency_seconds:
            out["sla_latency_seconds"] = self.sla_latency_seconds
        if self.failed:
            out["failed"] = self.failed
        if self.tags:
            out["tags"] = dict(self.tags)
        return out

    @classmethod
    def from_json(cls, raw, where: str = RESULT_KEY) -> Annotation:
        """Validated annotation; unknown keys are ignored, a known key of the wrong type rejects the file."""
        if raw is None:
            return cls(present=False)
        data = check_mapping(raw, where)
        if "schema" in data:
            schema = check_number(data["schema"], f"{where}.schema", integer=True, limit=1000)
            if schema != SCHEMA:
                raise ResultFileError(f"{where}.schema: {schema} is not supported (this fioscope reads {SCHEMA})")
        text = {k: check_label(data[k], f"{where}.{k}") for k in ("target", "device", "profile") if k in data}
        directory = check_text(data["directory"], f"{where}.directory") if "directory" in data else ""
        failed = check_text(data["failed"], f"{where}.failed") if "failed" in data else ""
        limits = None
        if "limits" in data:
            raw_limits = check_mapping(data["limits"], f"{where}.limits")
            for key, value in raw_limits.items():
                check_label(key, f"{where}.limits key")
                if key != "independent":
                    check_number(value, f"{where}.limits.{key}")
            try:
                limits = parse_limits(raw_limits, f"{where}.limits")
            except ConfigError as exc:
                raise ResultFileError(str(exc)) from None
        sla = check_number(data["sla_latency_seconds"], f"{where}.sla_latency_seconds", limit=1e6) if "sla_latency_seconds" in data else 0.0
        tags = {}
        if "tags" in data:
            for key, value in check_mapping(data["tags"], f"{where}.tags").items():
                tags[check_label(key, f"{where}.tags key")] = check_text(value, f"{where}.tags.{key}")
        return cls(target=text.get("target", ""), device=text.get("device", ""), profile=text.get("profile", ""),
                   directory=directory, limits=limits, sla_latency_seconds=sla, failed=failed, tags=tags)


@dataclass(frozen=True)
class FailureRecord:
    """fio produced no report (or fioscope stopped in the middle of the run)."""

    jobnames: tuple[str, ...]
    profile: str
    message: str
    timestamp: float
    target: str = ""
    device: str = ""
    directory: str = ""

    def to_json(self) -> dict:
        return {FAILURE_KEY: {"schema": SCHEMA, "jobnames": list(self.jobnames), "profile": self.profile,
                              "message": self.message, "timestamp": self.timestamp, "target": self.target,
                              "device": self.device, "directory": self.directory}}

    @classmethod
    def from_json(cls, doc) -> FailureRecord:
        data = check_mapping(check_mapping(doc, "document").get(FAILURE_KEY), FAILURE_KEY)
        where = FAILURE_KEY
        names = check_list(data.get("jobnames"), f"{where}.jobnames")
        if not names or len(names) > 1000:
            raise ResultFileError(f"{where}.jobnames: expected 1 to 1000 job names")
        return cls(
            jobnames=tuple(check_label(n, f"{where}.jobnames[{i}]") for i, n in enumerate(names)),
            profile=check_label(data.get("profile", ""), f"{where}.profile"),
            message=check_text(data.get("message", ""), f"{where}.message"),
            timestamp=check_timestamp(data.get("timestamp"), f"{where}.timestamp"),
            target=check_label(data.get("target", ""), f"{where}.target"),
            device=check_label(data.get("device", ""), f"{where}.device"),
            directory=check_text(data.get("directory", ""), f"{where}.directory"),
        )


# ---- names and writing ------------------------------------------------------------------------
def _name_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:64] or "_"


def file_stem(profile: str, target: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{time.time_ns() % 1_000_000:06d}"
    return f"{_name_part(profile)}-{_name_part(target)}-{stamp}"


def _write_atomically(path: Path, document: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=1))
    tmp.replace(path)
    return path


def write_result(results_dir: Path, document: dict, annotation: Annotation, stem: str | None = None) -> Path:
    """fio's report as it printed it, plus the annotation; written atomically (rename)."""
    stem = stem or file_stem(annotation.profile, annotation.target)
    return _write_atomically(results_dir / f"{stem}.json", {**document, RESULT_KEY: annotation.to_json()})


def write_failure(results_dir: Path, record: FailureRecord, stem: str | None = None) -> Path:
    stem = stem or file_stem(record.profile, record.target)
    return _write_atomically(results_dir / f"{stem}{FAILURE_SUFFIX}", record.to_json())


def is_failure_name(name: str) -> bool:
    return name.endswith(FAILURE_SUFFIX)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def write_running(results_dir: Path, jobnames: list[str], annotation: Annotation) -> Path:
    """Marker of a run in progress; ``finish_running`` removes it, ``recover_interrupted`` handles a crash.

    It holds the failure record the run becomes if the process writing it dies.
    """
    stem = file_stem(annotation.profile, annotation.target)
    record = FailureRecord(jobnames=tuple(jobnames), profile=annotation.profile, message="", timestamp=time.time(),
                           target=annotation.target, device=annotation.device, directory=annotation.directory)
    body = {RUNNING_KEY: {"pid": os.getpid(), "boot_id": _boot_id(), **record.to_json()}}
    return _write_atomically(results_dir / f"{stem}{RUNNING_SUFFIX}", body)


def run_tag(marker: Path) -> str:
    """What every process of the marker's run carries in its environment (lifetime.RUN_TAG): the marker's stem."""
    return marker.name[: -len(RUNNING_SUFFIX)]


def note_fio_pid(marker: Path, pid: int) -> None:
    """Record the fio process of the run in its marker (the writer's pid stays the one recovery judges)."""
    try:
        data = json.loads(read_bytes(marker))
        data[RUNNING_KEY]["fio_pid"] = pid
        _write_atomically(marker, data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s: cannot record fio's pid: %s", ascii(str(marker)), exc)


def finish_running(marker: Path) -> None:
    try:
        marker.unlink()
    except OSError:
        pass


def _writer_alive(data: dict) -> bool:
    pid = data.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if data.get("boot_id") != _boot_id():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def recover_interrupted(results_dir: Path) -> list[Path]:
    """Turn markers of runs whose fioscope died into failure records; returns the records written."""
    written: list[Path] = []
    try:
        markers = [p for p in results_dir.iterdir() if p.name.endswith(RUNNING_SUFFIX)]
    except OSError:
        return written
    for marker in markers:
        try:
            data = check_mapping(json.loads(read_bytes(marker)).get(RUNNING_KEY), RUNNING_KEY)
            if _writer_alive(data):
                continue
            reap(run_tag(marker))  # fio and its job processes, if they outlived their fioscope
            started = FailureRecord.from_json(data)
            stopped = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started.timestamp))
            record = replace(started, timestamp=time.time(),
                             message=f"interrupted: fioscope (pid {data.get('pid')}) stopped during the run started at {stopped}")
            written.append(write_failure(results_dir, record, stem=marker.name[: -len(RUNNING_SUFFIX)]))
        except Exception as exc:  # noqa: BLE001 - an unreadable marker is not a run: dropped below
            log.warning("%s: unreadable run marker dropped: %s", ascii(str(marker)), exc)
        finish_running(marker)
    return written


# ---- reading ----------------------------------------------------------------------------------
def read_bytes(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file, never through a symlink, never blocking on a FIFO, at most ``limit``."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a symlink
            raise ResultFileError("is a symlink: not followed") from None
        raise ResultFileError(f"cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ResultFileError("not a regular file")
        if st.st_size > limit:
            raise ResultFileError(f"{st.st_size} bytes: larger than the {limit} byte cap")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise ResultFileError(f"grew past the {limit} byte cap while read")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
