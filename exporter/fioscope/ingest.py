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
import threading
import time
from pathlib import Path

from .config import Config
from .parser import parse_text
from .resolve import Resolver
from .resultfile import FailureRecord, is_failure_name, read_bytes, recover_interrupted
from .state import State, failure_contributions, run_contributions

log = logging.getLogger("fioscope.store")

# a file fioscope did not write (no annotation) is judged once it has not changed for this long:
# fio --status-interval appends a report every interval and only the final one is the run, and
# a file being written is empty or truncated for a while
SETTLE_SECONDS = 10.0


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
        self._seen: dict[str, tuple[int, int, int]] = {}  # path -> (inode, mtime_ns, size) already handled
        self._counted: set[bytes] = set()  # sha256 of every content counted
        self.published: set[str] = set()  # paths whose result is published
        self._dir_missing = False
        # the runner and the scan loop may both see a new file: one ingests it, once
        self._lock = threading.Lock()

    def scan(self) -> None:
        """Ingest every new or changed ``*.json`` directly in the results directory. Never raises."""
        directory = self.config.results_dir
        self.resolver.new_scan()
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
        signature = (st.st_ino, st.st_mtime_ns, st.st_size)
        key = str(path)
        if self._seen.get(key) == signature:
            return key in self.published
        settled = settled or time.time() - st.st_mtime >= SETTLE_SECONDS
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
                run = parse_text(text, source=key, max_jobs=self.config.max_jobs_per_file)[-1]
                if not (settled or run.annotation.present):
                    return False  # anybody's fio output counts once its writer is done with it
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

    def _reject(self, path: Path, signature: tuple[int, int, int] | None, exc: BaseException) -> None:
        if signature is not None:
            self._seen[str(path)] = signature  # count a bad file once, not on every scan
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        log.error("%s: rejected: %s", _shown(path), reason if reason.isprintable() else ascii(reason))
        self.parse_errors += 1
