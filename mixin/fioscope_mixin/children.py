"""Child processes that never outlive the process that started them, however it dies (SIGKILL included)."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, then: Callable[[], object] | None = None) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``sig`` when the thread that started it dies (``PR_SET_PDEATHSIG``); then ``then()``.

    The death signal belongs to the forking *thread*: start children from a thread that lives as long as the process.
    """
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork: nothing to load in the child

    def setup() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if then is not None:
            then()
        if os.getppid() != parent:  # the parent died between fork and prctl: no death signal will come
            os.kill(os.getpid(), sig)

    return setup
