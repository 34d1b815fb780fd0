"""One HTTP(S) download under the fetch policy: every hop checked, the checked address connected to,
the body streamed to a temporary file within the size and time limits, and a record of what came back.

``download`` follows at most ``MAX_REDIRECTS`` redirects, checking each ``Location`` with the policy
again (a redirect to a private address, to a host not listed, or from https down to http is refused).
It connects to the address ``FetchPolicy.check`` returned, sending the host's name in ``Host`` and, for
https, in SNI and certificate verification (the system's trust store through ``ssl.create_default_context``).
The body goes to ``target`` in chunks, hashed as it is written; a body longer than the limit, a
``Content-Length`` over it, a body shorter than its ``Content-Length``, or a download past the time limit
deletes the partial file and raises: a partial download never becomes a dataset.

Written on the standard library's ``http.client`` because the address must be the one that was checked:
urllib3, requests and httpx resolve the host again when they connect, which a DNS answer that changes
between check and connection (rebinding) would exploit. No cookie, credential, netrc or proxy setting
is used; ``Accept-Encoding: identity`` keeps the bytes digested the bytes served.
"""

from __future__ import annotations

import hashlib
import http.client
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from mapsmith.fetch.policy import FetchPolicy, FetchRefused, Target

MAX_REDIRECTS = 5
CHUNK_BYTES = 1 << 20
CONNECT_TIMEOUT_S = 30.0
REDIRECT_STATUSES = (301, 302, 303, 307, 308)


