"""Block devices as node_exporter names them, resolved from sysfs (no root needed)."""

from __future__ import annotations

import os
from pathlib import Path

SYS_BLOCK = Path("/sys/block")
SYS_DEV_BLOCK = Path("/sys/dev/block")


def device_for_path(path: str | os.PathLike) -> str:
    """The node_exporter ``device`` of the block device holding ``path``.

    The whole disk for a partition (``sda1`` -> ``sda``), ``dm-N`` / ``mdN`` / ``loopN``
    for layered devices; "" where the path does not exist or is not on a block device
    (tmpfs, overlay, NFS).
    """
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return ""
    sysdev = SYS_DEV_BLOCK / f"{os.major(dev)}:{os.minor(dev)}"
    try:
        real = sysdev.resolve(strict=True)
    except OSError:
        return ""
    if (real / "partition").exists():
        real = real.parent
    return real.name
