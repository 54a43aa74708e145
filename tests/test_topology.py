"""Disk topology from sysfs: a fake LVM-on-md tree (golden exposition) and the real /sys with a real loop device."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from fioscope import blockdev
from fioscope.collector.topology import TopologyCollector
from fioscope.config import Config, Target
from fioscope.store import Store
from fioscope_testkit.binaries import first_installed, require
from fioscope_testkit.net import free_port, http_get, wait_for
from fioscope_testkit.paths import REPO
from helpers.exposition import parse_exposition, promtool_check_metrics
from helpers.lab import lab_lock
from prometheus_client import CollectorRegistry, generate_latest


def _device(sys: Path, where: str, name: str, size: int = 2048, **files: str) -> Path:
    """A /sys/devices/<where>/<name> entry with its /sys/block link (a partition when ``where`` is a disk)."""
    path = sys / "devices" / where / name
    path.mkdir(parents=True)
    (path / "size").write_text(f"{size}\n")
    (path / "slaves").mkdir()
    for rel, text in files.items():
        (path / rel.replace("__", "/")).parent.mkdir(parents=True, exist_ok=True)
        (path / rel.replace("__", "/")).write_text(text + "\n")
    if "partition" not in files:
        (sys / "block").mkdir(exist_ok=True)
        (sys / "block" / name).symlink_to(Path("..") / "devices" / where / name)
    return path


def _slave(device: Path, parent: Path) -> None:
    (device / "slaves" / parent.name).symlink_to(os.path.relpath(parent, device / "slaves"))


def _holds(sys: Path, directory: Path, device: Path) -> None:
    """/sys/dev/block/MAJ:MIN of ``directory``'s real filesystem -> ``device`` (as the kernel links it)."""
    dev = os.stat(directory).st_dev
    link = sys / "dev" / "block" / f"{os.major(dev)}:{os.minor(dev)}"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(device, link.parent))


@pytest.fixture
def lvm_on_md(tmp_path):
    """vg0-data (dm-3, LVM) on md0 ("data", RAID1 of vda1+vdb1); a dm-crypt volume on vdc; a loop; a detached loop."""
    sys = tmp_path / "sys"
    pci = "pci0000:00/0000:00:05.0/virtio2/block"
    vda, vdb = _device(sys, pci, "vda"), _device(sys, pci, "vdb")
    vdc = _device(sys, pci, "vdc", device__vendor="QEMU    ", device__model="QEMU HARDDISK   ")  # SCSI pads with blanks
    vda1 = _device(sys, f"{pci}/vda", "vda1", partition="1")
    vdb1 = _device(sys, f"{pci}/vdb", "vdb1", partition="1")
    md0 = _device(sys, "virtual/block", "md0", md__level="raid1")
    _slave(md0, vda1)
    _slave(md0, vdb1)
    dm3 = _device(sys, "virtual/block", "dm-3", dm__name="vg0-data", dm__uuid="LVM-6vKcQ2x0DJ1rn4ez2hvlWYFoO1rOMn6Y")
    _slave(dm3, md0)
    dm4 = _device(sys, "virtual/block", "dm-4", dm__name="cryptswap", dm__uuid="CRYPT-LUKS2-0b1c-cryptswap")
    _slave(dm4, vdc)
    _device(sys, "virtual/block", "loop0", loop__backing_file="/var/lib/images/scratch.img")
    _device(sys, "virtual/block", "loop1", size=0)  # detached: left out
    dev_md = tmp_path / "dev" / "md"
    dev_md.mkdir(parents=True)
    (dev_md / "data").symlink_to("../md0")
    etcd = tmp_path / "etcd-test"
    etcd.mkdir()
    _holds(sys, etcd, dm3)
    assert vda and vdb
    return sys, dev_md, etcd, vda1


