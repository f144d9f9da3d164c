"""`optimizer view`'s web server: the standard library's threading HTTP server.

A local, read-only page over one store needs routing for six pages and nothing else, so the
standard library serves it: no dependency to install, and nothing listening beyond the
loopback address unless asked.
"""

from __future__ import annotations

import errno
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit

from optimizer.errors import InputError
from optimizer.viewer.pages import environment, render
from optimizer.viewer.reader import Reader, open_engine


class Handler(BaseHTTPRequestHandler):
    """GET and HEAD only: the viewer never writes."""

    server: "ViewerServer"

    def do_GET(self) -> None:  # noqa: N802
        self._respond(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._respond(body=False)

    def _respond(self, body: bool) -> None:
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        status, html = render(self.server.env, self.server.reader, unquote(parts.path), query)
        data = html.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        if self.server.verbose:
            super().log_message(format, *args)


class ViewerServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, url: str, host: str, port: int, verbose: bool = False):
        self.reader = Reader(open_engine(url))
        self.env = environment()
        self.verbose = verbose
        try:
            super().__init__((host, port), Handler)
        except OSError as exc:
            self.reader.engine.dispose()
            if exc.errno == errno.EADDRINUSE:
                raise InputError(f"port {port} on {host} is busy", field="--port",
                                 fix="pick another with --port, or stop what listens there") from None
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="--host",
                             fix="use 127.0.0.1 (the default) or an address of this machine") from None

    def server_close(self) -> None:
        super().server_close()
        self.reader.engine.dispose()
