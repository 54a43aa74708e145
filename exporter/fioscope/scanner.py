"""The scan loop: re-reads the results directory every scan interval, and cannot die.

The interval is clamped here whatever the config says (config validation is the
config's job; a loop that spins a core at ``0`` or never wakes at ``.inf`` is this one's).
``fioscope_up`` is 1 only while this thread lives, and ``fioscope_last_scan_timestamp_seconds``
falling behind is what ``FioscopeResultScanStalled`` watches.
"""

from __future__ import annotations

import logging
import math
import threading

from .store import Store

log = logging.getLogger("fioscope.scanner")

DEFAULT_SCAN_INTERVAL_SECONDS = 5.0
MIN_SCAN_INTERVAL_SECONDS = 0.5
MAX_SCAN_INTERVAL_SECONDS = 3600.0


def effective_interval(seconds: float) -> float:
    """The interval the loop really uses: finite and within [0.5 s, 1 h]."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return DEFAULT_SCAN_INTERVAL_SECONDS
    if not math.isfinite(value) or value <= 0:
        return DEFAULT_SCAN_INTERVAL_SECONDS
    return min(max(value, MIN_SCAN_INTERVAL_SECONDS), MAX_SCAN_INTERVAL_SECONDS)


class ScanLoop(threading.Thread):
    def __init__(self, store: Store, interval_seconds: float, stop: threading.Event):
        super().__init__(name="fioscope-scan", daemon=True)
        self.store = store
        self.interval_seconds = effective_interval(interval_seconds)
        self.stop_event = stop
        if self.interval_seconds != interval_seconds:
            log.warning("scan interval %r s is out of range: using %s s", interval_seconds, self.interval_seconds)

    def run(self) -> None:
        while not self.stop_event.wait(self.interval_seconds):
            try:
                self.store.scan()
            except Exception:  # Store.scan contains per-file errors; this is the last line
                log.exception("scan of %s failed", self.store.config.results_dir)
