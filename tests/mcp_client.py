"""A real MCP client session on ``python -m mapsmith`` over stdio, shared by the MCP tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def stop_server(proc: subprocess.Popen[Any]) -> None:
    """Stop a server process the way a process manager does: SIGTERM, on which the server removes its sandbox's
    identity folder and stops its workers, and SIGKILL only if it has not left within 20 s (a SIGKILL leaves the
    folder in the temporary directory)."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def server_env(workspace: Path, **extra: str) -> dict[str, str]:
    """The child's MAPSMITH_* settings. The SDK merges them over a minimal inherited environment,
    so a MAPSMITH_STACK set in the shell running pytest cannot leak into the server. QGIS's algorithms
    stay out of the catalog unless a test asks (tests/conftest.py says why)."""
    return {"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_QGIS_ALGORITHMS": "0", **extra}


@asynccontextmanager
async def mcp_session(workspace: Path, **env: str) -> AsyncIterator[tuple[Any, Any]]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mapsmith"], env=server_env(workspace, **env), cwd=str(workspace)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        yield session, init


@dataclass
class Reply:
    is_error: bool
    data: dict[str, Any]  # structured_content on success; on an error, its JSON text (no structured content)
    text: dict[str, Any]  # the same reply parsed from its text content, for clients that read only text


async def call(session: Any, tool: str, arguments: dict[str, Any], **kwargs: Any) -> Reply:
    result = await session.call_tool(tool, arguments, **kwargs)
    text = json.loads(result.content[0].text)
    if result.is_error:
        # A refusal must never carry structuredContent: the TypeScript SDK validates it against the tool's
        # success schema and throws the refusal away (mapsmith.server._error says why).
        assert result.structured_content is None, f"{tool}: an error result carried structuredContent"
        return Reply(True, text, text)
    return Reply(False, result.structured_content or {}, text)
