"""The recording rules against `iostat -x -o JSON` on a lab disk under real fio load: the comparison rows.

Every iostat -x column and the avg-cpu figures must agree within 5 %, or within a small absolute tolerance
near zero (iostat prints two decimals). Per-request columns of a direction with fewer than MIN_REQUESTS
requests in the window (sparse flushes) only have to be of the same order: one request more or less in a
window swings their mean.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from fioscope.jobs import load_job
from fioscope_mixin.columns import CPU_MODES
from fioscope_testkit.prometheus import PromClient

from helpers.lab import HostStack, e2e_overrides
from helpers.results import config_with_targets

WINDOW = 40
# an await over fewer requests than this is a small sample: windows offset by one scrape differ by whole requests
MIN_REQUESTS = 100
# iostat column -> (recording rule, factor from the rule's base unit to iostat's unit, absolute tolerance)
DISK_COLUMNS = {
    "r/s": ("fioscope:disk_read_iops", 1, 1.0),
    "w/s": ("fioscope:disk_write_iops", 1, 1.0),
    "d/s": ("fioscope:disk_discard_iops", 1, 1.0),
    "f/s": ("fioscope:disk_flush_iops", 1, 1.0),
    "rkB/s": ("fioscope:disk_read_bytes_per_second", 1 / 1024, 8.0),
    "wkB/s": ("fioscope:disk_write_bytes_per_second", 1 / 1024, 8.0),
    "dkB/s": ("fioscope:disk_discard_bytes_per_second", 1 / 1024, 8.0),
    "rrqm/s": ("fioscope:disk_read_merges_per_second", 1, 1.0),
    "wrqm/s": ("fioscope:disk_write_merges_per_second", 1, 1.0),
    "rrqm": ("fioscope:disk_read_merges_ratio", 100, 1.0),  # %rrqm
    "wrqm": ("fioscope:disk_write_merges_ratio", 100, 1.0),  # %wrqm
    "r_await": ("fioscope:disk_read_await_seconds", 1000, 0.05),
    "w_await": ("fioscope:disk_write_await_seconds", 1000, 0.05),
    "d_await": ("fioscope:disk_discard_await_seconds", 1000, 0.05),
    "f_await": ("fioscope:disk_flush_await_seconds", 1000, 0.05),
    "aqu-sz": ("fioscope:disk_queue_size", 1, 0.02),
    "rareq-sz": ("fioscope:disk_read_request_size_bytes", 1 / 1024, 0.1),
    "wareq-sz": ("fioscope:disk_write_request_size_bytes", 1 / 1024, 0.1),
    "util": ("fioscope:disk_util_ratio", 100, 1.0),  # %util
}
CPU_COLUMNS = {m: (f"fioscope:cpu_{m}_ratio", 100, 1.5) for m in CPU_MODES}


def agree(iostat: float, prom: float, tolerance: float) -> bool:
    return abs(iostat - prom) <= max(0.05 * max(abs(iostat), abs(prom)), tolerance)


def compare(prom: PromClient, device: str, at: float, sample: dict) -> list[tuple]:
    rows = []
    disk = next(d for d in sample["disk"] if d["disk_device"] == device)
    counts = {"r": disk["r/s"], "w": disk["w/s"], "d": disk["d/s"], "f": disk["f/s"]}
    for column, (series, factor, tolerance) in DISK_COLUMNS.items():
        value = prom.value(f'{series}{{device="{device}"}}', at)
        if column.endswith("_await") and counts[column[0]] * WINDOW < MIN_REQUESTS:
            tolerance = max(tolerance, 0.5 * disk[column])
        rows.append((column, disk[column], None if value is None else value * factor, tolerance))
    for column, (series, factor, tolerance) in CPU_COLUMNS.items():
        value = prom.value(series, at)
        rows.append((f"%{column}", sample["avg-cpu"][column], None if value is None else value * factor, tolerance))
    return rows


def print_table(rows: list[tuple]) -> None:
    print(f"\n{'iostat -x':>10} {'iostat':>10} {'Prometheus':>11} {'diff':>8}")
    for column, io_value, prom_value, _tolerance in rows:
        if prom_value is None:
            diff = ""
        else:
            diff = f"{(prom_value - io_value) / io_value * 100:+.1f}%" if io_value else f"{prom_value - io_value:+.3f}"
        print(f"{column:>10} {io_value:10.2f} {prom_value if prom_value is not None else float('nan'):11.2f} {diff:>8}")


def sample_agreement(tmp_path, loads: list[tuple], runtime: int = 2 * WINDOW + 25) -> dict[str, list[tuple]]:
    """Run each load ``(disk, fio args, env)`` on its disk at once, under one stack watching those disks; sample iostat
    over WINDOW s mid-way; return each disk's comparison rows by device name."""
    stack = HostStack(tmp_path / "stack", e2e_overrides(rate_window=f"{WINDOW}s"),
                      fioscope_config=config_with_targets(tmp_path / "fioscope.yaml", []), disks=[disk for disk, _, _ in loads])
    stack.start()
    prom = PromClient(stack.url("prometheus"))
    procs = []
    try:
        for disk, load_args, env in loads:
            defaults = load_job(Path(load_args[0]), {"TARGET_DIR": disk.mountpoint}).defaults  # the profile's "; default:" lines
            procs.append(subprocess.Popen(
                ["fio", *load_args, f"--runtime={runtime}", "--output=/dev/null"],
                env={**defaults, "TARGET_DIR": disk.mountpoint, "RUNTIME": str(runtime), "PATH": "/usr/bin:/bin", **(env or {})},
                start_new_session=True,
                # a throttled lab disk caps what runs in its cgroup: the load joins it, the stack does not
                preexec_fn=_joins(disk.cgroup) if disk.cgroup else None))
        time.sleep(WINDOW + 3)  # the rate window fills with steady load
        devices = [disk.device_name for disk, _, _ in loads]
        out = subprocess.run(["iostat", "-x", "-o", "JSON", "-c", "-d", *devices, str(WINDOW), "2"],
                             capture_output=True, text=True, check=True).stdout
        at = time.time() + 0.5  # the first evaluation after iostat's last read (1 s evaluation interval)
        time.sleep(3)
        sample = json.loads(out)["sysstat"]["hosts"][0]["statistics"][-1]
        return {device: compare(prom, device, at, sample) for device in devices}
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)  # fio's job processes too
            proc.wait()
        stack.stop()


def _joins(cgroup: str):
    return lambda: Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