@dataclass
class FetchRecord:
    """What a download brought back, as recorded in the manifest."""

    url: str  # as asked (s3:// and gs:// as given)
    fetched_url: str  # its http(s) form
    final_url: str  # after redirects
    redirects: list[str] = field(default_factory=list)
    status: int = 0
    address: str = ""  # the address connected to for final_url
    etag: str | None = None
    last_modified: str | None = None
    content_type: str | None = None
    bytes: int = 0
    sha256: str = ""
    retrieved_at: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """An HTTPS connection to a fixed address, verifying the certificate for the host's name."""

    def __init__(self, address: str, host: str, port: int, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address
        self._context = context

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, address: str, host: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


def _connection(target: Target, timeout: float) -> http.client.HTTPConnection:
    if target.scheme == "https":
        return _PinnedHTTPS(target.address, target.host, target.port, timeout, ssl.create_default_context())
    return _PinnedHTTP(target.address, target.host, target.port, timeout)


def download(
    policy: FetchPolicy,
    url: str,
    target: Path,
    progress: Callable[[float, str], None] | None = None,
    *,
    user_agent: str = "MapSmith",
) -> FetchRecord:
    """Fetch ``url`` into ``target`` (created or replaced); the record of the download."""
    started = time.monotonic()
    deadline = started + policy.timeout_s
    fetched = policy.https_form(url)
    record = FetchRecord(url=url, fetched_url=fetched, final_url=fetched)
    current = policy.check(fetched)
    try:
        for hop in range(MAX_REDIRECTS + 1):
            conn = _connection(current, min(CONNECT_TIMEOUT_S, _left(deadline, record)))
            try:
                response = _request(conn, current, user_agent, record)
                if response.status in REDIRECT_STATUSES:
                    location = response.getheader("Location")
                    response.close()
                    current = _follow(policy, current, location, record, hop)
                    continue
                if response.status != 200:
                    raise FetchRefused(
                        f"{current.url} answered HTTP {response.status} {response.reason}",
                        code="FETCH_HTTP_STATUS",
                        evidence={"url": current.url, "status": response.status, "reason": response.reason},
                        hint="check the URL; only a 200 response becomes a dataset",
                    )
                record.final_url, record.status, record.address = current.url, response.status, current.address
                record.etag = response.getheader("ETag")
                record.last_modified = response.getheader("Last-Modified")
                record.content_type = response.getheader("Content-Type")
                _body(policy, response, target, record, deadline, progress)
                record.retrieved_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
                record.seconds = round(time.monotonic() - started, 3)
                return record
            finally:
                conn.close()
        raise AssertionError("unreachable: _follow raises past MAX_REDIRECTS")
    except BaseException:
        target.unlink(missing_ok=True)  # a partial download never becomes a dataset
        raise


def _left(deadline: float, record: FetchRecord) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchRefused(
            f"the download of {record.fetched_url} passed its time limit",
            code="FETCH_TIMEOUT",
            evidence={"url": record.fetched_url, "bytes_received": record.bytes},
            hint="try again, or ask the operator to raise MAPSMITH_FETCH_TIMEOUT_S; nothing was kept",
        )
    return left


def _request(
    conn: http.client.HTTPConnection, target: Target, user_agent: str, record: FetchRecord
) -> http.client.HTTPResponse:
    headers = {"User-Agent": user_agent, "Accept-Encoding": "identity", "Accept": "*/*", "Connection": "close"}
    try:
        conn.request("GET", target.request_path, headers=headers)
        return conn.getresponse()
    except TimeoutError as exc:
        raise FetchRefused(
            f"{target.url} did not answer in time",
            code="FETCH_TIMEOUT",
            evidence={"url": target.url},
            hint="try again later; nothing was kept",
        ) from exc
    except (OSError, http.client.HTTPException) as exc:
        raise FetchRefused(
            f"{target.url} could not be reached: {exc}",
            code="FETCH_CONNECTION_FAILED",
            evidence={"url": target.url, "address": target.address, "error": str(exc)[:300]},
            hint="check the URL; a firewall must let this server reach the host (README, 'Network')",
        ) from exc


def _follow(policy: FetchPolicy, current: Target, location: str | None, record: FetchRecord, hop: int) -> Target:
    if not location:
        raise FetchRefused(
            f"{current.url} redirected without a Location",
            code="FETCH_HTTP_STATUS",
            evidence={"url": current.url},
            hint="the server's answer is broken; try the final URL directly",
        )
    if hop >= MAX_REDIRECTS:
        raise FetchRefused(
            f"{record.fetched_url} redirected more than {MAX_REDIRECTS} times",
            code="FETCH_TOO_MANY_REDIRECTS",
            evidence={"url": record.fetched_url, "redirects": record.redirects},
            hint="pass the final URL directly",
        )
    following = urljoin(current.url, location)
    record.redirects.append(following)
    nxt = policy.check(following)  # every hop is checked again: host, then each resolved address
    if current.scheme == "https" and nxt.scheme != "https":
        raise FetchRefused(
            f"{current.url} redirected from https to {following}",
            code="FETCH_REDIRECT_REFUSED",
            evidence={"url": current.url, "location": following},
            hint="a redirect may not drop TLS; pass an https URL that does not",
        )
    return nxt


def _body(
    policy: FetchPolicy,
    response: http.client.HTTPResponse,
    target: Path,
    record: FetchRecord,
    deadline: float,
    progress: Callable[[float, str], None] | None,
) -> None:
    declared = response.getheader("Content-Length")
    length = int(declared) if declared and declared.isdigit() else None
    if length is not None and length > policy.max_bytes:
        raise _too_large(record, length, policy.max_bytes)
    sha = hashlib.sha256()
    received = 0
    with target.open("wb") as out:
        while True:
            try:
                # read1: what one receive brings, so a body that trickles is timed against the deadline
                # after every receive, not only after a whole chunk; each receive waits at most the
                # socket's timeout (CONNECT_TIMEOUT_S).
                chunk = response.read1(CHUNK_BYTES)
            except TimeoutError as exc:
                record.bytes = received
                _left(deadline, record)
                raise FetchRefused(
                    f"{record.final_url} stopped sending",
                    code="FETCH_TIMEOUT",
                    evidence={"url": record.final_url, "bytes_received": received},
                    hint="try again later; nothing was kept",
                ) from exc
            except http.client.IncompleteRead as exc:
                raise _incomplete(record, received + len(exc.partial), length) from exc
            if not chunk:
                break
            received += len(chunk)
            record.bytes = received
            if received > policy.max_bytes:
                raise _too_large(record, received, policy.max_bytes)
            sha.update(chunk)
            out.write(chunk)
            _left(deadline, record)
            if progress is not None and length:
                progress(min(received / length, 1.0), f"{received:,} of {length:,} bytes")
    if length is not None and received != length:
        raise _incomplete(record, received, length)
    record.sha256 = sha.hexdigest()


def _too_large(record: FetchRecord, size: int, limit: int) -> FetchRefused:
    return FetchRefused(
        f"{record.final_url} is larger than this server fetches ({size:,} bytes or more; the limit is {limit:,})",
        code="FETCH_TOO_LARGE",
        evidence={"url": record.final_url, "bytes": size, "limit": limit},
        hint="fetch a smaller extract (a bbox, a subset), or ask the operator to raise MAPSMITH_FETCH_MAX_BYTES",
    )


def _incomplete(record: FetchRecord, received: int, length: int | None) -> FetchRefused:
    return FetchRefused(
        f"{record.final_url} ended after {received:,} of {length:,} bytes"
        if length
        else f"{record.final_url} ended early",
        code="FETCH_INCOMPLETE",
        evidence={"url": record.final_url, "bytes_received": received, "content_length": length},
        hint="try again; a partial download is never kept",
    )
