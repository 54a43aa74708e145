#!/usr/bin/env python3
"""Authorised scrapes under a wrong-password flood: prints figures, asserts nothing.

Starts a real ``fioscope serve`` with a basic-auth web config (bcrypt cost 10, as
``htpasswd -nBC 10`` writes), times SCRAPES authorised scrapes, then again while CLIENTS
flood it from a separate process with wrong passwords (a new random one per request, so
no cache of failures helps; ``--same-password`` sends one wrong password over and over).
Prints the median and p90 of each and how many
flood requests were answered (all with 401).

Usage: python3 bench/bench_auth_flood.py [--clients 48] [--scrapes 50] [--same-password]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bcrypt
from fioscope_testkit.net import free_port, wait_for
from fioscope_testkit.paths import checkout_env

PASSWORD = "right"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _get(port: int, authorization: str, timeout: float = 30) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": authorization})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def _flood(port: int, clients: int, same: bool, stop, counts) -> None:
    import threading

    def client(index: int) -> None:
        n = 0
        while not stop.is_set():
            password = "wrong" if same else os.urandom(8).hex()
            try:
                status = _get(port, _basic("prometheus", password), timeout=60)
            except OSError:
                status = 0
            counts[status if status in (401, 200) else 0] += 1
            n += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _time_scrapes(port: int, n: int) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        status = _get(port, _basic("prometheus", PASSWORD))
        times.append(time.perf_counter() - started)
        assert status == 200, status
        time.sleep(0.05)
    return times


def _fmt(times: list[float]) -> str:
    q = statistics.quantiles(times, n=10)
    return f"median {statistics.median(times) * 1000:.1f} ms, p90 {q[8] * 1000:.1f} ms, max {max(times) * 1000:.1f} ms"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--clients", type=int, default=48)
    p.add_argument("--scrapes", type=int, default=50)
    p.add_argument("--same-password", action="store_true")
    args = p.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        web = Path(tmp, "web.yml")
        web.write_text(f"basic_auth_users:\n  prometheus: {bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()}\n")
        env = checkout_env()
        server = subprocess.Popen([sys.executable, "-m", "fioscope", "serve", "--results.dir", str(Path(tmp, "results")),
                                   "--web.listen-address", f"127.0.0.1:{port}", "--web.config.file", str(web)],
                                  stderr=subprocess.DEVNULL, env=env)
        try:
            wait_for(lambda: _get(port, _basic("prometheus", PASSWORD), timeout=5) == 200, timeout=20)
            quiet = _time_scrapes(port, args.scrapes)
            print(f"quiet: {args.scrapes} authorised scrapes: {_fmt(quiet)}")
            stop = multiprocessing.Event()
            counts = multiprocessing.Manager().dict({0: 0, 200: 0, 401: 0})
            flood = multiprocessing.Process(target=_flood, args=(port, args.clients, args.same_password, stop, counts))
            flood.start()
            time.sleep(2)
            loud = _time_scrapes(port, args.scrapes)
            stop.set()
            flood.join(120)
            kind = "one wrong password" if args.same_password else "random wrong passwords"
            print(f"{args.clients} clients flooding ({kind}): {args.scrapes} authorised scrapes: {_fmt(loud)}; "
                  f"flood answered 401: {counts[401]}, 200: {counts[200]}, failed: {counts[0]}")
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
