"""The recording rules against `iostat -x -o JSON`, on a real disk under real fio load.

Real node_exporter -> real Prometheus (the repository's rules, 1 s scrapes, 40 s rate
window) against iostat sampling the same 40 s on the same lab loop disk (root; part of the
end-to-end suite, `pytest -m e2e`: it loads a disk for about 90 s). Every iostat -x
column and the avg-cpu figures must agree within 5 %, or within a small absolute
tolerance near zero (iostat prints two decimals). Per-request columns of a direction with
fewer than MIN_REQUESTS requests in the window (sparse flushes) only have to be of the
same order: one request more or less in a window swings their mean.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FIXTURES
from fioscope.jobs import load_job
from fleet_helpers import lab_lock
from stack_helpers import NativeStack, PromClient, e2e_overrides, require_root_lab, write_fioscope_config

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
CPU_COLUMNS = {m: (f"fioscope:cpu_{m}_ratio", 100, 1.5) for m in ("user", "nice", "system", "iowait", "steal", "idle")}


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
    for column, io_value, prom_value, tol in rows:
        diff = "" if prom_value is None else f"{(prom_value - io_value) / io_value * 100:+.1f}%" if io_value else f"{prom_value - io_value:+.3f}"
        print(f"{column:>10} {io_value:10.2f} {prom_value if prom_value is not None else float('nan'):11.2f} {diff:>8}")


def sample_agreement(tmp_path, disk, load_args: list[str], runtime: int = 2 * WINDOW + 25, env: dict | None = None):
    """Run a load on ``disk``, sample iostat over WINDOW s mid-way, return the comparison rows."""
    stack = NativeStack(tmp_path / "stack", e2e_overrides(rate_window=f"{WINDOW}s"),
                        fioscope_config=write_fioscope_config(tmp_path / "fioscope.yaml", []))
    stack.start()
    prom = PromClient(stack.url("prometheus"))
    defaults = load_job(Path(load_args[0]), {"TARGET_DIR": disk.mountpoint}).defaults  # the profile's "; default:" lines
    load = subprocess.Popen(["fio", *load_args, f"--runtime={runtime}", "--output=/dev/null"],
                            env={**defaults, "TARGET_DIR": disk.mountpoint, "RUNTIME": str(runtime), "PATH": "/usr/bin:/bin", **(env or {})},
                            start_new_session=True,
                            # a throttled lab disk caps what runs in its cgroup: the load joins it, the stack does not
                            preexec_fn=(lambda: Path(disk.cgroup, "cgroup.procs").write_text(str(os.getpid()))) if disk.cgroup else None)
    try:
        time.sleep(WINDOW + 3)  # the rate window fills with steady load
        out = subprocess.run(["iostat", "-x", "-o", "JSON", "-c", "-d", disk.device_name, str(WINDOW), "2"],
                             capture_output=True, text=True, check=True).stdout
        at = time.time() + 0.5  # the first evaluation after iostat's last read (1 s evaluation interval)
        time.sleep(3)
        sample = json.loads(out)["sysstat"]["hosts"][0]["statistics"][-1]
        return compare(prom, disk.device_name, at, sample)
    finally:
        os.killpg(load.pid, signal.SIGKILL)  # fio's job processes too
        load.wait()
        stack.stop()


@pytest.mark.e2e
def test_recording_rules_agree_with_iostat(tmp_path):
    require_root_lab()
    from fioscope import lab

    with lab_lock():  # one lab user at a time on this machine (the e2e suites take the same lock)
        disk = lab.up("healthy", name="iostat", size="1G", state_dir=tmp_path / "lab")
        try:
            rows = sample_agreement(tmp_path, disk, [str(FIXTURES / "jobs" / "iostat-mix.fio")])
        finally:
            lab.down("iostat", tmp_path / "lab")
    print_table(rows)
    missing = [r[0] for r in rows if r[2] is None]
    assert not missing, f"no Prometheus value for {missing}"
    off = [r for r in rows if not agree(r[1], r[2], r[3])]
    assert not off, f"disagree with iostat: {off}"
    values = {r[0]: r[1] for r in rows}
    # the load really exercised the columns (a comparison of zeros proves nothing)
    assert values["r/s"] > 300 and values["w/s"] > 200 and values["f/s"] > 10
    assert values["rrqm/s"] > 100 and values["wrqm/s"] > 100
