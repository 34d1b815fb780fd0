"""``mapsmith serve --http`` with the sandbox: two clients at once get two workers, and the token never
reaches a worker.

One client's call hangs its worker (a VRT reading a FIFO, which blocks in C); the other client's calls
are answered by the second worker of the pool meanwhile, and the hung call ends with CALL_TIMEOUT.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from shapely.geometry import Point

from layers import write_layer
from mcp_client import stop_server
from security.sandbox_helpers import require_sandbox, vrt_in_csv, worker_pids

pytestmark = pytest.mark.mcp


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_two_http_clients_are_served_by_two_workers_while_one_is_stuck(workspace: Path, tmp_path: Path) -> None:
    require_sandbox(workspace)
    write_layer(workspace / "pts.gpkg", [Point(500000, 4000000), Point(500100, 4000000)], "EPSG:32633", name=["a", "b"])
    os.mkfifo(workspace / "pipe.csv")
    vrt_in_csv(workspace / "hang.csv", str(workspace / "pipe.csv"))
    token = secrets.token_urlsafe(32)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    env.update(
        MAPSMITH_WORKSPACE=str(workspace),
        MAPSMITH_SANDBOX="on",
        MAPSMITH_PARSER_WALLS="off",
        MAPSMITH_CALL_TIMEOUT_S="8",
        MAPSMITH_HTTP_TOKEN=token,
    )
    log = tmp_path / "server.stderr"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mapsmith", "serve", "--http", "--port", str(port)],
            env=env,
            cwd=workspace,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                httpx2.get(url, timeout=1)
                break
            except httpx2.TransportError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)

        async def client(calls: list[tuple[str, dict[str, Any]]], out: list[Any], stamps: list[float]) -> None:
            from mcp.client.session import ClientSession
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with (
                http,
                streamable_http_client(url, http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                for tool, args in calls:
                    out.append(await session.call_tool(tool, args))
                    stamps.append(time.monotonic())

        hung: list[Any] = []
        quick: list[Any] = []
        hung_at: list[float] = []
        quick_at: list[float] = []

        async def both() -> float:
            async with anyio.create_task_group() as tg:
                t0 = time.monotonic()
                tg.start_soon(client, [("describe_dataset", {"input_path": "hang.csv"})], hung, hung_at)
                await anyio.sleep(1.0)  # the first client's call is in its worker
                tg.start_soon(
                    client,
                    [("describe_dataset", {"input_path": "pts.gpkg"}), ("server_info", {})],
                    quick,
                    quick_at,
                )
            return t0

        t0 = anyio.run(both)
        # The second client was answered while the first call was still stuck (it ends at 8 s + 2 s grace).
        assert not quick[0].is_error and quick[0].structured_content["answer"]["described"][0]["feature_count"] == 2
        assert quick_at[0] < hung_at[0]
        sandbox = quick[1].structured_content["sandbox"]
        assert sandbox["enabled"] is True and sandbox["workers"] == 2
        assert hung[0].is_error and '"CALL_TIMEOUT"' in hung[0].content[0].text
        assert hung_at[0] - t0 >= 8.0
        pids = worker_pids(workspace)
        assert pids  # the worker that was not killed is still there
        for pid in pids:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert token.encode() not in environ and b"MAPSMITH_HTTP_TOKEN" not in environ
    finally:
        stop_server(proc)
