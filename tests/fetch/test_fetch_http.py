"""The fetch policy and downloader against a real HTTP server on loopback: what is fetched, what is
refused (with its code), and that a refused or broken download leaves nothing behind.

The server is Python's own ``http.server`` on a real socket; nothing is patched. Expected digests are
computed here from the bytes the server serves.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mapsmith.errors import ConfigurationError
from mapsmith.fetch.http import MAX_REDIRECTS, download
from mapsmith.fetch.policy import FetchPolicy, FetchRefused

BODY = b"SQLite format 3\x00" + bytes(range(256)) * 40  # 10,256 bytes that start like a GeoPackage
BIG = 5000


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if "Content-Length" not in (headers or {}) and "Transfer-Encoding" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        port = self.server.server_address[1]
        routes = {
            "/data.gpkg": lambda: self._send(
                200, BODY, {"ETag": '"v1"', "Last-Modified": "Tue, 01 Dec 2026 10:00:00 GMT"}
            ),
            "/bucket/key/data.gpkg": lambda: self._send(200, BODY, {"ETag": '"s3"'}),
            "/hop": lambda: self._send(302, headers={"Location": "/data.gpkg"}),
            "/to-private": lambda: self._send(302, headers={"Location": "http://10.255.255.1/x"}),
            "/to-metadata": lambda: self._send(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"}),
            "/to-localhost": lambda: self._send(302, headers={"Location": f"http://localhost:{port}/data.gpkg"}),
            "/loop": lambda: self._send(302, headers={"Location": "/loop"}),
            "/declared-big": lambda: self._send(200, b"x" * 10, {"Content-Length": str(10 * BIG)}),
            "/missing": lambda: self._send(404, b"not here"),
        }
        if self.path in routes:
            routes[self.path]()
        elif self.path == "/streamed-big":  # no Content-Length: the limit is met while reading
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            for _ in range(10):
                self.wfile.write(b"y" * 1000)
        elif self.path == "/short":  # promises 1,000 bytes, sends 10, closes
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"z" * 10)
        elif self.path == "/slow":  # a byte every 0.2 s
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b"s")
                self.wfile.flush()
                time.sleep(0.2)
        else:
            self._send(404)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that stops reading (the size and time limits do) resets the connection: expected


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


def policy(allow: str, **env: str) -> FetchPolicy:
    return FetchPolicy.from_environ({"MAPSMITH_FETCH_ALLOW": allow, **env})


def refused(code: str, pol: FetchPolicy, url: str, target: Path) -> FetchRefused:
    with pytest.raises(FetchRefused) as err:
        download(pol, url, target)
    assert err.value.code == code, (err.value.code, err.value.message)
    assert err.value.hint
    assert not target.exists()  # nothing partial is left
    return err.value


def test_a_listed_address_is_fetched_with_its_record(server: str, tmp_path: Path) -> None:
    target = tmp_path / "data.gpkg"
    record = download(policy("127.0.0.1"), f"{server}/hop", target)
    assert target.read_bytes() == BODY
    assert record.sha256 == hashlib.sha256(BODY).hexdigest() and record.bytes == len(BODY) == 10_256
    assert record.final_url == f"{server}/data.gpkg" and record.redirects == [f"{server}/data.gpkg"]
    assert (record.status, record.address, record.etag) == (200, "127.0.0.1", '"v1"')
    assert record.last_modified == "Tue, 01 Dec 2026 10:00:00 GMT"
    assert record.retrieved_at.endswith("Z")


def test_fetching_is_off_until_the_operator_lists_a_host(server: str, tmp_path: Path) -> None:
    err = refused("FETCH_DISABLED", FetchPolicy.from_environ({}), f"{server}/data.gpkg", tmp_path / "a.gpkg")
    assert "MAPSMITH_FETCH_ALLOW" in (err.hint or "")


def test_a_host_not_listed_is_refused_and_named(server: str, tmp_path: Path) -> None:
    err = refused("FETCH_HOST_NOT_ALLOWED", policy("data.example.org"), f"{server}/data.gpkg", tmp_path / "a.gpkg")
    assert err.evidence["host"] == "127.0.0.1"


def test_a_name_that_resolves_to_loopback_is_refused_unless_the_address_is_listed(server: str, tmp_path: Path) -> None:
    url = server.replace("127.0.0.1", "localhost") + "/data.gpkg"
    err = refused("FETCH_ADDRESS_NOT_ALLOWED", policy("localhost"), url, tmp_path / "a.gpkg")
    assert "127.0.0.1" in err.evidence["blocked"] or "::1" in err.evidence["blocked"]
    # the clean twin: the operator lists the loopback addresses themselves
    record = download(policy("localhost, 127.0.0.1, ::1"), url, tmp_path / "b.gpkg")
    assert record.sha256 == hashlib.sha256(BODY).hexdigest()


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/to-private", "FETCH_HOST_NOT_ALLOWED"),  # 10.255.255.1 is not listed
        ("/to-metadata", "FETCH_HOST_NOT_ALLOWED"),
        ("/to-localhost", "FETCH_HOST_NOT_ALLOWED"),
    ],
)
def test_every_redirect_is_checked_again(server: str, tmp_path: Path, path: str, code: str) -> None:
    refused(code, policy("127.0.0.1"), f"{server}{path}", tmp_path / "a.gpkg")


def test_link_local_and_private_literals_need_listing(tmp_path: Path) -> None:
    pol = policy("*.example.org")
    for url in (
        "http://169.254.169.254/latest/",
        "http://10.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://[fd00::1]/",
    ):
        with pytest.raises(FetchRefused) as err:
            pol.check(url)
        assert err.value.code == "FETCH_HOST_NOT_ALLOWED", url
    # listing the network admits exactly it
    assert policy("10.0.0.0/8").check("http://10.1.2.3:8080/a?b=1").address == "10.1.2.3"
    with pytest.raises(FetchRefused) as other:
        policy("10.0.0.0/8").check("http://192.168.0.1/")
    assert other.value.code == "FETCH_HOST_NOT_ALLOWED"


def test_url_prefixes_and_subdomains(tmp_path: Path) -> None:
    pol = policy("https://data.example.org/open/, *.tiles.example.net")
    # resolve=False: these names do not exist here; only the list is being tested
    assert pol.check("https://data.example.org/open/a.gpkg", resolve=False).host == "data.example.org"
    assert pol.check("https://a.b.tiles.example.net/x", resolve=False).port == 443
    for url in (
        "https://data.example.org/private/a.gpkg",
        "http://data.example.org/open/a.gpkg",
        "https://tiles.example.net.evil.org/",
    ):
        with pytest.raises(FetchRefused) as err:
            pol.check(url, resolve=False)
        assert err.value.code == "FETCH_HOST_NOT_ALLOWED", url
    with pytest.raises(FetchRefused) as creds:
        pol.check("https://user:secret@data.example.org/open/a.gpkg", resolve=False)
    assert creds.value.code == "FETCH_URL_INVALID" and "secret" not in str(creds.value.evidence)
    with pytest.raises(FetchRefused) as scheme:
        pol.check("file:///etc/passwd", resolve=False)
    assert scheme.value.code == "FETCH_SCHEME_UNSUPPORTED"


def test_size_limits_from_the_header_and_while_streaming(server: str, tmp_path: Path) -> None:
    pol = policy("127.0.0.1", MAPSMITH_FETCH_MAX_BYTES=str(BIG))
    err = refused("FETCH_TOO_LARGE", pol, f"{server}/declared-big", tmp_path / "a.bin")
    assert err.evidence["bytes"] == 10 * BIG and err.evidence["limit"] == BIG
    err = refused("FETCH_TOO_LARGE", pol, f"{server}/streamed-big", tmp_path / "b.bin")
    assert err.evidence["bytes"] > BIG
    # the clean twin: a body under the limit
    assert (
        download(policy("127.0.0.1", MAPSMITH_FETCH_MAX_BYTES="20000"), f"{server}/data.gpkg", tmp_path / "c").bytes
        == 10_256
    )


def test_short_slow_missing_and_looping_bodies(server: str, tmp_path: Path) -> None:
    refused("FETCH_INCOMPLETE", policy("127.0.0.1"), f"{server}/short", tmp_path / "a")
    err = refused("FETCH_TIMEOUT", policy("127.0.0.1", MAPSMITH_FETCH_TIMEOUT_S="1"), f"{server}/slow", tmp_path / "b")
    assert 0 < err.evidence["bytes_received"] < 100
    err = refused("FETCH_HTTP_STATUS", policy("127.0.0.1"), f"{server}/missing", tmp_path / "c")
    assert err.evidence["status"] == 404
    err = refused("FETCH_TOO_MANY_REDIRECTS", policy("127.0.0.1"), f"{server}/loop", tmp_path / "d")
    assert len(err.evidence["redirects"]) == MAX_REDIRECTS


def test_s3_urls_are_read_path_style_from_the_configured_endpoint(server: str, tmp_path: Path) -> None:
    pol = policy("127.0.0.1", MAPSMITH_S3_ENDPOINT=server)
    record = download(pol, "s3://bucket/key/data.gpkg", tmp_path / "s3.gpkg")
    assert (record.url, record.fetched_url) == ("s3://bucket/key/data.gpkg", f"{server}/bucket/key/data.gpkg")
    assert record.etag == '"s3"' and record.sha256 == hashlib.sha256(BODY).hexdigest()
    assert policy("x.org").https_form("gs://pub/a/b.tif") == "https://storage.googleapis.com/pub/a/b.tif"


def test_a_bad_allow_list_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as err:
        FetchPolicy.from_environ({"MAPSMITH_FETCH_ALLOW": "exa mple.org"})
    assert err.value.code == "FETCH_ALLOW_INVALID" and err.value.evidence["entry"] == "exa mple.org"
