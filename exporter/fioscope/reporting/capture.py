"""A capture's kernel counters in iostat's form: what ``fioscope capture`` (``fioscope.capture``) writes as ``iostat.json``
for the offline diagnosis to read, as ``fioscope report --iostat`` reads any iostat file.

``/proc/diskstats`` and ``/proc/stat`` are read through the column table (``fioscope_mixin.columns``: which field
is which counter, irq and softirq as system); the counters become iostat's columns by ``timeline.iostat_columns``.
"""

from __future__ import annotations

import datetime as dt
import os
import time

from fioscope_mixin import columns

from .timeline import DiskCounters, iostat_columns

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


def iostat_document(host: str, samples: list[tuple[float, dict[str, DiskCounters], dict[str, float]]]) -> dict:
    """The samples as ``S_TIME_FORMAT=ISO iostat -x -t -o JSON`` prints them: the first report (since boot) as a
    placeholder that readers drop, then one report per interval."""
    statistics: list[dict] = [{"timestamp": iso_time(samples[0][0]) if samples else iso_time(time.time()), "avg-cpu": {}, "disk": []}]
    for (t0, d0, c0), (t1, d1, c1) in zip(samples, samples[1:]):
        total = sum(c1.get(m, 0) - c0.get(m, 0) for m in c1)
        cpu = {m: round(100 * (c1[m] - c0.get(m, 0)) / total, 2) if total > 0 else 0.0 for m in c1}
        disks = []
        for device in sorted(set(d0) & set(d1)):
            cols = iostat_columns(d0[device], d1[device], t1 - t0)
            if cols is not None:
                disks.append({"disk_device": device, **{k: round(v, 4) for k, v in cols.items()},
                              "rareq-sz": round(cols["rkB/s"] / cols["r/s"], 2) if cols["r/s"] else 0.0,
                              "wareq-sz": round(cols["wkB/s"] / cols["w/s"], 2) if cols["w/s"] else 0.0})
        statistics.append({"timestamp": iso_time(t1), "avg-cpu": cpu, "disk": disks})
    return {"sysstat": {"hosts": [{"nodename": host, "sysname": "Linux", "number-of-cpus": os.cpu_count() or 1,
                                   "statistics": statistics}]}}
