"""Serve the MCP server over streamable HTTP (``mapsmith serve --http``), behind a bearer token.

The MCP side is the SDK's own streamable HTTP app; this module adds the gate in front of it: every
request must carry ``Authorization: Bearer <MAPSMITH_HTTP_TOKEN>`` (compared in constant time) or it
is answered 401 before the SDK sees it, and on a loopback address the Host and Origin headers are
checked against loopback names (DNS rebinding). Start-up refuses, before anything is bound, a
non-loopback address without a token, and a token too short or too simple to be a secret.

This module must never write the token anywhere: not in a message, a log line, a manifest, or the
environment the engines and their subprocesses inherit (the CLI removes it from ``os.environ``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mapsmith.errors import ConfigurationError

TOKEN_ENV = "MAPSMITH_HTTP_TOKEN"
MIN_TOKEN_CHARS = 32
# A 32-character string of only a few distinct characters ("aaaa…", "abab…", "0000…1") is not a secret.
MIN_DISTINCT_TOKEN_CHARS = 8
GENERATE_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MCP_PATH = "/mcp"
# RFC 6750's b64token: what a client can put after "Bearer " unquoted; token_urlsafe and token_hex fit.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class HTTPTransportError(ConfigurationError):
    """``serve --http`` cannot start safely: no or weak token, no workspace off loopback, an address it cannot bind."""

    code = "HTTP_TRANSPORT_REFUSED"


def read_token(environ: Mapping[str, str]) -> bytes | None:
    """The bearer token from ``MAPSMITH_HTTP_TOKEN``, or None when the variable is not set.

    A variable that is set but empty, short, outside RFC 6750's token characters or built from a few
    characters is refused rather than ignored: whoever set it meant the server to be protected.
    The messages say how long the token is, never what it is.
    """
    raw = environ.get(TOKEN_ENV)
    if raw is None:
        return None
    hint = f"set {TOKEN_ENV} to a random token of at least {MIN_TOKEN_CHARS} characters: {GENERATE_TOKEN}"
    if len(raw) < MIN_TOKEN_CHARS:
        raise HTTPTransportError(
            f"{TOKEN_ENV} is {len(raw)} characters long; a bearer token needs at least {MIN_TOKEN_CHARS}.",
            code="HTTP_TOKEN_WEAK",
            evidence={"variable": TOKEN_ENV, "length": len(raw), "minimum_length": MIN_TOKEN_CHARS},
            hint=hint,
        )
    if not _B64TOKEN.fullmatch(raw):
        raise HTTPTransportError(
            f"{TOKEN_ENV} holds characters a bearer token cannot carry (spaces, quotes, non-ASCII, …).",
            code="HTTP_TOKEN_WEAK",
            evidence={"variable": TOKEN_ENV, "length": len(raw), "allowed": "A-Z a-z 0-9 - . _ ~ + / and trailing ="},
            hint=hint,
        )
    distinct = len(set(raw))
    if distinct < MIN_DISTINCT_TOKEN_CHARS:
        raise HTTPTransportError(
            f"{TOKEN_ENV} is built from only {distinct} different characters; it is guessable, not a secret.",
            code="HTTP_TOKEN_WEAK",
            evidence={"variable": TOKEN_ENV, "distinct_characters": distinct, "minimum": MIN_DISTINCT_TOKEN_CHARS},
            hint=hint,
        )
    return raw.encode("ascii")


@dataclass(frozen=True)
class Binding:
    """Where the server will listen: the first address ``host`` resolves to, and whether every
    address it resolves to is loopback (so a name that also resolves elsewhere counts as exposed)."""

    host: str
    family: socket.AddressFamily
    sockaddr: tuple[Any, ...]
    loopback: bool


def resolve_binding(host: str, port: int) -> Binding:
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise HTTPTransportError(
            f"cannot resolve the address to listen on, {host!r}: {exc}",
            code="HTTP_BIND_FAILED",
            evidence={"host": host, "port": port},
            hint=f"pass --host {DEFAULT_HOST} (this machine only) or an address of one of its interfaces",
        ) from exc
    loopback = bool(infos) and all(_is_loopback(str(info[4][0])) for info in infos)
    family, _, _, _, sockaddr = infos[0]
    return Binding(host=host, family=family, sockaddr=sockaddr, loopback=loopback)


def _is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def check_exposure(binding: Binding, token: bytes | None, *, workspace_set: bool) -> str | None:
    """Refuse a start that would expose the server; return a warning to print for one that is allowed
    but open to every local process (loopback without a token), else None."""
    if not binding.loopback and token is None:
        raise HTTPTransportError(
            f"refusing to listen on {binding.host!r}, which is not a loopback address, without a bearer token: "
            f"anyone who can reach it could run operations. Set {TOKEN_ENV} in the server's environment.",
            code="HTTP_TOKEN_REQUIRED",
            evidence={"host": binding.host, "variable": TOKEN_ENV},
            hint=f"generate a token with {GENERATE_TOKEN}, export it as {TOKEN_ENV} for the server and send it "
            f"as 'Authorization: Bearer <token>' from the client; or listen on {DEFAULT_HOST} only",
        )
    if not binding.loopback and not workspace_set:
        raise HTTPTransportError(
            f"refusing to listen on {binding.host!r} without MAPSMITH_WORKSPACE: remote clients could read and "
            "write any file this user can.",
            code="HTTP_WORKSPACE_REQUIRED",
            evidence={"host": binding.host},
            hint="set MAPSMITH_WORKSPACE to the folder remote clients may use, or listen on 127.0.0.1 only",
        )
    if token is None:
        return (
            f"mapsmith: warning: {TOKEN_ENV} is not set, so any process on this machine can use the server "
            f"at {binding.host}. Set it ({GENERATE_TOKEN}) to require a bearer token."
        )
    return None


def security_settings(binding: Binding) -> Any:
    """DNS-rebinding protection: on loopback, only loopback Host and Origin values are accepted, so a web
    page whose name was re-pointed at 127.0.0.1 cannot reach the server through a browser. On any other
    address MapSmith cannot know the names clients will use; the bearer token is the guard there."""
    from mcp.server.transport_security import TransportSecuritySettings

    if not binding.loopback:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = list(_LOOPBACK_NAMES)
    own = f"[{binding.sockaddr[0]}]" if binding.family == socket.AF_INET6 else str(binding.sockaddr[0])
    if own not in names:
        names.append(own)
    hosts = [n for name in names for n in (name, f"{name}:*")]
    origins = [n for name in names for n in (f"http://{name}", f"http://{name}:*")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


class BearerTokenGate:
    """ASGI middleware: an HTTP request goes on only with ``Authorization: Bearer <token>``.

    The comparison is of SHA-256 digests with ``hmac.compare_digest``, so its time depends on neither
    the token's value nor its length. Refusals are 401 with ``WWW-Authenticate: Bearer`` and a body
    that names the header to send; what the client sent is never echoed or logged. Headers only are
    read: an unauthenticated client cannot make the server buffer a body.
    """

    def __init__(self, app: Any, token: bytes) -> None:
        self.app = app
        self._digest = hashlib.sha256(token).digest()

    def authorized(self, headers: list[tuple[bytes, bytes]]) -> tuple[bool, str]:
        values = [value for name, value in headers if name.lower() == b"authorization"]
        if not values:
            return False, "no Authorization header"
        if len(values) > 1:
            return False, "more than one Authorization header"
        scheme, _, credentials = values[0].strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False, "Authorization scheme is not Bearer"
        credentials = credentials.strip()
        if not credentials:
            return False, "empty bearer token"
        if not hmac.compare_digest(hashlib.sha256(credentials).digest(), self._digest):
            return False, "wrong bearer token"
        return True, ""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        ok, reason = self.authorized(list(scope.get("headers") or []))
        if ok:
            await self.app(scope, receive, send)
            return
        client = scope.get("client") or ("?", 0)
        print(f"mapsmith: refused an HTTP request from {client[0]}: {reason}", file=sys.stderr, flush=True)
        if scope["type"] != "http":  # a websocket upgrade: closing before accepting answers 403
            await send({"type": "websocket.close", "code": 1008})
            return
        error = "invalid_request" if reason == "no Authorization header" else "invalid_token"
        header = b'Bearer realm="mapsmith"' + (b', error="invalid_token"' if error == "invalid_token" else b"")
        body = (
            b'{"error": "' + error.encode() + b'", "error_description": "send Authorization: Bearer '
            b"<the token in the server's MAPSMITH_HTTP_TOKEN>\"}"
        )
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", header),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def build_http_app(server: Any, binding: Binding, token: bytes | None) -> Any:
    """The ASGI app: the SDK's streamable HTTP app at ``/mcp``, behind the token gate when there is a token."""
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, transport_security=security_settings(binding))
    return BearerTokenGate(app, token) if token is not None else app


