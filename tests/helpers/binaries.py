"""External tools the tests need: skipped where missing, a failure under CI (which must install them)."""

from __future__ import annotations

import os
import shutil

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
