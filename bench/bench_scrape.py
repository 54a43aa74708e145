#!/usr/bin/env python3
"""/metrics side by side with fio_benchmark_exporter (issue 52): prints figures, asserts nothing.

Both exporters serve two fio results: ``fioscope serve`` two json+ result files of the test corpus (a randwrite with
slat/clat/lat histograms and an etcd fdatasync job, as bench_exporter.py's scrape figures), the peer its own fio run of
two jobs in two reporting groups (it reads no result files: it runs fio itself and publishes what fio's terse lines
say, the second overwriting the first). Then GETs of /metrics, interleaved (fioscope, peer, peer, fioscope, ...), each
on a new connection, timed at the client from connect to the last byte; per exporter: median, p99, series, bytes.

Everything runs in a network namespace of its own (``unshare --net``), holding only loopback: the peer listens on
every address (``:PORT``) and has no flag to say otherwise.

Usage: python3 bench/bench_scrape.py PEER_BINARY [--gets 600]
  PEER_BINARY: fio_benchmark_exporter built from its public source (``go build``), not kept in this repository
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "fixtures" / "fio-outputs" / "fio-3.33"
RESULTS = ("lat_percentiles.json+", "etcd.json+")
IN_NAMESPACE = "FIOSCOPE_BENCH_NETNS"
FIOSCOPE_PORT, PEER_PORT = 9701, 9702  # the namespace is this run's alone: nothing else listens there
REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def scrape(port: int) -> tuple[float, bytes]:
    """Seconds from connect to the last byte of one GET /metrics on a new connection, and the body."""
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(REQUEST)
        chunks = []
        while chunk := sock.recv(262144):
            chunks.append(chunk)
    elapsed = time.perf_counter() - started
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"port {port}: {head.splitlines()[0] if head else b'no answer'!r}")
    return elapsed, dechunked(body) if b"transfer-encoding: chunked" in head.lower() else body


def dechunked(body: bytes) -> bytes:
    """A chunked body's content (Go's server sends an answer of unknown length so)."""
    out, at = [], 0
    while True:
        end = body.index(b"\r\n", at)
        size = int(body[at:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[end + 2:end + 2 + size])
        at = end + 2 + size + 2


def wait_until(what: str, ready, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_scrape: {what} not ready after {seconds:.0f} s")
        time.sleep(0.1)


def answers(port: int) -> bool:
    try:
        scrape(port)
    except (OSError, RuntimeError):
        return False
    return True


def start_fioscope(tmp: Path) -> subprocess.Popen:
    results = tmp / "results"
    results.mkdir()
    old = time.time() - 3600  # dropped in a while ago: past the store's settle time
    for name in RESULTS:
        path = results / (name.replace("+", "plus") + ".json")
        shutil.copy(CORPUS / name, path)
        os.utime(path, (old, old))
    return subprocess.Popen([sys.executable, "-m", "fioscope", "serve", "--results.dir", str(results),
                             "--web.listen-address", f"127.0.0.1:{FIOSCOPE_PORT}"],
                            stdout=subprocess.DEVNULL, stderr=(tmp / "fioscope.log").open("w"))


def start_peer(binary: str, tmp: Path) -> tuple[subprocess.Popen, Path]:
    """The peer's own fio run: two jobs (a random read/write and an fdatasync'ed write) in two reporting groups,
    1 s each on a 4 MiB file in ``tmp`` (psync, buffered: any filesystem)."""
    work = tmp / "peer"
    work.mkdir()
    flags = (f"--directory={work} --size=4m --ioengine=psync --bs=4k --runtime=1 --time_based "
             "--name=randrw --rw=randrw --name=etcd --new_group --rw=write --fdatasync=1")
    log = tmp / "peer.log"
    proc = subprocess.Popen([binary, "-port", str(PEER_PORT), "-benchmark", "custom", "-customBenchmarkFioFlags", flags],
                            cwd=work, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    return proc, log


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench(peer_binary: str, gets: int) -> None:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as name:  # on a disk: the peer's fio writes its files there
        tmp = Path(name)
        ours = start_fioscope(tmp)
        peer, peer_log = start_peer(peer_binary, tmp)
        try:
            wait_until("fioscope serve", lambda: answers(FIOSCOPE_PORT))
            wait_until("the peer's fio run", lambda: "Benchmark complete" in peer_log.read_text())
            wait_until("the peer", lambda: answers(PEER_PORT))
            ports = {"fioscope": FIOSCOPE_PORT, "fio_benchmark_exporter": PEER_PORT}
            times: dict[str, list[float]] = {who: [] for who in ports}
            bodies: dict[str, bytes] = {}
            for port in ports.values():  # warm both up alike (first render, first connection)
                for _ in range(20):
                    scrape(port)
            for i in range(gets):
                for who in (list(ports) if i % 2 == 0 else list(reversed(ports))):
                    elapsed, bodies[who] = scrape(ports[who])
                    times[who].append(elapsed)
            print(f"{gets} GETs /metrics each, interleaved, a new connection each ({os.cpu_count()} CPUs):")
            for who, values in times.items():
                body = bodies[who]
                series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
                print(f"  {who:24s} median {statistics.median(values) * 1e3:6.3f} ms | p99 {quantile(values, 0.99) * 1e3:6.3f} ms "
                      f"| {series:4d} series | {len(body):6d} bytes")
        finally:
            for proc in (ours, peer):
                proc.terminate()
                proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", help="fio_benchmark_exporter binary")
    parser.add_argument("--gets", type=int, default=600, help="GETs per exporter (default 600)")
    args = parser.parse_args()
    peer = shutil.which(args.peer) or ""
    if not os.access(peer, os.X_OK):
        raise SystemExit(f"bench_scrape: peer binary {args.peer}: not an executable file")
    if os.environ.get(IN_NAMESPACE) != "1":  # again, inside a network namespace holding only loopback
        unshare = ["unshare", "--net"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
        script = 'ip link set lo up && exec "$@"'
        argv = [*unshare, "sh", "-c", script, "sh", sys.executable, *sys.argv]
        try:
            raise SystemExit(subprocess.run(argv, env={**os.environ, IN_NAMESPACE: "1"}, check=False).returncode)
        except FileNotFoundError:
            raise SystemExit("bench_scrape: unshare (util-linux) is needed for a network namespace of loopback only") from None
    bench(str(Path(peer).resolve()), args.gets)


if __name__ == "__main__":
    main()
