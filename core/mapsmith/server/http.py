"""Serve the MCP server over streamable HTTP (``mapsmith serve --http``), behind a bearer token.

The MCP side is the SDK's own streamable HTTP app; this module adds the gates in front of it. Every
request must carry ``Authorization: Bearer <MAPSMITH_HTTP_TOKEN>`` (compared in constant time) or it
is answered 401 before the SDK sees it. On every address, the ``Host`` and ``Origin`` headers are
parsed exactly (scheme, host, port; no prefix matching) and checked (``OriginHostGate``): on a
loopback address only loopback names are accepted (DNS rebinding); a browser ``Origin`` is accepted
only from loopback pages on a loopback address, or from the origins listed in
``MAPSMITH_HTTP_ALLOWED_ORIGINS``; a request without ``Origin`` (not a browser) goes on to the token.
Start-up refuses, before anything is bound, a non-loopback address without a token, and a token too
short or too simple to be a secret.

This module must never write the token anywhere: not in a message, a log line, a manifest, or the
environment the engines and their subprocesses inherit. ``take_token`` reads it and removes it from
the process's environment, including the bytes the kernel shows in ``/proc/<pid>/environ``.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import ipaddress
import json
import os
import re
import socket
import sys
from collections.abc import Mapping, MutableMapping
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
ALLOWED_ORIGINS_ENV = "MAPSMITH_HTTP_ALLOWED_ORIGINS"
# RFC 9110 Host / RFC 6454 Origin, strictly: a name or an IPv4 address or a bracketed IPv6 address, and an
# optional decimal port. Nothing else (no userinfo "@", no path): what is not this shape is refused.
_HOST = r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*\.?)"
_HOST_HEADER = re.compile(_HOST + r"(?::(?P<port>[0-9]{1,5}))?")
_ORIGIN = re.compile(r"(?P<scheme>https?)://" + _HOST + r"(?::(?P<port>[0-9]{1,5}))?")
_DEFAULT_PORTS = {"http": 80, "https": 443}


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
    """The SDK's own Host/Origin check is off: ``OriginHostGate`` replaces it on every address, because the
    SDK matches ``host:*`` patterns by prefix (``localhost:80@evil.example`` passes) and MapSmith used to
    switch it off off loopback. The SDK still checks Content-Type."""
    from mcp.server.transport_security import TransportSecuritySettings

    del binding  # the gate, not the SDK, knows the binding
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def parse_host(value: str) -> tuple[str, int | None] | None:
    """``Host`` header -> (lower-case host, port or None), or None when it is not exactly host[:port]."""
    match = _HOST_HEADER.fullmatch(value)
    if match is None or not _valid_host(match["host"]):
        return None
    port = int(match["port"]) if match["port"] is not None else None
    if port is not None and not 0 < port <= 65535:
        return None
    return match["host"].lower().rstrip("."), port


def parse_origin(value: str) -> tuple[str, str, int] | None:
    """``Origin`` -> (scheme, lower-case host, port with the scheme's default), or None when malformed.

    ``null`` (sandboxed frames, file: pages) is not an origin anything can be allowed for: None.
    """
    match = _ORIGIN.fullmatch(value)
    if match is None or not _valid_host(match["host"]):
        return None
    scheme = match["scheme"]
    port = int(match["port"]) if match["port"] is not None else _DEFAULT_PORTS[scheme]
    if not 0 < port <= 65535:
        return None
    return scheme, match["host"].lower().rstrip("."), port


def _valid_host(host: str) -> bool:
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return False
    return True


def read_allowed_origins(environ: Mapping[str, str]) -> frozenset[tuple[str, str, int]]:
    """The origins in ``MAPSMITH_HTTP_ALLOWED_ORIGINS`` (comma separated, ``https://app.example:8443``)."""
    raw = environ.get(ALLOWED_ORIGINS_ENV, "")
    allowed = set()
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        parsed = parse_origin(item)
        if parsed is None:
            raise HTTPTransportError(
                f"{ALLOWED_ORIGINS_ENV} holds {item!r}, which is not an origin (scheme://host[:port], nothing more)",
                code="HTTP_ORIGIN_SETTING_INVALID",
                evidence={"variable": ALLOWED_ORIGINS_ENV, "value": item},
                hint="list origins exactly as browsers send them, e.g. https://app.example.com or "
                "http://localhost:6274, separated by commas; no paths, no wildcards",
            )
        allowed.add(parsed)
    return frozenset(allowed)


def _loopback_hosts(binding: Binding) -> frozenset[str]:
    names = {name.lower() for name in _LOOPBACK_NAMES}
    own = f"[{binding.sockaddr[0]}]" if binding.family == socket.AF_INET6 else str(binding.sockaddr[0])
    names.add(own.lower())
    return frozenset(names)


class OriginHostGate:
    """ASGI middleware: the ``Host`` and ``Origin`` headers, parsed exactly, on every address.

    ``Host`` must be host[:port] (421 otherwise) and, on a loopback address, a loopback name (a web
    page whose name was re-pointed at 127.0.0.1 sends its own name). ``Origin``, when present (a
    browser), must be a loopback page on a loopback address or one of the allowed origins, else 403
    whatever the token: the MCP specification requires servers to validate it. No ``Origin`` means
    a non-browser client, which the token alone admits.
    """

    def __init__(self, app: Any, binding: Binding, allowed_origins: frozenset[tuple[str, str, int]]) -> None:
        self.app = app
        self.loopback = binding.loopback
        self.loopback_hosts = _loopback_hosts(binding)
        self.allowed_origins = allowed_origins

    def check(self, headers: list[tuple[bytes, bytes]]) -> tuple[int, str] | None:
        hosts = [value for name, value in headers if name.lower() == b"host"]
        origins = [value for name, value in headers if name.lower() == b"origin"]
        if len(hosts) != 1:
            return 421, "exactly one Host header is required"
        host = parse_host(hosts[0].decode("latin-1"))
        if host is None:
            return 421, "the Host header is not host[:port]"
        if self.loopback and host[0] not in self.loopback_hosts:
            return 421, "this server answers loopback names only"
        if len(origins) > 1:
            return 403, "more than one Origin header"
        if origins:
            origin = parse_origin(origins[0].decode("latin-1"))
            if origin is None:
                return 403, "the Origin header is not an allowed origin"
            if origin in self.allowed_origins:
                return None
            if self.loopback and origin[1] in self.loopback_hosts:
                return None
            return 403, f"Origin not allowed; list it in {ALLOWED_ORIGINS_ENV} to allow it"
        return None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self.check(list(scope.get("headers") or []))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, reason = refusal
        client = scope.get("client") or ("?", 0)
        print(f"mapsmith: refused an HTTP request from {client[0]}: {reason}", file=sys.stderr, flush=True)
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "forbidden" if status == 403 else "misdirected_request", "reason": reason}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def take_token(environ: MutableMapping[str, str] | None = None) -> bytes | None:
    """Read ``MAPSMITH_HTTP_TOKEN`` (``read_token``'s checks) and remove it from this process everywhere.

    The variable is removed from ``os.environ`` (and with it from libc's ``environ``, so no child
    inherits it), and its bytes in the environment block the kernel keeps at the top of the stack,
    which ``/proc/<pid>/environ`` shows to this user's other processes and which ``unsetenv`` does
    not touch, are overwritten with zeros (``scrub_initial_environment``). Removed before the value
    is checked: a refused token leaves no trace either.
    """
    env = os.environ if environ is None else environ
    raw = env.pop(TOKEN_ENV, None)
    if env is not os.environ:
        os.environ.pop(TOKEN_ENV, None)
    scrub_initial_environment(TOKEN_ENV)
    return read_token({} if raw is None else {TOKEN_ENV: raw})


def scrub_initial_environment(name: str) -> int:
    """Overwrite ``name=value`` in the process's initial environment block with zeros; return how many.

    Zeroing in place rather than re-executing without the variable: a re-exec would have to pass the
    token through some other channel, repeat the interpreter's start-up, and give a supervisor watching
    the process a second program image; the block is ordinary writable memory of this process, and the
    kernel reads ``/proc/<pid>/environ`` from it (``env_start``..``env_end`` in ``/proc/self/stat``).
    Call it after the variable left ``os.environ``, so libc's ``environ`` no longer points into it.
    Linux only; elsewhere (no ``/proc``) it does nothing and returns 0.
    """
    try:
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return 0
    fields = stat[stat.rindex(b")") + 2 :].split()
    # fields[0] is field 3 (state) of proc(5); env_start and env_end are fields 50 and 51.
    if len(fields) < 49:
        return 0
    start, end = int(fields[47]), int(fields[48])
    if not 0 < start < end:
        return 0
    block = ctypes.string_at(start, end - start)
    prefix = name.encode() + b"="
    zeroed = 0
    offset = 0
    for entry in block.split(b"\0"):
        if entry.startswith(prefix):
            ctypes.memset(start + offset, 0, len(entry))
            zeroed += 1
        offset += len(entry) + 1
    return zeroed


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


def build_http_app(server: Any, binding: Binding, token: bytes | None, environ: Mapping[str, str] | None = None) -> Any:
    """The ASGI app: the SDK's streamable HTTP app at ``/mcp``, behind the token gate when there is a token,
    behind the Host/Origin gate always (outermost: a cross-origin page is refused before the token is read)."""
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, transport_security=security_settings(binding))
    gated = BearerTokenGate(app, token) if token is not None else app
    allowed = read_allowed_origins(os.environ if environ is None else environ)
    return OriginHostGate(gated, binding, allowed)


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
    # Whatever the caller did with the variable, its bytes leave /proc/<pid>/environ before serving.
    os.environ.pop(TOKEN_ENV, None)
    scrub_initial_environment(TOKEN_ENV)
    read_allowed_origins(os.environ)  # a malformed list refuses the start before anything is bound
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
