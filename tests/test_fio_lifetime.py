"""fio never outlives the fioscope that started it (issue 24, item 7), against real fio and ``fioscope serve``.

Why an orphan hung: fio's job processes start sessions of their own; when fio's main process is
killed outright (the old test SIGKILLed it beside the exporter), a job process is orphaned: it runs on
to its runtime's end and may then block for ever on a futex in fio's shared memory that the killed main
process held (it takes the job's locks every status interval, here each second). A lone exporter killed
with SIGKILL let fio end because fio's main process lived on, hit the broken stdout pipe at its next
status report and stopped its jobs itself: one status interval late. The death signal's SIGTERM alone
was not enough: fio's handler writes to stdout first, and with the exporter's end of the pipe closed that
write's SIGPIPE killed the main process before it stopped its jobs (a race with the exporter's exit: CI
failed the first test here on it). fio now runs with SIGPIPE ignored.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from fioscope_testkit.binaries import require
from fioscope_testkit.net import wait_for
from helpers.exposition import sample


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout.split()
    return [int(p) for p in out]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _long_run(tmp_path, status_interval: str) -> tuple:
    require("fio")
    target = tmp_path / "t"
    target.mkdir()
    results = tmp_path / "results"
    base = (f"results_dir: {results}\nscan_interval: 1s\nstatus_interval: {status_interval}\n"
            f"targets: [{{name: disk, directory: {target}}}]\n")
    config = tmp_path / "fioscope.yaml"
    config.write_text(base + """schedule:
  - {job: cloud-sla-70-30, target: disk, env: {RUNTIME: "60", SIZE: 8m, IODEPTH: "4", READ_IOPS: "100", WRITE_IOPS: "50"}}
""")
    return config, base, results


def _fio_tree(exp) -> tuple[int, list[int]]:
    """(fio's main process, its job processes) once the jobs run."""
    wait_for(lambda: sample(exp.metrics(), "fio_run_running", jobname="cloud-sla-70-30") == 1, 30, what="the run going")
    wait_for(lambda: any(_children(p) for p in _children(exp.proc.pid)), 20, what="fio's job process")
    [main] = _children(exp.proc.pid)
    return main, _children(main)


def test_fio_ends_at_once_when_its_exporter_is_killed(tmp_path, exporter_factory):
    config, _, results = _long_run(tmp_path, "30s")  # without the death signal fio would notice in 30 s
    exp = exporter_factory(config=config)
    main, jobs = _fio_tree(exp)
    [marker] = results.glob("*.running")
    assert json.loads(marker.read_text())["fioscope_running"]["fio_pid"] == main
    try:
        exp.proc.send_signal(signal.SIGKILL)
        exp.proc.wait(10)
        started = time.monotonic()
        wait_for(lambda: not any(map(_alive, [main, *jobs])), 10, what="fio and its job processes gone")
        assert time.monotonic() - started < 10
    finally:
        for pid in [main, *jobs]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_job_processes_left_by_a_killed_fio_are_reaped_at_restart(tmp_path, exporter_factory):
    config, base, results = _long_run(tmp_path, "1s")
    exp = exporter_factory(config=config)
    main, jobs = _fio_tree(exp)
    assert jobs
    try:
        os.kill(main, signal.SIGKILL)  # fio's main process first: its job processes are orphaned, hung on its semaphore
        exp.proc.send_signal(signal.SIGKILL)
        exp.proc.wait(10)
        time.sleep(2)
        assert all(map(_alive, jobs))  # what the old test left behind for 54 minutes
        config.write_text(base)  # restarted without the schedule: the startup scan recovers the marker
        again = exporter_factory(config=config)
        wait_for(lambda: not any(map(_alive, jobs)), 10, what="the orphaned job processes reaped")
        assert sample(again.metrics(), "fio_run_failures_total", jobname="cloud-sla-70-30") == 1
        assert "killed" in again.logs() and str(jobs[0]) in again.logs()
    finally:
        for pid in jobs:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
