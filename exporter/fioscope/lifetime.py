"""fio never outlives the fioscope that started it.

- ``child_setup``: run in the forked child before exec: ``PR_SET_PDEATHSIG`` SIGTERM, so when fioscope
  dies (even by SIGKILL) fio is told at once and ends its job processes itself, as on Ctrl-C. Without
  it fio only noticed at its next status report (a broken stdout pipe), one status interval later. fio
  runs with SIGPIPE ignored: its SIGTERM handler writes to stdout before it stops its job processes,
  and with the pipe's reader gone that write's SIGPIPE killed fio's main process first, leaving the job
  processes to run to the end of their runtime (CI saw it; 4 of 5 runs here under load).
- ``RUN_TAG``: every fio a run starts carries ``FIOSCOPE_RUN=<marker stem>`` in its environment, which
  fio's job processes inherit. They start sessions of their own, so no process group reaches them. A
  job process whose fio main process is killed outright runs on to the end of its runtime, and may then
  wait for ever on a futex in fio's shared memory (the main process takes the job's locks every status
  interval to read its figures; killed holding one, nobody releases it): the 54-minute orphan of issue 24.
  ``reap`` finds them by that tag in ``/proc/*/environ`` when the run's marker is recovered
  (resultfile.recover_interrupted) and kills them.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from fioscope_mixin.children import die_with_parent

log = logging.getLogger("fioscope.lifetime")

RUN_TAG = "FIOSCOPE_RUN"


def child_setup(then: Callable[[], object] | None = None) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when the thread that started it dies; then ``then()``.

    The death signal belongs to the forking *thread*: fioscope starts fio from threads that live as long
    as the process (the scheduler, the CLI's main thread).
    """

    def setup() -> None:
        # fio's SIGTERM handler first writes "terminating" to stdout, our pipe: once fioscope is gone that
        # write raised SIGPIPE, which killed fio's main process before it told its job processes to stop
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        if then is not None:
            then()

    return die_with_parent(signal.SIGTERM, setup)


def tagged(tag: str) -> list[int]:
    """Pids of the processes whose environment holds ``FIOSCOPE_RUN=<tag>`` (those this user may read)."""
    needle = f"{RUN_TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def reap(tag: str) -> list[int]:
    """Kill what is left of a run whose fioscope died (fio and its job processes); returns their pids."""
    pids = tagged(tag)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)  # a job process hung on its dead parent's semaphore ignores SIGTERM's flag
        except OSError:
            pass
    if pids:
        log.warning("run %s: killed %d fio process(es) left by a fioscope that died: %s", tag, len(pids), " ".join(map(str, pids)))
    return pids
