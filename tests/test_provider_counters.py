"""The provider's own counters: Amazon's NVMe statistics log page, parsed and published (issue 55).

The pages are built here byte by byte from the documented layout (nvme-cli's amzn plugin, amazon-ec2-utils'
ebsnvme), with offsets written out, not from the parser's own structs; no EBS volume is reachable from this
machine, so the device's ioctl is the seam, and the collector reads a sysfs tree laid out as a Nitro instance's.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import subprocess
import threading
import time

import pytest
from fioscope import nvmelog
from fioscope.collector.provider import ProviderCollector, volume_id
from fioscope_testkit.binaries import require
from prometheus_client import CollectorRegistry, generate_latest

EBS = 0x3C23B510
INSTANCE_STORE = 0xEC2C0D7E
US = 1_000_000


def page(magic=EBS, counters=(10, 20, 4096 * 10, 4096 * 20, 5 * US, 7 * US, 3 * US, 2 * US, 1 * US, 0, 16),
         read_bins=((0, 128, 5), (128, 1024, 4), (1024, 65536, 1)), write_bins=((0, 256, 20),), used=None,
         size=4096) -> bytes:
    buf = bytearray(4096)
    struct.pack_into("<I", buf, 0, magic)
    struct.pack_into("<I", buf, 4, 0)
    for i, value in enumerate(counters):  # 11 u64 from offset 8
        struct.pack_into("<Q", buf, 8 + 8 * i, value)
    for at, bins in ((512, read_bins), (2056, write_bins)):
        struct.pack_into("<Q", buf, at, len(bins) if used is None else used)
        for i, (lower, upper, count) in enumerate(bins):
            struct.pack_into("<QQI", buf, at + 8 + 24 * i, lower, upper, count)
    return bytes(buf[:size])


def test_an_ebs_page_reads_in_seconds_and_bytes():
    stats = nvmelog.parse(page())
    assert stats.kind == "ebs"
    assert (stats.read_ops, stats.write_ops, stats.read_bytes, stats.write_bytes) == (10, 20, 40960, 81920)
    assert (stats.read_seconds, stats.write_seconds) == (5.0, 7.0)
    assert (stats.exceeded_iops_seconds, stats.exceeded_tp_seconds) == (3.0, 2.0)
    assert (stats.ec2_exceeded_iops_seconds, stats.ec2_exceeded_tp_seconds) == (1.0, 0.0)
    assert stats.queue_length == 16
    assert stats.read_latency.cumulative() == [(0.000128, 5), (0.001024, 9), (0.065536, 10)]
    assert stats.write_latency.count == 20


def test_an_instance_store_page_is_told_apart():
    assert nvmelog.parse(page(magic=INSTANCE_STORE)).kind == "instance_store"


@pytest.mark.parametrize("bad, reason", [
    (page(magic=0x12345678), "magic 0x12345678"),
    (page(size=4095), "4095 bytes"),
    (b"", "0 bytes"),
    (page(used=65), "65 bins"),
    (page(read_bins=((0, 128, 1), (64, 256, 1))), "out of order"),
    (page(read_bins=((128, 128, 1),)), "out of order"),
])
def test_what_is_not_a_statistics_page_is_refused(bad, reason):
    with pytest.raises(nvmelog.LogPageError, match=reason):
        nvmelog.parse(bad)


def test_the_admin_command_asks_for_page_0xd0_into_the_buffer():
    seen = {}

    def ioctl(fd, request, command):
        opcode, = struct.unpack_from("<B", command, 0)
        nsid, = struct.unpack_from("<I", command, 4)
        addr, = struct.unpack_from("<Q", command, 24)
        data_len, cdw10, cdw11 = struct.unpack_from("<III", command, 36)
        seen.update(request=request, opcode=opcode, nsid=nsid, data_len=data_len, cdw10=cdw10, cdw11=cdw11,
                    size=len(command))
        data = page()
        ctypes.memmove(addr, data, len(data))  # as the kernel copies the page out
        return 0

    raw = nvmelog.read_log_page("null", nsid=1, ioctl=ioctl)
    assert seen == {"request": 0xC0484E41, "opcode": 0x02, "nsid": 1, "data_len": 4096,
                    "cdw10": 0xD0 | (1023 << 16), "cdw11": 0, "size": 72}
    assert nvmelog.parse(raw).queue_length == 16


def test_a_controller_status_is_a_refusal_not_a_page():
    with pytest.raises(nvmelog.LogPageError, match="NVMe status 0x4002"):
        nvmelog.read_log_page("null", ioctl=lambda fd, request, command: 0x4002)


def sysfs(tmp_path, devices):
    for name, model, serial in devices:
        dev = tmp_path / "block" / name
        (dev / "device").mkdir(parents=True)
        (dev / "device" / "model").write_text(model.ljust(40) + "\n")
        (dev / "device" / "serial").write_text(serial.ljust(20) + "\n")
        (dev / "nsid").write_text("1\n")
    return tmp_path


def render(collector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def test_the_exposition_names_the_volume_and_passes_promtool(tmp_path):
    root = sysfs(tmp_path, [("nvme1n1", "Amazon Elastic Block Store", "vol0123456789abcdef0"),
                            ("nvme2n1", "Amazon EC2 NVMe Instance Storage", "AWS1234567890ABCDEF"),
                            ("nvme0n1", "Samsung SSD 980", "S123")])
    pages = {"nvme1n1": page(), "nvme2n1": page(magic=INSTANCE_STORE)}
    text = render(ProviderCollector(root, read=lambda device, nsid: pages[device]))
    ebs = 'device="nvme1n1",volume_id="vol-0123456789abcdef0"'
    assert f"fioscope_ebs_exceeded_iops_seconds_total{{{ebs}}} 3.0" in text
    assert f"fioscope_ebs_read_seconds_total{{{ebs}}} 5.0" in text
    assert f"fioscope_ebs_volume_queue_length{{{ebs}}} 16.0" in text
    bucket = 'fioscope_ebs_read_io_latency_seconds_bucket{device="nvme1n1",le="%s",volume_id="vol-0123456789abcdef0"}'
    assert f"{bucket % '0.001024'} 9.0" in text
    assert f"{bucket % '+Inf'} 10.0" in text
    assert 'fioscope_ec2_instance_store_ec2_exceeded_iops_seconds_total{device="nvme2n1"' in text
    assert "fioscope_ec2_instance_store_exceeded_iops" not in text  # instance store has no provisioned IOPS
    assert "nvme0n1" not in text  # local hardware that is not Amazon's: nothing to read
    promtool = require("promtool")
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_refusing_device_logs_once_and_counts_every_scrape(tmp_path, caplog):
    root = sysfs(tmp_path, [("nvme1n1", "Amazon Elastic Block Store", "vol0123456789abcdef0")])

    def refuse(device, nsid):
        raise PermissionError(13, "Permission denied", f"/dev/{device}")

    collector = ProviderCollector(root, read=refuse, min_interval=0)
    with caplog.at_level(logging.WARNING, logger="fioscope.provider"):
        for _ in range(3):
            text = render(collector)
    assert 'fioscope_nvme_stats_read_errors_total{device="nvme1n1"} 3.0' in text
    assert "fioscope_ebs_" not in text
    assert [r.getMessage() for r in caplog.records] == [
        "provider counters of nvme1n1 not read: [Errno 13] Permission denied: '/dev/nvme1n1'"]


def test_a_hanging_device_never_holds_a_scrape_past_the_timeout(tmp_path):
    root = sysfs(tmp_path, [("nvme1n1", "Amazon Elastic Block Store", "vol0123456789abcdef0")])
    release, calls = threading.Event(), []

    def read(device, nsid):
        calls.append(device)
        if len(calls) > 1:
            release.wait(30)  # the second read hangs until the test lets it go
        return page()

    collector = ProviderCollector(root, read=read, timeout=0.2, min_interval=0)
    assert "fioscope_ebs_read_ops_total" in render(collector)
    started = time.monotonic()
    hung = render(collector)
    assert time.monotonic() - started < 1.0
    # the last reading still serves, its age shows, the hang counts
    assert 'fioscope_ebs_read_ops_total{device="nvme1n1",volume_id="vol-0123456789abcdef0"} 10.0' in hung
    assert 'fioscope_nvme_stats_read_errors_total{device="nvme1n1"} 1.0' in hung
    started = time.monotonic()
    again = render(collector)
    assert time.monotonic() - started < 0.1  # no second wait and no second thread on a device still hung
    assert len(calls) == 2
    assert 'fioscope_nvme_stats_read_errors_total{device="nvme1n1"} 2.0' in again
    release.set()
    deadline = time.monotonic() + 5
    while collector.devices["nvme1n1"].reader.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(calls) == 2
    render(collector)
    assert len(calls) == 3  # released: reads again


def test_reads_are_cached_for_a_second(tmp_path):
    root = sysfs(tmp_path, [("nvme1n1", "Amazon Elastic Block Store", "vol0123456789abcdef0")])
    calls = []
    now = [100.0]
    collector = ProviderCollector(root, read=lambda d, n: calls.append(d) or page(), clock=lambda: now[0])
    render(collector)
    render(collector)
    assert len(calls) == 1
    now[0] += 1.5
    text = render(collector)
    assert len(calls) == 2
    assert 'fioscope_nvme_stats_age_seconds{device="nvme1n1"} 0.0' in text


def test_volume_ids_as_the_console_writes_them():
    assert volume_id("vol0123456789abcdef0") == "vol-0123456789abcdef0"
    assert volume_id("AWS1234567890ABCDEF") == "AWS1234567890ABCDEF"


def test_the_page_serves_each_new_reading_though_nothing_else_changed(tmp_path):
    """/metrics is rendered once per change (collector/__init__.py); the provider counters move on every read and
    are rendered on every scrape after the cached page, so the cache never holds them back."""
    from fioscope.collector import Exposition, ScrapeTimer
    from fioscope.config import load_config
    from fioscope.store import Store

    root = sysfs(tmp_path / "sys", [("nvme1n1", "Amazon Elastic Block Store", "vol0123456789abcdef0")])
    reads = iter(range(1, 100))
    provider = ProviderCollector(root, read=lambda d, n: page(counters=(next(reads),) + (0,) * 10), min_interval=0)
    store = Store(load_config(None, str(tmp_path / "results")))
    exposition = Exposition(store, ScrapeTimer(), provider=provider)
    series = 'fioscope_ebs_read_ops_total{device="nvme1n1",volume_id="vol-0123456789abcdef0"}'
    assert f"{series} 1.0" in exposition.render().decode()
    assert f"{series} 2.0" in exposition.render().decode()
    none = Exposition(store, ScrapeTimer(), provider=ProviderCollector(tmp_path / "empty"))
    assert b"fioscope_ebs" not in none.render() and b"fioscope_nvme_stats" not in none.render()
