"""The statistics log page of Amazon's NVMe devices: EBS volumes and EC2 instance store.

On Nitro instances the guest reads each volume's own counters from its NVMe controller: a vendor log page (0xD0,
the admin command Get Log Page) of 4,096 bytes, little-endian and packed, as nvme-cli's amzn plugin and
amazon-ec2-utils' ebsnvme read it::

    offset  size  field
         0     4  magic: 0x3C23B510 (an EBS volume) or 0xEC2C0D7E (instance store)
         4     4  version
         8   8x11 total read ops, write ops, read bytes, write bytes, read time (us), write time (us),
                  time over the volume's provisioned IOPS (us) and throughput (us),
                  time over the instance's EBS IOPS (us) and throughput (us) (instance store: its own limits),
                  queue length (a point in time)
        96   416  reserved
       512  1544  read latency histogram: bins used (u64), then 64 bins of lower (us, u64), upper (us, u64),
                  count (u32), reserved (u32)
      2056  1544  write latency histogram, the same
      3600   496  per-size histograms' header and reserved (not read)

Every time is cumulative microseconds since the volume was attached; the histograms' counts are per bin.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

LOG_PAGE_ID = 0xD0
LOG_PAGE_BYTES = 4096
EBS_MAGIC = 0x3C23B510
INSTANCE_STORE_MAGIC = 0xEC2C0D7E
KINDS = {EBS_MAGIC: "ebs", INSTANCE_STORE_MAGIC: "instance_store"}
# /sys/block/<dev>/device/model of each kind (the controller's model, blank-padded)
EBS_MODEL = "Amazon Elastic Block Store"
INSTANCE_STORE_MODEL = "Amazon EC2 NVMe Instance Storage"

_HEADER = struct.Struct("<II11Q")
_BIN = struct.Struct("<QQII")
MAX_BINS = 64
_READ_HISTOGRAM_AT = 512
_HISTOGRAM_BYTES = 8 + MAX_BINS * _BIN.size
_WRITE_HISTOGRAM_AT = _READ_HISTOGRAM_AT + _HISTOGRAM_BYTES

# the NVMe admin passthrough (linux/nvme_ioctl.h struct nvme_passthru_cmd, 72 bytes) and its ioctl number,
# _IOWR('N', 0x41, struct nvme_admin_cmd)
NVME_IOCTL_ADMIN_CMD = 0xC0484E41
NVME_ADMIN_GET_LOG_PAGE = 0x02
_ADMIN_CMD = struct.Struct("<BBHIIIQQII6III")
IOCTL_TIMEOUT_MS = 1000


class LogPageError(ValueError):
    """The bytes are not one of the two log pages (wrong magic, short, a histogram that cannot be)."""


@dataclass(frozen=True)
class Histogram:
    """Latency bins: (upper bound in seconds, count in that bin), in increasing order."""

    bins: tuple[tuple[float, int], ...]

    def cumulative(self) -> list[tuple[float, int]]:
        """(le in seconds, observations at or under it): Prometheus buckets without +Inf."""
        total, out = 0, []
        for upper, count in self.bins:
            total += count
            out.append((upper, total))
        return out

    @property
    def count(self) -> int:
        return sum(count for _, count in self.bins)


@dataclass(frozen=True)
class VolumeStats:
    kind: str  # "ebs" or "instance_store"
    version: int
    read_ops: int
    write_ops: int
    read_bytes: int
    write_bytes: int
    read_seconds: float
    write_seconds: float
    # time the demand was over the volume's provisioned IOPS / throughput (EBS only: instance store has none)
    exceeded_iops_seconds: float
    exceeded_tp_seconds: float
    # time over the instance's EBS IOPS / throughput limits (instance store: the instance's local-storage limits)
    ec2_exceeded_iops_seconds: float
    ec2_exceeded_tp_seconds: float
    queue_length: int
    read_latency: Histogram
    write_latency: Histogram


def _histogram(page: bytes, at: int, which: str) -> Histogram:
    (used,) = struct.unpack_from("<Q", page, at)
    if used > MAX_BINS:
        raise LogPageError(f"{which} latency histogram: {used} bins, at most {MAX_BINS}")
    bins = []
    previous = -1
    for i in range(used):
        lower, upper, count, _ = _BIN.unpack_from(page, at + 8 + i * _BIN.size)
        if upper <= lower or lower < previous:
            raise LogPageError(f"{which} latency histogram: bin {i} [{lower}, {upper}) us out of order")
        previous = upper
        bins.append((upper / 1e6, count))
    return Histogram(tuple(bins))


def parse(page: bytes) -> VolumeStats:
    """The counters of one log page; LogPageError for anything else."""
    if len(page) < LOG_PAGE_BYTES:
        raise LogPageError(f"log page of {len(page)} bytes, expected {LOG_PAGE_BYTES}")
    (magic, version, read_ops, write_ops, read_bytes, write_bytes, read_us, write_us, iops_us, tp_us,
     ec2_iops_us, ec2_tp_us, queue) = _HEADER.unpack_from(page, 0)
    kind = KINDS.get(magic)
    if kind is None:
        raise LogPageError(f"magic 0x{magic:08X}: not an EBS or instance store statistics page")
    return VolumeStats(kind=kind, version=version, read_ops=read_ops, write_ops=write_ops, read_bytes=read_bytes,
                       write_bytes=write_bytes, read_seconds=read_us / 1e6, write_seconds=write_us / 1e6,
                       exceeded_iops_seconds=iops_us / 1e6, exceeded_tp_seconds=tp_us / 1e6,
                       ec2_exceeded_iops_seconds=ec2_iops_us / 1e6, ec2_exceeded_tp_seconds=ec2_tp_us / 1e6,
                       queue_length=queue,
                       read_latency=_histogram(page, _READ_HISTOGRAM_AT, "read"),
                       write_latency=_histogram(page, _WRITE_HISTOGRAM_AT, "write"))


def get_log_page_command(buffer_address: int, nsid: int, length: int = LOG_PAGE_BYTES,
                         page: int = LOG_PAGE_ID) -> bytearray:
    """The admin command reading ``length`` bytes of log page ``page`` into the buffer at ``buffer_address``:
    the number of dwords, less one, split over cdw10's upper half and cdw11's lower half."""
    dwords = length // 4 - 1
    return bytearray(_ADMIN_CMD.pack(NVME_ADMIN_GET_LOG_PAGE, 0, 0, nsid, 0, 0, 0, buffer_address, 0, length,
                                     page | (dwords & 0xFFFF) << 16, dwords >> 16, 0, 0, 0, 0, IOCTL_TIMEOUT_MS, 0))


Ioctl = Callable[[int, int, bytearray], object]


def _ioctl(fd: int, request: int, arg: bytearray) -> object:
    return fcntl.ioctl(fd, request, arg, True)


def read_log_page(device: str, nsid: int = 1, ioctl: Ioctl = _ioctl) -> bytes:
    """The raw log page of /dev/<device> (read-only open; root, or CAP_SYS_ADMIN). ``ioctl`` is the seam a test
    replaces: it gets the open descriptor, the request number and the command, and writes into the command's
    buffer as the kernel would."""
    buf = ctypes.create_string_buffer(LOG_PAGE_BYTES)
    command = get_log_page_command(ctypes.addressof(buf), nsid)
    fd = os.open(os.path.join("/dev", device), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        status = ioctl(fd, NVME_IOCTL_ADMIN_CMD, command)
    finally:
        os.close(fd)
    # a positive return is the controller's NVMe status (the page refused): no error from the kernel, no page either
    if isinstance(status, int) and status:
        raise LogPageError(f"the controller refused log page 0x{LOG_PAGE_ID:X} (NVMe status 0x{status:X})")
    return buf.raw
