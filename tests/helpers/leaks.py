"""Processes a test leaves behind (issue 24, item 7): every process the suite starts inherits
``FIOSCOPE_TEST_SESSION=<token>`` (set by conftest.py), fio's job processes in their own sessions and
orphans re-parented to PID 1 included; a test whose teardown finds a new one of these still running fails.

Found by that token in ``/proc/*/environ``, not by parentage (orphans lose it) and not by name alone
(other sessions on this machine run fio and Prometheus of their own).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

TOKEN_VAR = "FIOSCOPE_TEST_SESSION"
# /proc/PID/comm, cut to 15 characters by the kernel
WATCHED = {"fio", "prometheus", "node_exporter", "prometheus-node", "alertmanager", "prometheus-aler", "etcd", "promtool"}


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def tracked(token: str) -> dict[int, str]:
    """{pid: command line} of the live fio/prometheus/node_exporter/fioscope processes carrying ``token``."""
    needle = f"{TOKEN_VAR}={token}".encode()
    mine = _ancestors()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            comm = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if comm in WATCHED or (comm.startswith("python") and "fioscope" in cmdline):
            found[int(entry.name)] = cmdline[:200]
    return found


def left_behind(token: str, before: dict[int, str], grace: float = 10.0) -> dict[int, str]:
    """The tracked processes not running ``before`` that are still alive after ``grace`` seconds (they may be ending)."""
    deadline = time.monotonic() + grace
    while True:
        new = {pid: cmd for pid, cmd in tracked(token).items() if before.get(pid) != cmd}
        if not new or time.monotonic() >= deadline:
            return new
        time.sleep(0.2)


def kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
