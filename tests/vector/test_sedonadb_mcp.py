"""The SedonaDB engine through a real MCP stdio conversation: the router picks it, the answer is the drawing's.

The drawing and fixtures are tests/vector/test_engine_parity.py's: Z1 holds P1 and P2 (on the shared
edge), Z2 holds P2, P3 and P5, Z3 holds none, and P4 is in no zone. The server is started with
MAPSMITH_SEDONADB_MIN_FEATURES=0 so five points are enough; the manifest it writes is validated at
teardown by tests/conftest.py like every other.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from mcp_client import call, mcp_session
from vector.test_engine_parity import write_fixtures

pytestmark = [
    pytest.mark.mcp,
    pytest.mark.anyio,
    pytest.mark.skipif(
        bool(importlib.import_module("mapsmith_opensource.sedonadb_ops").missing_modules()),
        reason="SedonaDB not installed",
    ),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_count_in_polygons_runs_on_sedonadb_over_mcp(workspace: Path) -> None:
    write_fixtures(workspace)
    arguments = {"input_path": "zones.parquet", "points_path": "points.parquet", "output_path": "counted.parquet"}
    async with mcp_session(workspace, MAPSMITH_SEDONADB_MIN_FEATURES="0") as (session, _):
        reply = await call(session, "run_operation", {"operation": "count_in_polygons", "arguments": arguments})
    assert not reply.is_error, reply.data
    assert reply.data["engine"]["name"] == "sedonadb"
    assert [row["point_count"] for row in reply.data["answer"]["rows"]] == [2, 3, 0]
    assert reply.data["answer"]["points_in_no_polygon"] == 1
    assert reply.data["answer"]["points_in_several_polygons"] == 1
    record = json.loads((workspace / "counted.parquet.provenance.json").read_text("utf-8"))
    assert record["x-mapsmith:engine_choice"]["engine"] == "sedonadb"
    assert any(n.startswith("engine path: direct") for n in record["notes"])
