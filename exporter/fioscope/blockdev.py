"""Block devices as node_exporter names them, resolved from sysfs (no root needed)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SYS_BLOCK = Path("/sys/block")
SYS_DEV_BLOCK = Path("/sys/dev/block")
DEV_MD = Path("/dev/md")  # mdadm's named arrays: /dev/md/<name> -> ../mdN

KINDS = ("disk", "lvm", "dm", "md", "loop")


def device_for_path(path: str | os.PathLike, sys_dev_block: Path = SYS_DEV_BLOCK) -> str:
    """The node_exporter ``device`` of the block device holding ``path``.

    The whole disk for a partition (``sda1`` -> ``sda``), ``dm-N`` / ``mdN`` / ``loopN``
    for layered devices; "" where the path does not exist or is not on a block device
    (tmpfs, overlay, NFS).
    """
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return ""
    sysdev = sys_dev_block / f"{os.major(dev)}:{os.minor(dev)}"
    try:
        real = sysdev.resolve(strict=True)
    except OSError:
        return ""
    return _whole_disk(real).name


def _whole_disk(sysfs_dir: Path) -> Path:
    """A partition's sysfs directory lives inside its disk's."""
    return sysfs_dir.parent if (sysfs_dir / "partition").exists() else sysfs_dir


@dataclass(frozen=True)
class BlockDevice:
    """One entry of /sys/block: ``dm-3`` is ``vg0-data`` (lvm) on ``md0``."""

    device: str  # node_exporter's name
    name: str  # what an operator calls it: LVM vg-lv, the md array's name, a loop's backing file
    kind: str  # one of KINDS
    parents: tuple[str, ...]  # the devices it is built on (/sys/block/<device>/slaves), sorted


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _md_names(dev_md: Path) -> dict[str, str]:
    """mdN -> the array's name, from mdadm's /dev/md/<name> symlinks."""
    names: dict[str, str] = {}
    try:
        entries = sorted(dev_md.iterdir())
    except OSError:
        return names
    for entry in entries:
        try:
            names.setdefault(Path(os.readlink(entry)).name, entry.name)
        except OSError:
            continue
    return names


def _describe(entry: Path, md_names: dict[str, str]) -> tuple[str, str]:
    """(kind, name) of one /sys/block entry."""
    device = entry.name
    if (entry / "dm").is_dir():
        name = _read(entry / "dm" / "name") or device
        return ("lvm" if _read(entry / "dm" / "uuid").startswith("LVM-") else "dm"), name
    if (entry / "md").is_dir():
        return "md", md_names.get(device, device)
    if (entry / "loop").is_dir():
        return "loop", _read(entry / "loop" / "backing_file") or device
    return "disk", device


def _parents(entry: Path) -> tuple[str, ...]:
    try:
        slaves = list((entry / "slaves").iterdir())
    except OSError:
        return ()
    names = set()
    for slave in slaves:
        try:
            names.add(_whole_disk(slave.resolve(strict=True)).name)
        except OSError:
            names.add(slave.name)
    return tuple(sorted(names))


def topology(sys_block: Path = SYS_BLOCK, dev_md: Path = DEV_MD) -> list[BlockDevice]:
    """Every block device with a capacity, sorted by name.

    Devices of size 0 hold nothing (a detached loop, an unused zram, an empty drive) and are
    left out. A device that vanishes while it is read is skipped.
    """
    try:
        entries = sorted(sys_block.iterdir())
    except OSError:
        return []
    md_names = _md_names(dev_md)
    devices = []
    for entry in entries:
        if _read(entry / "size") in ("", "0"):
            continue
        kind, name = _describe(entry, md_names)
        devices.append(BlockDevice(entry.name, name, kind, _parents(entry)))
    return devices
