"""Capture bundles and scratch targets written by the tests: a capture's kernel counters as the sampler keeps them, a
bundle's iostat.json and raw samples of them (tests/test_offline_counters.py, test_bundle_bounds.py), and a target
directory on the machine's disk (the capture tests)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def disk_directory(prefix: str) -> Iterator[Path]:
    """A directory on the machine's disk (not tmpfs: direct I/O works there), removed afterwards."""
    path = Path("/var/tmp") / f"{prefix}-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def kernel_samples(n: int, interval: float) -> list:
    """A capture's samples as the sampler keeps them: counters far from 0 (as a disk's are), a jittered interval."""
    from fioscope.reporting.timeline import DiskCounters

    rng = random.Random(26)
    disk = {"reads": 1e7, "writes": 2e7, "read_bytes": 4e10, "write_bytes": 8e10, "read_seconds": 1e4, "write_seconds": 2e4,
            "io_seconds": 5e4, "weighted_seconds": 9e4}
    cpu = {"user": 1e6, "nice": 10.0, "system": 5e5, "iowait": 3e5, "steal": 0.0, "idle": 9e6}
    out = []
    for i in range(n):
        out.append((1.79e9 + 0.123456 + i * interval + rng.uniform(-0.05, 0.05), {"loop0": DiskCounters(**disk)}, dict(cpu)))
        reads, writes = rng.randint(0, 900), rng.randint(0, 400)  # per second over the next interval
        grow = {"reads": reads, "writes": writes, "read_bytes": reads * 4096, "write_bytes": writes * 4096, "read_seconds": reads * 0.0013,
                "write_seconds": writes * 0.004, "io_seconds": rng.random(), "weighted_seconds": rng.random() * 3}
        disk = {k: v + grow[k] * interval for k, v in disk.items()}
        cpu = {m: v + rng.randint(0, int(interval * 100)) for m, v in cpu.items()}
    return out


def write_bundle(directory, kernel: list, host: str = "vm1"):
    """A capture bundle's iostat.json and its raw samples (samples/diskstats.jsonl, as the sampler writes them: /proc's
    lines in the kernel's units) of ``kernel``'s counters; the bundle's own samples, as read back from the lines."""
    from fioscope.reporting.iostat_json import iostat_document
    from fioscope.reporting.offline.load import read_bundle_counters

    (directory / "samples").mkdir(parents=True)
    with (directory / "samples" / "diskstats.jsonl").open("w") as f:
        for t, disks, cpu in kernel:
            c = disks["loop0"]
            fields = [c.reads, 0, c.read_bytes / 512, c.read_seconds * 1000, c.writes, 0, c.write_bytes / 512, c.write_seconds * 1000,
                      0, c.io_seconds * 1000, c.weighted_seconds * 1000, 0, 0, 0, 0, 0, 0]
            line = "   7       0 loop0 " + " ".join(str(round(v)) for v in fields)
            stat = "cpu  " + " ".join(str(round(cpu[m])) for m in ("user", "nice", "system", "idle", "iowait")) + " 0 0 0 0 0"
            f.write(json.dumps({"t": t, "diskstats": [line], "stat": stat}) + "\n")
    counted = read_bundle_counters(str(directory / "samples" / "diskstats.jsonl"))
    (directory / "iostat.json").write_text(json.dumps(iostat_document(host, counted)))
    return counted
