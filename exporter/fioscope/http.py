"""HTTP endpoints: ``/`` landing page, ``/metrics`` (rendered once per change, served from that rendering:
collector/__init__.py), ``/-/healthy`` (cheap, touches no store), ``/runbook``
(the runbook the package ships: where the alerts' runbook_url points unless links.runbook is set).

The server holds against misbehaving clients: one selector thread accepts connections,
reads request heads and writes responses without blocking (TLS handshakes included); a
connection that has not sent a whole head within ``timeout`` seconds, or taken no byte of its
answer for ``WRITE_TIMEOUT_SECONDS`` (no progress, not total time: a 30 MB answer over a slow
link is legitimate), is closed; complete requests go to a fixed pool of
``workers`` threads that run the WSGI app and send what the socket takes without waiting (most answers: all; the
rest is the selector's to write). So idle, half-sent or never-reading
connections cost a file descriptor each, never a thread, and scrapes keep answering.
Basic-auth logins not seen before cost a bcrypt (~0.1 s of CPU, on purpose): they are checked
by ONE separate thread, at most ``AUTH_BACKLOG`` waiting (more are refused with 401 unchecked),
so a flood of wrong passwords costs one core at most and never holds a render thread; known
logins and recent failures are answered from the web config's memory. A changed web config is
read, validated and bcrypt-checked by another thread (``fioscope-web-reload``), once a second;
the selector thread only picks up the settings in force when a connection arrives.
One request per connection (``Connection: close``); GET and HEAD only.
"""

from __future__ import annotations

import io
import ipaddress
import logging
import re
import resource
import selectors
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST

from . import __version__
from .collector import Exposition
from .collector.exporter import ScrapeTimer
from .resources import runbook_html
from .scanner import effective_interval
from .webconfig import WebConfig, load_web_config

if TYPE_CHECKING:
    from .scanner import ScanLoop
    from .store import Store

log = logging.getLogger("fioscope.http")

LANDING = f"""<html><head><title>fioscope</title></head><body>
<h1>fioscope {__version__}</h1>
<p>fio results as Prometheus metrics.</p>
<ul><li><a href="metrics">/metrics</a></li><li><a href="-/healthy">/-/healthy</a></li><li><a href="runbook">/runbook</a></li></ul>
</body></html>""".encode()

WORKERS = 16
AUTH_BACKLOG = 8
TIMEOUT_SECONDS = 5.0
WRITE_TIMEOUT_SECONDS = 30.0
WEB_RELOAD_SECONDS = 1.0
MAX_HEAD_BYTES = 16 * 1024
ALLOWED_METHODS = ("GET", "HEAD")
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error"}


