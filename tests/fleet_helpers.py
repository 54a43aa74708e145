"""A real Prometheus (and node_exporters) for the fleet tests and bench/bench_fleet.py.

Prometheus runs from the repository's generated configuration (fioscope_mixin.prometheus's ``render``
with ``--set`` overrides, written into a scratch root in the repository's layout), never a
hand-written copy.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from conftest import free_port, wait_for
from fioscope_mixin import prometheus
from fioscope_mixin.settings import load_settings
from stack_helpers import PromClient

__all__ = ["NodeExporter", "Prometheus", "free_port", "lab_lock", "wait_for"]

LAB_LOCK = Path("/tmp/fioscope-lab.lock")


@contextmanager
def lab_lock():
    """The machine-wide lab lock, unless this process already holds it (run under `flock /tmp/fioscope-lab.lock`)."""
    fds = Path("/proc/self/fd")
    if any(os.path.realpath(fd) == str(LAB_LOCK) for fd in fds.iterdir() if fd.is_symlink()):
        yield
        return
    with LAB_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _binary(*names: str) -> str:
    for name in names:
        if shutil.which(name):
            return name
    raise FileNotFoundError(f"none of {', '.join(names)} is installed")


class Prometheus:
    """``prometheus`` on a free loopback port with the generated prometheus.yml and rule files."""

    def __init__(self, root: Path, overrides: list[str], extra_args: list[str] | None = None):
        self.root = root
        self.port = free_port()
        # its own scrape job scrapes it (prometheus_tsdb_head_series and friends)
        for rel, text in prometheus.render(load_settings([*overrides, f"stack.ports.prometheus={self.port}"])).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self.config = root / "provisioning" / "prometheus" / "prometheus.yml"
        self.log = root / "prometheus.log"
        self.proc = subprocess.Popen(
            [_binary("prometheus"), f"--config.file={self.config}", f"--storage.tsdb.path={root / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle", *(extra_args or [])],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        self.client = PromClient(self.base)
        try:
            wait_for(lambda: self._get("/-/ready") is not None, 30, what="prometheus ready")
        except AssertionError:
            self.stop()
            raise AssertionError(f"prometheus did not start:\n{self.log.read_text()[-2000:]}") from None

    def _get(self, path: str):
        with urllib.request.urlopen(self.base + path, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if path.startswith("/api/") else body

    def targets(self, job: str | None = None) -> list[dict]:
        active = self._get("/api/v1/targets?state=active")["data"]["activeTargets"]
        return [t for t in active if job is None or t["labels"].get("job") == job]

    def rule_groups(self) -> list[dict]:
        return self._get("/api/v1/rules")["data"]["groups"]

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class NodeExporter:
    """A real node_exporter on a free loopback port, seeing only the devices ``device_include`` matches."""

    def __init__(self, log: Path, device_include: str = "", web_config: Path | None = None):
        self.port = free_port()
        cmd = [_binary("prometheus-node-exporter", "node_exporter"), f"--web.listen-address=127.0.0.1:{self.port}",
               "--collector.disable-defaults", "--collector.diskstats", "--collector.cpu"]
        if device_include:
            # the packaged default exclude list counts as set, and the two flags exclude each other
            cmd += ["--collector.diskstats.device-exclude=", f"--collector.diskstats.device-include={device_include}"]
        if web_config:
            cmd.append(f"--web.config.file={web_config}")
        self.address = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
        time.sleep(0.3)
        if self.proc.poll() is not None:
            raise AssertionError(f"node_exporter exited: {log.read_text()[-1000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
