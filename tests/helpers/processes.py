"""The exporters as real processes on free loopback ports: ``fioscope serve`` and node_exporter."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from fioscope_testkit.binaries import first_installed
from fioscope_testkit.cli import fioscope_command
from fioscope_testkit.net import free_port, http_get, wait_for
from fioscope_testkit.paths import checkout_env

from helpers.exposition import parse_exposition


class Exporter:
    """``fioscope serve`` of this checkout as a real subprocess; up (``/-/healthy``) once constructed."""

    def __init__(self, tmp: Path, config: Path | None = None, results: Path | None = None, port: int | None = None):
        self.port = port or free_port()
        self.results = results or tmp / "results"
        self.results.mkdir(parents=True, exist_ok=True)
        self.log = tmp / f"exporter-{self.port}.log"
        args = ["serve", "--results.dir", self.results, "--web.listen-address", f"127.0.0.1:{self.port}"]
        if config:
            args += ["--config.file", config]
        self.proc = subprocess.Popen(fioscope_command(*args), stdout=self.log.open("w"), stderr=subprocess.STDOUT, env=checkout_env())
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


def only_devices(device_include: str) -> list[str]:
    """node_exporter's flags for a diskstats collector that shows only the devices ``device_include`` matches (the
    packaged default exclude list counts as set, and the two flags exclude each other)."""
    return ["--collector.diskstats.device-exclude=", f"--collector.diskstats.device-include={device_include}"]


class NodeExporter:
    """A real node_exporter on a free loopback port, seeing only the devices ``device_include`` matches."""

    def __init__(self, log: Path, device_include: str = "", web_config: Path | None = None):
        self.port = free_port()
        cmd = [first_installed("prometheus-node-exporter", "node_exporter"), f"--web.listen-address=127.0.0.1:{self.port}",
               "--collector.disable-defaults", "--collector.diskstats", "--collector.cpu"]
        if device_include:
            cmd += only_devices(device_include)
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