def make_app(exposition: Exposition):
    def app(environ, start_response):
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
            return [exposition.render()]  # rendered once per change (collector/__init__.py)
        if path in ("/-/healthy", "/-/ready"):
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"OK\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [LANDING]
        if path == "/runbook":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [runbook_html()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


def parse_listen_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    # ASCII digits only (str.isdigit takes '٣' and '²'), and a port bind() takes (65536 raised OverflowError there)
    if not sep or not re.fullmatch(r"[0-9]{1,5}", port) or int(port) > 65535:
        raise ValueError(f"--web.listen-address: {address!r} is not HOST:PORT (a port from 0 to 65535)")
    return host.strip("[]") or "0.0.0.0", int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class _Pending:
    """A connection held by the selector: its request head arriving, or its answer leaving (``out``)."""

    sock: socket.socket
    address: tuple
    deadline: float
    handshaking: bool
    web: WebConfig | None  # the settings in force when it connected
    head: bytearray = field(default_factory=bytearray)
    out: list[memoryview] | None = None


class Server:
    """Selector thread for accepting and reading heads, a bounded pool for answering."""

    def __init__(self, app, host: str, port: int, web: WebConfig | None = None, workers: int = WORKERS,
                 timeout: float = TIMEOUT_SECONDS, write_timeout: float = WRITE_TIMEOUT_SECONDS):
        self.app = app
        self.web = web
        self.timeout = timeout
        self.write_timeout = write_timeout
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.create_server((host, port), family=family, backlog=1024)
        self.listener.setblocking(False)
        self.server_address = self.listener.getsockname()
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fioscope-http")
        self.auth_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fioscope-auth")
        self._auth_slots = threading.BoundedSemaphore(AUTH_BACKLOG)
        self.max_connections = max(64, min(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 128))
        self._selector = selectors.DefaultSelector()
        self._pending: dict[int, _Pending] = {}
        self._answering = 0  # handed to the pool, queued or running (bounded with the pending ones)
        self._answering_lock = threading.Lock()
        self._answered: list[_Pending] = []  # from the pool, for the selector to write (under _answering_lock)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._reloader = threading.Thread(target=self._reload_web, name="fioscope-web-reload", daemon=True)
        if web is not None:
            self._reloader.start()

    # -- selector thread -------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._selector.register(self.listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        next_sweep = time.monotonic()
        try:
            while not self._stop.is_set():
                for key, _ in self._selector.select(timeout=0.5):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._take_answers()
                    elif key.data.out is not None:
                        self._write(key.data)
                    else:
                        self._read(key.data)
                now = time.monotonic()
                if now >= next_sweep:
                    next_sweep = now + 0.25
                    for pending in [p for p in self._pending.values() if p.deadline <= now]:
                        self._drop(pending)
        finally:
            for pending in list(self._pending.values()):
                self._drop(pending)
            self._selector.close()
            self.listener.close()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.auth_pool.shutdown(wait=False, cancel_futures=True)
            self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake_w.send(b"x")
        self._stopped.wait(10)

    def every(self, seconds: float, task: Callable[[], None], name: str) -> None:
        """Run ``task`` every ``seconds`` on a thread of its own until shutdown; a failure is one log line, never its end."""
        def loop() -> None:
            while not self._stop.wait(seconds):
                try:
                    task()
                except Exception:  # noqa: BLE001 - this thread must outlive anything the task meets
                    log.exception("%s failed", name)

        threading.Thread(target=loop, name=name, daemon=True).start()

    def _reload_web(self) -> None:
        """The reload thread: a changed web config is read and checked here, never on the selector thread."""
        while not self._stop.wait(WEB_RELOAD_SECONDS):
            web = self.web
            if web is None:
                return
            try:
                self.web = web.reloaded()  # one reference swapped: a connection takes the old or the new settings whole
            except Exception:  # reloaded() contains its own errors; this thread must outlive anything else
                log.exception("%s: web config reload failed (keeping the previous web config)", web.path)

    def _accept(self) -> None:
        for _ in range(256):
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: shed load, keep serving
                log.warning("accept: %s", exc)
                return
            if len(self._pending) + self._answering >= self.max_connections:
                sock.close()
                continue
            sock.setblocking(False)
            web = self.web
            if web and web.tls:
                sock = web.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            pending = _Pending(sock, address, time.monotonic() + self.timeout, handshaking=bool(web and web.tls), web=web)
            self._pending[sock.fileno()] = pending
            self._selector.register(sock, selectors.EVENT_READ, pending)

    def _read(self, pending: _Pending) -> None:
        sock = pending.sock
        try:
            if pending.handshaking:
                assert isinstance(sock, ssl.SSLSocket)
                sock.do_handshake()
                pending.handshaking = False
                self._selector.modify(sock, selectors.EVENT_READ, pending)
            while True:
                data = sock.recv(65536)
                if not data:
                    return self._drop(pending)
                pending.head += data
                if b"\r\n\r\n" in pending.head or b"\n\n" in pending.head:
                    return self._dispatch(pending)
                if len(pending.head) > MAX_HEAD_BYTES:
                    return self._dispatch(pending)  # answered 431 by a worker
        except (BlockingIOError, ssl.SSLWantReadError):
            return None
        except ssl.SSLWantWriteError:
            self._selector.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, pending)
            return None
        except (OSError, ValueError) as exc:  # reset, TLS handshake failure (plain HTTP to a TLS port) ...
            log.debug("%s: %s", pending.address[0], exc)
            return self._drop(pending)

    def _take_answers(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        with self._answering_lock:
            answered, self._answered = self._answered, []
        for pending in answered:
            self._pending[pending.sock.fileno()] = pending
            self._write(pending)

    def _push(self, pending: _Pending) -> bool:
        """Send what the socket takes without waiting; True once the whole answer is sent. OSError: the peer is gone."""
        out = pending.out or []
        try:
            while out:
                sent = pending.sock.send(out[0][:65536])
                out[0] = out[0][sent:]
                if not out[0]:
                    out.pop(0)
                if sent:
                    pending.deadline = time.monotonic() + self.write_timeout  # the reader makes progress
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return False
        return True

    def _write(self, pending: _Pending) -> None:
        try:
            if not self._push(pending):
                if pending.sock.fileno() not in self._selector.get_map():
                    self._selector.register(pending.sock, selectors.EVENT_WRITE, pending)
                return
        except OSError as exc:
            log.debug("%s: %s", pending.address[0], exc)
        self._drop(pending)

    def _forget(self, pending: _Pending) -> None:
        self._pending.pop(pending.sock.fileno(), None)
        try:
            self._selector.unregister(pending.sock)
        except (KeyError, ValueError):
            pass

    def _drop(self, pending: _Pending) -> None:
        self._forget(pending)
        pending.sock.close()

    def _dispatch(self, pending: _Pending) -> None:
        self._forget(pending)
        with self._answering_lock:
            self._answering += 1
        self.pool.submit(self._answer, pending)

    # -- worker threads --------------------------------------------------------------------------
    def _answer(self, pending: _Pending, authorized: bool | None = None) -> None:
        """Answer a request; ``authorized``: the auth thread's verdict on its credentials, if it had to check them."""
        try:
            parts = self._respond(bytes(pending.head), pending.address, pending.web, pending, authorized)
            if parts is None:
                return  # handed to the auth thread, which hands it back
            pending.out = [memoryview(part) for part in parts if part]
            pending.deadline = time.monotonic() + self.write_timeout
            # most answers fit the socket's buffer: sent from here, without a round trip through the selector thread;
            # the rest of a larger one (or one for a reader that does not read) is the selector's to write
            if self._push(pending):
                pending.out = None
                pending.sock.close()
        except Exception as exc:  # noqa: BLE001 - one bad request (or a peer gone) must never take a worker down
            log.debug("%s: %s", pending.address[0], exc)
            pending.out = None
            pending.sock.close()
        with self._answering_lock:
            self._answering -= 1
            if pending.out is not None:
                self._answered.append(pending)
        if pending.out is not None:
            self._wake_w.send(b"a")

    def _check_login(self, pending: _Pending, web: WebConfig, authorization: str | None) -> bool:
        """Queue a login that needs bcrypt to the auth thread; False if its backlog is full (then it is refused)."""
        if not self._auth_slots.acquire(blocking=False):
            return False

        def check() -> None:
            try:
                verdict = web.authorized(authorization)
            except Exception as exc:  # noqa: BLE001 - a failed check is a refusal
                log.debug("%s: %s", pending.address[0], exc)
                verdict = False
            finally:
                self._auth_slots.release()
            self.pool.submit(self._answer, pending, verdict)

        self.auth_pool.submit(check)
        return True

    def _respond(self, head: bytes, address: tuple, web: WebConfig | None, pending: _Pending | None = None,
                 authorized: bool | None = None) -> tuple[bytes, bytes] | None:
        if len(head) > MAX_HEAD_BYTES and b"\n\n" not in head.replace(b"\r\n", b"\n"):
            return self._response(431, [], b"request head too large\n", "GET", web)
        lines = head.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0].decode("latin-1").split("\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return self._response(400, [], b"bad request\n", "GET", web)
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if method not in ALLOWED_METHODS:
            return self._response(405, [("Allow", ", ".join(ALLOWED_METHODS))], b"method not allowed\n", method, web)
        if web and authorized is None:
            authorized = web.cached_verdict(headers.get("authorization"))
            if authorized is None and pending is not None and self._check_login(pending, web, headers.get("authorization")):
                return None
        if web and not authorized:
            return self._response(401, [("WWW-Authenticate", 'Basic realm="fioscope"')], b"Unauthorized\n", method, web)
        url = urlsplit(target)
        environ = {
            "REQUEST_METHOD": method, "PATH_INFO": unquote(url.path or "/"), "QUERY_STRING": url.query,
            "SERVER_NAME": str(self.server_address[0]), "SERVER_PORT": str(self.server_address[1]),
            "SERVER_PROTOCOL": version, "REMOTE_ADDR": str(address[0]), "SCRIPT_NAME": "",
            "wsgi.version": (1, 0), "wsgi.url_scheme": "https" if web and web.tls else "http",
            "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr, "wsgi.multithread": True,
            "wsgi.multiprocess": False, "wsgi.run_once": False,
            **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()},
        }
        status: list = []

        def start_response(status_line, response_headers, exc_info=None):
            status[:] = [status_line, response_headers]

        try:
            body = b"".join(self.app(environ, start_response))
        except Exception:
            log.exception("%s %s", method, target)
            return self._response(500, [], b"internal error\n", method, web)
        code = int(status[0].split()[0])
        return self._response(code, list(status[1]), body, method, web)

    @staticmethod
    def _response(code: int, headers: list, body: bytes, method: str, web: WebConfig | None) -> tuple[bytes, bytes]:
        headers = [h for h in headers if h[0].lower() not in ("content-length", "connection")]
        if not any(h[0].lower() == "content-type" for h in headers):
            headers.append(("Content-Type", "text/plain; charset=utf-8"))
        headers += [("Content-Length", str(len(body))), ("Connection", "close")] + (web.headers if web else [])
        out = f"HTTP/1.1 {code} {_REASONS.get(code, 'Unknown')}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
        return out.encode("latin-1"), (b"" if method == "HEAD" else body)


