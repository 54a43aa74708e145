"""The native stack (fioscope_mixin.native) as the tests use it: NativeStack, and its generated configuration files in a scratch root."""

from __future__ import annotations

from pathlib import Path

from fioscope_mixin import prometheus
from fioscope_mixin.native import NativeStack
from fioscope_mixin.settings import load_settings

__all__ = ["NativeStack", "write_stack_files"]


def write_stack_files(root: Path, overrides: list[str]) -> Path:
    """fioscope_mixin.prometheus's ``render`` with ``--set`` overrides, written into ``root`` in the repository's layout
    (never a hand-written copy); returns the prometheus.yml."""
    for rel, text in prometheus.render(load_settings(overrides)).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "provisioning" / "prometheus" / "prometheus.yml"
