"""Collector of the exporter's own health.

Exposition::

    # TYPE fioscope_up gauge
    fioscope_up 1
    # TYPE fioscope_build_info gauge
    fioscope_build_info{version="0.1.0"} 1
    # TYPE fioscope_result_parse_errors_total counter
    fioscope_result_parse_errors_total 0
    # TYPE fioscope_result_files gauge
    fioscope_result_files 3
    # TYPE fioscope_last_scan_timestamp_seconds gauge
    fioscope_last_scan_timestamp_seconds 1.79e+09   (only with a scan loop: serve, not a capture)
    # TYPE fioscope_scan_interval_seconds gauge
    fioscope_scan_interval_seconds 5                (only with a scan loop)
    # TYPE fioscope_scheduler_running gauge
    fioscope_scheduler_running 1            (only with a schedule)
    # TYPE fioscope_scrape_duration_seconds gauge
    fioscope_scrape_duration_seconds 0.0011
    # TYPE fioscope_series_limit_refused_jobs_total counter
    fioscope_series_limit_refused_jobs_total 0
    # TYPE fioscope_web_config_reload_failures_total counter
    fioscope_web_config_reload_failures_total 0     (only with --web.config.file)
    # TYPE fioscope_web_config_last_reload_successful gauge
    fioscope_web_config_last_reload_successful 1    (only with --web.config.file)
"""

from __future__ import annotations

import threading

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .. import __version__
from ..scanner import ScanLoop
from ..store import Store
from ..webconfig import ReloadStatus
from .fio import FioCollector


class ScrapeTimer:
    """How long the previous /metrics render took (the current one is still running). The page is rendered once per
    change and served from that rendering (collector/__init__.py): a scrape served so renders nothing and times nothing."""

    def __init__(self) -> None:
        self.last_seconds = 0.0


class ExporterCollector:
    def __init__(self, store: Store, timer: ScrapeTimer, scan_loop: ScanLoop | None = None,
                 scheduler: threading.Thread | None = None, web_status: ReloadStatus | None = None,
                 fio: FioCollector | None = None):
        self.store = store
        self.timer = timer
        self.scan_loop = scan_loop
        self.scheduler = scheduler
        self.web_status = web_status
        self.fio = fio

    def _up(self) -> bool:
        return self.scan_loop is None or self.scan_loop.is_alive()

    def changes(self) -> tuple:
        """What ``collect`` shows that moves between renders, cheap to read: equal twice, it shows the same. (The render
        time and the refused jobs move only in a render; the health figures' scan time moves with every scan.)"""
        web = self.web_status
        return (tuple(self.store.health().values()), self._up(), self.scheduler is not None and self.scheduler.is_alive(),
                (web.failures, web.last_successful) if web is not None else None)

    def collect(self):
        health = self.store.health()
        up = self._up()
        yield GaugeMetricFamily("fioscope_up", "1 while the exporter serves and its scan loop lives.", value=1 if up else 0)
        build = GaugeMetricFamily("fioscope_build_info", "fioscope version.", labels=["version"])
        build.add_metric([__version__], 1)
        yield build
        yield CounterMetricFamily("fioscope_result_parse_errors",
                                  "Result files rejected (not fio JSON, invalid values, truncated, special file, too large).",
                                  value=health["parse_errors"])
        yield GaugeMetricFamily("fioscope_result_files", "Result files published from the results directory.",
                                value=health["result_files"])
        # only where a scan loop runs (serve): a capture's listener scans nothing, and a last scan at 0 paged
        # FioscopeResultScanStalled (critical) within one evaluation of its first scrape
        if self.scan_loop is not None:
            yield GaugeMetricFamily("fioscope_last_scan_timestamp_seconds", "Unix time of the last results-directory scan.",
                                    value=health["last_scan"])
            yield GaugeMetricFamily("fioscope_scan_interval_seconds",
                                    "Interval between results-directory scans (as the scan loop uses it).",
                                    value=self.scan_loop.interval_seconds)
        if self.scheduler is not None:
            yield GaugeMetricFamily("fioscope_scheduler_running", "1 while the schedule thread lives.",
                                    value=1 if self.scheduler.is_alive() else 0)
        yield GaugeMetricFamily("fioscope_scrape_duration_seconds", "Time the previous /metrics render took.",
                                value=self.timer.last_seconds)
        if self.fio is not None:
            yield CounterMetricFamily("fioscope_series_limit_refused_jobs",
                                      "Jobs not published because their series would take /metrics past max_series.",
                                      value=self.fio.refused_jobs_total)
        if self.web_status is not None:
            yield CounterMetricFamily("fioscope_web_config_reload_failures",
                                      "Changes of --web.config.file refused (empty, broken, invalid, unreadable, or turning TLS/auth off).",
                                      value=self.web_status.failures)
            yield GaugeMetricFamily("fioscope_web_config_last_reload_successful",
                                    "0 while the last change of --web.config.file was refused and the previous settings serve.",
                                    value=1 if self.web_status.last_successful else 0)
