"""Free loopback ports, plain HTTP GETs, and polling until a condition holds (a server up, a series scraped)."""

from __future__ import annotations

import socket
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_block(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports (shard i of a generated fleet listens on base + i)."""
    for _ in range(50):
        base = free_port()
        if base + n > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise OSError(f"no {n} consecutive free loopback ports")


def http_get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


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
