"""Which URLs MapSmith may fetch: the operator's allow-list, the addresses a host may resolve to, the limits.

Fetching is off until an operator sets ``MAPSMITH_FETCH_ALLOW``: a comma-separated list of

- host names (``data.example.org``), or every subdomain of one (``*.example.org``);
- URL prefixes (``https://data.example.org/open/``): scheme, host, port and the path's beginning must match;
- IP addresses or networks (``127.0.0.1``, ``10.1.0.0/16``, ``[::1]``).

A URL passes when its host (or the URL, for a prefix) is listed. Then every address the host resolves to
is checked: an address that is not global (loopback, private, link-local — the cloud metadata service at
169.254.169.254 among them — carrier-grade NAT, unique-local, multicast, reserved, unspecified) is
refused unless an IP entry covers it. So ``localhost``, or a public-looking name whose DNS answers
127.0.0.1, is refused while only its name is listed: reaching a private address takes listing that
address. The caller connects to the address checked here (``Target.address``), never to a second
resolution of the name, so a DNS answer cannot change between the check and the connection.

``s3://bucket/key`` and ``gs://bucket/key`` are public object storage read anonymously through their
HTTPS forms (``MAPSMITH_S3_ENDPOINT`` names an S3-compatible endpoint, path-style; the default is AWS's);
the HTTPS URL is what the allow-list sees. No credentials are read from the environment, netrc or a
proxy setting for any request: none is sent.

Limits: ``MAPSMITH_FETCH_MAX_BYTES`` (default 1 GiB) and ``MAPSMITH_FETCH_TIMEOUT_S`` (the whole
download, default 300 s). Written by hand because no well-kept library checks the resolved address
against an operator's list and hands back the address to connect to (urllib3 and httpx resolve again
when they connect); Python's ``ipaddress`` decides what is global. This module never opens a connection.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from mapsmith.errors import ArgumentError, ConfigurationError, MapSmithError
from mapsmith.limits import _positive

ALLOW_ENV = "MAPSMITH_FETCH_ALLOW"
MAX_BYTES_ENV = "MAPSMITH_FETCH_MAX_BYTES"
TIMEOUT_ENV = "MAPSMITH_FETCH_TIMEOUT_S"
S3_ENDPOINT_ENV = "MAPSMITH_S3_ENDPOINT"
DEFAULT_MAX_BYTES = 1024**3
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_S3_ENDPOINT = "https://s3.amazonaws.com"
GCS_ENDPOINT = "https://storage.googleapis.com"
SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class FetchRefused(MapSmithError, ValueError):
    """A URL, a redirect or a response the fetch policy does not accept."""

    code = "FETCH_REFUSED"


@dataclass(frozen=True)
class Target:
    """A URL that passed the policy, and the address to connect to for it."""

    url: str
    scheme: str
    host: str
    port: int
    address: str
    request_path: str  # path and query, as sent in the request line


@dataclass(frozen=True)
class FetchPolicy:
    hosts: tuple[str, ...] = ()  # exact names, lower case
    domains: tuple[str, ...] = ()  # "*.example.org" as "example.org": its subdomains
    prefixes: tuple[str, ...] = ()  # normalised URL prefixes
    networks: tuple[IPNetwork, ...] = ()
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S
    s3_endpoint: str = DEFAULT_S3_ENDPOINT
    entries: tuple[str, ...] = field(default=(), compare=False)

    @property
    def enabled(self) -> bool:
        return bool(self.entries)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> FetchPolicy:
        raw = environ.get(ALLOW_ENV, "")
        entries = tuple(e.strip() for e in raw.replace("\n", ",").split(",") if e.strip())
        hosts: list[str] = []
        domains: list[str] = []
        prefixes: list[str] = []
        networks: list[IPNetwork] = []
        for entry in entries:
            if "://" in entry:
                prefixes.append(_normalise_prefix(entry))
                continue
            if entry.startswith("*."):
                domains.append(entry[2:].lower().rstrip("."))
                continue
            network = _network(entry)
            if network is not None:
                networks.append(network)
            elif _is_host_name(entry):
                hosts.append(entry.lower().rstrip("."))
            else:
                raise ConfigurationError(
                    f"{ALLOW_ENV} entry {entry!r} is not a host name, *.domain, URL prefix or IP address/network",
                    code="FETCH_ALLOW_INVALID",
                    evidence={"variable": ALLOW_ENV, "entry": entry},
                    hint=f"list entries like data.example.org, *.example.org, https://host/path/ or 10.0.0.5 "
                    f"in {ALLOW_ENV}",
                )
        endpoint = environ.get(S3_ENDPOINT_ENV, "").strip() or DEFAULT_S3_ENDPOINT
        if urlsplit(endpoint).scheme not in SCHEMES:
            raise ConfigurationError(
                f"{S3_ENDPOINT_ENV}={endpoint!r} is not an http(s) URL",
                code="FETCH_ALLOW_INVALID",
                evidence={"variable": S3_ENDPOINT_ENV, "value": endpoint},
                hint=f"set {S3_ENDPOINT_ENV} to the endpoint's URL, e.g. http://127.0.0.1:9000, or unset it",
            )
        return cls(
            hosts=tuple(hosts),
            domains=tuple(domains),
            prefixes=tuple(prefixes),
            networks=tuple(networks),
            max_bytes=int(_positive(environ, MAX_BYTES_ENV, DEFAULT_MAX_BYTES, "bytes")),
            timeout_s=_positive(environ, TIMEOUT_ENV, DEFAULT_TIMEOUT_S, "seconds"),
            s3_endpoint=endpoint.rstrip("/"),
            entries=entries,
        )

    # -- URLs ------------------------------------------------------------------------------------

    def https_form(self, url: str) -> str:
        """``s3://`` and ``gs://`` as the HTTPS (or endpoint) URL that is fetched; other URLs unchanged."""
        parts = urlsplit(url)
        if parts.scheme in ("s3", "gs"):
            if not parts.netloc or not parts.path.strip("/"):
                raise FetchRefused(
                    f"{url} names no bucket and key",
                    code="FETCH_URL_INVALID",
                    evidence={"url": url},
                    hint=f"write it as {parts.scheme}://bucket/path/to/object",
                )
            base = self.s3_endpoint if parts.scheme == "s3" else GCS_ENDPOINT
            return f"{base}/{parts.netloc}{parts.path}"
        return url

    def check(self, url: str, *, resolve: bool = True) -> Target:
        """The target for ``url`` when the policy allows it; FetchRefused (with the reason) otherwise."""
        if not self.enabled:
            raise FetchRefused(
                "fetching is off on this server: no host is allowed",
                code="FETCH_DISABLED",
                evidence={"url": url, "variable": ALLOW_ENV},
                hint=f"no MapSmith tool can turn this on: ask the user to have the server's operator list the "
                f"host in {ALLOW_ENV} (SECURITY.md, 'Fetching'), or to put the file in the workspace",
            )
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES:
            raise FetchRefused(
                f"{url}: only http, https, s3 and gs URLs are fetched",
                code="FETCH_SCHEME_UNSUPPORTED",
                evidence={"url": url, "scheme": parts.scheme},
                hint="pass an https:// (or s3:// / gs://) URL",
            )
        if parts.username or parts.password:
            raise FetchRefused(
                "a URL with credentials in it is refused: they would be sent and recorded",
                code="FETCH_URL_INVALID",
                evidence={"url": _without_credentials(url)},
                hint="pass the URL without user:password@; MapSmith fetches public data anonymously",
            )
        host = (parts.hostname or "").lower().rstrip(".")
        if not host:
            raise FetchRefused(
                f"{url} has no host",
                code="FETCH_URL_INVALID",
                evidence={"url": url},
                hint="pass a full URL",
            )
        try:
            port = parts.port or DEFAULT_PORTS[parts.scheme]
        except ValueError as exc:
            raise FetchRefused(
                f"{url}: {exc}",
                code="FETCH_URL_INVALID",
                evidence={"url": url},
                hint="pass a valid port",
            ) from exc
        normal = urlunsplit((parts.scheme, _netloc(host, port, parts.scheme), parts.path or "/", parts.query, ""))
        if not self._listed(host, normal):
            raise FetchRefused(
                f"{host} is not a host this server may fetch from",
                code="FETCH_HOST_NOT_ALLOWED",
                evidence={"url": normal, "host": host, "allowed": list(self.entries)},
                hint=f"fetch from a listed host; the operator adds hosts to {ALLOW_ENV}",
            )
        address = self._address(host, port, normal) if resolve else host
        request_path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return Target(normal, parts.scheme, host, port, address, request_path)

    def _listed(self, host: str, url: str) -> bool:
        if host in self.hosts or any(host == d or host.endswith("." + d) for d in self.domains):
            return True
        if any(url.startswith(p) for p in self.prefixes):
            return True
        literal = _literal(host)
        return literal is not None and any(literal in n for n in self.networks)

    def _address(self, host: str, port: int, url: str) -> str:
        """The first resolved address, once every address the host resolves to is allowed."""
        literal = _literal(host)
        if literal is not None:
            addresses: list[IPAddress] = [literal]
        else:
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                raise FetchRefused(
                    f"{host} does not resolve: {exc}",
                    code="FETCH_DNS_FAILED",
                    evidence={"url": url, "host": host},
                    hint="check the host name; a firewall must let this server resolve and reach it",
                ) from exc
            addresses = []
            for info in infos:
                found = _literal(str(info[4][0]))
                if found is not None and found not in addresses:
                    addresses.append(found)
        blocked = [str(a) for a in addresses if not _public(a) and not any(a in n for n in self.networks)]
        if blocked or not addresses:
            raise FetchRefused(
                f"{host} resolves to {', '.join(blocked) or 'nothing'}, an address this server does not fetch from "
                "(loopback, private, link-local or otherwise not public)",
                code="FETCH_ADDRESS_NOT_ALLOWED",
                evidence={"url": url, "host": host, "addresses": [str(a) for a in addresses], "blocked": blocked},
                hint="a private address is fetched only when the operator lists it (the address, not the name) in "
                f"{ALLOW_ENV}",
            )
        return str(addresses[0])