GOLDEN = """\
# HELP fioscope_disk_info Block device: its human name, kind, parent devices and the targets on it.
# TYPE fioscope_disk_info gauge
fioscope_disk_info{device="dm-3",kind="lvm",name="vg0-data",parents="md0",targets="etcd,etcd-copy"} 1.0
fioscope_disk_info{device="dm-4",kind="dm",name="cryptswap",parents="vdc",targets=""} 1.0
fioscope_disk_info{device="loop0",kind="loop",name="/var/lib/images/scratch.img",parents="",targets=""} 1.0
fioscope_disk_info{device="md0",kind="md",name="data",parents="vda,vdb",targets=""} 1.0
fioscope_disk_info{device="vda",kind="disk",name="vda",parents="",targets=""} 1.0
fioscope_disk_info{device="vdb",kind="disk",name="vdb",parents="",targets=""} 1.0
fioscope_disk_info{device="vdc",kind="disk",name="vdc",parents="",targets=""} 1.0
# HELP fioscope_disk_parent_info One edge of the device stack: device is built on parent.
# TYPE fioscope_disk_parent_info gauge
fioscope_disk_parent_info{device="dm-3",parent="md0"} 1.0
fioscope_disk_parent_info{device="dm-4",parent="vdc"} 1.0
fioscope_disk_parent_info{device="md0",parent="vda"} 1.0
fioscope_disk_parent_info{device="md0",parent="vdb"} 1.0
# HELP fioscope_disk_model_info Block device hardware from sysfs device/vendor and device/model ("" where absent).
# TYPE fioscope_disk_model_info gauge
fioscope_disk_model_info{device="dm-3",model="",vendor=""} 1.0
fioscope_disk_model_info{device="dm-4",model="",vendor=""} 1.0
fioscope_disk_model_info{device="loop0",model="",vendor=""} 1.0
fioscope_disk_model_info{device="md0",model="",vendor=""} 1.0
fioscope_disk_model_info{device="vda",model="",vendor=""} 1.0
fioscope_disk_model_info{device="vdb",model="",vendor=""} 1.0
fioscope_disk_model_info{device="vdc",model="QEMU HARDDISK",vendor="QEMU"} 1.0
# HELP fioscope_disk_bus_info Block device attachment from sysfs: bus (device/subsystem), driver, NVMe transport ("" where absent).
# TYPE fioscope_disk_bus_info gauge
fioscope_disk_bus_info{bus="",device="dm-3",driver="",transport=""} 1.0
fioscope_disk_bus_info{bus="",device="dm-4",driver="",transport=""} 1.0
fioscope_disk_bus_info{bus="",device="loop0",driver="",transport=""} 1.0
fioscope_disk_bus_info{bus="",device="md0",driver="",transport=""} 1.0
fioscope_disk_bus_info{bus="",device="vda",driver="",transport=""} 1.0
fioscope_disk_bus_info{bus="",device="vdb",driver="",transport=""} 1.0
fioscope_disk_bus_info{bus="",device="vdc",driver="",transport=""} 1.0
# HELP fioscope_machine_info The machine's identity from /sys/class/dmi/id ("" where absent): a provider's VM or bare metal.
# TYPE fioscope_machine_info gauge
fioscope_machine_info{bios_vendor="",chassis_asset_tag="",chassis_vendor="",product_family="",product_name="",sys_vendor=""} 1.0
# HELP fioscope_target_info Configured target: its directory and the block device holding it.
# TYPE fioscope_target_info gauge
fioscope_target_info{device="dm-3",directory="{etcd}",target="etcd"} 1.0
fioscope_target_info{device="dm-3",directory="{etcd}",target="etcd-copy"} 1.0
fioscope_target_info{device="",directory="/nonexistent/fleet",target="gone"} 1.0
"""


def _exposition(store: Store, sys: Path, dev_md: Path) -> str:
    registry = CollectorRegistry()
    registry.register(TopologyCollector(store, sys_root=sys, dev_md=dev_md))
    return generate_latest(registry).decode()


def test_lvm_on_md_topology_golden_exposition(lvm_on_md):
    sys, dev_md, etcd, _ = lvm_on_md
    # targets in config order; "targets" on a device is sorted
    config = Config(targets=(Target("etcd-copy", etcd), Target("etcd", etcd), Target("gone", Path("/nonexistent/fleet"))))
    text = _exposition(Store(config), sys, dev_md)
    expected = GOLDEN.replace("{etcd}", str(etcd)).splitlines()
    # target_info in config order
    expected[-3], expected[-2] = expected[-2], expected[-3]
    assert text.splitlines() == expected
    assert promtool_check_metrics(text).returncode == 0


