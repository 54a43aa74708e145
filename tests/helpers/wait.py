"""Polling until a condition holds."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    """The first truthy value of ``predicate()``; exceptions count as "not yet" until the deadline."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