def _literal(host: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return address


def _public(address: IPAddress) -> bool:
    return address.is_global and not address.is_multicast


def _network(entry: str) -> IPNetwork | None:
    try:
        return ipaddress.ip_network(entry.strip("[]"), strict=False)
    except ValueError:
        return None


def _is_host_name(entry: str) -> bool:
    labels = entry.rstrip(".").split(".")
    return all(label and len(label) <= 63 and all(c.isalnum() or c == "-" for c in label) for label in labels)


def _netloc(host: str, port: int, scheme: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if DEFAULT_PORTS.get(scheme) == port else f"{shown}:{port}"


def _normalise_prefix(entry: str) -> str:
    parts = urlsplit(entry)
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise ConfigurationError(
            f"{ALLOW_ENV} entry {entry!r} is not an http(s) URL prefix",
            code="FETCH_ALLOW_INVALID",
            evidence={"variable": ALLOW_ENV, "entry": entry},
            hint="write a prefix as https://host/path/",
        )
    host = parts.hostname.lower().rstrip(".")
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    return urlunsplit((parts.scheme, _netloc(host, port, parts.scheme), parts.path or "/", "", ""))


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def url_argument(value: object, argument: str = "url") -> str:
    if not isinstance(value, str) or not value.strip():
        raise ArgumentError(
            f"{argument} must be a URL",
            code="INVALID_ARGUMENT",
            evidence={"argument": argument},
            hint="pass an https:// URL",
        )
    return value.strip()
