#!/usr/bin/env python3
"""HTTP under misbehaving clients: prints figures, asserts nothing.

Holds IDLE idle connections and HALF half-sent requests open against a real
``fioscope serve`` (optionally with a TLS + basic-auth web config), then times SCRAPES
scrapes and reads the server's thread count from /proc. Run with --idle 2000 to see the
connection cap shed load (the scrapes must still answer).

Usage: python3 bench/bench_http_hold.py [--idle 500] [--half 20] [--scrapes 50]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from fioscope_testkit.cli import fioscope_command
from fioscope_testkit.net import free_port, wait_for


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return -1


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--idle", type=int, default=500)
    p.add_argument("--half", type=int, default=20)
    p.add_argument("--scrapes", type=int, default=50)
    args = p.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as results:
        server = subprocess.Popen(fioscope_command("serve", "--results.dir", results, "--web.listen-address", f"127.0.0.1:{port}"),
                                  stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            wait_for(lambda: urllib.request.urlopen(url, timeout=2).status == 200, timeout=20)
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.idle)]
            half = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.half)]
            for s in half:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            time.sleep(0.5)
            times = []
            for _ in range(args.scrapes):
                started = time.perf_counter()
                with urllib.request.urlopen(url, timeout=5) as resp:
                    resp.read()
                times.append(time.perf_counter() - started)
            print(f"{args.idle} idle + {args.half} half-sent connections held: {args.scrapes} scrapes "
                  f"median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms; "
                  f"server threads {threads(server.pid)}")
            started = time.monotonic()
            idle[0].settimeout(30)
            idle[0].recv(1)
            print(f"an idle connection is closed by the server after {time.monotonic() - started + 0.5:.1f} s")
            for s in idle + half:
                s.close()
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
