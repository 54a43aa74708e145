"""Files the package carries: the fio profiles.

``fio-jobs/`` at the top of the repository is the source; the package links it
(``fioscope/profiles``) and a built wheel holds copies, so an installed ``fioscope``
(venv, pipx, the image) finds them from any working directory. ``FIOSCOPE_JOBS_DIR``
still points elsewhere. alerts/config.yaml is fioscope_mixin's (``fioscope_mixin.settings``).
"""

from __future__ import annotations

import os
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def profiles_dir() -> Path:
    """Where the shipped fio profiles (``*.fio``) are."""
    return Path(os.environ.get("FIOSCOPE_JOBS_DIR") or _HERE / "profiles")
