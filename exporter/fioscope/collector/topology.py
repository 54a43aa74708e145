"""Collector of the disk topology: which block device is built on which, and where the targets live.

Exposition (an LVM volume on an md RAID1 of two disks holding the target ``etcd``)::

    # HELP fioscope_disk_info Block device: its human name, kind, parent devices and the targets on it.
    # TYPE fioscope_disk_info gauge
    fioscope_disk_info{device="dm-3",kind="lvm",name="vg0-data",parents="md0",targets="etcd"} 1.0
    fioscope_disk_info{device="md0",kind="md",name="data",parents="vda,vdb",targets=""} 1.0
    fioscope_disk_info{device="vda",kind="disk",name="vda",parents="",targets=""} 1.0
    # HELP fioscope_disk_parent_info One edge of the device stack: device is built on parent.
    # TYPE fioscope_disk_parent_info gauge
    fioscope_disk_parent_info{device="dm-3",parent="md0"} 1.0
    fioscope_disk_parent_info{device="md0",parent="vda"} 1.0
    # HELP fioscope_disk_model_info Block device hardware from sysfs device/vendor and device/model ("" where absent).
    # TYPE fioscope_disk_model_info gauge
    fioscope_disk_model_info{device="vda",model="",vendor="0x1af4"} 1.0
    fioscope_disk_model_info{device="nvme0n1",model="Amazon Elastic Block Store",vendor=""} 1.0
    # HELP fioscope_target_info Configured target: its directory and the block device holding it.
    # TYPE fioscope_target_info gauge
    fioscope_target_info{device="dm-3",directory="/srv/etcd-test",target="etcd"} 1.0

Read from sysfs on every scrape (a few dozen small files; devices come and go).
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.core import GaugeMetricFamily

from .. import blockdev
from ..store import Store

MAX_LABEL_CHARS = 256


def _label(value: str) -> str:
    """Text a label can carry: no lone surrogates (undecodable file names), bounded length."""
    return value.encode("utf-8", "replace").decode("utf-8")[:MAX_LABEL_CHARS]


class TopologyCollector:
    def __init__(self, store: Store, sys_root: Path = Path("/sys"), dev_md: Path = blockdev.DEV_MD):
        self.store = store
        self.sys_block = sys_root / "block"
        self.sys_dev_block = sys_root / "dev" / "block"
        self.dev_md = dev_md

    def _sysfs(self, device: str, name: str) -> str:
        """/sys/block/<device>/device/<name>, stripped (SCSI pads the model with blanks); "" if absent or unreadable."""
        try:
            return (self.sys_block / device / "device" / name).read_text(errors="replace").strip()
        except OSError:
            return ""

    def collect(self):
        targets = [(t.name, str(t.directory), blockdev.device_for_path(t.directory, self.sys_dev_block))
                   for t in self.store.config.targets]
        on_device: dict[str, list[str]] = {}
        for name, _, device in targets:
            on_device.setdefault(device, []).append(name)

        disk = GaugeMetricFamily("fioscope_disk_info", "Block device: its human name, kind, parent devices and the targets on it.",
                                 labels=["device", "name", "kind", "parents", "targets"])
        edge = GaugeMetricFamily("fioscope_disk_parent_info", "One edge of the device stack: device is built on parent.",
                                 labels=["device", "parent"])
        # the rules tell a provider's volume (its cap) from local hardware (its physical maximum) by these
        hardware = GaugeMetricFamily("fioscope_disk_model_info",
                                     'Block device hardware from sysfs device/vendor and device/model ("" where absent).',
                                     labels=["device", "vendor", "model"])
        for dev in blockdev.topology(self.sys_block, self.dev_md):
            vendor, model = self._sysfs(dev.device, "vendor"), self._sysfs(dev.device, "model")
            hardware.add_metric([_label(dev.device), _label(vendor), _label(model)], 1)
            disk.add_metric([_label(dev.device), _label(dev.name), dev.kind, _label(",".join(dev.parents)),
                             _label(",".join(sorted(on_device.get(dev.device, []))))], 1)
            for parent in dev.parents:
                edge.add_metric([_label(dev.device), _label(parent)], 1)
        target = GaugeMetricFamily("fioscope_target_info", "Configured target: its directory and the block device holding it.",
                                   labels=["target", "directory", "device"])
        for name, directory, device in targets:
            target.add_metric([_label(name), _label(directory), _label(device)], 1)
        yield disk
        yield edge
        yield hardware
        yield target
