"""A forward proxy on loopback that holds other HTTP clients to the fetch policy, every request and
every redirect: what pystac-client (requests) and GDAL (libcurl, for range reads of cloud-optimised
GeoTIFFs) are pointed at while a fetching operation runs.

Those clients resolve host names and follow redirects themselves, so checking their first URL is not
enough. Pointed at this proxy (``requests``' ``proxies``, GDAL's ``GDAL_HTTP_PROXY``), each request
they make — the first, each redirect's, each range — arrives here first: an ``http://`` request as an
absolute URL, an ``https://`` one as ``CONNECT host:port``. The proxy checks it with
``FetchPolicy.check`` (host listed, every resolved address allowed), connects to the address it checked
(never a second resolution), and relays bytes; a refusal is answered ``403`` and kept in
``refusals`` so the operation can raise it with its code. Inside TLS the path cannot be seen, so for
``https://`` a URL-prefix entry admits its host (said in SECURITY.md). The bytes relayed are counted
against ``MAPSMITH_FETCH_MAX_BYTES``, and the whole session against ``MAPSMITH_FETCH_TIMEOUT_S``.

Written here because no well-kept library embeds a forward proxy with a per-request policy hook in a
few dozen lines (proxy.py and mitmproxy are servers with their own process model); the socket work is
the standard library's ``socketserver``. It listens on 127.0.0.1 only, for the lifetime of a ``with``.
"""

from __future__ import annotations

import select
import socket
import socketserver
import threading
import time
from types import TracebackType
from urllib.parse import urlsplit

from mapsmith.fetch.policy import FetchPolicy, FetchRefused

_RELAY_CHUNK = 1 << 16
_HEADER_LIMIT = 64 * 1024


class PolicyProxy:
    """``with PolicyProxy(policy) as url:`` — ``url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, policy: FetchPolicy) -> None:
        self.policy = policy
        self.refusals: list[FetchRefused] = []
        self.requests: list[str] = []  # what was asked, for the record: "CONNECT host:port" or the URL
        self.relayed_bytes = 0
        self._lock = threading.Lock()
        self._deadline = 0.0
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                proxy._handle(self)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that hangs up mid-relay is not an error of the proxy's

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> str:
        self._deadline = time.monotonic() + self.policy.timeout_s
        self._thread.start()
        return self.url

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def first_refusal(self) -> FetchRefused | None:
        with self._lock:
            return self.refusals[0] if self.refusals else None

    # -- one client connection ------------------------------------------------------------------

    def _handle(self, handler: socketserver.StreamRequestHandler) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            line = handler.rfile.readline(_HEADER_LIMIT)
            if not line:
                return
            head += line
            if len(head) > _HEADER_LIMIT:
                return
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            return
        with self._lock:
            self.requests.append(f"{method} {target}")
        try:
            if method.upper() == "CONNECT":
                host, _, port = target.rpartition(":")
                checked = self.policy.check(f"https://{host}:{port}/")
                upstream = socket.create_connection((checked.address, checked.port), timeout=30)
                handler.wfile.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                handler.wfile.flush()
                self._relay(handler.connection, upstream)
                return
            parts = urlsplit(target)
            checked = self.policy.check(target)
            upstream = socket.create_connection((checked.address, checked.port), timeout=30)
        except FetchRefused as refused:
            with self._lock:
                self.refusals.append(refused)
            body = f"{refused.code}: {refused.message}".encode()
            handler.wfile.write(
                b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                + f"X-MapSmith-Refused: {refused.code}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            return
        except OSError:
            handler.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            return
        # Plain http: the request line in origin form, hop-by-hop and proxy headers dropped, one request.
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = [
            h
            for h in lines[1:]
            if h and h.split(":", 1)[0].strip().lower() not in ("proxy-connection", "proxy-authorization", "connection")
        ]
        request = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""]).encode("latin-1")
        upstream.sendall(request)
        self._relay(handler.connection, upstream)

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        sockets = [client, upstream]
        try:
            while time.monotonic() < self._deadline:
                ready, _, _ = select.select(sockets, [], [], 1.0)
                for s in ready:
                    data = s.recv(_RELAY_CHUNK)
                    if not data:
                        return
                    (upstream if s is client else client).sendall(data)
                    if s is upstream:
                        with self._lock:
                            self.relayed_bytes += len(data)
                            over = self.relayed_bytes > self.policy.max_bytes
                        if over:
                            with self._lock:
                                self.refusals.append(
                                    FetchRefused(
                                        f"more than {self.policy.max_bytes:,} bytes were fetched in one call",
                                        code="FETCH_TOO_LARGE",
                                        evidence={"bytes": self.relayed_bytes, "limit": self.policy.max_bytes},
                                        hint="fetch a smaller window (bbox), or ask the operator to raise "
                                        "MAPSMITH_FETCH_MAX_BYTES",
                                    )
                                )
                            return
            with self._lock:
                self.refusals.append(
                    FetchRefused(
                        "the fetching passed its time limit",
                        code="FETCH_TIMEOUT",
                        evidence={"bytes": self.relayed_bytes},
                        hint="try again, or ask the operator to raise MAPSMITH_FETCH_TIMEOUT_S; nothing was kept",
                    )
                )
        except OSError:
            return
        finally:
            upstream.close()
