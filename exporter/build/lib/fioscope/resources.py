"""Files the package carries: the fio profiles and the alert settings.

``fio-jobs/`` and ``alerts/config.yaml`` at the top of the repository are the source;
the package links them (``fioscope/profiles``, ``fioscope/alerts-config.yaml``) and a
built wheel holds copies, so an installed ``fioscope`` (venv, pipx, the image) finds
them from any working directory. ``FIOSCOPE_JOBS_DIR`` still points elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def profiles_dir() -> Path:
    """Where the shipped fio profiles (``*.fio``) are."""
    return Path(os.environ.get("FIOSCOPE_JOBS_DIR") or _HERE / "profiles")


def alerts_config_path() -> Path:
    """``alerts/config.yaml``: thresholds, windows, selectors (read through fioscope.settings)."""
    return _HERE / "alerts-config.yaml"