def test_partition_maps_to_its_disk_and_a_vanished_tree_publishes_nothing(lvm_on_md, tmp_path):
    sys, dev_md, etcd, vda1 = lvm_on_md
    link = next((sys / "dev" / "block").iterdir())
    link.unlink()
    link.symlink_to(os.path.relpath(vda1, link.parent))
    assert blockdev.device_for_path(etcd, sys / "dev" / "block") == "vda"
    assert blockdev.device_for_path(tmp_path / "missing", sys / "dev" / "block") == ""
    assert blockdev.topology(tmp_path / "no-sys", dev_md) == []


def test_real_sysfs_names_the_lab_loop_device_holding_a_target(tmp_path):
    """Root: a real loop device (a lab disk) holds the target; the real /sys says so."""
    if os.geteuid() != 0:
        pytest.skip("needs root (loop devices)")
    from fioscope import lab

    with lab_lock():
        disk = lab.up("healthy", name="fleet-topology", size="64M", state_dir=tmp_path / "lab")
        try:
            store = Store(Config(targets=(Target("lab", Path(disk.mountpoint)),)))
            text = _exposition(store, Path("/sys"), blockdev.DEV_MD)
        finally:
            lab.down("fleet-topology", tmp_path / "lab")
        after_down = _exposition(Store(Config()), Path("/sys"), blockdev.DEV_MD)
    loop = disk.device_name
    assert f'fioscope_target_info{{device="{loop}",directory="{disk.mountpoint}",target="lab"}} 1.0' in text
    assert (f'fioscope_disk_info{{device="{loop}",kind="loop",name="{disk.backing_file}",parents="",targets="lab"}} 1.0'
            in text), text
    assert f'device="{loop}"' not in after_down, "a detached loop is left out"


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


@pytest.fixture
def cloud_machine(tmp_path):
    """An Azure VM as its guest reads it: DMI with Azure's chassis asset tag; a remote NVMe data disk (nvme0n2 on
    the "MSFT NVMe Accelerator v1.0" controller), a local NVMe (nvme1n1, "Microsoft NVMe Direct Disk v2"), a SCSI
    disk (sda), an NVMe/TCP namespace (nvme2n1) and an iSCSI LUN (sdb); blanks and a newline as the kernel pads them,
    a quote to escape."""
    sys = tmp_path / "sys"
    dmi = sys / "devices" / "virtual" / "dmi" / "id"
    dmi.mkdir(parents=True)
    for name, text in (("sys_vendor", "Microsoft Corporation"), ("product_name", "Virtual Machine"),
                       ("chassis_asset_tag", "7783-7084-3265-9085-8269-3286-77"), ("bios_vendor", 'Microsoft "Hyper-V" UEFI'),
                       ("product_uuid", "0c5b4b56-secret")):  # serials and UUIDs are never published
        (dmi / name).write_text(text + "   \n")
    _link(sys / "class" / "dmi" / "id", dmi)
    pci = sys / "devices" / "pci0000:00"
    for ctrl, fn, model, transport, names in (("nvme0", "0000:00:04.0", "MSFT NVMe Accelerator v1.0", "pcie", ("nvme0n1", "nvme0n2")),
                                              ("nvme1", "0000:00:05.0", "Microsoft NVMe Direct Disk v2", "pcie", ("nvme1n1",)),
                                              ("nvme2", "", "Linux", "tcp", ("nvme2n1",))):
        where = f"pci0000:00/{fn}/nvme/{ctrl}" if fn else f"virtual/nvme-fabrics/ctl/{ctrl}"
        controller = sys / "devices" / where
        for name in names:
            _device(sys, where, name)
        (controller / "model").write_text(model + "  \n")
        (controller / "transport").write_text(transport + "\n")
        _link(controller / "subsystem", sys / "class" / "nvme")
        for name in names:
            (controller / name / "device").symlink_to("..")
        if fn:
            _link(pci / fn / "driver", sys / "bus" / "pci" / "drivers" / "nvme")
            (controller / "device").symlink_to("../..")
    scsi = sys / "devices" / "pci0000:00" / "0000:00:06.0" / "host0" / "target0:0:0" / "0:0:0:0"
    _device(sys, "pci0000:00/0000:00:06.0/host0/target0:0:0/0:0:0:0/block", "sda")
    (scsi / "vendor").write_text("Msft    \n")
    (scsi / "model").write_text("Virtual Disk    \n")
    _link(scsi / "subsystem", sys / "bus" / "scsi")
    _link(scsi / "driver", sys / "bus" / "scsi" / "drivers" / "sd")
    (scsi / "block" / "sda" / "device").symlink_to("../..")
    # a LUN over iSCSI (OCI's block volumes attach so): the device sits under the iSCSI session
    lun = sys / "devices" / "platform" / "host1" / "session1" / "target1:0:0" / "1:0:0:1"
    _device(sys, "platform/host1/session1/target1:0:0/1:0:0:1/block", "sdb")
    (lun / "vendor").write_text("ORACLE  \n")
    (lun / "model").write_text("BlockVolume     \n")
    _link(lun / "subsystem", sys / "bus" / "scsi")
    _link(lun / "driver", sys / "bus" / "scsi" / "drivers" / "sd")
    (lun / "block" / "sdb" / "device").symlink_to("../..")
    return sys


