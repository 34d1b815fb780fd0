"""The container image (the top-level Dockerfile) smoke-tested as a user runs it: over stdio with
``docker run -i``, and over HTTP with ``serve --http --host 0.0.0.0`` and a bearer token, through the
official Python MCP client. Runs only where MAPSMITH_CONTAINER_IMAGE names a built image (the
``container`` nox session builds it and sets it); skips otherwise.

Expected numbers are worked out by hand: a 100 m x 100 m square in EPSG:32610 on the zone's central
meridian has a ground (geodesic) area of 10 000 / 0.9996**2 = 10008.0048 m2 (UTM's scale factor there).
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

IMAGE = os.environ.get("MAPSMITH_CONTAINER_IMAGE", "")
ENGINE = os.environ.get("MAPSMITH_CONTAINER_ENGINE", "docker")
GEODESIC_AREA_M2 = 10000 / 0.9996**2
CORE_TOOLS = {"server_info", "list_operations", "run_operation", "validate_plan", "execute_plan", "measure_area"}

pytestmark = [
    pytest.mark.mcp,
    pytest.mark.skipif(not IMAGE, reason="no image to test: `nox -s container` builds one and sets it"),
]


def workspace_with_square(tmp_path: Path) -> Path:
    from shapely.geometry import box

    from layers import write_layer

    workspace = tmp_path / "ws"
    workspace.mkdir()
    write_layer(workspace / "square.gpkg", [box(500000, 4000000, 500100, 4000100)], "EPSG:32610", name=["a"])
    # The image runs as an unprivileged user whose uid the host does not know: let it write here.
    workspace.chmod(0o777)
    return workspace


def docker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENGINE, *args], capture_output=True, text=True, timeout=timeout, check=False)


def test_the_image_runs_as_an_unprivileged_user() -> None:
    done = docker("run", "--rm", "--entrypoint", "id", IMAGE, "-u")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() != "0"


async def _stdio(workspace: Path) -> tuple[set[str], dict[str, Any], dict[str, Any]]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=ENGINE,
        args=["run", "-i", "--rm", "-v", f"{workspace}:/workspace", IMAGE],
        env={"PATH": os.environ.get("PATH", "")},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        info = await session.call_tool("server_info", {})
        area = await session.call_tool("measure_area", {"input_path": "square.gpkg", "output_path": "area.gpkg"})
        assert not info.is_error and not area.is_error, area.content
        return tools, info.structured_content or {}, area.structured_content or {}


def test_over_stdio_every_open_stack_is_there_and_an_operation_runs(tmp_path: Path) -> None:
    workspace = workspace_with_square(tmp_path)
    tools, info, area = anyio.run(_stdio, workspace)
    assert CORE_TOOLS <= tools
    assert info["workspace"] == "/workspace"
    available = {stack["name"]: stack["available"] for stack in info["stacks"]}
    assert available == {"esri": False, "opensource": True, "qgis": True, "sedona": True}, info["stacks"]
    assert area["answer"]["total_area_m2"] == pytest.approx(GEODESIC_AREA_M2, abs=1e-3)
    assert (workspace / "area.gpkg").is_file()
    assert (workspace / "area.gpkg.provenance.json").is_file()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_over_http_with_a_token_the_tools_are_listed(tmp_path: Path) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    workspace = workspace_with_square(tmp_path)
    token = secrets.token_urlsafe(32)
    port = free_port()
    started = docker(
        *("run", "-d", "--rm", "-p", f"127.0.0.1:{port}:8765", "-v", f"{workspace}:/workspace"),
        *("-e", f"MAPSMITH_HTTP_TOKEN={token}", IMAGE, "serve", "--http", "--host", "0.0.0.0"),
    )
    assert started.returncode == 0, started.stderr
    container = started.stdout.strip()

    async def conversation() -> set[str]:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with (
            client,
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return {tool.name for tool in (await session.list_tools()).tools}

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                tools = anyio.run(conversation)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise AssertionError(docker("logs", container).stderr) from None
                time.sleep(0.5)
        assert CORE_TOOLS <= tools
    finally:
        docker("rm", "-f", container)


def test_over_http_without_a_token_the_image_refuses_to_listen_on_every_address() -> None:
    # The twin of the test above: the same command without MAPSMITH_HTTP_TOKEN.
    done = docker("run", "--rm", IMAGE, "serve", "--http", "--host", "0.0.0.0")
    assert done.returncode == 2, done.stderr
    assert "cannot start" in done.stderr
