"""The fleet: Prometheus overrides for test hosts, and fioscope_mixin.hosts that adds and removes them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fioscope_testkit.cli import run
from fioscope_testkit.net import free_port


def fleet_overrides(hosts_dir: Path, node_port: int, fioscope_port: int, extra: list[str] | None = None) -> list[str]:
    """The generated config for local host ``lab-a`` (its node_exporter and exporter on these ports), test hosts from ``hosts_dir``."""
    return [f"stack.ports.node_exporter={node_port}", f"stack.ports.fioscope={fioscope_port}",
            f"stack.ports.alertmanager={free_port()}", f"stack.ports.etcd={free_port()}",
            "stack.scrape_interval=1s", "stack.evaluation_interval=1s", "stack.host=lab-a", f"stack.hosts_dir={hosts_dir}",
            *(extra or [])]


def run_hosts(*args) -> subprocess.CompletedProcess:
    """``python -m fioscope_mixin.hosts ARGS`` run to completion."""
    return run([sys.executable, "-m", "fioscope_mixin.hosts", *args])
