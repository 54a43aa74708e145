"""Everything the collector publishes, fed by result files and live status reports: one object
for the rest of the exporter, made of three parts with one job each.

- ``ingest.py``: the results directory: scan, settle, dedup, reject (fioscope_result_parse_errors_total);
- ``resolve.py``: where a job of a file ran: target, device, declared limits and SLA;
- ``state.py``: what is known per (target, jobname, hostname), changed only by applying a file's
  contributions or a live run's reports; ``snapshot()`` copies and changes nothing.

What a scrape shows of that state (new series at zero once, the per-job render cache) is the
collector's (collector/exposition.py, collector/fio.py).
"""

from __future__ import annotations

from pathlib import Path

from .config import Config
from .ingest import SETTLE_SECONDS, Ingest
from .state import HistKey, HistogramState, JobKey, JobState, State

__all__ = ["SETTLE_SECONDS", "HistKey", "HistogramState", "JobKey", "JobState", "Store"]


class Store:
    def __init__(self, config: Config, bounds: tuple[float, ...] | None = None):
        """``bounds``: fio_latency_seconds's (the command's Thresholds.bucket_bounds); default the shipped settings'."""
        self.config = config
        self.state = State(bounds)
        self.ingest = Ingest(config, self.state)
        # the live-run and exposition side, as the runner and the collector call it
        self.start_run = self.state.start_run
        self.update_live = self.state.update_live
        self.live_jobs = self.state.live_jobs
        self.finish_run = self.state.finish_run
        self.hold_new_series = self.state.hold_new_series
        self.snapshot = self.state.snapshot

    def scan(self) -> None:
        self.ingest.scan()

    def ingest_file(self, path: Path, settled: bool = False) -> bool:
        return self.ingest.ingest_file(path, settled)

    @property
    def jobs(self) -> dict[JobKey, JobState]:
        return self.state.jobs

    @property
    def histograms(self) -> dict[JobKey, dict[HistKey, HistogramState]]:
        return self.state.histograms

    @property
    def parse_errors(self) -> int:
        return self.ingest.parse_errors

    @property
    def last_scan_timestamp(self) -> float:
        return self.ingest.last_scan_timestamp

    @property
    def generation(self) -> int:
        """Moves with every change of a job (a result applied, a run started or finished, a live report): with
        ``health()``, everything the store publishes (what tells the /metrics page to render again)."""
        return self.state.generation

    def health(self) -> dict[str, float]:
        return {"parse_errors": self.ingest.parse_errors, "result_files": len(self.ingest.published),
                "last_scan": self.ingest.last_scan_timestamp}
