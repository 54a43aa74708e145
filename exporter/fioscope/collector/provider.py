"""Collector of the provider's own counters: each Amazon NVMe volume's statistics log page (fioscope.nvmelog).

Exposition (one EBS volume; instance store's series are ``fioscope_ec2_instance_store_*`` with the same suffixes,
without the volume-level ``exceeded_*``)::

    # TYPE fioscope_ebs_read_ops_total counter
    fioscope_ebs_read_ops_total{device="nvme1n1",volume_id="vol-0123456789abcdef0"} 1.2e+06
    ... write_ops_total, read_bytes_total, write_bytes_total, read_seconds_total, write_seconds_total
    # TYPE fioscope_ebs_exceeded_iops_seconds_total counter        (demand over the volume's provisioned IOPS)
    # TYPE fioscope_ebs_exceeded_tp_seconds_total counter          (... its provisioned throughput)
    # TYPE fioscope_ebs_ec2_exceeded_iops_seconds_total counter    (over the instance's EBS IOPS limit)
    # TYPE fioscope_ebs_ec2_exceeded_tp_seconds_total counter      (... its EBS throughput limit)
    # TYPE fioscope_ebs_volume_queue_length gauge
    # TYPE fioscope_ebs_read_io_latency_seconds histogram          (and write_io_latency_seconds)
    # TYPE fioscope_nvme_stats_read_errors_total counter           (per device: refused, unreadable, timed out)
    # TYPE fioscope_nvme_stats_age_seconds gauge                   (how old the served reading is)

The names are the EBS CSI driver's (``aws_ebs_csi_exceeded_iops_seconds_total`` ...) with fioscope's prefix, so one
rule reads either. Read on a scrape at most once a second per device, each read in a thread of its own that the
scrape waits for at most ``timeout``: a device that hangs costs the scrape that much once, then serves its last
reading (its age grows) until the read returns; a device that refuses logs one line per new reason and counts.
Reading needs root (or CAP_SYS_ADMIN): an exporter without it counts one error per device and scrape, nothing more.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from .. import nvmelog
from .topology import read_attribute

log = logging.getLogger("fioscope.provider")

NAMESPACE = re.compile(r"nvme\d+n\d+")
PREFIX = {"ebs": "fioscope_ebs", "instance_store": "fioscope_ec2_instance_store"}
MODELS = (nvmelog.EBS_MODEL, nvmelog.INSTANCE_STORE_MODEL)
LABELS = ["device", "volume_id"]
# (suffix, VolumeStats field, help, kinds): counters in base units
COUNTERS = (
    ("read_ops", "read_ops", "Completed read operations, as the volume counts them.", ("ebs", "instance_store")),
    ("write_ops", "write_ops", "Completed write operations, as the volume counts them.", ("ebs", "instance_store")),
    ("read_bytes", "read_bytes", "Bytes read, as the volume counts them.", ("ebs", "instance_store")),
    ("write_bytes", "write_bytes", "Bytes written, as the volume counts them.", ("ebs", "instance_store")),
    ("read_seconds", "read_seconds", "Time spent by completed reads.", ("ebs", "instance_store")),
    ("write_seconds", "write_seconds", "Time spent by completed writes.", ("ebs", "instance_store")),
    ("exceeded_iops_seconds", "exceeded_iops_seconds",
     "Time the demand exceeded the volume's provisioned IOPS (the volume's own cap held it).", ("ebs",)),
    ("exceeded_tp_seconds", "exceeded_tp_seconds",
     "Time the demand exceeded the volume's provisioned throughput.", ("ebs",)),
    ("ec2_exceeded_iops_seconds", "ec2_exceeded_iops_seconds",
     "Time the demand exceeded the instance's IOPS limit (the machine's limit, across its volumes).",
     ("ebs", "instance_store")),
    ("ec2_exceeded_tp_seconds", "ec2_exceeded_tp_seconds",
     "Time the demand exceeded the instance's throughput limit.", ("ebs", "instance_store")),
)
MIN_INTERVAL_SECONDS = 1.0  # AWS: the page can be polled every second
TIMEOUT_SECONDS = 0.5


def volume_id(serial: str) -> str:
    """EBS names the volume in the controller's serial without its dash (vol0123...): the console's vol-0123..."""
    return f"vol-{serial[3:]}" if re.fullmatch(r"vol[0-9a-f]{8,32}", serial) else serial[:64]


@dataclass
class _Device:
    """One device's last reading and the read under way, if any."""

    stats: nvmelog.VolumeStats | None = None
    read_at: float = 0.0
    reader: threading.Thread | None = None
    errors: int = 0
    last_error: str = ""


