"""pytest hooks and fixtures only; what tests share lives in tests/helpers (imported as ``helpers.*``)."""

from __future__ import annotations

import os
import uuid

import pytest
from helpers import leaks
from helpers.binaries import require
from helpers.processes import Exporter

# every process the suite starts inherits it: what helpers.leaks finds a left-behind process by
SESSION_TOKEN = os.environ.setdefault(leaks.TOKEN_VAR, uuid.uuid4().hex)


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: end-to-end suite on lab disks (root, slow); run with -m e2e")
    config.addinivalue_line("markers", "slow: real-component tests of 10 s or more (Prometheus backfills, Chromium, captures); "
                                       "not in the default run, run with -m slow (.ci/run does)")


@pytest.fixture(autouse=True)
def no_process_left_behind():
    """A test that leaves fio, Prometheus, node_exporter or fioscope running fails (and they are killed)."""
    before = leaks.tracked(SESSION_TOKEN)
    yield
    left = leaks.left_behind(SESSION_TOKEN, before)
    if left:
        leaks.kill(left)
        pytest.fail("left running after the test (killed now): " + "; ".join(f"{pid} {cmd}" for pid, cmd in sorted(left.items())))


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
