"""A process and everything it started, found through ``/proc/<pid>/task/*/children``.

fio's job processes each start a session of their own (``setsid``): a signal to fio's process
group misses them, and killing fio alone leaves them writing to the disk under test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """Every living descendant of ``pid``, parents before their children."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for children in (proc / str(parent) / "task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                for child in map(int, children.read_text().split()):
                    if child not in out:
                        out.append(child)
                        todo.append(child)
    return out


def alive(pid: int, proc: Path = PROC) -> bool:
    """Running (a zombie has finished: it only waits to be reaped)."""
    try:
        return (proc / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_tree(pid: int, wait: float = 5.0, proc: Path = PROC) -> list[int]:
    """SIGKILL ``pid`` and its descendants (found first: once killed, its children move to init), then wait up to
    ``wait`` seconds until none runs; returns those still running (none, unless stuck in the kernel)."""
    pids = [pid, *descendants(pid, proc)]
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while (left := [p for p in pids if alive(p, proc)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
