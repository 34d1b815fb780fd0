"""``mapsmith serve --http`` as a client meets it: the real server in a subprocess on 127.0.0.1, the SDK's
real streamable HTTP client, and plain HTTP requests that try to get past the bearer token.

One server (module scope) answers every request test; the refusals at start run their own short-lived
processes. Expected numbers are worked out here: a 100 m x 100 m square in EPSG:32610 on the zone's
central meridian has a ground (geodesic) area of 10 000 / 0.9996**2 = 10008.0048 m2, since UTM's scale
factor there is 0.9996 (pyproj's Geod over the square's corners gives 10008.00480 as well).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest

from conftest import published_schema_errors
from mcp_client import stop_server

pytestmark = pytest.mark.mcp

GEODESIC_AREA_M2 = 10000 / 0.9996**2  # 10008.00480256...
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(workspace: Path | None, token: str | None) -> dict[str, str]:
    """The parent's environment without any MAPSMITH_* setting of the shell running pytest."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    if workspace is not None:
        env["MAPSMITH_WORKSPACE"] = str(workspace)
    if token is not None:
        env["MAPSMITH_HTTP_TOKEN"] = token
    return env


@dataclass
class Served:
    url: str
    token: str
    workspace: Path
    log: Path


def start(workspace: Path, token: str | None, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mapsmith", "serve", "--http", "--host", "127.0.0.1", "--port", str(port)],
            env=child_env(workspace, token),
            cwd=workspace,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}: {log.read_text()}")
        try:
            httpx2.get(url, timeout=1)
            return proc, url
        except httpx2.TransportError:
            time.sleep(0.1)
    stop(proc)
    raise AssertionError(f"the server did not answer within 20 s: {log.read_text()}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    stop_server(proc)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("http")
    workspace = root / "ws"
    workspace.mkdir()
    token = secrets.token_urlsafe(32)
    log = root / "server.stderr"
    proc, url = start(workspace, token, log)
    try:
        yield Served(url=url, token=token, workspace=workspace, log=log)
    finally:
        stop(proc)


def test_a_real_mcp_client_with_the_token_lists_tools_and_runs_an_operation(served: Served) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from shapely.geometry import box

    from layers import read, write_layer

    write_layer(served.workspace / "square.gpkg", [box(500000, 4000000, 500100, 4000100)], "EPSG:32610", name=["a"])

    async def conversation() -> tuple[set[str], dict[str, object], object]:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {served.token}"})
        async with (
            client,
            streamable_http_client(served.url, http_client=client) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as session,
        ):
            await session.initialize()
            tools = {tool.name for tool in (await session.list_tools()).tools}
            info = await session.call_tool("server_info", {})
            area = await session.call_tool(
                "measure_area", {"input_path": "square.gpkg", "output_path": "square_area.gpkg"}
            )
            assert not info.is_error and info.structured_content is not None
            return tools, info.structured_content, area

    tools, info, area = anyio.run(conversation)
    assert {"server_info", "run_operation", "measure_area", "list_operations"} <= tools
    assert info["workspace"] == str(served.workspace.resolve())
    assert served.token not in json.dumps(info)
    assert not area.is_error, area.content[0].text  # type: ignore[attr-defined]

    output = read(served.workspace / "square_area.gpkg")
    assert list(output["name"]) == ["a"]
    assert output["area_m2"].iloc[0] == pytest.approx(GEODESIC_AREA_M2, abs=1e-3)
    manifest_file = served.workspace / "square_area.gpkg.provenance.json"
    manifest = json.loads(manifest_file.read_text("utf-8"))
    assert published_schema_errors(manifest) == []
    assert manifest["operation"] == "measure_area"
    assert served.token not in manifest_file.read_text("utf-8")


def _one_char_off(token: str) -> str:
    last = "A" if token[-1] != "A" else "B"
    return token[:-1] + last


@pytest.mark.parametrize(
    "authorization",
    [None, "wrong", "empty", "basic", "no-scheme", "token-twice"],
)
def test_requests_without_the_valid_bearer_token_get_401(served: Served, authorization: str | None) -> None:
    headers = dict(MCP_HEADERS)
    sent = {
        None: None,
        "wrong": f"Bearer {_one_char_off(served.token)}",  # same length, last character differs
        "empty": "Bearer",  # the scheme with no token (h11 will not send a trailing space; see the raw test)
        "basic": f"Basic {served.token}",
        "no-scheme": served.token,
        "token-twice": f"Bearer {served.token}{served.token}",
    }[authorization]
    if sent is not None:
        headers["authorization"] = sent
    response = httpx2.post(served.url, headers=headers, json=INITIALIZE, timeout=10)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "mcp-session-id" not in response.headers
    assert served.token not in response.text
    assert served.token[:8] not in response.text
    assert _one_char_off(served.token) not in response.text


def test_bearer_and_a_space_with_no_token_gets_401_on_the_wire(served: Served) -> None:
    port = int(served.url.split(":")[2].split("/")[0])
    body = json.dumps(INITIALIZE).encode()
    request = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer \r\n"
        f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 401 Unauthorized"
    assert b"\r\nwww-authenticate: bearer" in rest.lower()


def test_every_path_and_method_needs_the_token(served: Served) -> None:
    base = served.url.removesuffix("/mcp")
    for method, url in (("GET", served.url), ("DELETE", served.url), ("GET", base + "/"), ("POST", base + "/x")):
        response = httpx2.request(method, url, timeout=10)
        assert (method, url, response.status_code) == (method, url, 401)


def test_the_valid_token_opens_a_session_and_the_scheme_is_case_insensitive(served: Served) -> None:
    for scheme in ("Bearer", "bearer"):
        headers = {**MCP_HEADERS, "authorization": f"{scheme} {served.token}"}
        response = httpx2.post(served.url, headers=headers, json=INITIALIZE, timeout=10)
        assert response.status_code == 200
        assert response.headers["mcp-session-id"]


@pytest.mark.parametrize(
    ("header", "value", "status"), [("host", "evil.example:80", 421), ("origin", "http://evil.example", 403)]
)
def test_loopback_refuses_foreign_host_and_origin_even_with_the_token(
    served: Served, header: str, value: str, status: int
) -> None:
    """DNS rebinding: a page whose name was pointed at 127.0.0.1 sends its own Host and Origin."""
    headers = {**MCP_HEADERS, "authorization": f"Bearer {served.token}", header: value}
    response = httpx2.post(served.url, headers=headers, json=INITIALIZE, timeout=10)
    assert response.status_code == status


def test_the_server_log_names_refusals_but_never_the_token(served: Served) -> None:
    response = httpx2.post(served.url, headers={"authorization": f"Bearer {_one_char_off(served.token)}"}, timeout=10)
    assert response.status_code == 401
    time.sleep(0.2)  # the refusal line is flushed before the response, but give the pipe a moment
    log = served.log.read_text()
    assert "refused an HTTP request from 127.0.0.1: wrong bearer token" in log
    assert served.token not in log and _one_char_off(served.token) not in log
    assert served.token[:12] not in log


def run_refused(
    args: list[str], workspace: Path | None, token: str | None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mapsmith", "serve", "--http", *args],
        env=child_env(workspace, token),
        cwd=cwd or workspace,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_non_loopback_address_without_a_token_is_refused_at_start(workspace: Path) -> None:
    done = run_refused(["--host", "0.0.0.0", "--port", str(free_port())], workspace, None)
    assert done.returncode == 2
    assert "HTTP_TOKEN_REQUIRED" in done.stderr
    assert "MAPSMITH_HTTP_TOKEN" in done.stderr
    assert 'python -c "import secrets; print(secrets.token_urlsafe(32))"' in done.stderr
    assert "serving MCP" not in done.stderr


def test_a_non_loopback_address_without_a_workspace_is_refused_at_start(tmp_path: Path) -> None:
    done = run_refused(["--host", "0.0.0.0", "--port", str(free_port())], None, secrets.token_urlsafe(32), tmp_path)
    assert done.returncode == 2
    assert "HTTP_WORKSPACE_REQUIRED" in done.stderr and "MAPSMITH_WORKSPACE" in done.stderr
    assert "serving MCP" not in done.stderr


def test_a_short_token_is_refused_at_start_without_being_echoed(workspace: Path) -> None:
    done = run_refused(["--port", str(free_port())], workspace, "s3cr3t-s3cr3t")
    assert done.returncode == 2
    assert "HTTP_TOKEN_WEAK" in done.stderr and "13 characters long" in done.stderr
    assert "secrets.token_urlsafe(32)" in done.stderr
    assert "s3cr3t" not in done.stderr
    assert "serving MCP" not in done.stderr


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("x" * 31, "31 characters long"),  # one short of the minimum
        ("", "0 characters long"),  # set but empty: refused, not taken as "no token"
        ("ab" * 24, "only 2 different characters"),  # long enough, guessable
        ("tok en with spaces and then enough characters", "characters a bearer token cannot carry"),
        ("tökenwithnonasciicharactersinsideofit", "characters a bearer token cannot carry"),
    ],
)
def test_weak_tokens_are_refused_and_never_echoed(token: str, says: str) -> None:
    from mapsmith.server.http import HTTPTransportError, read_token

    with pytest.raises(HTTPTransportError) as caught:
        read_token({"MAPSMITH_HTTP_TOKEN": token})
    assert caught.value.code == "HTTP_TOKEN_WEAK"
    assert says in str(caught.value)
    assert not token or token not in str(caught.value) + json.dumps(caught.value.evidence)


