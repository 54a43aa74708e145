"""A capture's kernel counters in iostat's form: what ``fioscope capture`` (``fioscope.capture``) writes as ``iostat.json``
for the offline diagnosis to read, as ``fioscope report --iostat`` reads any iostat file.

``/proc/diskstats`` and ``/proc/stat`` are read through the column table (``fioscope_mixin.columns``: which field
is which counter, irq and softirq as system); the counters become iostat's columns by ``timeline.iostat_row``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import time

from fioscope_mixin import columns

from .timeline import DiskCounters, iostat_row

__all__ = ["DiskCounters", "iostat_document", "iso_time", "parse_cpu", "parse_diskstats"]


def parse_diskstats(text: str, devices: set[str]) -> dict[str, DiskCounters]:
    """The counters iostat reads, per device, in base units (the fields: fioscope_mixin.columns)."""
    return {device: DiskCounters(**c) for device, c in columns.parse_diskstats(text, devices, DiskCounters.fields()).items()}


def parse_cpu(text: str) -> dict[str, float]:
    """/proc/stat's aggregate cpu line, grouped as iostat's avg-cpu groups it (fioscope_mixin.columns)."""
    return columns.parse_proc_stat_cpu(text)


def iso_time(t: float) -> str:
    """UTC, milliseconds: iostat's ISO timestamps."""
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds")


def boot_time() -> float:
    """When this machine booted (Unix seconds): iostat's first report covers the time since then (/proc/uptime)."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def _cpu(c0: dict[str, float], c1: dict[str, float]) -> dict[str, float]:
    total = sum(c1.get(m, 0) - c0.get(m, 0) for m in c1)
    return {m: round(100 * (c1[m] - c0.get(m, 0)) / total, 2) if total > 0 else 0.0 for m in c1}


def _disks(d0: dict[str, DiskCounters], d1: dict[str, DiskCounters], seconds: float) -> list[dict]:
    disks = []
    for device in sorted(set(d0) & set(d1)):
        row = iostat_row(d0[device], d1[device], seconds)
        if row is not None:
            disks.append({"disk_device": device, **{k: round(v, 4) for k, v in row.items()}})
    return disks


def iostat_document(host: str, samples: list[tuple[float, dict[str, DiskCounters], dict[str, float]]],
                    boot: float | None = None) -> dict:
    """The samples as ``S_TIME_FORMAT=ISO iostat -x -t -o JSON`` prints them: every column of every disk in every report,
    the first report the averages since boot (``boot``: when the machine booted; readers drop that report, but a
    reader that takes the device list from it finds every disk), then one report per interval."""
    boot = boot_time() if boot is None else boot
    statistics: list[dict] = []
    if samples:
        t0, d0, c0 = samples[0]
        zero = DiskCounters(*([0.0] * len(DiskCounters.fields())))
        # counters since boot; where the samples predate this boot (a replay), the first interval stands in for them
        first = (_disks({d: zero for d in d0}, d0, t0 - boot) if t0 > boot
                 else _disks(d0, samples[1][1], samples[1][0] - t0) if len(samples) > 1 else [])
        statistics.append({"timestamp": iso_time(t0), "avg-cpu": _cpu({}, c0), "disk": first})
    for (ta, da, ca), (tb, db, cb) in itertools.pairwise(samples):
        statistics.append({"timestamp": iso_time(tb), "avg-cpu": _cpu(ca, cb), "disk": _disks(da, db, tb - ta)})
    uname = os.uname()
    return {"sysstat": {"hosts": [{"nodename": host, "sysname": uname.sysname, "release": uname.release, "machine": uname.machine,
                                   "number-of-cpus": os.cpu_count() or 1,
                                   "date": iso_time(samples[0][0] if samples else time.time())[:10],
                                   "statistics": statistics}]}}