def bind(binding: Binding) -> socket.socket:
    sock = socket.socket(binding.family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if binding.family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(binding.sockaddr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise HTTPTransportError(
            f"cannot listen on {binding.host} port {binding.sockaddr[1]}: {exc.strerror or exc}",
            code="HTTP_BIND_FAILED",
            evidence={"host": binding.host, "port": binding.sockaddr[1], "errno": exc.errno},
            hint="choose another --port (0 picks a free one), or stop the process holding this one",
        ) from exc
    return sock


def serve_http(app: Any, binding: Binding, token: bytes | None) -> None:
    """Bind, say where on stderr, and serve until SIGINT/SIGTERM. Raises ``HTTPTransportError`` when the
    address cannot be bound."""
    import uvicorn

    from mapsmith.catalog import check_discovery_log
    from mapsmith.server import build_server

    check_discovery_log(app)
    sock = bind(binding)
    port = sock.getsockname()[1]
    asgi = build_http_app(build_server(app), binding, token)
    config = uvicorn.Config(
        asgi,
        lifespan="on",
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # never trust X-Forwarded-For: the client address logged is the socket's
        server_header=False,
        timeout_graceful_shutdown=3,
    )
    shown = f"[{sock.getsockname()[0]}]" if binding.family == socket.AF_INET6 else sock.getsockname()[0]
    guard = "bearer token required" if token is not None else "no token: loopback only"
    print(f"mapsmith: serving MCP at http://{shown}:{port}{MCP_PATH} ({guard})", file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=[sock])