def serve(exposition: Exposition, address: str, web: WebConfig | None = None) -> Server:
    host, port = parse_listen_address(address)
    return Server(make_app(exposition), host, port, web)


def listen(store: Store, address: str, web_config_file: str | None, scan_loop: ScanLoop | None = None,
           scheduler: threading.Thread | None = None) -> tuple[Server, WebConfig | None]:
    """Serve ``store``'s /metrics on ``address`` (``fioscope serve``, and a capture's --web.listen-address): the web
    config read first; a listener beyond loopback without it is one warning. OSError names the address (or the file)."""
    web = load_web_config(web_config_file) if web_config_file else None
    timer = ScrapeTimer()
    try:
        host, _ = parse_listen_address(address)
    except ValueError as exc:  # names the flag
        raise OSError(str(exc)) from None
    exposition = Exposition(store, timer, scan_loop, scheduler, web.status if web else None)
    try:
        server = serve(exposition, address, web)
    except OSError as exc:
        raise OSError(f"--web.listen-address {address}: cannot listen there: {exc.strerror or exc}") from None
    # devices come and go unannounced: sysfs is read again every scan interval, off the scrape path
    server.every(effective_interval(store.config.scan_interval_seconds), exposition.refresh_topology, "fioscope-topology")
    if web is None and not is_loopback(host):
        log.warning("listening on %s beyond loopback without TLS or authentication: give --web.config.file", address)
    return server, web
