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
    # HELP fioscope_disk_bus_info Block device attachment from sysfs: bus (device/subsystem), driver, NVMe transport ("" where absent).
    # TYPE fioscope_disk_bus_info gauge
    fioscope_disk_bus_info{bus="virtio",device="vda",driver="virtio_blk",transport=""} 1.0
    fioscope_disk_bus_info{bus="nvme",device="nvme0n1",driver="nvme",transport="pcie"} 1.0
    # HELP fioscope_machine_info The machine's identity from /sys/class/dmi/id ("" where absent): a provider's VM or bare metal.
    # TYPE fioscope_machine_info gauge
    fioscope_machine_info{bios_vendor="",chassis_asset_tag="",chassis_vendor="",product_family="",product_name="",sys_vendor=""} 1.0

(the machine_info of a machine without SMBIOS; a GCP VM's reads sys_vendor="Google", product_name="Google Compute Engine").
    # HELP fioscope_target_info Configured target: its directory and the block device holding it.
    # TYPE fioscope_target_info gauge
    fioscope_target_info{device="dm-3",directory="/srv/etcd-test",target="etcd"} 1.0

Read from sysfs on every scrape (a few dozen small files; devices come and go). The rules decide from these whether a
device is a provider's volume or local hardware (docs/device-class.md): the machine's identity (node_exporter's
``node_dmi_info`` says the same where its dmi collector runs; not every stack has it, e.g. Kubernetes), the device's
model and its bus. Serial numbers and UUIDs are not published (identifying, and no rule needs them).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily

from .. import blockdev
from ..store import Store

MAX_LABEL_CHARS = 256
# /sys/class/dmi/id files published as fioscope_machine_info labels (each readable without root)
DMI_FIELDS = ("sys_vendor", "product_name", "product_family", "chassis_vendor", "chassis_asset_tag", "bios_vendor")


def _label(value: str) -> str:
    """Text a label can carry: no lone surrogates (undecodable file names), bounded length."""
    return value.encode("utf-8", "replace").decode("utf-8")[:MAX_LABEL_CHARS]


def read_attribute(path: Path) -> str:
    """A sysfs attribute, stripped (SCSI and DMI pad with blanks); "" if absent or unreadable."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def _link_name(path: Path) -> str:
    """The last component of a sysfs link (device/subsystem -> "nvme"); "" if absent."""
    try:
        return Path(os.readlink(path)).name
    except OSError:
        return ""


class TopologyCollector:
    def __init__(self, store: Store, sys_root: Path = Path("/sys"), dev_md: Path = blockdev.DEV_MD):
        self.store = store
        self.sys_block = sys_root / "block"
        self.dmi = sys_root / "class" / "dmi" / "id"
        self.sys_dev_block = sys_root / "dev" / "block"
        self.dev_md = dev_md

    def _sysfs(self, device: str, name: str) -> str:
        """/sys/block/<device>/device/<name>, stripped; "" if absent or unreadable."""
        return read_attribute(self.sys_block / device / "device" / name)

    def _bus(self, device: str) -> tuple[str, str, str]:
        """(bus, driver, transport) of /sys/block/<device>/device: virtio/virtio_blk, scsi/sd, nvme/nvme; the
        transport is NVMe's own (pcie, or tcp/rdma/fc: a namespace over a fabric) or, for SCSI, iscsi or fc where the
        device sits under an iSCSI session or an FC remote port (as lsblk's TRAN reads it); "" each for loop, dm, md."""
        dev = self.sys_block / device / "device"
        # an NVMe namespace's device is its controller (class nvme, no driver): the driver is on the PCI function
        driver = _link_name(dev / "driver") or _link_name(dev / "device" / "driver")
        transport = self._sysfs(device, "transport")
        if not transport:
            where = os.path.realpath(dev)
            transport = "iscsi" if re.search(r"/session\d+/", where) else "fc" if re.search(r"/rport-[\d:-]+/", where) else ""
        return _link_name(dev / "subsystem"), driver, transport

    def _machine(self) -> GaugeMetricFamily:
        machine = GaugeMetricFamily("fioscope_machine_info",
                                    'The machine\'s identity from /sys/class/dmi/id ("" where absent): a provider\'s VM or bare metal.',
                                    labels=list(DMI_FIELDS))
        machine.add_metric([_label(read_attribute(self.dmi / name)) for name in DMI_FIELDS], 1)
        return machine

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
        bus = GaugeMetricFamily("fioscope_disk_bus_info",
                                'Block device attachment from sysfs: bus (device/subsystem), driver, NVMe transport ("" where absent).',
                                labels=["device", "bus", "driver", "transport"])
        for dev in blockdev.topology(self.sys_block, self.dev_md):
            vendor, model = self._sysfs(dev.device, "vendor"), self._sysfs(dev.device, "model")
            hardware.add_metric([_label(dev.device), _label(vendor), _label(model)], 1)
            bus.add_metric([_label(dev.device), *(_label(v) for v in self._bus(dev.device))], 1)
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
        yield bus
        yield self._machine()
        yield target
