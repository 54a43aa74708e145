"""The one way tests start Prometheus (``Prometheus``), and its HTTP API (``PromClient``)."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from fioscope_testkit.binaries import first_installed
from fioscope_testkit.native_stack import write_stack_files
from fioscope_testkit.net import free_port, free_port_block, wait_for


class PromClient:
    """Prometheus' HTTP API at ``base``: instant and range queries, targets, rule groups."""

    def __init__(self, base: str, timeout: float = 10):
        self.base = base
        self.timeout = timeout  # seconds per request (the fleet bench counts every series of a large head: longer)

    def _get(self, path: str, params: dict | None = None) -> dict:
        url = f"{self.base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=self.timeout) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._get("/api/v1/query", params)["result"]

    def query_cost(self, expr: str, at: float) -> tuple[float, int, int]:
        """What an instant query costs the server (``stats=all``): (its evaluation seconds, samples loaded, series returned)."""
        data = self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}", "stats": "all"})
        stats = data.get("stats", {})
        return (float(stats.get("timings", {}).get("evalTotalTime", 0.0)),
                int(stats.get("samples", {}).get("totalQueryableSamples", 0)), len(data["result"]))

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        """What a Grafana time-series panel asks: the series over [start, end], one point a step."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return self._get("/api/v1/query_range", params)["result"]

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The first result's value, or None when the query returns nothing."""
        result = self.query(expr, at)
        return float(result[0]["value"][1]) if result else None

    def head_stats(self) -> dict:
        """The TSDB head's series count and time span (numSeries, minTime, maxTime in ms)."""
        return self._get("/api/v1/status/tsdb")["headStats"]

    def targets(self, job: str | None = None) -> list[dict]:
        active = self._get("/api/v1/targets", {"state": "active"})["activeTargets"]
        return [t for t in active if job is None or t["labels"].get("job") == job]

    def metrics_text(self) -> str:
        """The server's own /metrics exposition."""
        with urllib.request.urlopen(f"{self.base}/metrics", timeout=self.timeout) as r:
            return r.read().decode()

    def flags(self) -> dict[str, str]:
        """The command-line flags the server runs with."""
        return self._get("/api/v1/status/flags")

    def rules(self) -> list[dict]:
        """The rule groups, with each group's and rule's last evaluation time."""
        return self._get("/api/v1/rules")["groups"]


class Prometheus:
    """``prometheus`` on a free loopback port with ``config``, its TSDB under ``root``; ready (``/-/ready``) once constructed."""

    def __init__(self, root: Path, config: Path, port: int | None = None, extra_args: list[str] | None = None,
                 ready_within: float = 30):
        self.root = root
        self.config = config
        self.port = port or free_port()
        root.mkdir(parents=True, exist_ok=True)
        self.log = root / "prometheus.log"
        self.proc = subprocess.Popen(
            [first_installed("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={root / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle", *(extra_args or [])],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = PromClient(self.url)
        try:
            wait_for(lambda: urllib.request.urlopen(f"{self.url}/-/ready", timeout=10).read() is not None, ready_within,
                     what="prometheus ready")
        except AssertionError:
            self.stop()
            raise AssertionError(f"prometheus did not start:\n{self.log.read_text()[-2000:]}") from None

    @classmethod
    def generated(cls, root: Path, overrides: list[str], extra_args: list[str] | None = None) -> Prometheus:
        """With the repository's generated prometheus.yml and rule files (``--set`` overrides); its own job scrapes it
        (prometheus_tsdb_head_series and friends)."""
        port = free_port()
        return cls(root, write_stack_files(root, [*overrides, f"stack.ports.prometheus={port}"]), port, extra_args)

    @classmethod
    def shards(cls, root: Path, overrides: list[str], shards: int) -> list[Prometheus]:
        """``shards`` Prometheus shards from the generated prometheus-shard-<i>.yml (fleet.shards), shard i on the
        generated port (a free base port + i), its TSDB under root/shard-<i>; all stopped if one does not start."""
        base = free_port_block(shards)
        config = write_stack_files(root, [*overrides, f"fleet.shards={shards}", f"stack.ports.prometheus={base}"]).parent
        started: list[Prometheus] = []
        try:
            for i in range(shards):
                started.append(cls(root / f"shard-{i}", config / f"prometheus-shard-{i}.yml", base + i))
        except BaseException:
            for prom in started:
                prom.stop()
            raise
        return started

    @classmethod
    def scraping(cls, root: Path, scrape_configs: list[dict], interval: str = "1s") -> Prometheus:
        """With a config of only ``scrape_configs``, scraping and evaluating every ``interval``."""
        root.mkdir(parents=True, exist_ok=True)
        config = root / "prometheus.yml"
        config.write_text(yaml.safe_dump({"global": {"scrape_interval": interval, "evaluation_interval": interval},
                                          "scrape_configs": scrape_configs}))
        return cls(root, config)

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
