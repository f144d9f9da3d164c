"""`optimizer view`'s web server: the standard library's threading HTTP server.

A local, read-only page over one store needs routing for six pages and nothing else, so the
standard library serves it: no dependency to install, and nothing listening beyond the
loopback address unless asked.
"""

from __future__ import annotations

import errno
from html import escape
import ipaddress
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit

from optimizer.errors import InputError
from optimizer.viewer.pages import environment, render
from optimizer.viewer.reader import Reader, open_engine


READ_TIMEOUT_S = 30.0
"""How long a connection may send nothing before it is closed (idle sockets would hold threads)."""
CLOSE_WAIT_S = 30.0
"""How long closing the server waits for the pages being built to finish reading the store."""
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class Handler(BaseHTTPRequestHandler):
    """GET and HEAD only: the viewer never writes. A request whose `Host` names no address this
    server serves is refused with 421 (`ViewerServer.serves`): a page on another site that makes
    its own name resolve to this machine (DNS rebinding) would otherwise read every transcript."""

    server: "ViewerServer"
    timeout = READ_TIMEOUT_S

    def do_GET(self) -> None:  # noqa: N802
        self._respond(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._respond(body=False)

    def _respond(self, body: bool) -> None:
        host = self.headers.get("Host") or ""
        if not self.server.serves(host):
            self._send(421, f"<!doctype html><title>421</title><p>this viewer does not serve the host "
                            f"{escape(host)}; open it by the address it printed</p>", body)
            return
        if not self.server.begin_read():
            self._send(503, "<!doctype html><title>503</title><p>the viewer is stopping</p>", body)
            return
        try:
            parts = urlsplit(self.path)
            query = dict(parse_qsl(parts.query))
            status, html = render(self.server.env, self.server.reader, unquote(parts.path), query)
        finally:
            self.server.end_read()
        self._send(status, html, body)

    def _send(self, status: int, html: str, body: bool) -> None:
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


def host_name(header: str) -> str:
    """The name or address of a `Host` header, without its port or brackets, lower-case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def beyond_loopback(host: str) -> bool:
    """Whether listening on `host` lets other machines connect."""
    name = host_name(host) or "0.0.0.0"
    if name == "localhost":
        return False
    return not (_is_address(name) and ipaddress.ip_address(name).is_loopback)


class ViewerServer(ThreadingHTTPServer):
    daemon_threads = True

    def serves(self, header: str) -> bool:
        """Whether a request's `Host` names this server: a loopback name, the address it listens
        on, this machine's name, or (listening on every address) any address literal. A name
        that only resolves here (a rebinding attacker's) is not one of them."""
        name = host_name(header)
        if not name:
            return False
        if name in LOOPBACK_NAMES or name == self.bound or name in self.names:
            return True
        return self.bound in ("0.0.0.0", "::", "") and _is_address(name)

    def __init__(self, url: str, host: str, port: int, verbose: bool = False):
        self.bound = host_name(host)
        self.names = {name.lower() for name in (socket.gethostname(), socket.getfqdn()) if name}
        self.reader = Reader(open_engine(url))
        self.env = environment()
        self.verbose = verbose
        self._reading = 0
        self._closing = False
        self._idle = threading.Condition()
        try:
            super().__init__((host, port), Handler)
        except OSError as exc:
            self.reader.engine.dispose()
            if exc.errno == errno.EADDRINUSE:
                raise InputError(f"port {port} on {host} is busy", field="--port",
                                 fix="pick another with --port, or stop what listens there") from None
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="--host",
                             fix="use 127.0.0.1 (the default) or an address of this machine") from None

    def begin_read(self) -> bool:
        """Counts a page being built from the store; False once the server is closing."""
        with self._idle:
            if self._closing:
                return False
            self._reading += 1
            return True

    def end_read(self) -> None:
        with self._idle:
            self._reading -= 1
            self._idle.notify_all()

    def server_close(self) -> None:
        """Stops listening, then closes the store's connections once no page is being built from
        them (request threads are daemons, not joined: a connection closed under a query running
        in another thread crashed the process). A page still reading after `CLOSE_WAIT_S` keeps
        the connections open, to be closed with the process."""
        super().server_close()
        with self._idle:
            self._closing = True
            idle = self._idle.wait_for(lambda: self._reading == 0, timeout=CLOSE_WAIT_S)
        if idle:
            self.reader.engine.dispose()
