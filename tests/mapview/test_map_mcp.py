"""preview_map, export_map and the MCP Apps ui:// resource over the real MCP stdio client."""

from __future__ import annotations

from pathlib import Path

import pytest

from mapview.map_fixtures import APP_ENV
from mcp_client import call, mcp_session

pytestmark = [pytest.mark.mcp, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_ui_resource_and_tool_meta(workspace: Path) -> None:
    from mapsmith.examples.worked_example import write_inputs

    write_inputs(workspace)
    async with mcp_session(workspace, **APP_ENV) as (session, _):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert tools["preview_map"].meta == {"ui": {"resourceUri": "ui://mapsmith/map-panel.html"}}
        listed = (await session.list_resources()).resources
        assert [(str(r.uri), r.mime_type) for r in listed] == [
            ("ui://mapsmith/map-panel.html", "text/html;profile=mcp-app")
        ]
        assert listed[0].meta["ui"]["csp"]["resourceDomains"] == ["https://tile.openstreetmap.org"]
        read = await session.read_resource("ui://mapsmith/map-panel.html")
        content = read.contents[0]
        assert content.mime_type == "text/html;profile=mcp-app"
        assert content.text.startswith("<!DOCTYPE html>") and "ui/initialize" in content.text

        reply = await call(session, "preview_map", {"paths": ["parcels.geojson"], "background": "none"})
        assert not reply.is_error
        layer = reply.data["layers"][0]
        assert (layer["vector"]["feature_count_total"], layer["provenance"]["state"]) == (6, "not_verifiable")
        assert reply.text == reply.data

        refused = await call(session, "preview_map", {"paths": ["../etc/passwd"]})
        assert refused.is_error and refused.data["hint"]

        exported = await call(session, "export_map", {"paths": ["river.geojson"], "output_path": "river.html"})
        assert not exported.is_error and exported.data["manifest_path"] == "river.html.provenance.json"
    assert (workspace / "river.html").exists()
