"""Collectors: fresh metric families from the Store on every scrape."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, generate_latest

from ..scanner import ScanLoop
from ..store import Store
from ..webconfig import ReloadStatus
from .exporter import ExporterCollector, ScrapeTimer
from .fio import FioCollector
from .topology import TopologyCollector


class Exposition:
    """What /metrics serves: fio results (per-job render cache) and the exporter's own health."""

    def __init__(self, store: Store, timer: ScrapeTimer, scan_loop: ScanLoop | None = None,
                 scheduler: threading.Thread | None = None, web_status: ReloadStatus | None = None):
        self.fio = FioCollector(store)
        self.health = CollectorRegistry(auto_describe=False)
        self.health.register(ExporterCollector(store, timer, scan_loop, scheduler, web_status, self.fio))
        self.health.register(TopologyCollector(store))

    def render(self) -> bytes:
        return self.fio.render().encode() + generate_latest(self.health)
