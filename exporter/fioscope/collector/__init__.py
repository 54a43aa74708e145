"""Custom collectors: each builds fresh metric families from the Store on every scrape."""

from prometheus_client import CollectorRegistry

from ..store import Store
from .exporter import ExporterCollector, ScrapeTimer
from .fio import FioCollector


def build_registry(store: Store, timer: ScrapeTimer) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FioCollector(store))
    registry.register(ExporterCollector(store, timer))
    return registry
