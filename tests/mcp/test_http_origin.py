"""The HTTP gate as a browser and an attacker meet it: Origin and Host on every address, the token gone
from the process's environment block.

Two real ``mapsmith serve --http`` processes, one on 0.0.0.0 (with MAPSMITH_HTTP_ALLOWED_ORIGINS) and one
on 127.0.0.1, each with a token. Every refusal is sent WITH the right token: the token must not switch the
Origin check off. Each refusal has its clean twin, the same request with the defect removed, answered 200.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from mcp_client import stop_server

pytestmark = pytest.mark.mcp

ALLOWED_ORIGIN = "https://app.example.com"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    token: str
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def post(self, *, origin: str | None = None, host: str | None = None, token: str | None = None) -> int:
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "authorization": f"Bearer {self.token if token is None else token}",
        }
        if origin is not None:
            headers["origin"] = origin
        if host is not None:
            headers["host"] = host
        return httpx2.post(self.url, json=INITIALIZE, headers=headers, timeout=30).status_code


def _start(tmp: Path, host: str, extra_env: dict[str, str]) -> Server:
    workspace = tmp / "ws"
    workspace.mkdir()
    token = secrets.token_urlsafe(32)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    env.update({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_HTTP_TOKEN": token, **extra_env})
    port = _free_port()
    log = tmp / "server.stderr"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mapsmith", "serve", "--http", "--host", host, "--port", str(port)],
            env=env,
            cwd=workspace,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}: {log.read_text()}")
        try:
            httpx2.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            return Server(proc, port, token, log)
        except httpx2.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the server did not answer within 60 s: {log.read_text()}")


def _stop(server: Server) -> None:
    stop_server(server.proc)


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = _start(tmp_path_factory.mktemp("any"), "0.0.0.0", {"MAPSMITH_HTTP_ALLOWED_ORIGINS": ALLOWED_ORIGIN})
    try:
        yield server
    finally:
        _stop(server)


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = _start(tmp_path_factory.mktemp("lo"), "127.0.0.1", {})
    try:
        yield server
    finally:
        _stop(server)


# -- the token is gone from /proc/<pid>/environ -----------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/environ is Linux's")
@pytest.mark.parametrize("which", ["exposed", "loopback"])
def test_the_token_is_not_in_the_servers_environment_block(which: str, request: pytest.FixtureRequest) -> None:
    server: Server = request.getfixturevalue(which)
    block = Path(f"/proc/{server.proc.pid}/environ").read_bytes()
    assert server.token.encode() not in block
    assert b"MAPSMITH_HTTP_TOKEN=" not in block
    assert b"MAPSMITH_WORKSPACE=" in block  # the clean twin: the block is read, other variables are there
    assert server.post() == 200  # and the server still knows its token


# -- Origin, on every address, whatever the token ------------------------------------------------


def test_an_evil_origin_is_refused_on_0_0_0_0_even_with_the_right_token(exposed: Server) -> None:
    assert exposed.post(origin="http://evil.example") == 403


def test_an_evil_origin_is_refused_on_127_0_0_1_even_with_the_right_token(loopback: Server) -> None:
    assert loopback.post(origin="http://evil.example") == 403


@pytest.mark.parametrize(
    "origin",
    ["null", "http://localhost:80@evil.example", "https://app.example.com.evil.example", "https://app.example.com/x"],
)
def test_malformed_and_lookalike_origins_are_refused(exposed: Server, loopback: Server, origin: str) -> None:
    assert exposed.post(origin=origin) == 403
    assert loopback.post(origin=origin) == 403


def test_a_loopback_origin_is_not_enough_on_0_0_0_0(exposed: Server) -> None:
    assert exposed.post(origin=f"http://127.0.0.1:{exposed.port}") == 403


def test_clean_twins_no_origin_and_allowed_origins_are_answered(exposed: Server, loopback: Server) -> None:
    assert exposed.post() == 200  # a non-browser client sends no Origin
    assert exposed.post(origin=ALLOWED_ORIGIN) == 200
    assert exposed.post(origin=ALLOWED_ORIGIN + ":443") == 200  # the same origin, default port written out
    assert loopback.post() == 200
    assert loopback.post(origin="http://localhost:6274") == 200  # a page on this machine (the Inspector)


def test_the_wrong_token_is_still_401_with_an_allowed_origin(exposed: Server) -> None:
    assert exposed.post(origin=ALLOWED_ORIGIN, token=secrets.token_urlsafe(32)) == 401


# -- Host, parsed exactly -------------------------------------------------------------------


@pytest.mark.parametrize("host", ["localhost:80@evil.example", "localhost:80/evil", "localhost:x"])
def test_a_host_that_is_not_host_port_is_refused(exposed: Server, loopback: Server, host: str) -> None:
    assert exposed.post(host=host) == 421
    assert loopback.post(host=host) == 421


def test_a_foreign_host_is_refused_on_loopback(loopback: Server) -> None:
    assert loopback.post(host="evil.example") == 421
    assert loopback.post(host="localhost.evil.example:80") == 421


def test_clean_twins_exact_hosts_are_answered(exposed: Server, loopback: Server) -> None:
    assert loopback.post(host=f"localhost:{loopback.port}") == 200
    assert loopback.post(host="[::1]") == 200
    assert exposed.post(host=f"mapsmith.internal.example:{exposed.port}") == 200


# -- the allow-list itself ------------------------------------------------------------------


def test_a_malformed_allowed_origins_setting_refuses_the_start(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    env.update(
        {
            "MAPSMITH_WORKSPACE": str(workspace),
            "MAPSMITH_HTTP_TOKEN": secrets.token_urlsafe(32),
            "MAPSMITH_HTTP_ALLOWED_ORIGINS": "https://app.example.com/path",
        }
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mapsmith", "serve", "--http", "--host", "127.0.0.1", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "HTTP_ORIGIN_SETTING_INVALID" in proc.stderr


_TAKE = """
import os, sys
from mapsmith.server.http import take_token
from mapsmith.errors import MapSmithError
try:
    token = take_token()
    outcome = "ok" if token == sys.argv[1].encode() else "wrong"
except MapSmithError as exc:
    outcome = exc.code
block = open("/proc/self/environ", "rb").read()
print(outcome, sys.argv[1].encode() in block, b"MAPSMITH_HTTP_TOKEN=" in block, "MAPSMITH_HTTP_TOKEN" in os.environ,
      b"KEEP_ME=1" in block)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/environ is Linux's")
# ids: the parameter ids end up in PYTEST_CURRENT_TEST, which must not carry the token into the child
@pytest.mark.parametrize(
    ("token", "outcome"),
    [(secrets.token_urlsafe(32), "ok"), ("short-but-secret", "HTTP_TOKEN_WEAK")],
    ids=["strong", "weak"],
)
def test_take_token_returns_the_token_and_zeroes_it_in_the_environment_block(token: str, outcome: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAPSMITH_", "PYTEST_"))}
    env.update({"MAPSMITH_HTTP_TOKEN": token, "KEEP_ME": "1"})
    proc = subprocess.run([sys.executable, "-c", _TAKE, token], env=env, capture_output=True, text=True, timeout=60)
    # the token is returned (or refused as weak), and neither its value nor its name is left anywhere;
    # the clean twin KEEP_ME=1 beside it is untouched
    assert proc.stdout.split() == [outcome, "False", "False", "False", "True"], proc.stderr
