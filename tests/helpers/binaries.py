"""External tools the tests need: skipped where missing, a failure under CI (which must install them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{binary} is not installed (CI must install it)")
        pytest.skip(f"{binary} not installed")
    return path


def first_installed(*names: str) -> str:
    """The first of ``names`` on PATH (Debian's prometheus-node-exporter is node_exporter elsewhere)."""
    for name in names:
        if shutil.which(name):
            return name
    raise FileNotFoundError(f"none of {', '.join(names)} is installed")


def run_first(binary: Path) -> None:
    """Put ``binary``'s directory first on PATH: the helpers that start a program by name (``prometheus``) run it."""
    os.environ["PATH"] = f"{Path(binary).resolve().parent}{os.pathsep}{os.environ['PATH']}"


# Prometheus 3 (the Go module v0.316.0), built by scripts/setup.sh into the cache beside Debian's 2.42
PROMETHEUS3_VERSION = "v0.316.0"
PROMETHEUS3_DIR = Path(os.environ.get("FIOSCOPE_PROMETHEUS3_CACHE",
                                      Path.home() / ".cache" / "fioscope" / f"prometheus-{PROMETHEUS3_VERSION}"))
# the Prometheus lines every rule test runs on: Debian's (2.42, on PATH) and the current one (3.x, from the cache)
PROMETHEUS_LINES = ["2", "3"]


def require_prometheus(binary: str, line: str) -> str:
    """``binary`` (promtool, prometheus) of Prometheus ``line``: skipped where missing, a failure under CI."""
    if line == "2":
        return require(binary)
    path = PROMETHEUS3_DIR / binary
    if not os.access(path, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing (CI must build Prometheus 3: scripts/setup.sh)")
        pytest.skip(f"{path} not built (scripts/setup.sh builds it)")
    return str(path)



def rule_tests_for(line: str, paths: list[Path]) -> list[Path]:
    """The promtool test files of Prometheus ``line``: a file generated for one line (X.prometheus3.test.yaml pins
    3.x's evaluations) replaces its 2.42 twin (X.test.yaml) there and is left out elsewhere."""
    def twin(path: Path, of: str) -> Path:
        return path.with_name(path.name.replace(".test.yaml", f".prometheus{of}.test.yaml"))
    generated = [p for p in paths if ".prometheus" in p.name]
    plain = [p for p in paths if p not in generated]
    if line == "2":
        return plain
    return [p for p in plain if twin(p, line) not in paths] + [p for p in generated if f".prometheus{line}." in p.name]
