"""The HTTP surface against misbehaving clients, on a real ``fioscope serve`` process."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from fioscope_testkit.net import http_get

THREAD_BOUND = 32  # the serving pool (16) plus main, scan, scheduler and interpreter threads


@pytest.fixture
def server(exporter_factory):
    exporter = exporter_factory()
    return exporter.proc, exporter.port


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def raw(port: int, request: bytes, timeout: float = 5) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_scrapes_answer_while_idle_and_half_sent_connections_are_held(server):
    proc, port = server
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(500)]
    half = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    for s in half:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: slow")
    try:
        time.sleep(0.3)  # let the server accept them all
        worst = 0.0
        for _ in range(50):
            started = time.perf_counter()
            body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
            worst = max(worst, time.perf_counter() - started)
            assert "fioscope_up 1.0" in body
        assert worst < 0.1, f"slowest scrape {worst * 1000:.0f} ms"
        assert threads(proc.pid) <= THREAD_BOUND, threads(proc.pid)
        # idle and half-sent connections are closed by the server after a few seconds
        for s in (idle[0], half[0]):
            s.settimeout(10)
            started = time.monotonic()
            assert s.recv(1024) == b""
            assert time.monotonic() - started < 8
    finally:
        for s in idle + half:
            s.close()
    assert threads(proc.pid) <= THREAD_BOUND


def test_head_has_no_body_and_other_methods_get_405(server):
    _, port = server
    get = raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    head = raw(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    get_body = get.split(b"\r\n\r\n", 1)[1]
    head_head, head_body = head.split(b"\r\n\r\n", 1)
    assert head_head.startswith(b"HTTP/1.1 200") and head_body == b""
    length = int(head_head.split(b"Content-Length: ", 1)[1].split(b"\r\n", 1)[0])
    assert abs(length - len(get_body)) < 64 and b"# TYPE fioscope_up gauge" in get_body  # a render's own timing varies
    for method in (b"POST", b"PUT", b"DELETE", b"OPTIONS"):
        answer = raw(port, method + b" /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        assert answer.startswith(b"HTTP/1.1 405"), answer
        assert b"\r\nAllow: GET, HEAD\r\n" in answer
    assert raw(port, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(port, b"GET /nope HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 404")


def test_an_app_error_is_a_500_and_the_server_keeps_serving():
    import threading

    from fioscope.http import Server

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/boom":
            raise RuntimeError("boom")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"fine\n"]

    server = Server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        assert raw(port, b"GET /boom HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 500")
        assert raw(port, b"GET /ok HTTP/1.1\r\n\r\n").endswith(b"\r\n\r\nfine\n")
    finally:
        server.shutdown()
    thread.join(5)
    assert not thread.is_alive()


def test_clients_that_never_read_their_answer_hold_no_worker():
    """40 clients ask for 8 MiB and never read: with the pool writing, all 16 workers would be stuck in send."""
    import threading

    from fioscope.http import Server

    big = b"x" * (8 << 20)

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [big if environ["PATH_INFO"] == "/big" else b"fine\n"]

    server = Server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stuck = []
    try:
        port = server.server_address[1]
        late = socket.create_connection(("127.0.0.1", port))  # reads, but only after the others block
        late.sendall(b"GET /big HTTP/1.1\r\n\r\n")
        for _ in range(40):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /big HTTP/1.1\r\n\r\n")
            stuck.append(s)
        time.sleep(1)
        started = time.perf_counter()
        assert raw(port, b"GET /ok HTTP/1.1\r\n\r\n").endswith(b"\r\n\r\nfine\n")
        assert time.perf_counter() - started < 0.5
        assert threading.active_count() <= THREAD_BOUND
        # the answers are still on their way: a reader that finally reads gets all of it
        late.settimeout(10)
        got = bytearray()
        while chunk := late.recv(1 << 20):
            got += chunk
        late.close()
        assert got.endswith(b"\r\n\r\n" + big)
    finally:
        for s in stuck:
            s.close()
        server.shutdown()


def test_a_slow_reader_gets_its_whole_answer_and_a_stalled_one_is_cut():
    """The write time-out is on no progress, not on total time: a 16 MiB answer read at 2 MiB/s (8x the time-out)
    arrives whole; a reader that stops taking bytes is cut one time-out later (16 MiB: more than the socket buffers)."""
    import threading

    from fioscope.http import Server

    big = bytes(range(256)) * (16 << 12)  # 16 MiB

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return [big]

    server = Server(app, "127.0.0.1", 0, write_timeout=1.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]

        def client(stall_after: int) -> tuple[bytes, float]:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
            s.connect(("127.0.0.1", port))
            s.settimeout(10)
            s.sendall(b"GET /big HTTP/1.1\r\n\r\n")
            got, started = bytearray(), time.monotonic()
            while chunk := s.recv(64 << 10):
                got += chunk
                if len(got) >= stall_after:
                    time.sleep(3)  # three time-outs without taking a byte
                    stall_after = 1 << 40
                    continue
                ahead = len(got) / (2 << 20) - (time.monotonic() - started)  # 2 MiB/s
                if ahead > 0:
                    time.sleep(ahead)
            s.close()
            return bytes(got), time.monotonic() - started

        got, took = client(stall_after=1 << 40)
        assert got.endswith(b"\r\n\r\n" + big) and took > 6.0, (len(got), took)
        got, took = client(stall_after=256 << 10)
        assert len(got) < len(big), "a stalled reader was not cut"
    finally:
        server.shutdown()
