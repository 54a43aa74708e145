"""The repository's stack/native.py as the tests use it: NativeStack, and its generated configuration files in a scratch root."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers.paths import REPO

sys.path.insert(0, str(REPO / "stack"))
from fioscope.settings import load_settings  # noqa: E402
from native import NativeStack, _generator  # noqa: E402

__all__ = ["NativeStack", "write_stack_files"]


def write_stack_files(root: Path, overrides: list[str]) -> Path:
    """alerts/generate.py's ``render`` with ``--set`` overrides, written into ``root`` in the repository's layout
    (never a hand-written copy); returns the prometheus.yml."""
    for rel, text in _generator().render(load_settings(overrides)).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "provisioning" / "prometheus" / "prometheus.yml"
