"""Where the repository and its fixtures are, and the environment that runs this checkout's code."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
FIO_OUTPUTS = FIXTURES / "fio-outputs"
IOSTAT = FIXTURES / "iostat"  # iostat -x -o JSON captures of lab disks, with the fio results of the same session


def checkout_env() -> dict[str, str]:
    """os.environ with this checkout's exporter, mixin and testkit first on PYTHONPATH: a subprocess runs the code under
    test, not whatever copy of the package is installed."""
    own = [str(REPO / "exporter"), str(REPO / "mixin"), str(REPO / "testkit")]
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in own]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(own + inherited)}