CLOUD_GOLDEN = """\
# HELP fioscope_disk_model_info Block device hardware from sysfs device/vendor and device/model ("" where absent).
# TYPE fioscope_disk_model_info gauge
fioscope_disk_model_info{device="nvme0n1",model="MSFT NVMe Accelerator v1.0",vendor=""} 1.0
fioscope_disk_model_info{device="nvme0n2",model="MSFT NVMe Accelerator v1.0",vendor=""} 1.0
fioscope_disk_model_info{device="nvme1n1",model="Microsoft NVMe Direct Disk v2",vendor=""} 1.0
fioscope_disk_model_info{device="nvme2n1",model="Linux",vendor=""} 1.0
fioscope_disk_model_info{device="sda",model="Virtual Disk",vendor="Msft"} 1.0
fioscope_disk_model_info{device="sdb",model="BlockVolume",vendor="ORACLE"} 1.0
# HELP fioscope_disk_bus_info Block device attachment from sysfs: bus (device/subsystem), driver, NVMe transport ("" where absent).
# TYPE fioscope_disk_bus_info gauge
fioscope_disk_bus_info{bus="nvme",device="nvme0n1",driver="nvme",transport="pcie"} 1.0
fioscope_disk_bus_info{bus="nvme",device="nvme0n2",driver="nvme",transport="pcie"} 1.0
fioscope_disk_bus_info{bus="nvme",device="nvme1n1",driver="nvme",transport="pcie"} 1.0
fioscope_disk_bus_info{bus="nvme",device="nvme2n1",driver="",transport="tcp"} 1.0
fioscope_disk_bus_info{bus="scsi",device="sda",driver="sd",transport=""} 1.0
fioscope_disk_bus_info{bus="scsi",device="sdb",driver="sd",transport="iscsi"} 1.0
# HELP fioscope_machine_info The machine's identity from /sys/class/dmi/id ("" where absent): a provider's VM or bare metal.
# TYPE fioscope_machine_info gauge
fioscope_machine_info{bios_vendor="Microsoft \\"Hyper-V\\" UEFI",chassis_asset_tag="7783-7084-3265-9085-8269-3286-77",chassis_vendor="",\
product_family="",product_name="Virtual Machine",sys_vendor="Microsoft Corporation"} 1.0
"""


def _families(text: str, *names: str) -> list[str]:
    return [line for line in text.splitlines() if any(f" {n} " in line or line.startswith(n + "{") for n in names)]


def test_cloud_machine_identity_and_device_bus_golden_exposition(cloud_machine, tmp_path):
    text = _exposition(Store(Config()), cloud_machine, tmp_path / "no-md")
    names = ("fioscope_disk_model_info", "fioscope_disk_bus_info", "fioscope_machine_info")
    assert _families(text, *names) == CLOUD_GOLDEN.splitlines(), text
    assert "secret" not in text
    assert promtool_check_metrics(text).returncode == 0


def test_machine_without_dmi_publishes_its_identity_unknown(cloud_machine, tmp_path):
    """ARM boards, microVMs (this CI VM: "DMI not present or invalid"): the series is there, every label ""."""
    (cloud_machine / "class" / "dmi" / "id").unlink()
    text = _exposition(Store(Config()), cloud_machine, tmp_path / "no-md")
    assert ('fioscope_machine_info{bios_vendor="",chassis_asset_tag="",chassis_vendor="",product_family="",'
            'product_name="",sys_vendor=""} 1.0') in text


