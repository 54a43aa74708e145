"""Lab disks, the native stack and an Alertmanager webhook for the end-to-end tests.

Everything is started from the repository's own config files; intervals, windows and
`for:` durations are shortened through alerts/config.yaml overrides (`--set`), never by
copying a rule file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import REPO, free_port, require

from fioscope_mixin.native import NativeStack

__all__ = ["NativeStack", "PromClient", "Webhook", "e2e_overrides", "fioscope_run", "require_root_lab", "write_fioscope_config"]


def require_root_lab():
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the lab tests need root in CI")
        pytest.skip("needs root (loop devices, cgroups)")
    for tool in ("fio", "losetup", "mkfs.ext4", "prometheus", "iostat"):
        require(tool)


class Webhook:
    """Alertmanager's webhook receiver: records (receive time, alert) for every firing alert."""

    def __init__(self):
        self.received: list[tuple[float, dict]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                now = time.time()
                for alert in body.get("alerts", []):
                    if alert.get("status") == "firing":
                        owner.received.append((now, alert))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def first(self, alertname: str, **labels) -> float | None:
        for when, alert in self.received:
            if alert["labels"].get("alertname") == alertname and all(alert["labels"].get(k) == v for k, v in labels.items()):
                return when
        return None

    def names(self) -> set[str]:
        return {a["labels"]["alertname"] for _, a in self.received}

    def close(self):
        self.server.shutdown()


def e2e_overrides(webhook_url: str = "", rate_window: str = "20s", extra: list[str] | None = None) -> list[str]:
    ports = {k: free_port() for k in ("prometheus", "alertmanager", "node_exporter", "fioscope", "etcd")}
    sets = [f"stack.ports.{k}={v}" for k, v in ports.items()] + [
        "stack.scrape_interval=1s", "stack.evaluation_interval=1s", f"stack.rate_window={rate_window}",
    ]
    if webhook_url:
        sets.append(f"stack.alertmanager_webhook={webhook_url}")
    return sets + (extra or [])


def write_fioscope_config(path: Path, targets: list[dict]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({"results_dir": str(path.parent / "results"), "jobs_dir": str(REPO / "fio-jobs"),
                                    "scan_interval": "1s", "status_interval": "1s", "targets": targets}))
    return path


class PromClient:
    def __init__(self, base: str):
        self.base = base

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        with urllib.request.urlopen(f"{self.base}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr: str, at: float | None = None) -> float | None:
        result = self.query(expr, at)
        return float(result[0]["value"][1]) if result else None


def fioscope_run(*args, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fioscope", *args], capture_output=True, text=True, timeout=timeout)
