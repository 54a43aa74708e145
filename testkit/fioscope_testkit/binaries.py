"""External tools the tests need: skipped where missing, a failure under CI (which must install them)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from fioscope_testkit.paths import REPO


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
# the Prometheus lines every rule test runs on: Debian's (2.42, on PATH) and the current one (3.x, from the cache: its
# promtool, which make test builds first, behind the tests)
PROMETHEUS_LINES = ["2", pytest.param("3", marks=pytest.mark.needs_tool("promtool3"))]


def require_prometheus(binary: str, line: str) -> str:
    """``binary`` (promtool, prometheus) of Prometheus ``line``: skipped where missing, a failure under CI."""
    if line == "2":
        return require(binary)
    path = PROMETHEUS3_DIR / binary
    if not built(path, {"promtool": "promtool3", "prometheus": "prometheus3"}[binary]):
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing (CI must build Prometheus 3: scripts/setup.sh)")
        pytest.skip(f"{path} not built (scripts/setup.sh builds it)")
    return str(path)


# ---- the tools scripts/setup.sh builds from Go source. `make test` builds them behind the tests (setup.sh --tests):
# a test that needs one is marked needs_tool("<tool>"), runs after the tests that need none, and waits for its build.
TEST_TOOLS = re.search(r"^TEST_TOOLS=\((.*)\)", (REPO / "scripts" / "setup.sh").read_text(), re.MULTILINE).group(1).split()
# a cold build of all of them on a busy 2-core machine, with room
BUILD_WAIT_S = 1500
_NEEDED: dict[str, set[str]] = {}  # node id -> the tools its needs_tool marks name (filled at collection)


def needed_tools(item: pytest.Item) -> set[str]:
    return {tool for mark in item.iter_markers("needs_tool") for tool in mark.args}


def order_by_tool(items: list[pytest.Item]) -> None:
    """The tests that need a tool after the others, in the order make test builds the tools: the rest of the suite
    runs while they are built (pytest-xdist hands tests out in this order)."""
    rank = {tool: i for i, tool in enumerate(TEST_TOOLS, 1)}
    for item in items:
        _NEEDED[item.nodeid] = needed_tools(item)
    items.sort(key=lambda item: max((rank.get(tool, len(rank) + 1) for tool in _NEEDED[item.nodeid]), default=0))


def built(binary: Path, tool: str) -> bool:
    """Whether ``binary`` (scripts/setup.sh's ``tool``) is there, once no build of it runs: setup.sh holds
    <binary>.lock while it builds, and make test's builds run beside the tests. A test asking for a tool it is not
    marked needs_tool(tool) for fails: the default run orders and waits by those marks."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    if current in _NEEDED and tool not in _NEEDED[current]:
        pytest.fail(f"{current} needs {binary}: mark it @pytest.mark.needs_tool({tool!r}) (make test builds it behind "
                    "the tests, testkit/fioscope_testkit/binaries.py)")
    return wait_for_build(binary)


def wait_for_build(binary: Path) -> bool:
    """Whether ``binary`` is there once no build holds <binary>.lock (waited for up to BUILD_WAIT_S)."""
    try:
        fd = os.open(binary.with_name(binary.name + ".lock"), os.O_RDONLY)
    except FileNotFoundError:
        return os.access(binary, os.X_OK)
    try:
        deadline = time.monotonic() + BUILD_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{binary}: still being built after {BUILD_WAIT_S} s ({binary}.log)")
                time.sleep(1)
    finally:
        os.close(fd)
    return os.access(binary, os.X_OK)



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
