"""What a disk should deliver for a job, from the provider's declared limits.

Per direction, a request costs 1/MaxIOPS of the IOPS budget and bs/MaxBandwidth
of the bandwidth budget, so  IOPS = 1 / (1/MaxIOPS + bs/MaxBandwidth).
A mix with write share a spends its time on both directions:
IOPS = 1 / (a/WriteIOPS + (1-a)/ReadIOPS).
Where the caps are independent per direction (``limits.independent``, as cgroup
throttles and some providers), the mix is bound by whichever direction runs out first:
IOPS = min(ReadIOPS/(1-a), WriteIOPS/a).
"""

from __future__ import annotations

import math

from fioscope_mixin.units import UnitError, parse_size

from .config import Limits


def fio_size_bytes(value: str) -> float:
    """fio's ``bs`` (``4k``, ``2300``, ``4M``; first of a ``r,w`` pair) -> bytes, 0 if unreadable.

    fio's own options: a bare k/M is 1024-based (its ``kb_base=1024`` default).
    """
    try:
        return parse_size(value.split(",")[0].split(":")[0], kilo=1024)
    except UnitError:
        return 0.0


def write_share(options: dict[str, str]) -> float | None:
    """Share of writes in a job's I/O (0..1), or None for a mode without reads/writes (trim)."""
    rw = options.get("rw", options.get("readwrite", "read")).split(":")[0]
    if rw in ("read", "randread"):
        return 0.0
    if rw in ("write", "randwrite"):
        return 1.0
    if rw in ("rw", "readwrite", "randrw"):
        if "rwmixread" in options:
            return 1 - float(options["rwmixread"]) / 100
        if "rwmixwrite" in options:
            return float(options["rwmixwrite"]) / 100
        return 0.5
    return None


def _direction_iops(max_iops: float, max_bw: float, block: float) -> float:
    cost = (1 / max_iops if max_iops else 0) + (block / max_bw if max_bw and block else 0)
    return 1 / cost if cost else math.inf


def promised_iops(limits: Limits, options: dict[str, str]) -> float:
    """The IOPS ceiling for this job's block size and mix; 0 when the limits say nothing about it."""
    share = write_share(options)
    if share is None or not limits.declared():
        return 0.0
    block = fio_size_bytes(options.get("bs", options.get("blocksize", "4k")))
    read = _direction_iops(limits.read_iops or limits.iops, limits.read_bandwidth_bytes or limits.bandwidth_bytes, block)
    write = _direction_iops(limits.write_iops or limits.iops, limits.write_bandwidth_bytes or limits.bandwidth_bytes, block)
    if limits.independent:
        total = min(read / (1 - share) if share < 1 else math.inf, write / share if share > 0 else math.inf)
    else:
        cost = share / write + (1 - share) / read
        total = 1 / cost if cost else math.inf
    if limits.iops:  # a combined cap binds the sum as well
        total = min(total, limits.iops)
    if limits.bandwidth_bytes and block:
        total = min(total, limits.bandwidth_bytes / block)
    return 0.0 if math.isinf(total) else total
