"""Reading the results directory: scan, settle, dedup, reject.

The results directory is the one source of truth: a finished run is "a result file
appears", whether fioscope's runner wrote it or anybody else dropped it there.
A restart re-reads the directory and publishes the same figures again.

Ingestion of a file is all or nothing: the file is read (resultfile.read_bytes), parsed
and validated, and its whole contribution computed, before any state changes; any
exception is contained to that file, which is then counted once as rejected.
The same content (sha256 of the bytes) is counted once, whatever its name or mtime.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import threading
import time
from pathlib import Path

from .config import Config
from .model import RunResult
from .parser import parse_text
from .resolve import Resolver
from .resultfile import FailureRecord, is_failure_name, read_bytes, recover_interrupted
from .state import State, failure_contributions, run_contributions

log = logging.getLogger("fioscope.store")

# a file fioscope did not write (no annotation) is judged once it has not changed for this long,
# and its writer is done with it (``Ingest._finished``): fio --status-interval --output appends a
# report every interval and only the final one is the run; a file being written is empty or truncated
SETTLE_SECONDS = 10.0
# where writers cannot be seen (not root), a file that does not parse (empty: fio has not written its first
# status report yet) is rejected only after this much longer
UNSEEN_WRITER_GRACE_SECONDS = 60.0


def files_open_for_writing() -> set[tuple[int, int]] | None:
    """(st_dev, st_ino) of every file some process holds open for writing; None where some process's
    descriptors cannot be seen (not root: other users' /proc/PID/fd are closed to us)."""
    found: set[tuple[int, int]] = set()
    complete = True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry.name}/fd")
        except FileNotFoundError:
            continue  # ended meanwhile
        except OSError:
            complete = False
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{entry.name}/fd/{fd}")
                if not stat.S_ISREG(st.st_mode):
                    continue
                with open(f"/proc/{entry.name}/fdinfo/{fd}") as info:
                    flags = next((int(line.split()[1], 8) for line in info if line.startswith("flags:")), 0)
            except (OSError, ValueError, IndexError):
                continue
            if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                found.add((st.st_dev, st.st_ino))
    return found if complete else None


def quiet_needed(runs: list[RunResult]) -> float:
    """How long a file of ``runs`` (one per document, in order) must stay unchanged to be finished, judged by
    its documents alone (where its writer cannot be seen): fio --status-interval appends a document every
    interval I, the final one at most I after the last. Two documents or more: the widest gap between them,
    plus the settle time. One: its jobs' elapsed time plus the settle time (a first status report comes I
    after the start; for a final report alone this waits as long as the run took)."""
    if len(runs) >= 2:
        gap = max(b.timestamp - a.timestamp for a, b in zip(runs, runs[1:]))
    else:
        gap = max((j.elapsed_seconds or j.wall_seconds for j in runs[-1].jobs), default=0.0) if runs else 0.0
    return SETTLE_SECONDS + min(max(gap, 0.0), 86400.0)


def _shown(path: Path) -> str:
    """A path as it goes into a log line: control characters in a file name are escaped."""
    text = str(path)
    return text if text.isprintable() else ascii(text)


class Ingest:
    def __init__(self, config: Config, state: State):
        self.config = config
        self.state = state
        self.resolver = Resolver(config)
        self.parse_errors = 0
        self.last_scan_timestamp = 0.0
        # path -> (inode, mtime_ns, size, mode) already handled: a file refused as unreadable (mode 000) is tried
        # again after a chmod, which changes neither its mtime nor its size
        self._seen: dict[str, tuple[int, int, int, int]] = {}
        self._counted: set[bytes] = set()  # sha256 of every content counted
        self.published: set[str] = set()  # paths whose result is published
        self._dir_missing = False
        self._writers: set[tuple[int, int]] | None = None  # files_open_for_writing() of this scan
        self._writers_looked = False
        # the runner and the scan loop may both see a new file: one ingests it, once
        self._lock = threading.Lock()

    def scan(self) -> None:
        """Ingest every new or changed ``*.json`` directly in the results directory. Never raises."""
        directory = self.config.results_dir
        self.resolver.new_scan()
        self._writers_looked = False
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
        with self._lock:
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
        signature = (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)
        key = str(path)
        if self._seen.get(key) == signature:
            return key in self.published
        quiet = time.time() - st.st_mtime
        written_by_us = settled
        if not settled and quiet >= SETTLE_SECONDS:  # an unreadable file is judged (rejected) once its writer is done
            writing = self._being_written(st)
            settled = writing is False or (writing is None and quiet >= SETTLE_SECONDS + UNSEEN_WRITER_GRACE_SECONDS)
        try:
            data = read_bytes(path)
            digest = hashlib.sha256(data).digest()
            if digest in self._counted:  # touched, copied or rewritten with the same bytes: counted once
                self._seen[key] = signature
                self.published.add(key)
                return True
            text = data.decode("utf-8", errors="replace")
            if is_failure_name(path.name):
                contributions = failure_contributions(FailureRecord.from_json(json.loads(text)))
            else:
                # with --status-interval the last report is the final one
                runs = parse_text(text, source=key, max_jobs=self.config.max_jobs_per_file)
                run = runs[-1]
                if not (written_by_us or run.annotation.present or self._finished(st, quiet, runs)):
                    return False  # anybody's fio output counts once, when its writer is done with it
                contributions = run_contributions(run, self.resolver.place, self.state.bounds)
        except Exception as exc:  # noqa: BLE001 - RecursionError, MemoryError, ValueError ...: this file only
            if not settled:
                return False  # still being written, perhaps: judged once it stops changing
            self._reject(path, signature, exc)
            return False
        self.state.apply(contributions)
        self.published.add(key)
        self._counted.add(digest)
        self._seen[key] = signature
        return True

    def _being_written(self, st: os.stat_result) -> bool | None:
        """Whether a process holds the file open for writing; None where that cannot be seen (not root)."""
        if not self._writers_looked:
            self._writers, self._writers_looked = files_open_for_writing(), True
        return None if self._writers is None else (st.st_dev, st.st_ino) in self._writers

    def _finished(self, st: os.stat_result, quiet: float, runs: list[RunResult]) -> bool:
        """A file fioscope did not write is finished once unchanged for the settle time and closed by its
        writer (fio holds --output open until it exits); where writers cannot be seen, once unchanged for
        longer than its documents say another could still come (``quiet_needed``)."""
        if quiet < SETTLE_SECONDS:
            return False
        writing = self._being_written(st)
        if writing is not None:
            return not writing
        return quiet >= quiet_needed(runs)

    def _reject(self, path: Path, signature: tuple[int, int, int, int] | None, exc: BaseException) -> None:
        if signature is not None:
            self._seen[str(path)] = signature  # count a bad file once, not on every scan
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        log.error("%s: rejected: %s", _shown(path), reason if reason.isprintable() else ascii(reason))
        self.parse_errors += 1
