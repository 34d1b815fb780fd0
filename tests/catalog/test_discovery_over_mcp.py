"""Through the Python MCP SDK client: list_operations answers a request for a declared gap ``none`` naming the
task, and every candidate of an ordinary answer (the clean twin) carries its stack and maturity: the reply model
keeps the fields discovery adds, and a client reading structured content or text sees the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_client import call, mcp_session

pytestmark = pytest.mark.mcp


async def _converse(workspace: Path) -> dict[str, Any]:
    async with mcp_session(workspace) as (session, _):
        gap = await call(session, "list_operations", {"query": "geocode the customer addresses into points"})
        twin = await call(session, "list_operations", {"query": "buffer the depots by 500 metres"})
    return {"gap": gap, "twin": twin}


def test_a_declared_gap_is_none_naming_it_over_mcp(workspace: Path) -> None:
    replies = anyio.run(_converse, workspace)
    gap = replies["gap"]
    assert not gap.is_error
    assert gap.data == gap.text
    assert gap.data["status"] == "none" and gap.data["candidates"] == []
    assert gap.data["out_of_scope"]["task"] == "geocoding"
    assert gap.data["message"].startswith("none: geocoding (street addresses or place names to coordinates) is not")
    assert len(gap.data["not_a_match"]) == 3

    twin = replies["twin"]
    assert not twin.is_error and twin.data["status"] in ("ranked", "choose")
    assert "out_of_scope" not in twin.data
    first = twin.data["candidates"][0]
    assert first["operation"] == "buffer_layer"
    assert first["stack"] == "mapsmith" and first["maturity"] == "stable"