Reader = Callable[[str, int], bytes]


class ProviderCollector:
    def __init__(self, sys_root: Path = Path("/sys"), read: Reader = nvmelog.read_log_page,
                 timeout: float = TIMEOUT_SECONDS, min_interval: float = MIN_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.sys_block = sys_root / "block"
        self.read = read
        self.timeout = timeout
        self.min_interval = min_interval
        self.clock = clock
        self.devices: dict[str, _Device] = {}
        self.lock = threading.Lock()

    def _volumes(self) -> list[tuple[str, str, int]]:
        """(device, volume_id, nsid) of every Amazon NVMe namespace in sysfs (the page's magic tells its kind)."""
        found: list[tuple[str, str, int]] = []
        try:
            entries = sorted(self.sys_block.iterdir())
        except OSError:
            return found
        for entry in entries:
            if not NAMESPACE.fullmatch(entry.name):
                continue
            if read_attribute(entry / "device" / "model") not in MODELS:
                continue
            nsid = read_attribute(entry / "nsid")
            found.append((entry.name, volume_id(read_attribute(entry / "device" / "serial")),
                          int(nsid) if nsid.isdigit() else 1))
        return found

    def _fail(self, device: str, state: _Device, reason: str) -> None:
        with self.lock:
            state.errors += 1
            if reason != state.last_error:
                log.warning("provider counters of %s not read: %s", device, reason)
                state.last_error = reason

    def _read_into(self, device: str, nsid: int, state: _Device) -> None:
        try:
            stats = nvmelog.parse(self.read(device, nsid))
        except (OSError, nvmelog.LogPageError) as err:
            self._fail(device, state, str(err))
            return
        with self.lock:
            state.stats, state.read_at = stats, self.clock()
            state.last_error = ""

    def _refresh(self, device: str, nsid: int) -> _Device:
        with self.lock:
            state = self.devices.setdefault(device, _Device())
            fresh = state.stats is not None and self.clock() - state.read_at < self.min_interval
            busy = state.reader is not None and state.reader.is_alive()
            if fresh or busy:
                reader = None
            else:
                reader = state.reader = threading.Thread(target=self._read_into, args=(device, nsid, state),
                                                         name=f"fioscope-provider-{device}", daemon=True)
        if busy:
            # still inside the read a hung device never returned from: its last reading serves, no second thread
            self._fail(device, state, f"a read still hangs after {self.timeout:g} s")
        if reader is not None:
            reader.start()
            reader.join(self.timeout)
            if reader.is_alive():
                self._fail(device, state, f"no answer within {self.timeout:g} s")
        return state

    def collect(self):
        families: dict[str, CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily] = {}

        def family(kind: str, suffix: str, factory, doc: str):
            name = f"{PREFIX[kind]}_{suffix}"
            if name not in families:
                families[name] = factory(name, doc, labels=LABELS)
            return families[name]

        errors = CounterMetricFamily("fioscope_nvme_stats_read_errors",
                                     "Reads of a volume's statistics log page refused, unreadable or timed out.",
                                     labels=["device"])
        age = GaugeMetricFamily("fioscope_nvme_stats_age_seconds",
                                "Age of the provider counters served for a device (grows while its reads fail or hang).",
                                labels=["device"])
        volumes = self._volumes()
        if not volumes:
            return  # not on an Amazon NVMe volume: nothing at all on the page
        for device, volume, nsid in volumes:
            state = self._refresh(device, nsid)
            with self.lock:
                stats, read_at, failed = state.stats, state.read_at, state.errors
            errors.add_metric([device], failed)
            if stats is None:
                continue
            age.add_metric([device], max(0.0, self.clock() - read_at))
            labels = [device, volume]
            for suffix, field, doc, kinds in COUNTERS:
                if stats.kind in kinds:
                    family(stats.kind, suffix, CounterMetricFamily, doc).add_metric(labels, getattr(stats, field))
            family(stats.kind, "volume_queue_length", GaugeMetricFamily,
                   "Requests queued at the volume, at the moment of the read.").add_metric(labels, stats.queue_length)
            for op, histogram, seconds in (("read", stats.read_latency, stats.read_seconds),
                                           ("write", stats.write_latency, stats.write_seconds)):
                buckets = [(floatToGoString(le), count) for le, count in histogram.cumulative()]
                buckets.append(("+Inf", histogram.count))
                family(stats.kind, f"{op}_io_latency_seconds", HistogramMetricFamily,
                       f"Completed {op}s by latency, as the volume measures it.").add_metric(labels, buckets, seconds)
        yield errors
        yield age
        yield from families.values()
