"""HTTP endpoints: ``/`` landing page, ``/metrics``, ``/-/healthy`` (cheap, touches no store)."""

from __future__ import annotations

import logging
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST

from . import __version__
from .collector import Exposition
from .collector.exporter import ScrapeTimer

log = logging.getLogger("fioscope.http")

LANDING = f"""<html><head><title>fioscope</title></head><body>
<h1>fioscope {__version__}</h1>
<p>fio results as Prometheus metrics.</p>
<ul><li><a href="metrics">/metrics</a></li><li><a href="-/healthy">/-/healthy</a></li></ul>
</body></html>""".encode()


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature fixed by the base class
        log.debug("%s " + format, self.client_address[0], *args)


def make_app(exposition: Exposition, timer: ScrapeTimer):
    def app(environ, start_response):
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            started = time.perf_counter()
            body = exposition.render()
            timer.last_seconds = time.perf_counter() - started
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
            return [body]
        if path in ("/-/healthy", "/-/ready"):
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"OK\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [LANDING]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


def parse_listen_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--web.listen-address: {address!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def serve(exposition: Exposition, timer: ScrapeTimer, address: str) -> _ThreadingServer:
    host, port = parse_listen_address(address)
    return make_server(host, port, make_app(exposition, timer), server_class=_ThreadingServer, handler_class=_QuietHandler)
