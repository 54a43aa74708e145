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
    fioscope_last_scan_timestamp_seconds 1.79e+09
    # TYPE fioscope_scrape_duration_seconds gauge
    fioscope_scrape_duration_seconds 0.0011
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .. import __version__
from ..store import Store


class ScrapeTimer:
    """How long the previous /metrics render took (the current one is still running)."""

    def __init__(self) -> None:
        self.last_seconds = 0.0


class ExporterCollector:
    def __init__(self, store: Store, timer: ScrapeTimer):
        self.store = store
        self.timer = timer

    def collect(self):
        health = self.store.health()
        yield GaugeMetricFamily("fioscope_up", "1 while the exporter serves.", value=1)
        build = GaugeMetricFamily("fioscope_build_info", "fioscope version.", labels=["version"])
        build.add_metric([__version__], 1)
        yield build
        yield CounterMetricFamily("fioscope_result_parse_errors", "Result files rejected (not fio JSON, truncated, unsupported fio version).", value=health["parse_errors"])
        yield GaugeMetricFamily("fioscope_result_files", "Result files published from the results directory.", value=health["result_files"])
        yield GaugeMetricFamily("fioscope_last_scan_timestamp_seconds", "Unix time of the last results-directory scan.", value=health["last_scan"])
        yield GaugeMetricFamily("fioscope_scrape_duration_seconds", "Time the previous /metrics render took.", value=self.timer.last_seconds)
