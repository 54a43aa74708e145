"""Shared helpers: real fio, a real exporter process, promtool."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
FIO_OUTPUTS = FIXTURES / "fio-outputs"


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: end-to-end suite on lab disks (root, slow); run with -m e2e")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def wait_for(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def parse_exposition(text: str) -> dict[tuple[str, frozenset], float]:
    """{(name, frozenset(labels.items())): value} using prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(metrics: dict, name: str, **labels) -> float:
    return metrics[(name, frozenset({k: str(v) for k, v in labels.items()}.items()))]


class Exporter:
    """``fioscope serve`` as a real subprocess on a free loopback port."""

    def __init__(self, tmp: Path, config: Path | None = None, results: Path | None = None, port: int | None = None):
        self.port = port or free_port()
        self.results = results or tmp / "results"
        self.results.mkdir(parents=True, exist_ok=True)
        self.log = tmp / f"exporter-{self.port}.log"
        cmd = [sys.executable, "-m", "fioscope", "serve", "--results.dir", str(self.results),
               "--web.listen-address", f"127.0.0.1:{self.port}"]
        if config:
            cmd += ["--config.file", str(config)]
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        wait_for(lambda: http_get(self.url("/-/healthy")) == "OK\n", 15, what="exporter up")

    def url(self, path: str = "/metrics") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def metrics_text(self) -> str:
        return http_get(self.url())

    def metrics(self) -> dict:
        return parse_exposition(self.metrics_text())

    def logs(self) -> str:
        return self.log.read_text()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def exporter_factory(tmp_path):
    started = []

    def start(**kwargs) -> Exporter:
        exp = Exporter(tmp_path, **kwargs)
        started.append(exp)
        return exp

    yield start
    for exp in started:
        exp.stop()


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{binary} is not installed (CI must install it)")
        pytest.skip(f"{binary} not installed")
    return path


def promtool_check_metrics(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([require("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