def test_real_machine_identity_and_bus_match_sysfs():
    """The real /sys: fioscope_machine_info says what /sys/class/dmi/id says (here, on a QEMU/KVM guest without
    SMBIOS, nothing), and each disk's bus is its device/subsystem link."""
    text = _exposition(Store(Config()), Path("/sys"), blockdev.DEV_MD)
    dmi = Path("/sys/class/dmi/id")

    def read(name: str) -> str:
        try:
            return (dmi / name).read_text(errors="replace").strip()
        except OSError:
            return ""
    fields = sorted(("sys_vendor", "product_name", "product_family", "chassis_vendor", "chassis_asset_tag", "bios_vendor"))
    want = "fioscope_machine_info{" + ",".join(f'{f}="{read(f)}"' for f in fields) + "} 1.0"
    assert want in text, text
    for disk in Path("/sys/block").iterdir():
        subsystem = disk / "device" / "subsystem"
        if subsystem.is_symlink():
            assert f'bus="{Path(os.readlink(subsystem)).name}",device="{disk.name}"' in text, text


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _series(text: str, names: tuple[str, ...], **identity: str) -> list[str]:
    """The samples of ``names`` in an exposition as promtool series selectors, with the scrape's ``identity`` labels."""
    out = []
    for (name, labels), _ in sorted(parse_exposition(text).items(), key=lambda kv: (kv[0][0], sorted(kv[0][1]))):
        if name in names:
            pairs = {**identity, **dict(labels)}
            out.append(name + "{" + ",".join(f'{k}="{_escaped(v)}"' for k, v in pairs.items()) + "}")
    return out


def test_node_exporters_dmi_names_an_azure_machine_for_the_device_class_rule(cloud_machine, tmp_path):
    """The real node_exporter's dmi collector over the Azure VM's sysfs: its node_dmi_info labels are the ones the
    rule reads (system_vendor, product_name, chassis_asset_tag). With it, a device of unknown model on that host is
    the provider's volume; without any identity (bare metal) the same device is local hardware. The local NVMe
    (Microsoft NVMe Direct Disk v2) is local either way; the remote NVMe, the SCSI disk and the NVMe/TCP namespace never."""
    port = free_port()
    log = tmp_path / "node_exporter.log"
    proc = subprocess.Popen([first_installed("prometheus-node-exporter", "node_exporter"), f"--web.listen-address=127.0.0.1:{port}",
                             "--collector.disable-defaults", "--collector.dmi", f"--path.sysfs={cloud_machine}"],
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        def scraped() -> str:
            text = http_get(f"http://127.0.0.1:{port}/metrics")
            return text if "node_dmi_info{" in text else ""
        node = wait_for(scraped, 15, what="node_dmi_info")
    finally:
        proc.terminate()
        proc.wait(10)
    dmi = _series(node, ("node_dmi_info",), job="node", instance="az:9100", host="az")
    assert len(dmi) == 1 and 'chassis_asset_tag="7783-7084-3265-9085-8269-3286-77"' in dmi[0], node
    fioscope = _exposition(Store(Config()), cloud_machine, tmp_path / "no-md")
    disks = _series(fioscope, ("fioscope_disk_model_info", "fioscope_disk_bus_info"), job="fioscope", instance="az:7963", host="az")
    # a device of a family no list knows yet (its model is the only thing it says)
    disks.append('fioscope_disk_model_info{job="fioscope",instance="az:7963",host="az",device="nvme9n1",vendor="",model="Contoso Volume"}')

    def case(name: str, series: list[str], local: list[str]) -> dict:
        return {"name": name, "interval": "15s", "input_series": [{"series": s, "values": "1x8"} for s in series],
                "promql_expr_test": [{"expr": "fioscope:disk_physical_device", "eval_time": "1m", "exp_samples": [
                    {"labels": f'fioscope:disk_physical_device{{device="{d}",host="az"}}', "value": 1} for d in local]}]}
    tests = {"rule_files": [str(REPO / "alerts" / "recording.rules.yaml")], "evaluation_interval": "15s",
             "tests": [case("azure identity from node_exporter", dmi + disks, ["nvme1n1"]),
                       case("no identity: bare metal", disks, ["nvme1n1", "nvme9n1"])]}
    (tmp_path / "class.test.yaml").write_text(yaml.safe_dump(tests))
    proc2 = subprocess.run([require("promtool"), "test", "rules", str(tmp_path / "class.test.yaml")], capture_output=True, text=True)
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr
