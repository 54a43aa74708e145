"""Collectors, and the /metrics page they make: rendered once per change and served from that rendering.

What changes the page, and how a scrape tells (each read costs microseconds, so a scrape of an unchanged page only
compares them and serves the bytes of the last rendering):

- the fio results: the store's generation, moved by every result applied, run started or finished and live status
  report; a page that shows a series at zero once (collector/exposition.py) is rendered again on the next scrape;
- the exporter's health (``ExporterCollector.changes``): parse errors, result files and the last scan time (every
  scan moves it), the scan loop and the schedule thread alive or not, the web config reloads;
- the disk topology, read from sysfs (a few hundred files: most of a render's cost), so not on every scrape but by
  ``refresh_topology`` every scan interval on a thread of its own (``http.listen``); a changed topology is a change.

The provider's own counters (collector/provider.py: Amazon NVMe volumes' statistics, read at most once a second) move
on every read, so they are rendered on every scrape after the cached page; on a host without such a volume they are
one listing of /sys/block.

The key is read before the page is rendered: a change landing during a render is either in the page or moves the
key again, so the next scrape renders again; a page older than a change is never served. One rendering for every
client: the server speaks the text format only, uncompressed.
"""

from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry, generate_latest

from ..scanner import ScanLoop
from ..store import Store
from ..webconfig import ReloadStatus
from .exporter import ExporterCollector, ScrapeTimer
from .fio import FioCollector
from .provider import ProviderCollector
from .topology import TopologyCollector


class Exposition:
    """What /metrics serves: fio results (per-job render cache), the exporter's own health and the disk topology."""

    def __init__(self, store: Store, timer: ScrapeTimer, scan_loop: ScanLoop | None = None,
                 scheduler: threading.Thread | None = None, web_status: ReloadStatus | None = None,
                 topology: TopologyCollector | None = None, provider: ProviderCollector | None = None):
        """``topology``, ``provider``: the disk topology's and the provider counters' collectors (default: of the real
        /sys)."""
        self.store = store
        self.timer = timer
        self.fio = FioCollector(store)
        self.exporter = ExporterCollector(store, timer, scan_loop, scheduler, web_status, self.fio)
        self.health = CollectorRegistry(auto_describe=False)
        self.health.register(self.exporter)
        self.topology = CollectorRegistry(auto_describe=False)
        self.topology.register(topology or TopologyCollector(store))
        self._topology = (0, generate_latest(self.topology))  # (generation, text)
        self.provider = CollectorRegistry(auto_describe=False)
        self.provider.register(provider or ProviderCollector())
        self._page: tuple[object, bytes] | None = None  # (key, the page); key None: shown once, render again
        self._lock = threading.Lock()  # one render at a time; serving a rendered page takes no lock

    def _key(self) -> tuple:
        return self.store.generation, self.exporter.changes(), self._topology[0]

    def render(self) -> bytes:
        return self._cached() + generate_latest(self.provider)

    def _cached(self) -> bytes:
        page = self._page
        if page is not None and page[0] == self._key():
            return page[1]
        with self._lock:
            key = self._key()  # before the render: see the module's docstring
            page = self._page
            if page is not None and page[0] == key:
                return page[1]  # rendered by the scrape this one waited for
            started = time.perf_counter()
            body = self.fio.render().encode() + generate_latest(self.health) + self._topology[1]
            self.timer.last_seconds = time.perf_counter() - started
            self._page = (None if self.fio.showed_zero else key, body)
            return body

    def refresh_topology(self) -> None:
        """Read the disk topology from sysfs again; a change of it is a change of the page."""
        text = generate_latest(self.topology)
        generation, before = self._topology
        if text != before:
            self._topology = (generation + 1, text)