def test_a_generated_token_is_accepted_and_no_variable_means_no_token() -> None:
    from mapsmith.server.http import read_token

    token = secrets.token_urlsafe(32)
    assert read_token({"MAPSMITH_HTTP_TOKEN": token}) == token.encode()
    assert read_token({"MAPSMITH_HTTP_TOKEN": secrets.token_hex(16)}) is not None  # 32 hex characters
    assert read_token({}) is None


def test_loopback_without_a_token_serves_with_a_warning(workspace: Path, tmp_path: Path) -> None:
    proc, url = start(workspace, None, tmp_path / "server.stderr")
    try:
        response = httpx2.post(url, headers=MCP_HEADERS, json=INITIALIZE, timeout=10)
        assert response.status_code == 200
    finally:
        stop(proc)
    log = (tmp_path / "server.stderr").read_text()
    assert "warning: MAPSMITH_HTTP_TOKEN is not set" in log


# -- the pieces, in process ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.10.20.30", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
    ],
)
def test_which_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    from mapsmith.server.http import resolve_binding

    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    assert resolve_binding(host, 0).loopback is loopback


def test_the_gate_compares_whole_tokens() -> None:
    from mapsmith.server.http import BearerTokenGate

    token = secrets.token_urlsafe(32).encode()
    gate = BearerTokenGate(app=None, token=token)
    assert gate.authorized([(b"authorization", b"Bearer " + token)]) == (True, "")
    assert gate.authorized([(b"Authorization", b"bearer  " + token + b" ")]) == (True, "")
    assert gate.authorized([(b"authorization", b"Bearer " + token[:-1])])[0] is False
    assert gate.authorized([(b"authorization", b"Bearer " + token + b"x")])[0] is False
    assert gate.authorized([(b"authorization", b"Bearer " + token)] * 2) == (
        False,
        "more than one Authorization header",
    )
    assert gate.authorized([]) == (False, "no Authorization header")
