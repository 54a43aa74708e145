"""Free loopback ports, plain HTTP GETs, and polling until a condition holds (a server up, a series scraped)."""

from __future__ import annotations

import random
import socket
import time
import urllib.request

# Ports handed out below the kernel's ephemeral range (32768-60999 by default): a port the kernel picked for a bind to
# port 0, once closed, is the next one it gives an outgoing connection, and with the slow suite beside the e2e suite a
# scrape's connection took the scenario lab's Prometheus port before it listened ("bind: address already in use").
# Random, so that two suites picking at once rarely pick alike (the bind checks it is free now).
PORTS = (10000, 32000)
_RANDOM = random.Random()


def free_port() -> int:
    for _ in range(500):
        port = _RANDOM.randrange(*PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a range full of listeners: the kernel's pick, as before
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
