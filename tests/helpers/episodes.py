"""Background episodes: an e2e test's minutes of load and waiting run in a thread while other e2e tests run, and the
test itself only joins it and asserts on what it returns (tests/conftest.py: the `episodes` fixture, the markers
`beside_episode(name)` and `joins_episode`).

An episode's lab disks and stack are its own "machine": their names and paths carry MARK, which the suite's
leaves-nothing-behind checks (helpers.lab.lab_state) leave to the episode; the tests run beside it watch only their own
disks (helpers.lab.HostStack), as the episode's stack watches only its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARK = "bg-episode"
_REGISTERED: dict[str, Callable[[Path], Any]] = {}


def episode(name: str) -> Callable[[Callable[[Path], Any]], Callable[[Path], Any]]:
    """Registers ``fn(tmp) -> figures`` as the episode ``name`` (a test module does, at import)."""
    def register(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
        _REGISTERED[name] = fn
        return fn
    return register


class Episodes:
    """Each registered episode started at most once, in a thread of its own; ``result`` waits for it and returns its
    figures, or raises what it raised (a skip too)."""

    def __init__(self, mktemp: Callable[[str], Path]):
        self._mktemp = mktemp
        self._threads: dict[str, threading.Thread] = {}
        self._outcome: dict[str, tuple[bool, Any]] = {}

    def start(self, name: str) -> None:
        """Starts ``name`` unless it runs or ran already, or its test module was not collected (a test run beside it
        then runs alone)."""
        if name in self._threads or name not in _REGISTERED:
            return
        fn, tmp = _REGISTERED[name], self._mktemp(f"{MARK}-{name}")

        def run() -> None:
            try:
                self._outcome[name] = (True, fn(tmp))
            except BaseException as exc:  # noqa: BLE001 - handed to the test that joins it
                self._outcome[name] = (False, exc)

        thread = self._threads[name] = threading.Thread(target=run, name=f"episode-{name}", daemon=True)
        thread.start()

    def result(self, name: str, timeout: float = 1800) -> Any:
        self.start(name)  # its own module registered it
        self._threads[name].join(timeout)
        if name not in self._outcome:
            raise AssertionError(f"the background episode {name} still runs after {timeout:.0f} s")
        ok, value = self._outcome[name]
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Every episode's thread waited for (each takes its disks and processes down in its own finally)."""
        for thread in self._threads.values():
            thread.join(1800)
