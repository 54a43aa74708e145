"""pytest hooks and fixtures only; what tests share lives in tests/helpers (imported as ``helpers.*``)."""

from __future__ import annotations

import pytest
from helpers.binaries import require
from helpers.processes import Exporter


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: end-to-end suite on lab disks (root, slow); run with -m e2e")
    config.addinivalue_line("markers", "slow: real-component tests of 10 s or more (Prometheus backfills, Chromium, captures); "
                                       "not in the default run, run with -m slow (.ci/run does)")


@pytest.fixture
def exporter_factory(tmp_path):
    """Start ``fioscope serve`` processes (helpers.processes.Exporter); all are stopped after the test."""
    started = []

    def start(**kwargs) -> Exporter:
        exp = Exporter(tmp_path, **kwargs)
        started.append(exp)
        return exp

    yield start
    for exp in started:
        exp.stop()


@pytest.fixture
def running(tmp_path):
    """A list the test appends its processes to (Exporter, NodeExporter, Prometheus); stopped last first after the test."""
    require("prometheus")
    require("prometheus-node-exporter")
    started: list = []
    yield started
    for proc in reversed(started):
        proc.stop()
